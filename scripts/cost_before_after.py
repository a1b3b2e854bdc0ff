"""Did a change to the variants make a design slower? Each design built from the variants of an earlier commit and from
this tree's, timed step by step in alternation in one process.

    python scripts/cost_before_after.py --before REV --designs mudd dca ... [--shape gpt2_small] [--repeats 3]
                                        [--compile]

The earlier commit's ``variants/`` package is read with ``git archive`` into a temporary folder and imported under
another name, so both forms of a design sit side by side, built from seed 0 with the same weights (a design whose
parameter names or shapes changed is refused), on the same batch, with the same optimiser
(:class:`bench.runs.side_by_side.Trainee`). Per design: one untimed step of each, then ``repeats`` rounds in which each
takes a turn of timed steps (:func:`bench.runs.side_by_side.rounds`: as many as fill its ``ROUND_S``; GPT-2 small's
one step on a CPU, as when results/cost/gpt2_small_past_port.md was measured), alternating, so a drift of a shared
machine falls on both, eager and with ``--compile`` compiled. Printed per design and mode: the median step time of
each and their ratio (after / before) with the range of the per-round ratios, which is the noise a verdict reads
against. A check, not a benchmark: the cost table (``bench cost``) is what users read.
"""

from __future__ import annotations

import argparse
import importlib
import io
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import torch

from bench.runs import shapes, side_by_side

REPO = Path(__file__).resolve().parent.parent


def earlier_variants(rev: str, into: Path):  # -> the module
    """The ``variants`` package at ``rev``, importable as ``variants_before``."""
    blob = subprocess.run(["git", "archive", rev, "variants"], cwd=REPO, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(into, filter="data")
    (into / "variants").rename(into / "variants_before")
    sys.path.insert(0, str(into))
    return importlib.import_module("variants_before")


def same_weights(before: torch.nn.Module, after: torch.nn.Module, design: str) -> None:
    a, b = before.state_dict(), after.state_dict()
    if {k: v.shape for k, v in a.items()} != {k: v.shape for k, v in b.items()}:
        raise SystemExit(f"error: {design}'s parameter names or shapes changed between the two commits")
    after.load_state_dict(a)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, help="the earlier commit (any git revision)")
    p.add_argument("--designs", nargs="+", required=True)
    p.add_argument("--shape", default="gpt2_small", help=f"one of {sorted(shapes.SHAPES)} (default gpt2_small)")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds per design and mode (default 3)")
    p.add_argument("--compile", action="store_true", help="also time both under torch.compile")
    ns = p.parse_args()
    if ns.shape not in shapes.SHAPES:
        p.error(f"--shape: unknown shape {ns.shape!r}; one of {sorted(shapes.SHAPES)}")
    if ns.repeats < 1:
        p.error(f"--repeats: at least 1, got {ns.repeats}")
    sh = shapes.shape_of(ns.shape)
    shapes.check_designs(sh, ns.designs)
    side_by_side.pin_mmap_threshold()
    batch = sh.inputs(sh.batch, torch.device("cpu"))
    with tempfile.TemporaryDirectory() as tmp:
        old = earlier_variants(ns.before, Path(tmp))
        print(f"{ns.shape}, batch {sh.batch}, {ns.repeats} alternating rounds; before = {ns.before}, after = this tree")
        print(f"{'design':16s} {'mode':8s} {'before ms':>10s} {'after ms':>10s} {'after/before':>12s}  per-round range")
        for design in ns.designs:
            for compiled in [False, True] if ns.compile else [False]:
                torch.manual_seed(0)
                before = old.create(design, **shapes.build_args(design, sh))
                after = shapes.build(design, sh)
                same_weights(before, after, design)
                pair = [side_by_side.Trainee(m, sh, batch, compiled=compiled) for m in (before, after)]
                by_round = side_by_side.rounds(pair, torch.device("cpu"), ns.repeats)
                ratios = [r[1][0] / r[0][0] for r in by_round]
                t0, t1 = (statistics.median(r[i][0] for r in by_round) for i in (0, 1))
                mode = "compiled" if compiled else "eager"
                print(f"{design:16s} {mode:8s} {t0:10.0f} {t1:10.0f} {t1 / t0:12.3f}  "
                      f"{min(ratios):.3f} … {max(ratios):.3f}", flush=True)
                del pair, before, after
                if compiled:
                    torch._dynamo.reset()


if __name__ == "__main__":
    main()
