"""Where the CPU time of a cold ``bench report --study S`` goes: each figure's drawing (making its artists) and saving
(layout, tight bounding box, render, PNG), and everything else (imports, reading the runs, claims, tables), in CPU
seconds, each study in a fresh process as the command runs.

The report is the real one (``bench.reports.report.write_report``, one drawing process, every figure drawn) written
into a copy of the results folder; only the call that draws the figures is wrapped to time each one, through the same
``bench.reports.parallel.save`` the command uses. Run on the committed results:

    python scripts/figure_costs.py                        # the three studies with the most designs
    python scripts/figure_costs.py --study degradation warmup
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIG = ("frontier", "normfree", "crosslayer")


def one(results: Path, study: str) -> dict:
    """In this (fresh) process: the report of ``study`` written into ``results``, each figure timed."""
    from bench.reports import parallel, plots, report
    from bench.runs import reading

    figures = []

    def timed_draw_all(jobs, workers=1):
        for path, drawing in jobs:
            made = {}

            def make(drawing=drawing, made=made):
                start = time.process_time()
                fig = drawing()
                made["s"], made["panels"] = time.process_time() - start, len(fig.axes)
                made["data"] = sum(ax.has_data() for ax in fig.axes)  # the others are blank space
                return fig

            start = time.process_time()
            parallel.save(path, make)
            total = time.process_time() - start
            figures.append({"figure": path.stem, "panels": made["panels"], "data": made["data"], "make": made["s"],
                            "save": total - made["s"]})

    if not hasattr(plots, "draw_all"):
        raise SystemExit("bench.reports.plots no longer draws through draw_all: update this script")
    plots.draw_all = timed_draw_all  # make_all calls it by this name
    with reading.once():  # as the command reads: each run JSON parsed once
        try:
            report.write_report(results, study, workers=1, cached=False)
        except ValueError as e:  # no such study, a damaged run JSON: the command's own message
            raise SystemExit(f"error: {e}") from None
    if not figures:
        raise SystemExit(f"no figure of {study} was timed (none drawn, or drawn by another call than draw_all)")
    return {"study": study, "total": time.process_time(), "figures": figures}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results-dir", type=Path, default=REPO / "results", help="the folder to read (copied first)")
    p.add_argument("--study", nargs="+", default=list(BIG), help=f"studies to time (default: {' '.join(BIG)})")
    p.add_argument("--one", nargs=2, metavar=("RESULTS", "STUDY"), help=argparse.SUPPRESS)  # the child process
    args = p.parse_args()
    if args.one:
        print(json.dumps(one(Path(args.one[0]), args.one[1])))
        return 0
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="figure-costs-") as tmp:
        results = Path(tmp) / "results"
        shutil.copytree(args.results_dir, results, symlinks=True)
        for study in args.study:
            done = subprocess.run([sys.executable, __file__, "--one", str(results), study], capture_output=True,
                                  text=True, env={**os.environ, "MPLBACKEND": "Agg"})
            if done.returncode:
                print(f"{study}: {done.stderr.strip()[-2000:]}", file=sys.stderr)
                return 1
            r = json.loads(done.stdout.splitlines()[-1])
            drawn = sum(f["make"] + f["save"] for f in r["figures"])
            print(f"\n### `bench report --study {study}`, cold: {r['total']:.2f} s of CPU\n")
            print("| figure | panels (with data) | drawing (CPU) | saving (CPU) | together |\n|---|---|---|---|---|")
            for f in sorted(r["figures"], key=lambda f: -(f["make"] + f["save"])):
                print(f"| {f['figure']} | {f['panels']} ({f['data']}) | {f['make']:.2f} s | {f['save']:.2f} s | "
                      f"{f['make'] + f['save']:.2f} s |")
            print(f"| every figure | | | | {drawn:.2f} s |")
            print(f"| everything else (start-up, imports, runs, claims, tables) | | | | {r['total'] - drawn:.2f} s |")
    print(f"\n1-minute load average {load:.1f} before, {os.getloadavg()[0]:.1f} after; {os.cpu_count()} logical cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
