"""``bench compare``: chosen metrics per configuration, side by side, each against a named baseline variant.

One row per configuration (seeds pooled, nothing else: :mod:`bench.analysis.stats`' rules) and metric, with the
mean, the 95% t CI half-width and the number of counted runs; every row whose variant is not the baseline is
compared with the baseline's configuration that matches it in every field the variant does not itself fix:

- **Matching.** The fields that tell configurations apart (:func:`bench.analysis.stats.by_configuration`: variant,
  depth, task and every other differing one) except the variant and the fields the row's variant or the baseline
  fixes (its registration's ``fixed``: a paper's init, say, which comes with the variant; for a variant the registry
  does not know, the fields every variant holds at one value of its own). Any other field, a learning rate that
  differs, must match: a row with no matching baseline is left uncompared, and ``table.attrs[UNMATCHED_NOTE]`` says
  in which field such rows differ from every baseline configuration. A row
  that several of the baseline's configurations match (they differ in no field the runs record: a damaged or
  hand-made results folder) is left uncompared too, and ``table.attrs[AMBIGUOUS_NOTE]`` names those configurations
  by their ``config_hash``, so that no comparison goes missing unsaid.
- **Test.** Where a row and its baseline differ in the variant alone (no field the variant implies, such as a
  pinned init) and share seeds, the runs are **paired by seed** (:mod:`bench.analysis.pairing`): ``diff`` is the
  mean of the per-seed differences, its 95% t interval ``[diff_lo, diff_hi]`` and p over ``pairs`` seeds (and,
  for few pairs, the exact sign-flip ``p_exact``). Otherwise Welch's t-test (unequal variances, two-sided),
  ``diff = mean - mean(baseline)`` and its 95% Welch interval. ``test`` names which; at least two counted runs a
  side, else no interval and no p-value. A cost figure a sweep measured once and copied into its other seeds' rows
  counts once (:func:`bench.analysis.stats.observations`): ``n = 1``, no p-value from copies, never paired. A timed
  figure (throughput, step time, and what each run reads off the wall clock: its time to the target, its evaluation
  and whole time) is never paired, and with one timing on a side it is no result: ``test`` reads
  :data:`bench.analysis.timed.ONCE`. Wherever a timed figure's difference is shown, whatever its n (separate
  runs' timings, each at its own moment: the difference is confounded with the load then), ``table.attrs[ONCE_NOTE]``
  holds the line saying so and which ``bench cost`` command ranks the designs (:mod:`bench.analysis.timed`).
- **Cost per machine.** Where the runs were measured on several machines (:func:`bench.analysis.stats.aggregate_long`),
  a cost metric has a row per configuration and machine (the ``machine`` column), compared with the baseline's runs
  on the same machine only; convergence metrics pool the machines (their ``machine`` reads ``all``). With the run
  JSONs, a machine's figures measured in different bands of load per CPU (:data:`bench.analysis.stats.LOAD_BANDS`)
  are kept apart the same way, the ``machine`` column naming the band (``3f2a1b0c at load/CPU 2-4``).
- **Multiple comparisons.** Holm's step-down correction (Holm 1979, "A simple sequentially rejective multiple
  test procedure") over every p-value of the table, all metrics together: ``p_holm`` controls the family-wise
  error rate of the whole table.

The numbers are :func:`bench.analysis.stats.aggregate_long`'s, the ones ``bench report`` and the leaderboard show.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from bench.analysis.pairing import difference, seeded
from bench.analysis.stats import (
    CONFIG_KEY,
    DEFAULT_BY,
    MACHINE_KEY,
    aggregate_long,
    by_configuration,
    counted_rows,
    machines_of,
    with_config_hash,
    with_load_bands,
)
from bench.analysis.timed import ONCE, band_spread, cost_command, note, rests_on_one_timing, shows_timed_difference
from bench.runs import registry_index

ONCE_NOTE = "timed_note"  # the key in ``table.attrs`` of the line on differences between separate runs' timings
AMBIGUOUS_NOTE = "ambiguous_note"  # the key in ``table.attrs`` of the line on rows with several baselines
UNMATCHED_NOTE = "unmatched_note"  # the key in ``table.attrs`` of the line on rows no baseline configuration matches
COLUMNS = ("metric", "n", "mean", "ci", "diff", "diff_lo", "diff_hi", "test", "pairs", "n_base", "p", "p_exact",
           "p_holm")


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm-adjusted p-values: the k-th smallest of m is ``max_{j<=k} min(1, (m - j + 1)·p_(j))``. NaN stays NaN
    and does not count in m."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, math.nan)
    idx = np.flatnonzero(np.isfinite(p))
    m = idx.size
    running = 0.0
    for rank, i in enumerate(idx[np.argsort(p[idx], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def compare_table(
    board: pd.DataFrame,
    runs: Sequence[Mapping[str, Any]] | None,
    baseline: str,
    metrics: Sequence[str],
    base: Sequence[str] = DEFAULT_BY,
    ignore: Sequence[str] = (),
) -> pd.DataFrame:
    """The comparison table (module docstring): columns ``*by, metric, n, mean, ci, diff, diff_lo, diff_hi, test,
    pairs, n_base, p, p_exact, p_holm`` (the difference's columns empty on the baseline's rows), then
    ``config_hash`` where the runs have one (which runs a row pools: :mod:`bench.analysis.multiplier_columns` joins
    on it).

    ``ignore``: configuration fields a row and its baseline may differ in (``study`` and ``preset``, when the
    baseline's runs come from another study of the results directory). ValueError when ``baseline`` has no run in
    ``board`` or a metric is not a leaderboard column.
    """
    if board.empty or baseline not in set(board["variant"]):
        present = ", ".join(sorted(map(str, board["variant"].unique()))) if not board.empty else "none"
        raise ValueError(f"baseline {baseline!r} has no runs here; variants present: {present}")
    missing = [m for m in metrics if m not in board.columns]
    if missing:
        raise ValueError(f"unknown metric(s) {missing}; leaderboard columns: {', '.join(board.columns)}")
    spread = band_spread(board, runs, metrics)  # before the bands become machines: one configuration's spread
    board = with_load_bands(board, runs)  # cost figures measured at different loads are kept apart, as machines are
    named, by = by_configuration(with_config_hash(board), runs, base)
    by = [f for f in by if f not in ignore]
    pinned = _pinned(named, by, base)
    table = aggregate_long(named, by, metrics)  # grouped by config_hash too: one configuration per row
    runs_of = dict(tuple(named.groupby(CONFIG_KEY, sort=False)))
    per_machine = MACHINE_KEY in table.columns  # several machines: a cost metric's rows are per machine

    def implied(row: pd.Series) -> list[str]:
        """The fields the row's variant or the baseline fix: they may differ, and then the runs do not pair."""
        return [f for f in by if f in pinned[row["variant"]] | pinned[baseline]]

    ambiguous: dict[tuple[Any, ...], list[str]] = {}  # the shown fields of a baseline with several configurations
    unmatched: dict[str, set[tuple[Any, ...]]] = {}  # per field no baseline configuration matches: the rows' keys

    def matched(row: pd.Series) -> pd.Series | None:
        cand = table[(table["variant"] == baseline) & (table["metric"] == row["metric"])]
        own = implied(row)
        for f in [*(f for f in by if f != "variant" and f not in own), *([MACHINE_KEY] if per_machine else [])]:
            cand = cand[cand[f].isna()] if pd.isna(row[f]) else cand[cand[f] == row[f]]
            if cand.empty:  # the first field whose value no baseline configuration left has
                unmatched.setdefault(f, set()).add(tuple(row[g] for g in by))
                return None
        if len(cand) > 1:
            key = tuple(cand.iloc[0][f] for f in by)
            hashes = cand[CONFIG_KEY] if CONFIG_KEY in cand.columns else pd.Series(dtype=object)
            ambiguous.setdefault(key, sorted({str(h) for h in hashes.dropna()}))
        return cand.iloc[0] if len(cand) == 1 else None

    def rows_of(row: pd.Series) -> pd.DataFrame:
        rows = runs_of[row[CONFIG_KEY]]
        return rows[machines_of(rows) == row[MACHINE_KEY]] if per_machine and pd.notna(row[MACHINE_KEY]) else rows

    found: list[dict[str, Any]] = []
    timed = np.zeros(len(table), dtype=bool)  # the rows showing a difference of timed figures: the note follows them
    for i, (_, row) in enumerate(table.iterrows()):
        ref = None if row["variant"] == baseline else matched(row)
        if ref is None:
            found.append({})
            continue
        metric = row["metric"]
        (x, seeds), (base_x, base_seeds) = (seeded(counted_rows(rows_of(r), metric), metric) for r in (row, ref))
        alone = all(_same(row[f], ref[f]) for f in implied(row))  # the variant is the one difference: they pair
        pair = difference(x, base_x, seeds if alone else None, base_seeds if alone else None)
        single = not pair.test and rests_on_one_timing(metric, pair.n, pair.n_base)  # no test; the note says why
        timed[i] = shows_timed_difference(metric, (pair.n, pair.n_base))
        found.append({"diff": pair.diff, "diff_lo": pair.low, "diff_hi": pair.high,
                      "test": ONCE if single else pair.test or None,
                      "pairs": pair.pairs or None, "n_base": pair.n_base, "p": pair.p,
                      "p_exact": pair.p_exact})
    stats = pd.DataFrame(found, index=table.index, columns=list(COLUMNS[4:-1]))
    table = table.assign(**{c: stats[c] for c in stats.columns})
    table["p_holm"] = holm(table["p"].to_numpy(dtype=float))
    if per_machine:  # which machine a figure came from; a convergence metric's are all of them
        table[MACHINE_KEY] = table[MACHINE_KEY].astype(object).where(table[MACHINE_KEY].notna(), "all")
    key = [CONFIG_KEY] if CONFIG_KEY in table.columns and CONFIG_KEY not in by else []  # a row's runs, for a join
    out = table[[*by, *([MACHINE_KEY] if per_machine else []), *COLUMNS, *key]].reset_index(drop=True)
    if ambiguous:
        out.attrs[AMBIGUOUS_NOTE] = ambiguous_note(baseline, by, ambiguous)
    if unmatched:
        out.attrs[UNMATCHED_NOTE] = (
            f"Not compared: configurations that no configuration of {baseline} matches in every field neither variant "
            "fixes (" + "; ".join(f"{len(keys)} differing from every one of {baseline}'s in {f}"
                                  for f, keys in unmatched.items()) + f"); run {baseline} at their settings to compare "
            "them.")
    if timed.any():
        shown = table[timed]
        out.attrs[ONCE_NOTE] = note(spread, cost_command(list(dict.fromkeys(shown["variant"])), baseline,
                                                         list(shown["depth"]) if "depth" in shown.columns else [],
                                                         list(shown["task"]) if "task" in shown.columns else []),
                                    list(shown["metric"]))
    return out


def _pinned(named: pd.DataFrame, by: Sequence[str], base: Sequence[str]) -> dict[Any, set[str]]:
    """Per variant of ``named``, the fields of ``by`` (beyond ``base``) that it fixes: its registration's ``fixed``
    (:func:`bench.runs.registry_index.fixes`). A variant the registry does not know (a plugin's, read without it)
    is taken to fix the fields every variant here holds at one value of its own: all that its runs can say."""
    free = [f for f in by if f not in base]
    own = {f for f in free if (named.groupby("variant")[f].nunique(dropna=False) <= 1).all()}
    out = {}
    for variant in named["variant"].unique():
        known = registry_index.fixes(str(variant))
        out[variant] = own if known is None else {f for f in free if f in known}
    return out


def ambiguous_note(baseline: str, by: Sequence[str], ambiguous: Mapping[tuple[Any, ...], Sequence[str]]) -> str:
    """The line under a comparison saying which rows of ``baseline`` match a compared row in several configurations
    (``ambiguous``: the rows' ``by`` values -> their config hashes), so that the rows they would compare with are
    left uncompared."""
    shown = "; ".join(
        f"{', '.join(f'{f}={v}' for f, v in zip(by, key, strict=True))} (config_hash "
        f"{', '.join(hashes) if hashes else 'unrecorded'})" for key, hashes in ambiguous.items())
    return (f"Not compared: the baseline {baseline} has several configurations that a compared row matches, and "
            f"nothing recorded tells them apart: {shown}. Check these runs' leaderboard rows and the \"config\" of "
            "their run JSONs: one of them may be damaged or missing.")


def _same(a: Any, b: Any) -> bool:
    """Two configuration values equal (two missing ones too)."""
    return bool(pd.isna(a) and pd.isna(b)) if pd.isna(a) or pd.isna(b) else bool(a == b)
