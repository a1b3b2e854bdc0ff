"""Why residual networks train, measured after (or instead of) training: the ``lesion``, ``gradcorr`` and
``landscape`` commands, and the step a study runs after its grid.

- ``lesion`` (:mod:`bench.analysis.lesion`; Veit et al. 2016): delete units of trained runs, one at a time and k
  at once.
- ``gradcorr`` (:mod:`bench.analysis.gradcorr`; Balduzzi et al. 2017): input-gradient correlation along a line of
  inputs, at initialisation — no training, no runs.
- ``landscape`` (:mod:`bench.analysis.landscape`; Li et al. 2018): the loss of trained runs on filter-normalised random
  directions through their weights.
- ``cost`` (:mod:`bench.runs.cost`): what designs add to their family's baseline at a paper's shape (parameters,
  FLOPs, step time and memory, timed side by side) — no training, no runs: the papers' overhead figures as claims.

Each computes a tidy table of everything it evaluated and a *summary* (one row per model — per model and number
of deleted units for ``lesion`` — with the run's identifying fields): an :class:`Output`, written as CSVs by
:func:`write`; its figure is drawn by :mod:`bench.reports.analysis_figures`. A study names one of them in its
``[analysis]`` table (``kind`` and the options of :data:`OPTIONS`; a preset may override them in
``[presets.NAME.analysis]``); ``reproduce``/``sweep`` run it on the study's runs with an ok row (they keep a
checkpoint: ``save_checkpoint = true`` in ``[base]``; :mod:`bench.reports.analysis_step`), and the report checks
the claims whose ``table`` is the analysis against the summary (:mod:`bench.analysis.claims`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from bench.analysis import gradcorr, landscape, lesion
from bench.analysis.options import RUN_FIELDS
from bench.runs import checkpoints, plugins
from bench.runs.cost import overhead_rounds
from bench.runs.results import atomic_write_text


@dataclass
class Output:
    """What an analysis computed: tidy tables of every evaluation (by file-name suffix: ``""`` for the main one,
    ``"-acf"`` ...) and the summary (claims read it). Every row names its run (:data:`RUN_FIELDS`)."""

    kind: str
    tables: dict[str, pd.DataFrame]
    summary: pd.DataFrame


def _run_fields(run: dict[str, Any]) -> dict[str, Any]:
    row = run.get("row", {})
    return {k: row.get(k, run.get("config", {}).get(k)) for k in RUN_FIELDS} | {"status": "ok"}


def label(fields: dict[str, Any], seed: bool = False) -> str:
    """``variant-depth`` (and `` s<seed>`` with ``seed``) of a table row's run fields: the series of a figure."""
    depth = fields.get("depth")
    shown = f"-{int(depth)}" if isinstance(depth, (int, float)) and not math.isnan(depth) else ""
    return f"{fields.get('variant')}{shown}" + (f" s{fields.get('seed')}" if seed else "")


def run_lesion(results_dir: str | Path, run_ids: Sequence[str], *, drop: Sequence[int], draws: int, batch_size: int,
               seed: int, device: str = "cpu") -> Output:
    """:func:`bench.analysis.lesion.lesion` on each run's trained model (its checkpoint). The options' defaults are
    :data:`OPTIONS`' (the study loader and the CLI fill them in)."""
    trained = [checkpoints.load(results_dir, r, device) for r in run_ids]  # every bad id refused before any work
    tables, summaries = [], []
    for t in trained:
        with plugins.blame(t.config.variant):
            table = lesion.lesion(t.model, t.task, drops=drop, draws=draws, seed=seed, batch_size=batch_size)
        fields = _run_fields(t.run)
        tables.append(table.assign(**fields))
        summaries.append(lesion.summary(table).assign(**fields))
    return Output("lesion", {"": pd.concat(tables, ignore_index=True)}, pd.concat(summaries, ignore_index=True))


def run_landscape(results_dir: str | Path, run_ids: Sequence[str], *, dims: Sequence[int], points: int, span: float,
                  samples: int, seed: int, batch_size: int, device: str = "cpu") -> Output:
    """Filter-normalised loss slices (:mod:`bench.analysis.landscape`) of each run's trained model, on the first
    ``samples`` inputs of its task's fixed training subset (no augmentation), for each number of ``dims``."""
    trained = [checkpoints.load(results_dir, r, device) for r in run_ids]
    tables, summaries = [], []
    for d in dims:
        for t in trained:
            batches = _first_samples(t.task.train_eval_batches(batch_size), samples)
            dirs = landscape.directions(t.model, d, seed)
            frame = landscape.landscape(t.model, t.task.loss, batches, dirs, landscape.grid(points, span))
            fields = _run_fields(t.run) | {"dims": d}
            tables.append(frame.assign(**fields))
            summaries.append(pd.DataFrame([landscape.summary(frame) | fields]))
    return Output("landscape", {"": pd.concat(tables, ignore_index=True)}, pd.concat(summaries, ignore_index=True))


def run_gradcorr(*, variants: Sequence[str], depths: Sequence[int], seeds: Sequence[int], task: str, points: int,
                 span: float, max_lag: int, study: str | None = None) -> Output:
    """Gradient correlation along a line of inputs (:mod:`bench.analysis.gradcorr`) of each (variant, depth, seed)
    at initialisation. Tables: the autocorrelation by lag (``-acf``) and the derivative along the line
    (``-series``)."""
    with plugins.blame(*variants):
        frames = gradcorr.measure_grid(list(variants), list(depths), list(seeds), task=task, points=points,
                                       span=span, max_lag=max_lag)
    tables = {"-acf": frames.acf.assign(study=study), "-series": frames.series.assign(study=study)}
    return Output("gradcorr", tables, frames.summary.assign(study=study, status="ok"))


def run_cost(*, designs: Sequence[str], shape: str, repeats: int, modes: Sequence[str], study: str | None = None
             ) -> Output:
    """What each design adds to its family's baseline at a reference shape (:func:`bench.runs.cost.overhead_rounds`,
    on the CPU), one row per design, mode and timed round: the summary claims read."""
    with plugins.blame(*designs):
        table = overhead_rounds(designs, shape, repeats=repeats, modes=modes, progress=True)
    return Output("cost", {}, table.assign(study=study, status="ok"))


def _first_samples(batches: Any, n: int) -> list[Any]:
    out, seen = [], 0
    for x, y in batches:
        out.append((x[: n - seen], y[: n - seen]))
        seen += len(out[-1][0])
        if seen >= n:
            break
    return out


# -- where the files go ----------------------------------------------------------------------------------------


def write(output: Output, results_dir: str | Path, stem: str) -> list[Path]:
    """Write ``analysis/<stem><suffix>.csv`` per table and ``analysis/<stem>-summary.csv``; return their paths."""
    root = Path(results_dir) / "analysis"
    written = []
    for suffix, frame in [*output.tables.items(), ("-summary", output.summary)]:
        path = root / f"{stem}{suffix}.csv"
        atomic_write_text(path, frame.to_csv(index=False))
        written.append(path)
    return written
