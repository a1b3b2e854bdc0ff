"""Axis 1 of the variant space: how a shortcut joins its branch, ``y = combine(x, F(x))``.

Every combinator is a module whose ``forward(x, fx)`` takes the shortcut ``x`` and the branch
output ``fx``. Probes in the harness hook these modules (their inputs are the shortcut and the
branch, their output the residual stream), so no variant needs probe-specific code.

- ``none``: plain network, ``y = F(x)``.
- ``add``: ResNet identity shortcut, ``y = x + F(x)`` (He et al. 2015, "Deep Residual Learning").
- ``gate``: Highway, ``y = T(x)·F(x) + (1 - T(x))·x`` with the transform-gate bias initialised
  negative (Srivastava et al. 2015, "Training Very Deep Networks"); ``mode="shortcut_only"`` is
  He et al. 2016 Table 1's shortcut-only gating, ``y = F(x) + (1 - T(x))·x``.
- ``concat``: DenseNet, ``y = [x, F(x)]`` along channels (Huang et al. 2017).
- ``scaled``: ``y = α·x + β·F(x)``: ReZero/SkipInit (β a learnable scalar starting at 0),
  LayerScale (β per channel, small init), DeepNorm (α fixed > 1), He 2016's constant scaling.
"""

from __future__ import annotations

import torch
from torch import nn


class Combinator(nn.Module):
    """Base class: ``forward(x, fx)`` joins shortcut ``x`` and branch output ``fx``.

    ``axis`` (a class attribute) is the name the variant's ``combinator`` axis reports; a subclass without
    one reports its class name.
    """

    def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


class NoShortcut(Combinator):
    """Plain network: the shortcut is dropped, ``y = F(x)``."""

    axis = "none"

    def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        return fx


class Add(Combinator):
    """Identity shortcut, ``y = x + F(x)``."""

    axis = "add"

    def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        return x + fx


class TransformGate(nn.Module):
    """Highway transform gate ``T(x) = sigmoid(proj(x))``; ``proj``'s bias starts at ``bias_init``.

    A negative bias makes the block start close to the carry (identity) behaviour, which is what
    lets very deep Highway nets train (Srivastava 2015 §2.2 suggests -1 to -3; He 2016 §3.1 found -6
    best for its exclusive gating).
    """

    def __init__(self, proj: nn.Module, bias_init: float) -> None:
        super().__init__()
        self.proj = proj
        bias = getattr(proj, "bias", None)
        if bias is None:
            raise ValueError("the transform gate's projection must have a bias")
        nn.init.constant_(bias, bias_init)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.proj(x))


class Gate(Combinator):
    """Highway combination ``T·F(x) + (1-T)·x`` (``mode="highway"``) or ``F(x) + (1-T)·x`` (``"shortcut_only"``)."""

    axis = "gate"

    MODES = ("highway", "shortcut_only")

    def __init__(self, gate: TransformGate, mode: str = "highway") -> None:
        super().__init__()
        if mode not in self.MODES:
            raise ValueError(f"gate mode must be one of {self.MODES}, got {mode!r}")
        self.gate = gate
        self.mode = mode

    def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        t = self.gate(x)
        carry = (1.0 - t) * x
        return t * fx + carry if self.mode == "highway" else fx + carry


class Concat(Combinator):
    """DenseNet: concatenate shortcut and branch along the channel dimension (dim 1)."""

    axis = "concat"

    def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, fx], dim=1)


class Scaled(Combinator):
    """``y = α·x + β·F(x)``.

    ``alpha`` is a fixed float (DeepNorm's α = (2N)^¼, He 2016's 0.5). ``beta`` is either a fixed
    float or, with ``learnable_beta``, a parameter of shape ``beta_shape`` initialised to ``beta``
    (ReZero/SkipInit: scalar 0; LayerScale: per channel, 1e-1 .. 1e-6). ``channel_dim`` says where
    the channels of a per-channel β sit (1 for NCHW images, -1 for token sequences).
    """

    axis = "scaled"

    def __init__(
        self,
        alpha: float = 1.0,
        beta: float = 1.0,
        learnable_beta: bool = False,
        beta_shape: tuple[int, ...] = (),
        channel_dim: int = 1,
    ) -> None:
        super().__init__()
        self.alpha = float(alpha)
        self.channel_dim = channel_dim
        if learnable_beta:
            self.beta = nn.Parameter(torch.full(beta_shape, float(beta)))
        else:
            self.register_buffer("beta", torch.tensor(float(beta)), persistent=False)

    def _shaped_beta(self, fx: torch.Tensor) -> torch.Tensor:
        if self.beta.dim() == 0:
            return self.beta
        shape = [1] * fx.dim()
        shape[self.channel_dim] = -1
        return self.beta.view(shape)

    def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        return self.alpha * x + self._shaped_beta(fx) * fx


COMBINATORS: dict[str, type[Combinator]] = {
    "none": NoShortcut,
    "add": Add,
    "gate": Gate,
    "concat": Concat,
    "scaled": Scaled,
}
