"""Time the commands that read results — leaderboard, compare, report, plot, site — on a results folder (default: the
committed ``results/``), CPU time (user + system of the command and the processes it started) and wall time, the
median of ``--repeat`` runs each, and print them as a Markdown table with the machine and its load.

The folder is copied first (``report``, ``plot`` and ``site`` write into it), so the committed files never change.
CPU time is what to compare: on a machine others share, load inflates wall time far more. ``--code DIR`` times
another checkout of resbench (e.g. an older commit, ``git worktree add``) on the same copy, so a before/after table
is measured side by side:

    python scripts/read_bench.py                                  # the table of docs/performance.md
    python scripts/read_bench.py --code ../resbench-old --repeat 1
    python scripts/read_bench.py --reports                        # report --study S for every study
    python scripts/read_bench.py --reports --keep /tmp/after      # ... and keep what they wrote, to compare
    python scripts/read_bench.py --only plot report --warm        # figures already drawn (the figure cache)

Times are cold by default: the figure cache's key files (``plots/**/.figures.json``) are removed before each timed
run, so every figure is drawn. ``--warm`` runs each command once untimed first and keeps its keys, so the timed runs
draw only what changed (nothing).
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# (label, arguments after `python -m bench`): the table. {out} is a scratch folder for the site.
COMMANDS: list[tuple[str, list[str]]] = [
    ("bench --help", ["--help"]),
    ("bench leaderboard --study crosslayer", ["leaderboard", "--study", "crosslayer"]),
    ("bench compare --study crosslayer --baseline preln --where depth=24",
     ["compare", "--study", "crosslayer", "--baseline", "preln", "--where", "depth=24"]),
    ("bench report --study degradation", ["report", "--study", "degradation"]),
    ("bench plot (all studies)", ["plot"]),
    ("bench site", ["site", "-o", "{out}"]),
]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def time_once(code: Path, argv: list[str], results: Path, scratch: Path) -> tuple[float, float, int]:
    """(CPU s, wall s, exit status) of ``python -m bench ARGV --results-dir RESULTS`` run from ``code``."""
    args = [a.replace("{out}", str(scratch / "site")) for a in argv]
    if argv != ["--help"]:
        args += ["--results-dir", str(results)]
    env = {**os.environ, "PYTHONPATH": str(code), "MPLBACKEND": "Agg"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "bench", *args], cwd=code, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        print(f"{' '.join(args)}: exit {done.returncode}\n{done.stderr[-2000:]}", file=sys.stderr)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, done.returncode


def forget_figures(results: Path) -> None:
    """Remove the figure cache's key files: the next command draws every figure (a cold run)."""
    for keys in (results / "plots").rglob(".figures.json"):
        keys.unlink()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results-dir", type=Path, default=REPO / "results", help="the folder to read (copied first)")
    p.add_argument("--code", type=Path, default=REPO, help="the checkout of resbench to time (default: this one)")
    p.add_argument("--repeat", type=int, default=3, help="runs of each command; the table shows medians (default 3)")
    p.add_argument("--only", nargs="*", help="only the commands whose label contains one of these words")
    p.add_argument("--reports", action="store_true", help="time `report --study S` for every study instead")
    p.add_argument("--keep", type=Path, help="a new folder to keep the copy the commands wrote into")
    p.add_argument("--warm", action="store_true", help="time with the figure cache filled by an untimed run first")
    args = p.parse_args()
    if args.repeat < 1:
        p.error("--repeat: 1 or more")
    if args.keep is not None and args.keep.exists():
        p.error(f"--keep: {args.keep} exists; name a new folder")
    commands = COMMANDS
    if args.reports:
        with open(args.results_dir / "leaderboard.csv", newline="", encoding="utf-8") as f:
            studies = sorted({r["study"] for r in csv.DictReader(f) if r.get("study")})
        commands = [(f"bench report --study {s}", ["report", "--study", s]) for s in studies]
    if args.only:
        commands = [c for c in commands if any(w in c[0] for w in args.only)]
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="read-bench-") as tmp:
        results = Path(tmp) / "results"
        shutil.copytree(args.results_dir, results, symlinks=True)
        for label, argv in commands:
            if args.warm:
                time_once(args.code.resolve(), argv, results, Path(tmp))
            times = []
            for _ in range(args.repeat):
                if not args.warm:
                    forget_figures(results)
                times.append(time_once(args.code.resolve(), argv, results, Path(tmp)))
            cpu, wall = statistics.median(t[0] for t in times), statistics.median(t[1] for t in times)
            failed = sum(1 for t in times if t[2])
            rows.append(f"| `{label}` | {cpu:.2f} s | {wall:.2f} s |" + (f" {failed} failed |" if failed else ""))
            print(rows[-1], file=sys.stderr, flush=True)
        if args.keep is not None:
            shutil.copytree(results, args.keep, symlinks=True)
    load_after = os.getloadavg()
    print(f"{_cpu_model()}, {os.cpu_count()} logical cores; 1-minute load average {load_before[0]:.1f} before, "
          f"{load_after[0]:.1f} after; code: {args.code.resolve()}; median of {args.repeat} run(s), "
          f"{'warm (figures drawn before)' if args.warm else 'cold (every figure drawn)'}\n")
    print("| command | CPU time (user + system) | wall time |\n|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
