"""`bench compare` (the difference from a baseline and its interval, paired by seed where the runs pair, Welch's
otherwise; Holm's correction) and the compact `bench leaderboard`."""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from bench.analysis.comparison import AMBIGUOUS_NOTE, UNMATCHED_NOTE, compare_table, holm
from bench.analysis.stats import banded_cells, load_bands, primary_metrics, split_by_load_band, with_derived
from bench.cli import main
from bench.reports.markdown import render_comparison as render
from bench.runs.results import COLUMNS, ResultsStore

# Final validation losses per (variant, depth): three seeds each; "pinned" brings its own init (a field only it
# has a value of its own in), "broken" has one diverged seed that must not count.
LOSSES = {
    ("base", 6): [2.0, 2.1, 2.2],
    ("base", 24): [1.8, 1.9, 1.7],
    ("good", 6): [1.5, 1.6, 1.55],
    ("good", 24): [1.81, 1.85, 1.79],
    ("pinned", 6): [2.5, 2.4, 2.6],
    ("broken", 6): [1.0, 1.1, float("nan")],
}
INIT = {"base": "xavier", "good": "xavier", "pinned": "t_fixup", "broken": "xavier"}


def board() -> pd.DataFrame:
    rows = []
    for (variant, depth), losses in LOSSES.items():
        for seed, loss in enumerate(losses):
            config = f"{list(LOSSES).index((variant, depth)):08x}"
            row = dict.fromkeys(COLUMNS, None) | {
                "run_id": f"{variant}-d{depth}-tinytext-{config}-s{seed}", "config_hash": config, "variant": variant,
                "depth": depth, "task": "tinytext", "seed": seed, "init": INIT[variant], "lr": 1e-3,
                "status": "ok" if loss == loss else "diverged", "final_val_loss": loss,
                "peak_mem_mb": 100.0 + depth, "study": "s",
            }
            rows.append(row)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def test_holm_by_hand() -> None:
    # m = 4: sorted 0.01, 0.02, 0.03, 0.5 -> 0.04, max(0.04, 0.06), max(0.06, 0.06), max(0.06, 0.5)
    np.testing.assert_allclose(holm([0.03, 0.5, 0.01, 0.02]), [0.06, 0.5, 0.04, 0.06])
    out = holm([0.2, float("nan"), 0.9])  # NaN is not a test: m = 2
    np.testing.assert_allclose(out[[0, 2]], [0.4, 0.9])
    assert np.isnan(out[1])
    assert holm([0.6, 0.7]).tolist() == [1.0, 1.0]  # capped at 1


def test_each_row_against_the_baseline_at_its_depth() -> None:
    t = compare_table(board(), None, "base", ["final_val_loss"])
    by_key = {(r.variant, r.depth): r for r in t.itertuples()}
    good6, good24 = by_key[("good", 6)], by_key[("good", 24)]
    assert good6.diff == pytest.approx(np.mean(LOSSES[("good", 6)]) - np.mean(LOSSES[("base", 6)]))
    # good and base differ in the variant alone and share seeds 0-2: paired by seed (scipy's paired t)
    paired = sps.ttest_rel(LOSSES[("good", 24)], LOSSES[("base", 24)])
    d = np.subtract(LOSSES[("good", 24)], LOSSES[("base", 24)])
    half = sps.t.ppf(0.975, 2) * d.std(ddof=1) / np.sqrt(3)
    assert (good24.test, good24.pairs, good24.p) == ("paired t", 3, pytest.approx(paired.pvalue))
    assert (good24.diff_lo, good24.diff_hi) == pytest.approx((d.mean() - half, d.mean() + half))
    assert good24.p_exact == pytest.approx(0.75)  # d = .01, -.05, .09: 6 of its 8 sign patterns as far from 0
    broken = by_key[("broken", 6)]
    assert broken.n == 2 and broken.pairs == 2  # the diverged seed: no pair
    # -1 at both seeds (to within rounding): known exactly, no t test, no sign-flip p
    assert (broken.test, broken.diff, broken.diff_lo, broken.diff_hi) == ("exact", pytest.approx(-1.0), -1.0, -1.0)
    assert np.isnan(broken.p) and np.isnan(broken.p_exact)
    # the pinned init comes with the variant: compared at its depth all the same, but unpaired (two differences)
    welch = sps.ttest_ind(LOSSES[("pinned", 6)], LOSSES[("base", 6)], equal_var=False)
    pinned = by_key[("pinned", 6)]
    assert (pinned.test, pinned.p, pinned.diff) == ("Welch", pytest.approx(welch.pvalue), pytest.approx(0.4))
    assert np.isnan(pinned.pairs) and np.isnan(pinned.p_exact)
    assert np.isnan(by_key[("base", 6)].p) and np.isnan(by_key[("base", 6)].diff)
    ps = t["p"].to_numpy()
    np.testing.assert_allclose(t["p_holm"], holm(ps), equal_nan=True)
    assert (t["p_holm"].dropna() >= t["p"].dropna()).all()


def test_a_field_no_registered_variant_fixes_must_match_even_when_each_variant_holds_one_value() -> None:
    """resnet20 at lr 0.1 against plain20 at lr 0.02 was once compared (Welch, no note): lr was taken to come with
    the variant because each ran at one. The registry says what a variant fixes: admin its init, not its lr."""
    rows = []
    for i, (variant, init, lr, losses) in enumerate([("plain20", "kaiming", 0.02, [0.9, 0.8, 0.85]),
                                                     ("resnet20", "kaiming", 0.1, [0.5, 0.45, 0.55]),
                                                     ("preln", "xavier", 1e-3, [2.0, 2.1, 2.2]),
                                                     ("admin", "admin", 1e-3, [1.9, 2.0, 1.95])]):
        for seed, loss in enumerate(losses):
            rows.append(dict.fromkeys(COLUMNS, None) | {
                "run_id": f"{variant}-{i:08x}-s{seed}", "config_hash": f"{i:08x}", "variant": variant, "depth": 20,
                "task": "digits", "seed": seed, "init": init, "lr": lr, "status": "ok", "final_val_loss": loss})
    b = pd.DataFrame(rows, columns=list(COLUMNS))
    cnn = b[b["variant"].str.endswith("20")]
    cnn_table = compare_table(cnn, None, "plain20", ["final_val_loss"])
    resnet = cnn_table.set_index("variant").loc["resnet20"]
    assert np.isnan(resnet["diff"]) and pd.isna(resnet["test"])  # no baseline at lr 0.1: uncompared, and said
    assert cnn_table.attrs[UNMATCHED_NOTE] == (
        "Not compared: configurations that no configuration of plain20 matches in every field neither variant fixes "
        "(1 differing from every one of plain20's in lr); run plain20 at their settings to compare them.")
    lm = b[~b["variant"].str.endswith("20")]
    admin = compare_table(lm, None, "preln", ["final_val_loss"]).set_index("variant").loc["admin"]
    assert admin["test"] == "Welch" and admin["diff"] == pytest.approx(-0.15)  # admin's init is its own: compared


def test_throughput_timed_on_other_thread_counts_is_never_pooled_or_compared() -> None:
    """threads is no part of a configuration (it changes no result), but it changes a timing: 2-thread and 1-thread
    figures were once pooled into one cell and compared (Welch), the note blaming the load alone."""
    rows = []
    for i, (variant, threads) in enumerate([("preact", [1, 1]), ("resnet", [2, 2]), ("plain", [1, 2])]):
        for seed, t in enumerate(threads):
            rows.append(dict.fromkeys(COLUMNS, None) | {
                "run_id": f"{variant}-{i:08x}-s{seed}", "config_hash": f"{i:08x}", "variant": variant, "depth": 20,
                "task": "digits", "seed": seed, "status": "ok", "threads": t, "train_samples_per_s": 3000.0 * t + seed})
    b = pd.DataFrame(rows, columns=list(COLUMNS))
    assert load_bands(b, None).tolist() == ["1 thread", "1 thread", "2 threads", "2 threads", "1 thread", "2 threads"]
    t = compare_table(b, None, "preact", ["train_samples_per_s"])
    assert {(r.variant, r.machine): r.n for r in t.itertuples()} == {
        ("preact", "unrecorded at 1 thread"): 2, ("resnet", "unrecorded at 2 threads"): 2,
        ("plain", "unrecorded at 1 thread"): 1, ("plain", "unrecorded at 2 threads"): 1}
    assert t.set_index("variant")["diff"].isna().loc[["resnet"]].all()  # no preact timed on 2 threads
    same = b.assign(threads=1)
    assert load_bands(same, None).isna().all()  # one thread count: nothing to tell apart


def test_a_field_that_varies_within_a_variant_must_match() -> None:
    b = board()
    b.loc[(b["variant"] == "good") & (b["depth"] == 6), ["lr", "config_hash"]] = [3e-3, "ffffffff"]
    t = compare_table(b, None, "base", ["final_val_loss"])
    assert "lr" in t.columns
    row = t[(t["variant"] == "good") & (t["depth"] == 6)].iloc[0]
    assert np.isnan(row["p"])  # no baseline at lr 3e-3: left uncompared, never matched to another lr


def test_a_baseline_of_two_configurations_alike_leaves_its_rows_uncompared_and_the_note_names_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two configurations of the baseline that no recorded field tells apart (one seed of base at depth 6 under
    another hash, say a hand-edited folder): which one a row compares with is unknown, so it is compared with neither,
    and the note under the table says so, naming both hashes, instead of a silent dash."""
    b = board()
    odd = (b["variant"] == "base") & (b["depth"] == 6) & (b["seed"] == 2)
    b.loc[odd, ["run_id", "config_hash"]] = ["base-d6-tinytext-0000abcd-s2", "0000abcd"]
    t = compare_table(b, None, "base", ["final_val_loss"])
    at6 = t[(t["depth"] == 6) & (t["variant"] != "base")]
    assert sorted(at6["variant"]) == ["broken", "good", "pinned"] and at6["diff"].isna().all()
    assert t[(t["variant"] == "good") & (t["depth"] == 24)]["test"].tolist() == ["paired t"]  # the others compare
    note = ("Not compared: the baseline base has several configurations that a compared row matches, and nothing "
            "recorded tells them apart: variant=base, depth=6, task=tinytext, init=xavier (config_hash 00000000, "
            '0000abcd). Check these runs\' leaderboard rows and the "config" of their run JSONs: one of them may be '
            "damaged or missing.")
    assert t.attrs[AMBIGUOUS_NOTE] == note
    assert render(t, "markdown").endswith(f"\n\n{note}")
    assert AMBIGUOUS_NOTE not in compare_table(board(), None, "base", ["final_val_loss"]).attrs
    b.to_csv(tmp_path / "leaderboard.csv", index=False)
    assert main(["compare", "--results-dir", str(tmp_path), "--baseline", "base", "--format", "csv"]) == 0
    assert capsys.readouterr().err.splitlines()[-1] == note  # after the warning that no row has its run JSON


def test_a_lost_run_json_keeps_every_column_and_comparison(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two configurations per design that differ only in a field the leaderboard does not hold (eval_every), one run
    JSON lost: the run is of its configuration all the same, so the field stays a column and every row is
    compared (the lost file hid the field, showed two rows alike and blanked every difference)."""
    from bench.runs.config import RunConfig

    store = ResultsStore(tmp_path)
    for k, (variant, every) in enumerate([(v, e) for v in ("plain", "highway") for e in (30, 150)]):
        for seed in range(3):
            cfg = RunConfig(variant=variant, depth=6, task="tinytext", seed=seed, eval_every=every)
            row = {"run_id": cfg.run_id, "config_hash": cfg.config_hash(), "variant": variant, "depth": 6,
                   "task": "tinytext", "seed": seed, "status": "ok", "final_val_loss": 2.0 - k / 10 + seed / 100}
            store.append(row, {"run_id": cfg.run_id, "row": row, "config": cfg.to_dict()})
    lost = RunConfig(variant="plain", depth=6, task="tinytext", seed=0, eval_every=30).run_id
    (tmp_path / "runs" / f"{lost}.json").unlink()
    assert main(["compare", "--results-dir", str(tmp_path), "--baseline", "plain", "--format", "csv"]) == 0
    out = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(out.columns[:4]) == ["variant", "depth", "task", "eval_every"]
    highway = out[out["variant"] == "highway"].set_index("eval_every")
    assert highway["diff"].to_dict() == pytest.approx({30: -0.2, 150: -0.2})
    assert highway["test"].tolist() == ["exact", "exact"] and highway["pairs"].tolist() == [3, 3]


def test_errors_name_the_fix() -> None:
    with pytest.raises(ValueError, match=r"baseline 'nope' has no runs here; variants present: base, broken"):
        compare_table(board(), None, "nope", ["final_val_loss"])
    with pytest.raises(ValueError, match=r"unknown metric\(s\) \['loss'\]"):
        compare_table(board(), None, "base", ["loss"])
    with pytest.raises(ValueError, match="format must be one of"):
        render(compare_table(board(), None, "base", ["final_val_loss"]), "html")


def test_formats() -> None:
    t = compare_table(board(), None, "base", ["final_val_loss", "peak_mem_mb"])
    md = render(t, "markdown").splitlines()
    # the difference and its interval first, the test and its n, p second
    assert md[0] == "| variant | depth | task | init | metric | diff [95% CI] | test | p | p (Holm) | mean ± CI (n) |"
    assert len(md) == 2 + len(t)
    good24 = next(line for line in md if line.startswith("| good | 24 |") and "final_val_loss" in line).split(" | ")
    assert good24[5:8] == ["+0.01667 [-0.158 … +0.191]", "paired t, 3 seeds", "0.721 (exact 0.75)"]
    pinned = next(line for line in md if line.startswith("| pinned | 6 |") and "final_val_loss" in line).split(" | ")
    assert pinned[6] == "Welch, 3 + 3 runs"
    mem = next(line for line in md if line.startswith("| good | 24 |") and "peak_mem_mb" in line).split(" | ")
    # a cost figure is never paired (one per machine), and two constant sides make no test: equal, said so
    assert mem[5:8] == ["0", "equal: no spread, no test", "—"]
    back = pd.read_csv(io.StringIO(render(t, "csv")))
    np.testing.assert_allclose(back["p_holm"], t["p_holm"], equal_nan=True)
    assert "\\begin{tabular}" in render(t, "latex")


def write(tmp_path: Path) -> Path:
    b = board()
    b.to_csv(tmp_path / "leaderboard.csv", index=False)
    return tmp_path


def test_compare_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = str(write(tmp_path))
    assert main(["compare", "--results-dir", d, "--baseline", "base", "--where", "depth=24", "--format", "csv"]) == 0
    out = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert sorted(out["variant"]) == ["base", "good"] and set(out["depth"]) == {24}
    assert set(out["metric"]) == {"final_val_loss"}  # tinytext's primary metric, the default
    for flag in ("--metrics", "--metric"):  # the spelling of `bench leaderboard`, and the earlier one
        assert main(["compare", "--results-dir", d, "--baseline", "base", "--where", "depth=24", "--format", "csv",
                     flag, "peak_mem_mb", "final_val_loss"]) == 0
        assert set(pd.read_csv(io.StringIO(capsys.readouterr().out))["metric"]) == {"peak_mem_mb", "final_val_loss"}
    assert main(["compare", "--results-dir", d, "--baseline", "nope"]) == 2
    assert "error: baseline 'nope' has no runs here" in capsys.readouterr().err
    assert main(["compare", "--results-dir", d, "--baseline", "base", "--where", "depth"]) == 2
    assert "--where wants COLUMN=VALUE" in capsys.readouterr().err
    assert main(["compare", "--results-dir", d, "--baseline", "base", "--study", "t"]) == 2
    assert "no runs of study 't'" in capsys.readouterr().err


def test_compact_leaderboard(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = write(tmp_path)
    full_csv, full_json = tmp_path / "full.csv", tmp_path / "full.json"
    args = ["leaderboard", "--results-dir", str(d), "--metrics", "final_val_loss", "--sort", "final_val_loss",
            "--ascending", "--csv", str(full_csv), "--json", str(full_json)]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    table = [line for line in lines if not line.startswith("full table")]
    assert table[0].split() == ["variant", "depth", "task", "init", "n_runs", "n_failed", "final_val_loss"]
    first = table[1].split()  # sorted ascending by the mean: the diverged seed's config first (mean 1.05, n 2)
    assert first[:2] == ["broken", "6"] and " ".join(first[-4:]) == "1.05 ± 0.64 (2)"
    full = pd.read_csv(full_csv)
    assert {"final_val_loss_mean", "final_val_loss_ci", "final_val_loss_median"} <= set(full.columns)
    assert len(json.loads(full_json.read_text())) == len(full) == len(LOSSES)
    assert main(["leaderboard", "--results-dir", str(d), "--metrics", "loss"]) == 2
    assert "unknown metric(s) ['loss']" in capsys.readouterr().err
    assert main(["leaderboard", "--results-dir", str(d), "--sort", "nope"]) == 2
    assert "cannot sort by 'nope'" in capsys.readouterr().err


def test_store_reads_the_written_board(tmp_path: Path) -> None:
    assert len(ResultsStore(write(tmp_path)).load_leaderboard()) == sum(map(len, LOSSES.values()))


def test_a_language_models_leaderboard_and_compare_default_to_its_loss(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """tinytext is a language model: its primary metric is the validation loss (not accuracy, a classifier's)."""
    d = str(write(tmp_path))
    assert main(["leaderboard", "--results-dir", d]) == 0
    header = capsys.readouterr().out.splitlines()[0].split()
    assert header[-4:] == ["final_val_loss", "final_train_loss", "train_tokens_per_s", "peak_mem_mb"]
    assert main(["compare", "--results-dir", d, "--baseline", "base", "--format", "csv"]) == 0
    assert set(pd.read_csv(io.StringIO(capsys.readouterr().out))["metric"]) == {"final_val_loss"}
    digits = with_derived(board().assign(task="digits", final_val_acc=0.9))
    assert compare_table(digits, None, "base", primary_metrics(digits))["metric"].unique().tolist() == ["val_error"]
    assert primary_metrics(board().assign(task="digits")) == ["final_val_loss"]  # no accuracy recorded: the loss


def test_constants_are_equal_or_exact_never_tested_and_warn_nothing() -> None:
    """A parameter count (the same in every run) against the baseline's: no t test on a constant. The same count:
    `equal`, a difference of exactly 0 (not a rounding's +2.2e-17); another count: `exact`, its difference, no p and
    no sign-flip p. Values equal but for rounding (0.1 + 0.2 vs 0.3) are equal too, and scipy warns of nothing."""
    b = board()
    b["params"] = np.where(b["variant"] == "good", 1013.0, 1000.0)
    b["ratio"] = np.where(b["variant"] == "good", 0.1 + 0.2, 0.3) * (1 + (b["seed"] == 2) * 2**-52)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a library's warning would reach the user's terminal
        t = compare_table(b, None, "base", ["params", "ratio"])
    rows = {(r.variant, r.depth, r.metric): r for r in t.itertuples()}
    same, other = rows[("pinned", 6, "params")], rows[("good", 6, "params")]
    assert (same.test, same.diff, same.diff_lo, same.diff_hi) == ("equal", 0.0, 0.0, 0.0)
    assert (other.test, other.diff, other.diff_lo, other.diff_hi, other.pairs) == ("exact", 13.0, 13.0, 13.0, 3)
    for r in (same, other, rows[("good", 6, "ratio")]):
        assert np.isnan(r.p) and np.isnan(r.p_exact) and np.isnan(r.p_holm)
    assert (rows[("good", 6, "ratio")].test, rows[("good", 6, "ratio")].diff) == ("equal", 0.0)
    md = render(t)
    assert "| good | 6 | tinytext | xavier | params | +13 | exact: no spread, no test | — | — |" in md
    assert "| pinned | 6 | tinytext | t_fixup | params | 0 | equal: no spread, no test | — | — |" in md


# Throughput of preact and its plugin rival at depth 8, timed once per configuration by its seed 0 (seed 1 copies it)
# at load 2.4 on 2 CPUs, and by a colleague's merged seed 2 at load 6: (samples/s at seed 0, at seed 2).
SPEEDS = {"preact": (4525.0, 1454.0), "preact_abmix": (7275.0, 2600.0)}


def timed_once() -> tuple[pd.DataFrame, list[dict[str, object]]]:
    """A results folder whose every timing was made once, in one of two load bands."""
    rows, runs = [], []
    for k, (variant, (quiet, busy)) in enumerate(SPEEDS.items()):
        for seed in range(3):
            run_id = f"{variant}-d8-digits-{k:08x}-s{seed}"
            source = run_id if seed != 1 else f"{variant}-d8-digits-{k:08x}-s0"
            rows.append(dict.fromkeys(COLUMNS, None) | {
                "run_id": run_id, "config_hash": f"{k:08x}", "variant": variant, "depth": 8, "task": "digits",
                "seed": seed, "status": "ok", "final_val_loss": 0.3 + seed * (1 + k) / 100 + k / 10,
                "cost_source": source, "train_samples_per_s": busy if seed == 2 else quiet, "study": "abmix"})
            runs.append({"run_id": run_id, "measurements": {"load": {"load_1m": 6.0 if seed == 2 else 2.4, "cpus": 2}}})
    return pd.DataFrame(rows, columns=list(COLUMNS)), runs


def test_the_banded_cells_are_each_configurations_figures_per_load_band_and_none_where_one_band_holds_them() -> None:
    """One generator groups the rows by configuration and machine for the compare note's spread and the
    leaderboard's banded cells: per configuration timed in two bands, its samples/s per band, in band order."""
    board, runs = timed_once()
    got = [(group["variant"].iloc[0], metric, [(band, s["mean"], s["n"]) for band, s in cells])
           for group, metric, cells in banded_cells(board, runs)]
    assert got == [("preact", "train_samples_per_s", [("load/CPU 1-2", 4525.0, 1), ("load/CPU 2-4", 1454.0, 1)]),
                   ("preact_abmix", "train_samples_per_s", [("load/CPU 1-2", 7275.0, 1), ("load/CPU 2-4", 2600.0, 1)])]
    assert split_by_load_band(board, runs)
    one_band = board[board["seed"] != 2]
    assert list(banded_cells(one_band, runs)) == [] and not split_by_load_band(one_band, runs)
    assert list(banded_cells(board, runs, ["final_val_loss"])) == []  # no cost figure: no bands


def test_a_difference_of_one_timing_against_one_is_no_result_and_the_note_says_what_ranks_designs() -> None:
    """The +2750 samples/s of one timing against one (each made at its own moment, in one band) makes no test; the
    note under the table quotes preact's own 3.1x spread across bands and the bench cost command."""
    board, runs = timed_once()
    t = compare_table(board, runs, "preact", ["train_samples_per_s", "final_val_loss"])
    speed = t[(t["metric"] == "train_samples_per_s") & (t["variant"] == "preact_abmix")].set_index("machine")
    assert list(speed["test"]) == ["one timing", "one timing"] and list(speed["diff"]) == [2750.0, 1146.0]
    loss = t[(t["metric"] == "final_val_loss") & (t["variant"] == "preact_abmix")]
    assert list(loss["test"]) == ["paired t"]  # a convergence metric is tested as before
    md = render(t)
    assert ("| preact_abmix | 8 | digits | unrecorded at load/CPU 1-2 | train_samples_per_s | +2750 | "
            "one timing each: no test | — | — | 7275 ± — (1) |") in md
    assert md.endswith("\n\n" + TIMED_NOTE.format(
        " (here preact, depth 8, digits: train_samples_per_s 1454 to 4525 across load bands, 3.11x)"))
    t = compare_table(board[board["seed"] != 2], runs, "preact", ["train_samples_per_s"])  # one band: no spread shown
    assert "timings change with the load on it. To rank" in render(t)
    quiet = compare_table(board[board["seed"] != 2], runs, "preact", ["final_val_loss"])
    assert "Timed by separate runs" not in render(quiet) and not quiet.attrs  # no timed figure: no note


def test_a_difference_of_two_timings_a_side_keeps_its_test_and_the_note_says_what_such_timings_are() -> None:
    """Each seed timed by its own run, all in one load band: the -1225 samples/s between 2 + 2 timings keeps its Welch
    test (a fair test of those timings), and the note under the table still says they were taken by separate runs,
    each at its own moment, so the difference is confounded with the load then, and names the bench cost command."""
    rows, runs = [], []
    for k, (variant, speeds) in enumerate({"preact": (4525.0, 4325.0), "preact_abmix": (3100.0, 3300.0)}.items()):
        for seed, speed in enumerate(speeds):
            run_id = f"{variant}-d20-digits-{k:08x}-s{seed}"
            rows.append(dict.fromkeys(COLUMNS, None) | {
                "run_id": run_id, "config_hash": f"{k:08x}", "variant": variant, "depth": 20, "task": "digits",
                "seed": seed, "status": "ok", "final_val_loss": 0.3 + seed / 100, "cost_source": run_id,
                "train_samples_per_s": speed, "study": "abmix"})
            runs.append({"run_id": run_id, "measurements": {"load": {"load_1m": 2.4, "cpus": 2}}})
    t = compare_table(pd.DataFrame(rows, columns=list(COLUMNS)), runs, "preact", ["train_samples_per_s"])
    (speed,) = t[t["variant"] == "preact_abmix"].itertuples()
    assert (speed.test, speed.n, speed.n_base, speed.diff) == ("Welch", 2, 2, -1225.0)
    assert speed.p == pytest.approx(sps.ttest_ind([3100.0, 3300.0], [4525.0, 4325.0], equal_var=False).pvalue)
    md = render(t)
    assert "| preact_abmix | 20 | digits | train_samples_per_s | -1225 [" in md and "| Welch, 2 + 2 runs |" in md
    assert md.endswith("\n\n" + TIMED_NOTE.format("").replace("--depth 8", "--depth 20"))


# The note under a table showing timed figures' difference, the spread it quotes left as {}.
TIMED_NOTE = (
    "Timed by separate runs: each timed cost figure here (throughput, step time) was taken by the run that measured "
    "it, at its own moment on the wall clock, so a difference between designs is confounded with the load on the "
    "machine at those moments: with one timing on a side it gets no test, and with more a test says whether those "
    "timings differ, not which design is faster. On a shared machine one configuration's timings change with the "
    "load on it{}. To rank designs' cost, time them side by side, alternating steps: `python -m bench cost --designs "
    "preact_abmix --baseline preact --shape digits --depth 8` (`--plugin` for your own designs).")


def test_times_read_off_the_wall_clock_are_timed_figures_never_paired_by_seed(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Both designs reach the target at step 90 at every seed; each run's time to it (and its whole time) moves with
    the load at the run's own moments, so the difference is compared unpaired, with the note under the table, never
    as a paired t on seeds that share nothing of the load."""
    times = {"plain": ([5.0, 6.0, 7.0], [40.0, 42.0, 44.0]), "highway": ([10.0, 11.5, 12.0], [80.0, 81.0, 85.0])}
    rows = []
    for k, (variant, (to_target, wall)) in enumerate(times.items()):
        for seed in range(3):
            rows.append(dict.fromkeys(COLUMNS, None) | {
                "run_id": f"{variant}-d20-digits-{k:08x}-s{seed}", "config_hash": f"{k:08x}", "variant": variant,
                "depth": 20, "task": "digits", "seed": seed, "status": "ok", "target_acc": 0.9,
                "steps_to_target": 90, "time_to_target_s": to_target[seed], "wall_time_s": wall[seed], "study": "s"})
    pd.DataFrame(rows, columns=list(COLUMNS)).to_csv(tmp_path / "leaderboard.csv", index=False)
    assert main(["compare", "--results-dir", str(tmp_path), "--baseline", "plain", "--metrics", "time_to_target_s",
                 "steps_to_target", "wall_time_s"]) == 0
    out = capsys.readouterr().out
    p = sps.ttest_ind([10.0, 11.5, 12.0], [5.0, 6.0, 7.0], equal_var=False).pvalue
    assert f"| highway | 20 | digits | time_to_target_s | +5.167 [+2.85 … +7.48] | Welch, 3 + 3 runs | {p:.3g} |" in out
    assert "| highway | 20 | digits | wall_time_s | +40 [" in out and "paired" not in out
    assert "| highway | 20 | digits | steps_to_target | 0 | equal: no spread, no test |" in out
    assert out.rstrip().endswith(
        "Timed by separate runs: each timed figure here (time to the target, a run's whole time) was taken by the run "
        "that measured it, at its own moment on the wall clock, so a difference between designs is confounded with "
        "the load on the machine at those moments: with one timing on a side it gets no test, and with more a test "
        "says whether those timings differ, not which design is faster. Steps to the target (`steps_to_target`) are "
        "counted, not timed: they say which design reaches it in fewer steps, whatever the load. On a shared machine "
        "one configuration's timings change with the load on it. To rank designs' cost, time them side by side, "
        "alternating steps: `python -m bench cost --designs highway --baseline plain --shape digits --depth 20` "
        "(`--plugin` for your own designs).")
    # One run of each: no test, as for a throughput timed once.
    one = pd.DataFrame(rows[:1] + rows[3:4], columns=list(COLUMNS))
    assert list(compare_table(one, None, "plain", ["time_to_target_s"]).dropna(subset=["diff"])["test"]) == [
        "one timing"]
