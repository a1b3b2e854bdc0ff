"""Convolutional building blocks shared by the CNN families (CIFAR, pre-activation, ImageNet, norm-free).

- Shortcut options of He et al. 2015, "Deep Residual Learning for Image Recognition", §3.3/§4.1:
  ``A`` zero-pads new channels and subsamples (parameter-free), ``B`` projects (1×1 conv) only where
  the shape changes, ``C`` projects on every shortcut (Table 3).
- Branches are built from a small op vocabulary (``"bn"``, ``"relu"``, Fixup's scalar ``"bias"``)
  placed before, between and after the convolutions, which is how He et al. 2016, "Identity Mappings
  in Deep Residual Networks", Fig. 4, describes its orderings.
- Convolutions are initialised as He et al. 2015 ("Delving Deep into Rectifiers") in the fan-out form
  the original Torch ResNet code and torchvision use; :func:`init_weights_` re-draws a built net under
  another named scheme (the ``init`` axis).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
import torch.nn.functional as F
from timm.layers import DropPath
from torch import nn

from .combinators import Combinator


def he_init_(conv: nn.Conv2d) -> nn.Conv2d:
    """He-normal weights (fan-out, ReLU gain); zero bias."""
    nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
    if conv.bias is not None:
        nn.init.zeros_(conv.bias)
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
INIT_SCHEMES: dict[str, Callable[[torch.Tensor], object] | None] = {
    "kaiming": None,
    "xavier": nn.init.xavier_uniform_,
    "normal": lambda w: nn.init.normal_(w, std=0.02),
}


def check_init(init: str) -> None:
    """Raise ``ValueError`` naming the schemes unless ``init`` is one of :data:`INIT_SCHEMES`."""
    if init not in INIT_SCHEMES:
        raise ValueError(f"unknown init {init!r}; choose one of: {', '.join(INIT_SCHEMES)}")


ModuleT = TypeVar("ModuleT", bound=nn.Module)


def init_weights_(model: ModuleT, init: str) -> ModuleT:
    """Re-draw every Conv2d/Linear weight of ``model`` under scheme ``init`` (see :data:`INIT_SCHEMES`)."""
    check_init(init)
    draw = INIT_SCHEMES[init]
    if draw is not None:
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, (nn.Conv2d, nn.Linear)):
                    draw(m.weight)
    return model


def check_paper_init(init: str, scheme: str, what: str) -> None:
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


class Unit(nn.Module):
    """One residual unit: ``post(combine(shortcut(s), drop_path(body(s))))`` with ``s = shared(x)``.

    ``shared`` holds ops both paths see (He 2016's pre-activation of a unit whose shortcut projects,
    Fixup's scalar bias before the first convolution); ``post`` the ops after the join (the ReLU after
    addition of the original ResNet, BN-ReLU of He 2016's "BN after addition").
    """

    def __init__(
        self,
        body: nn.Module,
        combine: Combinator,
        shortcut: nn.Module | None = None,
        shared: nn.Module | None = None,
        post: nn.Module | None = None,
        drop_path: float = 0.0,
    ) -> None:
        super().__init__()
        # Registration order (shared, body, shortcut) matches torchvision's, so state dicts line up.
        self.shared = shared or nn.Identity()
        self.body = body
        self.shortcut = shortcut or nn.Identity()
        self.combine = combine
        self.post = post or nn.Identity()
        self.drop_path = DropPath(drop_path)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.shared(x)
        return self.post(self.combine(self.shortcut(x), self.drop_path(self.body(x))))


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


def check_positive(**values: int) -> None:
    """Raise ``ValueError`` unless every value is a positive int (``num_classes``, ``in_chans``, ``width``...)."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


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


def cifar_plan(n: int, width: int, block: str) -> list[tuple[int, int, int, int]]:
    """``(stage, cin, width, stride)`` per unit: 3 stages of ``n`` units at widths w/2w/4w, stride 2 into stages 2-3."""
    plan, cin = [], width
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


UnitFn = Callable[[int, int, int, int], nn.Module]


def post_act_stem(in_chans: int, width: int) -> nn.Module:
    """He 2015's CIFAR stem: 3×3 conv, BN, ReLU."""
    return nn.Sequential(conv3x3(in_chans, width), nn.BatchNorm2d(width), nn.ReLU())


def build_cifar(
    depth: int,
    block: str,
    width: int,
    num_classes: int,
    in_chans: int,
    unit: UnitFn,
    what: str,
    stem: Callable[[int, int], nn.Module] = post_act_stem,
    head_pre: Callable[[int], nn.Module] = lambda features: nn.Identity(),
    init: str = "kaiming",
    n: int | None = None,
) -> ConvNet:
    """The He 2015 CIFAR macro-architecture around ``unit(index, cin, width, stride)``, initialised by ``init``.

    ``stem(in_chans, width)`` and ``head_pre(features)`` build what surrounds the stages (a
    pre-activation net, for instance, ends with BN-ReLU before pooling). ``n`` (units per stage) replaces
    the 6n+2 / 9n+2 depth rule for units of another size (the caller validated it). Arguments are
    validated first.
    """
    n = cifar_depth(depth, block, what) if n is None else n
    check_positive(width=width, num_classes=num_classes, in_chans=in_chans)
    check_init(init)
    plan = cifar_plan(n, width, block)
    units = [unit(i, cin, w, stride) for i, (_, cin, w, stride) in enumerate(plan)]
    features = EXPANSION[block] * 4 * width
    net = ConvNet(stem(in_chans, width), group_stages(units, plan), head_pre(features), features, num_classes)
    return init_weights_(net, init)


def unit_count(depth: int, block: str, what: str = "CIFAR ResNet") -> int:
    """Residual units of a CIFAR net of this depth (validates the depth rule)."""
    return 3 * cifar_depth(depth, block, what)
