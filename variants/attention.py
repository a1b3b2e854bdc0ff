"""The attention bodies of the Transformer family: the causal self-attention every design uses, and the designs that
change it (HybridNorm's QKV-Norm, ResFormer's value residual).

- :class:`CausalSelfAttention`: ``softmax(QKᵀ/√d_h + mask)·V``, then the output projection — Vaswani et al. 2017,
  "Attention Is All You Need", §3.2, with GPT-2's fused q|k|v projection.
- :class:`QKVNormAttention`: q, k and v each normalised per head — Zhuo et al. 2025, "HybridNorm", §3.1.
- :class:`ValueResidualAttention`: every layer after the first attends over ``½·(V_n + V_1)`` — Zhou et al. 2024,
  "Value Residual Learning" (ResFormer), eq. 6; V_1 read from the forward's :class:`~variants.links.Past`.

A design that needs another attention subclasses :class:`CausalSelfAttention` and overrides :meth:`~CausalSelfAttention.
heads` (what q, k and v are) or ``forward``; :meth:`~CausalSelfAttention.make` builds one per layer, told which
sublayer it is (:class:`~variants.links.SublayerSpec`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .links import Past, SublayerSpec, values
from .lm_blocks import PreLN


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with a fused q|k|v projection (rows 0:d are q, d:2d k, 2d:3d v)."""

    probe_kind = "attn"  # what bench.probes labels this sublayer

    def __init__(self, d_model: int, n_heads: int, dropout: float, bias: bool) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.proj = nn.Linear(d_model, d_model, bias=bias)
        self.attn_dropout = dropout
        self.resid_dropout = nn.Dropout(dropout)

    @classmethod
    def make(cls, d_model: int, n_heads: int, dropout: float, bias: bool, *, head_norm: Callable[[int], nn.Module],
             at: SublayerSpec) -> CausalSelfAttention:
        """The attention of one layer; ``head_norm(d)`` makes a norm of width d, ``at`` says which sublayer it is.
        Subclasses that need either override this."""
        return cls(d_model, n_heads, dropout, bias)

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v of shape (batch, heads, seq, d_head): what a variant that touches attention overrides."""
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, c // self.n_heads).permute(2, 0, 3, 1, 4)
        return q, k, v

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``proj(softmax(q·kᵀ/√d_h + causal mask)·v)`` with the heads merged back: (batch, seq, d_model)."""
        b, _, t, _ = q.shape
        p = self.attn_dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        return self.resid_dropout(self.proj(y.transpose(1, 2).reshape(b, t, -1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attend(*self.heads(x))


class QKVNormAttention(CausalSelfAttention):
    """Zhuo et al. 2025, "HybridNorm", §3.1 (QKV-Norm): ``softmax(N(Q)N(K)ᵀ/√d_h)·N(V)``, each of q, k and v
    normalised per head (width d_head, the family's norm type) before attention, as the authors' code does."""

    def __init__(self, d_model: int, n_heads: int, dropout: float, bias: bool,
                 head_norm: Callable[[int], nn.Module]) -> None:
        super().__init__(d_model, n_heads, dropout, bias)
        d_head = d_model // n_heads
        self.q_norm, self.k_norm, self.v_norm = head_norm(d_head), head_norm(d_head), head_norm(d_head)

    @classmethod
    def make(cls, d_model: int, n_heads: int, dropout: float, bias: bool, *, head_norm: Callable[[int], nn.Module],
             at: SublayerSpec) -> CausalSelfAttention:
        return cls(d_model, n_heads, dropout, bias, head_norm)

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = super().heads(x)
        return self.q_norm(q), self.k_norm(k), self.v_norm(v)


V_FIRST = values(0)  # V_1, the values of layer 0's attention (sublayer 0)


class ValueResidualAttention(CausalSelfAttention):
    """Zhou et al. 2024, "Value Residual Learning" (ResFormer), eq. 6 with λ₁ = λ₂ = ½:

        U_n = softmax(Q_n K_nᵀ/√d_h + mask)·½(V_n + V_1)      (n ≥ 2; layer 1 attends over its own V_1)

    V_1 is the first layer's values of the same forward, which that layer leaves in the forward's
    :class:`~variants.links.Past` and every later layer reads from it (``reads``): no module holds it."""

    def __init__(self, d_model: int, n_heads: int, dropout: float, bias: bool, first: bool) -> None:
        super().__init__(d_model, n_heads, dropout, bias)
        self.first = first
        self.reads = () if first else (V_FIRST,)

    @classmethod
    def make(cls, d_model: int, n_heads: int, dropout: float, bias: bool, *, head_norm: Callable[[int], nn.Module],
             at: SublayerSpec) -> CausalSelfAttention:
        return cls(d_model, n_heads, dropout, bias, first=at.layer == 0)

    def forward(self, x: torch.Tensor, past: Past | None = None) -> torch.Tensor:  # type: ignore[override]
        q, k, v = self.heads(x)
        if past is None:
            raise ValueError("value-residual attention reads the first layer's values: call it with the forward's Past")
        if self.first:
            past.put(V_FIRST, v)
            return self.attend(q, k, v)
        (v1,) = past.read(self.reads)
        return self.attend(q, k, 0.5 * (v + v1))


class ValueResidualPreLN(PreLN):
    """ResFormer's layer (Zhou et al. 2024): Pre-LN, ``h = x + Attn(LN(x))``, ``y = h + FFN(LN(h))``, its attention
    handed the forward's Past (where layer 0 leaves V_1 and later layers read it)."""

    def forward(self, x: torch.Tensor, past: Past | None = None) -> torch.Tensor:
        a, f = self.attn, self.ffn
        h = a.join(x, a.body(a.norm_in(x), past), past)
        return f.join(h, f.body(f.norm_in(h)), past)
