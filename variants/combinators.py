"""Axis 1 of the variant space: how a shortcut joins its branch, ``y = combine(x, F(x))``.

Every combinator is a module whose ``forward(x, fx)`` takes the shortcut ``x`` and the branch
output ``fx``. Probes in the harness hook these modules (their inputs are the shortcut and the
branch, their output the residual stream), so no variant needs probe-specific code. In the formulas
below ``x`` is what the join receives: a unit's carry ``shortcut(x)`` (``x`` itself where the shortcut
is the identity), and ``F(x)`` the branch output.

- ``none``: plain network, ``y = F(x)``.
- ``add``: ResNet identity shortcut, ``y = x + F(x)`` (He et al. 2015, "Deep Residual Learning").
- ``gate``: Highway, ``y = T(x)·F(x) + (1 - T(x))·x`` with the transform-gate bias initialised
  negative (Srivastava et al. 2015, "Training Very Deep Networks"); the gate T reads the carry the
  join receives, so in a unit whose shortcut reshapes, T reads ``shortcut(x)`` (see
  ``variants.blocks.HighwayUnit``); ``mode="shortcut_only"`` is He et al. 2016 Table 1's
  shortcut-only gating, ``y = F(x) + (1 - T(x))·x``.
- ``concat``: DenseNet, ``y = [x, F(x)]`` along channels (Huang et al. 2017).
- ``scaled``: ``y = α·x + β·F(x)``: ReZero/SkipInit (β a learnable scalar starting at 0),
  LayerScale (β per channel, small init), DeepNorm (α fixed > 1), He 2016's constant scaling.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import torch
from torch import nn

from . import axes, init_marks, roles


class Combinator(nn.Module):
    """``y = combine(x, F(x))``: the base class; ``forward(x, fx)`` joins shortcut ``x`` and branch output ``fx``.

    ``axis`` (a class attribute) is the name the variant's ``combinator`` axis reports; a subclass without
    one reports its class name. ``residual_role = "join"`` is what the harness recognises a join by
    (:mod:`variants.roles`: a plugin's join may declare it without subclassing this class).
    """

    residual_role = roles.JOIN
    # How the join computes where it has more than one way to (a mode, "eager" or "compiled", -> in words); empty:
    # as its forward is written, in both (:func:`implementation`).
    kernels: ClassVar[Mapping[str, str]] = {}

    def residual_scalars(self) -> dict[str, torch.Tensor | float]:
        """The join's scalars by their symbol in its formula (:mod:`variants.roles`); none by default."""
        return {}

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

    ``x`` is what :class:`Gate` hands it: the join's shortcut input, i.e. a unit's carry ``shortcut(x)``.

    A negative bias makes the block start close to the carry (identity) behaviour, which is what
    lets very deep Highway nets train (Srivastava 2015 §2.2 suggests -1 to -3; He 2016 §3.1 found -6
    best for its exclusive gating).
    """

    residual_role = roles.GATE

    def __init__(self, proj: nn.Module, bias_init: float) -> None:
        super().__init__()
        self.proj = proj
        bias = getattr(proj, "bias", None)
        if bias is None:
            raise ValueError("the transform gate's projection must have a bias")
        nn.init.constant_(bias, bias_init)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.proj(x))

    def residual_scalars(self) -> dict[str, torch.Tensor | float]:
        """The gate's bias (mean over its entries where recorded): what starts the unit near its carry."""
        bias = self.proj.bias
        return {"bias": bias} if isinstance(bias, torch.Tensor) else {}


class Gate(Combinator):
    """Highway join ``y = T(x)·F(x) + (1 - T(x))·x`` (``mode="highway"``) or ``y = F(x) + (1 - T(x))·x``.

    ``mode="shortcut_only"`` is the second (He et al. 2016, Table 1). ``T = gate`` (a :class:`TransformGate`)
    reads ``x``, the shortcut input of the join: in a unit whose shortcut reshapes, that is ``shortcut(x)``.
    """

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
    """``y = [x, F(x)]``: DenseNet's join, shortcut and branch concatenated along the channel dimension (dim 1)."""

    axis = "concat"

    def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, fx], dim=1)


class Scaled(Combinator):
    """``y = α·x + β·F(x)``.

    ``alpha`` is a fixed float (DeepNorm's α = (2N)^¼, He 2016's 0.5) or, with ``alpha_shape``, a learnable
    parameter of that shape initialised to ``alpha`` (Admin's per-dimension ω, Liu et al. 2020). ``beta`` is
    either a fixed float or, with ``learnable_beta``, a parameter of shape ``beta_shape`` initialised to
    ``beta`` (ReZero/SkipInit: scalar 0; LayerScale: per channel, 1e-1 .. 1e-6). ``channel_dim`` says where
    the channels of a per-channel α or β sit (1 for NCHW images, -1 for token sequences).
    """

    axis = "scaled"

    def __init__(
        self,
        alpha: float = 1.0,
        beta: float = 1.0,
        learnable_beta: bool = False,
        beta_shape: tuple[int, ...] = (),
        channel_dim: int = 1,
        alpha_shape: tuple[int, ...] | None = None,
    ) -> None:
        super().__init__()
        self.alpha: float | torch.Tensor = float(alpha)
        if alpha_shape is not None:
            self.alpha = nn.Parameter(torch.full(alpha_shape, float(alpha)))
        self.channel_dim = channel_dim
        if learnable_beta:
            self.beta = nn.Parameter(torch.full(beta_shape, float(beta)))
        else:
            self.register_buffer("beta", torch.tensor(float(beta)), persistent=False)

    def _shaped(self, scale: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        if scale.dim() == 0:
            return scale
        shape = [1] * like.dim()
        shape[self.channel_dim] = -1
        return scale.view(shape)

    def residual_scalars(self) -> dict[str, torch.Tensor | float]:
        """α (the shortcut's scale) and β (the branch's): parameters where learned."""
        return {"alpha": self.alpha, "beta": self.beta}

    def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        alpha = self._shaped(self.alpha, x) if isinstance(self.alpha, torch.Tensor) else self.alpha
        return alpha * x + self._shaped(self.beta, fx) * fx


class Laurel(Combinator):
    """``y = α·F(x) + β·(x + B·A·x)`` on the last (feature) dimension: Menghani et al. 2025, eq. 5 (RW+LR).

    "LAuReL: Learned Augmented Residual Layer" (ICML 2025), in three forms:

    - ``"rw"`` (§2.1) keeps the learned weights ``α``, ``β`` only; the paper bounds them with "softmax or
      sigmoid" and gives no init: here ``α = 2σ(a)``, ``β = 2σ(b)`` with ``a = b = 0``, so the join starts as
      the plain residual ``x + F(x)`` and each weight stays in (0, 2).
    - ``"lr"`` (§2.2, eq. 3) keeps the low-rank term only, ``y = F(x) + x + B·A·x``: ``A`` (d → r) starts
      "column orthogonal" (§3.3 footnote: 1/√(r·d) where i mod r = j), ``B`` (r → d) at 0, so again the plain
      residual at init.
    - ``"rw+lr"``: both (the form of the paper's LLM runs, r = 4 in LLM-1B, §3.2.1).
    """

    axis = "laurel"
    FORMS = ("rw", "lr", "rw+lr")

    def __init__(self, d_model: int, form: str = "rw+lr", rank: int = 4) -> None:
        super().__init__()
        if not isinstance(form, str) or form not in self.FORMS:
            raise ValueError(f"LAuReL form must be one of {self.FORMS}, got {form!r}")
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise ValueError(f"LAuReL rank must be a positive integer, got {rank!r}")
        self.form = form
        self.weights = nn.Parameter(torch.zeros(2)) if "rw" in form else None  # (a, b): α = 2σ(a), β = 2σ(b)
        self.down = self.up = None
        if "lr" in form:
            self.down = nn.Linear(d_model, rank, bias=False)  # A
            self.up = nn.Linear(rank, d_model, bias=False)  # B
            with torch.no_grad():
                cols = torch.arange(d_model) % rank
                self.down.weight.zero_()
                self.down.weight[cols, torch.arange(d_model)] = (rank * d_model) ** -0.5
                self.up.weight.zero_()
            init_marks.mark_init(self.down, "own")  # the structured start above, not the Transformer scheme's draw
            init_marks.mark_init(self.up, "zero")

    def residual_scalars(self) -> dict[str, torch.Tensor | float]:
        """The learned weights α = 2σ(a) of the branch and β = 2σ(b) of the carry (forms with ``rw``)."""
        if self.weights is None:
            return {}
        alpha, beta = 2 * torch.sigmoid(self.weights)
        return {"alpha": alpha, "beta": beta}

    def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        carry = x if self.down is None or self.up is None else x + self.up(self.down(x))
        if self.weights is None:
            return fx + carry
        alpha, beta = 2 * torch.sigmoid(self.weights)
        return alpha * fx + beta * carry


COMBINATORS: dict[str, type[Combinator]] = {
    "none": NoShortcut,
    "add": Add,
    "gate": Gate,
    "concat": Concat,
    "scaled": Scaled,
    "laurel": Laurel,
}
axes.ship("combinator", COMBINATORS, base=Combinator)


AS_WRITTEN = "as written"


def implementation(model: nn.Module, mode: str) -> str:
    """How ``model``'s joins compute in ``mode`` ("eager" or "compiled", under ``torch.compile``): the distinct
    descriptions of its joins that declare :attr:`Combinator.kernels` for that mode, by class, or ``as written``. The
    harness records it beside every cost figure, so a table says which implementation its rows timed."""
    found = {f"{type(m).__name__}: {m.kernels[mode]}" for m in model.modules()
             if isinstance(m, Combinator) and mode in m.kernels}
    return "; ".join(sorted(found)) or AS_WRITTEN

