"""Measurement phases that run apart from training: FLOPs, throughput, peak memory, device peak.

The harness runs each phase on the model before training with a fresh optimiser and restores
the model's state afterwards (``bench.runs.train.measure_phases``), so measuring never changes the run
being trained, and probes/evaluation never run inside a timed region.

What the phases measure depends on the model, the shapes of its data and how one step is computed,
not on the seed or the learning-rate schedule: :func:`cost_key` names that configuration, and a sweep
measures it once (the first run of each key) and reuses the figures in the other runs' rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import platform
import re
import resource
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode

# Dense (no sparsity) peak FLOP/s from the vendors' datasheets, by device-name substring and
# precision ("fp32" here means plain fp32 CUDA cores; "tf32" is what fp32 matmuls use when
# torch.backends.cuda.matmul.allow_tf32 is on). First matching substring wins, so list the
# specific names (H100 PCIe) before the generic ones (H100).
PEAK_FLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H200", {"bf16": 989.4e12, "fp16": 989.4e12, "tf32": 494.7e12, "fp32": 66.9e12}),
    ("H100 PCIe", {"bf16": 756.5e12, "fp16": 756.5e12, "tf32": 378.0e12, "fp32": 51.2e12}),
    ("H100", {"bf16": 989.4e12, "fp16": 989.4e12, "tf32": 494.7e12, "fp32": 66.9e12}),
    ("A100", {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12}),
    ("L40S", {"bf16": 362.1e12, "fp16": 362.1e12, "tf32": 183.0e12, "fp32": 91.6e12}),
    ("L4", {"bf16": 121e12, "fp16": 121e12, "tf32": 60e12, "fp32": 30.3e12}),
    ("A10", {"bf16": 125e12, "fp16": 125e12, "tf32": 62.5e12, "fp32": 31.2e12}),
    ("V100", {"fp16": 125e12, "fp32": 15.7e12}),
    ("T4", {"fp16": 65e12, "fp32": 8.1e12}),
    ("RTX 4090", {"bf16": 165.2e12, "fp16": 165.2e12, "fp32": 82.6e12}),
)

StepFn = Callable[[], Any]

# RunConfig fields that change what a run learns but not what one training step costs: the measurement phases
# (FLOPs, throughput, memory) of two configs that differ only in these give the same figures, up to timing
# noise. Every other field (and any field added later) counts, so a new field can cost an extra measurement,
# never a wrong reuse. ``seed`` changes initial values and batch order, not shapes or kernels; ``betas`` and the
# schedule fields only change host-side scalars; probes and evaluation never run inside a measured phase.
COST_NEUTRAL_FIELDS: frozenset[str] = frozenset({
    "seed", "lr", "lr_base", "lr_base_size", "lr_base_scale", "betas", "schedule", "milestones", "gamma",
    "warmup_steps", "warmup_epochs", "warmup_kind", "warmup_factor",
    "warmup_until_error", "target", "eval_every", "probe_every", "diverge_factor", "epochs", "steps", "recipe",
    "study", "preset", "data_dir", "checkpoint_every", "checkpoint_minutes", "keep_checkpoints", "target_loss",
    "eval_batches", "eval_tokens",
    "train_tokens",  # how much text the windows are drawn from, not their shape
    "global_batch_size",  # grad_accum, which it sets, counts
})  # fmt: skip


def cost_key(config: Any) -> str:
    """Hash of the fields of a RunConfig that decide what its measurement phases measure.

    Variant, depth, model arguments, task and the shapes it gives (image size, classes, sequence length),
    batch, precision, device, optimiser, compile / channels-last and the phases and timing knobs themselves
    all count; the fields of :data:`COST_NEUTRAL_FIELDS` do not. Runs with one key share one measurement.
    """
    payload = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name not in COST_NEUTRAL_FIELDS}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:12]


def complete(measurements: dict[str, Any], phases: tuple[str, ...]) -> bool:
    """Whether ``measurements`` hold a result (no error) for every phase in ``phases``: only then are they reused."""
    if any(p not in measurements or "error" in measurements[p] for p in phases):
        return False
    return "throughput" not in phases or "peak_flops" in measurements


def synchronize(device: torch.device) -> None:
    """Wait for queued device work, so wall-clock time brackets the real work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return "Apple MPS"
    return cpu_name()


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


# Op classes of torch.utils.flop_counter's counted ops, by the precision flag that decides their peak in fp32 on CUDA:
# convolutions run on TF32 tensor cores when cuDNN's flag allows it (on by default), matmuls and attention when the
# matmul flag does (off by default: torch.set_float32_matmul_precision("high") turns it on).
CONV_OPS = frozenset({"convolution", "_convolution", "convolution_backward", "cudnn_convolution",
                      "convolution_overrideable", "_slow_conv2d_forward"})
OP_CLASSES = ("matmul", "conv")


def op_class(op: Any) -> str:
    """``"conv"`` for a convolution op of the counter (forward or backward), ``"matmul"`` for the rest (mm, addmm,
    bmm, baddbmm, scaled-dot-product and flex attention: all matmuls)."""
    return "conv" if str(op).removeprefix("aten.") in CONV_OPS else "matmul"


def flops_by_class(counter: FlopCounterMode) -> dict[str, int]:
    """A counter's FLOPs split into :data:`OP_CLASSES` (each present, 0 where none)."""
    out = dict.fromkeys(OP_CLASSES, 0)
    for op, n in counter.get_flop_counts().get("Global", {}).items():
        out[op_class(op)] += int(n)
    return out


@dataclasses.dataclass(frozen=True)
class StepFlops:
    """FLOPs of one training step: the forward's, and the forward + backward's split by op class."""

    forward: int
    train_by_class: dict[str, int]
    activation_bytes: int = 0  # every op output of the forward (:func:`meta_activation_bytes`), where counted

    @property
    def train(self) -> int:
        return sum(self.train_by_class.values())


def count_step_flops(forward: Callable[[], torch.Tensor], device: torch.device) -> StepFlops:
    """FLOPs of one training step, counted by ``torch.utils.flop_counter`` (see :func:`count_flops`), the training
    step's split by op class (:func:`op_class`)."""
    fwd, bwd = FlopCounterMode(display=False), FlopCounterMode(display=False)
    backend = sdpa_kernel(SDPBackend.MATH) if device.type == "cpu" else contextlib.nullcontext()
    with backend:
        with fwd:
            loss = forward()
        with bwd:
            loss.backward()
    f, b = flops_by_class(fwd), flops_by_class(bwd)
    return StepFlops(int(fwd.get_total_flops()), {k: f[k] + b[k] for k in OP_CLASSES})


def meta_step_flops(build: Callable[[], torch.nn.Module], x: torch.Tensor, y: torch.Tensor,
                    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                    activations: bool = False) -> StepFlops:
    """FLOPs of one training step of the model ``build()`` returns, on inputs of ``x``'s and targets of ``y``'s shapes
    and dtypes, counted on the meta device: exact (the counter reads shapes only), with no memory and no compute, so
    a GPT-2-sized model at its full batch costs a second. Attention is counted as the math backend computes it. With
    ``activations``, the bytes of the forward's op outputs too, from the same forward (:func:`meta_activation_bytes`
    counts them in a forward of its own)."""
    with torch.device("meta"):
        model = build()
        xm, ym = torch.empty(x.shape, dtype=x.dtype), torch.empty(y.shape, dtype=y.dtype)
        if not activations:
            return count_step_flops(lambda: loss(model(xm), ym), torch.device("cpu"))
        counted = _OutputBytes()

        def forward() -> torch.Tensor:
            with counted:
                out = model(xm)
            return loss(out, ym)

        return dataclasses.replace(count_step_flops(forward, torch.device("cpu")), activation_bytes=counted.total)


class _OutputBytes(TorchDispatchMode):
    """Counts the bytes of every tensor an op returns, views and in-place results left out (they hold no memory of
    their own)."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        aliases = func.overloadpacket is torch.ops.aten._unsafe_view or \
            any(r.alias_info is not None for r in func._schema.returns)  # a view, declared or not, or in place
        if not aliases:
            self.total += sum(t.numel() * t.element_size() for t in tree_leaves(out) if isinstance(t, torch.Tensor))
        return out


def meta_activation_bytes(model: torch.nn.Module, x: torch.Tensor) -> int:
    """The bytes of every op output of one forward of ``model`` (built on the meta device) on a batch of ``x``'s
    shape and dtype, counted on the meta device (shapes only, nothing allocated): about what a training step keeps
    for its backward. Raises what the model raises where its forward cannot run on the meta device."""
    with torch.device("meta"), _OutputBytes() as counted:
        model(torch.empty(x.shape, dtype=x.dtype))
    return counted.total


def count_flops(forward: Callable[[], torch.Tensor], device: torch.device) -> tuple[int, int]:
    """FLOPs of one training step, (forward, forward + backward), counted by ``torch.utils.flop_counter``.

    ``forward`` returns the loss; one counter sees the forward, another its backward, so both figures
    come from the same call. The forward alone is what papers and model zoos quote, though in multiply-adds
    (timm's ResNet-50 at 224x224: 4.09 GMACs; the counter, 2 FLOPs per multiply-add, gives 8.18e9);
    forward + backward (about 3x the forward) is what a training step computes and what MFU divides.
    On CPU, attention runs through the math backend while counting: the counter has no formula
    for the CPU flash-attention kernel and would count its matmuls as zero.
    """
    counted = count_step_flops(forward, device)
    return counted.forward, counted.train


def time_steps(step: StepFn, device: torch.device, warmup: int, repeats: int, steps: int) -> list[float]:
    """Per-step time in ms of each repeat (``steps`` calls of ``step``), after ``warmup`` untimed calls.

    The device is synchronised before and after each timed repeat, so queued kernels are counted.
    """
    for _ in range(warmup):
        step()
    synchronize(device)
    times = []
    for _ in range(repeats):
        synchronize(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        synchronize(device)
        times.append((time.perf_counter() - t0) * 1e3 / steps)
    return times


def cpu_seconds() -> float:
    """CPU seconds this process (all its threads, to the nanosecond clock's resolution) and the children it waited
    for (to the clock tick's) have used: what a piece of work takes on an idle core, however busy the machine is."""
    t = os.times()
    return time.process_time() + t.children_user + t.children_system


def idle_steps(step: StepFn, device: torch.device, warmup: int, repeats: int, steps: int) -> list[float]:
    """Per-step time in ms of each repeat, as :func:`time_steps` times it; on a CPU each repeat's CPU time per torch
    thread where that is less than its wall time: what the step takes on idle cores, however busy the machine is
    (other work stretches the wall clock, not the CPU time). On an accelerator, the wall clock (its kernels are not
    this process's CPU time)."""
    if device.type != "cpu":
        return time_steps(step, device, warmup, repeats, steps)
    for _ in range(warmup):
        step()
    threads = torch.get_num_threads()
    times = []
    for _ in range(repeats):
        c0, t0 = cpu_seconds(), time.perf_counter()
        for _ in range(steps):
            step()
        wall, cpu = time.perf_counter() - t0, (cpu_seconds() - c0) / threads
        times.append((min(wall, cpu) if cpu > 0 else wall) * 1e3 / steps)
    return times


def median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def tf32_classes() -> frozenset[str]:
    """The op classes that run fp32 on TF32 tensor cores under this process's flags: convolutions with
    ``torch.backends.cudnn.allow_tf32`` (PyTorch's default: on), matmuls with ``torch.backends.cuda.matmul.allow_tf32``
    (on when ``torch.set_float32_matmul_precision`` is "high" or "medium"; PyTorch's default and bench's: off)."""
    return frozenset({c for c, on in (("conv", torch.backends.cudnn.allow_tf32),
                                      ("matmul", torch.backends.cuda.matmul.allow_tf32)) if on})


def datasheet_peak(name: str, precision: str, flops: Mapping[str, float] | None = None,
                   tf32: frozenset[str] = frozenset()) -> tuple[float, str] | None:
    """The datasheet peak FLOP/s of the device called ``name`` for a step of ``flops`` (by op class), or None.

    In bf16/fp16 every class has one peak. In fp32 a class in ``tf32`` runs at the TF32 peak and the rest at the fp32
    one, so the step's peak is the rate at which its FLOPs would run with every op at its class's peak:
    ``sum(flops) / sum(flops[c] / peak[c])``. With no split given, the step counts as all matmuls."""
    table = next((t for pattern, t in PEAK_FLOPS if re.search(rf"\b{re.escape(pattern)}\b", name, re.IGNORECASE)),
                 None)
    pattern = next((p for p, t in PEAK_FLOPS if t is table), "")
    if table is None or precision not in table:
        return None
    if precision != "fp32":
        return table[precision], f"datasheet: {pattern} {precision} dense"
    split = {c: float(n) for c, n in (flops or {"matmul": 1.0}).items() if n} or {"matmul": 1.0}
    keys = {c: "tf32" if c in tf32 and "tf32" in table else "fp32" for c in split}
    if len(set(keys.values())) == 1:
        key = next(iter(keys.values()))
        return table[key], f"datasheet: {pattern} {key} dense"
    peak = sum(split.values()) / sum(n / table[keys[c]] for c, n in split.items())
    shares = ", ".join(f"{c} {n / sum(split.values()):.0%} at {keys[c]}" for c, n in sorted(split.items()))
    return peak, f"datasheet: {pattern} dense, by op class ({shares})"


def peak_flops(device: torch.device, precision: str, flops: Mapping[str, float] | None = None) -> tuple[float, str]:
    """The device's peak FLOP/s for a step of ``precision`` whose FLOPs split by op class as ``flops``
    (:attr:`StepFlops.train_by_class`; none given: all matmuls), and where the figure came from. A datasheet figure
    on a known GPU (:func:`datasheet_peak`, each class at the peak its TF32 flag gives it), else a measured one."""
    if device.type == "cuda":
        found = datasheet_peak(torch.cuda.get_device_name(device), precision, flops, tf32_classes())
        if found is not None:
            return found
    return measured_matmul_peak(device, precision)


def _matmul(n: int, device: torch.device, dtype: torch.dtype) -> StepFn:
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    return lambda: a @ b


def measured_matmul_peak(device: torch.device, precision: str, n: int = 1024, repeats: int = 5,
                         timer: Callable[..., list[float]] | None = None) -> tuple[float, str]:
    """Best achieved FLOP/s of an n×n matmul on ``device``: the peak used where no datasheet figure is known.
    ``timer``: how its repeats are timed (by default :func:`time_steps`, the wall clock, as a run times its steps;
    :func:`idle_steps` as the bill times its own).

    On a CPU a run in bf16 or fp16 is timed against the faster of that dtype's matmul and fp32's: a CPU without
    native bf16 units emulates bf16 matmuls slowly while the convolutions and matmuls of a run under autocast
    reach fp32's rate (oneDNN computes them wider), so the bf16 matmul alone would put the model FLOP utilisation
    of such a run above 100%."""
    timer = timer or time_steps
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    dtypes = [dtype]
    if device.type == "cpu" and dtype != torch.float32:
        dtypes = [torch.float32] if dtype == torch.float16 else [dtype, torch.float32]  # no fast fp16 on CPUs
    best: tuple[float, str] = (0.0, "")
    for dt in dtypes:
        ms = timer(_matmul(n, device, dt), device, warmup=2, repeats=repeats, steps=3)
        best = max(best, (2 * n**3 / (min(ms) / 1e3), str(dt).replace("torch.", "")))
    tried = " and ".join(str(dt).replace("torch.", "") for dt in dtypes)
    return best[0], f"measured: {n}x{n} {best[1]} matmul, best of {repeats}" + (
        f" (the faster of {tried})" if len(dtypes) > 1 else "")


def _conv(device: torch.device, dtype: torch.dtype) -> tuple[StepFn, int]:
    """A 3x3 convolution of 64 to 64 channels on 8 images of 32x32 (a CIFAR ResNet's middle stage) and its FLOPs."""
    x = torch.randn(8, 64, 32, 32, device=device, dtype=dtype)
    w = torch.randn(64, 64, 3, 3, device=device, dtype=dtype)
    return (lambda: torch.nn.functional.conv2d(x, w, padding=1)), 2 * 8 * 32 * 32 * 64 * 64 * 9


_RATES: dict[tuple[str, str, int], dict[str, float]] = {}


def device_rates(device: torch.device, precision: str) -> dict[str, float]:
    """FLOP/s this device reaches on each op class (:data:`OP_CLASSES`) in ``precision`` with the current torch
    threads: the best of 3 timings of a 512x512 matmul (:func:`measured_matmul_peak`) and of a 3x3 convolution
    (:func:`_conv`). Measured once per process (device, precision, threads), in well under a second on a CPU.
    Timed as the bill times its steps (:func:`idle_steps`): on a CPU in CPU time per thread where that is less than
    the wall time, so a busy machine lowers neither side of the bill's model FLOP utilisation; on CUDA, wall time."""
    key = (str(device), precision, torch.get_num_threads())
    if key not in _RATES:
        matmul, _ = measured_matmul_peak(device, precision, n=512, repeats=3, timer=idle_steps)
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
        conv, flops = _conv(device, torch.float32 if device.type == "cpu" and dtype == torch.float16 else dtype)
        ms = idle_steps(conv, device, warmup=1, repeats=3, steps=1)
        _RATES[key] = {"matmul": matmul, "conv": flops / (min(ms) / 1e3)}
    return _RATES[key]


# -- peak memory -------------------------------------------------------------------------------


def cuda_peak_memory(step: StepFn, device: torch.device, steps: int = 3) -> dict[str, Any]:
    """Peak allocated/reserved CUDA memory of training steps, after a reset of the peak counters."""
    step()  # allocate optimiser state etc. first: steady-state peak, as in a long run
    synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    for _ in range(steps):
        step()
    synchronize(device)
    return {
        "peak_mb": torch.cuda.max_memory_allocated(device) / 2**20,
        "reserved_mb": torch.cuda.max_memory_reserved(device) / 2**20,
        "method": "cuda_max_memory_allocated",
    }


def _proc_status_mb(field: str) -> float | None:
    """A ``Vm*`` line of /proc/self/status in MiB (Linux), or None where unavailable."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 2**10  # reported in kB
    except (OSError, ValueError):
        pass
    return None


def rss_mb() -> float:
    """Current resident set size of this process in MiB (0 where unavailable)."""
    return _proc_status_mb("VmRSS") or 0.0


def reset_peak_rss() -> bool:
    """Reset the kernel's resident-set high-water mark (Linux >= 4.0: ``5`` into clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


def max_rss_mb() -> float:
    """High-water mark of this process's resident set in MiB (since the last reset, where supported)."""
    hwm = _proc_status_mb("VmHWM")
    if hwm is not None:
        return hwm
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def cpu_peak_memory_subprocess(config: dict[str, Any], plugins: Sequence[str] = (), timeout_s: float = 600
                               ) -> dict[str, Any]:
    """Peak memory of the training step on CPU, measured in a fresh process.

    A child process builds the same task and model, notes its resident set, resets the kernel's
    high-water mark, runs a few training steps and reports the new high-water mark minus that
    baseline: the memory the step itself needs (activations, gradients, optimiser state). A
    subprocess keeps the reading clean: nothing else of the parent's (other runs, plots, caches)
    is resident there, and where the mark cannot be reset it is still the mark of this one step.
    ``plugins`` are the specs the child loads first (:attr:`bench.runs.plugins.Plugin.reload`), so that a
    plugin's variant builds there too.
    """
    proc = subprocess.run(
        [sys.executable, "-m", "bench.runs.memprobe"],
        input=json.dumps({"config": config, "plugins": list(plugins)}),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    )
    if proc.returncode == -signal.SIGKILL:
        raise RuntimeError("memory probe subprocess was killed (SIGKILL): out of memory?")
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"memory probe subprocess failed (exit {proc.returncode}): {tail[0]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
