"""What common random numbers buy a paired comparison: one comparison of a study, run at equal seeds with its
initial weights drawn both ways (``init_stream`` global, torch's one stream after the seed; crn, a stream per (seed,
parameter name)), and the width of the paired 95% interval of each metric's difference under each.

    PYTHONPATH=. python scripts/crn_width.py --study degradation --preset quick --a highway --b plain --depth 20 \\
        --seeds 0 1 2 3 4 --results-dir /tmp/crn_width

Each run is the study's configuration of that variant and depth (measurement phases off: they change no value);
runs already in ``--results-dir`` are not run again. Prints one Markdown table (docs/methodology.md quotes it).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np

from bench.analysis.pairing import paired
from bench.runs.results import ResultsStore
from bench.runs.runner import execute
from bench.sweeps.study import load_study

METRICS = {  # the table's name -> how a leaderboard row gives it
    "train_error": lambda row: 1.0 - float(row["final_train_acc"]),
    "val_error": lambda row: 1.0 - float(row["final_val_acc"]),
    "final_train_loss": lambda row: float(row["final_train_loss"]),
    "final_val_loss": lambda row: float(row["final_val_loss"]),
}
STREAMS = ("global", "crn")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--study", default="degradation")
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--a", default="highway", help="the design compared")
    ap.add_argument("--b", default="plain", help="the baseline")
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--results-dir", type=Path, default=Path("/tmp/crn_width"))
    ns = ap.parse_args()
    templates = {c.variant: c for c in load_study(ns.study).configs(ns.preset)
                 if c.variant in (ns.a, ns.b) and c.depth == ns.depth}
    missing = {ns.a, ns.b} - set(templates)
    if missing:
        raise SystemExit(f"error: study {ns.study!r} preset {ns.preset!r} has no run of {sorted(missing)} at depth "
                         f"{ns.depth}")
    store = ResultsStore(ns.results_dir)
    values: dict[tuple[str, str], dict[int, dict[str, float]]] = {}
    for stream in STREAMS:
        for variant in (ns.a, ns.b):
            for seed in ns.seeds:
                cfg = dataclasses.replace(templates[variant], seed=seed, init_stream=stream, measure=())
                done = {r["run_id"]: r for r in store.rows()}
                row = done.get(cfg.run_id) or execute(cfg, ns.results_dir)["row"]
                values.setdefault((stream, variant), {})[seed] = {m: f(row) for m, f in METRICS.items()}
    print(f"{ns.study} ({ns.preset}), {ns.a} - {ns.b} at depth {ns.depth}, seeds {ns.seeds}: paired 95% intervals\n")
    print("| metric | init stream | mean difference | interval half-width | sd of the differences "
          "| width crn / global |")
    print("|---|---|---|---|---|---|")
    for metric in METRICS:
        halves = {}
        for stream in STREAMS:
            a = {s: v[metric] for s, v in values[stream, ns.a].items()}
            b = {s: v[metric] for s, v in values[stream, ns.b].items()}
            result = paired(a, b)
            sd = float(np.std([a[s] - b[s] for s in ns.seeds], ddof=1))
            halves[stream] = result.ci_diff
            ratio = f"{halves['crn'] / halves['global']:.2f}" if stream == "crn" and halves["global"] else ""
            print(f"| {metric} | {stream} | {result.diff:+.4f} | ±{result.ci_diff:.4f} | {sd:.4f} | {ratio} |")


if __name__ == "__main__":
    main()
