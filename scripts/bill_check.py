"""The dry run's bill against the measured sweep of the same runs, on this machine as it is: prints one Markdown row.

The runs are a study's (under a preset), optionally a subset of them (``--variants``, ``--depths``, ``--seeds``): a
study too long to sweep for a check is measured on a subset with the same machinery. The bill is
:func:`bench.sweeps.bill.bill` (what ``--dry-run`` prints) and the sweep :func:`bench.sweeps.driver.run_sweep` on
the local executor (what ``bench sweep`` runs), both after the same checks of the study; the wall time of each
includes those checks. The bill times its steps in CPU time: its total is an idle machine's. The machine is not
idle: its 1-minute load average is sampled while the bill runs and while the sweep runs, and the bill is scaled by
each (:func:`bench.sweeps.bill.slowdown`: the sweep's threads share the CPUs with the other runnable ones); the
row compares the bill at the sweep's load with the sweep, and a last line the CPU time billed with the CPU time
the sweep's processes used. Nothing is written outside ``--out``.

    python scripts/bill_check.py degradation --preset quick --variants plain resnet --depths 20 56 --jobs 2
    python scripts/bill_check.py crosslayer --preset quick --variants preln hyper_connections --jobs 2
    python scripts/bill_check.py degradation --preset quick --plugin gated_resnet.py --add-variant gated_resnet \\
        --variants gated_resnet resnet --depths 20 --jobs 2
    python scripts/bill_check.py scripts/studies/mixshort_study.toml --jobs 2
    python scripts/bill_check.py scripts/studies/mixshort60.toml --depths 8 --jobs 1

The last is a plugin CNN study: docs/plugins.md's pre-activation plugin (``scripts/studies/mixshort.py``, the
docs' block as written) against ``preact`` at depths 8 and 20, 2 seeds; the one after it the same with 60 steps a
run, at depth 8: short runs, where a run's fixed costs (its process's start, its set-up) weigh most. A table per
model configuration follows the row.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
from multiprocessing import forkserver
from pathlib import Path

from bench.analysis.studyfile import PLUGIN_ORIGIN, study_plugins
from bench.runs import plugins
from bench.runs.measure import cost_key
from bench.sweeps.bill import bill, schedule, slowdown, slowdowns
from bench.sweeps.driver import run_sweep
from bench.sweeps.executors import make_executor
from bench.sweeps.executors.local import plan_placements
from bench.sweeps.options import SweepOptions
from bench.sweeps.study import load_study


def _tree_cpu(pid: int) -> float:
    """CPU seconds of process ``pid`` and the children it reaped (Linux ``/proc``; 0 where it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime


class LoadAverage:
    """The 1-minute load average sampled every few seconds while a piece of work runs (``with``): ``mean``."""

    def __init__(self, every: float = 5.0) -> None:
        self.every, self.samples, self._stop = every, [], threading.Event()

    def __enter__(self) -> LoadAverage:
        def sample() -> None:
            while not self._stop.wait(self.every):
                self.samples.append(os.getloadavg()[0])

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(os.getloadavg()[0])

    @property
    def mean(self) -> float:
        return sum(self.samples) / len(self.samples)


def _row(what: str, billed: float, factor_bill: float, factor_run: float, measured: float, bill_load: float,
         run_load: float, bill_s: float) -> str:
    cells = [what, f"{billed / 60:.1f} min", f"{factor_bill * billed / 60:.1f} min ({factor_bill:.2f}x)",
             f"{factor_run * billed / 60:.1f} min ({factor_run:.2f}x)", f"{measured / 60:.1f} min",
             f"{factor_run * billed / measured:.2f}", f"{bill_load:.1f}", f"{run_load:.1f}", f"{bill_s:.0f} s"]
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("study", help="a shipped study's name or a study file")
    p.add_argument("--preset")
    p.add_argument("--variants", nargs="+", help="only these variants of the grid")
    p.add_argument("--depths", nargs="+", type=int, help="only these depths")
    p.add_argument("--seeds", type=int, help="only the first N seeds")
    p.add_argument("--plugin", action="append", default=[], help="a plugin file or module (repeatable)")
    p.add_argument("--add-variant", action="append", default=[], help="as bench sweep's (repeatable)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", help="results folder of the sweep (default: a temporary one, removed after)")
    ns = p.parse_args()
    plugins.load_plugins(ns.plugin)
    plugins.load_plugins(study_plugins(ns.study), PLUGIN_ORIGIN)
    options = SweepOptions(preset=ns.preset, jobs=ns.jobs, quiet=True, add_variants=tuple(ns.add_variant))

    def checked() -> tuple[list, float]:
        t0 = time.perf_counter()
        spec = load_study(ns.study).with_variants(list(options.add_variants))
        configs = [c for c in spec.configs(options.preset)
                   if (not ns.variants or c.variant in ns.variants) and (not ns.depths or c.depth in ns.depths)]
        seeds = sorted({c.seed for c in configs})[: ns.seeds or None]
        return [c for c in configs if c.seed in seeds], time.perf_counter() - t0

    configs, checks = checked()
    t0 = time.perf_counter()
    with LoadAverage() as bill_load:
        bills = bill(configs, options, cost_key, say=lambda line: None)
    billed = checks + schedule([b.seconds for b in bills], options.jobs)
    bill_s = time.perf_counter() - t0
    out = Path(ns.out or tempfile.mkdtemp(prefix="bill-check-"))
    executor = make_executor(configs, options)
    executor._context()  # the fork server its runs are forked from, started now: their CPU time is its children's
    server = forkserver._forkserver._forkserver_pid
    t0, mine = time.perf_counter(), _tree_cpu(os.getpid()) + _tree_cpu(server)
    walls: dict[str, float] = {}  # each run's wall time, as its row records it
    cpu: dict[str, float] = {}  # with --jobs 1, each run's CPU time: what the fork server reaped since the last run

    def recorded(stored: dict) -> None:
        walls[stored["run_id"]] = float(stored["row"]["wall_time_s"])
        if options.jobs == 1:
            cpu[stored["run_id"]] = _tree_cpu(server) - sum(cpu.values()) - reaped0

    reaped0 = _tree_cpu(server)
    with LoadAverage() as run_load:
        configs, checks = checked()
        run_sweep(configs, out, executor, progress=False, on_record=recorded)
    measured, ours = time.perf_counter() - t0, _tree_cpu(os.getpid()) + _tree_cpu(server) - mine
    cpus = os.cpu_count() or 1
    # the threads the bill timed its steps at: those its runs got, the cores free when it billed split between jobs
    threads = int(bills[0].costs.load.get("threads") or plan_placements(options.jobs, 0)[0].threads) if bills else 1
    factor_bill = slowdown({"load_1m": bill_load.mean, "cpus": cpus}, options.jobs, threads, own=threads)
    factor_run = slowdown({"load_1m": run_load.mean, "cpus": cpus}, options.jobs, threads, own=options.jobs * threads)
    if not ns.out:
        shutil.rmtree(out, ignore_errors=True)
    what = f"{ns.study} {ns.preset or 'full'}" + (f", {' '.join(ns.variants)}" if ns.variants else "") + \
        (f", depths {' '.join(map(str, ns.depths))}" if ns.depths else "") + f": {len(configs)} runs"
    print("| runs | bill, idle | at the load while billing | at the load while running | measured | "
          "bill at the run's load / measured | load average while billing | while running | bill took |")
    print(_row(what, billed, factor_bill, factor_run, measured, bill_load.mean, run_load.mean, bill_s))
    print(f"CPU time: billed {sum(b.seconds for b in bills) / 60:.1f} min one at a time; the sweep used "
          f"{ours / 60:.1f} min")
    print()
    own = slowdown(bills[0].costs.load, options.jobs, threads, own=threads) if bills else 1.0
    factors = slowdowns(bills[0].costs.load, options.jobs, threads, own=threads) if bills else {}
    print("the bill at the load it measured (what --dry-run prints): "
          + "; ".join(f"{f:.2f}x {name}, {f * billed / 60:.1f} min, {f * billed / measured:.2f} of the measured"
                      for name, f in factors.items()) + f"; measured {measured / 60:.1f} min")
    print()
    for line in per_configuration(bills, walls, cpu or None, ours, own):
        print(line)


def per_configuration(bills: list, walls: dict[str, float], cpu: dict[str, float] | None, cpu_s: float,
                      factor: float) -> list[str]:
    """Per model configuration, the bill of one run against its runs as the sweep measured them (their median): in
    CPU time (what the bill times: each run's own, ``cpu``, where the runs ran one at a time, else its share of the
    sweep's CPU time ``cpu_s`` in proportion to its wall time) and on the wall clock (the bill scaled by ``factor``,
    the slowdown the bill printed at the load it measured, less the process start and the set-up: a row's wall time
    starts after them)."""
    ran = sum(walls.get(b.config.run_id, 0.0) for b in bills)
    if cpu is None:
        cpu = {run: wall * cpu_s / ran for run, wall in walls.items()} if ran else {}
    lines = ["| configuration | runs | billed per run (CPU) | measured per run (CPU) | billed / measured (CPU) | "
             "billed at the bill's load, after set-up | measured per run (wall) | billed / measured (wall) |",
             "|---|---|---|---|---|---|---|---|"]
    groups: dict[str, list] = {}
    for b in bills:
        if b.config.run_id in walls:
            groups.setdefault(b.costs.key, []).append(b)
    for group in groups.values():
        c = group[0].config
        billed = statistics.median(b.seconds for b in group)
        after = statistics.median(b.seconds - b.start_s - b.costs.setup_s for b in group)  # as a row's wall time
        wall = statistics.median(walls[b.config.run_id] for b in group)
        used = statistics.median(cpu[b.config.run_id] for b in group)
        name = f"{c.variant}-d{c.depth}" if c.depth else c.variant
        lines.append(f"| {name} | {len(group)} | {billed:.1f} s | {used:.1f} s | {billed / used:.2f} | "
                     f"{factor * after:.1f} s | {wall:.1f} s | {factor * after / wall:.2f} |")
    return lines

if __name__ == "__main__":
    main()
