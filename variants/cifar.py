"""CIFAR plain nets, ResNets and Highway nets on one macro-architecture.

- He, Zhang, Ren & Sun 2015, "Deep Residual Learning for Image Recognition", §4.2: a 3×3 stem conv
  with 16 filters, three stages of 2n (basic) units at 16/32/64 filters (stride 2 at stages 2 and 3),
  global average pooling and a fully-connected layer; depth 6n+2. ``plain`` removes the shortcuts,
  ``resnet`` keeps them (option A zero-padding by default, as in §4.2).
- He, Zhang, Ren & Sun 2016, "Identity Mappings in Deep Residual Networks", Table 1 / Fig. 2: the
  shortcut treatments (constant scaling, gating, 1×1 conv, dropout) as ``resnet(shortcut_variant=...)``.
- Srivastava, Greff & Schmidhuber 2015, "Training Very Deep Networks": ``highway`` units
  ``y = T(s)·H(x) + (1 - T(s))·s`` on the same stages, ``s = shortcut(x)`` the carry (``x`` itself but where
  a unit changes the shape), either the two-conv unit adapted to these stages (the default, used by every
  ``highway<depth>`` preset) or the paper's own layer (``unit="srivastava"``).

Every builder takes ``init`` (``variants.layers.INIT_SCHEMES``; default ``kaiming``, He 2015's own).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .blocks import POSTACT, HighwayUnit, ResidualUnit
from .checks import choice, real
from .combinators import Add, Combinator, Gate, NoShortcut, Scaled, TransformGate
from .layers import CifarSpec, Slot, build_cifar, conv1x1, conv3x3, make_shortcut
from .registry import register, register_preset

HE2015 = "He et al. 2015, Deep Residual Learning for Image Recognition, §4.2"
HE2016 = "He et al. 2016, Identity Mappings in Deep Residual Networks, Table 1"
SRIVASTAVA = "Srivastava et al. 2015, Training Very Deep Networks, §2"


class ShortcutDropout(nn.Module):
    """He 2016 Fig. 2(f): dropout with ratio ``p`` on the shortcut, i.e. a random 0/1 mask whose
    expectation scales the shortcut by ``1 - p`` (0.5 in the paper), in training and evaluation alike.
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # F.dropout rescales kept entries by 1/(1-p); undoing that keeps the paper's expected scale 1-p.
        return F.dropout(x, self.p, self.training) * (1.0 - self.p)


def transform_gate(channels: int, bias: float) -> TransformGate:
    """He 2016 §3.1's gate: ``sigmoid`` of a 1×1 convolution whose bias starts at ``bias``."""
    return TransformGate(conv1x1(channels, channels, bias=True), bias)


ShortcutFn = Callable[[str, int, int, int], nn.Module]
CombineFn = Callable[[int, float], Combinator]


def _base(kind: str, cin: int, cout: int, stride: int) -> nn.Module:
    return make_shortcut(kind, cin, cout, stride)


# He 2016 Table 1: each treatment is a (shortcut module, combinator) pair; gate bias used by gating rows only.
SHORTCUT_VARIANTS: dict[str, tuple[ShortcutFn, CombineFn]] = {
    "identity": (_base, lambda c, b: Add()),
    "constant_scaling": (_base, lambda c, b: Scaled(alpha=0.5, beta=0.5)),
    "exclusive_gating": (_base, lambda c, b: Gate(transform_gate(c, b), "highway")),
    "shortcut_only_gating": (_base, lambda c, b: Gate(transform_gate(c, b), "shortcut_only")),
    "conv_shortcut": (lambda kind, cin, cout, s: conv1x1(cin, cout, s), lambda c, b: Add()),
    "dropout_shortcut": (lambda kind, cin, cout, s: nn.Sequential(_base(kind, cin, cout, s), ShortcutDropout(0.5)),
                         lambda c, b: Add()),
}


@register("plain", family="plain", paper=HE2015, spec=CifarSpec(depth=56))
def plain(spec: CifarSpec) -> nn.Module:
    """He 2015's plain baseline: the ResNet's units (:class:`~variants.blocks.PostActBasic`) without shortcuts,
    ``y = ReLU(F(x))`` (joined by ``NoShortcut``)."""
    if spec.shortcut != "A" or spec.drop_path_rate:
        raise ValueError("a plain net has no shortcut to choose and no residual branch to drop: shortcut and "
                         f"drop_path_rate must keep their defaults, got shortcut={spec.shortcut!r}, "
                         f"drop_path_rate={spec.drop_path_rate}")
    unit = POSTACT[spec.block]
    return build_cifar(spec, lambda s: unit(s.cin, s.width, s.stride, shortcut=None, combine=lambda c: NoShortcut()),
                       what="CIFAR plain net")


@register("resnet", family="resnet", paper=f"{HE2015}; shortcut variants: {HE2016}", spec=CifarSpec(depth=56))
def resnet(spec: CifarSpec, *, shortcut_variant: str = "identity", gate_bias: float = -6.0) -> nn.Module:
    """He 2015 CIFAR ResNet of :class:`~variants.blocks.PostActBasic` units (or ``PostActBottleneck``).
    ``shortcut``: A (zero-pad), B (project where shapes change), C (always project).

    ``shortcut_variant`` picks a He 2016 Table 1 treatment; ``gate_bias`` is the initial gate bias of the
    two gating treatments (He 2016 §3.1 searched 0..-10 and found -6 best for exclusive gating).
    """
    choice("shortcut_variant", shortcut_variant, SHORTCUT_VARIANTS)
    real("gate_bias", gate_bias)
    make_sc, make_combine = SHORTCUT_VARIANTS[shortcut_variant]
    unit = POSTACT[spec.block]

    def build(s: Slot) -> nn.Module:
        return unit(s.cin, s.width, s.stride, drop_path=s.drop_path,
                    shortcut=lambda cin, cout, stride: make_sc(spec.shortcut, cin, cout, stride),
                    combine=lambda cout: make_combine(cout, gate_bias))

    return build_cifar(spec, build)


HIGHWAY_UNITS = ("two_conv", "srivastava")


def srivastava_layers(depth: int) -> int:
    """Highway layers per stage of ``unit="srivastava"``: depth = 3n+2 (stem conv, 3n one-conv layers, classifier).

    Each layer counts once, as in Srivastava 2015 (whose depths count highway layers): its H is the one
    convolution on the path, T the gate of that layer.
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 5 or (depth - 2) % 3:
        raise ValueError(
            "CIFAR Highway net (unit='srivastava') depth must be 3n+2 with n >= 1 (a stem conv, 3 stages of n "
            f"one-conv layers, the classifier), e.g. 20, 32, 44, 56, 110, got {depth!r}"
        )
    return (depth - 2) // 3


@register("highway", family="highway", paper=SRIVASTAVA, spec=CifarSpec(depth=56))
def highway(spec: CifarSpec, *, gate_bias: float = -3.0, unit: str = "two_conv") -> nn.Module:
    """:class:`~variants.blocks.HighwayUnit` units ``y = T(s)·H(x) + (1-T(s))·s``, ``s = shortcut(x)``, on He 2015's
    CIFAR stages; ``unit`` picks the unit.

    - ``"two_conv"`` (default; every ``highway<depth>`` preset uses it): an adaptation to the ResNet's
      units, H = conv-BN-ReLU-conv-BN-ReLU (a ``block`` branch that ends, as Srivastava's H does, in its
      nonlinearity), T a 1×1-conv sigmoid gate reading the carry ``s`` (x, or where a stage starts x shaped
      by ``shortcut`` A/B: zero-padded or projected), as the carry term does. Depth 6n+2 (basic) / 9n+2
      (bottleneck), as the ResNets.
    - ``"srivastava"``: the paper's convolutional highway layer (§2-3), H = ReLU(conv3×3(x) + b_H) and
      T = sigmoid(conv3×3(x) + b_T), both reading the layer input with the same receptive field, no BN.
      The first layer of stages 2 and 3 is a plain layer ReLU(conv3×3/2(x) + b) that changes the
      dimensionality (§2 offers a sub-sampled/zero-padded x or a plain layer; the paper's nets take the
      plain layer), so every gated layer has an identity carry and ``block``/``shortcut`` do not apply
      (they must keep their defaults). Depth 3n+2 (:func:`srivastava_layers`); a layer holds two convs,
      so twice the plain net's weights at equal depth. Stochastic depth skips the plain layers.

    ``gate_bias`` default -3: Srivastava 2015 §2.2 recommends a negative start such as -1 or -3 so the
    net begins near carry behaviour; we take the more carry-biased end because these stacks (up to 54
    units at depth 110) are deeper than the paper's CIFAR highway nets. He 2016 §3.1 found -6 best for its
    related exclusive gating (which, unlike this, puts a ReLU after the join: ``resnet(shortcut_variant=
    "exclusive_gating")``).
    """
    what = "CIFAR Highway net"
    choice("unit", unit, HIGHWAY_UNITS)
    real("gate_bias", gate_bias)
    if unit == "srivastava":
        if (spec.block, spec.shortcut) != ("basic", "A"):
            raise ValueError(
                "unit='srivastava' has one 3x3 conv per layer and changes dimensionality with a plain layer "
                f"(Srivastava 2015 §2): block and shortcut must keep their defaults, got block={spec.block!r}, "
                f"shortcut={spec.shortcut!r}"
            )

        def layer(s: Slot) -> nn.Module:
            h = nn.Sequential(conv3x3(s.cin, s.width, s.stride, bias=True), nn.ReLU())
            if s.cin != s.width or s.stride != 1:
                return ResidualUnit(h, NoShortcut())  # the plain layer that changes dimensionality
            return HighwayUnit(h, conv3x3(s.width, s.width, bias=True), gate_bias, drop_path=s.drop_path)

        return build_cifar(spec, layer, what=what, n=srivastava_layers(spec.depth))

    post_act = POSTACT[spec.block]

    def two_conv(s: Slot) -> nn.Module:
        cout = post_act.expansion * s.width
        body = post_act.branch(s.cin, s.width, s.stride)
        body.append(nn.ReLU())  # H ends in its nonlinearity (Srivastava's H = ReLU(...)); nothing after the join
        return HighwayUnit(body, conv1x1(cout, cout, bias=True), gate_bias,
                           shortcut=make_shortcut(spec.shortcut, s.cin, cout, s.stride), drop_path=s.drop_path)

    return build_cifar(spec, two_conv, what=what)


for _d in (20, 32, 44, 56, 110):
    register_preset(f"plain{_d}", "plain", depth=_d, paper=f"{HE2015}, Fig. 6 (plain-{_d})")
for _d in (20, 32, 44, 56, 110, 1202):
    register_preset(f"resnet{_d}", "resnet", depth=_d, paper=f"{HE2015}, Table 6 (ResNet-{_d})")
for _d in (20, 32, 44, 56, 110):
    register_preset(f"highway{_d}", "highway", depth=_d, paper=f"{SRIVASTAVA}; He 2015 §4.2 stages, depth {_d}")
