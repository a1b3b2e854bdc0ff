"""The analysis commands of the command line: ``lesion``, ``gradcorr`` and ``landscape`` (:mod:`bench.analysis`).

Each writes ``RESULTS/analysis/<name>*.csv`` (the tidy table of every evaluation and a ``-summary``) and
``RESULTS/plots/<name>*.png``, prints the paths and the summary, and treats bad input (an unknown run id, a run
without a checkpoint, a checkpoint of another configuration, a variant without residual units, a token task for
``gradcorr``) as every command does: one ``error:`` line, exit status 2.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from .analysis import OPTIONS, Output, run_gradcorr, run_landscape, run_lesion, write


def _name(ns: argparse.Namespace, kind: str) -> str:
    if ns.name:
        if "/" in ns.name or ns.name.startswith("."):
            raise ValueError(f"--name is a file-name stem, got {ns.name!r}")
        return str(ns.name)
    ids = getattr(ns, "run_ids", None)
    if not ids:
        return kind
    return f"{kind}-{ids[0]}" + (f"+{len(ids) - 1}" if len(ids) > 1 else "")


def _report(output: Output, paths: list[Path], columns: tuple[str, ...]) -> None:
    import pandas as pd

    shown = [c for c in columns if c in output.summary]
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(output.summary[shown].to_string(index=False))
    for p in paths:
        print(p)


def _resolve(ns: argparse.Namespace) -> None:
    """Full run ids for the prefixes given (an unknown one is bad input, before any work)."""
    from .results import ResultsStore

    store = ResultsStore(ns.results_dir)
    ns.run_ids = list(dict.fromkeys(str(store.load_run(r)["run_id"]) for r in ns.run_ids))


def cmd_lesion(ns: argparse.Namespace) -> int:
    _resolve(ns)
    name = _name(ns, "lesion")
    out = run_lesion(ns.results_dir, ns.run_ids, Path(ns.results_dir) / "plots" / f"{name}.png", drop=ns.drop,
                     draws=ns.draws, batch_size=ns.batch_size, seed=ns.seed, device=ns.device)
    _report(out, write(out, ns.results_dir, name), ("run_id", "k", "n", "error", "error_increase", "loss"))
    return 0


def cmd_landscape(ns: argparse.Namespace) -> int:
    _resolve(ns)
    name = _name(ns, "landscape")
    out = run_landscape(ns.results_dir, ns.run_ids, Path(ns.results_dir) / "plots" / f"{name}.png", dims=[ns.dims],
                        points=ns.points, span=ns.span, samples=ns.samples, seed=ns.seed, batch_size=ns.batch_size,
                        device=ns.device)
    _report(out, write(out, ns.results_dir, name),
            ("run_id", "dims", "loss_center", "edge_rise", "nonconvex_fraction", "roughness"))
    return 0


def cmd_gradcorr(ns: argparse.Namespace) -> int:
    name = _name(ns, "gradcorr")
    out = run_gradcorr(Path(ns.results_dir) / "plots" / f"{name}.png", variants=ns.variant, depths=ns.depth,
                       seeds=ns.seed, task=ns.task, points=ns.points, span=ns.span, max_lag=ns.max_lag)
    _report(out, write(out, ns.results_dir, name),
            ("variant", "depth", "seed", "neighbor_corr", "corr_length"))
    return 0


def _positive(typ: Callable[[str], float | int]) -> Callable[[str], float | int]:
    def parse(text: str) -> float | int:
        try:
            value = typ(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    return parse


def add_commands(sub: argparse._SubParsersAction, results: Callable[[argparse.ArgumentParser], None]) -> None:
    """The three commands' parsers, on ``sub`` (``results`` adds ``--results-dir``)."""
    les, grad, land = OPTIONS["lesion"], OPTIONS["gradcorr"], OPTIONS["landscape"]
    pos_int, pos_float = _positive(int), _positive(float)

    def common(q: argparse.ArgumentParser) -> None:
        results(q)
        q.add_argument("--name", help="file-name stem of what is written under RESULTS/analysis/ and RESULTS/plots/ "
                                      "(default: the command and the run id)")

    def trained(q: argparse.ArgumentParser, batch: int) -> None:
        q.add_argument("run_ids", nargs="+", metavar="RUN_ID",
                       help="recorded run(s) with a checkpoint (`bench run ... --save-checkpoint`); a unique prefix "
                            "is enough")
        q.add_argument("--device", default="cpu", help="where to evaluate: cpu, cuda, mps, auto (default: cpu)")
        q.add_argument("--batch-size", type=pos_int, default=batch, help=f"evaluation batch (default: {batch})")

    q = sub.add_parser("lesion", help="delete residual units of trained runs one at a time and k at once; validation "
                                      "error (Veit et al. 2016)")
    trained(q, les["batch_size"][2])
    q.add_argument("--drop", type=pos_int, nargs="+", default=les["drop"][2], metavar="K",
                   help=f"numbers of units deleted at once, random draws (default: {les['drop'][2]})")
    q.add_argument("--draws", type=pos_int, default=les["draws"][2], help="random draws per K (default: 10)")
    q.add_argument("--seed", type=int, default=0, help="seed of the draws (default: 0)")
    common(q)
    q.set_defaults(fn=cmd_lesion)

    q = sub.add_parser("gradcorr", help="input-gradient correlation along a line of inputs at initialisation, vs "
                                        "depth (Balduzzi et al. 2017)")
    q.add_argument("--variant", nargs="+", default=grad["variants"][2], metavar="V",
                   help=f"variants on one figure (default: {' '.join(grad['variants'][2])})")
    q.add_argument("--depth", type=pos_int, nargs="+", default=grad["depths"][2], metavar="N",
                   help=f"depths (default: {' '.join(map(str, grad['depths'][2]))})")
    q.add_argument("--seed", type=int, nargs="+", default=[0], metavar="S", help="initialisation seeds (default: 0)")
    q.add_argument("--task", default="digits", help="task whose inputs the line crosses (default: digits)")
    q.add_argument("--points", type=pos_int, default=grad["points"][2], help="points on the line (default: 256)")
    q.add_argument("--span", type=pos_float, default=grad["span"][2],
                   help="the line runs over x0 + t·d, t in [-span, span] (default: 1)")
    q.add_argument("--max-lag", type=pos_int, default=grad["max_lag"][2], help="largest ACF lag (default: 32)")
    common(q)
    q.set_defaults(fn=cmd_gradcorr)

    q = sub.add_parser("landscape", help="loss on filter-normalised random directions through trained weights "
                                         "(Li et al. 2018)")
    trained(q, land["batch_size"][2])
    q.add_argument("--dims", type=int, choices=(1, 2), default=1, help="a 1-D line or a 2-D plane (default: 1)")
    q.add_argument("--points", type=pos_int, default=land["points"][2],
                   help="grid points per direction, odd so the trained weights are on it (default: 21)")
    q.add_argument("--span", type=pos_float, default=land["span"][2], help="coordinates in [-span, span] (default: 1)")
    q.add_argument("--samples", type=pos_int, default=land["samples"][2],
                   help="training samples the loss is evaluated on (fixed subset, no augmentation; default: 512)")
    q.add_argument("--seed", type=int, default=0, help="seed of the directions (default: 0)")
    common(q)
    q.set_defaults(fn=cmd_landscape)
