"""A results folder is data, round two (docs/security.md): no symbolic link inside a folder is followed into an
import or a copy; every name a row carries is checked; a damaged run JSON is refused naming its field, never a
traceback; a lost leaderboard is rebuilt from the run JSONs, never retrained over; duplicated or out-of-range rows
never count as seeds; a CSV cell never runs as a spreadsheet formula; study files are checked whole."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from _nets import write
from _studies import digits_study

import bench
from bench.analysis.studyfile import read_study_file
from bench.cli import main
from bench.runs import measure, results, train
from bench.runs.cells import csv_text
from bench.runs.config import RunConfig
from bench.runs.results import COLUMNS, ResultsStore
from bench.runs.tasks import base as task_base
from bench.runs.tasks import get as get_task
from bench.sweeps.study import load_study

pytestmark = pytest.mark.usefixtures("clean_plugins")  # tests/conftest.py

EVIL = """
from pathlib import Path

import variants

Path(__file__).with_suffix(".ran").write_text("imported")
variants.register_preset("evil_resnet", "resnet")
"""


TINY = digits_study("tiny", ["plain_mlp"], [0, 1])


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def add(store: ResultsStore, seed: int, study: str | None = None, variant: str = "resnet", **row: object) -> str:
    """One run of resnet at depth 8 as bench records it; ``row`` overrides what its row says."""
    cfg = RunConfig(variant="resnet", depth=8, seed=seed, study=study)
    full = {"run_id": cfg.run_id, "config_hash": cfg.config_hash(), "variant": variant, "family": "resnet", "depth": 8,
            "task": "digits", "seed": seed, "status": "ok", "final_train_acc": 0.9, "final_val_acc": 0.8 + seed / 100,
            "study": study, "torch_version": "2.14.1", "device_name": "cpu"} | row  # fmt: skip
    store.append({k: v for k, v in full.items() if k in COLUMNS},
                 {"run_id": cfg.run_id, "row": full, "config": cfg.to_dict(),
                  "curves": {"train": [{"step": 1, "loss": 2.0}], "eval": [{"step": 1, "val_acc": 0.5}]}})
    return cfg.run_id


def planted_elsewhere(folder: Path) -> Path:
    """A study naming a plugin that marks its import, in ``folder``; returns the mark."""
    write(folder / "x.toml", 'name = "x"\nplugins = ["evil.py"]\n')
    return write(folder / "evil.py", EVIL).with_suffix(".ran")


# -- no symbolic link is followed ------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [
    ["report", "--study", "x"], ["leaderboard", "--study", "x"], ["sweep", "{R}/studies/x.toml", "--dry-run"],
])  # fmt: skip
def test_a_study_file_that_is_a_link_imports_nothing(command: list[str], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The link led out of studies/, so the study no longer looked stored: its plugin was imported."""
    root = tmp_path / "R"
    add(ResultsStore(root), 0, "x")
    mark = planted_elsewhere(root / "plots")
    (root / "studies").mkdir()
    (root / "studies" / "x.toml").symlink_to("../plots/x.toml")
    argv = [a.replace("{R}", str(root)) for a in command]
    code, _, err = cli([*argv, "--results-dir", str(root if command[0] != "sweep" else tmp_path / "out")], capsys)
    assert code == 2 and not mark.exists()
    assert f"error: {root / 'studies' / 'x.toml'} is a symbolic link inside a results folder: resbench follows no " \
           "link there" in err


def test_a_studies_folder_that_is_a_link_imports_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "R"
    add(ResultsStore(root), 0, "x")
    mark = planted_elsewhere(tmp_path / "data" / "studies")
    (root / "studies").symlink_to("../data/studies")
    code, _, err = cli(["compare", "--study", "x", "--baseline", "resnet", "--results-dir", str(root)], capsys)
    assert code == 2 and not mark.exists()
    assert f"error: {root / 'studies'} is a symbolic link inside a results folder" in err


def test_a_study_found_in_a_folder_is_stored_whatever_else_the_folder_holds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A folder of a study file and its plugin only (no leaderboard, no runs/) once passed for a study of one's own."""
    folder = tmp_path / "H"
    mark = planted_elsewhere(folder / "studies")
    _, _, err = cli(["leaderboard", "--study", "x", "--results-dir", str(folder)], capsys)
    assert not mark.exists(), err
    assert "were not imported" not in err  # stored, so not imported; the leaderboard reads the runs only: no note


@pytest.mark.parametrize("linked", ["file", "folder"])
def test_merge_copies_no_link(linked: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    secret = write(tmp_path / "home" / ".ssh" / "id_rsa", "PRIVATE KEY\n")
    folder = tmp_path / "F"
    add(ResultsStore(folder), 0)
    if linked == "file":
        (folder / "studies").mkdir()
        link = folder / "studies" / "id_rsa"
        link.symlink_to(secret)
    else:
        link = folder / "studies"
        link.symlink_to(secret.parent, target_is_directory=True)
    code, _, err = cli(["merge", str(folder), "-o", str(tmp_path / "out")], capsys)
    assert code == 2 and not (tmp_path / "out").exists()
    assert f"error: {link} is a symbolic link: a merge copies only the regular files of a results folder" in err


def test_a_leaderboard_that_is_a_link_is_refused_without_showing_what_it_leads_to(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    secret = write(tmp_path / "secret.txt", "hunter2,token\n")
    folder = tmp_path / "F"
    folder.mkdir()
    (folder / "leaderboard.csv").symlink_to(secret)
    code, _, err = cli(["merge", str(folder), "-o", str(tmp_path / "out")], capsys)
    assert code == 2 and "hunter2" not in err
    assert f"error: {folder / 'leaderboard.csv'} is a symbolic link: resbench reads a results folder's files" in err


# -- names in rows ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["study", "preset"])
def test_a_run_refuses_a_study_or_preset_that_is_not_a_name(field: str) -> None:
    with pytest.raises(ValueError, match=f"^--{field} must be a name that can be a file name .*got '../../evil'"):
        RunConfig(variant="resnet", depth=8, **{field: "../../evil"})


def test_a_row_whose_study_is_not_a_name_is_a_damaged_line(tmp_path: Path) -> None:
    """Such a row once put `sweep RES/studies/../../elsewhere/evil.toml` in a report, without --trust-plugins."""
    store = ResultsStore(tmp_path)
    add(store, 0, "mine")
    store.leaderboard.write_text(store.leaderboard.read_text().replace(",mine,", ",../../evil,"))
    with pytest.raises(ValueError, match=r"line 2 is damaged \(study '../../evil' holds a path separator, but a row's "
                                         "names become file names and commands"):
        store.rows()


@pytest.mark.parametrize("field", ["study", "preset"])
def test_a_sweep_refuses_to_set_its_study_or_preset(field: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """--set study=... was silently ignored: the sweep recorded its own study's name."""
    study = write(tmp_path / "tiny.toml", TINY)
    code, _, err = cli(["sweep", str(study), "--set", f"{field}=../../evil", "--dry-run", "--results-dir",
                        str(tmp_path / "r")], capsys)
    assert code == 2 and err.startswith(f"error: --set {field}=... cannot be set: a sweep records its study's name")


# -- a run JSON checked whole ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("damage", "why"), [
    (lambda r: r["curves"].update(train=[{}]), '"curves"."train"[0]."step" is None, not a step'),
    (lambda r: r["curves"].update(eval=[{"step": 1, "val_acc": "0.5"}]), '"curves"."eval"[0]."val_acc" is \'0.5\', '
                                                                          "not a number"),
    (lambda r: r.update(probes=[{"step": 0, "layer": 1, "value": 1.0}]), '"probes"[0] has no "metric"'),
    (lambda r: r["config"].update(lr="abc"), '"config"."lr" is \'abc\'; it must be a finite number in (0, 1000000]'),
    (lambda r: r["config"].update(depth=-5), '"config"."depth" is -5; it must be an integer in [1, 10000]'),
    (lambda r: r["config"].update(preset="../../evil"), '"config"."preset" \'../../evil\' holds a path separator'),
    (lambda r: r.update(run_id="other-run"), "its run_id 'other-run' is not its file's name"),
    (lambda r: r["row"].update(final_val_acc=float("nan")), "NaN is not JSON"),
])  # fmt: skip
def test_a_damaged_run_json_is_refused_naming_its_field(damage: object, why: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    store = ResultsStore(tmp_path)
    run_id = add(store, 0)
    run = json.loads(store.run_path(run_id).read_text())
    damage(run)  # type: ignore[operator]
    store.run_path(run_id).write_text(json.dumps(run))  # allow_nan: the NaN literal another tool could write
    for command in (["show", run_id], ["report"]):
        code, _, err = cli([*command, "--results-dir", str(tmp_path)], capsys)
        assert code == 2 and f"error: run JSON {store.run_path(run_id)} " in err and why in err, err


def test_a_run_json_without_its_row_is_shown_without_a_traceback(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    store = ResultsStore(tmp_path)
    run_id = add(store, 0)
    run = json.loads(store.run_path(run_id).read_text())
    del run["row"]
    store.run_path(run_id).write_text(json.dumps(run))
    code, out, err = cli(["show", run_id, "--results-dir", str(tmp_path)], capsys)
    assert code == 0 and "evaluations:" in out, err


def test_a_row_without_its_run_json_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = ResultsStore(tmp_path)
    ids = [add(store, seed) for seed in range(2)]
    store.run_path(ids[0]).unlink()
    for command in (["report"], ["compare", "--baseline", "resnet"]):
        code, _, err = cli([*command, "--results-dir", str(tmp_path)], capsys)
        assert code == 0 and f"warning: 1 row(s) of {store.leaderboard} have no run JSON in {store.runs_dir} " \
            f"({ids[0]})" in err, err


def test_a_runs_entry_that_is_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file where runs/ should be once read as a folder of no runs: the report went on without a word."""
    store = ResultsStore(tmp_path)
    add(store, 0)
    for json_file in store.runs_dir.iterdir():
        json_file.unlink()
    store.runs_dir.rmdir()
    store.runs_dir.write_text("not a folder\n")
    code, _, err = cli(["report", "--results-dir", str(tmp_path)], capsys)
    assert code == 2 and err == f"error: {store.runs_dir} is a file, but it is where run JSONs are; move it away\n"


# -- a lost leaderboard is rebuilt, never retrained over --------------------------------------------------------


@pytest.mark.parametrize("left", ["", ",".join(COLUMNS) + "\n"])
def test_an_emptied_leaderboard_is_rebuilt_from_the_run_jsons(left: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    study, res = write(tmp_path / "tiny.toml", TINY), tmp_path / "res"
    code, _, err = cli(["sweep", str(study), "--results-dir", str(res), "--quiet"], capsys)
    assert code == 0, err
    board = (res / "leaderboard.csv").read_text()
    jsons = {p.name: p.read_bytes() for p in (res / "runs").glob("*.json")}
    (res / "leaderboard.csv").write_text(left)
    code, out, err = cli(["sweep", str(study), "--results-dir", str(res)], capsys)
    assert code == 0, err
    assert out.count("already recorded, skipped") == 2 and "had no row for 2 run(s) recorded" in err
    assert {p.name: p.read_bytes() for p in (res / "runs").glob("*.json")} == jsons  # nothing trained again
    assert (res / "leaderboard.csv").read_text().splitlines()[1:] == sorted(board.splitlines()[1:])


# -- rows read back: duplicates, values, cells ------------------------------------------------------------------


def test_a_repeated_line_counts_once_and_a_conflicting_one_is_refused(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """One row appended twice once gave n = 4 seeds of 3, and a narrower interval."""
    store = ResultsStore(tmp_path)
    for seed in range(3):
        add(store, seed)
    lines = store.leaderboard.read_text().splitlines()
    store.leaderboard.write_text("\n".join([*lines, lines[1]]) + "\n")
    board = store.load_leaderboard()
    assert len(board) == 3 and sorted(board["seed"]) == [0, 1, 2]
    assert f"warning: {store.leaderboard} line 5 repeats line 2" in capsys.readouterr().err
    store.leaderboard.write_text("\n".join([*lines, lines[1].replace(",ok,", ",error,")]) + "\n")
    with pytest.raises(ValueError, match=r"line 5 is damaged \(run .* is also on line 2, with other values"):
        store.rows()


@pytest.mark.parametrize(("column", "cell", "why"), [
    ("status", "hacked", "status 'hacked' is not one of ok, diverged, oom, error, killed, failed_to_learn"),
    ("final_val_acc", "7.5", "final_val_acc is 7.5, above 1"),
    ("final_val_acc", "nan", "final_val_acc is nan, not a finite number"),
    ("final_train_loss", "inf", "final_train_loss is inf, not a finite number"),
    ("steps", "-3", "steps is -3, below 0"),
    ("steps", "0", "steps is 0; it must be an integer in [1, 1000000000]"),  # an ok run made a step
])  # fmt: skip
def test_a_row_out_of_range_is_left_out_with_a_warning(column: str, cell: str, why: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    store = ResultsStore(tmp_path)
    ids = [add(store, seed) for seed in range(2)]
    rows = store.rows()
    rows[0][column] = cell
    results.atomic_write_text(store.leaderboard, csv_text(rows))
    board = store.load_leaderboard()
    assert list(board["run_id"]) == ids[1:]
    assert f"warning: {store.leaderboard}: run {ids[0]} left out ({why})" in capsys.readouterr().err


def test_a_run_that_failed_before_its_first_step_keeps_its_row(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Out of memory at step 1, killed while measuring: 0 steps and 0 epochs made. Such a row was once left out as
    damaged, so the failure vanished from compare and the report."""
    store = ResultsStore(tmp_path)
    ids = [add(store, seed) for seed in range(2)]
    rows = store.rows()
    rows[0].update(status="killed", steps="0", epochs="0.0")
    results.atomic_write_text(store.leaderboard, csv_text(rows))
    board = store.load_leaderboard()
    assert list(board["run_id"]) == ids and list(board["status"]) == ["killed", "ok"]
    assert "left out" not in capsys.readouterr().err


def test_cells_a_spreadsheet_would_run_are_written_quoted_and_read_back_unchanged(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    cells = ['=HYPERLINK("http://x","y")', "+1+1", "-2+3", "@SUM(A1)", "\tx", "\rx", "'=already", "plain", "it's"]
    for seed, cell in enumerate(cells):
        add(store, seed, family="+1+1", error=cell, variant="+1+1")
    text = store.leaderboard.read_text()
    assert ',"\'=HYPERLINK(""http://x"",""y"")",' in text and ",'+1+1," in text and ",'-2+3," in text
    assert ",'@SUM(A1)," in text and "''=already" in text and ",plain," in text and ",it's," in text
    assert ",=" not in text and ",+" not in text and ",@" not in text  # no cell starts a formula
    rows = store.rows()
    assert [r["error"] for r in rows] == cells
    assert {r["variant"] for r in rows} == {r["family"] for r in rows} == {"+1+1"}
    assert list(store.load_leaderboard()["error"]) == cells


def test_a_leaderboard_a_spreadsheet_saved_is_read(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    ids = [add(store, seed) for seed in range(2)]
    text = store.leaderboard.read_text()
    store.leaderboard.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    assert [r["run_id"] for r in store.rows()] == ids


def test_a_read_only_folder_is_read_without_its_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = ResultsStore(tmp_path)
    run_id = add(store, 0)

    def no_lock(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied", str(tmp_path / ".leaderboard.lock"))

    monkeypatch.setattr(results.FileLock, "acquire", no_lock)
    monkeypatch.setattr(results.os, "access", lambda path, mode: not mode & os.W_OK)  # as for a user who may not write
    assert [r["run_id"] for r in store.rows()] == [run_id] and list(store.load_leaderboard()["run_id"]) == [run_id]


def test_loading_a_folder_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=f"^no results folder {tmp_path / 'nonexistent'}$"):
        bench.load(tmp_path / "nonexistent")


# -- study files checked whole, limits before allocation ---------------------------------------------------------


@pytest.mark.parametrize(("text", "why"), [
    ('claim = 5\n[grid]\nvariant = ["resnet"]\n', "`claim` must be a string (claim = \"...\"), got 5"),
    ('[grid]\nvariant = ["resnet"]\n[presets.unused]\nsteps = -3\n',
     "--steps must be an integer in [1, 1000000000], got -3 (in [presets.unused] of {path})"),
    ('[grid]\nvariant = ["resnet"]\nlr = [0.1, 1e300]\n',
     "--lr must be a finite number in (0, 1000000], got 1e+300 (in [grid] of {path})"),
])  # fmt: skip
def test_a_study_file_is_checked_whole_when_it_is_loaded(text: str, why: str, tmp_path: Path) -> None:
    path = write(tmp_path / "s.toml", text)
    with pytest.raises(ValueError) as caught:
        load_study(path)
    head = f"study file {path}: " if why.startswith("`") else "study 's': "
    assert str(caught.value) == head + why.format(path=path)


def test_a_study_file_nested_too_deep_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "deep.toml", "x = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ValueError, match="nests its arrays or tables too deep to read"):
        read_study_file(path)


@pytest.mark.parametrize(("argv", "error"), [
    (["--steps", "1000000000000000"], "error: --steps must be an integer in [1, 1000000000], got 1000000000000000"),
    (["--lr", "1e300"], "error: --lr must be a finite number in (0, 1000000], got 1e+300"),
    (["--task", "synthetic", "--image-size", "1000000"], "error: --image-size must be an integer in [1, 8192]"),
])  # fmt: skip
def test_absurd_values_are_refused_before_compute(argv: list[str], error: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(["run", "--variant", "resnet20", *argv, "--results-dir", str(tmp_path / "r")], capsys)
    assert code == 2 and err.startswith(error) and not (tmp_path / "r").exists()


def test_a_dataset_larger_than_memory_is_refused_with_its_estimate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(task_base, "available_memory", lambda: 2**20)  # 1 MiB left to this process
    code, _, err = cli(["run", "--variant", "plain_mlp", "--task", "synthetic", "--train-size", "1000", "--steps", "1",
                        "--results-dir", str(tmp_path / "r")], capsys)
    assert code == 2 and not (tmp_path / "r").exists(), err
    assert err.startswith("error: synthetic: --train-size 1000 and --val-size 1024 images of --image-size 32 needs "
                          "about 0.0696 GiB of memory, more than the 0.000977 GiB this process may allocate")


def test_a_model_larger_than_memory_is_refused_with_its_estimate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A Pre-LN Transformer of depth 10000 (1,982,769,408 parameters) once failed in the allocator."""
    monkeypatch.setattr(task_base, "available_memory", lambda: 2**20)
    code, _, err = cli(["run", "--variant", "resnet20", "--steps", "1", "--results-dir", str(tmp_path / "r")], capsys)
    assert code == 2 and not (tmp_path / "r").exists(), err
    assert err.startswith("error: resnet20 with 269,434 parameters (4-byte weights, gradients and two optimiser states "
                          "each) needs about 0.00401 GiB of memory, more than the 0.000977 GiB this process may")


def test_a_batch_whose_activations_exceed_memory_is_refused_with_its_estimate(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The weights (4.1 MiB) fit in 8 MiB, a batch of 256's activations (counted on the meta device) do not."""
    monkeypatch.setattr(task_base, "available_memory", lambda: 8 * 2**20)
    code, _, err = cli(["run", "--variant", "resnet20", "--steps", "1", "--batch-size", "256", "--results-dir",
                        str(tmp_path / "r")], capsys)
    assert code == 2 and not (tmp_path / "r").exists(), err
    assert err.startswith("error: resnet20 with 269,434 parameters (4-byte weights, gradients and two optimiser states "
                          "each) and 40.6 MiB of activations at --batch-size 256 needs about 0.0437 GiB of memory, "
                          "more than the 0.00781 GiB this process may allocate")


def test_a_warmup_longer_than_the_run_is_warned_of(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--warmup-steps 1000000000 --steps 5 once trained as if nothing were odd."""
    code, _, err = cli(["run", "--variant", "plain_mlp", "--task", "digits", "--steps", "2", "--warmup-steps", "5",
                        "--batch-size", "8", "--measure", "--quiet", "--results-dir", str(tmp_path)], capsys)
    assert code == 0
    assert "warning: the warm-up of 5 steps is longer than the run's 2 steps: the learning rate never reaches its " \
           "peak" in err


def test_a_variant_whose_family_is_not_a_name_is_refused_before_training(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import variants

    variants.register("odd_family", family="=HYPERLINK(x)", paper="none")(lambda: torch.nn.Linear(64, 10))
    try:
        code, _, err = cli(["run", "--variant", "odd_family", "--task", "digits", "--steps", "1", "--results-dir",
                            str(tmp_path / "r")], capsys)
    finally:
        variants.unregister("odd_family")
    assert code == 2 and not (tmp_path / "r").exists(), err
    assert err.startswith("error: family '=HYPERLINK(x)' of variant 'odd_family' ")


def test_a_row_whose_family_is_not_a_name_is_a_damaged_line(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    add(store, 0, family="fam")
    store.leaderboard.write_text(store.leaderboard.read_text().replace(",fam,", ",a;b,"))
    with pytest.raises(ValueError, match=r"line 2 is damaged \(family 'a;b' holds "):
        store.rows()


def test_a_recorded_run_is_not_trained_again_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--variant", "plain_mlp", "--task", "digits", "--steps", "1", "--batch-size", "8", "--measure",
            "--quiet", "--results-dir", str(tmp_path)]
    assert cli(argv, capsys)[0] == 0
    run_id = ResultsStore(tmp_path).rows()[0]["run_id"]
    path = tmp_path / "runs" / f"{run_id}.json"
    before = path.read_text()
    status = ResultsStore(tmp_path).rows()[0]["status"]
    code, _, err = cli(argv, capsys)
    assert code == 0 and path.read_text() == before
    assert err == (f"{run_id} is already recorded in {path} (status {status}): not trained again; give --force to "
                   "train it again and replace it\n")
    code, _, err = cli([*argv, "--force"], capsys)
    assert code == 0 and "already recorded" not in err and path.read_text() != before


@pytest.mark.parametrize("linked", ["file", "folder"])
def test_a_sweep_writes_no_study_file_through_a_link(linked: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    study, folder, elsewhere = write(tmp_path / "tiny.toml", TINY), tmp_path / "r", tmp_path / "elsewhere"
    (folder / "studies").mkdir(parents=True)
    kept = write(elsewhere / "tiny.toml", "kept")
    link = folder / "studies" / "tiny.toml"
    if linked == "folder":
        (folder / "studies").rmdir()
        link = folder / "studies"
    link.symlink_to(kept if linked == "file" else elsewhere, linked == "folder")
    code, _, err = cli(["sweep", str(study), "--results-dir", str(folder)], capsys)
    assert code == 2 and err.startswith(f"error: {link} is a symbolic link inside results folder {folder}: a sweep "
                                        "writes its files there only as files of its own, never through a link")
    assert [p.name for p in elsewhere.iterdir()] == ["tiny.toml"] and kept.read_text() == "kept"
    assert not (folder / "runs").exists()


def test_a_model_whose_forward_cannot_run_on_meta_is_estimated_without_activations(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def cannot(*_: object) -> int:
        raise NotImplementedError("needs real tensors")

    cfg = RunConfig(variant="resnet20", steps=1)
    task = get_task(cfg.task, device=torch.device("cpu"), seed=0, options=train.task_options(cfg))
    kw = train.model_kwargs(cfg, task)
    assert train._meta_footprint(cfg, task, kw) == (269434, 21309824)  # 20.3 MiB at --batch-size 128
    monkeypatch.setattr(measure, "meta_activation_bytes", cannot)
    assert train._meta_footprint(cfg, task, kw) == (269434, 0)
