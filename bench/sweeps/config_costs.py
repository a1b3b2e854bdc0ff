"""What one model configuration's runs cost, measured before a sweep runs: the parts of the dry run's bill
(:mod:`bench.sweeps.bill`) that are one configuration's, each planned (:func:`plan`) and timed.

Per model configuration (:func:`bench.runs.measure.cost_key`: the runs that share one measure the same step), the bill
counts the exact FLOPs of one training step at the run's batch on the meta device (``torch.utils.flop_counter``, split
into matmuls and convolutions). Per family of configurations (:func:`families`: the same but for the depth, one block
repeated, whose step time grows with its FLOPs at one rate) it times the cheapest configuration's step and scales that
time to the others by their FLOPs, so a family's bill is monotone in its FLOPs and a deep net's step costs the bill a
shallow one's. The timed configuration takes a few short steps on the device at hand (:meth:`Plan.repeats`: as many as
fit a second, up to five; their median), with the threads a run of this sweep would get if it started now
(:func:`bench.sweeps.bill.run_threads`: the free cores split between ``--jobs``): at the run's batch, or at the largest
halving of it whose FLOPs fit :data:`STEP_BUDGET`, after one untimed step (a first step pays one-off costs no later step
does); a step over the budget even at one sample (GPT-2 small at 1,024 tokens) is timed once, with no warm-up. On a CPU
the steps are timed in CPU time per thread, and so are the set-up and a process's start (:func:`process_start`): what
they take on idle cores, however busy the machine is while it bills (on a busy machine the runs, and so the timed steps,
get fewer threads: :func:`bench.sweeps.bill.run_threads`). Before timing, the bill prints what the timing will take:
those steps' FLOPs at the device's rate for each op class (:func:`bench.runs.measure.device_rates`, measured once, and
timed as the steps are: in CPU time per thread on a CPU, so that the model FLOP utilisation divides like by like).

From these (:func:`step_seconds`, :func:`measure_costs` and :class:`Costs`): a run's step takes the timed step's time
scaled by its FLOPs (FLOPs grow with the batch; so does a step's time, at the rate the timed step achieved); an
evaluated sample costs the forward's share of a training sample's time; a probe call a training step's; the measurement
phases of a configuration's first run their steps, and the memory probe a process start besides (no run of a
configuration whose figures the results folder holds already: the sweep reuses those; the table bills the measurement in
a column of its own, apart from the per-run training figure) (timed once, a fresh process importing what a run imports;
on a GPU the memory is measured in the run's own process).

A task whose data is not on this machine (CIFAR not downloaded) is measured on a stand-in of the same shapes
(:data:`STAND_INS`: what a step costs depends on the shapes only), with the real dataset's size for the run length.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import variants
from bench.runs import measure
from bench.runs.config import RunConfig
from bench.runs.tasks import TaskError, synth
from bench.runs.tasks.tokens import DEFAULT_EVAL_TOKENS
from bench.runs.train import StepRunner, batch_generator, build_model, check_model_fits, model_kwargs, setup
from bench.sweeps.executors.local import PRELOAD


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
        t0 = measure.cpu_seconds()
        s, num_train, stand = _setup(cfg)
        setup_s = measure.cpu_seconds() - t0
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
    cpu0 = measure.cpu_seconds()
    times = measure.time_steps(runner, device, warmup=p.warmup, repeats=p.repeats(rates), steps=1)
    timed_s = measure.median(times) / 1e3
    if device.type == "cpu":
        timed_s = min(timed_s, (measure.cpu_seconds() - cpu0) / (p.warmup + len(times)) / torch.get_num_threads())
    return timed_s


def measure_costs(p: Plan, rates: Mapping[str, float], setup_s: float | None = None,
                  start_s: float = PROCESS_START_S, timed_s: float | None = None) -> Costs:
    """One configuration's costs (module docstring) from the time of its timed step: measured here
    (:func:`timed_seconds`), or ``timed_s`` where given (a configuration of a family another one was timed for,
    :func:`bench.sweeps.bill.bill`). ``setup_s``: what setting a run up takes in a process of its own (default: the
    plan's, which may have found its data already loaded); ``start_s``: what starting the memory probe's process
    takes."""
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



def families(plans: Iterable[Plan]) -> dict[str, list[Plan]]:
    """The plans grouped by everything but their depth (variant, model arguments, task, batch, precision ...), each
    cheapest step first. A family's units are one block repeated: its steps' time grows with their FLOPs at one rate,
    so the bill times the cheapest step of each family and scales it to the others by their exact FLOPs (a deep net's
    bill costs a shallow net's step, and a family's bill rises with its FLOPs)."""
    out: dict[str, list[Plan]] = {}
    for p in plans:
        out.setdefault(family_key(p.cfg), []).append(p)
    return {k: sorted(v, key=lambda p: p.timed_flops) for k, v in out.items()}


def process_start() -> float:
    """What starting a run's process takes here, timed once in CPU seconds: Python started and what a run imports
    before its set-up (torch, resbench, the variants and the data modules: the local executor's fork server's
    :data:`~bench.sweeps.executors.local.PRELOAD`, which holds what the memory probe's process imports too). The
    sweep's first run pays it (the fork server's start) and so does each memory probe on a CPU."""
    t0 = measure.cpu_seconds()
    subprocess.run([sys.executable, "-c", f"import bench.runs.memprobe, {', '.join(PRELOAD)}"], check=False,
                   capture_output=True, timeout=600)
    return measure.cpu_seconds() - t0

