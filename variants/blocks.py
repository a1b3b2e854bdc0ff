"""Residual units: one class per published design, each ``forward`` its paper's formula.

Every family builds its nets from these (or, for He et al. 2016's ablation of orderings and the DenseNet
layer, from a unit of its own in its family file). One abstraction serves them all, :class:`ResidualUnit`:

- ``body``: the branch F, a module (its convolutions/linear layers and the norms and activations inside it);
- ``shortcut``: the identity, or what makes the shortcut's shape match the branch's (He 2015 §3.3);
- ``combine``: a :class:`~variants.combinators.Combinator`, how shortcut and branch join
  (``forward(x, fx)``: add, gate, scale, concatenate or drop the shortcut);
- ``drop_path``: stochastic depth on the branch (Huang et al. 2016), the identity at rate 0.

A subclass places norms and activations around that join, and says where in ``placement`` (a class
attribute): the registry derives a variant's ``axes`` from the units and combinators its builder makes,
so no label is typed by hand. Probes need nothing from a unit: they hook its ``combine`` and read its ``body``.

======================  =====================================================  ===================================
class                   ``forward``                                            paper
======================  =====================================================  ===================================
:class:`ResidualUnit`   ``combine(shortcut(x), F(x))``                         ReZero, SkipInit, Highway (no norm)
:class:`PostActivation` ``act(combine(shortcut(x), F(x)))``, F ends in a norm  He et al. 2015 (ResNet)
:class:`PostActBasic`   ``ReLU(shortcut(x) + BN(W2·ReLU(BN(W1·x))))``          He et al. 2015, Fig. 2 left
:class:`PreActBasic`    ``h = ReLU(BN(x)); shortcut(·) + W2·ReLU(BN(W1·h))``   He et al. 2016, Fig. 1(b)
:class:`HighwayUnit`    ``T(s)·H(x) + (1 - T(s))·s``, ``s = shortcut(x)``      Srivastava et al. 2015
:class:`PostNorm`       ``norm(combine(x, F(x)))``                             Vaswani et al. 2017 (Post-LN)
:class:`PreNorm`        ``combine(x, F(norm(x)))``                             Xiong et al. 2020 (Pre-LN), GPT-2
:class:`SandwichNorm`   ``combine(x, norm'(F(norm(x))))``                      Ding et al. 2021; Kim et al. 2025
======================  =====================================================  ===================================

(``*Bottleneck`` versions swap the two 3×3 convolutions for 1×1-3×3-1×1 with a 4× expansion.)
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from timm.layers import DropPath
from torch import nn

from .combinators import Add, Combinator, Gate, TransformGate
from .layers import conv1x1, conv3x3, make_shortcut

NormFactory = Callable[[], nn.Module]
# What a CNN unit takes for its shortcut: an option letter of He 2015 §3.3 ("A", "B", "C"), a factory
# ``(cin, cout, stride) -> module``, or None (no shortcut: a plain net's layer).
ShortcutArg = str | Callable[[int, int, int], nn.Module] | None
# What a CNN unit takes for its join: a factory given the unit's output channels.
CombineArg = Callable[[int], Combinator]


def add(channels: int) -> Combinator:
    """The identity shortcut's join, ``x + F(x)`` (the default ``combine`` of the CNN units)."""
    return Add()


class ResidualUnit(nn.Module):
    """``y = combine(shortcut(x), drop_path(F(x)))``: the join itself, with no norm or activation around it."""

    placement = "none"

    def __init__(
        self, body: nn.Module, combine: Combinator, *, shortcut: nn.Module | None = None, drop_path: float = 0.0
    ) -> None:
        super().__init__()
        # Registration order (body, shortcut) is torchvision's (conv1, bn1, ..., downsample): state dicts line up.
        self.body = body
        self.shortcut = shortcut if shortcut is not None else nn.Identity()
        self.combine = combine
        self.drop_path = DropPath(drop_path)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.combine(self.shortcut(x), self.drop_path(self.body(x)))


class PostActivation(ResidualUnit):
    """He et al. 2015's unit, any branch: ``y = act(combine(shortcut(x), F(x)))``, F ending in its norm.

    He et al. 2016 (§4.1) calls it *post-activation*: the nonlinearity comes after the addition. It is not
    the ``post`` placement of :class:`PostNorm` (``norm(x + F(x))``), which normalises the sum.
    """

    placement = "post-activation"

    def __init__(
        self, body: nn.Module, combine: Combinator, act: nn.Module, *, shortcut: nn.Module | None = None,
        drop_path: float = 0.0,
    ) -> None:
        super().__init__(body, combine, shortcut=shortcut, drop_path=drop_path)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.combine(self.shortcut(x), self.drop_path(self.body(x))))


def _shortcut(kind: ShortcutArg, cin: int, cout: int, stride: int, norm: bool) -> nn.Module | None:
    if kind is None:
        return None
    if isinstance(kind, str):
        return make_shortcut(kind, cin, cout, stride, norm=norm)
    return kind(cin, cout, stride)


def _bn_relu(channels: int) -> list[nn.Module]:
    return [nn.BatchNorm2d(channels), nn.ReLU()]  # never in-place: a branch may read what the shortcut reads


class PostActBasic(PostActivation):
    """He et al. 2015, Fig. 2 (left): ``y = ReLU(shortcut(x) + BN(conv3×3(ReLU(BN(conv3×3(x))))))``.

    ``width`` filters in both convolutions; the first subsamples by ``stride``. ``shortcut``: an option
    letter (A zero-pads, B projects where the shape changes, C always projects; projections carry BN), a
    factory ``(cin, cout, stride)``, or None for a plain net's layer. ``combine(cout)`` makes the join
    (default :func:`add`, ``x + F(x)``; a plain net's is ``lambda c: NoShortcut()``).
    """

    expansion = 1

    def __init__(
        self, cin: int, width: int, stride: int = 1, *, shortcut: ShortcutArg = "A", combine: CombineArg = add,
        drop_path: float = 0.0, stride_at: int = 0,
    ) -> None:
        cout = self.expansion * width
        # Built in this order (branch convs, join, shortcut) so a seed draws the same weights as it always has.
        body = self.branch(cin, width, stride, stride_at)
        join = combine(cout)
        super().__init__(body, join, nn.ReLU(), shortcut=_shortcut(shortcut, cin, cout, stride, norm=True),
                         drop_path=drop_path)

    @staticmethod
    def branch(cin: int, width: int, stride: int, stride_at: int = 0) -> nn.Sequential:
        """conv3×3-BN-ReLU-conv3×3-BN."""
        c1, c2 = conv3x3(cin, width, stride), conv3x3(width, width)
        return nn.Sequential(c1, *_bn_relu(width), c2, nn.BatchNorm2d(width))


class PostActBottleneck(PostActBasic):
    """``y = ReLU(shortcut(x) + BN(W3·ReLU(BN(W2·ReLU(BN(W1·x))))))``: He et al. 2015, Fig. 5 (right).

    W1 is 1×1 (``width``), W2 3×3, W3 1×1 (``4·width``).

    ``stride_at`` is the convolution that subsamples: 0 (the first 1×1, He 2015/2016's CIFAR code) or 1
    (the 3×3, torchvision's "ResNet v1.5").
    """

    expansion = 4

    @staticmethod
    def branch(cin: int, width: int, stride: int, stride_at: int = 0) -> nn.Sequential:
        """conv1×1-BN-ReLU-conv3×3-BN-ReLU-conv1×1-BN."""
        c1 = conv1x1(cin, width, stride if stride_at == 0 else 1)
        c2 = conv3x3(width, width, stride if stride_at == 1 else 1)
        c3 = conv1x1(width, 4 * width)
        return nn.Sequential(c1, *_bn_relu(width), c2, *_bn_relu(width), c3, nn.BatchNorm2d(4 * width))


class PreActBasic(ResidualUnit):
    """He et al. 2016, Fig. 1(b) (full pre-activation): ``y = shortcut(x) + conv3×3(ReLU(BN(conv3×3(ReLU(BN(x))))))``.

    Nothing follows the addition, so the stream between units is a pure sum of branches. Where the
    shortcut is not the identity (it changes the shape, or ``shortcut="C"``) and in the net's first unit,
    the shortcut reads the pre-activated ``ReLU(BN(x))`` instead of ``x``, as in the paper's Torch code
    (appendix: the first activation comes "right after conv1 and before splitting into two paths");
    projections then carry no BN (the next unit's pre-activation normalises the sum).
    """

    placement = "pre"
    expansion = 1

    def __init__(
        self, cin: int, width: int, stride: int = 1, *, shortcut: ShortcutArg = "A", combine: CombineArg = add,
        drop_path: float = 0.0, first: bool = False,
    ) -> None:
        cout = self.expansion * width
        body = self.branch(cin, width, stride)
        sc = _shortcut(shortcut, cin, cout, stride, norm=False)
        self.shares_preact = first or cin != cout or stride != 1 or shortcut == "C"
        super().__init__(body, combine(cout), shortcut=sc, drop_path=drop_path)
        self.preact = nn.Sequential(*_bn_relu(cin))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.preact(x)
        return self.combine(self.shortcut(h if self.shares_preact else x), self.drop_path(self.body(h)))

    @staticmethod
    def branch(cin: int, width: int, stride: int) -> nn.Sequential:
        """conv3×3-BN-ReLU-conv3×3 (the BN-ReLU before the first conv is the unit's ``preact``)."""
        c1, c2 = conv3x3(cin, width, stride), conv3x3(width, width)
        return nn.Sequential(c1, *_bn_relu(width), c2)


class PreActBottleneck(PreActBasic):
    """``y = shortcut(x) + W3·ReLU(BN(W2·ReLU(BN(W1·ReLU(BN(x))))))``: He et al. 2016 (ResNet-164/1001).

    W1 is 1×1 (``width``, subsamples), W2 3×3, W3 1×1 (``4·width``); the shortcut reads ``ReLU(BN(x))`` where
    :class:`PreActBasic` says."""

    expansion = 4

    @staticmethod
    def branch(cin: int, width: int, stride: int) -> nn.Sequential:
        """conv1×1-BN-ReLU-conv3×3-BN-ReLU-conv1×1."""
        c1, c2, c3 = conv1x1(cin, width, stride), conv3x3(width, width), conv1x1(width, 4 * width)
        return nn.Sequential(c1, *_bn_relu(width), c2, *_bn_relu(width), c3)


# The unit of each ``block`` (CifarSpec.block): what a builder looks up.
POSTACT: dict[str, type[PostActBasic]] = {"basic": PostActBasic, "bottleneck": PostActBottleneck}
PREACT: dict[str, type[PreActBasic]] = {"basic": PreActBasic, "bottleneck": PreActBottleneck}


class HighwayUnit(ResidualUnit):
    """Srivastava et al. 2015, eq. 3, on the carry ``s = shortcut(x)``: ``y = T(s)·H(x) + (1 - T(s))·s``.

    ``T(s) = sigmoid(W_T·s + b_T)``: ``gate`` is the transform gate's affine map (W_T, b_T), ``b_T`` starts at
    ``gate_bias`` (negative, so the unit starts near the carry); ``body`` is H (ending in its nonlinearity). The
    join is a :class:`~variants.combinators.Gate`, which receives the shortcut's output and the branch's, so
    the gate reads the carry ``s``, not the unit's input: where ``shortcut`` is the identity (the default)
    ``s = x`` and this is eq. 3 as printed, ``T(x)·H(x) + (1 - T(x))·x``; where the unit changes the shape,
    ``s`` is the paper's x̂ (§2: x sub-sampled or zero-padded to the output's size; He 2015's option B
    projects it) and T reads that same x̂.
    """

    def __init__(
        self, body: nn.Module, gate: nn.Module, gate_bias: float, *, shortcut: nn.Module | None = None,
        drop_path: float = 0.0,
    ) -> None:
        super().__init__(body, Gate(TransformGate(gate, gate_bias)), shortcut=shortcut, drop_path=drop_path)


class PostNorm(ResidualUnit):
    """Post-LN, Vaswani et al. 2017: ``y = norm(combine(x, F(x)))``."""

    placement = "post"

    def __init__(self, body: nn.Module, combine: Combinator, norm: NormFactory, *, drop_path: float = 0.0) -> None:
        super().__init__(body, combine, drop_path=drop_path)
        self.norm_out = norm()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm_out(self.combine(x, self.drop_path(self.body(x))))


class PreNorm(ResidualUnit):
    """Pre-LN, Xiong et al. 2020 and GPT-2; He et al. 2016's pre-activation: ``y = combine(x, F(norm(x)))``."""

    placement = "pre"

    def __init__(self, body: nn.Module, combine: Combinator, norm: NormFactory, *, drop_path: float = 0.0) -> None:
        super().__init__(body, combine, drop_path=drop_path)
        self.norm_in = norm()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.combine(x, self.drop_path(self.body(self.norm_in(x))))


class SandwichNorm(ResidualUnit):
    """Sandwich-LN (Ding et al. 2021, CogView) = Peri-LN (Kim et al. 2025): ``y = combine(x, norm'(F(norm(x))))``."""

    placement = "sandwich"

    def __init__(self, body: nn.Module, combine: Combinator, norm: NormFactory, *, drop_path: float = 0.0) -> None:
        super().__init__(body, combine, drop_path=drop_path)
        self.norm_in = norm()
        self.norm_branch = norm()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.combine(x, self.drop_path(self.norm_branch(self.body(self.norm_in(x)))))


# Norm placements around a sublayer, by name (``peri`` is Kim et al.'s name for the sandwich).
PLACEMENTS: dict[str, Callable[..., ResidualUnit]] = {
    "post": PostNorm, "pre": PreNorm, "sandwich": SandwichNorm, "peri": SandwichNorm, "none": ResidualUnit,
}


def sublayer(
    placement: str, body: nn.Module, combine: Combinator, norm: NormFactory | None = None, drop_path: float = 0.0
) -> ResidualUnit:
    """The unit of ``placement`` (one of :data:`PLACEMENTS`) around ``body``; ``norm`` makes its norm layers."""
    if placement not in PLACEMENTS:
        raise ValueError(f"norm placement must be one of {tuple(PLACEMENTS)}, got {placement!r}")
    if placement == "none":
        return ResidualUnit(body, combine, drop_path=drop_path)
    if norm is None:
        raise ValueError(f"placement {placement!r} needs a norm factory")
    return PLACEMENTS[placement](body, combine, norm, drop_path=drop_path)
