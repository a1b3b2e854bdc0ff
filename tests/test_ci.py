"""The CI definitions agree: the GitHub workflow runs tox environments that exist, and every environment
`.ci/run` runs is in the workflow's matrix too."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _tox_envs() -> set[str]:
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(ROOT / "tox.ini")
    listed = {e.strip() for e in ini["tox"]["envlist"].split(",")}
    return listed | {s.split(":", 1)[1] for s in ini.sections() if s.startswith("testenv:")}


def test_workflow_matrix_runs_existing_tox_envs_and_everything_ci_runs() -> None:
    workflow = (ROOT / ".github" / "workflows" / "tests.yml").read_text()
    matrix = re.findall(r"\{ env: (\w+), python: \"(3\.\d+)\" \}", workflow)
    envs = [env for env, _ in matrix]
    assert len(envs) == len(set(envs)) >= 6
    assert set(envs) <= _tox_envs()
    for env, python in matrix:  # a pyXY job sets up Python X.Y
        if re.fullmatch(r"py3\d+", env):
            assert python == f"3.{env[3:]}", env
    ci = (ROOT / ".ci" / "run").read_text()
    ci_envs = re.search(r"tox .*-e ([\w,]+)\s*$", ci, re.M)
    assert ci_envs is not None
    assert set(ci_envs.group(1).split(",")) <= set(envs)
    readme = (ROOT / "README.md").read_text()
    assert f"-e {ci_envs.group(1)}" in readme  # the README's test command is what CI runs


def test_workflow_installs_the_extras_the_tests_read_back() -> None:
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(ROOT / "tox.ini")
    extras = set(ini["testenv"]["extras"].split())
    assert {"test", "parity", "tensorboard", "mlflow"} <= extras  # the tracker round trips run, not skip, in CI
