"""bench upgrade: runs recorded before tasks declared a chance level, or before rows carried a machine fingerprint,
brought up to the current rules: the level filled from the task, the ok runs judged by it, the fingerprint taken
from the run's environment; a second upgrade changes nothing, a dry run writes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from bench.cli import main
from bench.runs import chance
from bench.runs.config import RunConfig, config_from_dict
from bench.runs.env import machine_fingerprint
from bench.runs.results import COLUMNS, ResultsStore
from bench.runs.upgrade import upgrade

ENV = {"device_name": "cpu", "device_count": 0, "cpu": "Xeon", "cuda_driver": None, "cuda": None, "hip": None,
       "torch": "2.4.1", "python": "3.11.7"}
COPY_CHANCE = 2.772564080291941  # the copy task's training tokens' unigram entropy, nats


def record(store: ResultsStore, seed: int, loss: float, *, task: str = "copy", config: bool = True,
           env: bool = True, **extra: Any) -> str:
    """A run as an earlier resbench wrote it: no chance level, no machine fingerprint."""
    cfg = RunConfig(variant="preln", depth=2, seed=seed, task=task, **extra)
    row = {"run_id": cfg.run_id, "config_hash": cfg.config_hash(), "variant": "preln", "depth": 2, "task": task,
           "seed": seed, "status": "ok", "final_val_loss": loss, "final_train_loss": loss + 0.1}
    run = {"run_id": cfg.run_id, "row": row, "curves": {}, "probes": []}
    store.append({k: v for k, v in row.items() if k in COLUMNS},
                 run | {"config": cfg.to_dict() if config else {}} | ({"env": ENV} if env else {}))
    return cfg.run_id


def test_upgrade_fills_the_chance_level_judges_by_it_and_fills_the_machine(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    store = ResultsStore(tmp_path)
    learned, stalled = record(store, 0, 1.5), record(store, 1, 0.995 * COPY_CHANCE)
    assert main(["upgrade", "--results-dir", str(tmp_path)]) == 0
    fingerprint = machine_fingerprint(ENV)
    assert capsys.readouterr().out.splitlines() == [
        f"{tmp_path}: 2 run(s) given their task's chance level; changed the status of 1; 0 left as recorded; "
        f"2 given their machine fingerprint ({fingerprint})",
        f"  {stalled}: ok -> {chance.STATUS} (chance level 2.773 nats)"]
    board = store.load_leaderboard().set_index("run_id")
    assert board.loc[learned, "status"] == "ok" and board.loc[stalled, "status"] == chance.STATUS
    assert board["chance_loss"].tolist() == pytest.approx([COPY_CHANCE] * 2)
    assert set(board["machine"]) == {fingerprint}
    assert board.loc[stalled, "final_val_loss"] == pytest.approx(0.995 * COPY_CHANCE)  # its numbers kept
    run = store.load_run(stalled)["row"]
    assert (run["status"], run["machine"]) == (chance.STATUS, fingerprint)
    assert run["error"].startswith("ended at chance: its lowest final loss (val loss 2.759)")
    text = store.leaderboard.read_bytes()
    assert upgrade(tmp_path) == []
    assert store.leaderboard.read_bytes() == text


def test_a_dry_run_reports_the_same_changes_and_writes_nothing(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    record(store, 0, 0.995 * COPY_CHANCE)
    text, run = store.leaderboard.read_bytes(), next(store.runs_dir.glob("*.json")).read_bytes()
    assert [c.status_after for c in upgrade(tmp_path, dry_run=True)] == [chance.STATUS]
    assert store.leaderboard.read_bytes() == text and next(store.runs_dir.glob("*.json")).read_bytes() == run
    assert [c.status_after for c in upgrade(tmp_path)] == [chance.STATUS]


def test_runs_whose_task_cannot_be_rebuilt_are_left_as_recorded_saying_why(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    store = ResultsStore(tmp_path)
    bare = record(store, 0, 1.5, config=False)
    elsewhere = record(store, 1, 1.5, task="imagefolder", data_path=str(tmp_path / "absent"))
    unknown = record(store, 2, 1.5, env=False)
    assert main(["upgrade", "--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("1 run(s) given their task's chance level; changed the status of 0; 2 left as recorded; "
                           f"2 given their machine fingerprint ({machine_fingerprint(ENV)})")
    assert out[1:] == [f"  {bare}: left as recorded: no configuration in its run JSON",
                       f"  {elsewhere}: left as recorded: task not rebuilt here: --data-path "
                       f"'{tmp_path / 'absent'}' is not a directory; pass the root holding train/ and val/"]
    board = store.load_leaderboard().set_index("run_id")
    assert board.loc[bare, "machine"] == machine_fingerprint(ENV)  # the fingerprint, even where the level is not
    assert board["chance_loss"].isna().tolist() == [True, True, False]
    assert pd.isna(board.loc[unknown, "machine"])  # no environment recorded: stays empty


def test_runs_recorded_under_a_renamed_preset_are_given_its_name(tmp_path: Path) -> None:
    """crosslayer's presets named for the order they were made in are named by what they hold: the runs' recorded
    preset follows (their rows and ids do not: a preset is not part of a run's identity); a second pass finds none."""
    from bench.runs.upgrade import rename_presets

    store = ResultsStore(tmp_path)
    old = record(store, 0, 1.5, study="crosslayer", preset="round3")
    kept = record(store, 1, 1.5, study="crosslayer", preset="quick")
    row = store.leaderboard.read_text()
    assert rename_presets(tmp_path, dry_run=True) == {old: ("round3", "width_and_loops")}
    assert store.load_run(old)["config"]["preset"] == "round3"  # a dry run writes nothing
    assert rename_presets(tmp_path) == {old: ("round3", "width_and_loops")}
    assert store.load_run(old)["config"]["preset"] == "width_and_loops"
    assert store.load_run(kept)["config"]["preset"] == "quick" and store.leaderboard.read_text() == row
    assert rename_presets(tmp_path) == {}


def test_runs_recorded_before_the_init_stream_existed_are_given_theirs(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A run JSON whose configuration predates ``init_stream`` drew from torch's one stream: upgrade writes
    ``global`` into it, its id and row stay, and a run drawn by common random numbers is left alone."""
    store = ResultsStore(tmp_path)
    old = record(store, 0, 1.5, init_stream="global")
    run = store.load_run(old)
    del run["config"]["init_stream"]  # as an earlier resbench wrote it
    store.replace({old: (next(r for r in store.rows() if r["run_id"] == old), run)})
    new = record(store, 1, 1.5)
    board = store.leaderboard.read_text()
    assert main(["upgrade", "--results-dir", str(tmp_path), "--dry-run"]) == 0
    assert "init_stream" not in store.load_run(old)["config"]
    assert main(["upgrade", "--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (f"{tmp_path}: would record init_stream global (torch's one stream after the seed, what they drew "
                      f"from) in 1 run(s); their ids stay")
    assert (f"{tmp_path}: recorded init_stream global (torch's one stream after the seed, what they drew from) in 1 "
            f"run(s); their ids stay") in out
    assert store.load_run(old)["config"]["init_stream"] == "global" and store.load_run(new)["config"]["init_stream"] \
        == "crn"
    assert config_from_dict(store.load_run(old)["config"]).run_id == old
    assert [r["run_id"] for r in store.rows()] == [old, new] and "init_stream" not in board
    assert main(["upgrade", "--results-dir", str(tmp_path)]) == 0
    assert "init_stream" not in capsys.readouterr().out  # a second pass finds none
