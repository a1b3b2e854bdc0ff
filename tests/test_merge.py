"""bench merge and the machine fingerprint: results folders of two machines as one, whose cost figures (throughput,
memory) are never pooled across machines while convergence metrics pool every seed of a configuration."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import statistics
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from _nets import toy, write
from _studies import combinator_study

from bench.analysis.claims import evaluate_claims, parse_claims
from bench.analysis.comparison import compare_table
from bench.analysis.stats import aggregate, t_halfwidth
from bench.cli import main
from bench.reports.report import leaderboard_table, write_report
from bench.runs.config import RunConfig
from bench.runs.env import MACHINE_FIELDS, machine_fingerprint
from bench.runs.merge import merge
from bench.runs.results import COLUMNS, ResultsStore
from bench.sweeps import bill

ENV_A = {"device_name": "NVIDIA H100", "device_count": 8, "cpu": "EPYC", "cuda_driver": 12040, "cuda": "12.4",
         "hip": None, "torch": "2.5.0", "python": "3.11.7", "hostname": "node1"}
ENV_B = ENV_A | {"device_name": "NVIDIA A100", "cuda_driver": 12020}


def add(store: ResultsStore, variant: str, seed: int, env: dict[str, Any], speed: float, loss: float,
        machine: bool = True) -> str:  # fmt: skip
    """One run on the machine of ``env``: its row carries the fingerprint (or not: a row from before it was kept)."""
    cfg = RunConfig(variant=variant, depth=2, seed=seed, task="copy")
    row = {"run_id": cfg.run_id, "config_hash": cfg.config_hash(), "variant": variant, "depth": 2, "task": "copy",
           "seed": seed, "status": "ok", "device_name": env["device_name"], "final_val_loss": loss,
           "train_samples_per_s": speed, "machine": machine_fingerprint(env) if machine else None}
    store.append({k: v for k, v in row.items() if k in COLUMNS},
                 {"run_id": cfg.run_id, "row": row, "config": cfg.to_dict(), "env": env, "curves": {}, "probes": []})
    return cfg.run_id


def two_machines(tmp_path: Path, machine: bool = True) -> tuple[Path, Path]:
    """Seeds 0, 1 of preln and postln on machine A, seeds 2, 3 on machine B (twice as fast)."""
    a, b = ResultsStore(tmp_path / "a"), ResultsStore(tmp_path / "b")
    for i, variant in enumerate(("preln", "postln")):
        for seed in (0, 1):
            add(a, variant, seed, ENV_A, 100.0 + 10 * i + seed, 2.0 + i + seed / 10, machine)
            add(b, variant, seed + 2, ENV_B, 200.0 + 10 * i + seed, 2.0 + i + (seed + 2) / 10, machine)
    return a.root, b.root


def test_the_fingerprint_is_of_the_machine_fields_only() -> None:
    assert machine_fingerprint(ENV_A) == machine_fingerprint(ENV_A | {"hostname": "node2", "git_sha": "x"})
    for field in MACHINE_FIELDS:
        assert machine_fingerprint(ENV_A | {field: "other"}) != machine_fingerprint(ENV_A), field
    assert len(machine_fingerprint(ENV_A)) == 8


def test_merge_keeps_one_row_per_run_and_a_second_merge_changes_nothing(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_machines(tmp_path)
    out = tmp_path / "merged"
    assert main(["merge", str(a), str(b), str(a), "-o", str(out)]) == 0
    assert capsys.readouterr().out == f"{out}: 8 runs (8 added, 4 identical copies dropped); 0 study file(s)\n"
    board = ResultsStore(out).load_leaderboard()
    assert sorted(board["machine"].value_counts().tolist()) == [4, 4]
    assert len(list((out / "runs").glob("*.json"))) == 8
    text = (out / "leaderboard.csv").read_bytes()
    assert main(["merge", str(b), str(a), "-o", str(out)]) == 0
    assert capsys.readouterr().out == f"{out}: 8 runs (0 added, 8 identical copies dropped); 0 study file(s)\n"
    assert (out / "leaderboard.csv").read_bytes() == text


def test_one_run_whose_row_an_older_schema_left_empty_cells_in_merges_as_one(tmp_path: Path) -> None:
    """The same run JSON in two folders, one leaderboard written before a column existed (its cells read empty):
    merge once refused it as two runs under one id. The merged row has the cells of both."""
    a = ResultsStore(tmp_path / "a")
    run_id = add(a, "preln", 0, ENV_A, 100.0, 2.0)
    shutil.copytree(a.root, tmp_path / "b")
    b = ResultsStore(tmp_path / "b")
    rows = b.rows()
    rows[0]["train_samples_per_s"] = ""
    b.write_all(rows, {})
    merged = tmp_path / "m"
    merge([b.root, a.root], merged)
    (row,) = ResultsStore(merged).rows()
    assert row["run_id"] == run_id and float(row["train_samples_per_s"]) == 100.0
    rows[0]["train_samples_per_s"] = "99.0"  # a value of its own: another run under one id, still refused
    b.write_all(rows, {})
    with pytest.raises(ValueError, match=r"1 run\(s\) cannot be merged"):
        merge([b.root, a.root], tmp_path / "m2")


@pytest.mark.parametrize("order", ["kept first", "kept second"])
def test_a_study_version_a_sweep_kept_as_previous_merges_with_its_newer_one(order: str, tmp_path: Path) -> None:
    """One folder swept a study's second version (the first kept in studies/previous/), another the first version:
    merge once refused them ("merge the folders of one study's version only"), though the sweep keeps both."""
    v1, v2 = b'name = "tiny"\nsteps = 30\n', b'name = "tiny"\nsteps = 40\n'
    newer, older = ResultsStore(tmp_path / "newer"), ResultsStore(tmp_path / "older")
    add(newer, "preln", 0, ENV_A, 100.0, 2.0)
    add(older, "preln", 1, ENV_A, 100.0, 2.0)
    kept = f"previous/tiny-{hashlib.sha256(v1).hexdigest()[:12]}.toml"
    for path, text in ((newer.root / "studies" / "tiny.toml", v2), (newer.root / "studies" / kept, v1),
                       (older.root / "studies" / "tiny.toml", v1)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text)
    folders = [newer.root, older.root] if order == "kept first" else [older.root, newer.root]
    merge(folders, tmp_path / "m")
    assert (tmp_path / "m" / "studies" / "tiny.toml").read_bytes() == v2
    assert (tmp_path / "m" / "studies" / kept).read_bytes() == v1
    (older.root / "studies" / "tiny.toml").write_bytes(b'name = "tiny"\nsteps = 50\n')  # a version no one kept
    with pytest.raises(ValueError, match=r"study file studies/tiny\.toml differs between "):
        merge(folders, tmp_path / "m2")


def test_merge_fills_the_fingerprint_of_older_rows_from_their_environment(tmp_path: Path) -> None:
    a, b = two_machines(tmp_path, machine=False)
    merged = merge([a, b], tmp_path / "merged")
    board = ResultsStore(tmp_path / "merged").load_leaderboard()
    assert merged.added == 8
    assert set(board["machine"]) == {machine_fingerprint(ENV_A), machine_fingerprint(ENV_B)}


def test_merge_refuses_two_runs_under_one_id_one_line_per_run(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Each conflict is one line naming both files and the fields that differ (a curve by its name, not its 7,000
    characters), a row without its run JSON is refused too, and the output folder the merge made is removed."""
    a, b = ResultsStore(tmp_path / "a"), ResultsStore(tmp_path / "b")
    run_id = add(a, "preln", 0, ENV_A, 100.0, 2.0)
    add(b, "preln", 0, ENV_B, 200.0, 2.0)
    curved = add(a, "postln", 0, ENV_A, 100.0, 2.0)
    add(b, "postln", 0, ENV_A, 100.0, 2.0)
    run = b.load_run(curved)
    b.append(run["row"], run | {"curves": {"train": [{"step": i, "loss": 1.0 / (i + 1)} for i in range(500)]}})
    lost = add(b, "sandwich", 0, ENV_B, 100.0, 2.0)
    b.run_path(lost).unlink()
    out = tmp_path / "out"
    assert main(["merge", str(a.root), str(b.root), "-o", str(out)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == ("error: 3 run(s) cannot be merged (two runs cannot share an id, and a row needs its run "
                        "JSON); nothing was written. Move one copy of each away, or restore the missing JSON:")
    assert sorted(lines[1:]) == sorted([
        f"  run {run_id}: rows of {a.leaderboard} and {b.leaderboard} differ in device_name ('NVIDIA H100' vs "
        f"'NVIDIA A100'), machine ('{machine_fingerprint(ENV_A)}' vs '{machine_fingerprint(ENV_B)}'), "
        "train_samples_per_s ('100.0' vs '200.0')",
        f"  run {curved}: run JSONs {a.run_path(curved)} and {b.run_path(curved)} differ in curves",
        f"  run {lost}: its row in {b.leaderboard} has no run JSON ({b.run_path(lost)})",
    ])  # fmt: skip
    assert not out.exists()  # the folder the merge made is gone, .leaderboard.lock and all
    assert main(["merge", str(tmp_path / "nothing"), "-o", str(out)]) == 2
    assert f"error: {tmp_path / 'nothing'} holds no results" in capsys.readouterr().err
    assert not out.exists()
    out.mkdir()
    (out / "mine.txt").write_text("kept")
    assert main(["merge", str(a.root), str(b.root), "-o", str(out)]) == 2
    assert [p.name for p in out.iterdir() if p.name != ".leaderboard.lock"] == ["mine.txt"]  # a folder of yours stays


@pytest.fixture
def merged_board(tmp_path: Path) -> tuple[pd.DataFrame, list[dict[str, Any]], Path]:
    out = tmp_path / "merged"
    merge(two_machines(tmp_path), out)
    store = ResultsStore(out)
    return store.load_leaderboard(), store.load_runs(), out


def test_cost_is_aggregated_per_machine_and_convergence_over_every_seed(merged_board) -> None:
    board, _, _ = merged_board
    wide = aggregate(board, metrics=["final_val_loss", "train_samples_per_s"])
    pre = wide[wide["variant"] == "preln"].set_index("machine")
    assert list(pre.index) == sorted([machine_fingerprint(ENV_A), machine_fingerprint(ENV_B)])
    assert pre.loc[machine_fingerprint(ENV_A), "train_samples_per_s_mean"] == 100.5
    assert pre.loc[machine_fingerprint(ENV_B), "train_samples_per_s_mean"] == 200.5
    assert (pre["train_samples_per_s_n"] == 2).all() and (pre["n_runs"] == 4).all()
    assert pre["final_val_loss_mean"].tolist() == pytest.approx([2.15, 2.15])  # seeds 0..3, both machines
    assert pre["final_val_loss_n"].tolist() == [4, 4]
    one = aggregate(board[board["machine"] == machine_fingerprint(ENV_A)], metrics=["train_samples_per_s"])
    assert "machine" not in one.columns and one["train_samples_per_s_mean"].tolist() == [110.5, 100.5]


def test_compare_pairs_cost_rows_on_one_machine_and_names_it(merged_board) -> None:
    board, runs, _ = merged_board
    table = compare_table(board, runs, "preln", ["final_val_loss", "train_samples_per_s"])
    post = table[table["variant"] == "postln"].set_index(["metric", "machine"])
    assert post.loc[("final_val_loss", "all"), "n"] == 4
    assert post.loc[("final_val_loss", "all"), "diff"] == pytest.approx(1.0)
    for env in (ENV_A, ENV_B):
        row = post.loc[("train_samples_per_s", machine_fingerprint(env))]
        assert row["n"] == 2 and row["diff"] == pytest.approx(10.0) and math.isfinite(row["p"])


def test_a_claim_on_a_cost_figure_gets_a_verdict_per_machine(merged_board) -> None:
    board, runs, _ = merged_board
    claim = parse_claims([{"id": "faster", "paper": "p", "text": "t", "metric": "train_samples_per_s",
                           "compare": "variant", "a": "preln", "b": "postln", "expect": "greater"}])
    results = evaluate_claims(claim, board, None, runs)
    assert [r.context for r in results] == [f"machine={m}" for m in
                                            sorted([machine_fingerprint(ENV_A), machine_fingerprint(ENV_B)])]
    assert [r.diff for r in results] == pytest.approx([10.0, 10.0])
    assert [g.n for r in results for g in r.groups] == [2, 2, 2, 2]


def test_the_site_of_merged_results_shows_both_machines(merged_board, tmp_path: Path) -> None:
    pytest.importorskip("plotly", reason="bench site needs plotly: pip install 'resbench[site]'")
    from bench.reports.site import build_site

    _, _, out = merged_board
    site = build_site(out, tmp_path / "site").root
    index = (site / "index.html").read_text(encoding="utf-8")
    machines = ", ".join(sorted([machine_fingerprint(ENV_A), machine_fingerprint(ENV_B)]))
    assert f"<td>{machines}</td>" in index
    study = (site / "study" / "no-study.html").read_text(encoding="utf-8")
    for env in (ENV_A, ENV_B):  # a filter value, and a bar series of the cost figure, per machine
        assert f'<option value="{machine_fingerprint(env)}">' in study
        assert f'"name":"{machine_fingerprint(env)}"' in study


def test_leaderboard_and_report_of_merged_results_show_cost_per_machine(merged_board,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from bench.reports.report import write_report

    _, _, out = merged_board
    assert main(["leaderboard", "--results-dir", str(out), "--metrics", "final_val_loss",
                 "train_samples_per_s"]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert lines[0] == ["variant", "depth", "task", "machine", "n_runs", "n_failed", "final_val_loss",
                        "train_samples_per_s"]
    pre = {line[3]: line[6:] for line in lines[1:] if line[0] == "preln"}
    loss = f"{2.15:.4g} ± {float(t_halfwidth(statistics.stdev([2.0, 2.1, 2.2, 2.3]), 4)):.2g} (4)".split()
    assert pre == {machine_fingerprint(ENV_A): [*loss, "100.5", "±", "6.4", "(2)"],
                   machine_fingerprint(ENV_B): [*loss, "200.5", "±", "6.4", "(2)"]}
    text = write_report(out).read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| preln |")]
    assert [row.split(" | ")[3] for row in rows] == sorted([machine_fingerprint(ENV_A), machine_fingerprint(ENV_B)])
    assert f"- machines: {', '.join(sorted([machine_fingerprint(ENV_A), machine_fingerprint(ENV_B)]))}" in text


def test_a_recorded_run_carries_the_fingerprint_of_its_environment(tmp_path: Path) -> None:
    assert main(["run", "--variant", "highway_mlp", "--depth", "2", "--task", "digits", "--steps", "2", "--batch-size",
                 "16", "--eval-every", "2", "--measure", "--quiet", "--results-dir", str(tmp_path)]) == 0
    store = ResultsStore(tmp_path)
    (row,) = store.load_leaderboard().to_dict("records")
    env = store.load_run(row["run_id"])["env"]
    assert row["machine"] == machine_fingerprint(env) and env["device_count"] == 1 and env["cpu"]
    assert set(MACHINE_FIELDS) <= set(env)


def _swept(folder: Path, seeds: range, depth: int, made_with: dict[str, list[str]] | None = None) -> None:
    """A folder as a sweep of the plugin study ``twostep`` leaves it: the study file and its plugin in studies/, and
    runs of preln and the plugin's toy_half (``made_with``: the sweep's --set options, as the driver records them)."""
    write(folder / "studies" / "twostep.toml", """
        name = "twostep"
        plugins = ["twostep.py"]
        [grid]
        variant = ["preln", "toy_half"]
        depth = [6]
        seed = [0, 1, 2]
    """)
    write(folder / "studies" / "twostep.py", toy())
    store = ResultsStore(folder)
    for variant in ("preln", "toy_half"):
        for seed in seeds:
            cfg = RunConfig(variant=variant, depth=depth, seed=seed, task="digits", study="twostep")
            row = {"run_id": cfg.run_id, "config_hash": cfg.config_hash(), "variant": variant, "depth": depth,
                   "task": "digits", "seed": seed, "status": "ok", "final_val_acc": 0.9 - seed / 100,
                   "study": "twostep"}
            store.append({k: v for k, v in row.items() if k in COLUMNS},
                         {"run_id": cfg.run_id, "row": row, "config": cfg.to_dict(), "curves": {}, "probes": []}
                         | ({"made_with": made_with} if made_with else {}))


@pytest.mark.usefixtures("clean_plugins")
def test_merge_copies_the_plugins_a_study_stored_and_the_report_names_every_set(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _swept(tmp_path / "a", range(3), 6)
    _swept(tmp_path / "b", range(3, 4), 12, {"set": ["seed=3", "depth=12"]})
    out = tmp_path / "merged"
    assert main(["merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)]) == 0
    assert capsys.readouterr().out.endswith("1 study file(s) and beside them 1 plugin file\n")  # no looks: not named
    write(tmp_path / "a" / "studies" / "twostep.plugins.json", '{"files": {}, "modules": {}}')
    write(tmp_path / "b" / "studies" / "other.py", toy())
    assert main(["merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "m2")]) == 0
    assert capsys.readouterr().out.endswith(
        "1 study file(s) and beside them 2 plugin files, 1 record of plugin hashes\n")
    assert (out / "studies" / "twostep.py").read_text() == (tmp_path / "a" / "studies" / "twostep.py").read_text()
    # the study's plugin loads from the merged folder: commands that read the study work there
    assert main(["compare", "--study", "twostep", "--baseline", "preln", "--results-dir", str(out),
                 "--format", "csv"]) == 0
    assert "toy_half" in capsys.readouterr().out
    assert main(["report", "--study", "twostep", "--results-dir", str(out)]) == 0
    text = (out / "REPORT-twostep.md").read_text()
    lines = [line for line in text.splitlines() if line.startswith("python -m bench sweep")]
    study = (out / "studies" / "twostep.toml").as_posix()
    # a stored study's plugins are imported only when asked: its command asks, where the reader sees it
    assert lines == [f"python -m bench sweep {study} --trust-plugins --results-dir {out}",
                     f"python -m bench sweep {study} --set seed=3 --set depth=12 --trust-plugins --results-dir {out}"]


def test_merge_refuses_two_versions_of_a_plugin(tmp_path: Path) -> None:
    _swept(tmp_path / "a", range(1), 6)
    _swept(tmp_path / "b", range(1, 2), 6)
    (tmp_path / "b" / "studies" / "twostep.py").write_text("# another version\n")
    with pytest.raises(ValueError, match=r"file studies/twostep.py differs between .*a/studies/twostep.py and "
                                         r".*b/studies/twostep.py; merge the folders of one study's version only"):
        merge([tmp_path / "a", tmp_path / "b"], tmp_path / "merged")
    assert not (tmp_path / "merged" / "leaderboard.csv").exists() and not (tmp_path / "merged" / "studies").exists()


def _tiny_study(path: Path, seeds: tuple[int, ...] = (0,)) -> Path:
    """The tiny combinator study at ``seeds``, its runs evaluating two batches of each split (about results folders,
    not evaluation)."""
    return write(path, combinator_study("tiny", seeds).replace("[base]\n", "[base]\neval_batches = 2\n", 1))


@pytest.fixture(scope="module")
def tiny_swept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results folder of the tiny study's sweep at seed 0 (plain and resnet), made once for the tests that start
    from it; each copies it (:func:`_tiny_results`) before writing."""
    root = tmp_path_factory.mktemp("tiny")
    assert main(["sweep", str(_tiny_study(root / "tiny.toml")), "--results-dir", str(root / "res"), "--quiet"]) == 0
    return root / "res"


def _process_start_untimed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dry run's bill takes a process's start as 4 CPU seconds instead of timing a fresh interpreter's imports
    (about 6 CPU seconds): what these tests check is which runs a dry run counts and bills, not that figure, whose
    timing tests/test_bill.py's dry runs exercise."""
    monkeypatch.setattr(bill, "process_start", lambda: 4.0)


def _tiny_results(swept: Path, tmp_path: Path, name: str) -> tuple[Path, Path]:
    """The tiny study file at ``tmp_path / "tiny.toml"`` and a copy of its swept folder at ``tmp_path / name``: what
    ``python -m bench sweep tiny.toml --results-dir NAME --quiet`` leaves there."""
    study, res = _tiny_study(tmp_path / "tiny.toml"), tmp_path / name
    shutil.copytree(swept, res)
    return study, res


def test_a_colleagues_seeds_of_one_study_merge(tiny_swept: Path, tmp_path: Path) -> None:
    """A second machine sweeps the same study file with other seeds (`--set seed=[3,4]`); both folders store the same
    study file, so `bench merge` takes them, and the report's reproduce lines give both commands."""
    study, _ = _tiny_results(tiny_swept, tmp_path, "a")
    assert main(["sweep", str(study), "--set", "seed=[3,4]", "--results-dir", str(tmp_path / "b"), "--quiet"]) == 0
    out = tmp_path / "merged"
    assert main(["merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)]) == 0
    board = ResultsStore(out).load_leaderboard()
    pairs = sorted(zip(board["variant"], board["seed"], strict=True))
    assert pairs == [(v, s) for v in ("plain", "resnet") for s in (0, 3, 4)]
    assert main(["report", "--study", "tiny", "--results-dir", str(out)]) == 0
    text = (out / "REPORT-tiny.md").read_text()
    stored = (out / "studies" / "tiny.toml").as_posix()
    assert [line for line in text.splitlines() if line.startswith("python -m bench sweep")] == [
        f"python -m bench sweep {stored} --results-dir {out}",
        f"python -m bench sweep {stored} --set 'seed=[3,4]' --results-dir {out}"]


@pytest.mark.parametrize(("value", "message"), [
    ("seed=[3,3]", "--set seed: a list of distinct values, e.g. seed=[3,4], got [3, 3] (3 repeated)"),
    ("seed=[3,1.5]", "--seed must be an integer in [0, 4294967295], got 1.5"),
    ("seed=[]", "--set seed: a list of distinct values, e.g. seed=[3,4], got []"),
])
def test_a_bad_seed_list_exits_2_naming_the_field_and_writes_nothing(value: str, message: str, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    study = _tiny_study(tmp_path / "tiny.toml")
    assert main(["sweep", str(study), "--set", value, "--results-dir", str(tmp_path / "res")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err, err
    assert not (tmp_path / "res").exists()


def test_a_changed_study_file_keeps_the_stored_one_beside_it(tiny_swept: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Sweeping a results folder with an edited study file never silently replaces the copy its runs were made with:
    that copy is kept under studies/previous/, named by its content, and the sweep says so."""
    _process_start_untimed(monkeypatch)
    study, res = _tiny_results(tiny_swept, tmp_path, "res")
    first = study.read_text()
    assert (res / "studies" / "tiny.toml").read_text() == first
    _tiny_study(tmp_path / "tiny.toml", (0, 1))
    capsys.readouterr()
    assert main(["sweep", str(tmp_path / "tiny.toml"), "--results-dir", str(res), "--quiet", "--dry-run"]) == 0
    assert (res / "studies" / "tiny.toml").read_text() == first  # a dry run writes nothing
    assert main(["sweep", str(tmp_path / "tiny.toml"), "--results-dir", str(res), "--quiet"]) == 0
    (kept,) = (res / "studies" / "previous").iterdir()
    assert kept.name == f"tiny-{hashlib.sha256(first.encode()).hexdigest()[:12]}.toml"
    assert kept.read_text() == first and "seed = [0, 1]" in (res / "studies" / "tiny.toml").read_text()
    assert f"that copy is kept as {kept}" in capsys.readouterr().out


def test_a_dry_run_bills_only_the_runs_a_sweep_would_run(tiny_swept: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A dry run on a folder that holds some of the study's runs counts them and bills the others only; on a folder
    that holds them all it bills nothing."""
    _process_start_untimed(monkeypatch)
    study, res = _tiny_results(tiny_swept, tmp_path, "res")
    capsys.readouterr()
    assert main(["sweep", str(study), "--results-dir", str(res), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == (f"dry run of study 'tiny': 2 runs checked, 2 of them already recorded in {res} "
                                   "(a sweep skips them), so 0 to run")
    assert f"nothing to bill: a sweep into {res} would run nothing" in out and "total:" not in out
    assert main(["sweep", str(study), "--set", "seed=[0,1]", "--results-dir", str(res), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "4 runs checked, 2 of them already recorded" in out and "so 2 to run; counting" in out
    assert "total: 2 runs, 4 steps" in out


def test_cost_figures_measured_at_different_loads_are_kept_apart(tmp_path: Path) -> None:
    """One machine, two loads (a colleague's seeds measured while the machine was busy): throughput pools only
    within a band of load per CPU, and compare says which band each figure is from; the loss still pools all seeds."""
    store = ResultsStore(tmp_path / "res")
    speeds = {"preln": (1000.0, 1100.0, 400.0, 380.0), "postln": (900.0, 1000.0, 420.0, 410.0)}
    for variant, values in speeds.items():
        for seed, speed in enumerate(values):
            run_id = add(store, variant, seed, ENV_A, speed, 2.0 + seed / 10 + (variant == "postln") / 100)
            run = store.load_run(run_id)
            run["measurements"] = {"load": {"load_1m": 0.4 if seed < 2 else 12.0, "cpus": 2, "other_cpu": None}}
            (store.root / "runs" / f"{run_id}.json").write_text(json.dumps(run))
    board, runs = store.load_leaderboard(), store.load_runs()
    t = compare_table(board, runs, "preln", ["train_samples_per_s", "final_val_loss"])
    fp = machine_fingerprint(ENV_A)
    speed = t[(t["metric"] == "train_samples_per_s") & (t["variant"] == "postln")].set_index("machine")
    assert sorted(speed.index) == [f"{fp} at load/CPU 0-0.5", f"{fp} at load/CPU >=4"]
    assert speed.loc[f"{fp} at load/CPU 0-0.5", "mean"] == 950.0 and speed.loc[f"{fp} at load/CPU >=4", "mean"] == 415.0
    assert speed.loc[f"{fp} at load/CPU 0-0.5", "diff"] == -100.0 and speed.loc[f"{fp} at load/CPU >=4", "diff"] == 25.0
    loss = t[(t["metric"] == "final_val_loss") & (t["variant"] == "postln")]
    assert list(loss["machine"]) == ["all"] and list(loss["n"]) == [4]


def _loaded_store(root: Path, load: Any) -> ResultsStore:
    """preln and postln, 4 seeds each, throughput 1000, 1100, 400, 380 (and 900, 1000, 420, 410); ``load(variant,
    seed)``: the 1-minute load average (2 CPUs) recorded with each run's cost figures."""
    store = ResultsStore(root)
    speeds = {"preln": (1000.0, 1100.0, 400.0, 380.0), "postln": (900.0, 1000.0, 420.0, 410.0)}
    for variant, values in speeds.items():
        for seed, speed in enumerate(values):
            run_id = add(store, variant, seed, ENV_A, speed, 2.0 + seed / 10)
            run = store.load_run(run_id)
            run["measurements"] = {"load": {"load_1m": load(variant, seed), "cpus": 2, "other_cpu": None}}
            (store.root / "runs" / f"{run_id}.json").write_text(json.dumps(run))
    return store


def _speed_cells(table: str) -> dict[tuple[str, str], str]:
    """(variant, machine or "") -> the samples/s cell of a report's leaderboard table."""
    head, _, *rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()]
    col, machine = head.index("samples/s"), head.index("machine") if "machine" in head else None
    return {(r[0], r[machine] if machine is not None else ""): r[col] for r in rows}


def test_the_leaderboard_keeps_apart_what_one_configuration_measured_at_different_loads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Seeds 2 and 3 measured at a higher load than seeds 0 and 1: the report's leaderboard and `bench leaderboard`
    keep one row per configuration, its loss pooled over all 4 seeds, its samples/s cell naming each band's figure,
    never a pooled 720 samples/s."""
    store = _loaded_store(tmp_path / "res", lambda variant, seed: 0.4 if seed < 2 else 12.0)
    table = leaderboard_table(store.load_leaderboard(), store.load_runs())
    cells = _speed_cells(table)
    assert sorted(cells) == [("postln", ""), ("preln", "")]
    assert cells[("preln", "")] == ("1050 ± 71 (±635, n=2, load/CPU 0-0.5); "
                                    "390 ± 14 (±127, n=2, load/CPU &gt;=4)")  # ">=", escaped for markdown
    assert "| preln | 2 | copy | 4/4 | — |" in table  # one row for all 4 seeds
    csv = tmp_path / "board.csv"
    assert main(["leaderboard", "--results-dir", str(store.root), "--metrics", "train_samples_per_s",
                 "final_val_loss", "--csv", str(csv)]) == 0
    full = pd.read_csv(csv).set_index("variant")
    assert math.isnan(full.loc["preln", "train_samples_per_s_mean"]) and full.loc["preln", "final_val_loss_n"] == 4
    bands = full.loc["preln", "train_samples_per_s_by_load_band"]
    assert bands == "1050 (n=2, load/CPU 0-0.5); 390 (n=2, load/CPU >=4)"
    lines = capsys.readouterr().out.splitlines()[1:]  # after "full table ... written"
    assert lines[0].split()[:5] == ["variant", "depth", "task", "n_runs", "n_failed"]
    (preln,) = [line for line in lines if line.split()[0] == "preln"]
    assert preln.split()[3:5] == ["4", "0"]
    assert "1050 (n=2, load/CPU 0-0.5); 390 (n=2, load/CPU >=4)" in preln and preln.endswith(" 2.15 ± 0.21 (4)")


def test_the_leaderboard_is_one_row_per_configuration_where_each_shares_a_band(tmp_path: Path) -> None:
    """preln measured at one load, postln at another: no configuration is split, so no machine column (the table of
    a committed study stays as it was). Their samples/s cells, 4 timings each, sit side by side: separate runs'
    timings, so the report's note says what such figures are, as for one timing a side."""
    store = _loaded_store(tmp_path / "res", lambda variant, seed: 0.4 if variant == "preln" else 12.0)
    table = leaderboard_table(store.load_leaderboard(), store.load_runs())
    cells = _speed_cells(table)
    assert sorted(cells) == [("postln", ""), ("preln", "")]
    assert cells[("preln", "")].startswith("720 ± ")
    assert not table.split_bands and table.timed_difference
    note = next(line for line in write_report(store.root).read_text().splitlines() if line.startswith("Timed by"))
    assert note == REPORT_NOTE.format("")
    board = store.load_leaderboard()
    alone = leaderboard_table(board[board["variant"] == "preln"], store.load_runs())
    assert not alone.timed_difference  # one design's timings: no difference between designs shown, no note


# The note under a report's leaderboard showing two designs' timed figures, the spread it quotes left as {}.
REPORT_NOTE = (
    "Timed by separate runs: each timed cost figure here (throughput, step time) was taken by the run that measured "
    "it, at its own moment on the wall clock, so a difference between designs is confounded with the load on the "
    "machine at those moments: with one timing on a side it gets no test, and with more a test says whether those "
    "timings differ, not which design is faster. On a shared machine one configuration's timings change with the "
    "load on it{}. To rank designs' cost, time them side by side, alternating steps: `python -m bench cost --designs "
    "DESIGN ... --baseline BASELINE --shape SHAPE --depth 2` (`--shape`: see `python -m bench cost --help`; "
    "`--plugin` for your own designs).")


def test_the_report_says_what_a_figure_timed_once_is_and_quotes_the_spread_of_a_configurations_timings(
        tmp_path: Path) -> None:
    """Two seeds a design, each timed once, one on a quiet machine and one beside other work: each band's cell rests
    on one timing, and the report's leaderboard says so under the table, with preln's 2.5x spread across bands."""
    store = ResultsStore(tmp_path / "res")
    for variant, speeds in {"preln": (1000.0, 400.0), "postln": (900.0, 420.0)}.items():
        for seed, speed in enumerate(speeds):
            run_id = add(store, variant, seed, ENV_A, speed, 2.0 + seed / 10)
            run = store.load_run(run_id)
            run["measurements"] = {"load": {"load_1m": (0.4, 12.0)[seed], "cpus": 2, "other_cpu": None}}
            (store.root / "runs" / f"{run_id}.json").write_text(json.dumps(run))
    table = leaderboard_table(store.load_leaderboard(), store.load_runs())
    assert table.split_bands and table.timed_difference
    assert _speed_cells(table)[("preln", "")] == "1000 (n=1, load/CPU 0-0.5); 400 (n=1, load/CPU &gt;=4)"
    text = write_report(store.root).read_text()
    caption, note = (next(line for line in text.splitlines() if line.startswith(s)) for s in ("Cells: ", "Timed by"))
    assert "shows each band's figure in its cost cells, never their average" in caption
    assert note == REPORT_NOTE.format(" (here preln, depth 2, copy: samples/s 400 to 1000 across load bands, 2.50x)")
    assert text.index("| preln |") < text.index(note)  # under the table


def test_a_cost_cell_resting_on_fewer_timings_than_its_rows_runs_says_how_many(tmp_path: Path) -> None:
    """Seed 1 reused seed 0's timing (its cost_source), seed 2 was timed again: the samples/s cell of the 3-run row
    rests on 2 measurements (mean 1100, not 1067) and says n=2; the caption says cost figures count once per
    measurement."""
    store = ResultsStore(tmp_path / "res")
    first, copy, _ = (add(store, "preln", seed, ENV_A, speed, 2.0 + seed / 10)
                      for seed, speed in enumerate((1000.0, 1000.0, 1200.0)))
    board = store.load_leaderboard().astype({"cost_source": object})
    board["cost_source"] = board["run_id"].replace({copy: first})  # as a sweep writes it: the run that measured
    board.to_csv(store.root / "leaderboard.csv", index=False)
    table = leaderboard_table(store.load_leaderboard(), store.load_runs())
    assert "| preln | 2 | copy | 3/3 | — | — | — | 1100 ± 141 (±1271, n=2) | — |" in table
    text = write_report(store.root).read_text()
    assert ("Cost figures (samples/s, memory) count once per measurement, not per seed: a seed that reused another "
            "run's figure adds none, and a cost cell resting on fewer measurements than its row's runs says how many "
            "(`n=2`).") in text


@pytest.mark.usefixtures("clean_plugins")
def test_a_report_given_its_plugin_says_nothing_of_the_stored_ones(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """`report --plugin FILE` on a results folder whose stored study names plugins: the user's copy gives the
    variants, so no note tells them to pass --plugin; without it, no note either: the report reads the runs, which
    hold what it needs (the study has no analysis step), so --trust-plugins would change nothing."""
    _swept(tmp_path / "a", range(2), 6)
    own = write(tmp_path / "mine" / "twostep.py", toy())
    args = ["report", "--study", "twostep", "--results-dir", str(tmp_path / "a")]
    assert main([*args, "--plugin", str(own)]) == 0
    assert "were not imported" not in capsys.readouterr().err
    main(args)
    assert "--trust-plugins" not in capsys.readouterr().err
