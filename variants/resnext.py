"""ResNeXt for CIFAR: Xie, Girshick, Dollár, Tu & He 2017, "Aggregated Residual Transformations for Deep
Neural Networks", §3-4 and §5.3 (CIFAR).

He 2015's bottleneck unit with its 3×3 convolution split into ``cardinality`` groups (Fig. 3c, the grouped
form of the aggregated transformations): 1×1 (D) - 3×3 grouped (D, C groups, subsamples) - 1×1 (4·w), with
BN after each convolution, ReLU after the first two and after the addition; D = C · d · 2^s in stage s for
bottleneck width d ("C×d", e.g. 8×64d). CIFAR nets (§5.3): a 3×3 stem conv with 64 filters, three stages of
n units whose outputs are 256, 512, 1024, global average pooling and a linear classifier; depth 9n+2
(ResNeXt-29: n = 3). Projection shortcuts (1×1 conv + BN) where the shape changes, as the authors' code.
"""

from __future__ import annotations

from torch import nn

from .blocks import PostActivation, add
from .checks import check_positive
from .layers import CifarSpec, Slot, build_cifar, conv1x1, he_init_, make_shortcut
from .registry import register, register_preset

XIE = "Xie et al. 2017, Aggregated Residual Transformations for Deep Neural Networks"


class ResNeXtBottleneck(PostActivation):
    """Xie et al. 2017, Fig. 3(c): ``y = ReLU(shortcut(x) + BN(W3·ReLU(BN(G·ReLU(BN(W1·x))))))``, G a 3×3
    convolution in ``cardinality`` groups of ``group_width`` channels each; output ``4·width`` channels."""

    expansion = 4

    def __init__(
        self, cin: int, width: int, stride: int, *, cardinality: int, group_width: int, shortcut: str = "B",
        drop_path: float = 0.0,
    ) -> None:
        inner, cout = cardinality * group_width, self.expansion * width
        grouped = he_init_(nn.Conv2d(inner, inner, 3, stride=stride, padding=1, groups=cardinality, bias=False))
        body = nn.Sequential(conv1x1(cin, inner), nn.BatchNorm2d(inner), nn.ReLU(), grouped, nn.BatchNorm2d(inner),
                             nn.ReLU(), conv1x1(inner, cout), nn.BatchNorm2d(cout))
        super().__init__(body, add(cout), nn.ReLU(), shortcut=make_shortcut(shortcut, cin, cout, stride),
                         drop_path=drop_path)


@register("resnext", family="resnext", paper=f"{XIE}, §5.3",
          spec=CifarSpec(depth=29, width=64, block="bottleneck", shortcut="B"))
def resnext(spec: CifarSpec, *, cardinality: int = 8, bottleneck_width: int = 64) -> nn.Module:
    """ResNeXt-``depth`` (``cardinality``×``bottleneck_width``d) of :class:`ResNeXtBottleneck` units; ``width``
    (64) is the stem's filters and the first stage's bottleneck width (outputs 4·width = 256)."""
    check_positive(cardinality=cardinality, bottleneck_width=bottleneck_width)
    if spec.block != "bottleneck":
        raise ValueError(f"ResNeXt units are bottlenecks: block must be 'bottleneck', got {spec.block!r}")

    def unit(s: Slot) -> nn.Module:
        scale = s.width // spec.width  # 1, 2, 4: D doubles with the stage, as the width does
        return ResNeXtBottleneck(s.cin, s.width, s.stride, cardinality=cardinality,
                                 group_width=bottleneck_width * scale, shortcut=spec.shortcut, drop_path=s.drop_path)

    return build_cifar(spec, unit, what="ResNeXt")


# Table 7 (CIFAR-10): ResNeXt-29, 8×64d 34.4M; 16×64d 68.1M.
register_preset("resnext29_8x64d", "resnext", depth=29, cardinality=8, bottleneck_width=64,
                paper=f"{XIE}, Table 7 (ResNeXt-29, 8×64d, 34.4M)")
register_preset("resnext29_16x64d", "resnext", depth=29, cardinality=16, bottleneck_width=64,
                paper=f"{XIE}, Table 7 (ResNeXt-29, 16×64d, 68.1M)")
