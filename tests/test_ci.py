"""The test command and CI agree, and never pass without testing: the README's test command is the first thing
`.ci/run` runs, the GitHub workflow runs tox environments that exist, and an environment whose Python is missing
fails, naming it and saying how to get it."""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tox() -> configparser.ConfigParser:
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(ROOT / "tox.ini")
    return ini


def _tox_envs() -> set[str]:
    ini = _tox()
    listed = {e.strip() for e in ini["tox"]["envlist"].split(",")}
    return listed | {s.split(":", 1)[1] for s in ini.sections() if s.startswith("testenv:")}


def readme_test_command() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = re.findall(r"^python3 -m venv .*&& tox .*$", readme, re.M)
    assert len(commands) == 1, commands
    return commands[0]


def test_the_readme_test_command_is_what_ci_runs_first() -> None:
    command = readme_test_command()
    assert re.search(r"\btox (run|run-parallel) -e py,", command)  # the Python tox runs on: no interpreter missing
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    runs = [line.strip() for line in ci.splitlines()
            if re.search(r"\btox (run|run-parallel)\b", line) and not line.lstrip().startswith("#")]
    assert runs[0] == command, runs
    assert "set -euo pipefail" in ci


# What reading results may not need: the lint environment builds the documentation (and with it the results site)
# without them, from the checkout's folder.
TRAINING_ONLY = {"torch", "torchvision", "timm", "scikit-learn"}


def test_the_lint_environment_has_every_dependency_but_the_training_ones() -> None:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lint = _tox()["testenv:lint"]
    assert lint["skip_install"].strip() == "true" and "PYTHONPATH = {toxinidir}" in lint["setenv"]
    deps = [d.strip() for d in lint["deps"].strip().splitlines()]
    wanted = [d for d in project["dependencies"] if re.split(r"[<>=;\[ ]", d)[0] not in TRAINING_ONLY]
    assert deps[:len(wanted) + 1] == [*wanted, *project["optional-dependencies"]["site"]]


def test_no_environment_is_skipped_for_a_missing_interpreter() -> None:
    ini = _tox()
    assert ini["tox"]["skip_missing_interpreters"].strip() == "false"
    for section in ini.sections():  # every suite run leaves out only what CI runs as steps of its own
        commands = ini[section].get("commands", "")
        for pytest_call in re.findall(r"^\s*pytest .*$", commands, re.M):
            assert '-m "not slow and not gpucheck"' in pytest_call and "{posargs}" in pytest_call, section
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "tox run -e py -- -m 'slow or gpucheck'" in ci


def test_workflow_matrix_runs_existing_tox_envs_and_everything_ci_runs() -> None:
    workflow = (ROOT / ".github" / "workflows" / "tests.yml").read_text()
    matrix = re.findall(r"\{ env: (\w+), python: \"(3\.\d+)\"(?:, pytest: \"([^\"]+)\")?(?:, \w+: \w+)* \}", workflow)
    jobs = [(env, args) for env, _, args in matrix]
    assert len(jobs) == len(set(jobs)) >= 8
    assert {env for env, _ in jobs if not re.fullmatch(r"py3\d+", env)} <= _tox_envs()  # pyXY: tox's own
    for env, python, _ in matrix:  # a pyXY job sets up Python X.Y
        if re.fullmatch(r"py3\d+", env):
            assert python == f"3.{env[3:]}", env
    ci = (ROOT / ".ci" / "run").read_text()
    for envs, args in re.findall(r"^[^#\n]*\btox (?:run|run-parallel)[^\n]*? -e ([\w,]+)(?: -- (.+))?$", ci, re.M):
        either = re.fullmatch(r"-m '(.+)'", args)  # CI's one step of several markers: a workflow job each
        for env in envs.split(","):
            for one in ([f"-m {m}" for m in either[1].split(" or ")] if either else [args]):
                assert (env, one) in jobs, (env, one)
    assert ("py", "-m slow") in jobs and ("py", "-m gpucheck") in jobs
    assert '{ env: py, python: "3.11", pytest: "tests/test_site.py", browser: true }' in workflow  # installs chromium


def test_workflow_installs_the_extras_the_tests_read_back() -> None:
    extras = set(_tox()["testenv"]["extras"].split())
    assert {"test", "parity", "tensorboard", "mlflow"} <= extras  # the tracker round trips run, not skip, in CI


def test_an_environment_whose_python_is_missing_fails_naming_it(tmp_path: Path) -> None:
    """Only this interpreter's folder (and the system's) on PATH: py313 and mintorch cannot run, so tox exits 1,
    tox's line names the spec and ours says how to get it; nothing was installed."""
    pytest.importorskip("tox")
    bare = os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    missing = [v for v in ("3.10", "3.13") if not any((Path(d) / f"python{v}").exists() for d in bare.split(":"))]
    if len(missing) < 2:
        pytest.skip(f"python{' and python'.join({'3.10', '3.13'} - set(missing))} is beside this interpreter")
    done = subprocess.run([sys.executable, "-m", "tox", "run", "-e", "py313,mintorch", "--root", str(ROOT),
                           "--workdir", str(tmp_path / "tox")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PATH": bare})
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "could not find python interpreter matching any of the specs py313" in out
    assert "py313: needs python3.13, which is not on PATH; install it (pyenv install 3.13" in out
    assert "mintorch: needs python3.10, which is not on PATH" in out and "run `tox -e py`" in out
    assert "congratulations" not in out
