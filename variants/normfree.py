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

from .blocks import PREACT, PostActivation, ResidualUnit
from .checks import real
from .combinators import Scaled
from .layers import (
    CifarSpec,
    ScalarBias,
    Slot,
    build_cifar,
    check_paper_init,
    conv3x3,
    conv_branch,
    make_shortcut,
    unit_count,
)
from .registry import register, register_preset

BACHLECHNER = "Bachlechner et al. 2020, ReZero is All You Need: Fast Convergence at Large Depth"
DE_SMITH = "De & Smith 2020, Batch Normalization Biases Residual Blocks Towards the Identity Function in Deep Networks"
ZHANG = "Zhang, Dauphin & Ma 2019, Fixup Initialization: Residual Learning Without Normalization, §3"
TOUVRON = "Touvron et al. 2021, Going deeper with Image Transformers (CaiT), §3"


def _norm_free_stem(in_chans: int, width: int) -> nn.Module:
    return nn.Sequential(conv3x3(in_chans, width, bias=True), nn.ReLU())


def _scalar_skip(spec: CifarSpec, alpha_init: float, what: str, pre: tuple[str, ...], head_pre: type[nn.Module],
                 scheme: str) -> nn.Module:
    """ReZero / SkipInit units, ``y = shortcut(x) + α·F(x)`` (a :class:`~variants.blocks.ResidualUnit` joined by a
    learnable ``Scaled`` β = α): biased convs, no norm; ``pre`` ops start the branch."""
    check_paper_init(spec.init, scheme, what)

    def unit(s: Slot) -> nn.Module:
        body = conv_branch(spec.block, s.cin, s.width, s.stride, pre=pre, between=("relu",), last=(), bias=True)
        cout = spec.expansion * s.width
        return ResidualUnit(body, Scaled(alpha=1.0, beta=alpha_init, learnable_beta=True),
                            shortcut=make_shortcut(spec.shortcut, s.cin, cout, s.stride, norm=False),
                            drop_path=s.drop_path)

    return build_cifar(spec, unit, what=what, stem=_norm_free_stem, head_pre=lambda features: head_pre(),
                       init="kaiming")


# init=...: the paper is the initialisation, so the registration pins it (create(..., init=other) raises).
@register("rezero", family="normfree", paper=BACHLECHNER, spec=CifarSpec(depth=56, init="rezero"), init="rezero")
def rezero(spec: CifarSpec, *, alpha_init: float = 0.0) -> nn.Module:
    """ReZero CIFAR ResNet: ``y = x + α·conv(ReLU(conv(x)))``, α learnable from ``alpha_init`` = 0."""
    real("alpha_init", alpha_init)
    return _scalar_skip(spec, alpha_init, "ReZero ResNet", (), nn.Identity, "rezero")


@register("skipinit", family="normfree", paper=DE_SMITH, spec=CifarSpec(depth=56, init="skipinit"), init="skipinit")
def skipinit(spec: CifarSpec, *, alpha_init: float = 0.0) -> nn.Module:
    """SkipInit: pre-activation units without BN, ``y = x + α·conv(ReLU(conv(ReLU(x))))``, α from 0."""
    real("alpha_init", alpha_init)
    return _scalar_skip(spec, alpha_init, "SkipInit ResNet", ("relu",), nn.ReLU, "skipinit")


class FixupUnit(PostActivation):
    """Zhang et al. 2019, Fixup: ``y = ReLU(shortcut(x) + m·(b₄ + W₂·(b₃ + ReLU(b₂ + W₁·(b₁ + x)))))``.

    The scalar biases b (init 0) sit before every convolution and activation, the multiplier m (init 1) is a
    learnable ``Scaled`` β, no norm anywhere. Where the shortcut subsamples or projects it also reads
    ``b₁ + x`` (``shared``), never an identity shortcut: the authors' code adds ``bias1a`` to x only on the
    branch and in ``downsample(x + bias1a)``. (Fixup puts b₄ after m, we put it before: a reparametrisation
    of the same function class, identical at init.)
    """

    def __init__(self, slot: Slot, block: str, shortcut: str, scale: float) -> None:
        cout = (4 if block == "bottleneck" else 1) * slot.width
        projects = slot.stride != 1 or slot.cin != cout or shortcut == "C"
        body = conv_branch(block, slot.cin, slot.width, slot.stride, pre=() if projects else ("bias",),
                           between=("bias", "relu", "bias"), last=("bias",))
        convs = [c for c in body if isinstance(c, nn.Conv2d)]
        with torch.no_grad():
            for conv in convs[:-1]:
                conv.weight.mul_(scale)  # He-initialised by conv_branch, scaled by L^(-1/(2m-2))
            convs[-1].weight.zero_()
        super().__init__(body, Scaled(alpha=1.0, beta=1.0, learnable_beta=True), nn.ReLU(),
                         shortcut=make_shortcut(shortcut, slot.cin, cout, slot.stride, norm=False),
                         drop_path=slot.drop_path)
        self.shared = ScalarBias() if projects else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.shared(x)
        return self.act(self.combine(self.shortcut(x), self.drop_path(self.body(x))))


@register("fixup", family="normfree", paper=ZHANG, spec=CifarSpec(depth=110, init="fixup"), init="fixup")
def fixup(spec: CifarSpec) -> nn.Module:
    """Fixup CIFAR ResNet of :class:`FixupUnit` (post-activation units, ReLU after the join, as in the paper's
    CIFAR code); the classifier starts at zero."""
    check_paper_init(spec.init, "fixup", "Fixup ResNet")
    n_units = unit_count(spec.depth, spec.block, "Fixup ResNet")
    scale = n_units ** (-1.0 / (2 * (2 if spec.block == "basic" else 3) - 2))  # m convs per branch

    def stem(cin: int, w: int) -> nn.Module:
        return nn.Sequential(conv3x3(cin, w), ScalarBias(), nn.ReLU())

    net = build_cifar(spec, lambda s: FixupUnit(s, spec.block, spec.shortcut, scale), what="Fixup ResNet",
                      stem=stem, head_pre=lambda f: ScalarBias(), init="kaiming")
    classifier = net.head[-1]
    assert isinstance(classifier, nn.Linear)
    nn.init.zeros_(classifier.weight)
    nn.init.zeros_(classifier.bias)
    return net


def cait_init(n_units: int) -> float:
    """CaiT §3's LayerScale init ε by depth: 0.1 up to 18, 1e-5 up to 24, 1e-6 deeper."""
    return 0.1 if n_units <= 18 else 1e-5 if n_units <= 24 else 1e-6


@register("layerscale", family="normfree", paper=TOUVRON, spec=CifarSpec(depth=56))
def layerscale(spec: CifarSpec, *, init_scale: float | None = None) -> nn.Module:
    """:class:`~variants.blocks.PreActBasic` units with a per-channel ``β`` on the branch,
    ``y = shortcut(x) + diag(β)·F(x)``; ``init_scale`` None = CaiT's rule.

    ``init`` draws the convs and the classifier (``variants.layers.INIT_SCHEMES``); β keeps ``init_scale``."""
    n_units = unit_count(spec.depth, spec.block, "LayerScale ResNet")
    eps = cait_init(n_units) if init_scale is None else real("init_scale", init_scale, "None: CaiT's rule")
    unit = PREACT[spec.block]

    def scale(cout: int) -> Scaled:
        return Scaled(alpha=1.0, beta=eps, learnable_beta=True, beta_shape=(cout,), channel_dim=1)

    def head(features: int) -> nn.Module:
        return nn.Sequential(nn.BatchNorm2d(features), nn.ReLU())

    return build_cifar(
        spec, lambda s: unit(s.cin, s.width, s.stride, shortcut=spec.shortcut, combine=scale, drop_path=s.drop_path,
                             first=s.position == 0),
        what="LayerScale ResNet", stem=conv3x3, head_pre=head,
    )


register_preset("rezero_resnet56", "rezero", depth=56, paper=f"{BACHLECHNER} (CIFAR-10 ResNet-56)")
register_preset("fixup_resnet110", "fixup", depth=110, paper=f"{ZHANG} (CIFAR-10 ResNet-110)")
