"""The peak FLOP/s MFU divides by: in fp32 on CUDA, each op class at the peak its TF32 flag gives it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import variants
from bench.runs import measure

H100 = measure.PEAK_FLOPS[2][1]  # ("H100", {...}): 494.7e12 TF32, 66.9e12 fp32


def step_flops(name: str, x: torch.Tensor, **kw: object) -> measure.StepFlops:
    model = variants.create(name, **kw)
    return measure.count_step_flops(lambda: model(x).float().square().mean(), torch.device("cpu"))


@pytest.fixture
def h100(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A mocked H100; the TF32 flags restored afterwards (torch's cuBLAS module takes no monkeypatch.setattr)."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before


def tf32(*, conv: bool, matmul: bool) -> None:
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = conv, matmul


@pytest.mark.parametrize("matmul_tf32", [False, True])
def test_fp32_transformer_is_divided_by_the_matmul_peak(h100: None, matmul_tf32: bool) -> None:
    """cuDNN's TF32 flag (on by default) covers convolutions only: a Transformer's matmuls run at the fp32 peak
    unless the matmul flag is on."""
    tf32(conv=True, matmul=matmul_tf32)
    counted = step_flops("preln", torch.randint(0, 256, (1, 8)), depth=1, d_model=16, n_heads=2, d_ff=32)
    assert counted.train_by_class["conv"] == 0 and counted.train_by_class["matmul"] == counted.train > 0
    key = "tf32" if matmul_tf32 else "fp32"
    assert measure.peak_flops(torch.device("cuda"), "fp32", counted.train_by_class) == (
        H100[key], f"datasheet: H100 {key} dense")
    assert measure.peak_flops(torch.device("cuda"), "bf16", counted.train_by_class) == (
        H100["bf16"], "datasheet: H100 bf16 dense")


def test_fp32_conv_net_mixes_the_peaks_of_its_op_classes(h100: None) -> None:
    """resnet20: its convolutions at the TF32 peak, its classifier's matmuls at the fp32 one; the step's peak is
    the rate its FLOPs run at with every op at its class's peak."""
    tf32(conv=True, matmul=False)
    counted = step_flops("resnet20", torch.randn(2, 3, 8, 8))
    conv, mm = counted.train_by_class["conv"], counted.train_by_class["matmul"]
    # the classifier, 64 -> 10, on 2 samples: forward 2x64x10 multiply-adds, backward the input and weight grads
    assert mm == 3 * 2 * (2 * 64 * 10) and conv == counted.train - mm
    peak, source = measure.peak_flops(torch.device("cuda"), "fp32", counted.train_by_class)
    assert peak == (conv + mm) / (conv / 494.7e12 + mm / 66.9e12)
    assert source == "datasheet: H100 dense, by op class (conv 100% at tf32, matmul 0% at fp32)"
    tf32(conv=False, matmul=False)
    assert measure.peak_flops(torch.device("cuda"), "fp32", counted.train_by_class) == (
        66.9e12, "datasheet: H100 fp32 dense")


def test_datasheet_peak_unknown_device_and_precision() -> None:
    assert measure.datasheet_peak("Some GPU", "fp32") is None
    assert measure.datasheet_peak("Tesla V100-SXM2", "bf16") is None  # no bf16 units
    # no TF32 on a V100: its fp32 convolutions run at the fp32 peak whatever the flag
    assert measure.datasheet_peak("Tesla V100-SXM2", "fp32", {"conv": 1.0}, frozenset({"conv"})) == (
        15.7e12, "datasheet: V100 fp32 dense")
