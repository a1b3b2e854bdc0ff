"""The GPU check: the figures users quote first and every CUDA claim of resbench in one run of at most 8 minutes on a
cold machine, each check a numbered step with a time limit of its own, a failed step never stopping the next, and a
summary that survives the run (``OUT/summary.md``, ``OUT/summary.json``, each step's log and the rows it made).

    python scripts/gpu_check.py OUT [--quick] [--dry-run] [--device cuda|cpu] [--timm-benchmark PATH] [--only S,...]

``scripts/gpu_check.sh`` installs resbench (``pip install -e . --no-deps``: the machine has torch, torchvision,
timm, pandas, seaborn, scikit-learn, tqdm, filelock, pytest and tensorboard, and no network) and runs this.

The steps run in order of what a user quotes first (ResNet-50 beside timm's own script, GPT-2 small's tokens/s and
MFU, the cost table compiled), then what failed on the last GPU, then what held. Each step's limit comes from the
logs of the last GPU run with a stated margin, or is an estimate where no log has the figure yet (``--dry-run``
prints each with its source). A step starts only if its limit fits in what is left of the check's budget; the first
steps always fit (the dry run marks where "as time allows" begins). A step records its figures as it makes them, so
one stopped by its limit still reports every row and figure it made before.

``--device cpu`` runs the steps that have a CPU form at CPU sizes (the tests run them, so that on a GPU only CUDA can
fail). ``--timm-benchmark`` is ``benchmark.py`` from a checkout of timm's repository (it is not in timm's wheel);
without it the side-by-side with timm's own script is skipped, saying so. Exit status 1 when a step failed.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import shlex
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
INSTALL_S = 20  # `pip install -e . --no-deps`: about 10 s on the first H100 machine
STOPPER = REPO / "tests" / "stopper_plugin.py"  # the resume tests' plugin: a Transformer that stops itself


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
    found: dict[str, Any] = field(default_factory=dict)  # the step's figures so far: kept if its limit stops it

    def run(self, args: Sequence[str], timeout: float | None = None, env: dict[str, str] | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        """One command of the step, its output appended to the step's log; bounded by the step's time left."""
        left = self.deadline - time.monotonic()
        if left <= 1:
            raise TimeoutError("the step's time limit was reached")
        with self.log.open("a", encoding="utf-8") as log:
            log.write(f"$ {shlex.join(args)}\n")
            log.flush()
            started = time.monotonic()
            done = subprocess.run(list(args), cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=min(left, timeout or left), env={**os.environ, **(env or {})})
            log.write(done.stdout + f"[{time.monotonic() - started:.1f} s]\n")
        if check and done.returncode != 0:
            tail = " ".join(done.stdout.strip().splitlines()[-2:])[-300:]
            raise RuntimeError(f"{args[2] if len(args) > 2 else args[0]} exited {done.returncode}: {tail}")
        return done

    def bench(self, *args: str, timeout: float | None = None, check: bool = True,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return self.run([PY, "-m", "bench", *args], timeout=timeout, check=check, env=env)

    def bench_row(self, key: str, results: Path, *args: str) -> dict[str, Any]:
        """``bench ARGS --results-dir RESULTS``; whatever happens to it (its limit included), the last row it wrote
        goes into ``found[key]`` (a run killed after writing its row keeps its figures)."""
        try:
            self.bench(*args, "--results-dir", str(results))
        finally:
            if (results / "leaderboard.csv").exists():
                self.found[key] = figures(rows(results)[-1])
        return self.found[key]

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"


def rows(results: Path) -> list[dict[str, Any]]:
    """The leaderboard rows of a results directory, as the harness reads them."""
    sys.path.insert(0, str(REPO))
    from bench.runs.results import ResultsStore  # resbench is imported by the check only once it is installed

    return ResultsStore(results).load_leaderboard().to_dict("records")


ROW_FIGURES = ("status", "train_samples_per_s", "train_tokens_per_s", "mfu", "peak_mem_mb", "throughput_method",
               "model_samples_per_s", "input_bound_fraction")


def figures(row: dict[str, Any]) -> dict[str, Any]:
    """The figures of a row the summary reports (NaN as None)."""
    return {k: None if isinstance(row.get(k), float) and math.isnan(row[k]) else row.get(k) for k in ROW_FIGURES}


def gpus() -> int:
    done = subprocess.run([PY, "-c", "import torch; print(torch.cuda.device_count())"], capture_output=True,
                          text=True)
    return int(done.stdout.strip() or 0)


def _timing(ctx: Context, warmup: int, repeats: int, steps: int) -> list[str]:
    """The timing options of a step: as given on a GPU, one of each in the CPU forms (the code, not the figure)."""
    w, r, n = (warmup, repeats, steps) if ctx.cuda else (1, 1, 1)
    return ["--timing-warmup", str(w), "--timing-repeats", str(r), "--timing-steps", str(n)]


def _num(value: Any, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


# -- the figures users quote first ----------------------------------------------------------------------------------


def timm_samples_per_s(output: str) -> float:
    """The training throughput timm's benchmark.py reports (``train_samples_per_sec`` in its JSON results)."""
    found = re.findall(r'"train_samples_per_sec":\s*([0-9.]+)', output) or re.findall(
        r"train_samples_per_sec[\"':=\s]+([0-9.]+)", output)
    if not found:
        raise RuntimeError("no train_samples_per_sec in timm's benchmark.py output")
    return float(found[-1])


def _headline(ctx: Context, compiled: bool) -> None:
    """ResNet-50 at 224² in bf16 + channels-last, batch 256: the harness on timm's model, then timm's own benchmark.py
    on the same model, one after the other (the first GPU's two pairs differed by 0.1 % and 0.3 %: one pair is
    enough). The CPU form: timm's ResNet-18 at 32², batch 4."""
    model, size, batch = ("resnet50", 224, 256) if ctx.cuda else ("resnet18", 32, 4)
    ctx.found["model"] = model
    row = ctx.bench_row("harness", ctx.out / "headline" / ("compiled" if compiled else "eager"), "run", "--variant",
                        f"timm:{model}", "--task", "synthetic", "--image-size", str(size), "--num-classes", "1000",
                        "--batch-size", str(batch), "--train-size", str(2 * batch), "--val-size", str(batch),
                        "--steps", "1", "--device", ctx.device, "--precision", "bf16", "--channels-last",
                        "--measure", "throughput", "flops", *([] if compiled else ["memory"]),
                        *_timing(ctx, 5, 3, 10), *(["--compile"] if compiled else []), "--chance-band", "0", "--quiet")
    if row["throughput_method"] != "timed":
        raise RuntimeError(f"the harness's throughput is not the timing phase's: {row}")
    if ctx.timm_benchmark is None:
        ctx.found["timm"] = "not given (--timm-benchmark PATH)"
        return
    out = ctx.run([PY, str(ctx.timm_benchmark), "--model", model, "--bench", "train", "--batch-size", str(batch),
                   "--img-size", str(size), "--amp", "--amp-dtype", "bfloat16", "--channels-last", "--device",
                   ctx.device, *(["--torchcompile"] if compiled else [])]).stdout
    ctx.found["timm"] = timm_samples_per_s(out)
    ctx.found["ratio"] = row["train_samples_per_s"] / ctx.found["timm"]


def describe_headline(found: dict[str, Any]) -> str:
    h = found.get("harness") or {}
    text = f"{found.get('model', 'resnet50')}: harness {_num(h.get('train_samples_per_s'), ',.0f')} img/s"
    if isinstance(found.get("timm"), float):
        text += f", timm's benchmark.py {found['timm']:,.0f}: {found['ratio']:.3f}x"
    elif "timm" in found:
        text += f"; timm's benchmark.py {found['timm']}"
    return text + f"; MFU {_num(h.get('mfu'), '.1%')}" + (
        f"; peak {h['peak_mem_mb']:,.0f} MiB" if h.get("peak_mem_mb") else "")


def step_gpt2(ctx: Context) -> None:
    """GPT-2 small (124M, Pre-LN) at 1,024 tokens in bf16 on generated token shards, batch 16: tokens/s and MFU from
    the timing phase, eager then compiled (20 training steps each: the figures, not learning). The CPU form: a
    2-layer, 64-wide Pre-LN at 64 tokens."""
    shards = ctx.out / "data" / "tokens"
    seq, batch, variant = (1024, 16, "gpt2_small") if ctx.cuda else (64, 2, "preln")
    ctx.bench("data", "synth-tokens", str(shards), "--vocab-size", "50257", "--train-tokens",
              str(1_000_000 if ctx.cuda else 100_000), "--val-tokens", str(65_536 if ctx.cuda else 8_192), "--quiet")
    extra = [] if ctx.cuda else ["--depth", "2", "--model-arg", "d_model=64", "--model-arg", "n_heads=2"]
    for tag in ("eager", "compiled"):
        ctx.bench_row(tag, ctx.out / "gpt2" / tag, "run", "--variant", variant, *extra, "--task", "tokens",
                      "--data-path", str(shards), "--seq-len", str(seq), "--batch-size", str(batch), "--steps",
                      "20" if ctx.cuda else "2", "--eval-tokens", str(4 * seq), "--device", ctx.device, "--precision",
                      "bf16", "--measure", "throughput", "flops", *_timing(ctx, 3, 3, 5), "--chance-band", "0",
                      "--optimizer", "adamw", "--lr", "6e-4", *(["--compile"] if tag == "compiled" else []), "--quiet")


def describe_gpt2(found: dict[str, Any]) -> str:
    return "; ".join(f"{tag} {_num(r.get('train_tokens_per_s'), ',.0f')} tokens/s, MFU {_num(r.get('mfu'), '.1%')}"
                     for tag, r in found.items() if tag in ("eager", "compiled"))


# GPU: mHC (whose paper gives a training-time overhead) and the two crosslayer designs furthest above their FLOPs on
# the first H100 (eager: 4.81x, 3.46x, 4.20x Pre-LN's step), eager and compiled side by side in the papers' precision.
# CPU: the code, eager only (compiling even the studies' 6-layer model takes minutes on 2 shared cores; the compiled
# path of `bench cost` is tested in tests/test_cost.py, a real CPU compile in tests/test_gpu.py).
COST_CUDA = ("gpt2_small", ("mhc", "dca", "attn_res"), 8)
COST_CPU = ("study_quick", ("mhc",), 4)
COST_FIGURES = ("flops_rel", "step_rel", "mem_rel", "step_rel_compiled", "mem_rel_compiled")


def step_cost(ctx: Context) -> None:
    """`bench cost` in bf16: each design's step time and memory relative to Pre-LN's, timed alternately beside it,
    eager and under torch.compile; the designs in turn, each written as it is done, so that the limit keeps those made
    (the figures the papers' overheads are claims against)."""
    shape, designs, batch = COST_CUDA if ctx.cuda else COST_CPU
    table = ctx.out / "cost.csv"
    ctx.found.update(shape=shape, batch=batch, designs={})
    try:
        ctx.bench("cost", "--designs", *designs, "--shape", shape, "--batch", str(batch), "--repeats",
                  "3" if ctx.cuda else "1", "--device", ctx.device, "--precision", "bf16",
                  "--compile" if ctx.cuda else "--no-compile", "--format", "csv", "--out", str(table))
    finally:
        if table.exists():
            with table.open(encoding="utf-8") as f:
                for row in csv.DictReader(f):
                    if row["design"] in designs and row.get("step_rel"):
                        ctx.found["designs"][row["design"]] = {
                            k: float(row[k]) if row.get(k) else None for k in COST_FIGURES}
    missing = [d for d in designs if d not in ctx.found["designs"] or
               (ctx.cuda and ctx.found["designs"][d]["step_rel_compiled"] is None)]
    if missing:
        raise RuntimeError(f"no figures for {', '.join(missing)}")


def describe_cost(found: dict[str, Any]) -> str:
    made = "; ".join(f"{d} {r['step_rel']:.2f}x eager" + (f", {r['step_rel_compiled']:.2f}x compiled"
                                                          if r["step_rel_compiled"] is not None else "")
                     + f" ({r['flops_rel']:.3f}x the FLOPs; memory {_num(r['mem_rel'], '.2f')}x eager"
                     + (f", {_num(r['mem_rel_compiled'], '.2f')}x compiled)" if r["step_rel_compiled"] is not None
                        else ")")
                     for d, r in found.get("designs", {}).items())
    return f"Pre-LN's step = 1 at {found.get('shape')}, batch {found.get('batch')}, bf16: " + (made or "none made")


# -- what failed on the last GPU --------------------------------------------------------------------------------------


def step_gpu_tests(ctx: Context) -> None:
    """The gpu-marked tests: the CUDA forms of tests/test_gpu.py (runs in each precision, compile with CUDA graphs,
    fused optimisers, CUDA memory, a real OOM) and the images test."""
    if not ctx.cuda:
        raise Skip("the gpu-marked tests need CUDA (their CPU forms run in the test suite)")
    done = ctx.run([PY, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests"], check=False)
    ctx.found["summary"] = (done.stdout.strip().splitlines() or [""])[-1]
    if done.returncode != 0:
        raise RuntimeError(f"gpu tests: {ctx.found['summary']}")


def _study(ctx: Context, name: str, body: str) -> Path:
    path = ctx.out / f"{name}.toml"
    path.write_text(f'name = "{name}"\n{body}', encoding="utf-8")
    return path


def step_oom(ctx: Context) -> None:
    """A run sized past any GPU's memory (resnet20, 65,536 images of 32², about 260 GB of activations) gets an oom
    row in its first forward, and the sweep goes on to the next run, which is ok."""
    if not ctx.cuda:
        raise Skip("CUDA out-of-memory needs CUDA (its logic is tested with the device faked)")
    study = _study(ctx, "oom", """vary = []
[base]
variant = "resnet20"
task = "synthetic"
train_size = 65536
val_size = 64
steps = 2
device = "cuda"
measure = []
chance_band = 0  # two steps learn nothing: the oom row is under test
[grid]
batch_size = [65536, 32]
""")
    ctx.bench("sweep", str(study), "--quiet", "--results-dir", str(ctx.out / "oom"), check=False)
    ctx.found["statuses"] = {int(r["batch_size"]): r["status"] for r in rows(ctx.out / "oom")}
    if ctx.found["statuses"] != {65536: "oom", 32: "ok"}:
        raise RuntimeError(f"expected an oom row then an ok one, got {ctx.found['statuses']}")


def step_data(ctx: Context) -> None:
    """ResNet-50 for 200 steps on an ImageNet-layout folder of generated JPEGs and PNGs read by 8 DataLoader workers,
    bf16 + channels-last, with the task's default recipe (He 2015's, scaled to the batch, warmed up): it must learn;
    end-to-end and model img/s and the input-bound fraction; then the loader alone per worker count, in steady state."""
    tree = ctx.out / "data" / "images"
    ctx.bench("data", "synth-imagefolder", str(tree), "--classes", "10", "--train-per-class",
              "64" if ctx.cuda else "4", "--val-per-class", "8" if ctx.cuda else "2", "--size",
              "256" if ctx.cuda else "40", "--quiet")
    size, batch = (224, 64) if ctx.cuda else (32, 4)
    row = ctx.bench_row("run", ctx.out / "data-run", "run", "--variant", "resnet50" if ctx.cuda else "resnet18",
                        "--task", "imagefolder", "--data-path", str(tree), "--image-size", str(size), "--num-classes",
                        "10", "--batch-size", str(batch), "--workers", "8" if ctx.cuda else "2", "--steps",
                        "200" if ctx.cuda else "4", "--eval-batches", "2" if ctx.cuda else "1", "--device", ctx.device,
                        "--precision", "bf16", "--channels-last", "--measure", "throughput",
                        *_timing(ctx, 2, 2, 8), "--quiet")
    loader = ctx.bench("perf", "loader", "--task", "imagefolder", "--data-path", str(tree), "--image-size", str(size),
                       "--batch-size", str(batch), "--batches", "24" if ctx.cuda else "2", "--device", ctx.device,
                       "--workers", *(["0", "4", "8"] if ctx.cuda else ["0", "2"])).stdout
    ctx.found["loader"] = {int(line.split()[0]): float(line.split()[1].replace(",", ""))
                           for line in loader.strip().splitlines()[2:]}
    if ctx.cuda and row["status"] != "ok":
        raise RuntimeError(f"ResNet-50 with the default recipe ended {row['status']}")


def describe_data(found: dict[str, Any]) -> str:
    r = found.get("run") or {}
    text = (f"{_num(r.get('train_samples_per_s'), ',.0f')} img/s end to end, model "
            f"{_num(r.get('model_samples_per_s'), ',.0f')}; input-bound fraction "
            f"{_num(r.get('input_bound_fraction'), '.2f')}; status {r.get('status')}")
    return text + "".join(f"; loader alone {n} workers {v:,.0f} img/s" for n, v in found.get("loader", {}).items())


# -- what held on the last GPU ----------------------------------------------------------------------------------------


def _torchrun(ctx: Context, nproc: int, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    port = str(29500 + os.getpid() % 1000)
    return ctx.run([PY, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1",
                    "--master-port", port, "-m", "bench", *args], env={"OMP_NUM_THREADS": "1"})


DDP_RUN = ["run", "--variant", "preln", "--depth", "2", "--task", "copy", "--seq-len", "16", "--batch-size", "8",
           "--chance-band", "0",  # six steps learn nothing: the job's mechanics and curve are under test
           "--steps", "6", "--optimizer", "adam", "--lr", "1e-3", "--measure", "--eval-every", "3", "--quiet"]


def _curve(results: Path) -> list[float]:
    (path,) = (results / "runs").glob("*.json")
    return [p["loss"] for p in json.loads(path.read_text())["curves"]["train"]]


def step_ddp(ctx: Context) -> None:
    """torchrun over every visible GPU through NCCL (gloo with --device cpu): one run, rank 0 writing its row; with
    two or more processes the loss follows the one-process curve; `bench perf scaling` over 1..N."""
    n = max(1, gpus()) if ctx.cuda else 2
    res = ctx.out / "ddp"
    ctx.found.update(nproc=n, backend="nccl" if ctx.cuda else "gloo")
    _torchrun(ctx, n, [*DDP_RUN, "--device", ctx.device, "--results-dir", str(res / f"n{n}")])
    ctx.found["status"] = rows(res / f"n{n}")[-1]["status"]
    if n >= 2:
        ctx.bench(*DDP_RUN, "--device", ctx.device, "--results-dir", str(res / "n1"))
        one, many = (_curve(res / d) for d in ("n1", f"n{n}"))
        ctx.found["max_loss_gap"] = max(abs(a - b) for a, b in zip(one, many, strict=True))
        if ctx.found["max_loss_gap"] > 1e-3:
            raise RuntimeError(f"{n} processes left the one-process curve by {ctx.found['max_loss_gap']:.2e}")
    if ctx.cuda and n >= 2 and not ctx.quick:
        out = ctx.bench("perf", "scaling", *DDP_RUN[1:-1], "--device", "cuda", "--nproc",
                        *map(str, range(1, n + 1))).stdout
        ctx.found["scaling"] = out.strip().splitlines()[-n:]


def describe_ddp(found: dict[str, Any]) -> str:
    gap = f", loss within {found['max_loss_gap']:.1e} of one process" if "max_loss_gap" in found else ""
    return f"{found.get('nproc')} process(es) on {found.get('backend')}: {found.get('status')}{gap}"


def step_resume(ctx: Context) -> None:
    """A run stopped by SIGTERM mid-training and rerun ends exactly as the same run uninterrupted (--deterministic,
    the CUDA generator's state in the checkpoint); the stopper plugin of the resume tests."""
    marker = ctx.out / "resume" / "stop-once"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    env = {"RESBENCH_STOP_MARKER": str(marker), "RESBENCH_STOP_AT": "9", "RESBENCH_STOP_SIGNAL": "SIGTERM"}
    args = ["run", "--variant", "stopper", "--task", "tinytext", "--steps", "16", "--batch-size", "8", "--seq-len",
            "32", "--eval-every", "4", "--optimizer", "adamw", "--lr", "3e-3", "--deterministic", "--device",
            ctx.device, "--measure", "--chance-band", "0", "--quiet", "--plugin", str(STOPPER)]
    cut = ctx.bench(*args, "--results-dir", str(ctx.out / "resume" / "cut"), check=False, env=env)
    if cut.returncode != 75:
        raise RuntimeError(f"the stopped run exited {cut.returncode}, not 75")
    ctx.bench(*args, "--results-dir", str(ctx.out / "resume" / "cut"), env=env)
    ctx.bench(*args, "--results-dir", str(ctx.out / "resume" / "whole"), env=env)
    a, b = (_curve(ctx.out / "resume" / d) for d in ("cut", "whole"))
    ctx.found.update(resumed=rows(ctx.out / "resume" / "cut")[-1]["resumed_from_step"], losses=len(a))
    if a != b:
        raise RuntimeError(f"the resumed curve differs from the uninterrupted one: {a} vs {b}")


def step_analyses(ctx: Context) -> None:
    """A trained run's checkpoint rebuilt for lesion and landscape on the device; probes of a 24-layer Pre-LN."""
    res = ctx.out / "analysis"
    ctx.bench("run", "--variant", "resnet", "--depth", "20" if ctx.cuda else "8", "--task", "digits", "--device",
              ctx.device, "--steps", "60" if ctx.cuda else "10", "--save-checkpoint", "--measure", "--quiet",
              "--results-dir", str(res))
    run_id = ctx.found["run_id"] = rows(res)[-1]["run_id"]
    ctx.bench("lesion", run_id, "--device", ctx.device, "--drop", "2", "--draws", "2", "--results-dir", str(res))
    ctx.found["done"] = ["lesion"]
    ctx.bench("landscape", run_id, "--device", ctx.device, "--dims", "1", "--points", "5", "--samples", "128",
              "--results-dir", str(res))
    ctx.found["done"].append("landscape")
    ctx.bench("probe", "--variant", "preln", "--depth", "24" if ctx.cuda else "4", "--task", "tinytext",
              "--seq-len", "32", "--batch-size", "8", "--device", ctx.device, "--csv", str(res / "probe-preln-d24.csv"))
    ctx.found["done"].append("probes")


# The full-scale presets (docs/long-runs.md), the largest bill first: the order their bills are made in.
FULL_SCALE: tuple[tuple[str, str], ...] = (("gpt2", ""), ("imagenet", ""), ("imagenet", "short"),
                                           ("degradation", "cifar10"), ("warmup", "lm_scale"),
                                           ("degradation", "cifar10_110"))
BILL_TOTAL = re.compile(r"^total: ([\d,]+) runs, ([\d,]+) steps, (\S+) training FLOPs; on this device \((.*?)\)"
                        r"(?:, idle)?: (\S+ \S+) with --jobs", re.MULTILINE)
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


def step_bills(ctx: Context) -> None:
    """The bill (`--dry-run`) of each full-scale preset on this GPU, their data replaced by stand-ins of the same
    shapes, the largest first, as many as the step's time allows (a one-run study in the CPU form)."""
    presets = FULL_SCALE if ctx.cuda else (("tiny", ""),)
    ctx.found["bills"] = {}
    for study, preset in presets:
        where = ["reproduce", study, *(["--preset", preset] if preset else [])] if ctx.cuda else \
            ["sweep", str(_study(ctx, "tiny", TINY_STUDY))]
        out = ctx.bench(*where, "--dry-run", "--set", f"data_path={ctx.out / 'no-data'}", "--set",
                        f"data_dir={ctx.out / 'no-data'}", "--results-dir", str(ctx.out / "bills")).stdout
        ctx.found["bills"][f"{study} {preset}".strip()] = bill_total(out)


def describe_bills(found: dict[str, Any]) -> str:
    return "; ".join(f"{name}: {b['wall']} ({b['runs']} run{'s' * (b['runs'] != 1)})"
                     for name, b in found.get("bills", {}).items()) or "no bill made"


def step_executor(ctx: Context) -> None:
    """The local executor, one run per GPU at a time: a sweep of 2 runs per GPU with --jobs = the GPU count."""
    n = gpus() if ctx.cuda else 0
    if n < 2:
        raise Skip("one run per GPU needs two GPUs or more (one GPU: the other steps' runs are on it)")
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
    ctx.found["devices"] = sorted({str(r["device"]) for r in got})
    if any(r["status"] != "ok" for r in got) or len(ctx.found["devices"]) != n:
        raise RuntimeError(f"runs {[r['status'] for r in got]} on {ctx.found['devices']}")


# -- the plan ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    name: str
    run: Callable[[Context], None]  # fills ctx.found; raises Skip, TimeoutError or an error
    describe: Callable[[dict[str, Any]], str]  # the summary's figure, from what the step found (also from part of it)
    budget_s: float  # its time limit in the full check
    source: str  # where the limit comes from
    quick_s: float = 0  # in --quick (0: not run there)


def _said(key: str) -> Callable[[dict[str, Any]], str]:
    return lambda found: str(found.get(key, ""))


STEPS: tuple[Step, ...] = (
    Step("headline-resnet50-eager", lambda ctx: _headline(ctx, compiled=False), describe_headline, 45,
         "first H100: one harness run 14.5 s wall, one timm benchmark.py run about 20 s (2.5 pairs in 85 s); one "
         "pair + 30 %", 45),
    Step("gpt2-small", step_gpt2, describe_gpt2, 90,
         "first H100: a 200-step eager run wrote its row 21 s into the run (about 45 s with 4M tokens generated and "
         "start-up); now 20 steps, 1M tokens: about 25 s eager; compiled: estimate, 45 s for Inductor on GPT-2 small "
         "(no GPU log yet); + 25 %"),
    Step("headline-resnet50-compiled", lambda ctx: _headline(ctx, compiled=True), describe_headline, 120,
         "estimate (no GPU log yet): a cold Inductor compile of ResNet-50's step about 60 s in the harness, timm's "
         "from Inductor's cache about 20 s, and the eager pair's 35 s"),
    Step("cost-gpt2-small", step_cost, describe_cost, 100,
         "first H100: the eager table of 3 designs took under 45 s with ResNet-50's; compiled: estimate, one compile "
         "per model (Pre-LN once) of 15-30 s; the designs made before the limit are kept"),
    Step("gpu-tests", step_gpu_tests, _said("summary"), 50,
         "first H100: 64 s for 8 tests, 40.6 s of them the OOM test (now sized to fail in its first forward), the "
         "others under 10 s; the CUDA-graph compile of a 8-layer ResNet estimated 15 s; + 25 %", 50),
    Step("cuda-oom", step_oom, _said("statuses"), 30,
         "first H100: 22 s for the sweep (the oversized run refused, the other ok); a real OOM in the first forward "
         "adds seconds; + 35 %", 30),
    Step("imagefolder-loader", step_data, describe_data, 50,
         "first H100: 36 s (the loader timed on 5 batches); now 24 batches in whole rounds per worker count, about "
         "5 s more; + 20 %", 50),
    Step("torchrun-nccl", step_ddp, describe_ddp, 25, "first H100: 17 s; + 45 %", 25),
    Step("resume-after-sigterm", step_resume, lambda f: f"resumed from step {f.get('resumed')}: "
         f"{f.get('losses')} losses equal to the uninterrupted run", 40, "first H100: 32 s; + 25 %"),
    Step("analyses", step_analyses, lambda f: f"{', '.join(f.get('done', [])) or 'none'} ran", 45,
         "first H100: over 25 s (the lesion done, the landscape under way at the limit): estimate 35 s; + 30 %"),
    Step("full-scale-bills", step_bills, describe_bills, 45,
         "first H100: GPT-2's bill alone over 25 s; the bills made before the limit are kept"),
    Step("executor-per-gpu", step_executor, lambda f: f"one run per GPU at a time on {f.get('devices')}", 30,
         "first H100: 28 s with one GPU (now skipped with fewer than two)"),
)


def plan(quick: bool, only: Sequence[str] = ()) -> list[tuple[int, Step, float]]:
    """The steps to run, numbered, each with its time limit."""
    chosen = [(i, s, s.quick_s if quick else s.budget_s) for i, s in enumerate(STEPS, 1)]
    return [(i, s, b) for i, s, b in chosen if b > 0 and (not only or s.name in only)]


def guaranteed(steps: Sequence[tuple[int, Step, float]], budget: float) -> int:
    """How many of ``steps`` always run: those whose limits, added up after the install, fit in ``budget``."""
    total, n = INSTALL_S, 0
    for _, _, limit in steps:
        total += limit
        if total > budget:
            break
        n += 1
    return n


def run_steps(ctx: Context, steps: Sequence[tuple[int, Step, float]], budget: float = math.inf) -> list[Result]:
    """Run ``steps`` in order, each within its limit and only if that limit fits in what is left of ``budget``
    (seconds from now: the check's budget less the install); the summary written after each."""
    results = []
    (ctx.out / "logs").mkdir(parents=True, exist_ok=True)
    factor = 1 if ctx.cuda else CPU_LIMIT_FACTOR
    end = time.monotonic() + budget * factor
    for number, step, limit in steps:
        ctx.log, ctx.found = ctx.out / "logs" / f"{number:02d}-{step.name}.log", {}
        left = end - time.monotonic()
        if left < limit * factor:
            result = Result(number, step.name, "skipped", f"not reached: {left / factor:.0f} s of the check's time "
                            f"left, its limit is {limit:.0f} s")
            result.budget_s = limit
            results.append(result)
            continue
        ctx.deadline = time.monotonic() + limit * factor
        t0 = time.monotonic()
        try:
            step.run(ctx)
            result = Result(number, step.name, "ok", step.describe(ctx.found))
        except Skip as why:
            result = Result(number, step.name, "skipped", str(why))
        except (subprocess.TimeoutExpired, TimeoutError):
            result = Result(number, step.name, "failed", f"over its time limit of {limit:.0f} s")
        except Exception as exc:  # the next step runs all the same
            result = Result(number, step.name, "failed", f"{type(exc).__name__}: {exc}")
        if result.status == "failed" and ctx.found:  # what it made before it failed
            result.figure += f"; made before: {step.describe(ctx.found)}"
        result.seconds, result.budget_s, result.detail = time.monotonic() - t0, limit, dict(ctx.found)
        results.append(result)
        write_summary(ctx.out, results, ctx.device)  # after every step: what was found survives a killed check
        print(f"[{number}] {step.name}: {result.status} ({result.seconds:.0f} s) {result.figure}", flush=True)
    write_summary(ctx.out, results, ctx.device)
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


def dry_run(steps: Sequence[tuple[int, Step, float]], budget: float) -> str:
    """The plan: each step's limit, the running total, where "as time allows" begins, and each limit's source."""
    sure = guaranteed(steps, budget)
    lines = [f"{'#':>2}  {'check':<27} {'limit':>6} {'total':>6}  source of the limit"]
    total = INSTALL_S
    lines.append(f"{'':>2}  {'install':<27} {INSTALL_S:>5.0f}s {total:>5.0f}s  "
                 "`pip install -e . --no-deps`: about 10 s")
    for k, (number, step, limit) in enumerate(steps):
        if k == sure:
            lines.append(f"    -- as time allows from here: each starts only if its limit fits in the {budget:.0f} s")
        total += limit
        lines.append(f"{number:>2}  {step.name:<27} {limit:>5.0f}s {total:>5.0f}s  {step.source}")
    lines.append(f"install {INSTALL_S} s + the first {sure} checks = "
                 f"{INSTALL_S + sum(b for _, _, b in steps[:sure]):.0f} s at most (limit {budget:.0f} s)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("out", nargs="?", default="results/gpu", help="where the summary, logs and rows go")
    p.add_argument("--quick", action="store_true", help=f"the most valuable checks, under {QUICK_BUDGET_S // 60} min")
    p.add_argument("--dry-run", action="store_true", help="list the checks, their time limits and their sources")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: the checks' CPU forms")
    p.add_argument("--timm-benchmark", type=Path, help="benchmark.py of a checkout of timm's repository")
    p.add_argument("--only", default="", help="comma-separated check names")
    ns = p.parse_args(argv)
    steps = plan(ns.quick, [s for s in ns.only.split(",") if s])
    budget = QUICK_BUDGET_S if ns.quick else WHOLE_BUDGET_S
    if ns.dry_run:
        print(dry_run(steps, budget))
        return 0
    if ns.timm_benchmark is not None and not ns.timm_benchmark.is_file():
        p.error(f"--timm-benchmark {ns.timm_benchmark}: no such file")
    out = Path(ns.out).resolve()
    results = run_steps(Context(out, ns.device, ns.quick, ns.timm_benchmark), steps, budget - INSTALL_S)
    print(f"summary: {out / 'summary.md'}")
    return 1 if any(r.status == "failed" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
