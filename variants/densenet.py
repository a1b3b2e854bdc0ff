"""DenseNet for CIFAR: Huang, Liu, van der Maaten & Weinberger 2017, "Densely Connected Convolutional
Networks", §3 and Table 2.

Three dense blocks of n layers joined by transitions (BN-ReLU-1×1 conv-2×2 average pool); each layer
adds ``growth_rate`` (k) feature maps, ``y = [x, H(x)]`` through the ``Concat`` combinator, with
H = BN-ReLU-3×3 conv, or for DenseNet-BC H = BN-ReLU-1×1 conv (4k)-BN-ReLU-3×3 conv and transitions
that halve the channels (compression θ = 0.5). The stem is a 3×3 conv with 16 (2k for BC) filters; the
net ends with BN-ReLU, global average pooling and a linear classifier.

``memory_efficient=True`` recomputes the concatenation-BN-ReLU-conv of each layer in the backward pass
(``torch.utils.checkpoint``), so the concatenated inputs are not kept: Pleiss et al. 2017,
"Memory-Efficient Implementation of DenseNets".
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from timm.layers import DropPath
from torch import nn
from torch.utils.checkpoint import checkpoint

from .checks import check_positive, flag, rate
from .combinators import Concat
from .layers import ConvNet, InitArg, check_init, conv1x1, conv3x3, drop_path_rates, init_weights_
from .registry import register, register_preset

HUANG = "Huang et al. 2017, Densely Connected Convolutional Networks, Table 2"


class DenseLayer(nn.Module):
    """Huang et al. 2017, eq. 2: ``x_l = [x_0, ..., x_{l-1}, H_l([x_0, ..., x_{l-1}])]``, H = BN-ReLU-conv3×3
    (BC: BN-ReLU-conv1×1 (4k)-BN-ReLU-conv3×3).

    ``forward(stream, features)`` returns the new stream ``[stream, new]`` and ``new``. Not a
    ``variants.blocks.ResidualUnit``: a dense layer also takes the list of earlier features (for the
    memory-efficient path), but it joins through a Combinator (``Concat``) all the same, so probes see it.

    ``features`` lists the tensors the stream concatenates; the memory-efficient path reads them instead
    of the stream, so the stream only feeds the (save-nothing) concatenation of the combinator.
    """

    placement = "pre"  # BN-ReLU before the convolution, nothing after the concatenation

    def __init__(
        self, cin: int, growth: int, bc: bool, drop_rate: float, drop_path: float, memory_efficient: bool
    ) -> None:
        super().__init__()
        self.norm = nn.BatchNorm2d(cin)
        self.act = nn.ReLU()
        self.conv = conv1x1(cin, 4 * growth) if bc else conv3x3(cin, growth)
        self.drop = nn.Dropout(drop_rate)  # Huang §4.2: dropout after each conv (no augmentation runs)
        rest = [nn.BatchNorm2d(4 * growth), nn.ReLU(), conv3x3(4 * growth, growth), nn.Dropout(drop_rate)]
        self.rest = nn.Sequential(*rest) if bc else nn.Identity()
        self.drop_path = DropPath(drop_path)
        self.combine = Concat()
        self.memory_efficient = memory_efficient
        self._stats_updated = False

    def _norm_recomputable(self, x: torch.Tensor) -> torch.Tensor:
        # A checkpointed BN runs twice; only the first run may update the running statistics. The
        # recomputation runs the same op on throw-away copies of the statistics (same saved tensors, which
        # checkpoint verifies), so outputs, gradients and running statistics all match the plain path.
        n = self.norm
        if self._stats_updated and n.training and n.running_mean is not None and n.running_var is not None:
            mean, var = n.running_mean.clone(), n.running_var.clone()
            return F.batch_norm(x, mean, var, n.weight, n.bias, training=True, momentum=0.0, eps=n.eps)
        self._stats_updated = True
        return self.norm(x)

    def _concat_bn_relu_conv(self, *features: torch.Tensor) -> torch.Tensor:
        return self.conv(self.act(self._norm_recomputable(torch.cat(features, 1))))

    def forward(self, stream: torch.Tensor, features: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        if self.memory_efficient and torch.is_grad_enabled() and any(f.requires_grad for f in features):
            self._stats_updated = False
            h = checkpoint(self._concat_bn_relu_conv, *features, use_reentrant=False)
        else:
            h = self.conv(self.act(self.norm(stream)))
        new = self.drop_path(self.rest(self.drop(h)))
        return self.combine(stream, new), new


class DenseBlock(nn.Module):
    def __init__(self, layers: list[DenseLayer]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.layers:
            x, new = layer(x, features)
            features.append(new)
        return x


class Transition(nn.Sequential):
    """Huang et al. 2017 §3 ("Pooling layers"), between dense blocks: BN-ReLU-conv1×1-(dropout)-avgpool 2×2."""

    def __init__(self, cin: int, cout: int, drop_rate: float) -> None:
        super().__init__(nn.BatchNorm2d(cin), nn.ReLU(), conv1x1(cin, cout), nn.Dropout(drop_rate), nn.AvgPool2d(2))


def layers_per_block(depth: int, bc: bool) -> int:
    """Huang §4.2: L = 3n+4 (3 blocks of n layers, stem, 2 transitions, classifier); BC layers hold 2 convs."""
    step, name, examples = (6, "DenseNet-BC", "100, 190, 250") if bc else (3, "DenseNet", "40, 100")
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < step + 4 or (depth - 4) % step:
        raise ValueError(f"{name} depth must be {step}n+4 with n >= 1 (e.g. {examples}), got {depth!r}")
    return (depth - 4) // step


@register("densenet", family="densenet", paper=HUANG)
def densenet(
    *,
    depth: int = 40,
    growth_rate: int = 12,
    bc: bool = False,
    num_classes: int = 10,
    in_chans: int = 3,
    drop_rate: float = 0.0,
    drop_path_rate: float = 0.0,
    memory_efficient: bool = False,
    init: InitArg = "kaiming",
) -> nn.Module:
    """CIFAR DenseNet (``bc=True``: DenseNet-BC). ``drop_rate`` is Huang's dropout (0.2 without augmentation);
    ``drop_path_rate`` drops a layer's new feature maps per sample (linear decay). ``init`` is one of
    ``variants.layers.INIT_SCHEMES``; ``kaiming`` (default) is the He-normal draw of Huang et al.'s code."""
    flag("bc", bc)
    n = layers_per_block(depth, bc)
    check_positive(growth_rate=growth_rate, num_classes=num_classes, in_chans=in_chans)
    check_init(init)
    rate("drop_rate", drop_rate)
    flag("memory_efficient", memory_efficient)
    rates = iter(drop_path_rates(drop_path_rate, 3 * n))
    channels = 2 * growth_rate if bc else 16
    stem = conv3x3(in_chans, channels)
    stages = []
    for b in range(3):
        layers = []
        for _ in range(n):
            layers.append(DenseLayer(channels, growth_rate, bc, drop_rate, next(rates), memory_efficient))
            channels += growth_rate
        stage: list[nn.Module] = [DenseBlock(layers)]
        if b < 2:
            out = channels // 2 if bc else channels  # compression θ = 0.5 for BC, else 1
            stage.append(Transition(channels, out, drop_rate))
            channels = out
        stages.append(stage)
    head = nn.Sequential(nn.BatchNorm2d(channels), nn.ReLU())
    return init_weights_(ConvNet(stem, stages, head, channels, num_classes), init)


register_preset("densenet40_k12", "densenet", depth=40, growth_rate=12, paper=f"{HUANG} (1.0M)")
register_preset("densenet100_k12", "densenet", depth=100, growth_rate=12, paper=f"{HUANG} (7.0M)")
register_preset("densenet100_k24", "densenet", depth=100, growth_rate=24, paper=f"{HUANG} (27.2M)")
register_preset("densenet_bc100_k12", "densenet", depth=100, growth_rate=12, bc=True, paper=f"{HUANG} (0.8M)")
register_preset("densenet_bc250_k24", "densenet", depth=250, growth_rate=24, bc=True, paper=f"{HUANG} (15.3M)")
register_preset("densenet_bc190_k40", "densenet", depth=190, growth_rate=40, bc=True, paper=f"{HUANG} (25.6M)")
