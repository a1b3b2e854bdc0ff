"""The GPU check: every CUDA claim of resbench in one short run, each check a numbered step with a time limit of
its own, a failed step never stopping the next, and a summary that survives the run (``OUT/summary.md``,
``OUT/summary.json``, each step's log and the leaderboard rows it made under ``OUT/``).

    python scripts/gpu_check.py OUT [--quick] [--dry-run] [--device cuda|cpu] [--timm-benchmark PATH] [--only S,...]

``scripts/gpu_check.sh`` installs resbench (``pip install -e . --no-deps``: the machine has torch, torchvision,
timm, pandas, seaborn, scikit-learn, tqdm, filelock, pytest and tensorboard, and no network) and runs this.
``--device cpu`` runs the steps that have a CPU form at CPU sizes (the side-by-side with timm's script, torchrun
on gloo, ...): the tests run them so that on a GPU only CUDA can fail. ``--timm-benchmark`` is the path of
``benchmark.py`` from a checkout of timm's repository (it is not in timm's wheel); without it the side-by-side
with timm's own script is skipped, saying so. Exit status 1 when a step failed.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
WHOLE_BUDGET_S = 480  # the whole invocation, install included: 8 minutes
QUICK_BUDGET_S = 240
CPU_LIMIT_FACTOR = 10  # the CPU forms exist to test the check itself, on a shared 2-core machine: no time claim


@dataclass
class Result:
    """What one step found: ``ok``, ``failed`` or ``skipped``; the figure a reader compares; why, where not ok."""

    number: int
    name: str
    status: str
    figure: str = ""
    seconds: float = 0.0
    budget_s: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)


class Skip(Exception):
    """A step that cannot run here, and why (no second GPU, no timm checkout)."""


@dataclass
class Context:
    out: Path
    device: str
    quick: bool
    timm_benchmark: Path | None
    log: Path = Path(os.devnull)
    deadline: float = math.inf

    def run(self, args: Sequence[str], timeout: float | None = None, env: dict[str, str] | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        """One command of the step, its output appended to the step's log; bounded by the step's time left."""
        left = self.deadline - time.monotonic()
        if left <= 1:
            raise TimeoutError("the step's time limit was reached")
        with self.log.open("a", encoding="utf-8") as log:
            log.write(f"$ {shlex.join(args)}\n")
            log.flush()
            done = subprocess.run(list(args), cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=min(left, timeout or left), env={**os.environ, **(env or {})})
            log.write(done.stdout)
        if check and done.returncode != 0:
            tail = " ".join(done.stdout.strip().splitlines()[-2:])[-300:]
            raise RuntimeError(f"{args[2] if len(args) > 2 else args[0]} exited {done.returncode}: {tail}")
        return done

    def bench(self, *args: str, timeout: float | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run([PY, "-m", "bench", *args], timeout=timeout, check=check)

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"


def rows(results: Path) -> list[dict[str, Any]]:
    """The leaderboard rows of a results directory, as the harness reads them."""
    sys.path.insert(0, str(REPO))
    from bench.runs.results import ResultsStore  # resbench is imported by the check only once it is installed

    return ResultsStore(results).load_leaderboard().to_dict("records")


def gpus() -> int:
    done = subprocess.run([PY, "-c", "import torch; print(torch.cuda.device_count())"], capture_output=True,
                          text=True)
    return int(done.stdout.strip() or 0)


# -- the steps -----------------------------------------------------------------------------------------------------


def step_gpu_tests(ctx: Context) -> tuple[str, dict[str, Any]]:
    """The gpu-marked tests (CUDA runs, autocast precisions, compile, CUDA memory, MFU)."""
    if not ctx.cuda:
        raise Skip("the gpu-marked tests need CUDA")
    done = ctx.run([PY, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests"], check=False)
    summary = (done.stdout.strip().splitlines() or [""])[-1]
    if done.returncode != 0:
        raise RuntimeError(f"gpu tests: {summary}")
    return summary, {}


def _headline_size(ctx: Context) -> tuple[int, int]:
    """Image size and batch: the headline's on a GPU, the smallest that exercises the same code on the CPU."""
    return (224, 256) if ctx.cuda else (32, 4)


def _timing(ctx: Context, warmup: int, repeats: int, steps: int) -> list[str]:
    """The timing options of a step: as given on a GPU, one of each in the CPU forms (the code, not the figure)."""
    w, r, n = (warmup, repeats, steps) if ctx.cuda else (1, 1, 1)
    return ["--timing-warmup", str(w), "--timing-repeats", str(r), "--timing-steps", str(n)]


def _headline_args(ctx: Context, model: str, compiled: bool) -> list[str]:
    size, batch = _headline_size(ctx)
    return ["run", "--variant", model, "--task", "synthetic", "--image-size", str(size), "--num-classes", "1000",
            "--batch-size", str(batch), "--train-size", str(2 * batch), "--val-size", str(batch), "--steps", "1",
            "--device", ctx.device, "--precision", "bf16", "--channels-last", "--measure", "throughput", "flops",
            "memory", *_timing(ctx, 5, 3, 10), *(["--compile"] if compiled else []), "--quiet"]


def timm_samples_per_s(output: str) -> float:
    """The training throughput timm's benchmark.py reports (``train_samples_per_sec`` in its JSON results)."""
    found = re.findall(r'"train_samples_per_sec":\s*([0-9.]+)', output) or re.findall(
        r"train_samples_per_sec[\"':=\s]+([0-9.]+)", output)
    if not found:
        raise RuntimeError("no train_samples_per_sec in timm's benchmark.py output")
    return float(found[-1])


def step_headline(ctx: Context) -> tuple[str, dict[str, Any]]:
    """ResNet-50 at 224² in bf16 + channels-last, batch 256: the harness (timm's model and the registry's) and,
    alternating with it, timm's own benchmark.py on the same model; median of 3 each; MFU and peak memory, and the
    memory measured independently in this process."""
    figures: dict[str, Any] = {}
    compiles = [False] if ctx.quick or not ctx.cuda else [False, True]
    repeats = 1 if ctx.quick or not ctx.cuda else 3
    for compiled in compiles:
        tag = "compiled" if compiled else "eager"
        ours, theirs = [], []
        for _ in range(repeats):
            res = ctx.out / "headline" / tag
            ctx.bench(*_headline_args(ctx, "timm:resnet50", compiled), "--results-dir", str(res))
            row = rows(res)[-1]
            ours.append(float(row["train_samples_per_s"]))
            figures[f"{tag}_mfu"], figures[f"{tag}_peak_mb"] = row["mfu"], row["peak_mem_mb"]
            if ctx.timm_benchmark is not None:
                size, batch = _headline_size(ctx)
                out = ctx.run([PY, str(ctx.timm_benchmark), "--model", "resnet50", "--bench", "train",
                               "--batch-size", str(batch), "--img-size", str(size), "--amp", "--amp-dtype",
                               "bfloat16", "--channels-last", "--device", ctx.device,
                               *(["--torchcompile"] if compiled else [])]).stdout
                theirs.append(timm_samples_per_s(out))
        figures[f"{tag}_harness"] = statistics.median(ours)
        if theirs:
            figures[f"{tag}_timm"] = statistics.median(theirs)
            figures[f"{tag}_ratio"] = figures[f"{tag}_harness"] / figures[f"{tag}_timm"]
    res = ctx.out / "headline" / "registry"
    ctx.bench(*_headline_args(ctx, "resnet50", False), "--results-dir", str(res))
    figures["registry_eager_harness"] = float(rows(res)[-1]["train_samples_per_s"])
    figures["independent_peak_mb"] = _independent_peak(ctx)
    ratio = f", harness/timm {figures['eager_ratio']:.3f}" if "eager_ratio" in figures else \
        " (timm's benchmark.py not given: --timm-benchmark PATH)"
    text = (f"{figures['eager_harness']:,.0f} img/s eager" + (f", {figures['compiled_harness']:,.0f} compiled"
            if "compiled_harness" in figures else "") + ratio + f"; MFU {figures['eager_mfu']:.1%}; peak "
            f"{figures['eager_peak_mb']:,.0f} MiB (independent {figures['independent_peak_mb']:,.0f})")
    return text, figures


def _independent_peak(ctx: Context) -> float:
    """The peak memory of three training steps of the same model, measured here without the harness."""
    size, batch = _headline_size(ctx)
    code = f"""
import torch, timm
from bench.runs.measure import rss_mb, max_rss_mb, reset_peak_rss
dev = torch.device({ctx.device!r})
model = timm.create_model("resnet50", num_classes=1000).to(dev).to(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
x = torch.randn({batch}, 3, {size}, {size}, device=dev).contiguous(memory_format=torch.channels_last)
y = torch.randint(0, 1000, ({batch},), device=dev)
def step():
    with torch.autocast(dev.type, dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
step()
if dev.type == "cuda":
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
    for _ in range(3): step()
    torch.cuda.synchronize(); print(torch.cuda.max_memory_allocated() / 2**20)
else:
    base = rss_mb(); reset_peak_rss()
    for _ in range(3): step()
    print(max_rss_mb() - base)
"""
    return float(ctx.run([PY, "-c", code]).stdout.strip().splitlines()[-1])


def step_gpt2(ctx: Context) -> tuple[str, dict[str, Any]]:
    """GPT-2 small (124M, Pre-LN) for 200 steps at sequence length 1024 in bf16 on generated token shards: tokens/s
    and MFU."""
    shards = ctx.out / "data" / "tokens"
    seq, batch, variant = (1024, 16, "gpt2_small") if ctx.cuda else (64, 2, "preln")
    ctx.bench("data", "synth-tokens", str(shards), "--vocab-size", "50257", "--train-tokens",
              str(4_000_000 if ctx.cuda else 200_000), "--val-tokens", str(262_144 if ctx.cuda else 16_384), "--quiet")
    res = ctx.out / "gpt2"
    extra = [] if ctx.cuda else ["--depth", "2", "--model-arg", "d_model=64", "--model-arg", "n_heads=2"]
    ctx.bench("run", "--variant", variant, *extra, "--task", "tokens", "--data-path", str(shards), "--seq-len",
              str(seq), "--batch-size", str(batch), "--steps", "200" if ctx.cuda else "4", "--eval-tokens",
              str(16 * seq if ctx.cuda else 2 * seq), "--device", ctx.device, "--precision", "bf16", "--measure",
              "throughput", "flops", *_timing(ctx, 3, 3, 5), "--quiet", "--results-dir", str(res))
    row = rows(res)[-1]
    return f"{row['train_tokens_per_s']:,.0f} tokens/s, MFU {row['mfu']:.1%}", {
        "tokens_per_s": row["train_tokens_per_s"], "mfu": row["mfu"], "status": row["status"]}


def _torchrun(ctx: Context, nproc: int, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    port = str(29500 + os.getpid() % 1000)
    return ctx.run([PY, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1",
                    "--master-port", port, "-m", "bench", *args], env={"OMP_NUM_THREADS": "1"})


DDP_RUN = ["run", "--variant", "preln", "--depth", "2", "--task", "copy", "--seq-len", "16", "--batch-size", "8",
           "--chance-band", "0",  # six steps learn nothing: the job's mechanics and curve are under test
           "--steps", "6", "--optimizer", "adam", "--lr", "1e-3", "--measure", "--eval-every", "3", "--quiet"]


def step_ddp(ctx: Context) -> tuple[str, dict[str, Any]]:
    """torchrun over every visible GPU through NCCL (gloo with --device cpu): one run, rank 0 writing its row; with
    two or more processes the loss follows the one-process curve; `bench perf scaling` over 1..N."""
    n = max(1, gpus()) if ctx.cuda else 2
    res = ctx.out / "ddp"
    _torchrun(ctx, n, [*DDP_RUN, "--device", ctx.device, "--results-dir", str(res / f"n{n}")])
    row = rows(res / f"n{n}")[-1]
    figures: dict[str, Any] = {"nproc": n, "status": row["status"], "backend": "nccl" if ctx.cuda else "gloo"}
    if n >= 2:
        ctx.bench(*DDP_RUN, "--device", ctx.device, "--results-dir", str(res / "n1"))
        one, many = (_curve(res / d) for d in ("n1", f"n{n}"))
        figures["max_loss_gap"] = max(abs(a - b) for a, b in zip(one, many, strict=True))
        if figures["max_loss_gap"] > 1e-3:
            raise RuntimeError(f"{n} processes left the one-process curve by {figures['max_loss_gap']:.2e}")
    if ctx.cuda and n >= 2 and not ctx.quick:
        out = ctx.bench("perf", "scaling", *DDP_RUN[1:-1], "--device", "cuda", "--nproc",
                        *map(str, range(1, n + 1))).stdout
        figures["scaling"] = out.strip().splitlines()[-n:]
    gap = f", loss within {figures['max_loss_gap']:.1e} of one process" if "max_loss_gap" in figures else ""
    return f"{n} process(es) on {figures['backend']}: {row['status']}{gap}", figures


def _curve(results: Path) -> list[float]:
    (path,) = (results / "runs").glob("*.json")
    return [p["loss"] for p in json.loads(path.read_text())["curves"]["train"]]


def _study(ctx: Context, name: str, body: str) -> Path:
    path = ctx.out / f"{name}.toml"
    path.write_text(f'name = "{name}"\n{body}', encoding="utf-8")
    return path


def step_executor(ctx: Context) -> tuple[str, dict[str, Any]]:
    """The local executor, one run per GPU at a time: a sweep of 2 runs per GPU with --jobs = the GPU count."""
    if not ctx.cuda:
        raise Skip("one run per GPU needs GPUs")
    n = max(1, gpus())
    study = _study(ctx, "gpu_sweep", f"""[base]
task = "synthetic"
image_size = 32
train_size = 2048
steps = 50
batch_size = 128
device = "cuda"
measure = ["throughput"]
chance_band = 0  # placement is under test, not learning
[grid]
variant = ["resnet"]
depth = [20]
seed = {list(range(2 * n))}
""")
    ctx.bench("sweep", str(study), "--jobs", str(n), "--gpus-per-run", "1", "--quiet", "--results-dir",
              str(ctx.out / "sweep"))
    got = rows(ctx.out / "sweep")
    devices = sorted({str(r["device"]) for r in got})
    if any(r["status"] != "ok" for r in got) or len(devices) != n:
        raise RuntimeError(f"runs {[r['status'] for r in got]} on {devices}")
    return f"{len(got)} runs over {n} GPU(s), one per GPU at a time", {"devices": devices}


def step_oom(ctx: Context) -> tuple[str, dict[str, Any]]:
    """A run sized past the GPU's memory gets an oom row, and the sweep goes on to the next run."""
    if not ctx.cuda:
        raise Skip("CUDA out-of-memory needs CUDA")
    study = _study(ctx, "oom", """vary = []
[base]
task = "synthetic"
image_size = 224
num_classes = 1000
train_size = 64
val_size = 64
steps = 2
device = "cuda"
measure = []
chance_band = 0  # two steps learn nothing: the oom row is under test
[grid]
variant = ["resnet152"]
batch_size = [65536, 32]
""")
    ctx.bench("sweep", str(study), "--quiet", "--results-dir", str(ctx.out / "oom"), check=False)
    statuses = {int(r["batch_size"]): r["status"] for r in rows(ctx.out / "oom")}
    if statuses.get(65536) != "oom" or statuses.get(32) != "ok":
        raise RuntimeError(f"expected an oom row then an ok one, got {statuses}")
    return "the oversized run: oom row; the next run: ok", {"statuses": statuses}


def step_data(ctx: Context) -> tuple[str, dict[str, Any]]:
    """ResNet-50 for 200 steps on an ImageNet-layout folder of generated JPEGs and PNGs read by a DataLoader with 8
    workers, bf16 + channels-last: the model's throughput, the end-to-end one and the share of the step spent
    waiting for data; the loader alone per worker count."""
    tree = ctx.out / "data" / "images"
    ctx.bench("data", "synth-imagefolder", str(tree), "--classes", "10", "--train-per-class",
              "64" if ctx.cuda else "4", "--val-per-class", "8" if ctx.cuda else "2", "--size",
              "256" if ctx.cuda else "40", "--quiet")
    res = ctx.out / "data-run"
    size, batch = (224, 64) if ctx.cuda else (32, 4)
    ctx.bench("run", "--variant", "resnet50" if ctx.cuda else "resnet18", "--task", "imagefolder", "--data-path",
              str(tree), "--image-size", str(size), "--num-classes", "10", "--batch-size", str(batch), "--workers",
              "8" if ctx.cuda else "2", "--steps", "200" if ctx.cuda else "4", "--eval-batches",
              "2" if ctx.cuda else "1", "--device", ctx.device, "--precision", "bf16", "--channels-last", "--measure",
              "throughput", *_timing(ctx, 2, 2, 3), "--quiet", "--results-dir", str(res))
    row = rows(res)[-1]
    loader = ctx.bench("perf", "loader", "--task", "imagefolder", "--data-path", str(tree), "--image-size", str(size),
                       "--batch-size", str(batch), "--batches", "5" if ctx.cuda else "2", "--device", ctx.device,
                       "--workers", *(["0", "4", "8"] if ctx.cuda else ["0", "2"])).stdout
    return (f"{row['train_samples_per_s']:,.0f} img/s end to end, model {row.get('model_samples_per_s', math.nan):,.0f}"
            f"; input-bound fraction {row.get('input_bound_fraction', math.nan):.2f}"), {
        **{k: row.get(k) for k in ("train_samples_per_s", "model_samples_per_s", "input_bound_fraction", "status")},
        "perf_loader": loader.strip().splitlines()[-4:]}


STOPPER = """
import os, signal
from pathlib import Path
import variants
MARKER = Path({marker!r})
COUNT = [0]

@variants.register("gpu_stopper", family="toy", paper="the GPU check")
def build(*, depth: int = 2, vocab_size: int = 256, max_len: int = 256):
    model = variants.create("preln", depth=depth, d_model=64, n_heads=4, d_ff=128, vocab_size=vocab_size,
                            max_len=max_len, dropout=0.1)
    def hook(module, args):
        if module.training:
            COUNT[0] += 1
            if COUNT[0] == 9 and MARKER.exists():
                MARKER.unlink()
                os.kill(os.getpid(), signal.SIGTERM)
    model.register_forward_pre_hook(hook)
    return model
"""


def step_resume(ctx: Context) -> tuple[str, dict[str, Any]]:
    """A run stopped by SIGTERM mid-training and rerun ends exactly as the same run uninterrupted (--deterministic,
    the CUDA generator's state in the checkpoint)."""
    marker = ctx.out / "resume" / "stop-once"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    plugin = ctx.out / "resume" / "stopper.py"
    plugin.write_text(STOPPER.format(marker=str(marker)), encoding="utf-8")
    args = ["run", "--variant", "gpu_stopper", "--task", "tinytext", "--steps", "16", "--batch-size", "8",
            "--seq-len", "32", "--eval-every", "4", "--optimizer", "adamw", "--lr", "3e-3", "--deterministic",
            "--device", ctx.device, "--measure", "--quiet", "--plugin", str(plugin)]
    cut = ctx.bench(*args, "--results-dir", str(ctx.out / "resume" / "cut"), check=False)
    if cut.returncode != 75:
        raise RuntimeError(f"the stopped run exited {cut.returncode}, not 75")
    ctx.bench(*args, "--results-dir", str(ctx.out / "resume" / "cut"))
    ctx.bench(*args, "--results-dir", str(ctx.out / "resume" / "whole"))
    a, b = (_curve(ctx.out / "resume" / d) for d in ("cut", "whole"))
    if a != b:
        raise RuntimeError(f"the resumed curve differs from the uninterrupted one: {a} vs {b}")
    resumed = rows(ctx.out / "resume" / "cut")[-1]["resumed_from_step"]
    return f"resumed from step {resumed:.0f}: {len(a)} losses equal to the uninterrupted run", {"resumed": resumed}


def step_analyses(ctx: Context) -> tuple[str, dict[str, Any]]:
    """A trained run's checkpoint rebuilt for lesion and landscape on the device; probes of a 24-layer Pre-LN."""
    res = ctx.out / "analysis"
    ctx.bench("run", "--variant", "resnet", "--depth", "20" if ctx.cuda else "8", "--task", "digits", "--device",
              ctx.device, "--steps", "60" if ctx.cuda else "10", "--save-checkpoint", "--measure", "--quiet",
              "--results-dir", str(res))
    run_id = rows(res)[-1]["run_id"]
    ctx.bench("lesion", run_id, "--device", ctx.device, "--drop", "2", "--draws", "2", "--results-dir", str(res))
    ctx.bench("landscape", run_id, "--device", ctx.device, "--dims", "1", "--points", "5", "--samples", "128",
              "--results-dir", str(res))
    ctx.bench("probe", "--variant", "preln", "--depth", "24" if ctx.cuda else "4", "--task", "tinytext",
              "--seq-len", "32", "--batch-size", "8", "--device", ctx.device, "--csv", str(res / "probe-preln-d24.csv"))
    return "lesion, landscape and probes ran", {"run_id": run_id}


# The full-scale presets (docs/long-runs.md), the largest bill first: the order their bills are made in.
FULL_SCALE: tuple[tuple[str, str], ...] = (("gpt2", ""), ("imagenet", ""), ("imagenet", "short"),
                                           ("degradation", "cifar10"), ("warmup", "lm_scale"),
                                           ("degradation", "cifar10_110"))
BILL_TOTAL = re.compile(r"^total: ([\d,]+) runs, ([\d,]+) steps, (\S+) training FLOPs; on this device \((.*?)\): "
                        r"(\S+ \S+) with --jobs", re.MULTILINE)


TINY_STUDY = """[base]
task = "digits"
steps = 20
[grid]
variant = ["resnet"]
depth = [8]
"""


def bill_total(output: str) -> dict[str, Any]:
    """The total line of a ``--dry-run``'s bill: runs, steps, training FLOPs, the device, the wall time there."""
    found = BILL_TOTAL.search(output)
    if found is None:
        raise RuntimeError("no bill total in the dry run's output")
    runs, steps, flops, device, wall = found.groups()
    return {"runs": int(runs.replace(",", "")), "steps": int(steps.replace(",", "")), "train_flops": float(flops),
            "device": device, "wall": wall}


def step_bills(ctx: Context) -> tuple[str, dict[str, Any]]:
    """The bill (`--dry-run`) of each full-scale preset on this GPU, their data replaced by stand-ins of the same
    shapes, the largest first, as many as the step's time allows (a one-run study in the CPU form)."""
    presets = FULL_SCALE if ctx.cuda else (("tiny", ""),)
    billed: dict[str, dict[str, Any]] = {}
    missed: list[str] = []
    for study, preset in presets:
        name = f"{study} {preset}".strip()
        where = ["reproduce", study, *(["--preset", preset] if preset else [])] if ctx.cuda else \
            ["sweep", str(_study(ctx, "tiny", TINY_STUDY))]
        try:
            out = ctx.bench(*where, "--dry-run", "--set", f"data_path={ctx.out / 'no-data'}", "--set",
                            f"data_dir={ctx.out / 'no-data'}", "--results-dir", str(ctx.out / "bills")).stdout
        except (subprocess.TimeoutExpired, TimeoutError):
            missed.append(name)
            continue
        billed[name] = bill_total(out)
    if not billed:
        raise TimeoutError("no bill was made within the step's time limit")
    figure = "; ".join(f"{name}: {b['wall']} ({b['runs']} run{'s' * (b['runs'] != 1)})" for name, b in billed.items())
    return figure + (f"; not reached: {', '.join(missed)}" if missed else ""), {"bills": billed, "not_reached": missed}


@dataclass(frozen=True)
class CostRun:
    """One `bench cost` table of the cost step: designs beside their family's baseline at a shape."""

    shape: str
    designs: tuple[str, ...]
    batch: int
    precision: str
    compiled: bool = False

    @property
    def name(self) -> str:
        return f"{self.shape} {'compiled' if self.compiled else 'eager'} {self.precision}"


# GPU: mHC (whose paper gives a training-time overhead) and the two crosslayer designs furthest above their FLOPs on
# the CPU (results/cost/gpt2_small.md), in the papers' precision; then, as the step's time allows, ResNet-50's
# option-A shortcuts beside its projections (He et al. 2015, Table 3) at ImageNet's shape, and mHC compiled (the
# nearest to the paper's fused kernels). CPU: the code, not the figures.
COST_RUNS_CUDA = (CostRun("gpt2_small", ("mhc", "dca", "attn_res"), 8, "bf16"),
                  CostRun("resnet50_224", ("resnet_imagenet_a",), 64, "bf16"),
                  CostRun("gpt2_small", ("mhc",), 8, "bf16", compiled=True))
COST_RUNS_CPU = (CostRun("cifar_resnet110", ("preact",), 1, "fp32"),
                 CostRun("resnet50_224", ("resnet_imagenet_a",), 1, "fp32"))


def _cost_run(ctx: Context, run: CostRun, index: int) -> dict[str, Any]:
    table = ctx.out / f"cost-{index}.csv"
    ctx.bench("cost", "--designs", *run.designs, "--shape", run.shape, "--batch", str(run.batch), "--repeats",
              "3" if ctx.cuda else "1", "--device", ctx.device, "--precision", run.precision, "--format", "csv",
              *(["--compile"] if run.compiled else []), "--out", str(table))
    with table.open(encoding="utf-8") as f:
        measured = {row["design"]: row for row in csv.DictReader(f)}
    suffix = "_compiled" if run.compiled else ""
    rel = {d: {"step_rel": float(measured[d][f"step_rel{suffix}"]), "mem_rel": float(measured[d][f"mem_rel{suffix}"])}
           for d in run.designs}
    return {"shape": run.shape, "batch": run.batch, "precision": run.precision,
            "mode": "compiled" if run.compiled else "eager", "relative": rel}


def step_cost(ctx: Context) -> tuple[str, dict[str, Any]]:
    """`bench cost` on this device (:data:`COST_RUNS_CUDA`): each design's step time and memory relative to its
    family's baseline timed alternately beside it (the figures the papers' overheads are claims against). The first
    table must be made within the step's time; the others are made as the time allows, the rest named as not
    reached. The CPU form (:data:`COST_RUNS_CPU`) runs the same code at batch 1 in fp32."""
    runs = COST_RUNS_CUDA if ctx.cuda else COST_RUNS_CPU
    made: list[dict[str, Any]] = []
    missed: list[str] = []
    for i, run in enumerate(runs):
        try:
            made.append(_cost_run(ctx, run, i))
        except (subprocess.TimeoutExpired, TimeoutError):
            if not made:
                raise
            missed.append(run.name)
    figure = "; ".join(", ".join(f"{d} {r['step_rel']:.3g}x time, {r['mem_rel']:.3g}x memory"
                                 for d, r in m["relative"].items())
                       + f" at {m['shape']}, batch {m['batch']}, {m['mode']} {m['precision']}" for m in made)
    return figure + (f"; not reached: {', '.join(missed)}" if missed else ""), {"runs": made, "not_reached": missed}


@dataclass(frozen=True)
class Step:
    name: str
    run: Callable[[Context], tuple[str, dict[str, Any]]]
    budget_s: float  # its time limit in the full check
    quick_s: float  # in --quick (0: not run there)


STEPS: tuple[Step, ...] = (
    Step("gpu-tests", step_gpu_tests, 45, 40),
    Step("headline-resnet50", step_headline, 85, 60),
    Step("gpt2-small-tokens", step_gpt2, 50, 35),
    Step("torchrun-nccl", step_ddp, 50, 35),
    Step("executor-per-gpu", step_executor, 30, 0),
    Step("cuda-oom", step_oom, 25, 20),
    Step("imagefolder-loader", step_data, 40, 0),
    Step("resume-after-sigterm", step_resume, 40, 30),
    Step("analyses", step_analyses, 25, 0),
    Step("full-scale-bills", step_bills, 25, 0),
    Step("cost-gpt2-small", step_cost, 45, 0),
)
INSTALL_S = 20  # `pip install -e . --no-deps`, measured at about 10 s


def plan(quick: bool, only: Sequence[str] = ()) -> list[tuple[int, Step, float]]:
    """The steps to run, numbered, each with its time limit."""
    chosen = [(i, s, s.quick_s if quick else s.budget_s) for i, s in enumerate(STEPS, 1)]
    return [(i, s, b) for i, s, b in chosen if b > 0 and (not only or s.name in only)]


def run_steps(ctx: Context, steps: Sequence[tuple[int, Step, float]]) -> list[Result]:
    results = []
    (ctx.out / "logs").mkdir(parents=True, exist_ok=True)
    for number, step, budget in steps:
        ctx.log = ctx.out / "logs" / f"{number:02d}-{step.name}.log"
        ctx.deadline = time.monotonic() + budget * (1 if ctx.cuda else CPU_LIMIT_FACTOR)
        t0 = time.monotonic()
        try:
            figure, detail = step.run(ctx)
            result = Result(number, step.name, "ok", figure, detail=detail)
        except Skip as why:
            result = Result(number, step.name, "skipped", str(why))
        except (subprocess.TimeoutExpired, TimeoutError):
            result = Result(number, step.name, "failed", f"over its time limit of {budget:.0f} s")
        except Exception as exc:  # the next step runs all the same
            result = Result(number, step.name, "failed", f"{type(exc).__name__}: {exc}")
        result.seconds, result.budget_s = time.monotonic() - t0, budget
        results.append(result)
        write_summary(ctx.out, results, ctx.device)  # after every step: what was found survives a killed check
        print(f"[{number}] {step.name}: {result.status} ({result.seconds:.0f} s) {result.figure}", flush=True)
    return results


def write_summary(out: Path, results: Sequence[Result], device: str) -> tuple[Path, Path]:
    """``summary.md`` (one line per check: status, figure, seconds) and ``summary.json`` (everything)."""
    out.mkdir(parents=True, exist_ok=True)
    counts = {s: sum(r.status == s for r in results) for s in ("ok", "failed", "skipped")}
    lines = ["# GPU check", "", f"Device: {device}. {counts['ok']} ok, {counts['failed']} failed, "
             f"{counts['skipped']} skipped; {sum(r.seconds for r in results):.0f} s in all. One GPU machine on one "
             "day: compare the figures as ratios measured side by side.", "",
             "| # | check | status | figure | seconds (limit) |", "|---|---|---|---|---|"]
    lines += [f"| {r.number} | {r.name} | {r.status} | {r.figure.replace('|', '/')} | {r.seconds:.0f} "
              f"({r.budget_s:.0f}) |" for r in results]
    md, js = out / "summary.md", out / "summary.json"
    md.write_text("\n".join(lines) + "\n", encoding="utf-8")
    js.write_text(json.dumps({"device": device, "counts": counts, "steps": [asdict(r) for r in results]}, indent=1,
                             default=str) + "\n", encoding="utf-8")
    return md, js


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?", default="results/gpu", help="where the summary, logs and rows go")
    p.add_argument("--quick", action="store_true", help=f"the most valuable checks, under {QUICK_BUDGET_S // 60} min")
    p.add_argument("--dry-run", action="store_true", help="list the checks and their time limits; run nothing")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: the checks' CPU forms")
    p.add_argument("--timm-benchmark", type=Path, help="benchmark.py of a checkout of timm's repository")
    p.add_argument("--only", default="", help="comma-separated check names")
    ns = p.parse_args(argv)
    steps = plan(ns.quick, [s for s in ns.only.split(",") if s])
    total = INSTALL_S + sum(b for _, _, b in steps)
    if ns.dry_run:
        print(f"{'#':>2}  {'check':<22} {'limit':>6}")
        for number, step, budget in steps:
            print(f"{number:>2}  {step.name:<22} {budget:>5.0f}s  {(step.run.__doc__ or '').splitlines()[0]}")
        print(f"install {INSTALL_S} s + checks = {total:.0f} s at most "
              f"(limit {QUICK_BUDGET_S if ns.quick else WHOLE_BUDGET_S} s)")
        return 0
    if ns.timm_benchmark is not None and not ns.timm_benchmark.is_file():
        p.error(f"--timm-benchmark {ns.timm_benchmark}: no such file")
    out = Path(ns.out).resolve()
    results = run_steps(Context(out, ns.device, ns.quick, ns.timm_benchmark), steps)
    print(f"summary: {out / 'summary.md'}")
    return 1 if any(r.status == "failed" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
