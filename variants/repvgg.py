"""RepVGG: residual while it trains, a plain stack of 3×3 convolutions when it runs.

Ding, Zhang, Ma, Han, Ding & Sun 2021, "RepVGG: Making VGG-style ConvNets Great Again" (CVPR 2021, arXiv 2101.03697),
§3: a training-time unit ``y = ReLU(BN(x) + BN(W₃ * x) + BN(W₁ * x))`` (the identity branch only where input and
output shapes agree, Fig. 2) that :func:`fuse` turns, exactly, into one 3×3 convolution with a bias and a ReLU
(§3.3: each BN folded into its kernel, the 1×1 kernel and the identity padded to 3×3, the three summed). So the same
function is a residual net for optimisation and a plain VGG for inference: the cleanest probe of whether the
shortcut is needed for what a net can represent or for how it trains (the ``repvgg_plain`` preset trains the
3×3 branch alone, the paper's Table 6 ablation).

- ``repvgg_imagenet`` (presets ``repvgg_a0``, ``repvgg_a1``, ``repvgg_a2``, ``repvgg_b0``): the paper's ImageNet nets
  (§3.4, Table 2: a stride-2 RepVGG unit as the stem, four stages whose first unit has stride 2, average pool,
  linear), layer for layer timm's ``repvgg_*`` (same parameter counts).
- ``repvgg_cifar``: the unit on He et al. 2015's CIFAR stages (a 3×3 stem conv with BN and ReLU, stride 2 where a
  stage starts, width 16/32/64), one 3×3 layer a unit: depth 3n + 2. ``branches`` picks the training-time branches
  (Table 6: ``"3x3"``, ``"3x3+1x1"``, ``"3x3+id"``, ``"3x3+1x1+id"``, the default).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from .blocks import PostActivation, ResidualUnit
from .checks import check_positive, choice, positive_int
from .combinators import Add, NoShortcut
from .layers import CifarSpec, InitArg, Slot, build_cifar, check_init, conv1x1, conv3x3, init_weights_
from .registry import register, register_preset

REPVGG_PAPER = "Ding et al. 2021, RepVGG: Making VGG-style ConvNets Great Again (CVPR 2021, arXiv 2101.03697), §3"
BRANCHES = ("3x3+1x1+id", "3x3+1x1", "3x3+id", "3x3")
# ImageNet configurations (Table 2): units per stage (the stem unit apart), base widths times (a, a, a, b).
IMAGENET: dict[str, tuple[tuple[int, ...], tuple[float, float]]] = {
    "a0": ((2, 4, 14, 1), (0.75, 2.5)), "a1": ((2, 4, 14, 1), (1.0, 2.5)), "a2": ((2, 4, 14, 1), (1.5, 2.75)),
    "b0": ((4, 6, 16, 1), (1.0, 2.5)),
}


class ConvBN(nn.Sequential):
    """``BN(W * x)``: a bias-free convolution and its BN, one branch of a RepVGG unit."""

    def __init__(self, conv: nn.Conv2d) -> None:
        super().__init__(conv, nn.BatchNorm2d(conv.out_channels))


class RepBranches(nn.Module):
    """``F(x) = BN(W₃ * x) + BN(W₁ * x)``: the convolutional branches of a training-time RepVGG unit (the 1×1 one
    where asked for)."""

    def __init__(self, cin: int, cout: int, stride: int, one_by_one: bool) -> None:
        super().__init__()
        self.conv3 = ConvBN(conv3x3(cin, cout, stride))
        self.conv1 = ConvBN(conv1x1(cin, cout, stride)) if one_by_one else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv3(x)
        return y if self.conv1 is None else y + self.conv1(x)


class RepVGGUnit(PostActivation):
    """``y = ReLU(BN(x) + BN(W₃ * x) + BN(W₁ * x))``: Ding et al. 2021, eq. 3 / Fig. 2 (training time); the identity
    branch ``BN(x)`` (the shortcut) only where the shape is kept, else ``y = ReLU(BN(W₃ * x) + BN(W₁ * x))``."""

    def __init__(self, cin: int, cout: int, stride: int, *, branches: str = BRANCHES[0]) -> None:
        identity = "id" in branches and cin == cout and stride == 1
        super().__init__(RepBranches(cin, cout, stride, "1x1" in branches), Add() if identity else NoShortcut(),
                         nn.ReLU(), shortcut=nn.BatchNorm2d(cin) if identity else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.combine(self.shortcut(x), self.body(x)))


def _fold(weight: torch.Tensor, bn: nn.BatchNorm2d) -> tuple[torch.Tensor, torch.Tensor]:
    """A kernel and its BN (eval statistics) as one kernel and bias: ``γ/σ·W`` and ``β − γ·μ/σ``."""
    assert bn.running_var is not None and bn.running_mean is not None and bn.weight is not None
    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    return weight * scale.view(-1, 1, 1, 1), bn.bias - bn.running_mean * scale


class FusedRepVGG(ResidualUnit):
    """``y = ReLU(W * x + b)``: a RepVGG unit after re-parameterisation (§3.3), one 3×3 convolution, no shortcut."""

    def __init__(self, conv: nn.Conv2d) -> None:
        super().__init__(conv, NoShortcut())
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.combine(x, self.body(x)))


@torch.no_grad()
def fuse_unit(unit: RepVGGUnit) -> FusedRepVGG:
    """§3.3: each branch's BN folded into its kernel (eval statistics), the 1×1 kernel zero-padded to 3×3, the
    identity as a 3×3 kernel with 1 at the centre of its own channel; their sum is the one conv."""
    body = unit.body
    assert isinstance(body, RepBranches)
    conv3, bn3 = cast(nn.Conv2d, body.conv3[0]), cast(nn.BatchNorm2d, body.conv3[1])
    kernel, bias = _fold(conv3.weight, bn3)
    if body.conv1 is not None:
        conv1, bn1 = cast(nn.Conv2d, body.conv1[0]), cast(nn.BatchNorm2d, body.conv1[1])
        k1, b1 = _fold(conv1.weight, bn1)
        kernel, bias = kernel + F.pad(k1, (1, 1, 1, 1)), bias + b1
    if isinstance(unit.shortcut, nn.BatchNorm2d):
        ident = torch.zeros_like(kernel)
        ident[torch.arange(kernel.shape[0]), torch.arange(kernel.shape[0]), 1, 1] = 1.0
        ki, bi = _fold(ident, unit.shortcut)
        kernel, bias = kernel + ki, bias + bi
    conv = nn.Conv2d(conv3.in_channels, conv3.out_channels, 3, stride=cast(tuple[int, int], conv3.stride), padding=1,
                     bias=True)
    conv = conv.to(kernel.device, kernel.dtype)
    conv.weight.copy_(kernel)
    cast(torch.Tensor, conv.bias).copy_(bias)
    return FusedRepVGG(conv)


def fuse(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every :class:`RepVGGUnit` re-parameterised into a :class:`FusedRepVGG` (plain 3×3
    convolutions): the same function in eval mode (BN statistics frozen), a plain net by construction."""
    fused = copy.deepcopy(model).eval()

    def swap(module: nn.Module) -> None:
        for name, child in module.named_children():
            if isinstance(child, RepVGGUnit):
                setattr(module, name, fuse_unit(child))
            else:
                swap(child)

    swap(fused)
    return fused


class RepVGG(nn.Module):
    """``stem -> stages -> head``: the ImageNet RepVGG (a stride-2 unit as the stem; average pool, linear)."""

    def __init__(self, depths: Sequence[int], widths: Sequence[int], stem: int, num_classes: int, in_chans: int,
                 branches: str) -> None:
        super().__init__()
        self.stem = RepVGGUnit(in_chans, stem, 2, branches=branches)
        stages, cin = [], stem
        for n, width in zip(depths, widths, strict=True):
            stages.append(nn.Sequential(*(RepVGGUnit(cin if i == 0 else width, width, 2 if i == 0 else 1,
                                                     branches=branches) for i in range(n))))
            cin = width
        self.stages = nn.Sequential(*stages)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stages(self.stem(x)))


def imagenet_widths(multipliers: tuple[float, float]) -> tuple[list[int], int]:
    """Table 2: widths 64a, 128a, 256a, 512b; the stem min(64, 64a)."""
    a, b = multipliers
    return [int(64 * a), int(128 * a), int(256 * a), int(512 * b)], min(64, int(64 * a))


@register("repvgg_imagenet", family="repvgg", paper=f"{REPVGG_PAPER}.4, Table 2 (RepVGG-A/B)")
def repvgg_imagenet(*, depths: tuple[int, ...] = IMAGENET["a0"][0], multipliers: tuple[float, float] = (0.75, 2.5),
                    num_classes: int = 1000, in_chans: int = 3, branches: str = BRANCHES[0],
                    init: InitArg = "kaiming") -> nn.Module:
    """The ImageNet RepVGG with ``depths`` units per stage and width multipliers (a, b) (RepVGG-A0 by default);
    ``init`` a scheme of ``variants.layers.INIT_SCHEMES`` (``kaiming``: the convs' He-normal fan-out draw)."""
    if not isinstance(depths, (tuple, list)) or len(depths) != 4:
        raise ValueError(f"depths must give the units of the 4 stages, got {depths!r}")
    for d in depths:
        positive_int("depths", d)
    if not (isinstance(multipliers, (tuple, list)) and len(multipliers) == 2
            and all(isinstance(m, (int, float)) and not isinstance(m, bool) and m > 0 for m in multipliers)):
        raise ValueError(f"multipliers must be two positive numbers (a, b), got {multipliers!r}")
    check_positive(num_classes=num_classes, in_chans=in_chans)
    choice("branches", branches, BRANCHES, "Ding et al. 2021, Table 6")
    check_init(init)
    widths, stem = imagenet_widths((float(multipliers[0]), float(multipliers[1])))
    return init_weights_(RepVGG(tuple(depths), widths, stem, num_classes, in_chans, branches), init)


for _name, (_depths, _mult) in IMAGENET.items():
    register_preset(f"repvgg_{_name}", "repvgg_imagenet", depths=_depths, multipliers=_mult,
                    paper=f"{REPVGG_PAPER}.4, Table 2 (RepVGG-{_name.upper()}, timm repvgg_{_name})")


def repvgg_units(depth: int) -> int:
    """Units per stage of a CIFAR RepVGG: depth = 3n + 2 (one 3×3 layer a unit, the stem, the classifier)."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 5 or (depth - 2) % 3:
        raise ValueError(f"CIFAR RepVGG depth must be 3n+2 with n >= 1, e.g. 20, 32, 56, 110, got {depth!r}")
    return (depth - 2) // 3


@register("repvgg_cifar", family="repvgg", paper=f"{REPVGG_PAPER}; its unit on He et al. 2015's CIFAR stages",
          spec=CifarSpec(depth=56))
def repvgg_cifar(spec: CifarSpec, *, branches: str = BRANCHES[0]) -> nn.Module:
    """:class:`RepVGGUnit` units on the CIFAR stages, with the training-time ``branches`` (Table 6);
    :func:`fuse` gives the plain net it deploys as."""
    choice("branches", branches, BRANCHES, "Ding et al. 2021, Table 6")
    if (spec.block, spec.shortcut) != ("basic", "A") or spec.drop_path_rate:
        raise ValueError("a RepVGG unit is one 3x3 layer with its own identity branch: block, shortcut and "
                         f"drop_path_rate must keep their defaults, got block={spec.block!r}, "
                         f"shortcut={spec.shortcut!r}, drop_path_rate={spec.drop_path_rate}")

    def unit(s: Slot) -> nn.Module:
        return RepVGGUnit(s.cin, s.width, s.stride, branches=branches)

    return build_cifar(spec, unit, what="CIFAR RepVGG", n=repvgg_units(spec.depth))


register_preset("repvgg_plain", "repvgg_cifar", branches="3x3",
                paper=f"{REPVGG_PAPER}, Table 6 (the 3x3 branch alone: a plain VGG), CIFAR stages")
