"""Experiment trackers (bench/reports/trackers.py): what a run logs, read back with each tool's own reader."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

import bench
from bench.cli import main
from bench.reports.trackers import TensorBoardTracker, curve_figure, default_uri, log_all, make_trackers
from bench.runs.results import ResultsStore

FAST = {"steps": 3, "batch_size": 64, "eval_every": 1, "measure": []}


@pytest.fixture(scope="module")
def tracked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bench.Run]:
    """One run logged to both trackers at their default places under its results directory."""
    pytest.importorskip("tensorboard")
    pytest.importorskip("mlflow")
    root = tmp_path_factory.mktemp("tracked")
    run = bench.run("resnet", depth=8, results_dir=root, tracker=["tensorboard", "mlflow"], **FAST)
    return root, run


def _events(path: Path) -> Any:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0, "images": 0})
    acc.Reload()
    return acc


def test_tensorboard_event_files_hold_the_run(tracked: tuple[Path, bench.Run]) -> None:
    root, run = tracked
    where = root / "tensorboard" / "runs" / run.run_id  # no study: group "runs"
    acc = _events(where)
    train = run.record["curves"]["train"]
    loss = acc.Scalars("train/loss")
    assert [e.step for e in loss] == [p["step"] for p in train] == [1, 2, 3]
    assert [e.value for e in loss] == pytest.approx([p["loss"] for p in train], rel=1e-6)
    assert [e.value for e in acc.Scalars("train/lr")] == pytest.approx([p["lr"] for p in train], rel=1e-6)
    evals = run.record["curves"]["eval"]
    assert [e.value for e in acc.Scalars("eval/val_acc")] == pytest.approx([p["val_acc"] for p in evals])
    final = acc.Scalars("row/final_val_loss")
    assert [e.step for e in final] == [3] and final[0].value == pytest.approx(run.row["final_val_loss"], rel=1e-6)
    config = acc.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "| variant | resnet |" in config and "| model.depth | 8 |" in config
    summary = acc.Tensors("summary/text_summary")[0].tensor_proto.string_val[0].decode()
    assert f"| run_id | {run.run_id} |" in summary and "| status | ok |" in summary
    image = acc.Images("curves")[0]
    assert image.encoded_image_string.startswith(b"\x89PNG") and image.width > 400
    hparams = acc.summary_metadata["_hparams_/session_start_info"].plugin_data.plugin_name
    assert hparams == "hparams"


def test_mlflow_store_holds_the_run(tracked: tuple[Path, bench.Run]) -> None:
    import mlflow
    from mlflow.tracking import MlflowClient

    root, run = tracked
    uri = f"sqlite:///{root.resolve() / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    try:
        found = mlflow.search_runs(experiment_names=["runs"])
    finally:
        mlflow.set_tracking_uri(None)
    assert len(found) == 1
    got = found.iloc[0]
    assert got["tags.mlflow.runName"] == run.run_id and got["status"] == "FINISHED"
    assert got["tags.resbench.variant"] == "resnet" and got["tags.resbench.git_sha"] == run.row["git_sha"]
    assert got["params.lr"] == str(run.record["config"]["lr"]) and got["params.model.depth"] == "8"
    assert got["params.betas"] == json.dumps(run.record["config"]["betas"])
    for col in ("final_train_loss", "final_val_loss", "final_val_acc", "wall_time_s"):
        assert got[f"metrics.{col}"] == pytest.approx(run.row[col], rel=1e-9), col
    assert "metrics.peak_mem_mb" not in got or got.isna()["metrics.peak_mem_mb"]  # not measured: not logged
    client = MlflowClient(tracking_uri=uri)
    rid = got["run_id"]
    history = client.get_metric_history(rid, "train/loss")
    assert sorted((m.step, m.value) for m in history) == [(p["step"], p["loss"]) for p in run.record["curves"]["train"]]
    assert [m.step for m in client.get_metric_history(rid, "eval/val_loss")] == [1, 2, 3]
    assert sorted(a.path for a in client.list_artifacts(rid)) == ["curves.png", "run.json"]
    local = Path(client.download_artifacts(rid, "run.json", str(root / "dl")))
    assert json.loads(local.read_text()) == json.loads(run.path.read_text())
    assert (root / "mlartifacts").is_dir()  # beside the database, not in the current directory


def test_tracking_again_duplicates_nothing_and_a_failed_run_is_failed(tracked: tuple[Path, bench.Run]) -> None:
    from mlflow.tracking import MlflowClient

    root, run = tracked
    assert main(["track", "--results-dir", str(root), "--tracker", "mlflow", "--tracker", "tensorboard",
                 "--quiet"]) == 0
    client = MlflowClient(tracking_uri=default_uri("mlflow", root))
    exp = client.get_experiment_by_name("runs").experiment_id
    assert len(client.search_runs([exp])) == 1
    tb_dir = root / "tensorboard" / "runs" / run.run_id
    assert len(list(tb_dir.glob("events.out.tfevents.*"))) == 2  # the scalars' file and the HParams file, once
    failed = json.loads(run.path.read_text())
    failed["row"] |= {"status": "diverged", "created_at": "2026-01-01T00:00:00+00:00"}
    failed["curves"]["train"] = [p | {"loss": None} for p in failed["curves"]["train"]]  # diverged at once
    assert curve_figure(failed) is None  # nothing to draw on a log axis: logged without the figure
    (mlflow_tracker,) = make_trackers("mlflow", None, root)
    assert log_all([mlflow_tracker], failed) == 0
    logged = {r.info.status: r for r in client.search_runs([exp])}
    assert sorted(logged) == ["FAILED", "FINISHED"]  # another attempt of the run id is another MLflow run
    assert [a.path for a in client.list_artifacts(logged["FAILED"].info.run_id)] == ["run.json"]


def test_a_study_groups_its_runs_and_the_sweep_logs_each(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    study = tmp_path / "tiny.toml"
    study.write_text('name = "tiny"\nvary = ["combinator"]\n[base]\ndepth = 8\nsteps = 2\nbatch_size = 64\n'
                     'eval_every = 2\nmeasure = []\n[grid]\nvariant = ["plain", "resnet"]\nseed = [0]\n')
    res = bench.sweep(study, results_dir=tmp_path / "r", progress=False, tracker="tensorboard",
                      tracker_uri=str(tmp_path / "tb"))
    logged = sorted(p.name for p in (tmp_path / "tb" / "tiny").iterdir())
    assert logged == sorted(res.runs["run_id"])
    for run_id, loss in zip(res.runs["run_id"], res.runs["final_train_loss"], strict=True):
        assert _events(tmp_path / "tb" / "tiny" / run_id).Scalars("row/final_train_loss")[0].value == \
            pytest.approx(loss, rel=1e-6)


def test_a_tracker_failure_is_a_warning_and_the_row_stays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tensorboard")

    def broken(self: TensorBoardTracker, run_json: Any, figure: Any = None) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(TensorBoardTracker, "log", broken)
    args = ["run", "--variant", "plain", "--depth", "8", "--steps", "2", "--batch-size", "64", "--measure",
            "--quiet", "--results-dir", str(tmp_path), "--tracker", "tensorboard"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "warning: the tensorboard tracker could not log plain-d8-" in err and "OSError: disk full" in err
    assert f"retry with: python -m bench track --results-dir {tmp_path} --tracker tensorboard" in err
    assert len(ResultsStore(tmp_path).load_leaderboard()) == 1
    assert main(["track", "--results-dir", str(tmp_path), "--tracker", "tensorboard", "--quiet"]) == 1
    assert "1 runs of" in capsys.readouterr().out


@pytest.mark.parametrize(("names", "uris", "message"), [
    (["wandb"], [], "unknown tracker 'wandb'; choose from: tensorboard, mlflow"),
    (["mlflow", "mlflow"], [], "tracker named twice: mlflow, mlflow"),
    (["tensorboard", "mlflow"], ["runs/tb"], r"--tracker-uri 'runs/tb': with 2 trackers, write NAME=URI"),
    ([], ["x"], r"--tracker-uri 'x': with no trackers, write NAME=URI"),
    (["tensorboard"], ["mlflow=sqlite:///x.db"], "--tracker-uri for mlflow, which no --tracker names"),
])
def test_bad_tracker_options(names: list[str], uris: list[str], message: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=message):
        make_trackers(names, uris, tmp_path)


def test_a_missing_package_names_the_install_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "mlflow", None)  # `import mlflow` raises ImportError
    args = ["run", "--variant", "plain", "--depth", "8", "--steps", "2", "--measure", "--quiet",
            "--results-dir", str(tmp_path / "r"), "--tracker", "mlflow"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: the mlflow tracker needs the mlflow package: pip install 'resbench[mlflow]'"
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())  # refused before the run


def test_an_unusable_mlflow_store_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(ValueError, match=r"cannot open the MLflow store 'sqlite:///.*/file/m\.db'"):
        make_trackers("mlflow", f"sqlite:///{tmp_path / 'file' / 'm.db'}", tmp_path)


def test_default_places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert default_uri("tensorboard", tmp_path) == str(tmp_path.resolve() / "tensorboard")
    assert default_uri("mlflow", tmp_path) == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking.example:5000")
    assert default_uri("mlflow", tmp_path) == "http://tracking.example:5000"


def test_track_refuses_an_unknown_study(tracked: tuple[Path, bench.Run], capsys: pytest.CaptureFixture[str]) -> None:
    root, _ = tracked
    assert main(["track", "--results-dir", str(root), "--study", "nope", "--tracker", "tensorboard"]) == 2
    assert "error: no runs of study 'nope'" in capsys.readouterr().err


def test_a_figure_that_cannot_be_drawn_is_a_warning(tracked: tuple[Path, bench.Run], monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import bench.reports.trackers

    _, run = tracked

    def cannot(run_json: Any) -> None:
        raise RuntimeError("no display")

    monkeypatch.setattr(bench.reports.trackers, "curve_figure", cannot)
    tb = TensorBoardTracker(str(tmp_path / "tb"))
    assert log_all([tb], run.record) == 0
    assert "warning: no curve figure for resnet-d8-" in capsys.readouterr().err
    assert "curves" not in _events(tb.run_dir(run.record)).Tags()["images"]
