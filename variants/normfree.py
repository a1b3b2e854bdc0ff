"""Norm-free and scaled residual nets on the CIFAR macro-architecture of He et al. 2015 §4.2.

- ``rezero``: Bachlechner et al. 2020, "ReZero is All You Need: Fast Convergence at Large Depth":
  ``y = x + α·F(x)`` with a learnable scalar α = 0 at init and no normalisation; F = conv-ReLU-conv.
- ``skipinit``: De & Smith 2020, "Batch Normalization Biases Residual Blocks Towards the Identity
  Function in Deep Networks": a pre-activation unit with BN removed, ``y = x + α·F(x)``,
  F = ReLU-conv-ReLU-conv, learnable scalar α at the end of the branch, 0 at init.
- ``fixup``: Zhang, Dauphin & Ma 2019, "Fixup Initialization: Residual Learning Without Normalization",
  §3: no normalisation; scalar biases (init 0) before every conv and activation, a scalar multiplier
  (init 1) per branch, the last conv of every branch and the classifier zero-initialised, the other
  branch convs He-initialised and scaled by L^(-1/(2m-2)) (L branches, m convs per branch).
- ``layerscale``: Touvron et al. 2021, "Going deeper with Image Transformers" (CaiT), §3: a per-channel
  scale diag(β) on the branch of a pre-normalised unit (here the full pre-activation unit of He 2016).
  β starts at ε = 0.1 for up to 18 units, 1e-5 up to 24, 1e-6 beyond (CaiT's rule, applied to the
  number of residual units), unless ``init_scale`` is given.

ReZero, SkipInit and Fixup units are the identity at initialisation (Fixup on its non-negative,
post-ReLU inputs); their scalars are ``Scaled`` combinator parameters, so probes read them directly.

Initialisation: these three papers *are* initialisations, so their ``init`` is pinned to the paper's
scheme (``"rezero"``, ``"skipinit"``, ``"fixup"``; :func:`variants.describe` lists it under ``fixed``):
ReZero and SkipInit draw the convs He-normal (fan-out) and start α at ``alpha_init`` = 0; Fixup as above.
LayerScale is an architecture (a per-channel scale whose start ``init_scale`` is its own argument), so
its convs take any scheme of ``variants.layers.INIT_SCHEMES`` (default ``kaiming``).
"""

from __future__ import annotations

import torch
from torch import nn

from .combinators import Scaled
from .layers import (
    EXPANSION,
    ScalarBias,
    Unit,
    build_cifar,
    check_paper_init,
    conv3x3,
    conv_branch,
    make_shortcut,
    unit_count,
)
from .placements import drop_path_rates
from .preact import ORDERS, preact_unit
from .registry import register, register_preset

BACHLECHNER = "Bachlechner et al. 2020, ReZero is All You Need: Fast Convergence at Large Depth"
DE_SMITH = "De & Smith 2020, Batch Normalization Biases Residual Blocks Towards the Identity Function in Deep Networks"
ZHANG = "Zhang, Dauphin & Ma 2019, Fixup Initialization: Residual Learning Without Normalization, §3"
TOUVRON = "Touvron et al. 2021, Going deeper with Image Transformers (CaiT), §3"
AXES = {"combinator": "scaled", "placement": "none", "body": "conv"}


def _norm_free_stem(in_chans: int, width: int) -> nn.Module:
    return nn.Sequential(conv3x3(in_chans, width, bias=True), nn.ReLU())


def _scalar_skip(
    depth: int, num_classes: int, in_chans: int, width: int, block: str, shortcut: str, alpha_init: float,
    drop_path_rate: float, what: str, pre: tuple[str, ...], head_pre: type[nn.Module], init: str, scheme: str,
) -> nn.Module:
    """ReZero / SkipInit: ``shortcut(x) + α·F(x)``, biased convs, no norm; ``pre`` ops start the branch."""
    check_paper_init(init, scheme, what)
    make_shortcut(shortcut, 1, 1, 1)
    rates = drop_path_rates(drop_path_rate, unit_count(depth, block, what))

    def unit(i: int, cin: int, w: int, stride: int) -> nn.Module:
        cout = EXPANSION[block] * w
        body = conv_branch(block, cin, w, stride, pre=pre, between=("relu",), last=(), bias=True)
        return Unit(body, Scaled(alpha=1.0, beta=alpha_init, learnable_beta=True),
                    shortcut=make_shortcut(shortcut, cin, cout, stride, norm=False), drop_path=rates[i])

    return build_cifar(depth, block, width, num_classes, in_chans, unit, what, _norm_free_stem,
                       lambda features: head_pre())


# init=...: the paper is the initialisation, so the registration pins it (create(..., init=other) raises).
@register("rezero", family="normfree", paper=BACHLECHNER, axes=AXES, init="rezero")
def rezero(
    depth: int = 56, num_classes: int = 10, in_chans: int = 3, width: int = 16, block: str = "basic",
    shortcut: str = "A", alpha_init: float = 0.0, drop_path_rate: float = 0.0, init: str = "rezero",
) -> nn.Module:
    """ReZero CIFAR ResNet: ``y = x + α·conv(ReLU(conv(x)))``, α learnable from ``alpha_init`` = 0."""
    return _scalar_skip(depth, num_classes, in_chans, width, block, shortcut, alpha_init, drop_path_rate,
                        "ReZero ResNet", (), nn.Identity, init, "rezero")


@register("skipinit", family="normfree", paper=DE_SMITH, axes=AXES, init="skipinit")
def skipinit(
    depth: int = 56, num_classes: int = 10, in_chans: int = 3, width: int = 16, block: str = "basic",
    shortcut: str = "A", alpha_init: float = 0.0, drop_path_rate: float = 0.0, init: str = "skipinit",
) -> nn.Module:
    """SkipInit: pre-activation units without BN, ``y = x + α·conv(ReLU(conv(ReLU(x))))``, α from 0."""
    return _scalar_skip(depth, num_classes, in_chans, width, block, shortcut, alpha_init, drop_path_rate,
                        "SkipInit ResNet", ("relu",), nn.ReLU, init, "skipinit")


@register("fixup", family="normfree", paper=ZHANG, axes=AXES, init="fixup")
def fixup(
    depth: int = 110, num_classes: int = 10, in_chans: int = 3, width: int = 16, block: str = "basic",
    shortcut: str = "A", drop_path_rate: float = 0.0, init: str = "fixup",
) -> nn.Module:
    """Fixup CIFAR ResNet (post-activation units, ReLU after the join, as in the paper's CIFAR code)."""
    check_paper_init(init, "fixup", "Fixup ResNet")
    make_shortcut(shortcut, 1, 1, 1)
    n_units = unit_count(depth, block, "Fixup ResNet")
    rates = drop_path_rates(drop_path_rate, n_units)
    m = 2 if block == "basic" else 3
    scale = n_units ** (-1.0 / (2 * m - 2))

    def unit(i: int, cin: int, w: int, stride: int) -> nn.Module:
        cout = EXPANSION[block] * w
        # Scalar biases before each conv and each activation. The first one also feeds the shortcut
        # where that subsamples/projects, but never an identity shortcut: Zhang et al.'s code adds
        # bias1a to x only on the branch and in `downsample(x + bias1a)`.
        projects = stride != 1 or cin != cout or shortcut == "C"
        pre = () if projects else ("bias",)
        body = conv_branch(block, cin, w, stride, pre=pre, between=("bias", "relu", "bias"), last=("bias",))
        convs = [c for c in body if isinstance(c, nn.Conv2d)]
        with torch.no_grad():
            for conv in convs[:-1]:
                conv.weight.mul_(scale)  # already He-initialised by conv_branch
            convs[-1].weight.zero_()
        # The multiplier is a Scaled parameter (init 1); Fixup puts the last bias after it, we put it
        # before, a reparametrisation of the same function class that is identical at init.
        return Unit(body, Scaled(alpha=1.0, beta=1.0, learnable_beta=True),
                    shared=ScalarBias() if projects else None,
                    shortcut=make_shortcut(shortcut, cin, cout, stride, norm=False), post=nn.ReLU(),
                    drop_path=rates[i])

    def stem(cin: int, w: int) -> nn.Module:
        return nn.Sequential(conv3x3(cin, w), ScalarBias(), nn.ReLU())

    net = build_cifar(depth, block, width, num_classes, in_chans, unit, "Fixup ResNet", stem, lambda f: ScalarBias())
    classifier = net.head[-1]
    assert isinstance(classifier, nn.Linear)
    nn.init.zeros_(classifier.weight)
    nn.init.zeros_(classifier.bias)
    return net


def cait_init(n_units: int) -> float:
    """CaiT §3's LayerScale init ε by depth: 0.1 up to 18, 1e-5 up to 24, 1e-6 deeper."""
    return 0.1 if n_units <= 18 else 1e-5 if n_units <= 24 else 1e-6


@register("layerscale", family="normfree", paper=TOUVRON,
          axes={"combinator": "scaled", "placement": "pre", "body": "conv"})
def layerscale(
    depth: int = 56, num_classes: int = 10, in_chans: int = 3, width: int = 16, block: str = "basic",
    shortcut: str = "A", init_scale: float | None = None, drop_path_rate: float = 0.0, init: str = "kaiming",
) -> nn.Module:
    """Full pre-activation units with per-channel ``β`` on the branch; ``init_scale`` None = CaiT's rule.

    ``init`` draws the convs and the classifier (``variants.layers.INIT_SCHEMES``); β keeps ``init_scale``."""
    make_shortcut(shortcut, 1, 1, 1)
    n_units = unit_count(depth, block, "LayerScale ResNet")
    rates = drop_path_rates(drop_path_rate, n_units)
    eps = cait_init(n_units) if init_scale is None else float(init_scale)
    order = ORDERS["full_preact"]

    def unit(i: int, cin: int, w: int, stride: int) -> nn.Module:
        cout = EXPANSION[block] * w
        combine = Scaled(alpha=1.0, beta=eps, learnable_beta=True, beta_shape=(cout,), channel_dim=1)
        return preact_unit(order, block, cin, w, stride, shortcut, first=i == 0, drop_path=rates[i], combine=combine)

    def stem(cin: int, w: int) -> nn.Module:
        return conv3x3(cin, w)

    def head(features: int) -> nn.Module:
        return nn.Sequential(nn.BatchNorm2d(features), nn.ReLU())

    return build_cifar(depth, block, width, num_classes, in_chans, unit, "LayerScale ResNet", stem, head, init)


register_preset("rezero_resnet56", "rezero", depth=56, paper=f"{BACHLECHNER} (CIFAR-10 ResNet-56)")
register_preset("fixup_resnet110", "fixup", depth=110, paper=f"{ZHANG} (CIFAR-10 ResNet-110)")
