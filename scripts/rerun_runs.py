"""Rerun committed runs from their run JSON and compare the curves with the recorded ones.

A refactor of the variants or the harness must not change what a committed run computes. This rebuilds
each run's exact configuration (``config`` in its JSON), trains it again into a scratch results directory,
and compares every training-loss and evaluation value step by step (times excluded):

    python scripts/rerun_runs.py results/runs/resnet-d20-digits-41feb982-s0.json ... --scratch /tmp/rerun

It prints one line per run (identical, or the first differing step and the largest difference) and exits
1 if any curve differs. Floating-point paths differ between machines and torch builds, so compare on the
machine and torch version that wrote the JSON (``env`` in it) for bit-identity.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.runs.config import config_from_dict
from bench.runs.runner import execute

TIMES = {"train_time_s", "wall_s"}


def _rows(curves: dict[str, list[dict[str, Any]]]) -> list[tuple[str, int, str, Any]]:
    return [(part, row["step"], k, v) for part in ("train", "eval") for row in curves.get(part, [])
            for k, v in sorted(row.items()) if k not in TIMES]


def compare(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """None if the curves are identical, else where they first differ and by how much at most."""
    a, b = _rows(old["curves"]), _rows(new["curves"])
    if [r[:3] for r in a] != [r[:3] for r in b]:
        return f"different points recorded ({len(a)} vs {len(b)} values)"
    diffs = [(ra, abs(ra[3] - rb[3])) for ra, rb in zip(a, b, strict=True) if ra[3] != rb[3]]
    if not diffs:
        return None
    (part, step, key, _), _ = diffs[0]
    worst = max(d for _, d in diffs)
    return f"{len(diffs)} of {len(a)} values differ, first {part} {key} at step {step}, largest |diff| {worst:.3g}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path, help="run JSON files (results/runs/*.json)")
    p.add_argument("--scratch", type=Path, required=True, help="results directory for the reruns")
    args = p.parse_args()
    bad = 0
    for path in args.runs:
        old = json.loads(path.read_text())
        new = execute(config_from_dict(old["config"]), args.scratch)
        verdict = compare(old, new)
        sha = old["env"].get("git_sha", "?")[:7]
        print(f"{old['run_id']} (recorded on {sha}): " + ("identical curves" if verdict is None else verdict))
        bad += verdict is not None
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
