"""Frac-Connections: Hyper-Connections' mixing over m fractions of the hidden state, the width unchanged.

Zhu, Huang, Zhou, Huang, Zeng, Wu, Min & Zhou 2025, "Frac-Connections: Fractional Extension of Hyper-Connections"
(arXiv 2503.14125). Where Hyper-Connections (``variants.hyper``) widen the stream into n copies of d features, a
Frac-Connection reshapes the one stream into m fractions, ``H = Reshape(h, (m, d/m))`` (§3), and mixes those. Its
matrix (§3, the FC matrix of (m + 1) × 2m entries) holds, per sublayer T:

- Γ (m × m), the width connection: the layer input's fraction j is ``Σᵢ Γᵢⱼ·Hᵢ``, and the m fractions are
  concatenated back to width d for T;
- A (m × m), the mixing of the fractions carried forward, and β (m), the weight of T's output fraction j written
  into fraction j: ``H'ⱼ = βⱼ·T(·)ⱼ + Σᵢ Aᵢⱼ·Hᵢ``.

Dynamic Frac-Connections (DFC, the default) add input-dependent terms as Hyper-Connections do (HC Eqs. 10–13), from
``H̄ = norm(H)``, a norm of width d/m applied to each fraction: ``Γ(H) = s_α·tanh(H̄ W_Γ) + Γ``, ``A(H) = s_α·tanh(H̄
W_A) + A``, ``β(H) = s_β·tanh(H̄ w_β) + β``. Init: Γ = A = I, β = 1, W = 0, s_α = s_β = 0.01: every fraction feeds
its own slot, so the model *is* its Pre-LN base at init (tested exactly). Each sublayer's body is Pre-LN's
``F(LN(·))`` of the mixed input (HC §G.1), the family's final norm after the last sublayer.

Where the ``hyper-connections`` package (``num_fracs = m``, 0.4.11) differs: its output mixing sums every output
fraction into every carried fraction (``H'ⱼ = Σᵢ βᵢⱼ·T(·)ᵢ + ...``, a full m × m β whose static part is 1 in every
entry) where the paper's β is one weight per fraction; and its static init reads fraction 0 alone into the layer
(not the identity). Its width connection (Γ, A and their dynamic terms) is the paper's: tests/test_hyper.py
compares that part on copied weights and the rest with a float64 computation by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from . import axes
from .blocks import NormFactory
from .checks import flag, positive_int
from .hyper import GATE_INIT, HyperJoin, HyperLayer, Weights
from .lm_blocks import Stream
from .norms import resolve_norm
from .registry import register
from .transformer import Block, Design, TransformerLM, TransformerSpec, build_transformer

axes.ship("combinator", ["frac"])
FRAC_PAPER = ("Zhu et al. 2025, Frac-Connections: Fractional Extension of Hyper-Connections (arXiv 2503.14125): "
              "m fractions of the stream mixed by an FC matrix per sublayer (§3), dynamic (DFC), Pre-LN base")


class FracConnection(HyperJoin):
    """``H'ⱼ = βⱼ·T(Γᵀ·H)ⱼ + Σᵢ Aᵢⱼ·Hᵢ`` over the m fractions Hᵢ of the stream: Zhu et al. 2025, Frac-Connections (§3).

    ``read(h)`` is the width connection (the layer input, fraction j = ``Σᵢ Γᵢⱼ·Hᵢ``, concatenated to width d); the
    join writes the sublayer's output back. With ``norm`` (a factory of width d/m) the terms are dynamic (DFC)."""

    axis = "frac"

    def __init__(self, m: int, d_model: int, norm: Any = None) -> None:
        super().__init__()
        if d_model % m:
            raise ValueError(f"d_model ({d_model}) must be divisible by the number of fractions m ({m})")
        self.m = m
        self.gamma = nn.Parameter(torch.eye(m))  # Γ: fraction i of the stream -> fraction j of the layer input
        self.a_r = nn.Parameter(torch.eye(m))  # A: fraction i -> fraction j carried forward
        self.b = nn.Parameter(torch.ones(m))  # β: weight of the output's fraction j in fraction j
        self.norm: nn.Module | None = None
        if norm is not None:
            width = d_model // m
            self.norm = norm(width)
            self.w_gamma = nn.Parameter(torch.zeros(width, m))
            self.w_r = nn.Parameter(torch.zeros(width, m))
            self.w_beta = nn.Parameter(torch.zeros(width))
            self.s_alpha = nn.Parameter(torch.tensor(GATE_INIT))
            self.s_beta = nn.Parameter(torch.tensor(GATE_INIT))

    def fractions(self, h: torch.Tensor) -> torch.Tensor:
        """``H = Reshape(h, (m, d/m))``: (..., d) -> (..., m, d/m)."""
        return h.unflatten(-1, (self.m, -1))

    def weights(self, h: torch.Tensor) -> Weights:
        """(Γ, A, β): the parameters, or per token (DFC: row i of Γ and A from fraction i, β_i from fraction i)."""
        if self.norm is None:
            return self.gamma, self.a_r, self.b
        h_bar = self.norm(self.fractions(h))  # (..., m, d/m)
        gamma = self.s_alpha * torch.tanh(h_bar @ self.w_gamma) + self.gamma
        a_r = self.s_alpha * torch.tanh(h_bar @ self.w_r) + self.a_r
        b = self.s_beta * torch.tanh(h_bar @ self.w_beta) + self.b
        return gamma, a_r, b

    def read(self, h: torch.Tensor, w: Weights | None = None) -> torch.Tensor:
        gamma = (w if w is not None else self.weights(h))[0]
        return torch.einsum("...ij,...id->...jd", gamma, self.fractions(h)).flatten(-2)

    def forward(self, h: torch.Tensor, fx: torch.Tensor, w: Weights | None = None) -> torch.Tensor:
        _, a_r, b = w if w is not None else self.weights(h)
        carried = torch.einsum("...ij,...id->...jd", a_r, self.fractions(h))
        return (b.unsqueeze(-1) * self.fractions(fx) + carried).flatten(-2)


class FracLayer(HyperLayer):
    """``h ← ffn(attn(h))``: a layer of two :class:`~variants.hyper.HyperUnit` on the one stream of width d, cut
    into m fractions by each :class:`FracConnection`."""

    @classmethod
    def stream(cls, norm: NormFactory, spec: Any, layers: Sequence[Block]) -> Stream:
        return Stream()


@register("frac_connections", family="transformer", paper=FRAC_PAPER, spec=TransformerSpec())
def frac_connections(spec: TransformerSpec, *, m: int = 4, dynamic: bool = True) -> TransformerLM:
    """Frac-Connections with ``m`` fractions (4, as the ``hyper-connections`` package's example); ``dynamic``: DFC
    (True) or static. Each sublayer is a :class:`~variants.hyper.HyperUnit` (Pre-LN body) joined by a
    :class:`FracConnection`; the stream keeps its width d."""
    positive_int("m", m, "the number of fractions of the hidden state")
    flag("dynamic", dynamic, "dynamic Frac-Connections")
    if spec.d_model % m:
        raise ValueError(f"d_model ({spec.d_model}) must be divisible by the number of fractions m ({m})")
    _, norm_of_width = resolve_norm(spec.norm, spec.bias)

    design = Design(FRAC_PAPER, lambda depth: ["pre"] * depth,
                    lambda at: FracConnection(m, spec.d_model, norm_of_width if dynamic else None), block=FracLayer)
    return build_transformer(design, spec)
