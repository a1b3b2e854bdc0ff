"""ConvNeXt: a ResNet modernised towards the Transformer, its residual unit ``x + γ ⊙ PW₂(GELU(PW₁(LN(DW₇ₓ₇(x)))))``.

Liu, Mao, Wu, Feichtenhofer, Darrell & Xie 2022, "A ConvNet for the 2020s" (CVPR 2022, arXiv 2201.03545), §2 and
Fig. 4: a 7×7 depthwise convolution, one LayerNorm, an inverted bottleneck of two pointwise layers (4× wider) with a
GELU between them, and a per-channel layer scale γ (Touvron et al. 2021's LayerScale, γ₀ = 1e-6) on the branch; the
identity shortcut; no activation or norm after the join. Stages are joined by separate downsampling layers (LN, then
a 2×2 convolution of stride 2); the stem is a 4×4 "patchify" convolution of stride 4 and an LN; the head pools,
normalises and classifies. Weights are drawn N(0, 0.02) truncated at ±2σ, biases 0 (the paper's, via timm).

- ``convnext_imagenet`` (presets ``convnext_t``, ``convnext_s``, ``convnext_b``): the paper's ImageNet nets, layer for
  layer timm's (``convnext_tiny`` ... : the same parameter count, and timm's weights load with their names mapped).
- ``convnext_cifar``: the unit on He et al. 2015's CIFAR macro-architecture (``variants.layers.build_cifar``): its
  3×3 stem, three stages at widths w, 2w, 4w and the stride-2 stage starts, where a ConvNeXt downsampling layer (LN,
  2×2 convolution) precedes the stage's first unit; depth 9n + 2 (a unit holds three weighted layers, as a
  bottleneck); the ConvNeXt head. ``plain=True`` removes the shortcut and the layer scale with it (``y = F(x)``:
  γ₀ = 1e-6 without a shortcut would silence the net).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from timm.layers import trunc_normal_
from torch import nn

from . import init_marks
from .blocks import ResidualUnit
from .checks import check_positive, flag, positive_int, real
from .combinators import Combinator, NoShortcut, Scaled
from .layers import (
    DRAWN_LATER,
    CifarSpec,
    InitArg,
    ModuleT,
    Slot,
    build_cifar,
    check_init,
    drop_path_rates,
    init_weights_,
)
from .registry import register, register_preset

CONVNEXT_PAPER = "Liu et al. 2022, A ConvNet for the 2020s (CVPR 2022, arXiv 2201.03545), Fig. 4"
LS_INIT = 1e-6  # γ₀ of the layer scale
LN_EPS = 1e-6  # ConvNeXt's LayerNorm epsilon
# ImageNet configurations (Liu et al. 2022, §3): blocks per stage and widths.
CONFIGS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "t": ((3, 3, 9, 3), (96, 192, 384, 768)),
    "s": ((3, 3, 27, 3), (96, 192, 384, 768)),
    "b": ((3, 3, 27, 3), (128, 256, 512, 1024)),
}


class LayerNorm2d(nn.LayerNorm):
    """``y[n, :, h, w] = LN(x[n, :, h, w])``: LayerNorm over the channels of an NCHW tensor, each position on its own
    (ConvNeXt, Liu et al. 2022, §2.6)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBranch(nn.Module):
    """``F(x) = PW₂(GELU(PW₁(LN(DW₇ₓ₇(x)))))``: ConvNeXt's branch; the pointwise layers are linear maps of each
    position's channels (timm's layout: ``fc1`` C -> 4C, ``fc2`` 4C -> C)."""

    def __init__(self, channels: int, kernel: int = 7, mlp_ratio: int = 4) -> None:
        super().__init__()
        self.conv_dw = nn.Conv2d(channels, channels, kernel, padding=kernel // 2, groups=channels)
        self.norm = nn.LayerNorm(channels, eps=LN_EPS)
        self.fc1 = nn.Linear(channels, mlp_ratio * channels)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(mlp_ratio * channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv_dw(x).permute(0, 2, 3, 1)  # NHWC: the norm and the pointwise layers act on channels
        return self.fc2(self.act(self.fc1(self.norm(y)))).permute(0, 3, 1, 2)


class ConvNeXtUnit(ResidualUnit):
    """``y = x + γ ⊙ PW₂(GELU(PW₁(LN(DW₇ₓ₇(d(x))))))`` with ``d`` the stage's downsampling layer where one starts
    (else the identity): Liu et al. 2022, Fig. 4. The join is a :class:`~variants.combinators.Scaled` whose
    per-channel β is γ (the layer scale), or ``NoShortcut`` in the plain net."""

    def __init__(self, channels: int, combine: Combinator, *, down: nn.Module | None = None,
                 drop_path: float = 0.0) -> None:
        super().__init__(ConvNeXtBranch(channels), combine, drop_path=drop_path)
        self.down = down if down is not None else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.down(x)
        return self.combine(x, self.drop_path(self.body(x)))


def layer_scale(channels: int, init: float = LS_INIT) -> Scaled:
    """``y = x + γ ⊙ F(x)``: the join of a ConvNeXt unit, γ per channel starting at ``init``."""
    return Scaled(alpha=1.0, beta=init, learnable_beta=True, beta_shape=(channels,), channel_dim=1)


def downsample(cin: int, cout: int) -> nn.Sequential:
    """ConvNeXt's downsampling layer between stages: LN, then a 2×2 convolution of stride 2."""
    return nn.Sequential(LayerNorm2d(cin, eps=LN_EPS), nn.Conv2d(cin, cout, 2, stride=2))


def draw(model: ModuleT, init: InitArg) -> ModuleT:
    """Biases 0 and every conv/linear weight drawn by ``init``: ``trunc_normal`` (the paper's), ``kaiming``
    (He-normal fan-out, He et al. 2015's, explicit here since the constructors draw PyTorch's default) or any scheme of
    ``variants.layers.INIT_SCHEMES``."""
    convnext_init_(model)
    if init == "kaiming" and not any(p.is_meta for p in model.parameters()):
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                init_marks.drawn(m, "he_fan_out")
    return init_weights_(model, init)


def convnext_init_(model: nn.Module) -> nn.Module:
    """The paper's draw: every convolution and linear weight N(0, 0.02) truncated at ±2σ (timm's ``trunc_normal_``),
    biases 0. Nothing to draw on the meta device."""
    if any(p.is_meta for p in model.parameters()):
        return model
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            trunc_normal_(m.weight, std=0.02, a=-0.04, b=0.04)  # timm's: one draw a tensor (layers.INIT_SCHEMES)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    return model


class ConvNeXt(nn.Module):
    """``stem -> stages -> head``: the ImageNet ConvNeXt (stem conv 4×4/4 + LN; per stage a downsampling layer but in
    the first, then its units; head: global average pool, LN, linear)."""

    def __init__(self, depths: Sequence[int], dims: Sequence[int], num_classes: int, in_chans: int,
                 drop_path_rate: float, ls_init: float) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_chans, dims[0], 4, stride=4), LayerNorm2d(dims[0], eps=LN_EPS))
        rates = iter(drop_path_rates(drop_path_rate, sum(depths)))
        stages = []
        for s, (n, dim) in enumerate(zip(depths, dims, strict=True)):
            units = [ConvNeXtUnit(dim, layer_scale(dim, ls_init), down=downsample(dims[s - 1], dim) if s and not i
                                  else None, drop_path=next(rates)) for i in range(n)]
            stages.append(nn.Sequential(*units))
        self.stages = nn.Sequential(*stages)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.LayerNorm(dims[-1], eps=LN_EPS),
                                  nn.Linear(dims[-1], num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stages(self.stem(x)))


@register("convnext_imagenet", family="convnext", paper=f"{CONVNEXT_PAPER}; §3 (ConvNeXt-T/S/B)")
def convnext_imagenet(*, depths: tuple[int, ...] = CONFIGS["t"][0], dims: tuple[int, ...] = CONFIGS["t"][1],
                      num_classes: int = 1000, in_chans: int = 3, drop_path_rate: float = 0.0,
                      ls_init: float = LS_INIT, init: InitArg = "trunc_normal") -> nn.Module:
    """The ImageNet ConvNeXt of ``depths`` units per stage at widths ``dims`` (default ConvNeXt-T); ``init`` as
    :func:`convnext_cifar`'s."""
    if not (isinstance(depths, (tuple, list)) and isinstance(dims, (tuple, list)) and len(depths) == len(dims)
            and depths):
        raise ValueError(f"depths and dims must be sequences of one entry per stage, got depths={depths!r}, "
                         f"dims={dims!r}")
    for key, values in (("depths", depths), ("dims", dims)):
        for v in values:
            positive_int(key, v)
    check_positive(num_classes=num_classes, in_chans=in_chans)
    real("ls_init", ls_init)
    check_init(init)
    return draw(ConvNeXt(tuple(depths), tuple(dims), num_classes, in_chans, drop_path_rate, ls_init), init)


for _size, (_depths, _dims) in CONFIGS.items():
    register_preset(f"convnext_{_size}", "convnext_imagenet", depths=_depths, dims=_dims,
                    paper=f"{CONVNEXT_PAPER}; §3 (ConvNeXt-{_size.upper()}, timm convnext_"
                          f"{dict(t='tiny', s='small', b='base')[_size]})")


def convnext_units(depth: int) -> int:
    """Units per stage of a CIFAR ConvNeXt: depth = 9n + 2 (three weighted layers a unit, the stem, the classifier)."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 11 or (depth - 2) % 9:
        raise ValueError(f"CIFAR ConvNeXt depth must be 9n+2 with n >= 1, e.g. 11, 20, 29, 56, 110, got {depth!r}")
    return (depth - 2) // 9


@register("convnext_cifar", family="convnext", paper=f"{CONVNEXT_PAPER}; on He et al. 2015's CIFAR stages (§4.2)",
          spec=CifarSpec(depth=56, init="trunc_normal"))
def convnext_cifar(spec: CifarSpec, *, plain: bool = False, ls_init: float = LS_INIT) -> nn.Module:
    """:class:`ConvNeXtUnit` units on the CIFAR stages (a downsampling layer where a stage starts); ``plain``: no
    shortcut and no layer scale; ``init`` (``trunc_normal`` by default, the paper's; ``kaiming``: He-normal fan-out)
    draws every conv and linear weight, biases 0."""
    flag("plain", plain)
    real("ls_init", ls_init)
    if (spec.block, spec.shortcut) != ("basic", "A"):
        raise ValueError("a ConvNeXt unit has its own branch and its own downsampling layer: block and shortcut must "
                         f"keep their defaults, got block={spec.block!r}, shortcut={spec.shortcut!r}")
    n = convnext_units(spec.depth)

    def unit(s: Slot) -> nn.Module:
        down = downsample(s.cin, s.width) if s.stride != 1 or s.cin != s.width else None
        join: Combinator = NoShortcut() if plain else layer_scale(s.width, ls_init)
        return ConvNeXtUnit(s.width, join, down=down, drop_path=0.0 if plain else s.drop_path)

    def stem(cin: int, w: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(cin, w, 3, padding=1), LayerNorm2d(w, eps=LN_EPS))

    net = build_cifar(spec, unit, what="CIFAR ConvNeXt", stem=stem, n=n, init=DRAWN_LATER)
    features = 4 * spec.width
    classifier = net.head[-1]
    net.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.LayerNorm(features, eps=LN_EPS), classifier)
    return draw(net, spec.init)


register_preset("convnext_cifar_plain", "convnext_cifar", plain=True,
                paper=f"{CONVNEXT_PAPER}; its unit without the shortcut (and layer scale), CIFAR stages")
