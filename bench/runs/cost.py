"""What a design costs at a paper's scale: ``python -m bench cost`` and :func:`bench.api.cost`.

For the designs of one family at a named reference shape (:data:`SHAPES`: GPT-2 small and medium at 1,024 tokens,
ResNet-50 at 224x224, the CIFAR ResNet-110), each relative to the family's baseline (Pre-LN, ResNet):

* parameters and the exact training FLOPs of one sample (forward + backward, ``torch.utils.flop_counter`` on the
  meta device: no memory, no compute, so GPT-2 medium costs a second or two);
* the measured time of one training step (forward, backward, optimiser) and the memory it needs, at a small batch
  (the shape of one sequence or image is the paper's), the baseline and the design built side by side in one process
  and timed alternately, so that drifts of a shared machine fall on both (each turn as many steps as fill
  :data:`ROUND_S`; on a CPU with the cores free now, as a run started now would get them: threads that wait on each
  other where other work holds a core spin, and a step's time then grows with the load). Eager, and with
  ``compiled`` under
  ``torch.compile`` as well; in fp32, or with ``precision="bf16"`` under bf16 autocast (the precision the papers
  train in on accelerators; the FLOPs are the same).

``time_per_flop`` (a design's step-time ratio over its FLOPs ratio) says how much more time a design takes than its
FLOPs imply: 1 where its extra work runs as efficiently as the baseline's matmuls; well above 1 where it is many small
ops (per-op overhead) or memory traffic the FLOPs do not show.

Memory: on CUDA the peak allocated during the step; on a CPU the step's high-water mark of the resident set above
what was resident before it (activations, gradients, optimiser temporaries), read with glibc's mmap threshold pinned
low so that a freed tensor leaves the resident set (``mallopt``; where that is unavailable the figure is rougher).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import gc
import math
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

import variants
from bench.runs import execution, measure
from bench.runs.cores import free_cores
from bench.runs.env import cpu_sample, machine_load
from bench.runs.tasks.base import available_memory
from bench.runs.threads import threads_set


@dataclass(frozen=True)
class Shape:
    """A reference shape: the model arguments every design is built with, one sample's input, the family's baseline
    and the families whose designs it admits."""

    name: str
    what: str  # the model and where its sizes come from
    baseline: str
    families: tuple[str, ...]
    model_args: dict[str, Any]
    sample: tuple[int, ...]  # one input's shape (tokens: (seq_len,); images: (C, H, W))
    classes: int  # the vocabulary or the classes
    batch: int = 1  # timed on a CPU
    at_any_depth: str = ""  # ``what`` less its depth: the description of the shape built at another ``--depth``
    own_depth: int | None = None  # the shape's own depth where :func:`at_depth` rebuilt it at another

    @property
    def tokens(self) -> bool:
        return len(self.sample) == 1

    def inputs(self, batch: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(0)
        if self.tokens:
            x = torch.randint(0, self.classes, (batch, *self.sample), generator=g)
            y = torch.randint(0, self.classes, (batch, *self.sample), generator=g)
        else:
            x = torch.randn(batch, *self.sample, generator=g)
            y = torch.randint(0, self.classes, (batch,), generator=g)
        return x.to(device), y.to(device)

    def loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.flatten(0, -2).float(), y.flatten())


_GPT2 = {"vocab_size": 50257, "max_len": 1024}
_CONV_FAMILIES = ("resnet", "plain", "highway", "preact", "normfree", "densenet", "wrn", "resnext", "convnext",
                  "repvgg", "nfnet")
SHAPES: dict[str, Shape] = {s.name: s for s in (
    Shape("gpt2_small", "GPT-2 small (Radford et al. 2019, 124M): 12 layers x 768, 12 heads, d_ff 3,072, vocabulary "
          "50,257, one sequence of 1,024 tokens", "preln", ("transformer",),
          {"depth": 12, "d_model": 768, "n_heads": 12, "d_ff": 3072, **_GPT2}, (1024,), 50257,
          at_any_depth="GPT-2 small's width (768, 12 heads, d_ff 3,072, vocabulary 50,257), one sequence of 1,024 "
          "tokens"),
    Shape("gpt2_medium", "GPT-2 medium (Radford et al. 2019, 350M): 24 layers x 1,024, 16 heads, d_ff 4,096, "
          "vocabulary 50,257, one sequence of 1,024 tokens", "preln", ("transformer",),
          {"depth": 24, "d_model": 1024, "n_heads": 16, "d_ff": 4096, **_GPT2}, (1024,), 50257,
          at_any_depth="GPT-2 medium's width (1,024, 16 heads, d_ff 4,096, vocabulary 50,257), one sequence of 1,024 "
          "tokens"),
    Shape("resnet50_224", "ResNet-50 (He et al. 2015, Table 1) on one 224x224 ImageNet image, 1,000 classes",
          "resnet50", ("resnet_imagenet",), {"num_classes": 1000}, (3, 224, 224), 1000,
          at_any_depth="ImageNet ResNets (He et al. 2015, Table 1) on one 224x224 image, 1,000 classes"),
    Shape("study_quick", "the Transformer the frontier and crosslayer studies' quick presets train (6 layers x 64, 4 "
          "heads, d_ff 256, GPT-2's init, bytes: vocabulary 256), on 16 sequences of 32 tokens: the width their "
          "committed runs were made at, where a design's joins weigh more than at GPT-2's", "preln", ("transformer",),
          {"depth": 6, "d_model": 64, "n_heads": 4, "d_ff": 256, "init": "gpt2", "vocab_size": 256, "max_len": 32},
          (32,), 256, batch=16, at_any_depth="the quick presets' Transformer width (64, 4 heads, d_ff 256, GPT-2's "
          "init, bytes: vocabulary 256) on 16 sequences of 32 tokens"),
    Shape("cifar_resnet110", "the CIFAR ResNet-110 (He et al. 2015, §4.2: 6n+2 layers, n = 18) on 32x32 images, "
          "10 classes, timed at 8 images", "resnet", _CONV_FAMILIES, {"depth": 110, "num_classes": 10},
          (3, 32, 32), 10, batch=8, at_any_depth="CIFAR nets (He et al. 2015, §4.2) on 32x32 images, 10 classes, "
          "timed at 8 images"),
    Shape("digits", "CIFAR nets (He et al. 2015, §4.2) of depth 20 on the bundled digits task's 8x8 one-channel "
          "images, 10 classes, timed at 128 images, the batch of the degradation study", "resnet", _CONV_FAMILIES,
          {"depth": 20, "num_classes": 10, "in_chans": 1}, (1, 8, 8), 10, batch=128,
          at_any_depth="CIFAR nets (He et al. 2015, §4.2) on the bundled digits task's 8x8 one-channel images, 10 "
          "classes, timed at 128 images, the batch of the degradation study"),
)}  # fmt: skip


MODES = ("eager", "compiled")  # how a step runs: as written, or under torch.compile
PRECISIONS = ("fp32", "bf16")  # the step's arithmetic: fp32, or bf16 autocast (weights and optimiser state fp32)


def shape_of(name: str) -> Shape:
    if name not in SHAPES:
        raise ValueError(f"shape: unknown shape {name!r}; shapes: {', '.join(SHAPES)}")
    return SHAPES[name]


def designs_for(shape: Shape) -> list[str]:
    """The registered variants of a shape's families (any other registered variant that builds at the shape is
    admitted too: :func:`check_designs`)."""
    return sorted(n for family in shape.families for n in variants.list_variants(family=family))


MAX_DEPTH = 2000  # deeper than any published CIFAR/ImageNet net (ResNet-1202) or Transformer stack we ship


def check_depth(depth: Any) -> None:
    """ValueError naming ``depth`` and its range where it is no model depth ``--depth`` takes."""
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
        raise ValueError(f"depth must be an integer in 1..{MAX_DEPTH}, got {depth!r}")


def at_depth(shape: Shape, depth: int | None) -> Shape:
    """``shape`` with its model's depth replaced (``--depth``); ValueError naming ``depth`` and its range."""
    if depth is None:
        return shape
    check_depth(depth)
    return dataclasses.replace(shape, name=f"{shape.name} at depth {depth}", own_depth=shape.model_args.get("depth"),
                               what=f"{shape.at_any_depth or shape.what}, every model at depth {depth}",
                               model_args={**shape.model_args, "depth": depth})


def check_designs(shape: Shape, designs: Sequence[str], modes: Sequence[str] = ("eager",), precision: str = "fp32",
                  baseline: str | None = None, role: str = "designs") -> None:
    """ValueError naming the field for an unregistered design or ``baseline`` (with the closest names), one that does
    not build at ``shape`` (of another kind of model: ``role``, the caller's name for ``designs``, or ``baseline``; at
    a ``--depth`` its rule refuses where it builds at the shape's own: ``depth``, naming the role, with the builder's
    own message, which says the depths it takes), an unknown mode or an unknown precision. A design of any family, a
    plugin's included, is admitted where it builds."""
    for field_, names in (("baseline", [baseline] if baseline is not None else []), (role, designs)):
        for name in names:
            try:
                variants.describe(name)
            except ValueError as e:
                raise ValueError(f"{field_}: {e}") from None
            try:
                with torch.device("meta"):
                    build(name, shape)
            except (ValueError, TypeError) as e:
                own = dataclasses.replace(shape, model_args={**shape.model_args, "depth": shape.own_depth})
                if shape.own_depth is not None and builds(name, own):
                    raise ValueError(f"depth: {name!r} ({field_}) does not build at depth "
                                     f"{shape.model_args['depth']}: {e}") from None
                raise ValueError(f"{field_}: {name!r} does not build at shape {shape.name!r} ({shape.what}; model "
                                 f"arguments {shape.model_args}): {e}") from None
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise ValueError(f"unknown mode(s) {', '.join(map(repr, bad))}; modes: {', '.join(MODES)}")
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; precisions: {', '.join(PRECISIONS)}")


def builds(design: str, shape: Shape) -> bool:
    """Whether ``design`` builds at ``shape`` (on the meta device: no memory, no compute)."""
    try:
        with torch.device("meta"):
            build(design, shape)
    except (ValueError, TypeError):
        return False
    return True


def build_args(design: str, shape: Shape) -> dict[str, Any]:
    """The keyword arguments ``design`` is built with at ``shape``: the shape's model arguments, less those the design
    fixes (``bench diff --shape`` builds with the same)."""
    fixed = variants.describe(design).get("fixed", {})
    return {k: v for k, v in shape.model_args.items() if k not in fixed}


def build(design: str, shape: Shape) -> nn.Module:
    """``design`` at ``shape`` (:func:`build_args`)."""
    return variants.create(design, **build_args(design, shape))


@dataclass(frozen=True)
class Counted:
    """What the meta device says of a design at a shape: parameters and one sample's training FLOPs."""

    params: int
    flops: measure.StepFlops


def count(design: str, shape: Shape) -> Counted:
    with torch.device("meta"):
        params = sum(p.numel() for p in build(design, shape).parameters())
    x, y = shape.inputs(1, "meta")
    return Counted(params, measure.meta_step_flops(lambda: build(design, shape), x, y, shape.loss))


# -- timing and memory, side by side --------------------------------------------------------------------------------


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


SPREAD_WARN = 0.25  # rounds' step-time ratios spread by more than this (highest over lowest, minus 1): no ranking


def round_ratios(by_round: Sequence[Sequence[tuple[float, float]]]) -> list[list[float]]:
    """Per trainee after the first (the baseline), its step time over the baseline's in each round."""
    return [[r[i][0] / r[0][0] for r in by_round] for i in range(1, len(by_round[0]))]


def timing_notes(table: pd.DataFrame) -> list[str]:
    """What the table's timing needs said beside it: the threads and the machine's load while it timed, each design's
    spread of per-round ratios (``step_rel 1.37 (rounds 1.31-1.42)``), and a warning where they spread by more than
    :data:`SPREAD_WARN`. Nothing where nothing was timed."""
    a = table.attrs
    if "threads" not in a:
        return []
    load = a.get("load") or {}
    said = [f"timed with {a['threads']} torch thread{'s' if a['threads'] != 1 else ''} ({a['threads_rule']})"]
    if load.get("load_1m") is not None:
        other = load.get("other_cpu")
        said[0] += (f"; machine load while timing: {load['load_1m']:.2f} (1-minute average) on {load['cpus']} CPUs"
                    + (f", other processes {other:.0%} of all CPU time" if other is not None else ""))
    wide = []
    for (design, suffix), ratios in a.get("round_ratios", {}).items():
        lo, hi = min(ratios), max(ratios)
        rel = table.loc[table["design"] == design, f"step_rel{suffix}"].iloc[0]
        said.append(f"{design}{' compiled' if suffix else ''}: step_rel {rel:.3g} (rounds {lo:.3g}-{hi:.3g})")
        if hi > lo * (1 + SPREAD_WARN):
            wide.append(design + (" compiled" if suffix else ""))
    if wide:
        said.append(f"warning: the rounds' ratios of {', '.join(wide)} spread by more than {SPREAD_WARN:.0%}: the "
                    "machine was too busy to rank these designs' step time; time again with more --repeats, or on a "
                    "quieter machine")
    return said


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


@contextlib.contextmanager
def _progress(enabled: bool) -> Iterator[Callable[[str], None]]:
    yield (lambda line: print(line, file=sys.stderr, flush=True)) if enabled else (lambda line: None)


def cost_table(designs: Sequence[str], shape: str, *, measure_time: bool = True, compiled: bool | None = None,
               compile_mode: str = "default", batch: int | None = None, repeats: int = 3, device: str = "cpu",
               precision: str = "fp32", progress: bool = False, partial: Callable[[pd.DataFrame], None] | None = None,
               baseline: str | None = None, depth: int | None = None) -> pd.DataFrame:
    """One row per design (the baseline first, added where not named): parameters, training FLOPs per sample, and
    with ``measure_time`` the step time and step memory at ``batch`` (default: the shape's), each beside its ratio to
    the baseline's. The baseline is ``baseline`` (default: the shape's), the model at ``depth`` where given (else the
    shape's); a design of any family, a plugin's included, is admitted where it builds at the shape
    (:func:`check_designs`). Every design and the baseline are built once per mode and timed in one rotation
    (:func:`rounds`: a turn of steps of each per round, so that a drift of a shared machine falls on all; on a CPU
    with the threads a run started now would get, :func:`timing_threads`), medians over the rounds: the baseline has
    one step time per mode, which every ratio of the table divides by (``step_rel`` is
    ``step_ms`` over the baseline row's ``step_ms``). Eager and, with ``compiled``, under ``torch.compile`` in
    ``compile_mode`` beside it (``compiled`` None: on an accelerator, not on a CPU, where compiling a large model takes
    minutes); ``time_per_flop`` the eager time ratio over the FLOPs ratio (``time_per_flop_compiled`` the compiled
    one); every step in ``precision`` (:data:`PRECISIONS`), its optimiser fused where the device has fused kernels.
    ``partial`` is called with the table so far after each mode is timed (a long measurement keeps what it has).
    ``attrs`` say how it was timed: ``threads``, the machine's ``load`` (:func:`bench.runs.env.machine_load`) and
    each design's per-round ratios (``round_ratios``, by design and column suffix), which :func:`timing_notes` puts
    in words.
    ValueError naming the field for an unknown shape, precision, baseline, a depth out of range or a design that does
    not build at the shape."""
    sh = at_depth(shape_of(shape), depth)
    base_name = sh.baseline if baseline is None else baseline
    check_designs(sh, designs, precision=precision, baseline=base_name)
    sh = dataclasses.replace(sh, baseline=base_name)
    names = [sh.baseline, *[d for d in dict.fromkeys(designs) if d != sh.baseline]]
    dev = torch.device(device)
    compiled = dev.type != "cpu" if compiled is None else compiled
    b = batch or sh.batch
    pinned = pin_mmap_threshold() if dev.type == "cpu" else True
    how: dict[str, Any] = {"optimizer_impl": execution.optimizer_impl("adamw" if sh.tokens else "sgd", dev),
           "compile_mode": compile_mode if compiled else None}
    rows: dict[str, dict[str, Any]] = {}
    modes = [False, True] if compiled else [False]
    with _progress(progress) as say:
        for name in names:
            c = count(name, sh)
            rows[name] = {"design": name, "params": c.params, "train_flops_per_sample": c.flops.train,
                          "matmul_share": c.flops.train_by_class["matmul"] / max(c.flops.train, 1),
                          **implementations(name, sh, modes)}
            say(f"  {name}: {c.params:,} parameters, {c.flops.train:.4g} training FLOPs per sample (meta device)")
        base = rows[sh.baseline]
        for r in rows.values():
            r["params_rel"] = r["params"] / base["params"]
            r["flops_rel"] = r["train_flops_per_sample"] / base["train_flops_per_sample"]
        if measure_time:
            x, y = sh.inputs(b, dev)
            how["threads"] = timing_threads(dev)
            how["threads_rule"] = ("those a run started now would get: the cores free now" if dev.type == "cpu" else
                                   "torch's own count")
            how["round_ratios"] = {}
            sample = cpu_sample()
            for mode in modes:
                suffix = "_compiled" if mode else ""
                groups = rotations(names, {n: rows[n]["params"] for n in names}, free_memory(dev))
                if len(groups) > 1:
                    how["rotations"] = len(groups)
                base_times: list[tuple[float, float]] = []
                for members in groups:
                    say(f"  timing {', '.join(members)}{' compiled' if mode else ''} in turn: {repeats} rounds of "
                        f"{b} sample{'s' if b > 1 else ''} a step, each's turn at least {ROUND_S:g} s of steps, "
                        f"{how['threads']} thread{'s' if how['threads'] != 1 else ''} ...")
                    with threads_set(how["threads"]):
                        group = [trainee(name, sh, (x, y), mode, precision, compile_mode) for name in members]
                        by_round = rounds(group, dev, repeats)
                    timed = medians(by_round)
                    how["round_ratios"].update({(name, suffix): ratios for name, ratios
                                                in zip(members[1:], round_ratios(by_round), strict=True)})
                    del group
                    if mode:  # the compiled graphs hold their models' weights: drop them before the next rotation
                        torch._dynamo.reset()
                    gc.collect()
                    (t0, m0) = timed[0]  # the baseline's timing in this rotation: its designs' ratios divide by it
                    base_times.append((t0, m0))
                    for name, (t1, m1) in zip(members[1:], timed[1:], strict=True):
                        r = rows[name]
                        r[f"step_ms{suffix}"], r[f"step_rel{suffix}"] = t1, t1 / t0
                        r[f"step_mem_mb{suffix}"], r[f"mem_rel{suffix}"] = m1, m1 / m0 if m0 > 0 else float("nan")
                        if len(groups) > 1:
                            r[f"base_step_ms{suffix}"] = t0
                base = rows[sh.baseline]
                base[f"step_ms{suffix}"] = statistics.median(t for t, _ in base_times)
                base[f"step_mem_mb{suffix}"] = statistics.median(m for _, m in base_times)
                base[f"step_rel{suffix}"] = base[f"mem_rel{suffix}"] = 1.0  # by definition
                if len(groups) > 1:
                    base[f"base_step_ms{suffix}"] = base[f"step_ms{suffix}"]
                how["load"] = machine_load(sample)
                if partial is not None:
                    partial(_frame(rows, sh, b, dev, repeats, pinned, precision, how))
    return _frame(rows, sh, b, dev, repeats, pinned, precision, how)


def implementations(design: str, sh: Shape, modes: Sequence[bool]) -> dict[str, str]:
    """How ``design``'s joins compute in each timed mode (:func:`variants.implementation`): ``impl`` eager,
    ``impl_compiled`` under torch.compile; the row says which implementation its figures timed."""
    with torch.device("meta"):
        model = build(design, sh)
    return {f"impl{'_compiled' if mode else ''}": variants.implementation(model, "compiled" if mode else "eager")
            for mode in modes}


MEMORY_CPU = ("the step's own, above what the process held before it (the resident set's high-water mark: "
              "activations, gradients, optimiser temporaries; not the weights, Python or torch, which a run's peak "
              "memory counts too)")
MEMORY_CUDA = ("the step's own, above what was allocated before it (CUDA's peak allocated: activations, gradients, "
               "optimiser temporaries; not the weights, which a run's peak memory counts too)")


def _frame(rows: dict[str, dict[str, Any]], sh: Shape, batch: int, dev: torch.device, repeats: int, pinned: bool,
           precision: str, how: dict[str, Any]) -> pd.DataFrame:
    """The rows measured so far as a table (``time_per_flop`` where a step was timed, eager and compiled), saying how
    it was measured and how its steps ran (``how``: the optimiser's kernels, the compile mode)."""
    def per_flop(r: dict[str, Any]) -> dict[str, float]:
        return {f"time_per_flop{s}": r[f"step_rel{s}"] / r["flops_rel"]
                for s in ("", "_compiled") if f"step_rel{s}" in r}

    table = pd.DataFrame([{**r, **per_flop(r)} for r in rows.values()])
    table = table[[c for c in table if not c.startswith("impl")] + [c for c in table if c.startswith("impl")]]
    table.attrs.update(shape=sh.name, what=sh.what, batch=batch, device=measure.device_name(dev), repeats=repeats,
                       round_s=ROUND_S, precision=precision, memory=MEMORY_CUDA if dev.type == "cuda" else
                       MEMORY_CPU + ("" if pinned else " (rough here: the allocator's threshold could not be pinned)"),
                       **how)
    return table


def _self_ms(event: Any, device: torch.device) -> float:
    """An operator's self time in ms: on the device for CUDA (the name of the field changed in torch 2.4), else on
    the CPU."""
    if device.type == "cuda":
        return float(getattr(event, "self_device_time_total", getattr(event, "self_cuda_time_total", 0.0))) / 1e3
    return float(event.self_cpu_time_total) / 1e3


def profile_pair(design: str, shape: str, *, batch: int | None = None, steps: int = 2, device: str = "cpu",
                 precision: str = "fp32", baseline: str | None = None, depth: int | None = None) -> pd.DataFrame:
    """Where ``design``'s extra step time goes: ``steps`` training steps of the baseline and of ``design`` at ``shape``
    under ``torch.profiler``, alternating (one step of each per round, after one unprofiled step each; on the CPU with
    the allocator setting of :func:`cost_table`'s timing), one row per operator (``aten::mm``, ``aten::copy_`` ...)
    with its self time per step in each (``base_ms``, ``design_ms``), the difference (``extra_ms``), and its calls
    per step (``base_calls``, ``design_calls``), sorted by the difference. The rows say what kind of work an overhead
    is: matmuls (``mm``, ``bmm``, ``addmm``), memory traffic (``copy_``, ``cat``, ``stack``, ``clone``), elementwise
    ops (``mul``, ``add``, ``div``), or many calls of little time each (per-op overhead). Self times add up to the
    step without counting a nested call twice; the profiler adds a little time per call to both. ``attrs``: the
    totals ``base_ms`` and ``design_ms``, the shape, batch, device and precision. ``baseline`` and ``depth`` as in
    :func:`cost_table`."""
    sh = at_depth(shape_of(shape), depth)
    check_designs(sh, [design], precision=precision, baseline=baseline)
    sh = dataclasses.replace(sh, baseline=sh.baseline if baseline is None else baseline)
    dev = torch.device(device)
    b = batch or sh.batch
    if dev.type == "cpu":
        pin_mmap_threshold()
    x, y = sh.inputs(b, dev)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if dev.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    trainees = {}
    for name in (sh.baseline, design):
        torch.manual_seed(0)
        trainees[name] = Trainee(build(name, sh).to(dev), sh, (x, y), precision=precision)
        trainees[name]()
    per: dict[str, dict[str, list[float]]] = {name: defaultdict(lambda: [0.0, 0.0]) for name in trainees}
    for _ in range(steps):  # alternating: a drift of the machine's speed falls on both alike
        for name, trainee in trainees.items():
            with torch.profiler.profile(activities=activities) as prof:
                trainee()
                measure.synchronize(dev)
            for e in prof.key_averages():
                per[name][e.key][0] += _self_ms(e, dev) / steps
                per[name][e.key][1] += e.count / steps
    base, mine = per[sh.baseline], per[design]
    table = pd.DataFrame([{"op": op, "base_ms": base.get(op, (0.0, 0.0))[0], "design_ms": mine.get(op, (0.0, 0.0))[0],
                           "base_calls": base.get(op, (0.0, 0.0))[1], "design_calls": mine.get(op, (0.0, 0.0))[1]}
                          for op in dict.fromkeys([*base, *mine])])
    table.insert(3, "extra_ms", table["design_ms"] - table["base_ms"])
    table = table.sort_values("extra_ms", ascending=False, ignore_index=True)
    table.attrs.update(design=design, baseline=sh.baseline, shape=sh.name, batch=b, device=measure.device_name(dev),
                       steps=steps, precision=precision, base_ms=float(table["base_ms"].sum()),
                       design_ms=float(table["design_ms"].sum()))
    return table


def overhead_rounds(designs: Sequence[str], shape: str, *, repeats: int = 3, modes: Sequence[str] = ("eager",),
                    batch: int | None = None, device: str = "cpu", progress: bool = False) -> pd.DataFrame:
    """What each design adds to its family's baseline at ``shape``, one row per design, mode and timed round: the
    fractions ``params_overhead`` and ``flops_overhead`` (exact, the same in every round) and ``step_overhead`` and
    ``mem_overhead``, the design's step time and memory over those of the baseline step taken right before it in the
    same round, minus 1 (:func:`timed_pair`, with the threads of :func:`timing_threads`): the rounds are the
    independent draws a claim's interval is over, as seeds are for a trained metric. The ``cost`` analysis of a study
    (:mod:`bench.analysis.analyses`) is this table."""
    sh = shape_of(shape)
    check_designs(sh, designs, modes)
    dev = torch.device(device)
    b = batch or sh.batch
    if dev.type == "cpu":
        pin_mmap_threshold()
    x, y = sh.inputs(b, dev)
    base = count(sh.baseline, sh)
    device_name = measure.device_name(dev)
    out = []
    with _progress(progress) as say:
        for name in dict.fromkeys(d for d in designs if d != sh.baseline):
            c = count(name, sh)
            for mode in modes:
                say(f"  timing {sh.baseline} vs {name} ({mode}): {repeats} alternating steps of {b} each ...")
                with threads_set(timing_threads(dev)):
                    pairs = timed_pair([sh.baseline, name], sh, (x, y), dev, repeats, mode == "compiled")
                for i, ((t0, m0), (t1, m1)) in enumerate(pairs):
                    out.append({"variant": name, "baseline": sh.baseline, "shape": sh.name, "mode": mode,
                                "device": device_name, "batch": b, "repeat": i,
                                "params_overhead": c.params / base.params - 1,
                                "flops_overhead": c.flops.train / base.flops.train - 1,
                                "step_overhead": t1 / t0 - 1,
                                "mem_overhead": m1 / m0 - 1 if m0 > 0 else float("nan"),
                                "step_ms": t1, "baseline_step_ms": t0, "step_mem_mb": m1, "baseline_step_mem_mb": m0})
    return pd.DataFrame(out)
