"""Pre-activation ResNets and the other unit orderings of He, Zhang, Ren & Sun 2016,
"Identity Mappings in Deep Residual Networks", Fig. 4 / Table 2, on the CIFAR macro-architecture of
He et al. 2015 §4.2 (bottleneck units: 4× expansion, outputs 64/128/256 as in ResNet-164/1001).

Every ordering is one row of :data:`ORDERS` (where BN and ReLU sit before, inside and after a unit);
all of them join shortcut and branch with the ``Add`` combinator. The proposed unit, full pre-activation,
is the class ``variants.blocks.PreActBasic`` (``PreActBottleneck``). As in the paper's released Torch
code for ResNet-164/1001, a widening unit shares its BN-ReLU with a 1×1 projection shortcut (no BN, no
bias) when ``shortcut="B"``, and a bottleneck subsamples in its first 1×1 convolution.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .blocks import PREACT, ResidualUnit, add
from .checks import choice
from .combinators import Combinator
from .layers import EXPANSION, CifarSpec, Slot, build_cifar, conv3x3, conv_branch, make_shortcut, ops
from .registry import register, register_preset

HE2016 = "He et al. 2016, Identity Mappings in Deep Residual Networks"


def preact_stem(in_chans: int, width: int) -> nn.Module:
    """The full pre-activation net's stem: a 3×3 convolution alone (He 2016 appendix: the first unit's
    pre-activation comes right after it). Public: a plugin building a pre-activation net passes it to
    ``build_cifar(stem=...)``."""
    return nn.Sequential(conv3x3(in_chans, width))


def preact_head(features: int) -> nn.Module:
    """What closes a full pre-activation net before pooling: BN-ReLU (He 2016 §4.1, the activation the last
    unit no longer applies after its addition). Public: pass it to ``build_cifar(head_pre=...)``."""
    return nn.Sequential(*ops(BN_RELU, features))


@dataclass(frozen=True)
class Order:
    """Where the ops of one He 2016 ordering sit (each a tuple of ``"bn"``/``"relu"``)."""

    placement: str  # the variant's placement axis under this ordering
    stem: tuple[str, ...]  # after the stem convolution
    pre: tuple[str, ...]  # branch start (pre-activation)
    between: tuple[str, ...]  # after every branch convolution but the last
    last: tuple[str, ...]  # after the last branch convolution, before the addition
    post: tuple[str, ...]  # after the addition
    head: tuple[str, ...]  # before global pooling


BN_RELU = ("bn", "relu")

# He 2016 Fig. 4 (a)-(e): the paper's ablation is over these orderings, so they are data. The pre-activation
# orderings need no ops after the stem conv but close the net with the activation the last unit no longer
# applies (§4.1: "extra activation after the final addition"). (e) is built from the class of its own,
# variants.blocks.PreActBasic / PreActBottleneck, which this row describes.
ORDERS: dict[str, Order] = {
    "original": Order("post-activation", stem=BN_RELU, pre=(), between=BN_RELU, last=("bn",), post=("relu",),
                      head=()),
    "bn_after_add": Order("bn-after-add", stem=BN_RELU, pre=(), between=BN_RELU, last=(), post=BN_RELU, head=()),
    "relu_before_add": Order("relu-before-add", stem=BN_RELU, pre=(), between=BN_RELU, last=BN_RELU, post=(),
                             head=()),
    "relu_only_preact": Order("relu-only-pre", stem=("bn",), pre=("relu",), between=BN_RELU, last=("bn",), post=(),
                              head=("relu",)),
    "full_preact": Order("pre", stem=(), pre=BN_RELU, between=BN_RELU, last=(), post=(), head=BN_RELU),
}


class OrderingUnit(ResidualUnit):
    """A unit of one row of :data:`ORDERS`: ``y = post(shortcut(s) + F(s))`` with ``s = shared(x)``.

    F is the ``block``'s convolutions with the row's ops before, between and after them. A pre-activating
    unit moves its pre-activation into ``shared`` (seen by both paths) where the shortcut is not the
    identity, and in the net's first unit, as in the paper's Torch code (see :class:`~variants.blocks.PreActBasic`).
    """

    def __init__(
        self, order: Order, block: str, slot: Slot, shortcut: str, combine: Combinator | None = None,
    ) -> None:
        cout = EXPANSION[block] * slot.width
        changes_shape = slot.cin != cout or slot.stride != 1 or shortcut == "C"
        share = bool(order.pre) and (slot.position == 0 or changes_shape)
        body = conv_branch(block, slot.cin, slot.width, slot.stride, pre=() if share else order.pre,
                           between=order.between, last=order.last)
        # Projections of pre-activated inputs skip BN: the next unit's pre-activation normalises the sum.
        sc = make_shortcut(shortcut, slot.cin, cout, slot.stride, norm=not order.pre)
        super().__init__(body, combine or add(cout), shortcut=sc, drop_path=slot.drop_path)
        self.placement = order.placement
        self.shared = nn.Sequential(*ops(order.pre, slot.cin)) if share else nn.Identity()
        self.post = nn.Sequential(*ops(order.post, cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.shared(x)
        return self.post(self.combine(self.shortcut(x), self.drop_path(self.body(x))))


@register("preact", family="preact", paper=f"{HE2016}, Fig. 4 / Table 2", spec=CifarSpec(depth=110))
def preact(spec: CifarSpec, *, order: str = "full_preact") -> nn.Module:
    """He 2016 CIFAR net; ``order`` is one of :data:`ORDERS`. ``full_preact`` (the default, the proposed unit)
    is built from :class:`~variants.blocks.PreActBasic` / ``PreActBottleneck``, the other rows of Fig. 4
    from :class:`OrderingUnit`.

    ``init`` is one of ``variants.layers.INIT_SCHEMES``; ``kaiming`` (the default) is the He-normal fan-out
    draw of the paper's released Torch code."""
    choice("order", order, ORDERS, "He 2016 Fig. 4")
    row = ORDERS[order]

    def unit(s: Slot) -> nn.Module:
        if order == "full_preact":
            return PREACT[spec.block](s.cin, s.width, s.stride, shortcut=spec.shortcut, drop_path=s.drop_path,
                                      first=s.position == 0)
        return OrderingUnit(row, spec.block, s, spec.shortcut)

    def stem(cin: int, w: int) -> nn.Module:
        return nn.Sequential(conv3x3(cin, w), *ops(row.stem, w))

    def head(features: int) -> nn.Module:
        return nn.Sequential(*ops(row.head, features))

    if order == "full_preact":  # the public helpers a plugin uses build exactly these
        return build_cifar(spec, unit, what="Pre-activation ResNet", stem=preact_stem, head_pre=preact_head)
    return build_cifar(spec, unit, what="Pre-activation ResNet", stem=stem, head_pre=head)


register_preset("preact_resnet110", "preact", depth=110, paper=f"{HE2016}, Table 2 (ResNet-110, full pre-activation)")
# He 2016 Table 4: 1.7M and 10.2M parameters, with projection shortcuts where the width changes.
register_preset("preact_resnet164", "preact", depth=164, block="bottleneck", shortcut="B",
                paper=f"{HE2016}, Table 4 (ResNet-164, 1.7M)")
register_preset("preact_resnet1001", "preact", depth=1001, block="bottleneck", shortcut="B",
                paper=f"{HE2016}, Table 4 (ResNet-1001, 10.2M)")
