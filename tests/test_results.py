"""The results store: fixed schema, atomic writes, no lost rows under concurrent writers."""

from __future__ import annotations

import csv
import json
import multiprocessing as mp
import os
import re
from pathlib import Path

import pytest

from bench.runs import results, schema
from bench.runs.results import COLUMNS, ResultsStore


def row(run_id: str, **kw: object) -> dict[str, object]:
    return {"run_id": run_id, "variant": "resnet20", "status": "ok", "final_val_acc": 0.5, **kw}


def test_append_writes_fixed_columns_and_json(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    store.append(row("a", lr=0.1), {"run_id": "a", "curves": {"train": [{"step": 1, "loss": 2.5}]}})
    store.append(row("b", error="boom, with a comma", config_hash="00012e45"), {"run_id": "b"})
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
    assert df["config_hash"].iloc[1] == "00012e45"  # a hash, not the number 1.2e46


def test_a_non_finite_value_is_missing_in_the_csv_and_the_json_alike(tmp_path: Path) -> None:
    """A diverged run's perplexity (inf) and a NaN loss: an empty cell in leaderboard.csv, null in the run JSON, so
    the two files read alike (pandas: NaN) and no mean over runs is poisoned by an inf."""
    from bench.runs.runner import record

    store = ResultsStore(tmp_path)
    stored = record(store, {"run_id": "a", "row": row("a", final_val_perplexity=float("inf"),
                                                        final_train_loss=float("nan"), final_val_loss=-float("inf"))})
    cells = dict(zip(COLUMNS, list(csv.reader((tmp_path / "leaderboard.csv").open()))[1], strict=True))
    written = json.loads((tmp_path / "runs" / "a.json").read_text())["row"]
    for key in ("final_val_perplexity", "final_train_loss", "final_val_loss"):
        assert (cells[key], written[key], stored["row"][key]) == ("", None, None)
        assert store.load_leaderboard()[key].isna().all()


def test_same_run_id_replaces_its_row(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    store.append(row("a", final_val_acc=0.1), {})
    store.append(row("a", final_val_acc=0.9), {})
    df = store.load_leaderboard()
    assert df["final_val_acc"].tolist() == [0.9]


def _attempt(status: str, loss: float | None = None, error: str = "") -> tuple[dict[str, object], dict[str, object]]:
    """A row of run ``a`` and its run JSON: ``ok`` with a curve ending at ``loss``, or a failed attempt (no curve)."""
    r = row("a", status=status, error=error, final_val_acc=0.9 if status == "ok" else None)
    train = [{"step": 1, "loss": 2.5}, {"step": 800, "loss": loss}] if loss is not None else []
    return r, {"run_id": "a", "row": r, "config": {}, "curves": {"train": train, "eval": []}}


def test_a_failed_rerun_keeps_the_recorded_ok_run_and_the_attempt_beside_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A --no-resume rerun (or bench run --force) that dies: the ok row and its run JSON, curves included, stay as
    they were; the attempt's run JSON is kept in runs/failed/ and one stderr line says both."""
    store = ResultsStore(tmp_path)
    store.append(*_attempt("ok", loss=0.25))
    board, run = (tmp_path / "leaderboard.csv").read_bytes(), (tmp_path / "runs" / "a.json").read_bytes()
    killed = _attempt("killed", error="the run's process was killed by SIGKILL while training, after 3.1 s")
    capsys.readouterr()
    kept = store.append(*killed)
    assert (tmp_path / "leaderboard.csv").read_bytes() == board
    assert (tmp_path / "runs" / "a.json").read_bytes() == run
    assert store.load_run("a")["curves"]["train"][-1] == {"step": 800, "loss": 0.25}
    assert store.load_leaderboard()["status"].tolist() == ["ok"]
    assert list((tmp_path / "runs" / "failed").iterdir()) == [kept]
    assert re.fullmatch(r"a-[0-9a-f]{12}\.json", kept.name)
    assert json.loads(kept.read_text()) == json.loads(json.dumps(killed[1]))
    assert capsys.readouterr().err == (
        f"warning: run a ended killed this time; its earlier ok run is kept as it was ({tmp_path / 'leaderboard.csv'}, "
        f"{tmp_path / 'runs' / 'a.json'}) and this attempt's run JSON is in {kept}\n")
    assert [r["run_id"] for r in store.load_runs()] == ["a"]  # the attempt is not read as a run
    assert store.append(*_attempt("oom", error="CUDA out of memory")) != kept  # a second attempt does not overwrite
    assert len(list((tmp_path / "runs" / "failed").iterdir())) == 2


def test_an_ok_rerun_replaces_the_ok_run_and_a_failed_one_replaces_a_failed_one(tmp_path: Path) -> None:
    """What --no-resume is for: an ok rerun is the run's record now (the failed attempt kept before it stays where it
    was); a row that is not ok replaces one that is not ok either."""
    store = ResultsStore(tmp_path)
    store.append(*_attempt("ok", loss=0.25))
    kept = store.append(*_attempt("error", error="RuntimeError: boom"))
    assert store.append(*_attempt("ok", loss=0.125)) == tmp_path / "runs" / "a.json"
    assert store.load_run("a")["curves"]["train"][-1] == {"step": 800, "loss": 0.125}
    assert store.load_leaderboard()["status"].tolist() == ["ok"]
    assert list((tmp_path / "runs" / "failed").iterdir()) == [kept]
    other = ResultsStore(tmp_path / "other")
    other.append(*_attempt("killed", error="killed"))
    other.append(*_attempt("oom", error="out of memory"))
    assert other.load_leaderboard()["status"].tolist() == ["oom"] and not (other.runs_dir / "failed").exists()
    # a rerun that trained to its end and diverged is a result of the code of now, not a failed attempt
    assert store.append(*_attempt("diverged", loss=None)) == tmp_path / "runs" / "a.json"
    assert store.load_leaderboard()["status"].tolist() == ["diverged"]


def test_a_run_recorded_ok_only_in_its_json_is_kept_too(tmp_path: Path) -> None:
    """A run JSON whose row never reached the leaderboard (a write cut short) records the run: a failed attempt
    does not overwrite it, and the leaderboard gets its row back from it (rebuild)."""
    store = ResultsStore(tmp_path)
    store.append(*_attempt("ok", loss=0.25))
    run = (tmp_path / "runs" / "a.json").read_bytes()
    (tmp_path / "leaderboard.csv").write_text(",".join(COLUMNS) + "\n")
    kept = store.append(*_attempt("killed", error="killed"))
    assert kept.parent == tmp_path / "runs" / "failed"
    assert (tmp_path / "runs" / "a.json").read_bytes() == run
    assert store.rebuild() == ["a"] and store.load_leaderboard()["status"].tolist() == ["ok"]


def test_a_failed_rerun_is_not_written_through_a_link(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "res")
    store.append(*_attempt("ok", loss=0.25))
    board = store.leaderboard.read_bytes()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (store.runs_dir / "failed").symlink_to(elsewhere)
    with pytest.raises(ValueError, match=re.escape(f"{store.runs_dir / 'failed'} is a symbolic link")):
        store.append(*_attempt("killed", error="killed"))
    assert not list(elsewhere.iterdir()) and store.leaderboard.read_bytes() == board


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
    store.append(row("resnet20-x-s0"), {"run_id": "resnet20-x-s0", "config": {}})
    store.append(row("resnet20-x-s1"), {"run_id": "resnet20-x-s1", "config": {}})
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


# -- the earlier schema ----------------------------------------------------------------------------------------

V1_ROW = {c: "" for c in schema.COLUMNS_V1} | {
    "run_id": "plain-d20-digits-0e06ca03-s1", "variant": "plain", "status": "ok", "seed": "1",
    "flops_per_sample": "15081216.0", "final_val_acc": "0.97", "error": "boom, with a comma",
}


def write_v1(path: Path, rows: list[dict[str, str]]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    with (path / "leaderboard.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, schema.COLUMNS_V1, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


V1_HEADER = (  # results/leaderboard.csv's header before fwd/train FLOPs, init and config_hash (commit 76724ec)
    "run_id,variant,family,depth,params,task,seed,epochs,steps,batch_size,optimizer,lr,schedule,warmup_steps,device,"
    "device_name,precision,status,error,final_train_loss,final_train_acc,final_val_loss,final_val_acc,best_val_acc,"
    "target_acc,steps_to_target,time_to_target_s,train_samples_per_s,train_tokens_per_s,step_time_ms,peak_mem_mb,"
    "mem_method,flops_per_sample,achieved_tflops,mfu,wall_time_s,study,torch_version,git_sha,created_at"
)


def test_v1_schema_is_the_old_committed_header_and_the_committed_board_is_current() -> None:
    assert ",".join(schema.COLUMNS_V1) == V1_HEADER
    committed = Path(__file__).parent.parent / "results" / "leaderboard.csv"
    if committed.exists():
        assert tuple(committed.read_text().splitlines()[0].split(",")) == COLUMNS


def test_old_schema_loads_mapped_with_one_notice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(results, "_noticed", set())
    write_v1(tmp_path, [V1_ROW, {**V1_ROW, "run_id": "my-net-v2-d8-copy-1234abcd-s0", "flops_per_sample": ""}])
    store = ResultsStore(tmp_path)
    df = store.load_leaderboard()
    assert list(df.columns) == list(COLUMNS) and len(df) == 2
    assert df["train_flops_per_sample"].iloc[0] == 15081216.0 and df["fwd_flops_per_sample"].isna().all()
    assert df["init"].isna().all() and df["error"].iloc[0] == "boom, with a comma"
    assert df["config_hash"].tolist() == ["0e06ca03", "1234abcd"]  # the run id's second-to-last field
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(tmp_path / "leaderboard.csv") in err
    assert "flops_per_sample -> train_flops_per_sample" in err and "config_hash taken from run_id" in err
    store.load_leaderboard()
    store.preflight()
    assert capsys.readouterr().err == ""  # once per process


def test_append_to_old_schema_rewrites_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(results, "_noticed", set())
    write_v1(tmp_path, [V1_ROW])
    store = ResultsStore(tmp_path)
    store.append(row("new-run", config_hash="feedbeef", init="xavier", train_flops_per_sample=7.0), {})
    with (tmp_path / "leaderboard.csv").open(newline="") as f:
        lines = list(csv.DictReader(f))
    assert tuple(lines[0]) == COLUMNS
    assert [r["run_id"] for r in lines] == ["plain-d20-digits-0e06ca03-s1", "new-run"]
    old = lines[0]
    assert (old["train_flops_per_sample"], old["fwd_flops_per_sample"], old["config_hash"], old["init"]) == (
        "15081216.0", "", "0e06ca03", "")
    assert old["final_val_acc"] == "0.97" and old["error"] == "boom, with a comma"
    assert lines[1]["init"] == "xavier" and lines[1]["config_hash"] == "feedbeef"


# -- preflight: bad input found before anything runs ----------------------------------------------------------


def contents(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"" for p in sorted(root.rglob("*"))}


def test_preflight_accepts_a_new_or_good_results_dir(tmp_path: Path) -> None:
    ResultsStore(tmp_path / "not" / "yet").preflight()
    assert list(tmp_path.iterdir()) == []  # nothing created
    store = ResultsStore(tmp_path / "r")
    store.append(row("a", error='quoted "x", and\na newline'), {})
    before = contents(tmp_path)
    store.preflight()
    assert contents(tmp_path) == before


def test_preflight_results_dir_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "res").write_text("not a directory")
    with pytest.raises(ValueError, match=re.escape(f"results directory {tmp_path / 'res'} is an existing file")):
        ResultsStore(tmp_path / "res").preflight()
    res = re.escape(str(tmp_path / "res"))
    with pytest.raises(ValueError, match=f"cannot create results directory {res}/sub: {res} is a file"):
        ResultsStore(tmp_path / "res" / "sub").preflight()
    (tmp_path / "ok" / "runs").parent.mkdir()
    (tmp_path / "ok" / "runs").write_text("")
    with pytest.raises(ValueError, match="runs is a file, but run JSONs go into a directory"):
        ResultsStore(tmp_path / "ok").preflight()
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["ok", "res", "runs"]


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root may write anywhere")
def test_preflight_unwritable_dir(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    try:
        with pytest.raises(ValueError, match=re.escape(f"results directory {locked} is not writable")):
            ResultsStore(locked / "new").preflight()
    finally:
        locked.chmod(0o755)


def damaged(tmp_path: Path, bad_line: str) -> Path:
    store = ResultsStore(tmp_path)
    for i in range(3):
        store.append(row(f"r{i}", error="two\nlines" if i == 1 else ""), {})  # row r1 spans lines 3-4
    path = tmp_path / "leaderboard.csv"
    with path.open("a") as f:
        f.write(bad_line)
    with path.open("a") as f:
        f.write(",".join(["r9"] + [""] * (len(COLUMNS) - 1)) + "\n")  # a good line after it
    return path


@pytest.mark.parametrize(
    ("bad_line", "reason"),
    [
        ('r3,resnet20,"unterminated\n', "unexpected end of data"),
        ("r3,resnet20\n", f"2 fields, not {len(COLUMNS)}"),
        (",".join(["r3"] * (len(COLUMNS) + 1)) + "\n", f"{len(COLUMNS) + 1} fields"),
        ('r3,"quoted"tail' + "," * (len(COLUMNS) - 2) + "\n", "',' expected after '\"'"),
    ],
)
def test_damaged_line_is_named_with_its_repair(tmp_path: Path, bad_line: str, reason: str) -> None:
    path = damaged(tmp_path, bad_line)
    before = contents(tmp_path)
    store = ResultsStore(tmp_path)
    for action in (store.preflight, store.load_leaderboard, lambda: store.append(row("x"), {})):
        with pytest.raises(ValueError) as info:
            action()
        message = str(info.value)
        assert message.startswith(f"{path} line 6 is damaged ({reason}")  # header, 3 rows on 4 lines, the bad one
        assert f"fix or delete line 6 of {path} (each row must have {len(COLUMNS)} comma-separated fields; " \
               "a quote opened in a field must be closed)" in message
        assert "\n" not in message and "tokenizing" not in message
    assert contents(tmp_path) == {**before, "runs/x.json": b"{}\n"}  # append writes its JSON first, no row


def test_not_utf8_and_not_a_file(tmp_path: Path) -> None:
    (tmp_path / "leaderboard.csv").write_bytes(b"\xff\xfe,\n")
    with pytest.raises(ValueError, match=r"leaderboard\.csv is not UTF-8 text"):
        ResultsStore(tmp_path).preflight()
    (tmp_path / "leaderboard.csv").unlink()
    (tmp_path / "leaderboard.csv").mkdir()
    with pytest.raises(ValueError, match=r"leaderboard\.csv is not a file"):
        ResultsStore(tmp_path).load_leaderboard()


def test_the_leaderboard_is_rewritten_only_under_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While append replaces leaderboard.csv, another process's lock on it cannot be taken (deterministic check)."""
    from filelock import FileLock, Timeout

    real = results.atomic_write_text
    held: list[bool] = []

    def watched(path: Path, text: str) -> None:
        if path.name == "leaderboard.csv":
            other = FileLock(str(tmp_path / ".leaderboard.lock"), timeout=0, is_singleton=False, thread_local=False)
            try:
                with other:
                    held.append(False)
            except Timeout:
                held.append(True)
        real(path, text)

    monkeypatch.setattr(results, "atomic_write_text", watched)
    ResultsStore(tmp_path).append(row("a"), {})
    ResultsStore(tmp_path).append(row("b"), {})
    assert held == [True, True]


def test_preflight_refuses_a_directory_it_may_not_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As test_preflight_unwritable_dir, but also where the tests run as root (who may write anywhere)."""
    monkeypatch.setattr(results.os, "access", lambda path, mode: not (mode & os.W_OK and Path(path) == tmp_path))
    with pytest.raises(ValueError, match=re.escape(f"results directory {tmp_path} is not writable")):
        ResultsStore(tmp_path / "new" / "dir").preflight()
    assert list(tmp_path.iterdir()) == []


def test_blank_lines_hold_no_run(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    store.append(row("a"), {})
    with (tmp_path / "leaderboard.csv").open("a") as f:
        f.write("\n\n")
    store.preflight()
    store.append(row("b"), {})
    assert store.load_leaderboard()["run_id"].tolist() == ["a", "b"]


def test_a_leaderboard_without_world_size_reads_as_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(results, "_noticed", set())
    added = ("world_size", "norm", "grad_accum", "target_loss", "resumed_from_step", "restarts", *schema.DATA_COLUMNS,
             "chance_loss", "machine")
    old = [c for c in schema.COLUMNS_V9 if c not in added]
    assert tuple(old) == schema.COLUMNS_V3
    (tmp_path / "leaderboard.csv").write_text(",".join(old) + "\n" + ",".join(
        {"run_id": "a", "status": "ok", "batch_size": "64"}.get(c, "") for c in old) + "\n")
    store = ResultsStore(tmp_path)
    df = store.load_leaderboard()
    assert list(df.columns) == list(COLUMNS) and df["world_size"].tolist() == [1] and df["batch_size"][0] == 64
    assert "(world_size 1, norm left empty; grad_accum 1, restarts 0; final_val_perplexity" in capsys.readouterr().err
    store.append({"run_id": "b", "status": "ok", "world_size": 2}, {})
    lines = (tmp_path / "leaderboard.csv").read_text().splitlines()
    assert tuple(lines[0].split(",")) == COLUMNS
    assert [line.split(",")[COLUMNS.index("world_size")] for line in lines[1:]] == ["1", "2"]


def test_a_leaderboard_without_norm_reads_it_empty_and_gains_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(results, "_noticed", set())
    old = [c for c in schema.COLUMNS_V9 if c not in ("norm", "grad_accum", "target_loss", "resumed_from_step",
                                                     "restarts", *schema.DATA_COLUMNS, "chance_loss", "machine")]
    assert tuple(old) == schema.COLUMNS_V4
    (tmp_path / "leaderboard.csv").write_text(",".join(old) + "\n" + ",".join(
        {"run_id": "a", "status": "ok", "world_size": "2"}.get(c, "") for c in old) + "\n")
    df = ResultsStore(tmp_path).load_leaderboard()
    assert list(df.columns) == list(COLUMNS) and df["norm"].isna().all() and df["world_size"].tolist() == [2]
    assert "(norm left empty; grad_accum 1, restarts 0; final_val_perplexity" in capsys.readouterr().err


def test_a_leaderboard_before_accumulation_and_resume_reads_as_whole_batches_in_one_go(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(results, "_noticed", set())
    old = [c for c in schema.COLUMNS_V9 if c not in ("grad_accum", "target_loss", "resumed_from_step",
                                                     "restarts", *schema.DATA_COLUMNS, "chance_loss", "machine")]
    assert tuple(old) == schema.COLUMNS_V5
    (tmp_path / "leaderboard.csv").write_text(",".join(old) + "\n" + ",".join(
        {"run_id": "a", "status": "ok", "norm": "layernorm"}.get(c, "") for c in old) + "\n")
    df = ResultsStore(tmp_path).load_leaderboard()
    assert df["grad_accum"].tolist() == [1] and df["restarts"].tolist() == [0] and df["norm"].tolist() == ["layernorm"]
    assert df["resumed_from_step"].isna().all() and df["target_loss"].isna().all()
    assert "(grad_accum 1, restarts 0; final_val_perplexity" in capsys.readouterr().err


def test_a_leaderboard_before_the_data_columns_reads_them_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(results, "_noticed", set())
    old = [c for c in schema.COLUMNS_V9 if c not in (*schema.DATA_COLUMNS, "chance_loss", "machine")]
    assert tuple(old) == schema.COLUMNS_V6
    (tmp_path / "leaderboard.csv").write_text(",".join(old) + "\n" + ",".join(
        {"run_id": "a", "status": "ok", "grad_accum": "4", "restarts": "2"}.get(c, "") for c in old) + "\n")
    df = ResultsStore(tmp_path).load_leaderboard()
    assert list(df.columns) == list(COLUMNS)
    assert df["grad_accum"].tolist() == [4] and df["restarts"].tolist() == [2]
    assert df[list(schema.DATA_COLUMNS)].isna().all().all()
    assert ("(final_val_perplexity, eval_time_s, model_samples_per_s, input_bound_fraction, loader_workers left empty; "
            "chance_loss left empty; machine left empty; throughput_method and threads left empty; "
            f"{schema.V10_MAPPING})") in capsys.readouterr().err


def test_a_leaderboard_before_the_chance_level_reads_it_empty_and_keeps_each_status(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(results, "_noticed", set())
    old = [c for c in schema.COLUMNS_V9 if c not in ("chance_loss", "machine")]
    assert tuple(old) == schema.COLUMNS_V7
    (tmp_path / "leaderboard.csv").write_text(",".join(old) + "\n" + ",".join(
        {"run_id": "a", "status": "ok", "final_val_loss": "3.06"}.get(c, "") for c in old) + "\n")
    df = ResultsStore(tmp_path).load_leaderboard()
    assert list(df.columns) == list(COLUMNS) and df["chance_loss"].isna().all() and df["status"].tolist() == ["ok"]
    err = capsys.readouterr().err
    assert ("(chance_loss left empty; machine left empty; throughput_method and threads left empty; "
            f"{schema.V10_MAPPING})") in err


def test_a_leaderboard_before_the_machine_fingerprint_reads_it_empty(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(results, "_noticed", set())
    old = [c for c in schema.COLUMNS_V9 if c != "machine"]
    assert tuple(old) == schema.COLUMNS_V8
    (tmp_path / "leaderboard.csv").write_text(",".join(old) + "\n" + ",".join(
        {"run_id": "a", "status": "ok", "chance_loss": "5.5", "device_name": "AMD EPYC"}.get(c, "") for c in old)
        + "\n")
    df = ResultsStore(tmp_path).load_leaderboard()
    assert list(df.columns) == list(COLUMNS) and df["machine"].isna().all()
    assert df[["chance_loss", "device_name"]].values.tolist() == [[5.5, "AMD EPYC"]]
    assert f"(machine left empty; throughput_method and threads left empty; {schema.V10_MAPPING})" \
        in capsys.readouterr().err


def test_a_leaderboard_before_the_throughput_method_and_threads_reads_them_empty(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(results, "_noticed", set())
    old = [c for c in schema.COLUMNS_V10 if c not in ("throughput_method", "threads")]
    assert tuple(old) == schema.COLUMNS_V9
    (tmp_path / "leaderboard.csv").write_text(",".join(old) + "\n" + ",".join(
        {"run_id": "a", "status": "ok", "machine": "9275ebfd", "chance_loss": "2.3",
         "train_samples_per_s": "98.7"}.get(c, "") for c in old) + "\n")
    df = ResultsStore(tmp_path).load_leaderboard()
    assert list(df.columns) == list(COLUMNS) and df[["throughput_method", "threads"]].isna().all().all()
    assert df["train_samples_per_s"].tolist() == [98.7] and df["machine"].tolist() == ["9275ebfd"]
    assert "(throughput_method and threads left empty; budget_flops" in capsys.readouterr().err
    from bench.runs.upgrade import upgrade

    assert upgrade(tmp_path) == []  # nothing to fill: the file is only rewritten in the current columns
    assert tuple((tmp_path / "leaderboard.csv").read_text().splitlines()[0].split(",")) == COLUMNS
    assert ResultsStore(tmp_path).load_leaderboard()["machine"].tolist() == ["9275ebfd"]
