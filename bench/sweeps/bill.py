"""What a study costs before it runs: ``bench sweep|reproduce ... --dry-run``.

Every model of the grid is built and checked first, as a sweep does (meta device, the confound guard). Then each model
configuration's costs are measured (:mod:`bench.sweeps.config_costs`: the exact FLOPs of one training step on the meta
device, and a few steps timed per family of configurations), with the threads a run of this sweep would get if it
started now (:func:`run_threads`: the free cores split between ``--jobs``).

A run's step, evaluation, probe calls and measurement phases cost what its configuration's do
(:class:`~bench.sweeps.config_costs.Costs`). Each run sets its task up in a process of its own: every run pays the
slowest set-up of its task the bill saw, and the process's start where it starts one (:func:`start_seconds`: the local
executor's first run, whose fork server imports once for all; every run of another executor). Each run's time is then
``[start] + setup + [measurement] + steps x step + evaluations x evaluation + probes x probe``; the sweep's, the study's
checks plus those runs scheduled longest-first on ``--jobs`` slots: what it should take on an idle machine (an estimate;
load makes it longer). The machine load while the bill ran is printed with it, and what the sweep takes at that load
(:func:`slowdowns`: by the load average, and by the bill's own wall time over its CPU time over the whole bill; a range
where the two disagree), which holds while the load stays as it was. Nothing is recorded.

The bill also says what the study's runs would take on the accelerators of the peak-FLOP/s table
(:data:`bench.runs.measure.PEAK_FLOPS`): the training FLOPs of every run divided by (the model FLOP utilisation measured
here x the device's peak for the study's mix of op classes; that utilisation is the steps' achieved FLOP/s over this
device's measured rates for their op classes, not over the matmul peak a run's ``mfu`` divides by). An estimate, and
printed as one: small models (CIFAR ResNets) use less of an accelerator's peak than of a CPU's, so these figures are
lower bounds. Peak memory is printed on CUDA (the timed step's, where it ran whole); a CPU's needs a process of its own
(``bench run --measure memory``).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import statistics
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from bench.runs import budget, measure
from bench.runs.config import RunConfig
from bench.runs.cores import free_cores
from bench.runs.env import cpu_sample, machine_load
from bench.runs.threads import threads_set
from bench.sweeps.config_costs import (
    PROCESS_START_S,
    Costs,
    Plan,
    families,
    family_key,
    measure_costs,
    plan,
    process_start,
    timed_seconds,
)
from bench.sweeps.executors.local import plan_placements
from bench.sweeps.options import SweepOptions


@dataclass(frozen=True)
class RunBill:
    config: RunConfig
    costs: Costs
    steps: int
    evals: int
    probe_calls: int
    measures: bool  # the first run of its configuration: it runs the measurement phases
    start_s: float = 0.0  # the process it starts in (:func:`start_seconds`): imports, paid before its set-up
    recorded: bool = False  # its configuration's cost figures are recorded in the results folder: none measures

    @property
    def measure_s(self) -> float:
        """What its measurement phases take: the configuration's, in the run that measures them; 0 in the others."""
        return self.costs.measure_s if self.measures else 0.0

    @property
    def seconds(self) -> float:
        c = self.costs
        return (self.start_s + c.setup_s + self.measure_s + self.steps * c.step_s + self.evals * c.eval_s
                + self.probe_calls * c.probe_s)

    @property
    def train_flops(self) -> float:
        return self.steps * self.costs.flops_per_step



def _steps(cfg: RunConfig, costs: Costs) -> int:
    """The optimiser steps of ``cfg`` as bench.runs.train.setup decides them: ``steps``, else the task's default
    run length, else epochs (30 by default) of its training split; a budget's steps where it has one."""
    if cfg.budget_flops is not None or cfg.budget_samples is not None:
        return budget.budget_steps(cfg, costs.flops_per_step)
    if cfg.steps is not None:
        return cfg.steps
    if cfg.epochs is None and costs.default_steps is not None:
        return costs.default_steps
    if costs.num_train is None:
        raise ValueError(f"{cfg.run_id}: its {cfg.task} data is not on this machine, so its epochs cannot be counted; "
                         "give the study steps (or --set data_path=...) for the bill")
    epochs = cfg.epochs if cfg.epochs is not None else 30.0
    return max(1, math.ceil(epochs * costs.num_train / cfg.global_batch))


def bill(configs: Sequence[RunConfig], options: SweepOptions, cost_key: Any,
         say: Callable[[str], None] = print, recorded: Collection[str] = ()) -> list[RunBill]:
    """Every run's bill, its configuration's costs measured once (``cost_key`` names a configuration): each
    configuration planned (:func:`bench.sweeps.config_costs.plan`), the timing's expected time said, then one step of
    each timed. ``recorded``: the keys whose cost figures the results folder holds already
    (:func:`bench.sweeps.driver.recorded_figures`): a sweep reuses them, so no run of those measures.

    The bill's whole wall time over its CPU time (process and children: mostly one thread's work, counting FLOPs,
    setting up, starting a process) is the load's measured slowdown (``load["wall_over_cpu"]``, over
    ``load["window_s"]`` seconds): a window of seconds, steadier than the timed steps' own fraction of one."""
    wall0, cpu0 = time.perf_counter(), measure.cpu_seconds()
    threads = run_threads(options)
    with threads_set(threads):
        plans: dict[str, Plan] = {}
        keys = {cost_key(cfg) for cfg in configs}
        say(f"  counting the FLOPs of {len(keys)} model configuration{'s' if len(keys) != 1 else ''} on the meta "
            "device ...")
        set_up: dict[str, Plan] = {}  # each family's configuration that was set up as a run sets up
        for cfg in configs:
            key = cost_key(cfg)
            if key not in plans:
                plans[key] = plan(cfg, key, set_up.get(family_key(cfg)))
                set_up.setdefault(family_key(cfg), plans[key])
        first = next(iter(plans.values()), None)
        rates = measure.device_rates(first.s.device, first.cfg.precision) if first else {}
        refs = [family[0] for family in families(plans.values()).values()]  # the steps timed (families())
        timed = {p.key: p.repeats(rates) + p.warmup for p in refs}
        expected = sum(p.expected_s(rates) * timed[p.key] for p in refs)
        say(f"  timing {sum(timed.values())} steps of {len(refs)} model configuration{'s' if len(refs) != 1 else ''} "
            f"({threads} thread{'s' if threads > 1 else ''}): their FLOPs alone take {_clock(expected)} at this "
            f"device's rates ({', '.join(f'{c} {r / 1e9:.0f} GFLOP/s' for c, r in rates.items())})")
        start_s = process_start() if plans else PROCESS_START_S  # a memory probe's process, and the runs' (below)
        setups: dict[str, float] = {}  # each run sets its task up in a process of its own: the slowest set-up seen
        for p in plans.values():
            setups[p.cfg.task] = max(setups.get(p.cfg.task, 0.0), p.setup_s)
        costs = {}
        sample = cpu_sample()
        for family in families(plans.values()).values():
            ref = family[0]  # the cheapest step of the family is timed; the others scale by their FLOPs
            say(f"  timing {ref.cfg.run_id}: {ref.repeats(rates)} step{'s' if ref.repeats(rates) > 1 else ''} of "
                f"{ref.timed} sample{'s' if ref.timed > 1 else ''} ({ref.timed_flops:.3g} FLOPs each)"
                + (f", for {len(family)} depths" if len(family) > 1 else "") + " ...")
            ref_s = timed_seconds(ref, rates)
            for p in family:
                costs[p.key] = measure_costs(p, rates, setups[p.cfg.task], start_s,
                                             timed_s=ref_s * p.timed_flops / ref.timed_flops)
        load = {**machine_load(sample), "threads": threads}
        wall, cpu = time.perf_counter() - wall0, measure.cpu_seconds() - cpu0
        if first is not None and first.s.device.type == "cpu" and cpu > 0:
            load.update(wall_over_cpu=wall / cpu, window_s=wall)
        costs = {k: dataclasses.replace(c, load=load) for k, c in costs.items()}
    out: list[RunBill] = []
    seen: set[str] = set()
    for cfg in configs:
        key = cost_key(cfg)
        c = costs[key]
        steps = _steps(cfg, c)
        every = cfg.eval_every or max(1, steps // 10)
        evals = len({*range(every, steps + 1, every), steps})
        probe_calls = (steps // cfg.probe_every + (steps % cfg.probe_every == 0)) if cfg.probe_every else 0
        measures = bool(cfg.measure) and key not in recorded and (key not in seen or options.measure_every_run)
        seen.add(key)
        out.append(RunBill(cfg, c, steps, evals, probe_calls, measures, start_seconds(len(out), options, start_s),
                           recorded=bool(cfg.measure) and key in recorded))
    return out


def start_seconds(index: int, options: SweepOptions, start_s: float) -> float:
    """What run ``index`` of a sweep pays to start its process, ``start_s`` being a fresh process's start
    (:func:`bench.sweeps.config_costs.process_start`). The local executor forks each run from a server that imported
    torch, resbench and the data modules once (:data:`bench.sweeps.executors.local.PRELOAD`): the first run pays that
    start, the others a fork (nothing to bill). Another executor (ray) starts each run's process on its own: every run
    pays it."""
    return start_s if index == 0 or options.executor != "local" else 0.0


def run_threads(options: SweepOptions) -> int:
    """The torch threads each run of the sweep gets if it starts now, as the local executor places them: the cores
    free now (those the 1-minute load average leaves) split between ``--jobs``, at most this process's own threads.
    The bill times its steps with these. On a busy machine that is fewer than the idle machine's share, and must be:
    threads that wait on each other where other work holds the cores spin, and a step's CPU time then grows with the
    load (a pre-activation ResNet's step on digits at two threads took 10 to 20 times its one-thread CPU time at a load
    average of 8 on 2 cores), while the run itself, started at that load, trains on the one free core."""
    return plan_placements(options.jobs, 0, cores=free_cores(), thread_cap=torch.get_num_threads())[0].threads



def slowdown(load: Mapping[str, Any], jobs: int, threads: int, own: int = 1) -> float:
    """How much longer a sweep takes than on an idle machine at the 1-minute load average ``load["load_1m"]`` (over
    ``load["cpus"]`` CPUs, :func:`bench.runs.env.machine_load`), ``own`` of its threads being the measuring
    process's: the other processes keep ``E = load_1m - own`` threads runnable, and the sweep's ``jobs`` x ``threads``
    share the CPUs with them, ``max(1, (jobs · threads + E) / cpus)``; 1 where the load is not known. Where the bill
    measured how much longer its own work took on the wall clock than in CPU time (``load["wall_over_cpu"]``, over
    the whole bill, :func:`bill`: a load average counts threads that hardly run, and overstates the slowdown on a
    machine of many light processes), that ratio is the slowdown, times how much smaller the sweep's share of the
    CPUs is than the bill's was: ``min(1, cpus / (own + E)) / min(1, cpus / (jobs · threads + E))``."""
    average, cpus = load.get("load_1m"), load.get("cpus")
    if average is None or not cpus:
        return 1.0
    others = max(0.0, float(average) - own)
    measured = load.get("wall_over_cpu")
    if measured is not None:  # what the bill's own steps saw, scaled by the share of the CPUs the sweep gets instead
        share = min(1.0, cpus / (own + others)) / min(1.0, cpus / (jobs * threads + others))
        return max(1.0, float(measured) * share)
    return max(1.0, (jobs * threads + others) / cpus)


AGREE = 1.25  # two estimates of the slowdown further apart than this ratio are printed as a range


def slowdowns(load: Mapping[str, Any], jobs: int, threads: int, own: int = 1) -> dict[str, float]:
    """The sweep's slowdown at ``load`` (:func:`slowdown`) by each estimate the bill has: the load average alone, and
    where it measured one, its own wall time over its CPU time; the lower first."""
    out = {"by the load average": slowdown({k: v for k, v in load.items() if k != "wall_over_cpu"}, jobs, threads,
                                           own)}
    if load.get("wall_over_cpu") is not None:
        out["by the bill's own wall over CPU time"] = slowdown(load, jobs, threads, own)
    return dict(sorted(out.items(), key=lambda item: item[1]))


def at_load(idle_s: float, factors: Mapping[str, float]) -> str:
    """What the sweep of ``idle_s`` idle seconds takes at the load the bill saw, from :func:`slowdowns`: one figure
    where the estimates agree within :data:`AGREE` (the higher), else the range between them, each named; nothing on
    an idle machine. It holds while the load stays as it was: the load when the runs run decides their time."""
    low, high = min(factors.values(), default=1.0), max(factors.values(), default=1.0)
    if high <= 1:
        return ""
    until = ", while the load stays as it was when billed"
    if high <= AGREE * low:
        return f": at that load, {_clock(high * idle_s)} ({high:.2f}x){until}"
    named = ", ".join(f"{f:.2f}x {name}" for name, f in factors.items())
    return f": at that load, between {_clock(low * idle_s)} and {_clock(high * idle_s)} ({named}){until}"


def load_line(load: Mapping[str, Any]) -> str:
    """The machine load a bill's steps were timed under, in words; a busier machine when the runs run makes them
    slower, an idler one faster."""
    if not load or load.get("load_1m") is None:
        return "machine load while billing: not known here"
    other = load.get("other_cpu")
    return (f"machine load while billing: 1-min load average {load['load_1m']:.1f} on {load.get('cpus')} CPUs"
            + (f", other processes {100 * other:.0f}% of the CPU time" if other is not None else "")
            + (f", the bill {load['wall_over_cpu']:.2f}x longer on the wall clock than in CPU time"
               + (f" over {_clock(load['window_s'])}" if load.get("window_s") else "")
               if load.get("wall_over_cpu") is not None else "")
            + " (the steps were timed in CPU time: an idle machine's figures; the sweep shares the CPUs with the "
              "other work)")


def schedule(seconds: Sequence[float], slots: int) -> float:
    """The wall time of running jobs of ``seconds`` on ``slots`` at a time, longest first."""
    finish = [0.0] * max(1, slots)
    for s in sorted(seconds, reverse=True):
        heapq.heapreplace(finish, finish[0] + s)
    return max(finish)


def _clock(seconds: float) -> str:
    if seconds < 0.001:
        return "<1 ms"
    if seconds < 1:
        return f"{1000 * seconds:.0f} ms"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def render(bills: Sequence[RunBill], options: SweepOptions, device: str,
           accelerators: Mapping[str, float], checks_s: float = 0.0) -> list[str]:
    """The bill as lines: per configuration, in total (with ``checks_s``, what checking the study took before its
    first run, and the machine load its steps were timed under), and on the accelerators of the peak table."""
    lines = [f"{'configuration':<44} {'runs':>4} {'steps':>8} {'train FLOPs':>12} {'per run':>9} {'measure':>9} "
             f"{'peak MiB':>9}"]
    by_key: dict[str, list[RunBill]] = {}
    for b in bills:
        by_key.setdefault(b.costs.key, []).append(b)
    for group in by_key.values():
        first = group[0]
        name = f"{first.config.variant}" + (f"-d{first.config.depth}" if first.config.depth else "") + \
            f" {first.config.task}" + (f" (as {first.costs.stand_in})" if first.costs.stand_in else "")
        # a run's training alone: the process start has its line, the measurement its column (paid once)
        per_run = statistics.median(b.seconds - b.start_s - b.measure_s for b in group)
        peak = f"{first.costs.peak_mb:.0f}" if first.costs.peak_mb is not None else "n/a"
        lines.append(f"{name:<44} {len(group):>4} {sum(b.steps for b in group):>8} "
                     f"{sum(b.train_flops for b in group):>12.3g} {_clock(per_run):>9} {_measure_cell(group):>9} "
                     f"{peak:>9}")
    if any(b.costs.peak_mb is None for b in bills):
        lines.append(PEAK_NOTE)
    lines += start_lines(bills)
    total = sum(b.seconds for b in bills)
    flops = sum(b.train_flops for b in bills)
    slots = options.jobs
    idle = checks_s + schedule([b.seconds for b in bills], slots)
    lines.append(f"total: {len(bills)} runs, {sum(b.steps for b in bills):,} steps, {flops:.3g} training FLOPs; "
                 f"on this device ({device}), idle: {_clock(idle)} with --jobs {slots} (an estimate of what it "
                 "should take with the CPUs to itself; load makes it longer)"
                 + (f" ({_clock(checks_s + total)} one at a time)" if slots > 1 else "")
                 + (f", the study's checks ({_clock(checks_s)}) included" if checks_s else ""))
    load = bills[0].costs.load if bills else {}
    threads = int(load.get("threads") or plan_placements(slots, 0)[0].threads)  # the threads its steps were timed at
    lines.append(load_line(load) + at_load(idle, slowdowns(load, slots, threads, own=threads)))
    mfus = [b.costs.mfu for b in bills if b.costs.mfu]
    mfu = statistics.median(mfus) if mfus else 0.0
    if flops and mfu > 1:
        lines.append(f"no accelerator figures: the steps timed here ran at {mfu:.0%} of the peak this device "
                     "reached on a lone matmul and convolution, so that peak is below its real one and no utilisation "
                     "can be read from it; bill again on a quieter machine (on a CPU in bf16 or fp16, also with --set "
                     "precision=fp32)")
    elif flops and mfu:
        cells = ", ".join(f"{name} {_clock(flops / (mfu * peak))}" for name, peak in accelerators.items())
        timed = [b.costs for b in bills if b.costs.mfu and b.costs.step_s]
        achieved = statistics.median(c.flops_per_step / c.step_s for c in timed)
        rate = statistics.median(c.flops_per_step / c.step_s / (c.mfu or 1.0) for c in timed)
        lines.append(f"on accelerators, at the model FLOP utilisation measured here ({mfu:.1%}), the training FLOPs "
                     f"alone would take: {cells} (one device, no evaluation; small models use less of an "
                     "accelerator's peak than of a CPU's: read these as lower bounds)")
        lines.append(f"that utilisation: the steps' achieved {_rate(achieved)} over {_rate(rate)}, this device's "
                     "measured rates for their op classes (a lone matmul's and convolution's, weighted by the steps' "
                     "FLOPs; on a CPU in CPU time per thread: idle figures); a run's `mfu` divides its wall-clock rate "
                     "at its load by its `peak_source` (on a CPU a 1024x1024 matmul's): compare achieved rates "
                     "(`achieved_tflops`)")
    return lines


# Why a row's peak memory reads n/a (the module docstring's last sentence), said once under the table.
PEAK_NOTE = ("peak MiB n/a: on a CPU a step's peak memory needs a process of its own (`bench run --measure memory`, or "
             "the runs record it); on CUDA it is the timed step's, where the step ran whole")


def _rate(flops_per_s: float) -> str:
    """A FLOP rate in the unit that keeps it short: GFLOP/s below a TFLOP/s (a CPU's), else TFLOP/s."""
    return f"{flops_per_s / 1e9:.1f} GFLOP/s" if flops_per_s < 1e12 else f"{flops_per_s / 1e12:.1f} TFLOP/s"


def _measure_cell(group: Sequence[RunBill]) -> str:
    """A configuration's measurement phases in the bill: ``-`` where the study measures nothing, ``recorded`` where
    the results folder holds its figures (no run measures), else the seconds billed, once (``4x 3 s`` with
    ``--measure-every-run``)."""
    if not group[0].config.measure:
        return "-"
    if group[0].recorded:
        return "recorded"
    paid = [b.measure_s for b in group if b.measures]
    if len(paid) <= 1:
        return _clock(paid[0]) if paid else "-"
    return f"{len(paid)}x {_clock(statistics.median(paid))}"


def start_lines(bills: Sequence[RunBill]) -> list[str]:
    """The bill's line for the run processes' start (Python, torch, resbench and the data modules imported), kept
    out of the per-run figures, which it would otherwise inflate for whichever configuration's run comes first:
    paid once where the runs fork from one server (the local executor), by every run otherwise."""
    starts = [b.start_s for b in bills if b.start_s > 0]
    if not starts:
        return []
    if len(starts) == 1:
        forked = " (the sweep's first run; the others fork from it)" if len(bills) > 1 else ""
        return [f"+ {_clock(starts[0])} process start, once{forked}"]
    return [f"+ {_clock(statistics.median(starts))} process start in each of {len(starts)} runs"]


def accelerators(precision: str, flops: Mapping[str, float] | None = None) -> dict[str, float]:
    """The peak FLOP/s of each accelerator of the table at ``precision`` for a step of ``flops`` by op class
    (:func:`bench.runs.measure.datasheet_peak`: in fp32, convolutions at TF32 and matmuls at fp32, as PyTorch's
    default flags run them)."""
    found = {name: measure.datasheet_peak(name, precision, flops, measure.tf32_classes()) for name, _ in
             measure.PEAK_FLOPS}
    return {name: peak[0] for name, peak in found.items() if peak is not None}
