"""The analysis commands of the command line: ``lesion``, ``gradcorr`` and ``landscape``
(:mod:`bench.analysis.analyses`).

Each writes ``RESULTS/analysis/<name>*.csv`` (the tidy table of every evaluation and a ``-summary``) and
``RESULTS/plots/<name>*.png``, prints the paths and the summary, and treats bad input (an unknown run id, a run
without a checkpoint, a checkpoint of another configuration, a variant without residual units, a token task for
``gradcorr``) as every command does: one ``error:`` line, exit status 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from bench.analysis.analyses import Output, run_gradcorr, run_landscape, run_lesion
from bench.reports.analysis_step import write_and_draw
from bench.runs.names import file_name
from bench.runs.results import ResultsStore


def _name(ns: argparse.Namespace, kind: str) -> str:
    if ns.name:
        return file_name(ns.name, "--name")
    ids = getattr(ns, "run_ids", None)
    if not ids:
        return kind
    return file_name(f"{kind}-{ids[0]}" + (f"+{len(ids) - 1}" if len(ids) > 1 else ""), "--name")


def _report(output: Output, paths: list[Path], columns: tuple[str, ...]) -> None:
    shown = [c for c in columns if c in output.summary]
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(output.summary[shown].to_string(index=False))
    for p in paths:
        print(p)


def _resolve(ns: argparse.Namespace) -> None:
    """Full run ids for the prefixes given (an unknown one is bad input, before any work)."""
    store = ResultsStore(ns.results_dir)
    ns.run_ids = list(dict.fromkeys(str(store.load_run(r)["run_id"]) for r in ns.run_ids))


def cmd_lesion(ns: argparse.Namespace) -> int:
    _resolve(ns)
    name = _name(ns, "lesion")
    out = run_lesion(ns.results_dir, ns.run_ids, drop=ns.drop, draws=ns.draws, batch_size=ns.batch_size,
                     seed=ns.seed, device=ns.device)
    _report(out, write_and_draw(out, ns.results_dir, name), ("run_id", "k", "n", "error", "error_increase", "loss"))
    return 0


def cmd_landscape(ns: argparse.Namespace) -> int:
    _resolve(ns)
    name = _name(ns, "landscape")
    out = run_landscape(ns.results_dir, ns.run_ids, dims=[ns.dims], points=ns.points, span=ns.span,
                        samples=ns.samples, seed=ns.seed, batch_size=ns.batch_size, device=ns.device)
    _report(out, write_and_draw(out, ns.results_dir, name),
            ("run_id", "dims", "loss_center", "edge_rise", "nonconvex_fraction", "roughness"))
    return 0


def cmd_gradcorr(ns: argparse.Namespace) -> int:
    name = _name(ns, "gradcorr")
    out = run_gradcorr(variants=ns.variant, depths=ns.depth, seeds=ns.seed, task=ns.task, points=ns.points,
                       span=ns.span, max_lag=ns.max_lag)
    _report(out, write_and_draw(out, ns.results_dir, name),
            ("variant", "depth", "seed", "neighbor_corr", "corr_length"))
    return 0
