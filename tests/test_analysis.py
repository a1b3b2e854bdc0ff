"""Checkpoints, the lesion / gradcorr / landscape commands and a study's analysis step, end to end."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
from _nets import toy, write

from bench.analysis import lesion
from bench.analysis.claims import parse_claim
from bench.analysis.options import check_options
from bench.cli import main
from bench.runs import checkpoints
from bench.runs.config import RunConfig
from bench.runs.results import ResultsStore
from bench.sweeps.study import load_study

FAST = ["--steps", "3", "--batch-size", "16", "--eval-every", "3", "--measure", "--quiet"]

# A plugin variant built from the block API (lesion works on it: toy_half) and one that is a bare stack of layers
# (no unit).
PLUGIN = toy() + '''

@variants.register("toy_stack", family="toy", paper="a test")
def stack(*, num_classes: int = 10, in_chans: int = 3) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(in_chans * 64, 32), nn.ReLU(), nn.Linear(32, num_classes))
'''

pytestmark = pytest.mark.usefixtures("clean_plugins")


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def trained(res: Path, capsys: pytest.CaptureFixture[str], variant: str = "resnet", *extra: str) -> str:
    code, _, err = cli(["run", "--variant", variant, *FAST, "--results-dir", str(res), *extra], capsys)
    assert code == 0, err
    board = ResultsStore(res).load_leaderboard()
    return str(board.loc[board["variant"] == variant, "run_id"].iloc[-1])


# -- checkpoints -----------------------------------------------------------------------------------------------


def test_save_checkpoint_is_not_part_of_the_run_id() -> None:
    cfg = RunConfig(variant="resnet", depth=8)
    assert RunConfig(variant="resnet", depth=8, save_checkpoint=True).run_id == cfg.run_id


def test_checkpoint_rebuilds_the_trained_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res = tmp_path / "res"
    run_id = trained(res, capsys, "resnet", "--depth", "8", "--save-checkpoint")
    run = ResultsStore(res).load_run(run_id)
    assert run["checkpoint"] == f"checkpoints/{run_id}.pt" and "_checkpoint" not in run
    payload = torch.load(res / run["checkpoint"], weights_only=True)
    assert payload["format"] == checkpoints.FORMAT and payload["run_id"] == run_id
    assert payload["model_kwargs"] == run["model_kwargs"]
    t = checkpoints.load(res, run_id[:12])  # a unique prefix is enough
    assert not t.model.training and t.config.run_id == run_id
    for name, value in t.model.state_dict().items():
        assert torch.equal(value, payload["state_dict"][name])
    # The rebuilt model's validation accuracy is the one the run recorded at its last evaluation.
    error, _ = lesion.evaluate(t.model, t.task, list(t.task.val_batches(16)))
    assert 1 - error == pytest.approx(run["row"]["final_val_acc"], abs=1e-9)


def test_checkpoint_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res = tmp_path / "res"
    kept = trained(res, capsys, "resnet", "--depth", "8", "--save-checkpoint")
    bare = trained(res, capsys, "plain", "--depth", "8")
    assert not (res / "checkpoints" / f"{bare}.pt").exists()
    cases = {
        "nope": "error: no run 'nope' in",
        bare: f"error: run {bare} has no checkpoint",
    }
    for run_id, message in cases.items():
        for command in ("lesion", "landscape"):
            code, _, err = cli([command, run_id, "--results-dir", str(res)], capsys)
            assert code == 2 and err.startswith(message) and err.count("\n") == 1, (command, err)
    shutil.copy(res / "checkpoints" / f"{kept}.pt", res / "checkpoints" / f"{bare}.pt")
    code, _, err = cli(["lesion", bare, "--results-dir", str(res)], capsys)
    assert code == 2 and f"belongs to another configuration: it was written by run {kept}" in err
    (res / "checkpoints" / f"{bare}.pt").write_bytes(b"not a checkpoint")
    code, _, err = cli(["landscape", bare, "--results-dir", str(res)], capsys)
    assert code == 2 and "is not a readable resbench checkpoint" in err
    torch.save({"format": "something else"}, res / "checkpoints" / f"{bare}.pt")
    code, _, err = cli(["lesion", bare, "--results-dir", str(res)], capsys)
    assert code == 2 and "is not a resbench checkpoint" in err
    assert not (res / "analysis").exists()  # nothing written by a refused command


# -- the commands ----------------------------------------------------------------------------------------------


def test_lesion_command_on_a_shipped_and_a_plugin_variant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res, plugin = tmp_path / "res", write(tmp_path / "toy.py", PLUGIN)
    ids = [trained(res, capsys, v, "--depth", "8", "--save-checkpoint", "--plugin", str(plugin))
           for v in ("resnet", "toy_half")]
    code, out, err = cli(["lesion", *ids, "--drop", "2", "--draws", "3", "--results-dir", str(res), "--name", "both",
                          "--plugin", str(plugin)], capsys)
    assert code == 0, err
    table = pd.read_csv(res / "analysis" / "both.csv")
    summary = pd.read_csv(res / "analysis" / "both-summary.csv")
    assert set(table["run_id"]) == set(ids) and set(table["variant"]) == {"resnet", "toy_half"}
    for run_id, t in table.groupby("run_id"):
        assert t["mode"].value_counts().to_dict() == {"single": 3, "random": 3, "intact": 1}
        s = summary[summary["run_id"] == run_id].set_index("k")
        assert s.loc[1, "error"] == pytest.approx(t.loc[t["mode"] == "single", "error"].mean())
        assert s.loc[2, "error_increase"] == pytest.approx(
            t.loc[t["mode"] == "random", "error"].mean() - t.loc[t["mode"] == "intact", "error"].item())
    assert (res / "plots" / "both.png").stat().st_size > 0 and str(res / "plots" / "both.png") in out
    # the other two commands on the plugin's variant too
    code, _, err = cli(["landscape", ids[1], "--points", "3", "--samples", "16", "--results-dir", str(res),
                        "--plugin", str(plugin)], capsys)
    assert code == 0, err
    assert pd.read_csv(res / "analysis" / f"landscape-{ids[1]}-summary.csv")["variant"].tolist() == ["toy_half"]
    code, _, err = cli(["gradcorr", "--variant", "toy_half", "--depth", "8", "--points", "8", "--max-lag", "2",
                        "--results-dir", str(res), "--plugin", str(plugin)], capsys)
    assert code == 0, err
    assert pd.read_csv(res / "analysis" / "gradcorr-summary.csv")["variant"].tolist() == ["toy_half"]

    stack = trained(res, capsys, "toy_stack", "--save-checkpoint", "--plugin", str(plugin))
    code, _, err = cli(["lesion", stack, "--results-dir", str(res), "--plugin", str(plugin)], capsys)
    assert code == 2 and "error: Sequential has no residual units (no joins)" in err
    code, _, err = cli(["lesion", ids[1], "--results-dir", str(res)], capsys)  # the plugin not loaded
    assert code == 2 and "toy_half" in err and err.startswith("error:")


def test_landscape_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res = tmp_path / "res"
    run_id = trained(res, capsys, "resnet", "--depth", "8", "--save-checkpoint")
    code, _, err = cli(["landscape", run_id, "--points", "5", "--samples", "32", "--results-dir", str(res)], capsys)
    assert code == 0, err
    name = f"landscape-{run_id}"
    table = pd.read_csv(res / "analysis" / f"{name}.csv")
    assert table["alpha"].tolist() == pytest.approx([-1, -0.5, 0, 0.5, 1]) and (table["run_id"] == run_id).all()
    # the centre of the slice is the trained model: its loss on the same samples
    t = checkpoints.load(res, run_id)
    x, y = next(iter(t.task.train_eval_batches(32)))
    with torch.no_grad():
        centre = float(t.task.loss(t.model(x), y))
    assert table.loc[table["alpha"] == 0, "loss"].item() == pytest.approx(centre, rel=1e-5)
    summary = pd.read_csv(res / "analysis" / f"{name}-summary.csv")
    assert summary["loss_center"].item() == pytest.approx(centre, rel=1e-5) and summary["dims"].item() == 1
    assert (res / "plots" / f"{name}_1d.png").is_file()
    code, _, err = cli(["landscape", run_id, "--points", "4", "--results-dir", str(res)], capsys)
    assert code == 2 and err.startswith("error:") and "odd" in err


def test_gradcorr_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res = tmp_path / "res"
    code, _, err = cli(["gradcorr", "--variant", "plain", "resnet", "--depth", "8", "--points", "16",
                          "--max-lag", "4", "--results-dir", str(res)], capsys)
    assert code == 0, err
    summary = pd.read_csv(res / "analysis" / "gradcorr-summary.csv")
    assert summary[["variant", "depth", "seed"]].values.tolist() == [["plain", 8, 0], ["resnet", 8, 0]]
    acf = pd.read_csv(res / "analysis" / "gradcorr-acf.csv")
    assert acf.groupby("variant")["lag"].apply(list).to_dict() == {"plain": [0, 1, 2, 3, 4], "resnet": [0, 1, 2, 3, 4]}
    lag1 = acf[acf["lag"] == 1].set_index("variant")["acf"]
    assert summary.set_index("variant")["neighbor_corr"].to_dict() == pytest.approx(lag1.to_dict())
    assert (res / "plots" / "gradcorr.png").is_file()
    code, _, err = cli(["gradcorr", "--variant", "preln", "--depth", "2", "--task", "copy", "--results-dir",
                        str(res)], capsys)
    assert code == 2 and "gradcorr needs a task with continuous inputs" in err
    code, _, err = cli(["gradcorr", "--variant", "resnet", "--depth", "9", "--results-dir", str(res)], capsys)
    assert code == 2 and err.startswith("error:") and "6n+2" in err


# -- studies ---------------------------------------------------------------------------------------------------


def test_shipped_analysis_studies_parse_and_size() -> None:
    lesion_study, landscape, shattered = (load_study(n) for n in ("lesion", "landscape", "shattered"))
    quick = lesion_study.configs("quick")
    assert len(quick) == 8 and all(c.save_checkpoint and c.steps == 500 for c in quick)
    assert lesion_study.analysis_options("quick")["draws"] == 5 and lesion_study.analysis_options()["draws"] == 10
    assert {c.variant for c in landscape.configs()} == {"plain", "resnet"} and {c.depth for c in landscape.configs()} \
        == {56}
    assert shattered.configs("quick") == [] and shattered.analysis_options("quick")["seeds"] == [0, 1, 2]
    for study in (lesion_study, landscape, shattered):
        kinds = {c.table for c in study.claims}
        assert kinds == {study.analysis["kind"]}


def test_analysis_options_and_claim_tables_are_checked(tmp_path: Path) -> None:
    assert check_options({"kind": "lesion"})["drop"] == [1, 2, 4, 8, 16]
    bad = [({"kind": "nope"}, "unknown analysis kind 'nope'"),
           ({"kind": "lesion", "draw": 3}, "unknown option(s) ['draw']"),
           ({"kind": "lesion", "drop": 3}, "drop must be a non-empty list of int"),
           ({"kind": "landscape", "span": -1.0}, "span must be > 0"),
           ({"kind": "gradcorr", "variants": []}, "variants must be a non-empty list of str")]
    for options, message in bad:
        with pytest.raises(ValueError) as info:
            check_options(options)
        assert message in str(info.value)
    base = {"id": "c", "paper": "p", "text": "t", "kind": "value", "expect": "less", "threshold": 0.1}
    assert parse_claim({**base, "table": "lesion", "metric": "error_increase"}).table == "lesion"
    with pytest.raises(ValueError, match="unknown metric 'final_val_acc' of table 'lesion'"):
        parse_claim({**base, "table": "lesion", "metric": "final_val_acc"})
    with pytest.raises(ValueError, match="unknown table 'probes'"):
        parse_claim({**base, "table": "probes", "metric": "error"})
    study = write(tmp_path / "s.toml", """
        name = "s"
        [base]
        variant = "resnet"
        [grid]
        seed = [0]
        [analysis]
        kind = "lesion"
        [presets.quick.analysis]
        draws = 0
    """)
    with pytest.raises(ValueError, match=r"\[analysis\] \(preset quick\): analysis 'lesion': draws must be > 0"):
        load_study(study)
    no_grid = write(tmp_path / "n.toml", """
        name = "n"
        [analysis]
        kind = "landscape"
    """)
    with pytest.raises(ValueError, match="a landscape analysis needs trained runs: give it a \\[grid\\]"):
        load_study(no_grid).configs()


LESION_STUDY = """
    name = "tinylesion"
    vary = ["combinator", "placement"]
    [base]
    task = "digits"
    depth = 8
    steps = 3
    batch_size = 16
    measure = []
    save_checkpoint = true
    chance_band = 0  # three steps learn nothing: the analysis mechanics are under test
    [grid]
    variant = ["plain", "resnet"]
    seed = [0, 1]
    [analysis]
    kind = "lesion"
    drop = [2]
    draws = 2
    [[claims]]
    id = "resnet-survives"
    paper = "Veit et al. 2016, Fig. 3"
    text = "a single deletion costs the ResNet little"
    table = "lesion"
    metric = "error_increase"
    kind = "value"
    where = { variant = "resnet", k = 1 }
    expect = "less"
    threshold = 2.0
"""


@pytest.mark.slow  # a study swept, analysed and reported: about 30 s
def test_a_study_runs_its_analysis_and_reports_its_claims(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    res, study = tmp_path / "res", write(tmp_path / "tinylesion.toml", LESION_STUDY)
    code, out, err = cli(["sweep", str(study), "--results-dir", str(res), "--quiet"], capsys)
    assert code == 0, err
    assert "lesion analysis of study 'tinylesion'" in out
    summary = pd.read_csv(res / "analysis" / "tinylesion" / "lesion-summary.csv")
    # k = 0, 1, 2 for each ResNet; a plain net of depth 8 has one unit that keeps its shape: k = 0, 1 only
    assert summary.groupby("variant")["k"].apply(sorted).to_dict() == {"plain": [0, 0, 1, 1],
                                                                       "resnet": [0, 0, 1, 1, 2, 2]}
    assert (summary["study"] == "tinylesion").all() and (res / "plots" / "tinylesion" / "lesion.png").is_file()
    assert len(list((res / "checkpoints").glob("*.pt"))) == 4
    code, out, err = cli(["report", "--results-dir", str(res), "--study", "tinylesion"], capsys)
    assert code == 0, err
    report = (res / "REPORT-tinylesion.md").read_text()
    assert "## Analysis: lesion" in report and "![lesion](plots/tinylesion/lesion.png)" in report
    # error_increase is at most 1 < 2.0 for every run, and the two seeds bound the spread: the claim agrees
    assert "**agrees**" in report.split("resnet-survives")[1].split("###")[0]


def test_a_study_without_runs_measures_models_at_init(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res = tmp_path / "res"
    study = write(tmp_path / "tinyshatter.toml", """
        name = "tinyshatter"
        vary = ["combinator", "placement"]
        [analysis]
        kind = "gradcorr"
        variants = ["plain", "resnet"]
        depths = [8]
        seeds = [0, 1]
        points = 12
        max_lag = 3
        [[claims]]
        id = "corr-is-a-correlation"
        paper = "a test"
        text = "neighbour correlation is below 1.5"
        table = "gradcorr"
        metric = "neighbor_corr"
        kind = "value"
        expect = "less"
        threshold = 1.5
    """)
    code, out, err = cli(["sweep", str(study), "--results-dir", str(res), "--quiet"], capsys)
    assert code == 0, err
    assert "0 runs" in out and "gradcorr analysis of study 'tinyshatter'" in out
    summary = pd.read_csv(res / "analysis" / "tinyshatter" / "gradcorr-summary.csv")
    assert len(summary) == 4 and not (res / "leaderboard.csv").exists()
    code, _, err = cli(["report", "--results-dir", str(res), "--study", "tinyshatter"], capsys)
    assert code == 0, err
    report = (res / "REPORT-tinyshatter.md").read_text()
    assert "no training runs" in report and "## Analysis: gradcorr" in report
    assert re.search(r"^- git_sha: [0-9a-f]{7,}", report, re.M) and f"- torch: {torch.__version__}" in report
    assert "**agrees**" in report.split("corr-is-a-correlation")[1]
