"""The harness's device paths: runs under each autocast precision, channels-last, compile (in Inductor's modes), the
fused optimisers, memory, MFU, a transformer in bf16, out-of-memory rows.

Each test body runs on every device of :data:`DEVICES`: the CPU always (in the README's test command, so that a
change of status, schema or default breaks CI, not the next day a GPU is lent), CUDA where there is one (marked
``gpu``: `scripts/gpu_check.sh` runs those). What only CUDA has (its memory counters, a datasheet peak, a real
out-of-memory) is tested on CUDA for real and, on the CPU, as logic with the device faked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from bench.runs import execution, measure
from bench.runs import train as train_mod
from bench.runs.config import RunConfig
from bench.runs.measure import PEAK_FLOPS, peak_flops
from bench.runs.runner import execute

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
# What each device's memory phase reports.
MEM_METHOD = {"cpu": "cpu_rss_peak_minus_baseline_subprocess", "cuda": "cuda_max_memory_allocated"}
# The compile mode each device's compiled run uses: on CUDA the one with CUDA graphs (replayed whole steps).
COMPILE_MODE = {"cpu": "default", "cuda": "reduce-overhead"}


def device_cfg(device: str, **kw: Any) -> RunConfig:
    base = dict(variant="resnet", depth=8, task="synthetic", device=device, steps=6, batch_size=8, eval_every=3,
                image_size=8, train_size=64, val_size=16, timing_warmup=2, timing_repeats=3, timing_steps=3,
                chance_band=0.0)  # six small steps: the mechanics and the figures are under test, not learning or speed
    return RunConfig(**{**base, **kw})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("precision", "channels_last"), [("fp32", False), ("bf16", True), ("fp16", False)])
def test_a_run_records_its_measurements(tmp_path: Path, device: str, precision: str, channels_last: bool) -> None:
    result = execute(device_cfg(device, precision=precision, channels_last=channels_last), tmp_path)
    row, m = result["row"], result["measurements"]
    assert row["status"] == "ok", row["error"]
    assert row["device"].startswith(device) and row["precision"] == precision
    assert row["device_name"] == measure.device_name(torch.device(device))
    assert row["mem_method"] == MEM_METHOD[device] and row["peak_mem_mb"] > 0
    assert m["memory"].get("reserved_mb", m["memory"]["peak_mb"]) >= m["memory"]["peak_mb"]
    assert row["throughput_method"] == "timed" and row["train_samples_per_s"] > 0
    assert row["mfu"] is not None and 0 < row["mfu"] < 1
    assert result["execution"] == {"optimizer_impl": "fused" if device == "cuda" else "default",
                                   "compile_mode": None, "joins": "as written"}


@pytest.mark.parametrize("device", DEVICES)
def test_a_compiled_run(tmp_path: Path, device: str) -> None:
    mode = COMPILE_MODE[device]
    # An MLP: what is under test is how a compiled run is made and recorded, and Inductor compiles its few kernels from
    # a cold cache in about 60 % of the CPU time the ResNet's take (27 s against 44 s, with the C++ compiler's).
    result = execute(device_cfg(device, variant="plain_mlp", depth=4, task="digits", compile=True, compile_mode=mode,
                                measure=("throughput",)), tmp_path)
    row = result["row"]
    assert row["status"] == "ok", row["error"]
    assert row["throughput_method"] == "timed" and row["train_samples_per_s"] > 0
    assert result["execution"]["compile_mode"] == mode


@pytest.mark.parametrize("device", DEVICES)
def test_a_transformer_in_bf16(tmp_path: Path, device: str) -> None:
    c = RunConfig(variant="preln", task="tinytext", device=device, precision="bf16", steps=5, eval_every=5,
                  optimizer="adamw", lr=1e-3, seq_len=64, batch_size=16, chance_band=0.0,
                  measure=("flops", "throughput"), timing_warmup=1, timing_repeats=1, timing_steps=2)
    row = execute(c, tmp_path)["row"]
    assert row["status"] == "ok" and row["train_tokens_per_s"] > 0
    assert 0 < row["fwd_flops_per_sample"] < row["train_flops_per_sample"]


@pytest.mark.parametrize("device", DEVICES)
def test_the_optimisers_use_fused_kernels_on_cuda(device: str) -> None:
    dev = torch.device(device)
    for kind in ("sgd", "adam", "adamw"):
        opt = execution.make_optimizer(kind, [torch.nn.Parameter(torch.ones(3, device=dev))], dev, lr=0.1)
        assert bool(opt.defaults.get("fused")) == (device == "cuda")
        assert execution.optimizer_impl(kind, dev) == ("fused" if device == "cuda" else "default")


# -- CUDA only: real on a GPU, faked on the CPU ------------------------------------------------------------------------


@pytest.mark.gpu
def test_datasheet_peak_for_known_gpus() -> None:
    name = torch.cuda.get_device_name()
    peak, source = peak_flops(torch.device("cuda"), "bf16")
    known = [p for p, _ in PEAK_FLOPS if p.lower() in name.lower()]
    assert source.startswith("datasheet") if known else source.startswith("measured")
    assert peak > 1e12


def test_the_datasheet_peak_of_a_faked_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lookup behind the test above, on the CPU: the names CUDA reports for the GPUs of the table."""
    for name, (pattern, bf16) in {"NVIDIA H200": ("H200", 989.4e12), "NVIDIA H100 80GB HBM3": ("H100", 989.4e12),
                                  "NVIDIA A100-SXM4-80GB": ("A100", 312e12)}.items():
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None, n=name: n)
        assert peak_flops(torch.device("cuda"), "bf16") == (bf16, f"datasheet: {pattern} bf16 dense")


@pytest.mark.gpu
def test_cuda_memory_counters_bracket_the_step() -> None:
    dev = torch.device("cuda")
    x = torch.randn(1024, 1024, device=dev)
    got = measure.cuda_peak_memory(lambda: (x @ x).sum(), dev)
    assert got["method"] == "cuda_max_memory_allocated" and got["reserved_mb"] >= got["peak_mb"] >= 4.0


def test_cuda_memory_counters_with_the_device_faked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The counters are reset after one untimed step (the optimiser's state allocated) and read after the others."""
    calls: list[str] = []
    fake = {"synchronize": lambda device=None: calls.append("sync"),
            "reset_peak_memory_stats": lambda device=None: calls.append("reset"),
            "max_memory_allocated": lambda device=None: 3 * 2**20, "max_memory_reserved": lambda device=None: 4 * 2**20}
    for name, fn in fake.items():
        monkeypatch.setattr(torch.cuda, name, fn)
    got = measure.cuda_peak_memory(lambda: calls.append("step"), torch.device("cuda"), steps=2)
    assert got == {"peak_mb": 3.0, "reserved_mb": 4.0, "method": "cuda_max_memory_allocated"}
    assert calls == ["step", "sync", "reset", "step", "step", "sync"]


# A batch whose activations exceed any GPU's memory in the first forward (resnet20 keeps about 4 MB per 32x32 image for
# its backward: 65,536 images need about 260 GB), made of images small enough to generate in a moment.
OOM_BATCH = 65536


@pytest.mark.gpu
def test_cuda_oom_is_a_row(tmp_path: Path) -> None:
    oom = device_cfg("cuda", variant="resnet20", depth=None, image_size=32, batch_size=OOM_BATCH, train_size=OOM_BATCH,
                     measure=())
    row = execute(oom, tmp_path)["row"]
    assert row["status"] == "oom" and row["error"].startswith("OutOfMemoryError"), row["error"]


def test_an_out_of_memory_error_in_a_step_is_a_row_with_the_device_faked(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The allocator's error as CUDA raises it, from the first training step of a CPU run: an oom row, exit as usual."""
    def out_of_memory(self: train_mod.StepRunner) -> torch.Tensor:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB")

    monkeypatch.setattr(train_mod.StepRunner, "__call__", out_of_memory)
    row = execute(device_cfg("cpu", measure=()), tmp_path)["row"]
    assert row["status"] == "oom" and row["error"] == ("OutOfMemoryError: CUDA out of memory. Tried to allocate "
                                                       "64.00 GiB")
