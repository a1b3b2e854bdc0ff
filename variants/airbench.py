"""airbench's CIFAR-10 net: no shortcut anywhere, yet the fastest-training CIFAR-10 net there is.

Jordan 2024, "94% on CIFAR-10 in 3.29 Seconds on a Single GPU" (arXiv 2404.00498), §3, and its code (airbench94,
github.com/KellerJordan/cifar10-airbench): a 2×2 patch-whitening convolution (24 channels) and a GELU, three blocks of
``GELU(BN(conv₃ₓ₃(GELU(BN(MaxPool₂(conv₃ₓ₃(x)))))))`` at widths 64, 256, 256, a 3×3 max pool, a bias-free linear
classifier and a fixed 1/9 scale on the logits. Its convolutions start as the identity: the first C_in filters of each
3×3 kernel are Dirac deltas (``nn.init.dirac_``), the rest PyTorch's default draw, so at init each conv passes its
input through and the stack starts close to the identity a residual net starts at, with no shortcut. The BNs have no
learnable gain (airbench freezes it at 1; here it is absent) and ε = 1e-12; momentum 0.4 (airbench's 0.6 as PyTorch
counts it).

Where this differs from airbench: its whitening weights are computed from the training images (the eigenvectors of
the 2×2 patches' covariance) and frozen, while a model here is built before it sees data, so the whitening layer is a
learnable 2×2 convolution with PyTorch's draw; its training recipe (Nesterov SGD with label smoothing, lookahead,
test-time flips and translations, the whitening bias frozen after 3 epochs) is the run's, not the model's. The layers
are :class:`~variants.blocks.ResidualUnit` with a ``NoShortcut`` join, ``y = F(x)``, so probes see every one of them.
``identity_init=False`` draws every filter PyTorch's way: the ablation of the one thing that stands in for a shortcut.
"""

from __future__ import annotations

import torch
from torch import nn

from .blocks import ResidualUnit
from .checks import check_positive, flag
from .combinators import NoShortcut
from .registry import register

AIRBENCH_PAPER = ("Jordan 2024, 94% on CIFAR-10 in 3.29 Seconds on a Single GPU (arXiv 2404.00498), §3; airbench94's "
                  "net (identity-initialised convs, no shortcut)")
WIDTHS = (64, 256, 256)
WHITEN_WIDTH = 24  # 2·3·2²: the whitening layer's channels
LOGIT_SCALE = 1 / 9
BN_EPS, BN_MOMENTUM = 1e-12, 0.4  # airbench's eps; its momentum 0.6 in its own convention, 1 − 0.6 in PyTorch's


class BiasOnlyBatchNorm(nn.BatchNorm2d):
    """``y = (x − μ)/√(σ² + ε) + β``: BN with its gain fixed at 1 (airbench freezes it)."""

    def __init__(self, channels: int) -> None:
        super().__init__(channels, eps=BN_EPS, momentum=BN_MOMENTUM, affine=False)
        self.bias_ = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + self.bias_.view(1, -1, 1, 1)


def identity_conv(cin: int, cout: int, identity: bool) -> nn.Conv2d:
    """A bias-free 3×3 'same' convolution whose first ``cin`` filters are Dirac deltas where ``identity``."""
    conv = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
    if identity and not conv.weight.is_meta:
        with torch.no_grad():
            nn.init.dirac_(conv.weight[:cin])
    return conv


class AirbenchLayer(ResidualUnit):
    """``y = GELU(BN(pool(conv₃ₓ₃(x))))``: one layer of an airbench block (``pool`` a 2×2 max pool in its first layer,
    the identity in its second), no shortcut (the ``NoShortcut`` join keeps ``F(x)`` alone)."""

    def __init__(self, cin: int, cout: int, *, pool: bool, identity: bool) -> None:
        body = nn.Sequential(identity_conv(cin, cout, identity), nn.MaxPool2d(2) if pool else nn.Identity(),
                             BiasOnlyBatchNorm(cout), nn.GELU())
        super().__init__(body, NoShortcut())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.combine(x, self.body(x))


class Airbench(nn.Module):
    """``whiten -> 3 × (layer, layer) -> MaxPool₃ -> linear / 9``: airbench94's net."""

    def __init__(self, widths: tuple[int, ...], num_classes: int, in_chans: int, identity: bool) -> None:
        super().__init__()
        self.whiten = nn.Sequential(nn.Conv2d(in_chans, WHITEN_WIDTH, 2), nn.GELU())
        layers, cin = [], WHITEN_WIDTH
        for width in widths:
            layers += [AirbenchLayer(cin, width, pool=True, identity=identity),
                       AirbenchLayer(width, width, pool=False, identity=identity)]
            cin = width
        self.blocks = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.whiten(x))) * LOGIT_SCALE


# init="airbench": the paper's own scheme (Dirac-initialised convs), pinned as Fixup's is.
@register("airbench94", family="airbench", paper=AIRBENCH_PAPER, init="airbench")
def airbench94(*, num_classes: int = 10, in_chans: int = 3, width: int = 64, identity_init: bool = True,
               init: str = "airbench") -> nn.Module:
    """airbench94's net; ``width`` scales its widths (64, 256, 256) by width/64; ``identity_init=False`` gives every
    filter PyTorch's draw instead of the Dirac deltas."""
    check_positive(num_classes=num_classes, in_chans=in_chans, width=width)
    flag("identity_init", identity_init)
    if init != "airbench":
        raise ValueError(f"airbench94's initialisation is its paper's own scheme: init must be 'airbench', "
                         f"got {init!r}")
    widths = tuple(max(1, w * width // 64) for w in WIDTHS)
    return Airbench(widths, num_classes, in_chans, identity_init)
