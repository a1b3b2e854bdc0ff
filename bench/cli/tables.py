"""The tables of a results directory: ``leaderboard`` and ``compare`` (neither imports torch, the variant modules or
matplotlib: :mod:`bench.runs.registry_index`; the figures and the report are :mod:`bench.cli.figures`)."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

import pandas as pd

from bench.analysis.comparison import compare_table
from bench.analysis.multiplier_columns import has_budget, with_multipliers
from bench.analysis.stats import (
    CONFIG_KEY,
    MACHINE_KEY,
    aggregate,
    by_configuration,
    cost_by_band,
    headline_metrics,
    load_bands,
    machines_of,
    primary_metrics,
    several_machines,
    with_config_hash,
    with_derived,
)
from bench.reports.markdown import COMPARISON_NOTES, MISSING, render_comparison
from bench.runs.reading import read_heads, read_runs
from bench.runs.results import ResultsStore


def _board(ns: argparse.Namespace, study: str | None) -> tuple[pd.DataFrame, list[Any]]:
    """The leaderboard (only ``study``'s runs when given) and the run JSONs' heads (no curves, no probes)."""
    store = ResultsStore(ns.results_dir)
    board, heads = store.load_leaderboard(), read_heads(ns.results_dir)  # the tables read configurations, never curves
    store.warn_missing(board, heads)
    if study and not board.empty:
        if study not in set(board["study"].dropna()):
            studies = ", ".join(sorted(map(str, board["study"].dropna().unique()))) or "none"
            raise ValueError(f"no runs of study {study!r} in {ns.results_dir}; studies there: {studies}")
        board = board[board["study"] == study].reset_index(drop=True)
    return board, heads


def _cell(mean: float, ci: float, n: float) -> str:
    """``mean ± CI (n)``: the 95% t half-width over the counted runs; one run has no CI."""
    if not n:
        return MISSING
    if n == 1 or not math.isfinite(ci):
        return f"{mean:.4g} ({int(n)})"
    return f"{mean:.4g} ± {ci:.2g} ({int(n)})"


def _by_load_band(full: pd.DataFrame, named: pd.DataFrame, runs: Any, by: list[str], metrics: list[str]
                  ) -> pd.DataFrame:
    """``full`` where a row's cost figures of a metric were measured in several load bands: that metric's pooled
    statistics blanked and each band's figure in ``<metric>_by_load_band`` (``4525 (n=1, load/CPU 1-2); ...``),
    so no cell averages two loads (:func:`bench.analysis.stats.cost_by_band`); else ``full`` as it is."""
    named = with_config_hash(named)
    if several_machines(named):
        named = named.assign(**{MACHINE_KEY: machines_of(named)})
    keys = [k for k in (*by, CONFIG_KEY, MACHINE_KEY) if k in full.columns and k in named.columns]
    bands = load_bands(named, runs)
    parts = {tuple(map(str, k if isinstance(k, tuple) else (k,))): g
             for k, g in named.groupby(keys, sort=False, dropna=False)}
    for m in metrics:
        for i, key in enumerate(full[keys].astype(str).itertuples(index=False, name=None)):
            part = parts.get(key)
            split = cost_by_band(part, m, bands.loc[part.index]) if part is not None else []
            if not split:
                continue
            if f"{m}_by_load_band" not in full.columns:
                full = full.assign(**{f"{m}_by_load_band": None})
            pooled = [c for c in full.columns if c.startswith(f"{m}_") and c != f"{m}_by_load_band"]
            full.loc[full.index[i], pooled] = math.nan
            full.loc[full.index[i], f"{m}_by_load_band"] = "; ".join(
                f"{s['mean']:.4g} (n={int(s['n'])}, {band})" for band, s in split)
    return full


WALL_NOTE = ("wall_time_s: each run's whole time, its cost-measurement phases (throughput, memory, FLOPs) included "
             "where it measured its cost figures itself; a run that reused another run's (its cost_source) ran none. "
             "A cell marked 'k measuring' pools k runs that measured with n - k that did not.")


def _measuring(full: pd.DataFrame, named: pd.DataFrame, by: list[str]) -> list[int | None]:
    """Per row of ``full``: how many of its runs measured their own cost figures (``cost_source`` is the run), where
    its runs mix such runs with runs that reused another's figures; else None (no mark)."""
    if "cost_source" not in named.columns:
        return [None] * len(full)
    named = with_config_hash(named)
    if several_machines(named):
        named = named.assign(**{MACHINE_KEY: machines_of(named)})
    keys = [k for k in (*by, CONFIG_KEY, MACHINE_KEY) if k in full.columns and k in named.columns]
    measured = named["cost_source"].astype(str) == named["run_id"].astype(str)
    counts = {tuple(map(str, k if isinstance(k, tuple) else (k,))): (int(m.sum()), len(m))
              for k, m in measured.groupby([named[k] for k in keys], sort=False, dropna=False)}
    out: list[int | None] = []
    for key in full[keys].astype(str).itertuples(index=False, name=None):
        k, n = counts.get(key, (0, 0))
        out.append(k if 0 < k < n else None)
    return out


def cmd_leaderboard(ns: argparse.Namespace) -> int:
    df, runs = _board(ns, ns.study)
    if df.empty:
        print(f"no runs in {ns.results_dir}")
        return 0
    df = with_derived(df)  # train_error, val_error: a classifier's primary metric
    metrics = list(ns.metrics or headline_metrics(df))
    unknown = [m for m in metrics if m not in df.columns]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; leaderboard columns: {', '.join(df.columns)}")
    # Seeds pool only with seeds: one row per configuration, showing the fields in which configurations differ.
    named, by = by_configuration(df, runs)
    full = _by_load_band(aggregate(named, by=by, metrics=metrics), named, runs, by, metrics)
    if ns.sort:
        key = ns.sort if ns.sort in full.columns else f"{ns.sort}_mean"
        if key not in full.columns:
            raise ValueError(f"cannot sort by {ns.sort!r}; choose a metric ({', '.join(metrics)}) or one of: "
                             f"{', '.join(map(str, full.columns))}")
        full = full.sort_values(key, ascending=ns.ascending, kind="stable")
    for path, write in ((ns.csv, lambda p: full.to_csv(p, index=False)),
                        (ns.json, lambda p: full.to_json(p, orient="records", indent=1))):
        if path:
            write(path)
            print(f"full table ({len(full.columns)} columns) written to {path}")
    shown = [*by, *(["machine"] if "machine" in full.columns else [])]  # several machines: cost cells per machine
    compact = full[[*shown, "n_runs", "n_failed"]].astype(object)
    compact = compact.where(compact.notna(), MISSING)  # a missing value reads as in `bench compare`
    for m in metrics:
        stats = zip(full[f"{m}_mean"], full[f"{m}_ci"], full[f"{m}_n"], strict=True)
        banded = full.get(f"{m}_by_load_band", pd.Series(None, index=full.index, dtype=object))
        compact[m] = [b if isinstance(b, str) else _cell(*v) for b, v in zip(banded, stats, strict=True)]
    if "wall_time_s" in metrics:  # a measuring run's time pools with its seeds' that reused its figures: say so
        marks = _measuring(full, named, by)
        compact["wall_time_s"] = [c if k is None else f"{c} {k} measuring"
                                  for c, k in zip(compact["wall_time_s"], marks, strict=True)]
    with pd.option_context("display.max_rows", None, "display.max_columns", None, "display.width", 250):
        print(compact.to_string(index=False))
    if "wall_time_s" in metrics:
        print(WALL_NOTE, file=sys.stderr)
    return 0


def cmd_compare(ns: argparse.Namespace) -> int:
    board, runs = _board(ns, None)
    if board.empty:
        raise ValueError(f"no runs to compare in {ns.results_dir}")
    for study in (ns.study, ns.baseline_study):
        if study and study not in set(board["study"].dropna()):
            studies = ", ".join(sorted(map(str, board["study"].dropna().unique()))) or "none"
            raise ValueError(f"no runs of study {study!r} in {ns.results_dir}; studies there: {studies}")
    df = board if not ns.study else board[board["study"] == ns.study]
    # The baseline's runs may come from another study of the results directory (--baseline-study, or any study
    # when the compared study has none): configurations are then paired in every field but the study's name.
    pairs_across = bool(ns.baseline_study) or (ns.study and not (df["variant"] == ns.baseline).any())
    if pairs_across:
        base = board[board["variant"] == ns.baseline]
        if ns.baseline_study:
            base = base[base["study"] == ns.baseline_study]
        df = pd.concat([df[df["variant"] != ns.baseline], base], ignore_index=True)
    for cond in ns.where or []:
        key, sep, value = cond.partition("=")
        if not sep or key not in df.columns:
            raise ValueError(f"--where wants COLUMN=VALUE with a leaderboard column, got {cond!r}")
        df = df[df[key].astype(str) == value]
    df = with_derived(df.reset_index(drop=True))
    if df.empty:
        raise ValueError(f"no runs to compare in {ns.results_dir}{' after --where' if ns.where else ''}")
    metrics = ns.metrics or primary_metrics(df)
    table = compare_table(df, runs, ns.baseline, metrics, ignore=("study", "preset") if pairs_across else ())
    if has_budget(df):  # a scaling ladder: its steps-to-target ratio reads the runs' training curves
        runs = read_runs(ns.results_dir, set(df["run_id"].astype(str)))
    table = with_multipliers(table, df, runs, ns.baseline, metrics)  # a scaling ladder's columns, else unchanged
    print(render_comparison(table, ns.format), end="" if ns.format == "csv" else "\n")
    for key in COMPARISON_NOTES:
        if ns.format != "markdown" and key in table.attrs:  # the markdown has them under the table
            print(table.attrs[key], file=sys.stderr)
    return 0
