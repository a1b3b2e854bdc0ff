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
from dataclasses import dataclass
from typing import Literal, cast

import torch
from torch import nn

from . import axes, init_marks
from .blocks import HighwayUnit, PostActivation, PreNorm, ResidualUnit
from .checks import check_positive, choice, real
from .combinators import Add, NoShortcut
from .layers import InitArg, check_init, drop_path_rates, init_weights_
from .registry import register, register_preset

SRIVASTAVA = "Srivastava et al. 2015, Training Very Deep Networks, §3.1 / Fig. 1"

Nonlinearity = Literal["relu", "tanh", "sigmoid"]
ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh}
NORMS: dict[str, Callable[[int], nn.Module]] = {
    "none": lambda width: nn.Identity(),
    "batch": nn.BatchNorm1d,
    "layer": nn.LayerNorm,
}
axes.ship("norm", NORMS)  # and a norm registered with variants.register_norm, or a factory passed as norm=


def linear(cin: int, cout: int, activation: str) -> nn.Linear:
    """A hidden layer with variance-preserving init for its activation (He 2015 for ReLU, tanh gain 5/3)."""
    layer = nn.Linear(cin, cout)
    nn.init.kaiming_normal_(layer.weight, nonlinearity=cast(Nonlinearity, activation))
    nn.init.zeros_(layer.bias)
    return init_marks.drawn(layer, f"he_fan_in_{activation}")  # its activation's gain: kaiming leaves it


@dataclass(frozen=True, kw_only=True)
class MlpSpec:
    """What every fully-connected stack takes, validated on construction (see ``variants.layers.CifarSpec``)."""

    depth: int = 10  # hidden layers: a plain first layer + depth - 1 units
    width: int = 71
    num_classes: int = 10
    in_chans: int = 1
    image_size: int = 28
    activation: str = "relu"
    norm: str | Callable[..., nn.Module] = "none"  # a name of NORMS, a registered norm, or a norm factory
    drop_path_rate: float = 0.0
    init: InitArg = "kaiming"

    def __post_init__(self) -> None:
        if isinstance(self.depth, bool) or not isinstance(self.depth, int) or self.depth < 1:
            raise ValueError(
                f"MLP depth must be an integer >= 1 (hidden layers: 1 plain + depth-1 units), got {self.depth!r}")
        check_positive(width=self.width, num_classes=self.num_classes, in_chans=self.in_chans,
                       image_size=self.image_size)
        choice("activation", self.activation, ACTIVATIONS)
        self.norm_factory()
        check_init(self.init)
        drop_path_rates(self.drop_path_rate, 1)  # validates the rate

    def act(self) -> nn.Module:
        return ACTIVATIONS[self.activation]()

    def norm_factory(self) -> tuple[str, Callable[..., nn.Module]]:
        """``(name, factory)`` of ``norm``: the stack's own (:data:`NORMS`), a registered one, or the factory given."""
        return axes.lookup("norm", self.norm, NORMS, message=lambda known: (
            f"norm must be one of {tuple(known)} or a norm factory, got {self.norm!r}"))

    def nrm(self) -> nn.Module:
        name, factory = self.norm_factory()
        if name in NORMS and factory is NORMS[name]:
            return factory(self.width)
        return axes.tagged(axes.make_norm(factory, self.width, True), "norm", name)

    def hidden(self) -> nn.Linear:
        """One width × width layer, initialised for the activation."""
        return linear(self.width, self.width, self.activation)


class MLP(nn.Module):
    """``flatten -> stem -> units -> head_pre -> linear`` classifier."""

    def __init__(self, stem: nn.Module, units: list[nn.Module], head_pre: nn.Module, width: int, num_classes: int):
        super().__init__()
        self.stem = nn.Sequential(nn.Flatten(), stem)
        self.blocks = nn.Sequential(*units)
        self.head = nn.Sequential(head_pre, nn.Linear(width, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


def build_mlp(spec: MlpSpec, unit: Callable[[float], nn.Module], *, preact: bool = False) -> MLP:
    """``spec.depth`` hidden layers: a plain first layer, then ``depth - 1`` units ``unit(drop_path)``,
    initialised by ``spec.init``.

    Stochastic depth decays linearly over the units (Huang et al. 2016, "Deep Networks with Stochastic Depth").
    """
    first = linear(spec.in_chans * spec.image_size**2, spec.width, spec.activation)
    # A pre-activation stack leaves the activation of each layer to the next unit and to the head.
    stem = first if preact else nn.Sequential(first, spec.nrm(), spec.act())
    head_pre = nn.Sequential(spec.nrm(), spec.act()) if preact else nn.Identity()
    rates = drop_path_rates(spec.drop_path_rate, spec.depth - 1) if spec.depth > 1 else []
    units = [unit(rate) for rate in rates]
    return init_weights_(MLP(stem, units, head_pre, spec.width, spec.num_classes), spec.init)


@register("plain_mlp", family="mlp", paper=SRIVASTAVA, spec=MlpSpec())
def plain_mlp(spec: MlpSpec) -> nn.Module:
    """Plain layers ``y = act(norm(W·x + b))`` (a unit whose join drops the shortcut)."""
    if spec.drop_path_rate:
        raise ValueError(f"a plain stack has no residual branch to drop: drop_path_rate must be 0, got "
                         f"{spec.drop_path_rate}")
    return build_mlp(spec, lambda rate: ResidualUnit(nn.Sequential(spec.hidden(), spec.nrm(), spec.act()),
                                                     NoShortcut()))


@register("highway_mlp", family="mlp", paper=SRIVASTAVA, spec=MlpSpec(width=50))
def highway_mlp(spec: MlpSpec, *, gate_bias: float = -2.0) -> nn.Module:
    """:class:`~variants.blocks.HighwayUnit` layers ``y = T(x)·H(x) + (1-T(x))·x``, ``H = act(norm(W_H·x))``,
    ``T(x) = sigmoid(W_T·x + b_T)``: every layer keeps the width, so the carry (which the gate reads) is x."""

    real("gate_bias", gate_bias)

    def unit(rate: float) -> nn.Module:
        gate = linear(spec.width, spec.width, "sigmoid")  # drawn before H, as it always has been
        return HighwayUnit(nn.Sequential(spec.hidden(), spec.nrm(), spec.act()), gate, gate_bias, drop_path=rate)

    return build_mlp(spec, unit)


@register("residual_mlp", family="mlp", paper="He et al. 2015, Deep Residual Learning for Image Recognition, §3.2",
          spec=MlpSpec(norm="batch"))
def residual_mlp(spec: MlpSpec) -> nn.Module:
    """:class:`~variants.blocks.PostActivation` layers ``y = act(x + norm(W·x + b))`` (the norm inside the branch,
    the activation after the join: He 2016's "post-activation", not ``norm(x + F(x))``)."""
    return build_mlp(spec, lambda rate: PostActivation(nn.Sequential(spec.hidden(), spec.nrm()), Add(), spec.act(),
                                                       drop_path=rate))


@register("preact_mlp", family="mlp", paper="He et al. 2016, Identity Mappings in Deep Residual Networks, §4.1",
          spec=MlpSpec(norm="batch"))
def preact_mlp(spec: MlpSpec) -> nn.Module:
    """:class:`~variants.blocks.PreNorm` layers ``y = x + W·act(norm(x)) + b``; the head applies the last norm-act."""
    return build_mlp(spec, lambda rate: PreNorm(nn.Sequential(spec.act(), spec.hidden()), Add(), spec.nrm,
                                                drop_path=rate), preact=True)


for _d in (10, 20, 50, 100):
    register_preset(f"plain_mlp{_d}", "plain_mlp", depth=_d, paper=f"{SRIVASTAVA} (plain, depth {_d})")
    register_preset(f"highway_mlp{_d}", "highway_mlp", depth=_d, paper=f"{SRIVASTAVA} (highway, depth {_d})")
