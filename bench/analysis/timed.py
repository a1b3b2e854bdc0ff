"""Timed figures of separate runs: what a difference between designs' timings can say, in one place for ``bench
compare``'s test column and the note under its table, the claims' pairing, and the note under the report's
leaderboard.

A sweep times each model configuration once (its first run; the others copy the figures, ``cost_source``), on the
wall clock, at whatever moment that run reached its timing phase; a merged folder holds a timing per sweep. Each such
figure was taken at its own moment: on a machine shared with other work, the same configuration's throughput changes
with the load from one moment to the next (:func:`band_spread` finds the widest such spread the data holds, quoted as
it is, with no adjective the example could contradict), so a difference between two designs' figures is confounded
with the load at those moments, whatever the number of timings a side. The same holds for what each run reads off the
wall clock while it trains (its time to the target, its evaluation time, its whole time:
:data:`~bench.runs.schema.WALL_CLOCK_COLUMNS`): every run has its own, but at the same seed two designs' times are
still taken at two moments, so they never pair by seed (:func:`bench.analysis.pairing.seeded`). The rule
(:func:`shows_timed_difference`): wherever such a difference is shown, the note (:func:`note`) says so and names the
command that times designs side by side, alternating steps: ``bench cost``. With one timing on a side no test is made
(:data:`ONCE`); with two or more a side the test stays, a fair test of those timings, not of which design is faster.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from bench.analysis.stats import banded_cells
from bench.runs.schema import COST_COLUMNS, WALL_CLOCK_COLUMNS

# The figures read off the wall clock (a load beside them changes them): the cost figures but FLOPs (counted) and
# memory (a peak), and the runs' own times.
TIMED: tuple[str, ...] = (*(m for m in COST_COLUMNS if m not in (
    "peak_mem_mb", "fwd_flops_per_sample", "train_flops_per_sample")), *WALL_CLOCK_COLUMNS)
# How the note names each wall-clock column it follows, beside the timed cost figures (throughput, step time).
WALL_WORDS = {"time_to_target_s": "time to the target", "eval_time_s": "evaluation time",
              "wall_time_s": "a run's whole time"}
ONCE = "one timing"  # bench compare's test code of a timed figure's difference with one timing on a side
# The tasks a ``bench cost`` shape is named after (:data:`bench.runs.shapes.SHAPES`, which needs torch; a test keeps the
# two in step): the command :func:`cost_command` gives names the shape where the runs' one task has one.
TASK_SHAPES = frozenset({"digits"})


def rests_on_one_timing(metric: str, n: Any, n_base: Any) -> bool:
    """Whether a difference of ``metric`` between ``n`` and ``n_base`` counted measurements rests on one timing on
    either side (a timed figure, both sides measured, one of them once)."""
    try:
        n, n_base = float(n), float(n_base)
    except (TypeError, ValueError):
        return False
    return metric in TIMED and min(n, n_base) == 1


def shows_timed_difference(metric: str, counts: Iterable[Any]) -> bool:
    """Whether figures of ``metric`` with ``counts`` counted measurements, one count per design, show a difference
    between designs that the note must follow: a timed figure, measured at least once on two sides or more."""
    measured = 0
    for n in counts:
        try:
            measured += float(n) >= 1
        except (TypeError, ValueError):
            continue
    return metric in TIMED and measured >= 2


def once_words(n: int, n_base: int) -> str:
    """:data:`ONCE`'s words in a test column, as the constant case says ``exact: no spread, no test``."""
    return "one timing each: no test" if n == n_base == 1 else "one timing on one side: no test"


@dataclass(frozen=True)
class Spread:
    """The widest spread the data shows of one configuration's timed figure across load bands (one machine)."""

    label: str  # the configuration: "preact, depth 8, digits"
    metric: str
    low: float
    high: float

    @property
    def ratio(self) -> float:
        return self.high / self.low


def _label(rows: pd.DataFrame) -> str:
    first = rows.iloc[0]
    depth = [f"depth {first['depth']}"] if "depth" in rows.columns and pd.notna(first["depth"]) else []
    return ", ".join([str(first["variant"]), *depth, *([str(first["task"])] if "task" in rows.columns else [])])


def band_spread(board: pd.DataFrame, runs: Sequence[Mapping[str, Any]] | None,
                metrics: Sequence[str] = TIMED) -> Spread | None:
    """The widest ratio, over ``board``'s configurations (each on one machine) and its timed ``metrics``, between the
    highest and the lowest load band's mean figure (:func:`bench.analysis.stats.banded_cells`); None where no
    configuration was timed in two bands."""
    widest: Spread | None = None
    for group, m, cells in banded_cells(board, runs, [m for m in metrics if m in TIMED]):
        means = [s["mean"] for _, s in cells if math.isfinite(s["mean"]) and s["mean"] > 0]
        if len(means) > 1 and (widest is None or max(means) / min(means) > widest.ratio):
            widest = Spread(_label(group), m, min(means), max(means))
    return widest


def cost_command(designs: Sequence[str] = (), baseline: str | None = None, depths: Sequence[Any] = (),
                 tasks: Sequence[Any] = ()) -> str:
    """The ``bench cost`` command that times ``designs`` beside ``baseline``, alternating steps, at ``depths`` (one
    command per depth: ``DEPTH`` and the list where there are several), at the shape of the runs' one task where a
    shape is named after it (:data:`TASK_SHAPES`); placeholders where a name is not known."""
    shown = sorted({int(d) for d in depths if pd.notna(d)})
    at = f"--depth {shown[0]}" if len(shown) == 1 else "--depth DEPTH"
    named = {str(t) for t in tasks if pd.notna(t)}
    shape = next(iter(named)) if len(named) == 1 and named <= TASK_SHAPES else "SHAPE"
    command = (f"python -m bench cost --designs {' '.join(designs) or 'DESIGN ...'} --baseline {baseline or 'BASELINE'}"
               f" --shape {shape} {at}")
    return f"`{command}`" + (f" (DEPTH: {', '.join(map(str, shown))})" if len(shown) > 1 else "")


def _named(shown: Sequence[str]) -> str:
    """What the note calls the timed figures ``shown`` (the metrics whose difference the table shows; none given: the
    timed cost figures)."""
    wall = [WALL_WORDS[m] for m in dict.fromkeys(shown) if m in WALL_WORDS]
    if not wall:
        return "each timed cost figure here (throughput, step time)"
    cost = ["throughput, step time"] if any(m in TIMED and m not in WALL_WORDS for m in shown) else []
    return f"each timed figure here ({', '.join([*cost, *wall])})"


def note(spread: Spread | None, command: str, shown: Sequence[str] = ()) -> str:
    """The line under a table showing a difference between designs' timed figures (:func:`shows_timed_difference`),
    true whatever their number: what such figures are (``shown``: the timed metrics whose difference the table shows),
    how far apart the data shows one configuration's timings (``spread``), and ``command`` (:func:`cost_command`),
    which ranks designs; where a time to the target is shown, what compares that without the load."""
    seen = (f" (here {spread.label}: {spread.metric} {spread.low:.4g} to {spread.high:.4g} across load bands, "
            f"{spread.ratio:.2f}x)" if spread is not None else "")
    steps = (" Steps to the target (`steps_to_target`) are counted, not timed: they say which design reaches it in "
             "fewer steps, whatever the load." if "time_to_target_s" in shown else "")
    return (f"Timed by separate runs: {_named(shown)} was taken by the run that "
            f"measured it, at its own moment on the wall clock, so a difference between designs is confounded with "
            f"the load on the machine at those moments: with one timing on a side it gets no test, and with more a "
            f"test says whether those timings differ, not which design is faster.{steps} On a shared machine one "
            f"configuration's timings change with the load on it{seen}. To rank designs' cost, time them side by "
            f"side, alternating steps: {command} ("
            + ("`--shape`: see `python -m bench cost --help`; " if "--shape SHAPE" in command else "")
            + "`--plugin` for your own designs).")
