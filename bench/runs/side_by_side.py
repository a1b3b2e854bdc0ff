"""Designs timed side by side: each built once in this process, then taking turns at training steps in rounds.

A :class:`Trainee` is one design at a shape with its optimiser (the papers': AdamW for the LMs, SGD with momentum for
the ResNets). :func:`rounds` times a group of them alternately: one untimed step each, then in each round every one's
turn of as many steps in a row as fill :data:`ROUND_S`, so that a drift of a shared machine falls on all of them alike;
on a CPU with the threads a run started now would get (:func:`timing_threads`). :func:`rotations` splits the designs
into groups whose models the memory holds at once beside the baseline.

A step's memory (:func:`measured_step`): on CUDA the peak allocated during the steps above what was allocated before
them; on a CPU the high-water mark of the resident set above what was resident before them (activations, gradients,
optimiser temporaries), read with glibc's mmap threshold pinned low so that a freed tensor leaves the resident set
(:func:`pin_mmap_threshold`; where that is unavailable the figure is rougher).
"""

from __future__ import annotations

import ctypes
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from bench.runs import execution, measure
from bench.runs.cores import free_cores
from bench.runs.shapes import Shape, build
from bench.runs.tasks.base import available_memory


def pin_mmap_threshold(nbytes: int = 1 << 16) -> bool:
    """glibc: serve every allocation of ``nbytes`` or more by mmap, so that freeing it leaves the resident set and
    the high-water mark of one step is that step's (the dynamic threshold would keep freed tensors resident)."""
    try:
        return bool(ctypes.CDLL("libc.so.6").mallopt(-3, nbytes))  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        return False


@dataclass
class Trainee:
    """One model at a shape with its optimiser: what a training step of it does."""

    model: nn.Module
    shape: Shape
    batch: tuple[torch.Tensor, torch.Tensor]
    compiled: bool = False
    precision: str = "fp32"  # PRECISIONS: bf16 runs the forward and the loss under autocast
    compile_mode: str = "default"  # torch.compile's mode when compiled (bench.runs.execution)
    opt: torch.optim.Optimizer = field(init=False)

    def __post_init__(self) -> None:
        # the papers' optimisers: AdamW for the LMs (GPT-2's recipe), SGD with momentum for the ResNets; fused on CUDA
        device = self.batch[0].device
        self.opt = execution.make_optimizer("adamw", self.model.parameters(), device, lr=1e-4) if self.shape.tokens \
            else execution.make_optimizer("sgd", self.model.parameters(), device, lr=1e-3, momentum=0.9)
        self.forward = execution.compiled(self.model, self.compile_mode) if self.compiled else self.model

    def __call__(self) -> None:
        x, y = self.batch
        if self.compiled:
            execution.mark_step()
        self.opt.zero_grad(set_to_none=True)
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=self.precision == "bf16"):
            loss = self.shape.loss(self.forward(x), y)
        loss.backward()
        self.opt.step()


def measured_step(step: Callable[[], None], device: torch.device, steps: int = 1) -> tuple[float, float]:
    """The time in ms of one of ``steps`` steps taken in a row (their mean) and the memory a step needs above what was
    resident before them (module docstring), from the same calls."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        allocated = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    else:
        resident = measure.rss_mb()
        measure.reset_peak_rss()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    measure.synchronize(device)
    ms = (time.perf_counter() - t0) * 1e3 / steps
    if device.type == "cuda":
        return ms, (torch.cuda.max_memory_allocated(device) - allocated) / 2**20
    return ms, measure.max_rss_mb() - resident


ROUND_S = 0.25  # what each trainee's turn in a round lasts at least: a single short step is too brief to time
MAX_STEPS = 50  # steps of a turn at most


def steps_per_turn(step_s: float, round_s: float) -> int:
    """How many steps of ``step_s`` seconds fill a turn of ``round_s`` seconds: at least 1, at most
    :data:`MAX_STEPS`."""
    return max(1, min(MAX_STEPS, math.ceil(round_s / step_s) if step_s > 0 else MAX_STEPS))


def rounds(trainees: Sequence[Callable[[], None]], device: torch.device, repeats: int
           ) -> list[list[tuple[float, float]]]:
    """Per round, (step ms, step memory MiB) of each trainee: one untimed step each (timed only to size the turns),
    then ``repeats`` rounds in which each takes its turn, as many steps in a row as fill :data:`ROUND_S`
    (:func:`steps_per_turn`), alternating, so that a drift of the machine falls on every one."""
    steps = []
    for t in trainees:
        t0 = time.perf_counter()
        t()
        measure.synchronize(device)
        steps.append(steps_per_turn(time.perf_counter() - t0, ROUND_S))
    return [[measured_step(t, device, n) for t, n in zip(trainees, steps, strict=True)] for _ in range(repeats)]


def timing_threads(device: torch.device) -> int:
    """The torch threads a step is timed with: on a CPU those a run started now would get (torch's own count capped at
    the cores free now, :func:`bench.runs.cores.free_cores`, as :func:`bench.runs.threads.threads_for` places a run):
    threads that wait on each other where other work holds a core spin, and a step's time then grows with the load.
    Elsewhere torch's own count."""
    own = torch.get_num_threads()
    return min(own, free_cores()) if device.type == "cpu" else own


def round_ratios(by_round: Sequence[Sequence[tuple[float, float]]]) -> list[list[float]]:
    """Per trainee after the first (the baseline), its step time over the baseline's in each round."""
    return [[r[i][0] / r[0][0] for r in by_round] for i in range(1, len(by_round[0]))]


def medians(by_round: Sequence[Sequence[tuple[float, float]]]) -> list[tuple[float, float]]:
    """(median step ms, median step memory MiB) of each trainee over the :func:`rounds`."""
    return [(statistics.median(r[i][0] for r in by_round), statistics.median(r[i][1] for r in by_round))
            for i in range(len(by_round[0]))]


RESIDENT_BYTES_PER_PARAM = 16  # fp32 weight, gradient and two optimiser states (AdamW; SGD's one momentum is less)


def rotations(names: Sequence[str], params: Mapping[str, int], free: int | None) -> list[list[str]]:
    """``names`` (the baseline first) split into rotations, each the baseline and as many of the designs as the memory
    holds beside it: every model of a rotation stays resident while it is timed (its weights, gradients and optimiser
    states, :data:`RESIDENT_BYTES_PER_PARAM` a parameter), and half of ``free`` bytes is kept for the steps'
    activations and the compiler. One rotation where all fit or ``free`` is unknown; a design alone beside the
    baseline where even that does not fit (its step then fails as it would alone)."""
    base, rest = names[0], list(names[1:])
    if free is None:
        return [[base, *rest]]
    room = free // 2 - RESIDENT_BYTES_PER_PARAM * params[base]
    groups: list[list[str]] = [[]]
    used = 0
    for name in rest:
        need = RESIDENT_BYTES_PER_PARAM * params[name]
        if groups[-1] and used + need > room:
            groups.append([])
            used = 0
        groups[-1].append(name)
        used += need
    return [[base, *g] for g in groups]


def free_memory(device: torch.device) -> int | None:
    """Bytes the timing may still fill on ``device``: the accelerator's free memory, else what this process may
    allocate (:func:`bench.runs.tasks.base.available_memory`)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return available_memory()


def trainee(name: str, sh: Shape, batch: tuple[torch.Tensor, torch.Tensor], compiled: bool, precision: str = "fp32",
            compile_mode: str = "default") -> Trainee:
    """Design ``name`` at ``sh`` built from seed 0 on ``batch``'s device, with its optimiser."""
    torch.manual_seed(0)
    return Trainee(build(name, sh).to(batch[0].device), sh, batch, compiled=compiled, precision=precision,
                   compile_mode=compile_mode)


def timed_pair(pair: Sequence[str], sh: Shape, batch: tuple[torch.Tensor, torch.Tensor], device: torch.device,
               repeats: int, compiled: bool, precision: str = "fp32") -> list[list[tuple[float, float]]]:
    """The :func:`rounds` of ``pair`` (the baseline, then a design) at ``sh``, each built from seed 0 beside the
    other in this process."""
    return rounds([trainee(n, sh, batch, compiled, precision) for n in pair], device, repeats)

