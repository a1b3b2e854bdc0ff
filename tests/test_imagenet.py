"""ImageNet ResNets (variants.imagenet) against torchvision's implementation."""

from __future__ import annotations

import math

import pytest
import torch
import torchvision
from torch import nn

import variants
from variants.blocks import ResidualUnit

NAMES = variants.list_variants(family="resnet_imagenet")



def test_presets_registered() -> None:
    assert {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnet_imagenet"} <= set(NAMES)


@pytest.mark.parametrize("depth", [18, 34, 50, 101, 152])
def test_same_parameter_shapes_as_torchvision(depth: int) -> None:
    with torch.device("meta"):
        ours = variants.create(f"resnet{depth}")
        ref = getattr(torchvision.models, f"resnet{depth}")(weights=None)
    assert [t.shape for t in ours.state_dict().values()] == [t.shape for t in ref.state_dict().values()]


@pytest.mark.parametrize(("depth", "zero_init"), [(18, False), (50, False), (50, True)])
def test_identical_outputs_with_torchvision_weights(depth: int, zero_init: bool) -> None:
    torch.manual_seed(0)
    ref = getattr(torchvision.models, f"resnet{depth}")(weights=None, zero_init_residual=zero_init).eval()
    ours = variants.create(f"resnet{depth}", zero_init_residual=zero_init).eval()
    # Key mapping: both modules register their tensors in the same order (stem, units, projection, fc).
    ours.load_state_dict(dict(zip(ours.state_dict(), ref.state_dict().values(), strict=True)))
    x = torch.randn(2, 3, 40, 40)
    with torch.no_grad():
        assert torch.allclose(ours(x), ref(x), atol=1e-5)


def test_zero_init_residual_zeroes_last_bn_of_every_branch() -> None:
    for name in ("resnet18", "resnet50"):
        model = variants.create(name, zero_init_residual=True)
        branch_ends = [u.body[-1] for u in model.modules() if isinstance(u, ResidualUnit)]
        assert all(isinstance(bn, nn.BatchNorm2d) and torch.all(bn.weight == 0) for bn in branch_ends)
        default = variants.create(name)
        assert all(torch.all(u.body[-1].weight == 1) for u in default.modules() if isinstance(u, ResidualUnit))


def test_stride_on_bottleneck_3x3() -> None:
    model = variants.create("resnet50")
    first_of_stage2 = model.stages[1][0]
    convs = [m for m in first_of_stage2.body if isinstance(m, nn.Conv2d)]
    assert [c.stride for c in convs] == [(1, 1), (2, 2), (1, 1)]


def test_in_chans_num_classes_width() -> None:
    model = variants.create("resnet18", in_chans=1, num_classes=5)
    assert model.stem[0].in_channels == 1
    assert model(torch.randn(2, 1, 32, 32)).shape == (2, 5)
    slim = variants.create("resnet_imagenet", depth=18, width=8, num_classes=3)
    assert slim.head[-1].in_features == 64
    assert slim(torch.randn(2, 3, 32, 32)).shape == (2, 3)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"depth": 20}, r"ImageNet ResNet depth must be one of \(18, 34, 50, 101, 152\).*got 20"),
        ({"depth": True}, "ImageNet ResNet depth must be one of"),
        ({"num_classes": 0}, "num_classes must be a positive integer"),
        ({"in_chans": 0}, "in_chans must be a positive integer"),
        ({"drop_path_rate": 2.0}, r"drop_path_rate must be in \[0, 1\)"),
        ({"init": "Kaiming"}, "unknown init 'Kaiming'; choose one of: kaiming, xavier, normal"),
    ],
)
def test_invalid_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        variants.create("resnet_imagenet", **kwargs)


def test_drop_path_linear_decay_and_eval_determinism() -> None:
    torch.manual_seed(0)
    model = variants.create("resnet18", drop_path_rate=0.2, width=8)
    units = [u for u in model.modules() if isinstance(u, ResidualUnit)]
    assert [u.drop_path.drop_prob for u in units] == pytest.approx([0.2 * (i + 1) / 8 for i in range(8)])
    x = torch.randn(2, 3, 32, 32)
    model.eval()
    assert torch.equal(model(x), model(x))


def test_init_schemes_draw_weights_and_keep_zero_init_residual() -> None:
    torch.manual_seed(0)
    model = variants.create("resnet18", init="xavier", zero_init_residual=True)
    stem = model.stem[0]  # 3 -> 64, 7×7: fan-in 147, fan-out 3136
    assert stem.weight.std().item() == pytest.approx(math.sqrt(2 / (147 + 3136)), rel=0.03)
    branch_ends = [u.body[-1] for u in model.modules() if isinstance(u, ResidualUnit)]
    assert all(torch.all(bn.weight == 0) for bn in branch_ends)  # schemes draw weights, never BN
    torch.manual_seed(0)
    default = variants.create("resnet18")
    assert default.stem[0].weight.std().item() == pytest.approx(math.sqrt(2 / 3136), rel=0.03)  # He fan-out
