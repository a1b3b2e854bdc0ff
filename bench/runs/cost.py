"""What a design costs at a paper's scale: ``python -m bench cost`` and :func:`bench.api.cost`.

For the designs of one family at a named reference shape (:data:`bench.runs.shapes.SHAPES`: GPT-2 small and medium at
1,024 tokens, ResNet-50 at 224x224, the CIFAR ResNet-110), each relative to the family's baseline (Pre-LN, ResNet):

* parameters and the exact training FLOPs of one sample (forward + backward, ``torch.utils.flop_counter`` on the
  meta device: no memory, no compute, so GPT-2 medium costs a second or two);
* the measured time of one training step (forward, backward, optimiser) and the memory it needs, at a small batch
  (the shape of one sequence or image is the paper's), the baseline and the design built side by side in one process
  and timed alternately, so that drifts of a shared machine fall on both (each turn as many steps as fill
  :data:`bench.runs.side_by_side.ROUND_S`; on a CPU with the cores free now, as a run started now would get them:
  threads that wait on each other where other work holds a core spin, and a step's time then grows with the load).
  Eager, and with ``compiled`` under ``torch.compile`` as well; in fp32, or with ``precision="bf16"`` under bf16
  autocast (the precision the papers train in on accelerators; the FLOPs are the same).

``time_per_flop`` (a design's step-time ratio over its FLOPs ratio) says how much more time a design takes than its
FLOPs imply: 1 where its extra work runs as efficiently as the baseline's matmuls; well above 1 where it is many small
ops (per-op overhead) or memory traffic the FLOPs do not show.

Memory: on CUDA the peak allocated during the step; on a CPU the step's high-water mark of the resident set above
what was resident before it (activations, gradients, optimiser temporaries), read with glibc's mmap threshold pinned
low so that a freed tensor leaves the resident set (``mallopt``; where that is unavailable the figure is rougher).

This module makes the tables (``bench cost``, with ``--profile`` its step profile, the ``cost`` analysis); the shapes
and the designs built and counted at them are :mod:`bench.runs.shapes`, the timing loop :mod:`bench.runs.side_by_side`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pandas as pd
import torch

import variants
from bench.runs import execution, measure, side_by_side
from bench.runs.env import cpu_sample, machine_load
from bench.runs.shapes import Shape, at_depth, build, check_designs, count, shape_of
from bench.runs.threads import threads_set

SPREAD_WARN = 0.25  # rounds' step-time ratios spread by more than this (highest over lowest, minus 1): no ranking

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
    (:func:`bench.runs.shapes.check_designs`). Every design and the baseline are built once per mode and timed in one
    rotation (:func:`bench.runs.side_by_side.rounds`: a turn of steps of each per round, so that a drift of a shared
    machine falls on all; on a CPU with the threads a run started now would get,
    :func:`bench.runs.side_by_side.timing_threads`), medians over the rounds: the baseline has
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
    pinned = side_by_side.pin_mmap_threshold() if dev.type == "cpu" else True
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
            how["threads"] = side_by_side.timing_threads(dev)
            how["threads_rule"] = ("those a run started now would get: the cores free now" if dev.type == "cpu" else
                                   "torch's own count")
            how["round_ratios"] = {}
            sample = cpu_sample()
            for mode in modes:
                suffix = "_compiled" if mode else ""
                params = {n: rows[n]["params"] for n in names}
                groups = side_by_side.rotations(names, params, side_by_side.free_memory(dev))
                if len(groups) > 1:
                    how["rotations"] = len(groups)
                base_times: list[tuple[float, float]] = []
                for members in groups:
                    say(f"  timing {', '.join(members)}{' compiled' if mode else ''} in turn: {repeats} rounds of "
                        f"{b} sample{'s' if b > 1 else ''} a step, each's turn at least {side_by_side.ROUND_S:g} s of "
                        f"steps, {how['threads']} thread{'s' if how['threads'] != 1 else ''} ...")
                    with threads_set(how["threads"]):
                        group = [side_by_side.trainee(name, sh, (x, y), mode, precision, compile_mode)
                                 for name in members]
                        by_round = side_by_side.rounds(group, dev, repeats)
                    timed = side_by_side.medians(by_round)
                    ratios_by_design = zip(members[1:], side_by_side.round_ratios(by_round), strict=True)
                    how["round_ratios"].update({(name, suffix): ratios for name, ratios in ratios_by_design})
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
              "activations, gradients, optimiser temporaries; not the weights, Python or torch), as a CPU run's peak "
              "memory is measured too, above its set-up")
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
                       round_s=side_by_side.ROUND_S, precision=precision, memory=MEMORY_CUDA if dev.type == "cuda" else
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
        side_by_side.pin_mmap_threshold()
    x, y = sh.inputs(b, dev)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if dev.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    trainees = {}
    for name in (sh.baseline, design):
        torch.manual_seed(0)
        trainees[name] = side_by_side.Trainee(build(name, sh).to(dev), sh, (x, y), precision=precision)
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
    same round, minus 1 (:func:`bench.runs.side_by_side.timed_pair`, with the threads of
    :func:`bench.runs.side_by_side.timing_threads`): the rounds are the
    independent draws a claim's interval is over, as seeds are for a trained metric. The ``cost`` analysis of a study
    (:mod:`bench.analysis.analyses`) is this table."""
    sh = shape_of(shape)
    check_designs(sh, designs, modes)
    dev = torch.device(device)
    b = batch or sh.batch
    if dev.type == "cpu":
        side_by_side.pin_mmap_threshold()
    x, y = sh.inputs(b, dev)
    base = count(sh.baseline, sh)
    device_name = measure.device_name(dev)
    out = []
    with _progress(progress) as say:
        for name in dict.fromkeys(d for d in designs if d != sh.baseline):
            c = count(name, sh)
            for mode in modes:
                say(f"  timing {sh.baseline} vs {name} ({mode}): {repeats} alternating steps of {b} each ...")
                with threads_set(side_by_side.timing_threads(dev)):
                    pairs = side_by_side.timed_pair([sh.baseline, name], sh, (x, y), dev, repeats, mode == "compiled")
                for i, ((t0, m0), (t1, m1)) in enumerate(pairs):
                    out.append({"variant": name, "baseline": sh.baseline, "shape": sh.name, "mode": mode,
                                "device": device_name, "batch": b, "repeat": i,
                                "params_overhead": c.params / base.params - 1,
                                "flops_overhead": c.flops.train / base.flops.train - 1,
                                "step_overhead": t1 / t0 - 1,
                                "mem_overhead": m1 / m0 - 1 if m0 > 0 else float("nan"),
                                "step_ms": t1, "baseline_step_ms": t0, "step_mem_mb": m1, "baseline_step_mem_mb": m0})
    return pd.DataFrame(out)
