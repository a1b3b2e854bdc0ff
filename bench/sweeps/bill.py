"""What a study costs before it runs: ``bench sweep|reproduce ... --dry-run``.

Every model of the grid is built and checked first, as a sweep does (meta device, the confound guard). Then, per
model configuration (:func:`bench.runs.measure.cost_key`: the runs that share one measure the same step), on the
device at hand and with the threads a run of this sweep would get, the bill measures what a run spends its time on:
setting up its task and model, the measurement phases (FLOPs, the timed steps, the peak-memory probe: what the first
run of each configuration does), one training step (the median of 20 timed ones, or of 3 for a step too large to time
so often here: :data:`HEAVY_TIMING`), one evaluation pass, one probe.
Each run's wall time is then ``setup + [measurement] + steps x step + evaluations x evaluation + probes x probe``;
the sweep's, those runs scheduled longest-first on ``--jobs`` slots. Nothing is recorded.

A task whose data is not on this machine (CIFAR not downloaded) is measured on a stand-in of the same shapes
(:data:`STAND_INS`: what a step costs depends on the shapes only), with the real dataset's size for the run length.

The bill also says what the study's runs would take on the accelerators of the peak-FLOP/s table
(:data:`bench.runs.measure.PEAK_FLOPS`): the training FLOPs of every run divided by (the model FLOP utilisation
measured here x the device's peak). An estimate, and printed as one: small models (CIFAR ResNets) use less of an
accelerator's peak than of a CPU's, so these figures are lower bounds. Peak memory is printed where the step was
timed whole.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bench.runs import measure, probes
from bench.runs.config import RunConfig
from bench.runs.tasks import TaskError, synth
from bench.runs.tasks.tokens import DEFAULT_EVAL_TOKENS
from bench.runs.train import Record, eval_pass, measure_phases, setup
from bench.sweeps.executors.local import plan_placements
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
TIMING = (2, 4, 5)  # the training step's cost: untimed warm-up steps, then the median over 4 repeats of 5 steps
STEP_BUDGET = 2e10  # FLOPs of a step timed whole here; a larger step is timed on fewer samples and scaled
# A step still above the budget at 2 samples (a 124M-parameter LM at 1,024 tokens: ~2e12 FLOPs, some 17 s on
# a 2-core CPU) is timed as the median of 3 single steps after one untimed, and an evaluation on one batch per split.
HEAVY_TIMING = (1, 3, 1)
EVAL_SAMPLES = 64  # samples of each evaluated split timed; the pass's time is scaled from them


@dataclass(frozen=True)
class Costs:
    """What one model configuration's runs spend, in seconds (each measured once, here)."""

    key: str
    setup_s: float
    measure_s: float
    step_s: float
    eval_s: float
    probe_s: float
    flops_per_step: float  # forward + backward of one optimiser step
    peak_mb: float | None
    mfu: float | None  # achieved / peak of this device, in the timed steps
    num_train: int | None  # None: a corpus not on this machine (its runs must count steps)
    stand_in: str | None  # the task it was measured on, when not the run's own
    default_steps: int | None = None  # the task's run length when neither steps nor epochs is given
    timed_steps: int = TIMING[1] * TIMING[2]  # the steps step_s is the median of (fewer for a heavy step)


@dataclass(frozen=True)
class RunBill:
    config: RunConfig
    costs: Costs
    steps: int
    evals: int
    probe_calls: int
    measures: bool  # the first run of its configuration: it runs the measurement phases

    @property
    def seconds(self) -> float:
        c = self.costs
        return (c.setup_s + (c.measure_s if self.measures else 0.0) + self.steps * c.step_s
                + self.evals * c.eval_s + self.probe_calls * c.probe_s)

    @property
    def train_flops(self) -> float:
        return self.steps * self.costs.flops_per_step


def _stand_in(cfg: RunConfig) -> tuple[RunConfig, int | None, str | None]:
    """``cfg`` measured as it is when its task loads here; else the stand-in of the same shapes."""
    if cfg.task not in STAND_INS:
        return cfg, None, None
    try:
        setup(dataclasses.replace(cfg, steps=1, epochs=None, measure=()))
        return cfg, None, None
    except TaskError:
        fields, num_train, _ = STAND_INS[cfg.task](cfg)
        size = max(4 * cfg.batch_size, 64)
        stand = dataclasses.replace(cfg, **fields, train_size=size, val_size=size, steps=1, epochs=None)
        return stand, num_train, "generated shards" if stand.task == cfg.task else stand.task


def measure_costs(cfg: RunConfig, key: str, threads: int) -> Costs:
    """One model configuration's costs (module docstring), measured with ``threads`` torch threads. A step too
    large to time quickly here (more than :data:`STEP_BUDGET` FLOPs) is timed on fewer samples and scaled by the
    batch: a step's cost grows with its samples."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        probe_cfg, real_train, stand = _stand_in(cfg)
        probe_cfg = dataclasses.replace(probe_cfg, grad_accum=1, global_batch_size=None)
        small = setup(dataclasses.replace(probe_cfg, batch_size=2))  # also what a run's process has imported already
        rec = Record()
        measure_phases(dataclasses.replace(small, cfg=dataclasses.replace(small.cfg, measure=("flops",))), rec)
        per_sample = float(rec.measurements.get("flops", {}).get("train_per_sample") or 0.0)
        b = cfg.batch_size
        while b > 2 and per_sample * b > STEP_BUDGET:
            b //= 2
        heavy = per_sample * b > STEP_BUDGET
        warmup, repeats, steps = HEAVY_TIMING if heavy else TIMING
        t0 = time.perf_counter()
        s = setup(dataclasses.replace(probe_cfg, batch_size=b, timing_warmup=warmup, timing_repeats=repeats,
                                      timing_steps=steps))
        setup_s = time.perf_counter() - t0
        rec, spent = Record(), {}
        # each timed alone (a run pays for the ones it asks for); memory only where the step is timed whole
        for phase in ("throughput", "memory") if b == cfg.batch_size else ("throughput",):
            t0 = time.perf_counter()
            measure_phases(dataclasses.replace(s, cfg=dataclasses.replace(s.cfg, measure=(phase,))), rec)
            spent[phase] = time.perf_counter() - t0
        m = rec.measurements
        if "error" in m.get("throughput", {"error": ""}):
            raise ValueError(f"cannot time {cfg.run_id}: {m.get('throughput', {}).get('error')}")
        timed_s = m["throughput"]["median_step_ms"] / 1e3
        micro_s = timed_s * cfg.batch_size / b  # one micro-batch of the run
        step_s = micro_s * cfg.grad_accum
        flops = per_sample * cfg.global_batch
        peak = m.get("peak_flops")
        mfu = flops / step_s / peak if flops and peak else None
        # The run's own phases: FLOPs is one forward and backward of a micro-batch, the timing phase its configured
        # warm-up and repeats of steps, the memory probe a process of its own that takes three steps.
        phase_s = {"flops": micro_s, "throughput": (cfg.timing_warmup + cfg.timing_repeats * cfg.timing_steps) * step_s,
                   "memory": spent.get("memory", 5.0) + 3 * max(step_s - timed_s, 0.0)}  # a process start
        measure_s = sum(phase_s[p] for p in cfg.measure)
        eval_s = _eval_seconds(s, b, STAND_INS[cfg.task](cfg)[2] if stand is not None else None,
                               b if heavy else EVAL_SAMPLES)
        probe_s = 0.0
        if cfg.probe_every:
            x, y = next(iter(s.task.train_eval_batches(b)))
            t0 = time.perf_counter()
            probes.probe(s.model, x, y, s.task.loss, 0)
            probe_s = (time.perf_counter() - t0) * cfg.batch_size / b
        memory = m.get("memory", {})
        peak_mb = memory.get("peak_mb")
        return Costs(key, setup_s, measure_s, step_s, eval_s, probe_s, flops, peak_mb if b == cfg.batch_size else None,
                     mfu, real_train if stand is not None else s.task.num_train, stand, s.task.default_steps,
                     timed_steps=repeats * steps)
    finally:
        torch.set_num_threads(before)


def _eval_seconds(s: Any, batch: int, evaluated: int | None, samples: int = EVAL_SAMPLES) -> float:
    """One evaluation (the validation split and the training-error subset): timed on up to ``samples`` samples of
    each, scaled by the samples one evaluation reads (``evaluated``, else the task's own splits)."""
    seconds, timed, counted = 0.0, 0, 0
    for batches in (s.task.val_batches(batch), s.task.train_eval_batches(batch)):
        taken = list(itertools.islice(batches, max(1, samples // batch)))
        t0 = time.perf_counter()
        eval_pass(s.model, s.task, taken)
        seconds += time.perf_counter() - t0
        here = sum(s.task.count(y) for _, y in taken)
        timed += here
        counted += here + sum(s.task.count(y) for _, y in batches)  # the rest of the pass: counted, not computed
    return seconds * (evaluated if evaluated is not None else counted) / max(timed, 1)


def _steps(cfg: RunConfig, costs: Costs) -> int:
    """The optimiser steps of ``cfg`` as bench.runs.train.setup decides them: ``steps``, else the task's default
    run length, else epochs (30 by default) of its training split."""
    if cfg.steps is not None:
        return cfg.steps
    if cfg.epochs is None and costs.default_steps is not None:
        return costs.default_steps
    if costs.num_train is None:
        raise ValueError(f"{cfg.run_id}: its {cfg.task} data is not on this machine, so its epochs cannot be counted; "
                         "give the study steps (or --set data_path=...) for the bill")
    epochs = cfg.epochs if cfg.epochs is not None else 30.0
    return max(1, math.ceil(epochs * costs.num_train / cfg.global_batch))


def bill(configs: Sequence[RunConfig], options: SweepOptions, cost_key: Any) -> list[RunBill]:
    """Every run's bill, its configuration's costs measured once (``cost_key`` names a configuration)."""
    threads = plan_placements(options.jobs, 0)[0].threads
    costs: dict[str, Costs] = {}
    out = []
    for cfg in configs:
        key = cost_key(cfg)
        first = key not in costs
        if first:
            print(f"  measuring {cfg.run_id} ({threads} thread{'s' if threads > 1 else ''}) ...", flush=True)
            costs[key] = measure_costs(cfg, key, threads)
        c = costs[key]
        steps = _steps(cfg, c)
        every = cfg.eval_every or max(1, steps // 10)
        evals = len({*range(every, steps + 1, every), steps})
        probe_calls = (steps // cfg.probe_every + (steps % cfg.probe_every == 0)) if cfg.probe_every else 0
        measures = bool(cfg.measure) and (first or options.measure_every_run)
        out.append(RunBill(cfg, c, steps, evals, probe_calls, measures))
    return out


def schedule(seconds: Sequence[float], slots: int) -> float:
    """The wall time of running jobs of ``seconds`` on ``slots`` at a time, longest first."""
    finish = [0.0] * max(1, slots)
    for s in sorted(seconds, reverse=True):
        heapq.heapreplace(finish, finish[0] + s)
    return max(finish)


def _clock(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def render(bills: Sequence[RunBill], options: SweepOptions, device: str,
           accelerators: Mapping[str, float]) -> list[str]:
    """The bill as lines: per configuration, in total, and on the accelerators of the peak table."""
    lines = [f"{'configuration':<44} {'runs':>4} {'steps':>8} {'train FLOPs':>12} {'per run':>9} {'peak MiB':>9}"]
    by_key: dict[str, list[RunBill]] = {}
    for b in bills:
        by_key.setdefault(b.costs.key, []).append(b)
    for group in by_key.values():
        first = group[0]
        name = f"{first.config.variant}" + (f"-d{first.config.depth}" if first.config.depth else "") + \
            f" {first.config.task}" + (f" (as {first.costs.stand_in})" if first.costs.stand_in else "")
        per_run = statistics.median(b.seconds for b in group)
        peak = f"{first.costs.peak_mb:.0f}" if first.costs.peak_mb is not None else "n/a"
        lines.append(f"{name:<44} {len(group):>4} {sum(b.steps for b in group):>8} "
                     f"{sum(b.train_flops for b in group):>12.3g} {_clock(per_run):>9} {peak:>9}")
    total = sum(b.seconds for b in bills)
    flops = sum(b.train_flops for b in bills)
    slots = options.jobs
    lines.append(f"total: {len(bills)} runs, {sum(b.steps for b in bills):,} steps, {flops:.3g} training FLOPs; "
                 f"on this device ({device}): {_clock(schedule([b.seconds for b in bills], slots))} with --jobs {slots}"
                 + (f" ({_clock(total)} one at a time)" if slots > 1 else ""))
    mfus = [b.costs.mfu for b in bills if b.costs.mfu]
    mfu = statistics.median(mfus) if mfus else 0.0
    if flops and mfu > 1:
        lines.append(f"no accelerator figures: the model FLOP utilisation measured here ({mfu:.0%}) exceeds this "
                     "device's measured peak, so that peak is not its real one")
    elif flops and mfu:
        cells = ", ".join(f"{name} {_clock(flops / (mfu * peak))}" for name, peak in accelerators.items())
        lines.append(f"at the model FLOP utilisation measured here ({mfu:.1%} of this device's peak), the training "
                     f"FLOPs alone would take: {cells} (one device, no evaluation; small models use less of an "
                     "accelerator's peak than of a CPU's: read these as lower bounds)")
    return lines


def accelerators(precision: str) -> dict[str, float]:
    """The peak FLOP/s of each accelerator of the table at ``precision`` (TF32 for fp32 matmuls)."""
    key = "tf32" if precision == "fp32" else precision
    return {name: table[key] for name, table in measure.PEAK_FLOPS if key in table}
