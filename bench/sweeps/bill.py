"""What a study costs before it runs: ``bench sweep|reproduce ... --dry-run``.

Every model of the grid is built and checked first, as a sweep does (meta device, the confound guard). Then, per model
configuration (:func:`bench.runs.measure.cost_key`: the runs that share one measure the same step), the bill counts the
exact FLOPs of one training step at the run's batch on the meta device (``torch.utils.flop_counter``, split into matmuls
and convolutions). Per family of configurations (:func:`families`: the same but for the depth, one block repeated, whose
step time grows with its FLOPs at one rate) it times the cheapest configuration's step and scales that time to the
others by their FLOPs, so a family's bill is monotone in its FLOPs and a deep net's step costs the bill a shallow one's.
The timed configuration takes a few short steps on the device at hand (:meth:`Plan.repeats`: as many as fit a second, up
to five; their median), with the threads a run of this sweep would get if it started now (:func:`run_threads`: the free
cores split between ``--jobs``): at the run's batch, or at the largest halving of it whose FLOPs fit
:data:`STEP_BUDGET`, after one untimed step (a first step pays one-off costs no later step does); a step over the budget
even at one sample (GPT-2 small at 1,024 tokens) is timed once, with no warm-up. On a CPU the steps are timed in CPU
time per thread, and so are the set-up and a process's start (:func:`process_start`): what they take on idle cores,
however busy the machine is while it bills (on a busy machine the runs, and so the timed steps, get fewer threads:
:func:`run_threads`). Before timing, it prints what the timing will take: those steps' FLOPs at the device's rate for
each op class (:func:`bench.runs.measure.device_rates`, measured once, and timed as the steps are: in CPU time per
thread on a CPU, so that the model FLOP utilisation divides like by like).

From these (:func:`step_seconds` and :class:`Costs`): a run's step takes the timed step's time scaled by its FLOPs
(FLOPs grow with the batch; so does a step's time, at the rate the timed step achieved); an evaluated sample costs
the forward's share of a training sample's time; a probe call a training step's; the measurement phases of a
configuration's first run their steps, and the memory probe a process start besides (no run of a configuration
whose figures the results folder holds already: the sweep reuses those; the table bills the measurement in a
column of its own, apart from the per-run training figure) (timed once, a fresh process
importing what a run imports; on a GPU the memory is measured in the run's own process). Each run sets its task up
in a process of its own: every run pays the slowest set-up of its task the bill saw, and the process's start where
it starts one (:func:`start_seconds`: the local executor's first run, whose fork server imports once for all; every
run of another executor). Each run's time is then ``[start] + setup + [measurement] + steps x step + evaluations x
evaluation + probes x probe``; the sweep's, the study's checks plus those runs scheduled longest-first on ``--jobs``
slots: what it should take on an idle machine (an estimate; load makes it longer). The machine load while the bill ran
is printed with it, and what the sweep takes at that load (:func:`slowdowns`: by the load average, and by the bill's
own wall time over its CPU time over the whole bill; a range where the two disagree), which holds while the load stays
as it was. Nothing is recorded.

A task whose data is not on this machine (CIFAR not downloaded) is measured on a stand-in of the same shapes
(:data:`STAND_INS`: what a step costs depends on the shapes only), with the real dataset's size for the run length.

The bill also says what the study's runs would take on the accelerators of the peak-FLOP/s table
(:data:`bench.runs.measure.PEAK_FLOPS`): the training FLOPs of every run divided by (the model FLOP utilisation
measured here x the device's peak for the study's mix of op classes; that utilisation is the steps' achieved FLOP/s
over this device's measured rates for their op classes, not over the matmul peak a run's ``mfu`` divides by). An
estimate, and printed as one: small models (CIFAR ResNets) use less of an accelerator's peak than of a CPU's, so these
figures are lower bounds. Peak memory is printed on CUDA (the timed step's, where it ran whole); a CPU's needs a
process of its own (``bench run --measure memory``).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import variants
from bench.runs import budget, measure
from bench.runs.config import RunConfig
from bench.runs.cores import free_cores
from bench.runs.env import cpu_sample, machine_load
from bench.runs.tasks import TaskError, synth
from bench.runs.tasks.tokens import DEFAULT_EVAL_TOKENS
from bench.runs.threads import threads_set
from bench.runs.train import StepRunner, batch_generator, build_model, check_model_fits, model_kwargs, setup
from bench.sweeps.executors.local import PRELOAD, plan_placements
from bench.sweeps.options import SweepOptions


# Task -> for a run's config: (the stand-in's RunConfig fields, training samples of the real dataset, samples one
# evaluation reads): the shapes a step sees, without the data. An image folder is taken for ImageNet-1k.
def _token_shards(cfg: RunConfig) -> dict[str, Any]:
    """Generated token shards of the run's vocabulary, enough for a few of its batches (written once per vocabulary
    into a directory that lasts as long as the process): the ``tokens`` task itself, on data of the same shapes."""
    key = cfg.vocab_size
    if key not in _SHARDS:
        _SHARDS[key] = tempfile.TemporaryDirectory(prefix="resbench-bill-tokens-")
        windows = 4 * cfg.batch_size + EVAL_SAMPLES
        synth.synth_tokens(Path(_SHARDS[key].name) / "shards", train_tokens=windows * (cfg.seq_len + 1),
                           val_tokens=(EVAL_SAMPLES + 1) * (cfg.seq_len + 1), vocab_size=cfg.vocab_size,
                           progress=False)
    return {"data_path": str(Path(_SHARDS[key].name) / "shards")}


_SHARDS: dict[int, tempfile.TemporaryDirectory[str]] = {}
STAND_INS: dict[str, Callable[[RunConfig], tuple[dict[str, Any], int | None, int]]] = {
    "cifar10": lambda c: ({"task": "synthetic", "image_size": 32, "num_classes": 10}, 50_000, 20_000),
    "cifar100": lambda c: ({"task": "synthetic", "image_size": 32, "num_classes": 100}, 50_000, 20_000),
    "imagefolder": lambda c: ({"task": "synthetic", "image_size": c.image_size, "num_classes": c.num_classes,
                               "data_path": None}, 1_281_167, 60_000),
    # a corpus's size is the user's (the shipped presets count steps); an evaluation reads --eval-tokens
    "tokens": lambda c: (_token_shards(c), None, (c.eval_tokens or DEFAULT_EVAL_TOKENS) // c.seq_len),
}
STEP_BUDGET = 2e10  # FLOPs of a step timed whole here (some 0.3 s on a 2-core CPU); a larger one on fewer samples
EVAL_SAMPLES = 64  # validation windows of the generated token shards
PROCESS_START_S = 5.0  # a process's start where it was not timed: start Python, import torch, resbench and the data
TIMING_S = 1.0  # time the steps of one configuration take at most (their FLOPs at the device's rates), repeats
MAX_REPEATS = 5  # timed steps of one configuration at most: the median of them is its step


@dataclass(frozen=True)
class Costs:
    """What one model configuration's runs spend, in seconds (:func:`measure_costs`)."""

    key: str
    setup_s: float
    measure_s: float
    step_s: float
    eval_s: float  # one evaluation pass
    probe_s: float
    flops_per_step: float  # forward + backward of one optimiser step
    peak_mb: float | None
    mfu: float | None  # achieved / this device's rate for the step's op classes, in the timed step
    num_train: int | None  # None: a corpus not on this machine (its runs must count steps)
    stand_in: str | None  # the task it was measured on, when not the run's own
    default_steps: int | None = None  # the task's run length when neither steps nor epochs is given
    timed_samples: int = 0  # the samples of the one timed step
    flops_by_class: Mapping[str, float] = dataclasses.field(default_factory=dict)  # of one optimiser step
    load: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # the machine's while the steps were timed


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


@dataclass
class Plan:
    """One configuration before it is timed: its set-up task and model, the exact FLOPs of one micro-batch (the
    run's ``batch_size`` samples) and the samples of the step to time."""

    cfg: RunConfig
    key: str
    s: Any  # bench.runs.train.Setup, at the timed batch, its model on the meta device
    setup_s: float
    micro: measure.StepFlops  # one forward + backward of a micro-batch of the run
    timed: int  # samples of the timed step
    num_train: int | None
    stand_in: str | None

    @property
    def timed_flops(self) -> float:
        return self.micro.train * self.timed / self.cfg.batch_size

    @property
    def warmup(self) -> int:
        """An untimed step first, unless the timed step is over the budget (its one-off costs are then noise)."""
        return int(self.timed_flops <= STEP_BUDGET)

    def expected_s(self, rates: Mapping[str, float]) -> float:
        """What one timed step takes: its FLOPs at the device's rate for each op class (a floor: overheads are not
        FLOPs)."""
        share = self.timed / self.cfg.batch_size
        return sum(n * share / rates[c] for c, n in self.micro.train_by_class.items() if n)

    def repeats(self, rates: Mapping[str, float]) -> int:
        """Steps to time: as many as fit :data:`TIMING_S` (by their FLOPs), 1 to :data:`MAX_REPEATS`; the median is
        the step (one step alone is a noisy figure on a machine that runs anything else); 1 over the budget."""
        if not self.warmup:
            return 1
        return max(1, min(MAX_REPEATS, int(TIMING_S / max(self.expected_s(rates), 1e-6))))


def step_seconds(timed_s: float, timed_samples: int, cfg: RunConfig) -> float:
    """One optimiser step of ``cfg`` from one timed step of ``timed_samples`` samples: a step's FLOPs, and its
    time, grow with its samples (each micro-batch of ``batch_size``, ``grad_accum`` of them)."""
    return timed_s * cfg.batch_size / timed_samples * cfg.grad_accum


def _setup(cfg: RunConfig) -> tuple[Any, int | None, str | None]:
    """``cfg`` set up as it is when its task loads here, else on the stand-in of the same shapes (:data:`STAND_INS`):
    the setup, the real dataset's training samples (stand-ins only) and the stand-in's name."""
    cfg = dataclasses.replace(cfg, grad_accum=1, global_batch_size=None, steps=1, epochs=None, measure=(),
                              budget_flops=None, budget_samples=None)
    try:
        return setup(cfg), None, None
    except TaskError:
        if cfg.task not in STAND_INS:
            raise
        fields, num_train, _ = STAND_INS[cfg.task](cfg)
        size = max(4 * cfg.batch_size, 64)
        stand = dataclasses.replace(cfg, **fields, train_size=size, val_size=size)
        return setup(stand), num_train, "generated shards" if stand.task == cfg.task else stand.task


def plan(cfg: RunConfig, key: str, like: Plan | None = None) -> Plan:
    """Set up ``cfg`` (its stand-in where its data is not here), count one micro-batch's FLOPs on the meta device and
    choose the timed step: the run's batch, halved while its FLOPs exceed :data:`STEP_BUDGET` (down to one sample).

    ``like``: a plan of ``cfg``'s family (:func:`families`: all but the depth equal), set up already. Its task is
    this one's, so ``cfg`` is not set up again: its model is built on the meta device only, and the check a run's
    set-up makes (weights, gradients, two optimiser states and one forward's activations fit the machine) is made on
    the one meta-device forward that counts its FLOPs. Its set-up time is the family's."""
    if like is None:
        t0 = cpu_clock()
        s, num_train, stand = _setup(cfg)
        setup_s = cpu_clock() - t0
    else:
        s0 = like.s
        lite = dataclasses.replace(s0.cfg, depth=cfg.depth, batch_size=cfg.batch_size)
        s = dataclasses.replace(s0, cfg=lite, model_kwargs=model_kwargs(lite, s0.task))
        setup_s, num_train, stand = like.setup_s, like.num_train, like.stand_in
    x, y = next(s.task.train_batches(1, batch_generator(s, 1)))
    b = cfg.batch_size
    with torch.device("meta"):  # on the meta device: shapes only, nothing allocated
        model = variants.create(cfg.variant, **s.model_kwargs)
    micro = measure.meta_step_flops(lambda: model, x.expand(b, *x.shape[1:]), y.expand(b, *y.shape[1:]),
                                    s.task.loss, activations=like is not None)
    if like is not None:
        if s.device.type == "cpu":  # as bench.runs.train.setup checks a run's model before its weights exist
            check_model_fits(cfg, sum(p.numel() for p in model.parameters()), micro.activation_bytes)
        s = dataclasses.replace(s, model=model)
    while b > 1 and micro.train * b / cfg.batch_size > STEP_BUDGET:
        b //= 2
    # the model moves to the meta device until its step is timed: a study's models are never all in memory at once
    s = dataclasses.replace(s, cfg=dataclasses.replace(s.cfg, batch_size=b), model=s.model.to("meta"))
    return Plan(cfg, key, s, setup_s, micro, b, num_train, stand)


def family_key(cfg: RunConfig) -> str:
    """What the configurations of one family (:func:`families`) share: everything but the depth."""
    return measure.cost_key(dataclasses.replace(cfg, depth=None))


def _built(s: Any) -> Any:
    """``s`` with its model built again on its device, as :func:`bench.runs.train.setup` builds it."""
    model = build_model(s.cfg, s.model_kwargs).to(s.device)
    return dataclasses.replace(s, model=model.to(memory_format=torch.channels_last) if s.cfg.channels_last else model)


def timed_seconds(p: Plan, rates: Mapping[str, float]) -> float:
    """The median of the steps of :func:`plan`'s choosing (:meth:`Plan.repeats`, after one untimed one for a step
    within the budget), in seconds; on a CPU the steps' CPU time per thread where that is less: their time on idle
    cores, whatever else runs now."""
    s, device = _built(p.s), p.s.device
    runner = StepRunner(s.cfg, s, s.model, batch_generator(s, 2))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    cpu0 = cpu_clock()
    times = measure.time_steps(runner, device, warmup=p.warmup, repeats=p.repeats(rates), steps=1)
    timed_s = measure.median(times) / 1e3
    if device.type == "cpu":
        timed_s = min(timed_s, (cpu_clock() - cpu0) / (p.warmup + len(times)) / torch.get_num_threads())
    return timed_s


def measure_costs(p: Plan, rates: Mapping[str, float], setup_s: float | None = None,
                  start_s: float = PROCESS_START_S, timed_s: float | None = None) -> Costs:
    """One configuration's costs (module docstring) from the time of its timed step: measured here
    (:func:`timed_seconds`), or ``timed_s`` where given (a configuration of a family another one was timed for,
    :func:`bill`). ``setup_s``: what setting a run up takes in a process of its own (default: the plan's, which may
    have found its data already loaded); ``start_s``: what starting the memory probe's process takes."""
    cfg, s, device = p.cfg, p.s, p.s.device
    measured = timed_s is None
    timed_s = timed_seconds(p, rates) if timed_s is None else timed_s
    peak_mb = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" and measured \
        and p.timed == cfg.batch_size else None
    micro_s = timed_s * cfg.batch_size / p.timed  # one micro-batch of the run
    step_s = step_seconds(timed_s, p.timed, cfg)
    flops = p.micro.train * cfg.grad_accum
    by_class = {c: n * cfg.grad_accum for c, n in p.micro.train_by_class.items()}
    rate = flops / sum(n / rates[c] for c, n in by_class.items() if n) if flops else 0.0
    mfu = flops / step_s / rate if flops and rate else None
    # The run's own phases: FLOPs is one forward and backward of a micro-batch, the timing phase its configured
    # warm-up and repeats of steps, the memory probe a process of its own that takes four steps.
    phase_s = {"flops": micro_s, "throughput": (cfg.timing_warmup + cfg.timing_repeats * cfg.timing_steps) * step_s,
               "memory": (start_s + 4 * step_s) if device.type == "cpu" else 4 * step_s}
    # an evaluated sample: the forward's share of a training sample's time
    sample_s = micro_s / cfg.batch_size * p.micro.forward / max(p.micro.train, 1)
    evaluated = STAND_INS[cfg.task](cfg)[2] if p.stand_in is not None else _evaluated(s)
    return Costs(p.key, p.setup_s if setup_s is None else setup_s, sum(phase_s[q] for q in cfg.measure), step_s,
                 evaluated * sample_s,
                 micro_s if cfg.probe_every else 0.0, flops, peak_mb, mfu,
                 p.num_train if p.stand_in is not None else s.task.num_train, p.stand_in, s.task.default_steps,
                 p.timed, by_class)


def _evaluated(s: Any) -> int:
    """The samples one evaluation reads: the validation split and the training-error subset (counted, not run)."""
    return sum(len(y) for batches in (s.task.val_batches(256), s.task.train_eval_batches(256)) for _, y in batches)


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
    configuration planned (:func:`plan`), the timing's expected time said, then one step of each timed.
    ``recorded``: the keys whose cost figures the results folder holds already
    (:func:`bench.sweeps.driver.recorded_figures`): a sweep reuses them, so no run of those measures.

    The bill's whole wall time over its CPU time (process and children: mostly one thread's work, counting FLOPs,
    setting up, starting a process) is the load's measured slowdown (``load["wall_over_cpu"]``, over
    ``load["window_s"]`` seconds): a window of seconds, steadier than the timed steps' own fraction of one."""
    wall0, cpu0 = time.perf_counter(), cpu_clock()
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
        wall, cpu = time.perf_counter() - wall0, cpu_clock() - cpu0
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
    (:func:`process_start`). The local executor forks each run from a server that imported torch, resbench and the
    data modules once (:data:`bench.sweeps.executors.local.PRELOAD`): the first run pays that start, the others a
    fork (nothing to bill). Another executor (ray) starts each run's process on its own: every run pays it."""
    return start_s if index == 0 or options.executor != "local" else 0.0


def run_threads(options: SweepOptions) -> int:
    """The torch threads each run of the sweep gets if it starts now, as the local executor places them: the cores
    free now (those the 1-minute load average leaves) split between ``--jobs``, at most this process's own threads.
    The bill times its steps with these. On a busy machine that is fewer than the idle machine's share, and must be:
    threads that wait on each other where other work holds the cores spin, and a step's CPU time then grows with the
    load (a pre-activation ResNet's step on digits at two threads took 10 to 20 times its one-thread CPU time at a load
    average of 8 on 2 cores), while the run itself, started at that load, trains on the one free core."""
    return plan_placements(options.jobs, 0, cores=free_cores(), thread_cap=torch.get_num_threads())[0].threads


def families(plans: Iterable[Plan]) -> dict[str, list[Plan]]:
    """The plans grouped by everything but their depth (variant, model arguments, task, batch, precision ...), each
    cheapest step first. A family's units are one block repeated: its steps' time grows with their FLOPs at one rate,
    so the bill times the cheapest step of each family and scales it to the others by their exact FLOPs (a deep net's
    bill costs a shallow net's step, and a family's bill rises with its FLOPs)."""
    out: dict[str, list[Plan]] = {}
    for p in plans:
        out.setdefault(family_key(p.cfg), []).append(p)
    return {k: sorted(v, key=lambda p: p.timed_flops) for k, v in out.items()}


def cpu_clock() -> float:
    """CPU seconds this process and the children it waited for have used (:func:`bench.runs.measure.cpu_seconds`):
    what a piece of work takes on an idle core, however busy the machine is while the bill times it."""
    return measure.cpu_seconds()


def process_start() -> float:
    """What starting a run's process takes here, timed once in CPU seconds: Python started and what a run imports
    before its set-up (torch, resbench, the variants and the data modules: the local executor's fork server's
    :data:`~bench.sweeps.executors.local.PRELOAD`, which holds what the memory probe's process imports too). The
    sweep's first run pays it (the fork server's start) and so does each memory probe on a CPU."""
    t0 = cpu_clock()
    subprocess.run([sys.executable, "-c", f"import bench.runs.memprobe, {', '.join(PRELOAD)}"], check=False,
                   capture_output=True, timeout=600)
    return cpu_clock() - t0


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
