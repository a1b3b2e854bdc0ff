"""The Python API (bench.run / sweep / load / compare): the CLI's results, through the same code."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import bench
from bench.cli import main
from bench.runs.results import ResultsStore

# About the harness, not learning: a 2-step run ends at chance (bench.runs.chance), so chance_band = 0.
FAST = {"steps": 2, "batch_size": 64, "eval_every": 2, "measure": [], "chance_band": 0.0}


def test_public_names_are_the_functions_even_after_every_submodule_is_imported() -> None:
    import importlib
    import pkgutil

    for mod in pkgutil.iter_modules(bench.__path__):
        if not mod.name.startswith("_"):  # __main__ would run the CLI
            importlib.import_module(f"bench.{mod.name}")
    assert bench.__all__ == ["Results", "Run", "compare", "cost", "load", "run", "scaling_fit", "sweep", "track"]
    for name in ("compare", "cost", "load", "run", "scaling_fit", "sweep", "track"):
        assert callable(getattr(bench, name)), name


def test_run_records_what_the_cli_records(tmp_path: Path) -> None:
    run = bench.run("resnet", depth=8, model_args={"init": "xavier"}, results_dir=tmp_path, **FAST)
    assert run.row["status"] == "ok" and run.row["init"] == "xavier" and run.path.is_file()
    on_disk = json.loads(run.path.read_text())
    assert on_disk["run_id"] == run.run_id and on_disk["config"]["model_args"] == [["init", "xavier"]]
    board = ResultsStore(tmp_path).load_leaderboard()
    assert board["run_id"].tolist() == [run.run_id]
    assert board["final_val_acc"][0] == pytest.approx(run.row["final_val_acc"])
    evals = run.curves[run.curves["split"] == "eval"]
    assert set(evals["step"]) == {2} and "val_acc" in set(evals["metric"])
    # The CLI with the same configuration lands on the same run id (same config hash), replacing the row.
    cli = ["run", "--variant", "resnet", "--depth", "8", "--model-arg", "init=xavier", "--steps", "2",
           "--batch-size", "64", "--eval-every", "2", "--measure", "--quiet", "--results-dir", str(tmp_path)]
    assert main(cli) == 0
    assert ResultsStore(tmp_path).load_leaderboard()["run_id"].tolist() == [run.run_id]


def test_bad_input_raises_and_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown variant 'resnett'"):
        bench.run("resnett", results_dir=tmp_path, **FAST)
    with pytest.raises(ValueError, match=r"--steps must be an integer in \[1, 1000000000\], got 0"):
        bench.run("resnet", results_dir=tmp_path, **{**FAST, "steps": 0})
    assert not any(tmp_path.iterdir())


def test_load_and_compare(tmp_path: Path) -> None:
    for variant in ("plain", "resnet"):
        for seed in (0, 1):
            bench.run(variant, depth=8, seed=seed, results_dir=tmp_path, **FAST)
    res = bench.load(tmp_path)
    assert len(res.runs) == 4 and len(res.records) == 4 and res.study is None
    assert {"split", "step", "metric", "value", "run_id"} <= set(res.curves.columns)
    board = res.leaderboard(["final_val_acc"])
    assert sorted(board["variant"]) == ["plain", "resnet"] and set(board["final_val_acc_n"]) == {2}
    table = bench.compare(res, baseline="plain", metrics=["final_val_acc"])
    resnet = table[table["variant"] == "resnet"].iloc[0]
    plain = table[table["variant"] == "plain"].iloc[0]
    assert resnet["diff"] == pytest.approx(resnet["mean"] - plain["mean"]) and pd.isna(plain["diff"])
    with pytest.raises(ValueError, match="no runs of study 'nope'"):
        bench.load(tmp_path, study="nope")


def test_sweep_runs_a_study_file(tmp_path: Path) -> None:
    study = tmp_path / "tiny.toml"
    study.write_text('name = "tiny"\nvary = ["combinator"]\n[base]\ndepth = 8\nsteps = 2\nbatch_size = 64\n'
                     'eval_every = 2\nmeasure = []\nchance_band = 0.0\n[grid]\nvariant = ["plain", "resnet"]\n'
                     'seed = [0]\n')
    res = bench.sweep(study, results_dir=tmp_path / "r", progress=False)
    assert res.study == "tiny" and sorted(res.runs["variant"]) == ["plain", "resnet"]
    assert set(res.runs["status"]) == {"ok"} and (tmp_path / "r" / "studies" / "tiny.toml").is_file()
    with pytest.raises(ValueError, match=r"study file .*missing\.toml does not exist"):
        bench.sweep(tmp_path / "missing.toml", results_dir=tmp_path / "r")
    with pytest.raises(ValueError, match="no shipped study 'nope'; shipped studies: cost, crosslayer, degradation"):
        bench.sweep("nope", results_dir=tmp_path / "r")


@pytest.mark.slow  # a sweep, its report and plots, as the README runs them: minutes
def test_the_readme_notebook_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    section = readme.split("## From Python (a notebook)", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the section has one python example"
    monkeypatch.chdir(tmp_path)  # it writes to ./results
    namespace: dict[str, object] = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    res = namespace["res"]
    assert isinstance(res, bench.Results) and res.study == "frontier"
    assert sorted(res.runs["variant"]) == ["postln", "postln", "preln", "preln"]
    # A smoke run is too short to learn: it ends at or above the text's unigram loss, and its row says so.
    assert set(res.runs["status"]) <= {"ok", "failed_to_learn"} and {r["config"]["preset"] for r in res.records} == {
        "smoke"}
    run = namespace["run"]
    assert isinstance(run, bench.Run) and run.path.is_file() and run.row["variant"] == "preln"


def test_a_run_id_does_not_depend_on_the_order_of_the_model_arguments() -> None:
    """The same configuration is one run however its model arguments were ordered (a dict, a command line)."""
    a = bench.api.config("preln", task="tinytext", model_args={"d_model": 64, "n_heads": 4})
    b = bench.api.config("preln", task="tinytext", model_args={"n_heads": 4, "d_model": 64})
    c = bench.api.config("preln", task="tinytext", model_args=[["n_heads", 4], ["d_model", 64]])
    assert a == b == c and a.run_id == b.run_id == c.run_id == "preln-tinytext-b7221ea1-s0"  # the sorted one's id
    with pytest.raises(ValueError, match=r"model argument\(s\) \['d_model'\] given more than once"):
        bench.api.config("preln", model_args=[("d_model", 64), ("d_model", 32)])


def test_the_api_applies_a_recipe_and_refuses_an_unknown_one() -> None:
    """As --recipe does: the recipe's values under the fields given; a misspelt recipe is bad input."""
    cfg = bench.api.config("resnet20", recipe="he2015_cifar", epochs=1)
    assert (cfg.schedule, cfg.milestones, cfg.steps, cfg.epochs) == ("step", (0.5, 0.75), None, 1)
    assert bench.api.config("resnet20", recipe="he2015_cifar").steps == 64000
    with pytest.raises(ValueError, match="unknown recipe 'no_such_recipe'; choose one of: he2015_cifar"):
        bench.api.config("resnet20", recipe="no_such_recipe")
