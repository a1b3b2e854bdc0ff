"""Convolutional building blocks shared by the CNN families (CIFAR, pre-activation, ImageNet, norm-free).

- Shortcut options of He et al. 2015, "Deep Residual Learning for Image Recognition", §3.3/§4.1:
  ``A`` zero-pads new channels and subsamples (parameter-free), ``B`` projects (1×1 conv) only where
  the shape changes, ``C`` projects on every shortcut (Table 3).
- Branches are built from a small op vocabulary (``"bn"``, ``"relu"``, Fixup's scalar ``"bias"``)
  placed before, between and after the convolutions, which is how He et al. 2016, "Identity Mappings
  in Deep Residual Networks", Fig. 4, describes its orderings.
- :class:`CifarSpec` is what every net on He et al. 2015's CIFAR macro-architecture takes (depth, width,
  classes, input channels, block, shortcut, stochastic depth, init), validated once; :func:`build_cifar`
  builds the stem, three stages of units and the head around a unit factory.
- Convolutions are initialised as He et al. 2015 ("Delving Deep into Rectifiers") in the fan-out form
  the original Torch ResNet code and torchvision use; :func:`init_weights_` re-draws a built net under
  another named scheme (the ``init`` axis).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

import torch
import torch.nn.functional as F
from timm.layers import trunc_normal_
from torch import nn

from . import axes, init_marks
from .checks import check_positive, rate


def he_init_(conv: nn.Conv2d) -> nn.Conv2d:
    """He-normal weights (fan-out, ReLU gain); zero bias; recorded as drawn (:mod:`variants.init_marks`). (Nothing to
    draw on the meta device.)"""
    if conv.weight.is_meta:
        return init_marks.drawn(conv, "he_fan_out")
    init_marks.he_fan_out_(conv)
    return conv


# The named initialisation schemes of the CNN and MLP families (DESIGN.md axis 5). Each draws the weight
# of every Conv2d and Linear (classifier included); biases (0, or a Highway gate's negative start),
# norms and the scalar/per-channel scales of the combinators keep their construction values, so two
# schemes differ in those weights only.
#   kaiming: He et al. 2015, "Delving Deep into Rectifiers": what the constructors already draw (convs
#            He-normal fan-out with the ReLU gain, as the Torch ResNet code and torchvision; the MLP's
#            linear layers fan-in with their activation's gain), the classifier at PyTorch's default.
#            Applying it changes nothing, so a default model stays bit-identical for a given seed.
#   xavier:  Glorot & Bengio 2010, "Understanding the difficulty of training deep feedforward neural
#            networks", eq. 16: uniform, variance 2 / (fan_in + fan_out), gain 1.
#   normal:  N(0, 0.02), a fixed std whatever the layer's fan (GPT's, Radford et al. 2018; the transformer
#            family's ``normal``), the fixed-scale kind of draw He 2015 argues against for deep nets.
#   trunc_normal: N(0, 0.02) truncated at ±2σ, the draw of ConvNeXt (Liu et al. 2022) and of the ViTs it follows.
INIT_SCHEMES: dict[str, Callable[[torch.Tensor], object] | None] = {
    "kaiming": None,
    "xavier": nn.init.xavier_uniform_,
    "normal": lambda w: nn.init.normal_(w, std=0.02),
    # timm's: one uniform draw per tensor (inverse CDF). torch's own, in recent releases, redraws the values outside
    # the bounds in a loop: how many draws a build takes then depends on the values, which per-layer streams
    # (variants.draws) cannot replay
    "trunc_normal": lambda w: trunc_normal_(w, std=0.02, a=-0.04, b=0.04),
}


# The schemes of variants whose paper is an initialisation (variants.normfree), pinned by name.
PAPER_INITS = ("rezero", "skipinit", "fixup", "airbench")
axes.ship("init", [*INIT_SCHEMES, *PAPER_INITS])
InitArg = str | Callable[[torch.Tensor], object]  # a scheme's name, or a draw that fills one weight in place


def resolve_init(init: object) -> Callable[[torch.Tensor], object] | None:
    """The draw of ``init``: one of :data:`INIT_SCHEMES` (None: keep what the constructors drew), a scheme
    registered with ``variants.register_init``, or a draw passed directly; else ``ValueError`` naming them."""
    _, draw = axes.lookup("init", init, INIT_SCHEMES, message=lambda known: (
        f"unknown init {init!r}; choose one of: {', '.join(known)} (or pass a draw (weight) -> None)"))
    return draw


def check_init(init: object) -> None:
    """Raise ``ValueError`` naming the schemes unless ``init`` is a scheme :func:`resolve_init` knows."""
    resolve_init(init)


ModuleT = TypeVar("ModuleT", bound=nn.Module)


def init_weights_(model: ModuleT, init: InitArg) -> ModuleT:
    """Re-draw every Conv2d/Linear weight of ``model`` under scheme ``init`` (see :func:`resolve_init`) but those a
    mark keeps; ``kaiming``: He's draw for every convolution no scheme drew yet (a plugin's), then the marks
    (:func:`variants.init_marks.kaiming_`)."""
    draw = resolve_init(init)
    if draw is None:
        return init_marks.kaiming_(model)
    if not any(p.is_meta for p in model.parameters()):
        keep = init_marks.kept(model)
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, (nn.Conv2d, nn.Linear)) and id(m) not in keep:
                    draw(m.weight)
    return init_marks.apply_marks_(model)


# What a builder passes as build_cifar's ``init`` when it draws the whole net itself afterwards (ConvNeXt, NFNet).
DRAWN_LATER = "drawn_later"


def check_paper_init(init: object, scheme: str, what: str) -> None:
    """For a variant whose paper *is* its initialisation: ``init`` can only name that scheme."""
    if init != scheme:
        raise ValueError(f"{what}'s initialisation is its paper's own scheme: init must be {scheme!r}, got {init!r}")


def conv3x3(cin: int, cout: int, stride: int = 1, bias: bool = False) -> nn.Conv2d:
    return he_init_(nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=bias))


def conv1x1(cin: int, cout: int, stride: int = 1, bias: bool = False) -> nn.Conv2d:
    return he_init_(nn.Conv2d(cin, cout, 1, stride=stride, bias=bias))


class PadShortcut(nn.Module):
    """Option A: subsample by ``stride`` and append zero channels up to ``cout`` (no parameters)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        if cout < cin:
            raise ValueError(f"a zero-padding shortcut cannot reduce channels ({cin} -> {cout}); use shortcut='B'")
        self.extra, self.stride = cout - cin, stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride > 1:
            x = x[:, :, :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, 0, self.extra)) if self.extra else x


def projection(cin: int, cout: int, stride: int, norm: bool = True) -> nn.Module:
    """1×1 convolution without bias, followed by BN where ``norm`` (post-activation nets)."""
    conv = conv1x1(cin, cout, stride)
    return nn.Sequential(conv, nn.BatchNorm2d(cout)) if norm else conv


SHORTCUTS = ("A", "B", "C")


def make_shortcut(kind: str, cin: int, cout: int, stride: int, norm: bool = True) -> nn.Module:
    """The shortcut of a unit mapping ``cin`` channels to ``cout`` at ``stride`` under option ``kind``."""
    if kind not in SHORTCUTS:
        raise ValueError(f"shortcut must be one of {SHORTCUTS} (He 2015 §3.3), got {kind!r}")
    same_shape = cin == cout and stride == 1
    if kind == "C" or (kind == "B" and not same_shape):
        return projection(cin, cout, stride, norm)
    return nn.Identity() if same_shape else PadShortcut(cin, cout, stride)


class ScalarBias(nn.Module):
    """A learnable scalar added to every entry, initialised to 0 (Fixup's biases, Zhang et al. 2019)."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.bias


# The op vocabulary of a branch; each factory takes the channel count at that point.
OPS: dict[str, Callable[[int], nn.Module]] = {
    "bn": nn.BatchNorm2d,
    # Never in-place: the first op of a branch may read the tensor the shortcut also reads.
    "relu": lambda c: nn.ReLU(),
    "bias": lambda c: ScalarBias(),
}


def ops(names: Sequence[str], channels: int) -> list[nn.Module]:
    return [OPS[n](channels) for n in names]


BLOCKS = ("basic", "bottleneck")
EXPANSION = {"basic": 1, "bottleneck": 4}


def conv_branch(
    block: str,
    cin: int,
    width: int,
    stride: int,
    pre: Sequence[str] = (),
    between: Sequence[str] = ("bn", "relu"),
    last: Sequence[str] = ("bn",),
    bias: bool = False,
    stride_at: int = 0,
) -> nn.Sequential:
    """``pre`` ops, then the convolutions with ``between`` ops after each but the last, then ``last`` ops.

    ``basic``: 3×3, 3×3 with ``width`` channels. ``bottleneck``: 1×1 (``width``), 3×3 (``width``),
    1×1 (``4·width``). ``stride_at`` is the index of the convolution that subsamples: 0 in He 2016's
    CIFAR code (the first 1×1), 1 (the 3×3) in torchvision's bottleneck.
    """
    if block not in BLOCKS:
        raise ValueError(f"block must be one of {BLOCKS}, got {block!r}")
    cout = EXPANSION[block] * width
    if block == "basic":
        shapes = [(cin, width, 3), (width, width, 3)]
    else:
        shapes = [(cin, width, 1), (width, width, 3), (width, cout, 1)]
    convs = [(conv3x3 if k == 3 else conv1x1)(a, b, stride if i == stride_at else 1, bias)
             for i, (a, b, k) in enumerate(shapes)]
    layers = ops(pre, cin)
    for i, conv in enumerate(convs):
        layers.append(conv)
        layers += ops(last if i == len(convs) - 1 else between, conv.out_channels)
    return nn.Sequential(*layers)


class ConvNet(nn.Module):
    """``stem -> stages -> head`` where head = ``head_pre``, global average pool, flatten, linear."""

    def __init__(
        self, stem: nn.Module, stages: Sequence[Sequence[nn.Module]], head_pre: nn.Module, features: int,
        num_classes: int,
    ) -> None:
        super().__init__()
        self.stem = stem
        self.stages = nn.Sequential(*(nn.Sequential(*units) for units in stages))
        self.head = nn.Sequential(head_pre, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(features, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stages(self.stem(x)))


def cifar_depth(depth: int, block: str, what: str = "CIFAR ResNet") -> int:
    """Units per stage of a 3-stage CIFAR net: depth = 6n+2 (basic) or 9n+2 (bottleneck), He 2015 §4.2 / He 2016."""
    if block not in BLOCKS:
        raise ValueError(f"block must be one of {BLOCKS}, got {block!r}")
    per_unit = 2 if block == "basic" else 3
    step = 3 * per_unit
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < step + 2 or (depth - 2) % step:
        examples = ", ".join(str(step * n + 2) for n in (1, 2, 3, 5, 6, 9, 18))
        raise ValueError(f"{what} depth must be {step}n+2 ({block}) with n >= 1, e.g. {examples}, got {depth!r}")
    return (depth - 2) // step


def cifar_plan(n: int, width: int, block: str, stem_width: int | None = None) -> list[tuple[int, int, int, int]]:
    """``(stage, cin, width, stride)`` per unit: 3 stages of ``n`` units at widths w/2w/4w, stride 2 into stages 2-3;
    the first unit reads ``stem_width`` channels (default ``width``)."""
    plan, cin = [], width if stem_width is None else stem_width
    for stage, w in enumerate((width, 2 * width, 4 * width)):
        for i in range(n):
            stride = 2 if stage > 0 and i == 0 else 1
            plan.append((stage, cin, w, stride))
            cin = EXPANSION[block] * w
    return plan


def group_stages(units: Sequence[nn.Module], plan: Sequence[tuple[int, ...]]) -> list[list[nn.Module]]:
    """Split a flat list of units into stages following ``plan``'s first field."""
    stages: list[list[nn.Module]] = [[] for _ in range(plan[-1][0] + 1)]
    for unit, row in zip(units, plan, strict=True):
        stages[row[0]].append(unit)
    return stages


def drop_path_rates(drop_path_rate: float, n_blocks: int) -> list[float]:
    """The linear decay rule of Huang 2016 §3: block ``l`` of ``L`` drops with ``p_l = l/L · rate``."""
    p = rate("drop_path_rate", drop_path_rate)
    return [p * (i + 1) / n_blocks for i in range(n_blocks)]


@dataclass(frozen=True, kw_only=True)
class CifarSpec:
    """What every net on He et al. 2015's CIFAR macro-architecture is built from, validated on construction.

    A builder registered with ``spec=CifarSpec(...)`` (``variants.register``) receives one of these as its
    only positional argument; its fields are the variant's keyword arguments (``--depth``, ``--model-arg
    width=32`` ...), with the registered instance's values as defaults. ``depth`` is checked by the depth rule
    of the unit the builder makes (6n+2 for basic units, 9n+2 for bottlenecks: :func:`cifar_depth`).
    """

    depth: int = 56
    width: int = 16
    num_classes: int = 10
    in_chans: int = 3
    block: str = "basic"
    shortcut: str = "A"  # He 2015 §3.3: A zero-pads, B projects where the shape changes, C always projects
    drop_path_rate: float = 0.0
    init: InitArg = "kaiming"  # a scheme (resolve_init), or the paper's own where the variant pins it

    def __post_init__(self) -> None:
        check_positive(width=self.width, num_classes=self.num_classes, in_chans=self.in_chans)
        if self.block not in BLOCKS:
            raise ValueError(f"block must be one of {BLOCKS}, got {self.block!r}")
        if self.shortcut not in SHORTCUTS:
            raise ValueError(f"shortcut must be one of {SHORTCUTS} (He 2015 §3.3), got {self.shortcut!r}")
        rate("drop_path_rate", self.drop_path_rate)
        if not isinstance(self.init, str) and not callable(self.init):
            raise ValueError(f"init must be the name of a scheme or a draw (weight) -> None, got {self.init!r}")

    @property
    def expansion(self) -> int:
        return EXPANSION[self.block]


class Slot(NamedTuple):
    """Where a unit sits in the net: what a unit factory of :func:`build_cifar` is given."""

    position: int  # 0 = the net's first unit
    cin: int  # input channels
    width: int  # the branch's width (output channels: width · expansion)
    stride: int  # 2 where a stage starts (stages 2 and 3), else 1
    drop_path: float  # this unit's stochastic-depth rate (linear decay, Huang et al. 2016)


def post_act_stem(in_chans: int, width: int) -> nn.Module:
    """He 2015's CIFAR stem: 3×3 conv, BN, ReLU."""
    return nn.Sequential(conv3x3(in_chans, width), nn.BatchNorm2d(width), nn.ReLU())


def build_cifar(
    spec: CifarSpec,
    unit: Callable[[Slot], nn.Module],
    *,
    what: str = "CIFAR ResNet",
    stem: Callable[[int, int], nn.Module] = post_act_stem,
    head_pre: Callable[[int], nn.Module] = lambda features: nn.Identity(),
    init: InitArg | None = None,
    n: int | None = None,
    stem_width: int | None = None,
) -> ConvNet:
    """He 2015's CIFAR macro-architecture of ``spec`` around ``unit(slot)``, initialised by ``init`` (default
    ``spec.init``; a variant that pins its paper's own scheme passes ``"kaiming"``, what its layers already drew; one
    that draws the whole net itself afterwards passes :data:`DRAWN_LATER`).

    Three stages of ``n`` units at widths w, 2w, 4w (stride 2 into stages 2 and 3); ``n`` defaults to the
    depth rule (6n+2 basic, 9n+2 bottleneck; errors name the net as ``what``). ``stem(in_chans, width)``
    and ``head_pre(features)`` build what surrounds the stages (a pre-activation net ends with BN-ReLU).
    ``stem_width`` is the stem's output width where it is not the first stage's (Wide ResNets: 16 vs 16k).
    """
    n = cifar_depth(spec.depth, spec.block, what) if n is None else n
    init = spec.init if init is None else init
    if init != DRAWN_LATER:
        check_init(init)
    stem_width = spec.width if stem_width is None else stem_width
    check_positive(stem_width=stem_width)
    plan = cifar_plan(n, spec.width, spec.block, stem_width)
    rates = drop_path_rates(spec.drop_path_rate, len(plan))
    units = [unit(Slot(i, cin, w, stride, rates[i])) for i, (_, cin, w, stride) in enumerate(plan)]
    features = spec.expansion * 4 * spec.width
    net = ConvNet(stem(spec.in_chans, stem_width), group_stages(units, plan), head_pre(features), features,
                  spec.num_classes)
    return net if init == DRAWN_LATER else init_weights_(net, init)


def unit_count(depth: int, block: str, what: str = "CIFAR ResNet") -> int:
    """Residual units of a CIFAR net of this depth (validates the depth rule)."""
    return 3 * cifar_depth(depth, block, what)
