"""The compute multiplier beside ``bench compare``'s rows: where the compared runs are a scaling ladder (their training
length set by a compute budget, :mod:`bench.runs.budget`), each design's row of each size gains its compute
multiplier against the baseline and its steps-to-target ratio, each with its 95% bootstrap interval — the numbers
of :meth:`bench.analysis.multiplier.ScalingFit.multipliers`, the ones ``bench scaling-fit`` and the REPORT show.

Runs without a budget (every study but a scaling one) leave the table as it is. Runs with one that cannot be fitted
(one or two sizes, sizes equal in compute, no loss among the compared metrics, a baseline without a ladder) leave
the columns out and say why in the table's note (``table.attrs[NOTE]``); a design whose own ladder is too short is
left out of the fit, and the note names it, while the others are fitted. A number is never shown that was not fitted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from bench.analysis.multiplier import (
    LOSSES,
    ScalingFit,
    fit_ladders,
    floor_of,
    ladders_from,
    size_keys,
    steps_ratio_text,
)
from bench.analysis.scaling import BOOTSTRAP, check_ladder
from bench.analysis.stats import CONFIG_KEY, with_config_hash

COLUMNS = ("multiplier", "multiplier_lo", "multiplier_hi", "steps_ratio", "steps_ratio_lo", "steps_ratio_hi",
           "steps_ratio_short")
NOTE = "multiplier_note"  # the key in ``table.attrs`` of the line saying what the columns are, or why there are none
BUDGETS = ("budget_flops", "budget_samples")  # leaderboard columns of a run whose length a compute budget set


def has_budget(board: pd.DataFrame) -> bool:
    """Whether any run of ``board`` had its training length set by a compute budget (FLOPs or samples)."""
    return any(pd.to_numeric(board[c], errors="coerce").notna().any() for c in BUDGETS if c in board.columns)


def with_multipliers(table: pd.DataFrame, board: pd.DataFrame, records: Sequence[Mapping[str, Any]],
                     baseline: str, metrics: Sequence[str], draws: int = BOOTSTRAP) -> pd.DataFrame:
    """``table`` (:func:`bench.analysis.comparison.compare_table` of ``board``'s runs) with :data:`COLUMNS` filled on
    the rows of the fitted loss (the first of ``metrics`` that is one) where ``board`` is a scaling ladder, and a note
    in ``attrs[NOTE]``; unchanged where no run of ``board`` had a compute budget (module docstring)."""
    if not has_budget(board):
        return table
    metric = next((m for m in metrics if m in LOSSES), None)
    if metric is None:
        return _noted(table, f"compute multiplier: not shown, since the fit models a loss ({' or '.join(LOSSES)}) "
                             f"and none of the compared metrics ({', '.join(metrics)}) is one")
    ids = set(board["run_id"].astype(str))
    mine = [r for r in records if str(r.get("run_id")) in ids]
    try:
        ladders = ladders_from(board, mine, metric)
    except ValueError as exc:
        return _noted(table, f"compute multiplier: not shown; {exc}")
    short = {}
    for design, ladder in ladders.items():
        try:
            check_ladder(design, ladder.compute.tolist())
        except ValueError as exc:
            short[design] = str(exc)
    if baseline not in ladders:
        return _noted(table, f"compute multiplier: not shown; the baseline {baseline!r} has no finished run with a "
                             f"{metric} on the ladder")
    if baseline in short:
        return _noted(table, f"compute multiplier: not shown; {short[baseline]}")
    try:
        fit = fit_ladders({d: lad for d, lad in ladders.items() if d not in short}, baseline, floor_of(mine), draws)
    except ValueError as exc:  # the baseline's curve could not be fitted
        return _noted(table, f"compute multiplier: not shown; {exc}")
    out = _fill(table, fit, _size_of_configs(board, mine), metric)
    left_out = "".join(f"; not fitted: {reason}" for reason in short.values())
    studies = board["study"].dropna().unique() if "study" in board.columns else []
    return _noted(out, _explained(fit, metric, str(studies[0]) if len(studies) == 1 else None) + left_out)


def _size_of_configs(board: pd.DataFrame, records: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Per configuration hash of ``board``'s runs, the key of its size (:func:`size_keys`)."""
    keys = size_keys(records)
    hashed = with_config_hash(board)
    return {str(h): keys[str(r)] for h, r in zip(hashed[CONFIG_KEY], hashed["run_id"], strict=True)
            if str(r) in keys}


def _fill(table: pd.DataFrame, fit: ScalingFit, size_of: Mapping[str, str], metric: str) -> pd.DataFrame:
    """The multiplier columns of each row of ``metric`` whose design and size were fitted; NaN elsewhere."""
    found = fit.multipliers().set_index(["design", "size"])
    label = {(d, key): size for d, lad in fit.ladders.items() for key, size in zip(lad.keys, lad.sizes, strict=True)}
    values = np.full((len(table), len(COLUMNS)), np.nan)
    if CONFIG_KEY in table.columns:
        for i, (variant, metric_of, config) in enumerate(zip(table["variant"], table["metric"], table[CONFIG_KEY],
                                                             strict=True)):
            size = label.get((str(variant), size_of.get(str(config), "")))
            if metric_of == metric and size is not None:
                values[i] = found.loc[(str(variant), size), list(COLUMNS)].to_numpy(dtype=float)
    return table.assign(**{c: values[:, j] for j, c in enumerate(COLUMNS)})


def _explained(fit: ScalingFit, metric: str, study: str | None) -> str:
    """The note of a table with the columns: what the multiplier and the ratio are, and how they were fitted."""
    floor = f"E held at the task's known floor, {fit.e_fixed:.4g} nats" if fit.e_fixed is not None else "E fitted"
    missed = fit.misfits(*fit.ladders)
    return (f"compute multiplier: the compute {fit.baseline} needs on its fitted {metric} curve L(C) = E + A*C^-alpha "
            "to reach a design's fitted loss at that design's training FLOPs, divided by those FLOPs (above 1: worth "
            f"more compute than it spends); steps-to-target ratio: {steps_ratio_text(fit)}; "
            f"95% bootstrap intervals over {fit.n_seeds} seed(s), {floor}; each design's fit: "
            f"python -m bench scaling-fit{f' --study {study}' if study else ''} --baseline {fit.baseline}"
            + (f"; not a reading of these runs: {missed}" if missed else ""))


def _noted(table: pd.DataFrame, note: str) -> pd.DataFrame:
    out = table.copy()
    out.attrs[NOTE] = note
    return out
