"""CUDA paths of the harness: device runs, autocast precisions, channels-last, compile, CUDA memory and MFU.

Marked ``gpu``: skipped on machines without CUDA (see conftest.py); `scripts/gpu_check.sh` runs them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.runs.config import RunConfig
from bench.runs.measure import PEAK_FLOPS, peak_flops
from bench.runs.runner import execute

pytestmark = pytest.mark.gpu


def cuda_cfg(**kw: object) -> RunConfig:
    base = dict(variant="resnet20", task="synthetic", device="cuda", steps=6, batch_size=64, eval_every=3,
                train_size=512, val_size=256, timing_warmup=2, timing_repeats=3, timing_steps=3)
    return RunConfig(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("precision", "channels_last"), [("fp32", False), ("bf16", True), ("fp16", False)]
)
def test_cuda_run_records_cuda_measurements(tmp_path: Path, precision: str, channels_last: bool) -> None:
    result = execute(cuda_cfg(precision=precision, channels_last=channels_last), tmp_path)
    row, m = result["row"], result["measurements"]
    assert row["status"] == "ok" and row["device"].startswith("cuda") and row["precision"] == precision
    assert row["mem_method"] == "cuda_max_memory_allocated" and row["peak_mem_mb"] > 0
    assert m["memory"]["reserved_mb"] >= m["memory"]["peak_mb"]
    assert row["mfu"] is not None and 0 < row["mfu"] < 1
    assert row["device_name"] == torch.cuda.get_device_name()


def test_compiled_run(tmp_path: Path) -> None:
    row = execute(cuda_cfg(compile=True, measure=("throughput",)), tmp_path)["row"]
    assert row["status"] == "ok" and row["train_samples_per_s"] > 0


def test_datasheet_peak_for_known_gpus() -> None:
    name = torch.cuda.get_device_name()
    peak, source = peak_flops(torch.device("cuda"), "bf16")
    known = [p for p, _ in PEAK_FLOPS if p.lower() in name.lower()]
    assert source.startswith("datasheet") if known else source.startswith("measured")
    assert peak > 1e12


def test_cuda_oom_is_a_row(tmp_path: Path) -> None:
    free, _ = torch.cuda.mem_get_info()
    # A batch too large to fit: activations of resnet20 at 512x512 images exceed any current GPU.
    row = execute(cuda_cfg(image_size=512, batch_size=4096, train_size=4096, val_size=64, measure=()), tmp_path)["row"]
    assert row["status"] == "oom", (free, row["error"])


def test_transformer_bf16_on_cuda(tmp_path: Path) -> None:
    c = RunConfig(variant="preln", task="tinytext", device="cuda", precision="bf16", steps=5, eval_every=5,
                  optimizer="adamw", lr=1e-3, seq_len=64, batch_size=16)
    row = execute(c, tmp_path)["row"]
    assert row["status"] == "ok" and row["train_tokens_per_s"] > 0
    assert 0 < row["fwd_flops_per_sample"] < row["train_flops_per_sample"]
