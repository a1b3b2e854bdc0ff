"""Attention Residuals: every sublayer reads a softmax attention, over depth, of the sublayers' outputs before it.

Kimi Team 2026, "Attention Residuals" (arXiv 2603.15031), §3. Full AttnRes: every sublayer l (attention and
feed-forward each count) reads ``hₗ = Σᵢ softmaxᵢ(wₗᵀ·RMSNorm(vᵢ))·vᵢ`` over v₀ (the embeddings) and the outputs
vᵢ = Fᵢ(norm(hᵢ)) of the sublayers before it, wₗ a learned pseudo-query starting at 0 (a uniform average at init:
not Pre-LN). ``n_blocks`` gives Block AttnRes: the sublayers split into blocks of ⌈2·depth/n_blocks⌉, each summed
into one source (b₀ the embeddings), and a sublayer attends over the completed blocks and the partial sum of its own
(the paper's ~8 blocks: ``attn_res_block``).

What it reads is the forward's :class:`~variants.links.Past` (:class:`AttnResUnit`'s ``reads``), as for the other
cross-layer designs (``variants.dense``: MUDDFormer and DeepCrossAttention, whose RMS helpers and fused sums this
file shares).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from . import axes
from .blocks import NormFactory, ResidualUnit
from .checks import positive_int
from .combinators import Combinator
from .dense import FUSED_SUM, compiling, inv_rms, rms, with_newest
from .links import EMBEDDINGS, Past, Source, SublayerSpec, branch, needs_past, own, reads
from .registry import register, register_preset
from .transformer import Block, Design, TransformerLM, TransformerSpec, build_transformer

axes.ship("combinator", ["attnres"])
ATTN_RES_PAPER = ("Kimi Team 2026, Attention Residuals (arXiv 2603.15031): softmax attention over earlier sublayer "
                  "outputs with a zero-initialised pseudo-query per sublayer (Full AttnRes)")
BLOCK_ATTN_RES_PAPER = ("Kimi Team 2026, Attention Residuals (arXiv 2603.15031): Block AttnRes, 8 blocks of "
                        "summed sublayer outputs attended over")


class DepthAttention(Combinator):
    """``h = Σᵢ softmaxᵢ(wᵀ·RMSNorm(vᵢ))·vᵢ`` over the sources vᵢ so far: Attention Residuals (Kimi Team 2026, §3).

    ``forward(x, fx, scales)``: the earlier sources (a sequence of (..., d) tensors, or one (..., n - 1, d) stack)
    and the newest (..., d) -> the next input (..., d); the pseudo-query w starts at 0 (a uniform average). Computed
    source by source, without stacking them: the logits as ``wᵀ·(g ⊙ RMSNorm(vᵢ)) = (vᵢ·(g ⊙ w))·inv_rms(vᵢ)`` (the
    gain folded into the query, each source's RMS scale (``scales``, (..., n, 1)) computed once per source by the
    caller, or here when not given), the sum as one product per source. A stack of the sources at every
    sublayer is O(L²) copies over the network, and autograd keeps each stack for the backward pass: at GPT-2
    small's width that was +0.97 GB and a fifth of the step (``bench cost --profile``); the result is the same to
    rounding, and the FLOP count is the stack's."""

    axis = "attnres"
    kernels = FUSED_SUM

    def __init__(self, d_model: int, reads: Sequence[Source] = (), starts: Sequence[int] = ()) -> None:
        super().__init__()
        self.reads = tuple(reads)  # the earlier sources its sublayer hands it (variants.links)
        self.starts = list(starts)  # the first sublayer of every sublayer's block, which its reads follow
        self.gain = nn.Parameter(torch.ones(d_model))  # RMSNorm's (part of the connection, not the norm-type axis)
        self.query = nn.Parameter(torch.zeros(d_model))

    def weights(self, sources: torch.Tensor) -> torch.Tensor:
        """softmaxᵢ(wᵀ·RMSNorm(vᵢ)) of the sources (..., n, d): (..., n)."""
        return torch.softmax((rms(sources) * self.gain) @ self.query, dim=-1)

    def forward(self, x: torch.Tensor | Sequence[torch.Tensor], fx: torch.Tensor,
                scales: torch.Tensor | None = None) -> torch.Tensor:
        sources = with_newest(x, fx)
        if scales is None:
            scales = torch.stack([inv_rms(v) for v in sources], dim=-2)
        if compiling():  # elementwise: Inductor fuses the logits and the weighted sum (FUSED_SUM)
            u = self.gain * self.query
            weights = torch.softmax(torch.stack([(v * u).sum(-1) for v in sources], dim=-1) * scales.squeeze(-1), -1)
            h = weights[..., 0, None] * sources[0]
            for i in range(1, len(sources)):
                h = h + weights[..., i, None] * sources[i]
            return h
        u = (self.gain * self.query).unsqueeze(-1)  # (d, 1): each logit a product the FLOP counter sees
        logits = torch.cat([v @ u for v in sources], dim=-1) * scales.squeeze(-1)
        weights = torch.softmax(logits, dim=-1)[..., None, None]  # (..., n, 1, 1)
        # each term a product with a contraction of one, (..., 1, 1) @ (..., 1, d): faster here than a multiply-add
        # and counted as the stack's einsum was
        h = weights[..., 0, :, :] @ sources[0].unsqueeze(-2)
        for i in range(1, len(sources)):
            h = h + weights[..., i, :, :] @ sources[i].unsqueeze(-2)
        return h.squeeze(-2)

class AttnResUnit(ResidualUnit):
    """``vₗ = F(norm(hₗ))``, ``h_{l+1} = Σᵢ softmaxᵢ(wₗᵀ·RMSNorm(sᵢ))·sᵢ``: Attention Residuals (§3), sublayer l::

        vₗ = F(norm(hₗ))
        h_{l+1} = Σᵢ softmaxᵢ(wₗᵀ·RMSNorm(sᵢ))·sᵢ    over s = (v₀, the completed blocks' sums, this block's sum so far)

    (:class:`DepthAttention`; Full AttnRes: every block one sublayer, s = (v₀, v₁ .. vₗ)). The embeddings, the
    completed blocks' sums with their RMS scales and the open block's sum are read from the forward's
    :class:`~variants.links.Past` (``reads``); this sublayer's sum (and its scale, where it closes its block) is left
    there. A block's sum is ``F(sublayer)`` where it has one sublayer so far, else ``block(sublayer)``."""

    placement = "pre"

    def __init__(self, body: nn.Module, combine: DepthAttention, norm: NormFactory, index: int, starts: list[int], *,
                 drop_path: float = 0.0) -> None:
        """Sublayer ``index``; ``starts[k]`` is the first sublayer of sublayer k's block."""
        super().__init__(body, combine, drop_path=drop_path)
        self.norm_in = norm()
        self.ends_block = index == len(starts) - 1 or starts[index + 1] == index + 1
        self.sum = block_sum(index, starts)
        self.n_closed = len(closed_blocks(index, starts))
        self.first = index == 0

    def forward(self, h: torch.Tensor, past: Past | None = None) -> torch.Tensor:  # type: ignore[override]
        past = needs_past(self, past)
        x0, *earlier = past.read(reads(self.combine))
        if self.first:  # the embeddings' RMS scale, computed once for every sublayer
            x0_scale = inv_rms(x0)
            past.put(EMBEDDINGS_RMS, x0_scale)
        else:
            x0_scale, *earlier = earlier
        n = self.n_closed
        blocks, scales, partial = (x0, *earlier[:n]), (x0_scale, *earlier[n:2 * n]), earlier[2 * n:]
        v = self.drop_path(self.body(self.norm_in(h)))
        v = partial[0] + v if partial else v
        scale = inv_rms(v)
        h_next = self.combine(blocks, v, scales=torch.stack((*scales, scale), dim=-2))
        past.put(self.sum, v)
        if self.ends_block:
            past.put(own("rms", self.sum.sublayer), scale)
        return h_next


EMBEDDINGS_RMS = Source("rms(embeddings)")  # inv_rms of the embeddings, v₀'s scale in every sublayer's read


def closed_blocks(index: int, starts: list[int]) -> list[int]:
    """The last sublayer of every block before sublayer ``index``'s."""
    return [k for k in range(starts[index]) if starts[k + 1] == k + 1]


def attn_res_reads(index: int, starts: list[int]) -> tuple[Source, ...]:
    """What sublayer ``index`` of Attention Residuals reads: the embeddings, the completed blocks' sums, their RMS
    scales, and its own block's sum so far (where it is not the block's first sublayer)."""
    closed = closed_blocks(index, starts)
    open_block = (block_sum(index - 1, starts),) if starts[index] < index else ()
    scale = (EMBEDDINGS_RMS,) if index > 0 else ()  # sublayer 0 computes it
    return (EMBEDDINGS, *scale, *(block_sum(k, starts) for k in closed), *(own("rms", k) for k in closed),
            *open_block)


def block_sum(index: int, starts: list[int]) -> Source:
    """The sum of sublayer ``index``'s block up to it: ``F(index)`` where the block starts there, else its own name."""
    return branch(index) if starts[index] == index else own("block", index)

class AttnResLayer(Block):
    """``h ← ffn(attn(h))``: a layer of two :class:`AttnResUnit`, handed the forward's Past."""

    @classmethod
    def unit(cls, body: nn.Module, join: Combinator, norm: NormFactory, at: SublayerSpec,
             placement: str) -> ResidualUnit:
        """Sublayer ``at`` of the blocks its :class:`DepthAttention` join attends over (``join.starts``)."""
        assert isinstance(join, DepthAttention)
        return AttnResUnit(body, join, norm, at.index, join.starts)

    def forward(self, x: torch.Tensor, past: Past | None = None) -> torch.Tensor:
        return self.ffn(self.attn(x, past), past)


def block_starts(n_sublayers: int, n_blocks: int | None) -> list[int]:
    """The first sublayer of each sublayer's block: itself (Full AttnRes, ``n_blocks`` None) or the last multiple of
    ⌈n_sublayers/n_blocks⌉ at or before it (Block AttnRes)."""
    size = 1 if n_blocks is None else math.ceil(n_sublayers / n_blocks)
    return [k - k % size for k in range(n_sublayers)]


def block_ends(n_sublayers: int, n_blocks: int | None) -> list[bool]:
    """Whether each sublayer closes its block: every one (Full AttnRes, ``n_blocks`` None) or every
    ⌈n_sublayers/n_blocks⌉-th and the last (Block AttnRes)."""
    size = 1 if n_blocks is None else math.ceil(n_sublayers / n_blocks)
    return [(k + 1) % size == 0 or k == n_sublayers - 1 for k in range(n_sublayers)]


def _attn_res_design(depth: int, n_blocks: int | None) -> Design:
    """Pre-LN placements, each sublayer joined by a :class:`DepthAttention` over the blocks before it, in
    :class:`AttnResLayer` layers."""
    starts = block_starts(2 * depth, n_blocks)
    return Design(ATTN_RES_PAPER if n_blocks is None else BLOCK_ATTN_RES_PAPER, lambda d: ["pre"] * d,
                  lambda at: DepthAttention(at.d_model, attn_res_reads(at.index, starts), starts), block=AttnResLayer)


@register("attn_res", family="transformer", paper=ATTN_RES_PAPER, spec=TransformerSpec())
def attn_res(spec: TransformerSpec, *, n_blocks: int | None = None) -> TransformerLM:
    """Attention Residuals over every sublayer's output (``n_blocks`` None: Full AttnRes) or over ``n_blocks``
    block sums (Block AttnRes); :class:`AttnResUnit` sublayers joined by :class:`DepthAttention`."""
    if n_blocks is not None:
        positive_int("n_blocks", n_blocks, "Block AttnRes's number of blocks; None: Full AttnRes")
    return build_transformer(_attn_res_design(spec.depth, n_blocks), spec)


register_preset("attn_res_block", "attn_res", n_blocks=8, paper=BLOCK_ATTN_RES_PAPER)
