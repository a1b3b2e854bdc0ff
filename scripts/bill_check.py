"""The dry run's bill against the measured sweep of the same runs, on this machine as it is: prints one Markdown row.

The runs are a study's (under a preset), optionally a subset of them (``--variants``, ``--depths``, ``--seeds``): a
study too long to sweep for a check is measured on a subset with the same machinery. The bill is
:func:`bench.sweeps.bill.bill` (what ``--dry-run`` prints) and the sweep :func:`bench.sweeps.driver.run_sweep` on
the local executor (what ``bench sweep`` runs), both after the same checks of the study; the wall time of each
includes those checks. The bill times its steps in CPU time: its total is an idle machine's. The machine is not
idle: other processes' share of the CPUs' time is measured while the bill runs and while the sweep runs (the busy
time of all CPUs less the sweep's own, its runs being the fork server's children), and the bill is scaled by each
(:func:`bench.sweeps.bill.slowdown`): the row compares the bill at the sweep's load with the sweep. Nothing is
written outside ``--out``.

    python scripts/bill_check.py degradation --preset quick --variants plain resnet --depths 20 56 --jobs 2
    python scripts/bill_check.py crosslayer --preset quick --variants preln hyper_connections --jobs 2
    python scripts/bill_check.py degradation --preset quick --plugin gated_resnet.py --add-variant gated_resnet \\
        --variants gated_resnet resnet --depths 20 --jobs 2
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from multiprocessing import forkserver
from pathlib import Path

from bench.analysis.studyfile import PLUGIN_ORIGIN, study_plugins
from bench.runs import plugins
from bench.runs.env import cpu_sample, machine_load
from bench.runs.measure import cost_key
from bench.sweeps.bill import bill, schedule, slowdown
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


def _row(what: str, billed: float, factor_bill: float, factor_run: float, measured: float, bill_load: dict,
         run_other: float | None, bill_s: float) -> str:
    cells = [what, f"{billed / 60:.1f} min", f"{factor_bill * billed / 60:.1f} min ({factor_bill:.2f}x)",
             f"{factor_run * billed / 60:.1f} min ({factor_run:.2f}x)", f"{measured / 60:.1f} min",
             f"{factor_run * billed / measured:.2f}", f"{billed / measured:.2f}",
             f"{100 * float(bill_load.get('other_cpu') or 0):.0f}%",
             f"{100 * run_other:.0f}%" if run_other is not None else "n/a", f"{bill_s:.0f} s"]
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
    before, t0 = cpu_sample(), time.perf_counter()
    bills = bill(configs, options, cost_key, say=lambda line: None)
    billed = checks + schedule([b.seconds for b in bills], options.jobs)
    bill_s, bill_load = time.perf_counter() - t0, machine_load(before)
    out = Path(ns.out or tempfile.mkdtemp(prefix="bill-check-"))
    executor = make_executor(configs, options)
    executor._context()  # the fork server its runs are forked from, started now: their CPU time is its children's
    server = forkserver._forkserver._forkserver_pid
    before, t0, mine = cpu_sample(), time.perf_counter(), _tree_cpu(os.getpid()) + _tree_cpu(server)
    configs, checks = checked()
    run_sweep(configs, out, executor, progress=False)
    after, measured = cpu_sample(), time.perf_counter() - t0
    ours = _tree_cpu(os.getpid()) + _tree_cpu(server) - mine
    cpus = os.cpu_count() or 1
    # the share of the CPUs' time other processes used while the sweep ran: busy time that was not the sweep's
    run_other = None
    if before is not None and after is not None:
        run_other = max(0.0, (after[0] - before[0]) - ours) / (after[1] - before[1])
    threads = plan_placements(options.jobs, 0)[0].threads
    factor_bill = slowdown(bill_load, options.jobs, threads)
    factor_run = slowdown({"other_cpu": run_other, "cpus": cpus}, options.jobs, threads)
    if not ns.out:
        shutil.rmtree(out, ignore_errors=True)
    what = f"{ns.study} {ns.preset or 'full'}" + (f", {' '.join(ns.variants)}" if ns.variants else "") + \
        (f", depths {' '.join(map(str, ns.depths))}" if ns.depths else "") + f": {len(configs)} runs"
    print("| runs | bill, idle | at the load while billing | at the load while running | measured | "
          "bill at the run's load / measured | idle bill / measured | others' CPU while billing | "
          "while running | bill took |")
    print(_row(what, billed, factor_bill, factor_run, measured, bill_load, run_other, bill_s))

if __name__ == "__main__":
    main()
