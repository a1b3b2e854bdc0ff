"""The results store: fixed schema, atomic writes, no lost rows under concurrent writers."""

from __future__ import annotations

import csv
import json
import multiprocessing as mp
import os
from pathlib import Path

import pytest

from bench import results
from bench.results import COLUMNS, ResultsStore


def row(run_id: str, **kw: object) -> dict[str, object]:
    return {"run_id": run_id, "variant": "resnet20", "status": "ok", "final_val_acc": 0.5, **kw}


def test_append_writes_fixed_columns_and_json(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    store.append(row("a", lr=0.1), {"run_id": "a", "curves": {"train": [{"step": 1, "loss": 2.5}]}})
    store.append(row("b", error="boom, with a comma"), {"run_id": "b"})
    with (tmp_path / "leaderboard.csv").open() as f:
        reader = csv.reader(f)
        header = next(reader)
        body = list(reader)
    assert tuple(header) == COLUMNS
    assert [r[0] for r in body] == ["a", "b"]
    assert body[1][COLUMNS.index("error")] == "boom, with a comma"
    assert body[0][COLUMNS.index("lr")] == "0.1"
    assert json.loads((tmp_path / "runs" / "a.json").read_text())["curves"]["train"][0]["loss"] == 2.5
    df = store.load_leaderboard()
    assert list(df.columns) == list(COLUMNS) and len(df) == 2


def test_same_run_id_replaces_its_row(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    store.append(row("a", final_val_acc=0.1), {})
    store.append(row("a", final_val_acc=0.9), {})
    df = store.load_leaderboard()
    assert df["final_val_acc"].tolist() == [0.9]


def test_unknown_column_rejected_nothing_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"outside the leaderboard schema: \['colour'\]"):
        ResultsStore(tmp_path).append(row("a", colour="red"), {})
    assert not (tmp_path / "leaderboard.csv").exists()


def test_foreign_leaderboard_is_refused(tmp_path: Path) -> None:
    (tmp_path / "leaderboard.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not resbench's schema; move it away or use another --results-dir"):
        ResultsStore(tmp_path).append(row("x"), {})
    assert (tmp_path / "leaderboard.csv").read_text() == "a,b\n1,2\n"


def test_load_run_by_prefix_and_errors(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    store.append(row("resnet20-x-s0"), {"run_id": "resnet20-x-s0"})
    store.append(row("resnet20-x-s1"), {"run_id": "resnet20-x-s1"})
    assert store.load_run("resnet20-x-s1")["run_id"] == "resnet20-x-s1"
    with pytest.raises(ValueError, match="2 runs start with it"):
        store.load_run("resnet20-x")
    with pytest.raises(ValueError, match="no run 'zzz'"):
        store.load_run("zzz")
    assert [r["run_id"] for r in store.load_runs()] == ["resnet20-x-s0", "resnet20-x-s1"]


def test_interrupted_write_leaves_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = ResultsStore(tmp_path)
    store.append(row("a"), {})
    before = (tmp_path / "leaderboard.csv").read_text()

    def boom(*a: object) -> None:
        raise KeyboardInterrupt  # Ctrl-C arriving between writing the temp file and the rename

    monkeypatch.setattr(results.os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        store.append(row("b"), {})
    monkeypatch.undo()
    assert (tmp_path / "leaderboard.csv").read_text() == before
    assert not list(tmp_path.glob(".*.tmp")) and not list((tmp_path / "runs").glob(".*.tmp"))


def _writer(args: tuple[str, int]) -> None:
    root, worker = args
    store = ResultsStore(root)
    for i in range(15):
        store.append(row(f"w{worker}-{i}", seed=i), {"run_id": f"w{worker}-{i}"})


def test_concurrent_writers_lose_no_row(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    with ctx.Pool(4) as pool:
        pool.map(_writer, [(str(tmp_path), w) for w in range(4)])
    df = ResultsStore(tmp_path).load_leaderboard()
    assert sorted(df["run_id"]) == sorted(f"w{w}-{i}" for w in range(4) for i in range(15))
    assert len(os.listdir(tmp_path / "runs")) == 60
    assert df["status"].eq("ok").all()
