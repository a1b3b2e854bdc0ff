"""Virtual Width Networks: an over-width embedding stream, read and written by every sublayer at the backbone's width.

Seed Team (ByteDance) 2025, "Virtual Width Networks" (arXiv 2511.11238). The token embedding is widened from D to
D' = (n/m)·D (the over-width embedding, §3.2) and kept as n slots of width d_b = D/m, ``H' ∈ R^{n×d_b}`` (row i the
features i·d_b … (i+1)·d_b − 1 of the wide vector). Every sublayer T (attention and feed-forward each have their own
connection) is joined by a generalized hyper-connection (GHC, §3.3, Eq. 10; Algorithm 1)::

    X = Å_ᵀ·H'            (m × d_b: T's input, flattened to width D)
    H' ← Bᵀ·T(X) + Âᵀ·H'   (T's output cut into m pieces of d_b, written into the slots; the slots carried)

with the GHC matrix [[0, B], [Å, Â]], B (m × n), Å (n × m), Â (n × n). The dynamic form (DGHC, Eqs. 13–14, the
paper's) adds input-dependent terms from ``H̄' = norm(H')`` (a norm of width d_b applied to each slot):
``B(H') = S_β ∘ tanh(H̄'W_β/τ)ᵀ + B`` and ``A(H') = S_α ∘ tanh(H̄'W_α/τ) + A`` with A = [Å | Â], τ = √(D/m).
T is the family's Pre-LN sublayer ``F(LN(X))`` (Algorithm 3: the width connection, then the block's own norm). At
the end ``h = W_reduce·GroupNorm(H')`` (groups of width D; omitted when n/m is not an integer, as the paper omits
it at 1.5×, §5.1), then the family's final norm and the head (Algorithm 1).

Init (§3.3 "Initialization and implementation", Eqs. 15–16, and Algorithm 2): W_α = W_β = 0, S_α = S_β = 1,
``B[i, j] = 1`` if i = j mod m (slot j receives piece j mod m of T's output), ``Å = [I_m; 0]`` (T reads the first m
slots) and ``Â = I_n``. So at init the first m slots, the first D features, evolve exactly as Pre-LN's stream and
every sublayer computes what Pre-LN's does (tested exactly); the other slots accumulate the same updates onto their
own embedding features, and W_reduce mixes all of them: the model is not Pre-LN at init.

Ours where the paper does not say, or where the family fixes it: the wide embedding is the family's token (and
position) embedding, tied to the head, widened by a table of D' − D more features per token (N(0, 0.02), the family's
embedding draw) — one D'-wide table whose first D features are the head's; the learned positions (the family's;
the paper's models use RoPE) are added to those first D only. W_reduce is a linear layer with the family's bias
setting (zero at init) and PyTorch's default weight init (the paper gives none). The norm of the dynamic terms is the
family's norm type (the paper's Algorithm 2 uses RMSNorm); the GroupNorm is part of the reduction, so a study's norm
axis still names the family's norm. Not reproduced: the paper pairs VWN with multi-token prediction (§3.4), a
training objective, not a residual design; the low-rank embedding option ``E_wide = W_expand·E_base`` (§3.2).
No code by the authors is public. The paper's own pseudocode (Appendix 9, Algorithm 2) was read for the layout, which
ours follows: A = [Å | Â] as one n × (m + n) matrix of per-slot rows, Bᵀ as n × m, one norm of width d_b per slot, and
1/τ inside the tanh. Defaults: (m, n) = (8, 64), r = n/m = 8, the paper's headline model (MoE-A3.3B-VWN×8, §5.2.2);
``vwn_1_5x`` is its (m, n) = (2, 3) of §5.1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from . import axes, init_marks
from .blocks import NormFactory
from .checks import flag, positive_int
from .hyper import HyperJoin, HyperLayer, Weights
from .norms import LN_EPS, resolve_norm
from .registry import register, register_preset
from .transformer import Block, Design, Stream, TransformerLM, TransformerSpec, check_token_ids

axes.ship("combinator", ["ghc"])
VWN_PAPER = ("Seed Team 2025, Virtual Width Networks (arXiv 2511.11238): an (n/m)·D-wide embedding stream of n slots, "
             "read and written by a generalized hyper-connection per sublayer (§3.2-3.3, Eqs. 10, 13-16), Pre-LN base")
VWN_1_5X_PAPER = ("Seed Team 2025, Virtual Width Networks (arXiv 2511.11238), §5.1: VWN 1.5x, (m, n) = (2, 3), no "
                  "GroupNorm before the reduction")


def ghc_init(m: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The paper's static matrices (Eqs. 15–16): A = [Å | Â] (n × (m + n)) with Å = [I_m; 0] and Â = I_n, and B
    (m × n) with B[i, j] = 1 where i = j mod m."""
    a = torch.zeros(n, m + n)
    a[:m, :m] = torch.eye(m)
    a[:, m:] = torch.eye(n)
    b = torch.zeros(m, n)
    b[torch.arange(n) % m, torch.arange(n)] = 1.0
    return a, b


class GeneralizedHyperConnection(HyperJoin):
    """``H' ← Bᵀ·T(Åᵀ·H') + Âᵀ·H'`` over n slots of width d_b = D/m: VWN's GHC (Eq. 10), dynamic with ``norm``
    (DGHC, Eqs. 13–14). :meth:`read` gives T's input (width D); the join writes T's output into the slots."""

    axis = "ghc"

    def __init__(self, m: int, n: int, d_model: int, norm: NormFactory | None = None) -> None:
        super().__init__()
        self.m, self.n, self.width = m, n, d_model // m
        a, b = ghc_init(m, n)
        self.a = nn.Parameter(a)  # [Å | Â]
        self.b = nn.Parameter(b)  # B
        self.norm: nn.Module | None = None
        if norm is not None:  # DGHC: W = 0, S = 1 (§3.3), so the dynamic terms start at 0
            self.norm = norm()
            self.w_alpha = nn.Parameter(torch.zeros(self.width, m + n))
            self.w_beta = nn.Parameter(torch.zeros(self.width, m))
            self.s_alpha = nn.Parameter(torch.ones(n, m + n))
            self.s_beta = nn.Parameter(torch.ones(m, n))
            self.tau = math.sqrt(self.width)  # τ = √(D/m)

    def weights(self, h: torch.Tensor) -> Weights:
        """(Å, Â, Bᵀ) of the slots h (..., n, d_b): the parameters, or per token (DGHC: row i from slot i)."""
        a: torch.Tensor = self.a
        b_t = self.b.T
        if self.norm is not None:
            h_bar = self.norm(h)  # Eq. 12
            a = self.s_alpha * torch.tanh(h_bar @ self.w_alpha / self.tau) + a  # Eq. 14, (..., n, m + n)
            b_t = self.s_beta.T * torch.tanh(h_bar @ self.w_beta / self.tau) + b_t  # Eq. 13 transposed, (..., n, m)
        return a[..., :self.m], a[..., self.m:], b_t

    def read(self, h: torch.Tensor, w: Weights | None = None) -> torch.Tensor:
        a_in = (w if w is not None else self.weights(h))[0]
        return torch.einsum("...ij,...id->...jd", a_in, h).flatten(-2)  # Åᵀ·H', (..., m·d_b = D)

    def forward(self, h: torch.Tensor, fx: torch.Tensor, w: Weights | None = None) -> torch.Tensor:
        _, a_carry, b_t = w if w is not None else self.weights(h)
        carried = torch.einsum("...ij,...id->...jd", a_carry, h)  # Âᵀ·H'
        return b_t @ fx.unflatten(-1, (self.m, self.width)) + carried  # Bᵀ·T(X): (..., n, m) @ (..., m, d_b)


class VirtualWidthStream(Stream):
    """The n slots of the over-width stream: the wide embedding (..., D') in, ``W_reduce·GroupNorm(H')`` (..., D)
    out (Algorithm 1; the GroupNorm over groups of width D only when n/m is an integer)."""

    def __init__(self, m: int, n: int, d_model: int, bias: bool) -> None:
        super().__init__()
        self.n, self.wide = n, d_model * n // m
        self.groups = n // m if n % m == 0 else None
        if self.groups:  # GroupNorm's affine parameters; the norm is part of the reduction, not the norm-type axis
            self.gn_weight = nn.Parameter(torch.ones(self.wide))
            self.gn_bias = nn.Parameter(torch.zeros(self.wide))
        # W_reduce keeps torch's default draw (what this design has always started from) under every scheme
        self.reduce = init_marks.mark_init(nn.Linear(self.wide, d_model, bias=bias), "own")

    def begin(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (self.n, -1))

    def end(self, state: torch.Tensor) -> torch.Tensor:
        h = state.flatten(-2)
        if self.groups:
            h = F.group_norm(h.flatten(0, -2), self.groups, self.gn_weight, self.gn_bias, LN_EPS).view_as(h)
        return self.reduce(h)


class VirtualWidthLayer(HyperLayer):
    """``H' ← ffn(attn(H'))``: a layer of two :class:`~variants.hyper.HyperUnit` on the n slots of the over-width
    stream (:class:`VirtualWidthStream`), each joined by a :class:`GeneralizedHyperConnection`."""

    @classmethod
    def stream(cls, norm: NormFactory, spec: Any, layers: Sequence[Block]) -> Stream:
        join = cast(GeneralizedHyperConnection, layers[0].attn.combine)
        return VirtualWidthStream(join.m, join.n, spec.d_model, spec.bias)


class VirtualWidthLM(TransformerLM):
    """The family's LM on the over-width stream: its token and position embeddings are the first D features of the
    wide embedding, ``wide_emb`` the other D' − D (token only), and each sublayer's join is
    ``H' ← Bᵀ·T(Åᵀ·H') + Âᵀ·H'``."""

    wide_emb: nn.Embedding

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = check_token_ids(idx, self.max_len)
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(t, device=idx.device))
        state = self.stream.begin(self.drop(torch.cat((x, self.wide_emb(idx)), dim=-1)))
        for block in self.blocks:
            state = block(state)
        return F.linear(self.norm(self.stream.end(state)), self.tok_emb.weight)


def ghc_params(m: int, n: int, d_model: int, norm_params: int) -> int:
    """Parameters of one dynamic GHC: A (n × (m + n)), B (m × n), S_α and S_β (the same shapes), W_α (d_b × (m + n)),
    W_β (d_b × m) and the norm of width d_b = D/m (``norm_params``)."""
    return 2 * n * (m + n) + 2 * m * n + d_model // m * (2 * m + n) + norm_params


def vwn_params(spec: TransformerSpec, m: int, n: int, base: int, norm_params: int) -> int:
    """The whole model's parameters: ``base`` (the family's Pre-LN model on ``spec``), the wide table V·(D' − D),
    2·depth dynamic GHCs (:func:`ghc_params`), the GroupNorm (2·D' where n/m is an integer) and W_reduce (D'·D, + D
    with biases)."""
    d = spec.d_model
    wide = d * n // m
    return (base + spec.vocab_size * (wide - d) + 2 * spec.depth * ghc_params(m, n, d, norm_params)
            + (2 * wide if n % m == 0 else 0) + wide * d + (d if spec.bias else 0))


@register("vwn", family="transformer", paper=VWN_PAPER, spec=TransformerSpec())
def vwn(spec: TransformerSpec, *, m: int = 8, n: int = 64, dynamic: bool = True) -> TransformerLM:
    """Virtual Width Networks with the backbone cut into ``m`` pieces and ``n`` > m slots (r = n/m times the
    width; the paper's headline (8, 64)); ``dynamic``: DGHC (the paper's) or the static GHC."""
    positive_int("m", m, "the pieces the backbone's width is cut into (the paper's fraction rate)")
    positive_int("n", n, "the slots of the over-width stream")
    flag("dynamic", dynamic, "dynamic generalized hyper-connections")
    if n <= m:
        raise ValueError(f"n ({n}) must exceed m ({m}): the stream is n/m times the backbone's width")
    if spec.d_model % m:
        raise ValueError(f"d_model ({spec.d_model}) must be divisible by m ({m})")
    _, norm_of_width = resolve_norm(spec.norm, spec.bias)
    width = spec.d_model // m

    design = Design(VWN_PAPER, lambda depth: ["pre"] * depth, lambda at: GeneralizedHyperConnection(
        m, n, spec.d_model, (lambda: norm_of_width(width)) if dynamic else None), block=VirtualWidthLayer)
    model = VirtualWidthLM(design, spec)
    model.wide_emb = nn.Embedding(spec.vocab_size, spec.d_model * n // m - spec.d_model)
    nn.init.normal_(model.wide_emb.weight, std=0.02)  # the family's token-embedding draw
    return model


register_preset("vwn_1_5x", "vwn", m=2, n=3, paper=VWN_1_5X_PAPER)
