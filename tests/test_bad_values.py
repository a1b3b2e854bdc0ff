"""Every bad value is refused before compute, from one table of constraints, whichever way it arrives (the command
line, a study file, ``--set``, the Python API): exit status 2, one ``error:`` line naming the field and what it
accepts, no row written, no training started. And the other ways a command once ended in a traceback."""

from __future__ import annotations

import importlib.util
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from _nets import write

import bench
from bench.cli import main
from bench.runs.config import FIELD_DEFAULTS
from bench.runs.constraints import CONSTRAINTS
from bench.runs.results import COLUMNS, ResultsStore

# (the field, its command-line arguments, the value as a study file / --set / the API give it, the message)
BAD: list[tuple[str, list[str], Any, str]] = [
    ("momentum", ["nan"], math.nan, "--momentum must be a finite number in [0, 1), got"),
    ("momentum", ["-1"], -1.0, "--momentum must be a finite number in [0, 1), got"),
    ("weight_decay", ["-1"], -1.0, "--weight-decay must be a finite number >= 0, got"),
    ("betas", ["1.5", "0.9"], [1.5, 0.9], "--betas must be 2 values, each a finite number in [0, 1), got"),
    ("gamma", ["nan"], math.nan, "--gamma must be a finite number > 0, got"),
    ("gamma", ["-1"], -1.0, "--gamma must be a finite number > 0, got"),
    ("warmup_factor", ["nan"], math.nan, "--warmup-factor must be a finite number in (0, 1], got"),
    ("warmup_factor", ["-1"], -1.0, "--warmup-factor must be a finite number in (0, 1], got"),
    ("diverge_factor", ["nan"], math.nan, "--diverge-factor must be a finite number > 1, got"),
    ("diverge_factor", ["-1"], -1.0, "--diverge-factor must be a finite number > 1, got"),
    ("target_loss", ["nan"], math.nan, "--target-loss must be a finite number > 0, got"),
    ("target_loss", ["-1"], -1.0, "--target-loss must be a finite number > 0, got"),
    ("seed", ["1180591620717411303424"], 1180591620717411303424, "--seed must be an integer in [0, 4294967295], got"),
    ("depth", ["600000002"], 600000002, "--depth must be an integer in [1, 10000], got"),
    ("depth", ["eight"], "eight", "--depth must be an integer in [1, 10000], got"),
    ("threads", ["0"], 0, "--threads must be an integer in [1, 1024], got"),
    ("contour_length", ["1"], 1, "--contour-length must be an integer in [2, 41], got"),
    ("distractors", ["-1"], -1, "--distractors must be an integer in [0, 16], got"),
    ("channels", ["4"], 4, "--channels must be an integer in [1, 3], got"),
]  # fmt: skip
IDS = [f"{field}={' '.join(text)}" for field, text, _, _ in BAD]
STUDY = """
    name = "ok"
    [base]
    task = "digits"
    steps = 1
    batch_size = 8
    measure = []
    {extra}
    [grid]
    variant = ["plain_mlp"]
"""


def toml(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (str, list)) else "nan" if value != value else str(value)


def refused(code: int, err: str, message: str, res: Path) -> None:
    """Exit 2, one error line with the message, nothing written: the results folder was never made."""
    assert code == 2, err
    assert err.startswith(f"error: {message}") or f": {message}" in err.splitlines()[0], err
    assert len(err.strip().splitlines()) == 1, err
    assert not res.exists()


@pytest.mark.parametrize(("field", "text", "value", "message"), BAD, ids=IDS)
def test_the_command_line_refuses_it(field: str, text: list[str], value: Any, message: str, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    res = tmp_path / "res"
    code = main(["run", "--variant", "resnet20", f"--{field.replace('_', '-')}", *text, "--results-dir", str(res)])
    out, err = capsys.readouterr()
    shown = f"{text[0]!r}" if field == "depth" and text == ["eight"] else None  # text the parser could not read
    refused(code, err, f"{message} {shown}" if shown else message, res)
    assert out == ""  # no progress, no summary: nothing ran


@pytest.mark.parametrize(("field", "text", "value", "message"), BAD, ids=IDS)
def test_a_study_file_refuses_it(field: str, text: list[str], value: Any, message: str, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    study = write(tmp_path / "bad.toml", STUDY.format(extra=f"{field} = {toml(value)}"))
    res = tmp_path / "res"
    code = main(["sweep", str(study), "--results-dir", str(res), "--quiet"])
    out, err = capsys.readouterr()
    refused(code, err, f"study 'ok': {message}", res)
    assert "runs ->" not in out  # refused while the grid was checked, before the sweep began


@pytest.mark.parametrize(("field", "text", "value", "message"), BAD, ids=IDS)
def test_set_refuses_it(field: str, text: list[str], value: Any, message: str, tmp_path: Path,
                        capsys: pytest.CaptureFixture[str]) -> None:
    study = write(tmp_path / "ok.toml", STUDY.format(extra=""))
    res = tmp_path / "res"
    code = main(["sweep", str(study), "--set", f"{field}={','.join(text) if len(text) > 1 else text[0]}",
                 "--results-dir", str(res), "--quiet"])
    refused(code, capsys.readouterr().err, f"study 'ok': {message}", res)


@pytest.mark.parametrize(("field", "text", "value", "message"), BAD, ids=IDS)
def test_the_api_refuses_it(field: str, text: list[str], value: Any, message: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        bench.run("resnet20", results_dir=tmp_path / "res", **{field: value})
    assert not (tmp_path / "res").exists()


def test_the_table_covers_every_field_and_accepts_every_default() -> None:
    assert set(CONSTRAINTS) == set(FIELD_DEFAULTS)
    for name, default in FIELD_DEFAULTS.items():
        assert CONSTRAINTS[name].accepts(default), name


def test_help_shows_each_number_field_range(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "SGD momentum (He 2015: 0.9) (default: 0.9; a finite number in [0, 1))" in text
    assert "(default: None; an integer in [1, 10000])" in text  # --depth


# -- studies: refused when loaded, naming the field ----------------------------------------------------------


@pytest.mark.parametrize(("text", "message"), [
    ('[grid]\nvariant = ["plain", "resnet"]\ndepth = ["eight"]\n',
     "error: study 'x': --depth must be an integer in [1, 10000], got 'eight' (str)"),
    ('[base]\ntask = "digits"\n',
     "error: study 'x' has no [grid] and names no variant: a study trains the runs of its grid, e.g. [grid] variant"),
    ('[grid]\nvariant = ["plain", "resnet"]\n[[claims]]\nid = "c"\npaper = "p"\ntext = "t"\nmetric = "final_val_acc"\n'
     'compare = "variant"\na = "highway"\nb = "resnet"\nexpect = "greater"\n',
     "claim 'c' names variant ['highway'], which no run of the study has (variant takes plain, resnet in its base, "
     "grid and presets)"),
    ('name = 3\n[grid]\nvariant = ["plain"]\n', "`name` must be a string (name = \"my_study\"), got 3"),
    ('grid = ["plain"]\n', "`grid` must be a table ([grid]), got ['plain']"),
])  # fmt: skip
def test_a_study_file_error_names_its_field(text: str, message: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    study = write(tmp_path / "x.toml", text)
    code = main(["sweep", str(study), "--results-dir", str(tmp_path / "res"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "res").exists()


def test_a_sweep_over_a_damaged_run_json_is_refused_before_its_first_run(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    res = tmp_path / "res"
    (res / "runs").mkdir(parents=True)
    (res / "runs" / "old-run.json").write_text('{"run_id": "old-run", "row": {')
    study = write(tmp_path / "ok.toml", STUDY.format(extra=""))
    code = main(["sweep", str(study), "--results-dir", str(res), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and f"error: run JSON {res / 'runs' / 'old-run.json'} cannot be read" in err
    assert sorted(p.name for p in res.rglob("*")) == ["old-run.json", "runs"]  # no row, no study copy


# -- tracebacks that are now error lines ----------------------------------------------------------------------


def one_run(root: Path) -> str:
    from bench.runs.config import RunConfig

    cfg = RunConfig(variant="resnet", depth=8)
    row = {"run_id": cfg.run_id, "config_hash": cfg.config_hash(), "variant": "resnet", "depth": 8, "task": "digits",
           "seed": 0, "status": "ok", "final_train_acc": 0.9}
    ResultsStore(root).append({k: v for k, v in row.items() if k in COLUMNS},
                              {"run_id": cfg.run_id, "row": row, "config": cfg.to_dict(),
                               "curves": {"train": [], "eval": []}})
    return cfg.run_id


def test_a_stored_study_file_that_cannot_be_read_is_an_error_not_a_report_without_claims(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A shipped study's copy in the folder, damaged: the report once left out its claims and forest plots, exit 0."""
    from bench.runs.config import RunConfig

    root = tmp_path / "res"
    cfg = RunConfig(variant="resnet", depth=8, study="degradation")
    row = {"run_id": cfg.run_id, "config_hash": cfg.config_hash(), "variant": "resnet", "depth": 8, "task": "digits",
           "seed": 0, "status": "ok", "study": "degradation", "final_train_acc": 0.9}
    ResultsStore(root).append({k: v for k, v in row.items() if k in COLUMNS},
                              {"run_id": cfg.run_id, "row": row, "config": cfg.to_dict(),
                               "curves": {"train": [], "eval": []}})
    study = write(root / "studies" / "degradation.toml", 'name = "degradation"\nthis is [not toml\n')
    assert main(["report", "--study", "degradation", "--results-dir", str(root), "--jobs", "1"]) == 2
    assert capsys.readouterr().err.startswith(f"error: study file {study} is not valid TOML: ")
    assert not (root / "REPORT-degradation.md").exists() and not (root / "plots").exists()


def test_a_full_disk_is_an_error_line_saying_nothing_recorded_was_lost(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep whose disk filled once ended in a traceback from deep in the store (no space left on device)."""
    import errno

    from bench.reports import report

    root = tmp_path / "res"
    one_run(root)

    def full(path: Path, text: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(report, "atomic_write_text", full)
    assert main(["report", "--results-dir", str(root), "--jobs", "1"]) == 1
    assert capsys.readouterr().err == (f"error: cannot write {root}: No space left on device; nothing recorded "
                                       "before was lost: free some space and rerun the same command to continue\n")


NEEDS_PLOTLY = pytest.mark.skipif(importlib.util.find_spec("plotly") is None,
                                  reason="bench site needs plotly: pip install 'resbench[site]'")


@pytest.mark.parametrize("command", [["show", "RUN"], ["report"],
                                     pytest.param(["site", "-o", "SITE"], marks=NEEDS_PLOTLY)])
def test_a_run_json_whose_curves_are_text_is_an_error_line(command: list[str], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "res"
    run_id = one_run(root)
    path = root / "runs" / f"{run_id}.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"curves": "lost"}))
    args = [a.replace("RUN", run_id).replace("SITE", str(tmp_path / "site")) for a in command]
    code = main([*args, "--results-dir", str(root)])
    err = capsys.readouterr().err
    assert code == 2 and err == f'error: run JSON {path} is damaged: "curves" is a str; restore it, or delete it and ' \
                                "its leaderboard row and rerun that run\n"


@NEEDS_PLOTLY
def test_a_leaderboard_cell_that_is_not_a_number_names_its_line_and_column(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "res"
    one_run(root)
    board = root / "leaderboard.csv"
    lines = board.read_text().splitlines()
    cells = lines[1].split(",")
    cells[COLUMNS.index("depth")] = "eight"
    board.write_text("\n".join([lines[0], ",".join(cells)]) + "\n")
    assert main(["site", "--results-dir", str(root), "-o", str(tmp_path / "site")]) == 2
    assert capsys.readouterr().err == f"error: {board} line 2 is damaged (column depth holds 'eight', not an " \
                                      f"integer); fix or delete line 2 of {board}\n"


@NEEDS_PLOTLY
def test_report_and_site_into_a_folder_that_cannot_be_made(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "res"
    one_run(root)
    (tmp_path / "file").write_text("x")
    assert main(["site", "--results-dir", str(root), "-o", str(tmp_path / "file" / "site")]) == 2
    assert capsys.readouterr().err == f"error: cannot create site folder {tmp_path / 'file' / 'site'}: " \
                                      f"{tmp_path / 'file'} is a file\n"


@NEEDS_PLOTLY
@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root may write anywhere")
def test_report_and_site_into_a_read_only_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "res"
    one_run(root)
    locked = tmp_path / "locked"
    locked.mkdir()
    try:
        locked.chmod(0o555)
        assert main(["site", "--results-dir", str(root), "-o", str(locked / "site")]) == 2
        assert capsys.readouterr().err == f"error: site folder {locked} is not writable; pass another -o\n"
        root.chmod(0o555)
        assert main(["report", "--results-dir", str(root)]) == 2
        assert capsys.readouterr().err == f"error: results directory {root} is not writable; pass another " \
                                          "--results-dir\n"
    finally:
        locked.chmod(0o755)
        root.chmod(0o755)


# -- threads: a default that leaves a shared machine's busy cores alone -------------------------------------------


def test_free_cores_leave_the_busy_ones_and_a_run_records_its_threads(tmp_path: Path) -> None:
    import torch

    from bench.runs.config import RunConfig
    from bench.runs.threads import free_cores, threads_for

    assert (free_cores(8, 2.5), free_cores(2, 4.0), free_cores(4, 0.0)) == (6, 1, 4)
    own = torch.get_num_threads()
    assert threads_for(RunConfig(variant="resnet20", threads=3)) == 3
    assert threads_for(RunConfig(variant="resnet20", deterministic=True)) == own
    assert 1 <= threads_for(RunConfig(variant="resnet20")) <= min(own, free_cores())
    run = bench.run("plain_mlp", steps=1, batch_size=8, measure=[], threads=2, chance_band=0.0,
                    results_dir=tmp_path)
    assert run.row["threads"] == 2 and torch.get_num_threads() == own  # used for the run, restored after it
    assert ResultsStore(tmp_path).load_leaderboard()["threads"].tolist() == [2]


def test_a_run_json_without_its_config_is_an_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Read as a run with every field unknown, it blanked every comparison of its study; it is a damaged file."""
    root = tmp_path / "res"
    path = root / "runs" / f"{one_run(root)}.json"
    path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "config"}))
    assert main(["compare", "--baseline", "resnet", "--results-dir", str(root)]) == 2
    assert capsys.readouterr().err == f'error: run JSON {path} is damaged: it has no "config" (the configuration the ' \
        "run trained; every run resbench records has one); restore it, or delete it and its leaderboard row and " \
        "rerun that run\n"


def test_a_config_hash_that_contradicts_its_run_id_is_refused(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Runs pool by their config hash: a cell naming another configuration than the run id would split one (or, named
    like another's, merge two) without a word. Refused in a leaderboard line, a row to write and a run JSON's row."""
    root = tmp_path / "res"
    run_id = one_run(root)
    named = run_id.split("-")[-2]
    why = f"config_hash 'deadbeef' is not the hash '{named}' its run_id '{run_id}' was made with"
    board = root / "leaderboard.csv"
    text = board.read_text()
    board.write_text(text.replace(f"{run_id},{named},", f"{run_id},deadbeef,"))
    assert main(["compare", "--baseline", "resnet", "--results-dir", str(root)]) == 2
    assert capsys.readouterr().err == f"error: {board} line 2 is damaged ({why}, but runs are pooled by their " \
                                      f"configuration's hash); fix or delete line 2 of {board}\n"
    board.write_text(text)
    path = root / "runs" / f"{run_id}.json"
    run = json.loads(path.read_text())
    with pytest.raises(ValueError, match=f"^a row's {why}$"):
        ResultsStore(root).append(run["row"] | {"config_hash": "deadbeef"}, run)
    assert board.read_text() == text
    path.write_text(json.dumps(run | {"row": run["row"] | {"config_hash": "deadbeef"}}))
    assert main(["compare", "--baseline", "resnet", "--results-dir", str(root)]) == 2
    assert capsys.readouterr().err.startswith(f'error: run JSON {path} is damaged: "row": {why}; restore it')
