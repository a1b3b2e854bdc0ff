"""Parameter counts of the CNN / MLP / norm-free presets against the papers' tables (built on the meta device)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torchvision

import variants


def count(name: str, **kw: Any) -> int:
    with torch.device("meta"):  # shapes only: no memory, no init cost, so the 60M-parameter nets are cheap
        model = variants.create(name, **kw)
    return sum(p.numel() for p in model.parameters())


# Exact counts (num_classes = 10 for CIFAR, 1000 for ImageNet), as tabulated by the issue.
EXACT = {
    "plain20": 269_722,
    "resnet20": 269_722,
    "resnet32": 464_154,
    "resnet44": 658_586,
    "plain56": 853_018,
    "resnet56": 853_018,
    "resnet110": 1_727_962,
    "densenet40_k12": 1_019_722,
    "densenet_bc100_k12": 769_162,
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "resnet50": 25_557_032,
    # Regression pin beside the 1.7M check below: He 2016's released ResNet-164 layout (projections
    # without BN or bias where the width changes, no conv biases) has exactly this many parameters.
    "preact_resnet164": 1_703_258,
    # Zagoruyko & Komodakis 2016: 36.5M / 11.0M / 8.9M in Table 6; these are the authors' layout exactly
    # (no conv biases, 1x1 projections without BN into stages 2-3 and into the widened stage 1).
    "wrn28_10": 36_479_194,
    "wrn16_8": 10_961_370,
    "wrn40_4": 8_949_210,
    # Xie et al. 2017 Table 7: 34.4M and 68.1M (the paper rounds 68.16M down); projections with BN.
    "resnext29_8x64d": 34_426_698,
    "resnext29_16x64d": 68_155_210,
}


@pytest.mark.parametrize(("name", "expected"), EXACT.items())
def test_exact_counts(name: str, expected: int) -> None:
    assert count(name) == expected


def test_resnet56_projection_shortcuts() -> None:
    # Option B adds a 1×1 conv + BN at the two widening units: 16·32 + 64 + 32·64 + 128 = 2,752.
    assert count("resnet56", shortcut="B") == 855_770


# Published sizes in millions: (paper size, relative tolerance).
PUBLISHED = {
    "plain32": (0.46, 0.01),  # He 2015 Table 6 sizes match their ResNet counterparts
    "plain44": (0.66, 0.01),
    "plain110": (1.7, 0.02),
    "resnet1202": (19.4, 0.01),  # He 2015 Table 6
    "preact_resnet110": (1.7, 0.02),  # He 2016 Table 2 (same layers as ResNet-110)
    "preact_resnet164": (1.7, 0.01),  # He 2016 Table 4
    # He 2016 Table 4 rounds to 10.2M; its released Torch code builds 10.33M (we match that layout).
    "preact_resnet1001": (10.2, 0.02),
    "densenet100_k12": (7.0, 0.01),  # Huang 2017 Table 2
    "densenet100_k24": (27.2, 0.01),
    "densenet_bc250_k24": (15.3, 0.01),
    "densenet_bc190_k40": (25.6, 0.01),
    "resnet101": (44.5, 0.01),  # torchvision / He 2015 Table 1
    "resnet152": (60.2, 0.01),
    "wrn28_10": (36.5, 0.002),  # Zagoruyko & Komodakis 2016, Table 6
    "wrn16_8": (11.0, 0.005),
    "wrn40_4": (8.9, 0.006),
    "resnext29_8x64d": (34.4, 0.002),  # Xie et al. 2017, Table 7
    "resnext29_16x64d": (68.1, 0.002),
}


@pytest.mark.parametrize(("name", "size"), PUBLISHED.items())
def test_published_sizes(name: str, size: tuple[float, float]) -> None:
    millions, tol = size
    assert count(name) == pytest.approx(millions * 1e6, rel=tol)


@pytest.mark.parametrize("depth", [18, 34, 50, 101, 152])
def test_imagenet_counts_equal_torchvision(depth: int) -> None:
    with torch.device("meta"):
        reference = getattr(torchvision.models, f"resnet{depth}")(weights=None)
    assert count(f"resnet{depth}") == sum(p.numel() for p in reference.parameters())


def test_plain_and_resnet_presets_share_counts() -> None:
    for depth in (20, 32, 44, 56, 110):
        assert count(f"plain{depth}") == count(f"resnet{depth}")


def test_srivastava_layers_hold_about_5000_parameters() -> None:
    # Srivastava 2015 §3.1: 71-unit plain layers and 50-block highway layers, ≈5000 parameters per layer.
    per_plain = count("plain_mlp20") - count("plain_mlp10")
    per_highway = count("highway_mlp20") - count("highway_mlp10")
    assert per_plain == 10 * (71 * 71 + 71)
    assert per_highway == 10 * 2 * (50 * 50 + 50)
    assert per_plain / 10 == pytest.approx(5000, rel=0.03)
    assert per_highway / 10 == pytest.approx(5000, rel=0.03)


def test_norm_free_counts() -> None:
    base = count("resnet56")
    bns = 2 * 2 * 9 * (16 + 32 + 64) + 2 * 16  # 2 BNs per unit, 2 affine params per channel; the stem BN
    # ReZero/SkipInit: the BNs go, a bias per conv and one α per unit come in.
    convs_out = 16 + 2 * 9 * (16 + 32 + 64)
    assert count("rezero_resnet56") == base - bns + convs_out + 27
    assert count("skipinit", depth=56) == count("rezero_resnet56")
    # Fixup: no BN; 4 scalar biases and a multiplier per unit, a stem bias and a head bias.
    assert count("fixup", depth=56) == base - bns + 27 * 5 + 2
    # LayerScale: full pre-activation (BN per unit stays, the stem BN moves to the head) + β per channel.
    assert count("layerscale", depth=56) == count("preact", depth=56) + 9 * (16 + 32 + 64)


def test_srivastava_highway56_count() -> None:
    # unit="srivastava" at depth 56 = 3·18 + 2: stem conv + BN; 54 layers, each a 3×3 H and a 3×3 T with
    # biases, except the plain (H only) first layers of stages 2 and 3; the classifier.
    def layer(cin: int, cout: int) -> int:
        return cin * cout * 9 + cout

    expected = (3 * 16 * 9 + 2 * 16) + 18 * 2 * layer(16, 16) + layer(16, 32) + 17 * 2 * layer(32, 32)
    expected += layer(32, 64) + 17 * 2 * layer(64, 64) + 64 * 10 + 10
    assert count("highway", depth=56, unit="srivastava") == expected == 1_677_754


@pytest.mark.parametrize("name", ["resnet56", "highway56", "preact_resnet164", "densenet_bc100_k12", "resnet50",
                                  "layerscale", "highway_mlp10", "residual_mlp"])
@pytest.mark.parametrize("init", ["xavier", "normal"])
def test_init_schemes_keep_parameter_counts(name: str, init: str) -> None:
    assert count(name, init=init) == count(name)
