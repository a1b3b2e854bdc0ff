"""ImageNet ResNets: He, Zhang, Ren & Sun 2015, "Deep Residual Learning for Image Recognition", Table 1.

7×7/2 stem conv, BN, ReLU, 3×3/2 max pool, four stages at 64/128/256/512 filters (bottleneck outputs
×4), global average pooling, linear classifier. Projection shortcuts where shapes change (option B, the
paper's choice for its deeper nets), and the layout of torchvision's ``resnetXX`` ("ResNet v1.5": the
stride sits on the bottleneck's 3×3 conv), so torchvision state dicts load after a key mapping.
``zero_init_residual`` zero-initialises each branch's last BN (Goyal et al. 2017, "Accurate, Large
Minibatch SGD", §5.1), as torchvision's option of that name does.
"""

from __future__ import annotations

from torch import nn

from .blocks import POSTACT
from .checks import check_positive, flag, is_int
from .combinators import NoShortcut
from .layers import ConvNet, InitArg, check_init, drop_path_rates, he_init_, init_weights_
from .registry import register, register_preset

HE2015 = "He et al. 2015, Deep Residual Learning for Image Recognition, Table 1"

# depth -> (block, units per stage), He 2015 Table 1.
LAYOUTS: dict[int, tuple[str, tuple[int, int, int, int]]] = {
    18: ("basic", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
    101: ("bottleneck", (3, 4, 23, 3)),
    152: ("bottleneck", (3, 8, 36, 3)),
}


def _stem(in_chans: int, width: int) -> nn.Sequential:
    conv = he_init_(nn.Conv2d(in_chans, width, 7, stride=2, padding=3, bias=False))
    return nn.Sequential(conv, nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(3, stride=2, padding=1))


@register("resnet_imagenet", family="resnet_imagenet", paper=HE2015)
def resnet_imagenet(
    *,
    depth: int = 50,
    num_classes: int = 1000,
    in_chans: int = 3,
    width: int = 64,
    zero_init_residual: bool = False,
    drop_path_rate: float = 0.0,
    init: InitArg = "kaiming",
    shortcut: str = "B",
) -> nn.Module:
    """He 2015 ImageNet ResNet of ``depth`` in {18, 34, 50, 101, 152}: :class:`~variants.blocks.PostActBasic` or
    ``PostActBottleneck`` units with projection shortcuts (option B; ``shortcut="A"``: identity with zero-padding
    where the shape changes, Table 2's choice, no parameter more than the plain net); ``width`` is the first stage's
    width.

    ``init`` is one of ``variants.layers.INIT_SCHEMES``; ``kaiming`` (default) is torchvision's draw. The
    zero-initialised BNs of ``zero_init_residual`` stay zero under every scheme (schemes draw weights only)."""
    if shortcut not in ("A", "B", "C"):
        raise ValueError(f"shortcut must be one of 'A', 'B', 'C' (He 2015 §3.3), got {shortcut!r}")
    return _imagenet_net(depth, num_classes, in_chans, width, zero_init_residual, drop_path_rate, init, shortcut)


@register("plain_imagenet", family="resnet_imagenet", paper="He et al. 2015, Deep Residual Learning for Image "
          "Recognition, Table 2 (plain-18/34)")
def plain_imagenet(
    *,
    depth: int = 34,
    num_classes: int = 1000,
    in_chans: int = 3,
    width: int = 64,
    drop_path_rate: float = 0.0,
    init: InitArg = "kaiming",
) -> nn.Module:
    """He 2015's plain ImageNet net of ``depth`` (Table 1's layout, Table 2): the ResNet without its shortcuts,
    ``y = ReLU(F(x))`` in every unit; as many parameters as the ResNet with option-A shortcuts."""
    return _imagenet_net(depth, num_classes, in_chans, width, False, drop_path_rate, init, None)


def _imagenet_net(depth: int, num_classes: int, in_chans: int, width: int, zero_init_residual: bool,
                  drop_path_rate: float, init: InitArg, shortcut: str | None) -> nn.Module:
    """The He 2015 ImageNet net (Table 1) with ``shortcut`` (an option letter; None: a plain net)."""
    if not is_int(depth) or depth not in LAYOUTS:
        raise ValueError(f"ImageNet ResNet depth must be one of {tuple(LAYOUTS)} (He 2015 Table 1), got {depth!r}")
    check_positive(num_classes=num_classes, in_chans=in_chans, width=width)
    check_init(init)
    flag("zero_init_residual", zero_init_residual)
    block, counts = LAYOUTS[depth]
    rates = iter(drop_path_rates(drop_path_rate, sum(counts)))
    unit = POSTACT[block]
    stages, cin = [], width
    for s, count in enumerate(counts):
        units = []
        for i in range(count):
            w, stride = width * 2**s, 2 if s > 0 and i == 0 else 1
            # torchvision's layout: the stride sits on the first conv of a basic unit, on the 3×3 of a bottleneck.
            join = {} if shortcut is not None else {"combine": lambda c: NoShortcut()}
            u = unit(cin, w, stride, shortcut=shortcut, drop_path=next(rates), stride_at=0 if block == "basic" else 1,
                     **join)
            if zero_init_residual:
                last_bn = list(u.body.children())[-1]
                assert isinstance(last_bn, nn.BatchNorm2d)
                nn.init.zeros_(last_bn.weight)
            units.append(u)
            cin = unit.expansion * w
        stages.append(units)
    return init_weights_(ConvNet(_stem(in_chans, width), stages, nn.Identity(), cin, num_classes), init)


for _d in LAYOUTS:
    register_preset(f"resnet{_d}", "resnet_imagenet", depth=_d, paper=f"{HE2015} (ResNet-{_d})")
for _d in (18, 34):  # Table 2: plain-18/34 against ResNet-18/34 with option-A shortcuts (no extra parameter)
    register_preset(f"plain{_d}_imagenet", "plain_imagenet", depth=_d, paper="He et al. 2015, Deep Residual "
                    f"Learning for Image Recognition, Table 2 (plain-{_d})")
    register_preset(f"resnet{_d}_a", "resnet_imagenet", depth=_d, shortcut="A", paper="He et al. 2015, Deep "
                    f"Residual Learning for Image Recognition, Table 2 (ResNet-{_d}, option A)")
register_preset("resnet_imagenet_a", "resnet_imagenet", shortcut="A", paper=f"{HE2015} (option-A shortcuts, Table 2)")
