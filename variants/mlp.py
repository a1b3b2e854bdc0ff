"""Fully-connected stacks: plain, Highway, residual and pre-activation.

The setting is Srivastava, Greff & Schmidhuber 2015, "Training Very Deep Networks", §3.1 (MNIST, Fig. 1):
a first plain fully-connected layer, then ``depth - 1`` plain or highway layers, then a softmax layer;
thin layers of 71 units (plain) or 50 (highway, whose gate doubles the weights), ≈5000 parameters per
layer either way, depths 10/20/50/100. Transform-gate biases start at -2 for MNIST (Srivastava et al.
2015, "Highway Networks", §4). ``residual_mlp`` and ``preact_mlp`` put He et al.'s units on the same
stack: ``act(x + norm(W·x))`` ("Deep Residual Learning for Image Recognition", 2015) and
``x + W·act(norm(x))`` ("Identity Mappings in Deep Residual Networks", 2016), one layer per unit so
their parameters per layer match the plain net's.

``highway_mlp`` is Srivastava's layer as written (no adaptation): H and T are each one affine map of the
layer input, H with the nonlinearity and T a sigmoid, with the same width, so the carry is the identity.
Every builder takes ``init`` (``variants.layers.INIT_SCHEMES``); ``kaiming`` (default) is the He-normal
fan-in draw with each layer's own activation gain (:func:`linear`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, cast

import torch
from torch import nn

from .combinators import Add, Gate, NoShortcut, TransformGate
from .layers import Unit, check_init, check_positive, init_weights_
from .placements import Residual, drop_path_rates
from .registry import register, register_preset

SRIVASTAVA = "Srivastava et al. 2015, Training Very Deep Networks, §3.1 / Fig. 1"

Nonlinearity = Literal["relu", "tanh", "sigmoid"]
ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh}
NORMS: dict[str, Callable[[int], nn.Module]] = {
    "none": lambda width: nn.Identity(),
    "batch": nn.BatchNorm1d,
    "layer": nn.LayerNorm,
}


def linear(cin: int, cout: int, activation: str) -> nn.Linear:
    """A hidden layer with variance-preserving init for its activation (He 2015 for ReLU, tanh gain 5/3)."""
    layer = nn.Linear(cin, cout)
    nn.init.kaiming_normal_(layer.weight, nonlinearity=cast(Nonlinearity, activation))
    nn.init.zeros_(layer.bias)
    return layer


class MLP(nn.Module):
    """``flatten -> stem -> units -> head_pre -> linear`` classifier."""

    def __init__(self, stem: nn.Module, units: list[nn.Module], head_pre: nn.Module, width: int, num_classes: int):
        super().__init__()
        self.stem = nn.Sequential(nn.Flatten(), stem)
        self.blocks = nn.Sequential(*units)
        self.head = nn.Sequential(head_pre, nn.Linear(width, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


Factory = Callable[[], nn.Module]
UnitFn = Callable[[float, Factory, Factory], nn.Module]


def build_mlp(
    depth: int, width: int, num_classes: int, in_chans: int, image_size: int, activation: str, norm: str,
    unit: UnitFn, drop_path_rate: float = 0.0, preact: bool = False, init: str = "kaiming",
) -> MLP:
    """``depth`` hidden layers: a plain first layer, then ``depth - 1`` units ``unit(drop_path, act, norm)``,
    initialised by ``init``.

    Stochastic depth decays linearly over the units (Huang et al. 2016, "Deep Networks with Stochastic Depth").
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"MLP depth must be an integer >= 1 (hidden layers: 1 plain + depth-1 units), got {depth!r}")
    check_positive(width=width, num_classes=num_classes, in_chans=in_chans, image_size=image_size)
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {tuple(ACTIVATIONS)}, got {activation!r}")
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {tuple(NORMS)}, got {norm!r}")
    check_init(init)

    def act() -> nn.Module:
        return ACTIVATIONS[activation]()

    def nrm() -> nn.Module:
        return NORMS[norm](width)

    first = linear(in_chans * image_size**2, width, activation)
    # A pre-activation stack leaves the activation of each layer to the next unit and to the head.
    stem = first if preact else nn.Sequential(first, nrm(), act())
    head_pre = nn.Sequential(nrm(), act()) if preact else nn.Identity()
    rates = drop_path_rates(drop_path_rate, depth - 1) if depth > 1 else []
    units = [unit(rate, act, nrm) for rate in rates]
    return init_weights_(MLP(stem, units, head_pre, width, num_classes), init)


@register("plain_mlp", family="mlp", paper=SRIVASTAVA, axes={"combinator": "none", "placement": "none", "body": "mlp"})
def plain_mlp(
    depth: int = 10, width: int = 71, num_classes: int = 10, in_chans: int = 1, image_size: int = 28,
    activation: str = "relu", norm: str = "none", init: str = "kaiming",
) -> nn.Module:
    """Plain layers ``y = act(norm(W·x + b))``."""

    def unit(drop_path: float, act: Factory, nrm: Factory) -> nn.Module:
        return Residual(nn.Sequential(linear(width, width, activation), nrm(), act()), NoShortcut(), "none")

    return build_mlp(depth, width, num_classes, in_chans, image_size, activation, norm, unit, init=init)


@register("highway_mlp", family="mlp", paper=SRIVASTAVA,
          axes={"combinator": "gate", "placement": "none", "body": "mlp"})
def highway_mlp(
    depth: int = 10, width: int = 50, num_classes: int = 10, in_chans: int = 1, image_size: int = 28,
    activation: str = "relu", norm: str = "none", gate_bias: float = -2.0, drop_path_rate: float = 0.0,
    init: str = "kaiming",
) -> nn.Module:
    """Highway layers ``y = T·H(x) + (1-T)·x``, ``H = act(norm(W_H·x))``, ``T = sigmoid(W_T·x + b_T)``."""
    def unit(drop_path: float, act: Factory, nrm: Factory) -> nn.Module:
        gate = TransformGate(linear(width, width, "sigmoid"), gate_bias)
        body = nn.Sequential(linear(width, width, activation), nrm(), act())
        return Residual(body, Gate(gate), "none", drop_path=drop_path)

    return build_mlp(depth, width, num_classes, in_chans, image_size, activation, norm, unit, drop_path_rate,
                     init=init)


@register("residual_mlp", family="mlp", paper="He et al. 2015, Deep Residual Learning for Image Recognition, §3.2",
          # The norm sits inside the branch and the activation after the join: He 2016's "post-activation"
          # (the CNN resnet's label), not the "post" of variants.placements, norm(x + F(x)).
          axes={"combinator": "add", "placement": "post-activation", "body": "mlp"})
def residual_mlp(
    depth: int = 10, width: int = 71, num_classes: int = 10, in_chans: int = 1, image_size: int = 28,
    activation: str = "relu", norm: str = "batch", drop_path_rate: float = 0.0, init: str = "kaiming",
) -> nn.Module:
    """Post-activation residual layers ``y = act(x + norm(W·x + b))``."""
    def unit(drop_path: float, act: Factory, nrm: Factory) -> nn.Module:
        return Unit(nn.Sequential(linear(width, width, activation), nrm()), Add(), post=act(), drop_path=drop_path)

    return build_mlp(depth, width, num_classes, in_chans, image_size, activation, norm, unit, drop_path_rate,
                     init=init)


@register("preact_mlp", family="mlp", paper="He et al. 2016, Identity Mappings in Deep Residual Networks, §4.1",
          axes={"combinator": "add", "placement": "pre", "body": "mlp"})
def preact_mlp(
    depth: int = 10, width: int = 71, num_classes: int = 10, in_chans: int = 1, image_size: int = 28,
    activation: str = "relu", norm: str = "batch", drop_path_rate: float = 0.0, init: str = "kaiming",
) -> nn.Module:
    """Pre-activation residual layers ``y = x + W·act(norm(x)) + b``; the head applies the last norm-act."""
    def unit(drop_path: float, act: Factory, nrm: Factory) -> nn.Module:
        return Residual(nn.Sequential(act(), linear(width, width, activation)), Add(), "pre", norm=nrm,
                        drop_path=drop_path)

    return build_mlp(
        depth, width, num_classes, in_chans, image_size, activation, norm, unit, drop_path_rate, preact=True,
        init=init,
    )


for _d in (10, 20, 50, 100):
    register_preset(f"plain_mlp{_d}", "plain_mlp", depth=_d, paper=f"{SRIVASTAVA} (plain, depth {_d})")
    register_preset(f"highway_mlp{_d}", "highway_mlp", depth=_d, paper=f"{SRIVASTAVA} (highway, depth {_d})")
