"""Pre-activation ResNets and the other unit orderings of He, Zhang, Ren & Sun 2016,
"Identity Mappings in Deep Residual Networks", Fig. 4 / Table 2, on the CIFAR macro-architecture of
He et al. 2015 §4.2 (bottleneck units: 4× expansion, outputs 64/128/256 as in ResNet-164/1001).

Every ordering is one row of :data:`ORDERS` (where BN and ReLU sit before, inside and after a unit);
all of them join shortcut and branch with the ``Add`` combinator. As in the paper's released Torch
code for ResNet-164/1001, a widening unit shares its BN-ReLU with a 1×1 projection shortcut (no BN, no
bias) when ``shortcut="B"``, and a bottleneck subsamples in its first 1×1 convolution.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from .combinators import Add, Combinator
from .layers import EXPANSION, Unit, build_cifar, conv3x3, conv_branch, make_shortcut, ops, unit_count
from .placements import drop_path_rates
from .registry import register, register_preset

HE2016 = "He et al. 2016, Identity Mappings in Deep Residual Networks"


@dataclass(frozen=True)
class Order:
    """Where the ops of one He 2016 ordering sit (each a tuple of ``"bn"``/``"relu"``)."""

    stem: tuple[str, ...]  # after the stem convolution
    pre: tuple[str, ...]  # branch start (pre-activation)
    between: tuple[str, ...]  # after every branch convolution but the last
    last: tuple[str, ...]  # after the last branch convolution, before the addition
    post: tuple[str, ...]  # after the addition
    head: tuple[str, ...]  # before global pooling


BN_RELU = ("bn", "relu")

# He 2016 Fig. 4 (a)-(e). The pre-activation orderings need no ops after the stem conv but close the
# net with the activation the last unit no longer applies (§4.1: "extra activation after the final addition").
ORDERS: dict[str, Order] = {
    "original": Order(stem=BN_RELU, pre=(), between=BN_RELU, last=("bn",), post=("relu",), head=()),
    "bn_after_add": Order(stem=BN_RELU, pre=(), between=BN_RELU, last=(), post=BN_RELU, head=()),
    "relu_before_add": Order(stem=BN_RELU, pre=(), between=BN_RELU, last=BN_RELU, post=(), head=()),
    "relu_only_preact": Order(stem=("bn",), pre=("relu",), between=BN_RELU, last=("bn",), post=(), head=("relu",)),
    "full_preact": Order(stem=(), pre=BN_RELU, between=BN_RELU, last=(), post=(), head=BN_RELU),
}


def preact_unit(
    order: Order,
    block: str,
    cin: int,
    width: int,
    stride: int,
    shortcut: str,
    first: bool,
    drop_path: float = 0.0,
    combine: Combinator | None = None,
) -> Unit:
    """One unit of ``order``. A pre-activating unit shares its pre-activation with the shortcut when the
    shortcut is not the identity, and in the net's first unit (He 2016 appendix: the first activation
    comes "right after conv1 and before splitting into two paths"), as in the paper's Torch code.
    ``combine`` defaults to ``Add``; LayerScale passes its per-channel ``Scaled``.
    """
    cout = EXPANSION[block] * width
    changes_shape = cin != cout or stride != 1 or shortcut == "C"
    share = bool(order.pre) and (first or changes_shape)
    pre = () if share else order.pre
    body = conv_branch(block, cin, width, stride, pre=pre, between=order.between, last=order.last)
    # Projections of pre-activated inputs skip BN: the next unit's pre-activation normalises the sum.
    sc = make_shortcut(shortcut, cin, cout, stride, norm=not order.pre)
    return Unit(
        body,
        combine or Add(),
        shortcut=sc,
        shared=nn.Sequential(*ops(order.pre, cin)) if share else None,
        post=nn.Sequential(*ops(order.post, cout)) if order.post else None,
        drop_path=drop_path,
    )


@register("preact", family="preact", paper=f"{HE2016}, Fig. 4 / Table 2",
          axes={"combinator": "add", "placement": "pre", "body": "conv"})
def preact(
    depth: int = 110,
    num_classes: int = 10,
    in_chans: int = 3,
    width: int = 16,
    block: str = "basic",
    order: str = "full_preact",
    shortcut: str = "A",
    drop_path_rate: float = 0.0,
    init: str = "kaiming",
) -> nn.Module:
    """He 2016 CIFAR net; ``order`` is one of :data:`ORDERS` (``full_preact`` is the proposed unit).

    ``init`` is one of ``variants.layers.INIT_SCHEMES``; ``kaiming`` (the default) is the He-normal fan-out
    draw of the paper's released Torch code."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {tuple(ORDERS)} (He 2016 Fig. 4), got {order!r}")
    spec = ORDERS[order]
    make_shortcut(shortcut, 1, 1, 1)  # validate early
    rates = drop_path_rates(drop_path_rate, unit_count(depth, block, "Pre-activation ResNet"))

    def unit(i: int, cin: int, w: int, stride: int) -> nn.Module:
        return preact_unit(spec, block, cin, w, stride, shortcut, first=i == 0, drop_path=rates[i])

    def stem(cin: int, w: int) -> nn.Module:
        return nn.Sequential(conv3x3(cin, w), *ops(spec.stem, w))

    def head(features: int) -> nn.Module:
        return nn.Sequential(*ops(spec.head, features))

    return build_cifar(depth, block, width, num_classes, in_chans, unit, "Pre-activation ResNet", stem, head, init)


register_preset("preact_resnet110", "preact", depth=110, paper=f"{HE2016}, Table 2 (ResNet-110, full pre-activation)")
# He 2016 Table 4: 1.7M and 10.2M parameters, with projection shortcuts where the width changes.
register_preset("preact_resnet164", "preact", depth=164, block="bottleneck", shortcut="B",
                paper=f"{HE2016}, Table 4 (ResNet-164, 1.7M)")
register_preset("preact_resnet1001", "preact", depth=1001, block="bottleneck", shortcut="B",
                paper=f"{HE2016}, Table 4 (ResNet-1001, 10.2M)")
