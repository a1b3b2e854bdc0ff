"""Hyperloop Transformers: a looped middle block whose loops are joined by hyper-connections.

Zeitoun, Torroba-Hennigen & Kim 2026, "Hyperloop Transformers" (arXiv 2604.21254). The layers are split into a
begin, a middle and an end block (§2.1, the "middle cycle"), and only the middle block is applied ``loops`` times
(the paper's 3). After the begin block the stream is copied into n parallel streams ``Y⁽⁰⁾`` (n = 4, §4.1), and
each loop l is one mHC-style hyper-connection around the whole middle block F (§3)::

    y⁽ˡ⁺¹⁾ = H_res·y⁽ˡ⁾ + H_postᵀ·(F(H_pre·y⁽ˡ⁾) + e_l)

with mHC's maps from the RMS-normalised flattened token z (§2.2): ``H_pre = σ(α_pre·W_pre z + b_pre)``, ``H_post =
2σ(α_post·W_post z + b_post)``, and, where mHC applies Sinkhorn, a diagonal ``H_res = diag(σ(α_res·W_res z +
b_res))`` (W_res n × nC, §3); ``e_l`` a learned loop-position embedding. Each loop has its own W, b, α and e_l; the
middle block's layers are shared by every loop and keep their own residual connections (F is whole Pre-LN layers,
not one sublayer). After the last loop the streams are averaged into the end block, then the final norm and the
head. ``depth`` is the unrolled depth, begin + loops·middle + end: the paper's depth-matched comparison, with about
half the parameters (``middle`` defaults to round(depth/4), the rest split evenly with the begin block taking an odd
one: 16 -> 2 + 4×3 + 2, 18 -> 3 + 4×3 + 3 and 38 -> 4 + 10×3 + 4, the paper's Table 1 models).

No code by the authors could be found; the tests compute §3's equations by hand. Init — the paper's main results use
PyTorch's default init (App. C) and it gives none for the connections; ours is the registry's ``mhc``'s: W = 0, α =
0.01, ``b_pre = ±g`` (+g on stream l mod n, which breaks the streams' symmetry), ``b_post = 0`` (H_post = 1), and
``b_res = 0`` (H_res = I/2, the sigmoid's midpoint), e_l = 0. The streams then start equal, so at init
``y⁽ˡ⁺¹⁾ = y⁽ˡ⁾/2 + F(c·y⁽ˡ⁾)`` with c = σ(g) + (n − 1)·σ(−g): not a plain looped Transformer. The paper's models
use SwiGLU, RoPE and an untied head; here the family's (``ffn=``, learned positions, tied head). The family's GPT-2
init scales the residual projections by the layers built, not the unrolled depth.
"""

from __future__ import annotations

import dataclasses
import math
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from . import axes
from .checks import positive_int
from .hyper import MHC_INIT_GAP, ManifoldJoin, one_hot_bias
from .registry import register
from .transformer import DESIGNS, TransformerLM, TransformerSpec, check_token_ids

axes.ship("combinator", ["hyperloop"])
LOOPS = 3  # the paper's loops of the middle block (§4.1)
HYPERLOOP_PAPER = ("Zeitoun, Torroba-Hennigen & Kim 2026, Hyperloop Transformers (arXiv 2604.21254): begin, middle "
                   "(looped 3 times) and end blocks of Pre-LN layers, n = 4 streams joined after each loop by an "
                   "mHC-style hyper-connection with a diagonal H_res and a loop-position embedding (§3)")


class LoopConnection(ManifoldJoin):
    """``y ← H_res·y + H_postᵀ·(F(H_pre·y) + e_l)`` with ``H_res = diag(σ(α_res·W_res z + b_res))``: one loop of a
    Hyperloop Transformer (§3), mHC's join (:class:`~variants.hyper.ManifoldJoin`) with a diagonal H_res."""

    axis = "hyperloop"

    def __init__(self, n: int, d_model: int, index: int) -> None:
        super().__init__(n, d_model, one_hot_bias(n, index, MHC_INIT_GAP), torch.zeros(n), torch.zeros(n))
        self.loop_emb = nn.Parameter(torch.zeros(d_model))  # e_l

    def mix(self, x_res: torch.Tensor) -> torch.Tensor:
        return torch.diag_embed(torch.sigmoid(self.alpha_res * x_res + self.b_res))


class HyperloopLM(TransformerLM):
    """The family's LM with its layers as begin, middle and end blocks (:attr:`split`), the middle one F looped, one
    :class:`LoopConnection` per loop over n streams: ``y ← H_res·y + H_postᵀ·(F(H_pre·y) + e_l)``."""

    split: tuple[int, int, int]
    connections: nn.ModuleList

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = check_token_ids(idx, self.max_len)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(torch.arange(t, device=idx.device)))
        begin, middle, _ = self.split
        blocks = list(self.blocks)
        for block in blocks[:begin]:
            x = block(x)
        first = cast(LoopConnection, self.connections[0])
        y = x.unsqueeze(-2).expand(*x.shape[:-1], first.n, x.shape[-1])  # Y⁽⁰⁾: n copies
        for join in self.connections:
            loop = cast(LoopConnection, join)
            w = loop.weights(y)
            h = loop.read(y, w)  # H_pre·y
            for block in blocks[begin:begin + middle]:
                h = block(h)
            y = loop(y, h + loop.loop_emb, w)
        x = y.mean(-2)
        for block in blocks[begin + middle:]:
            x = block(x)
        return F.linear(self.norm(x), self.tok_emb.weight)


def loop_split(depth: int, loops: int, middle: int | None = None) -> tuple[int, int, int]:
    """(begin, middle, end) layers for an unrolled ``depth``: ``middle`` (default round(depth/4)) looped ``loops``
    times, the rest split evenly, the begin block taking an odd one. ValueError where the loops do not fit."""
    mid = max(1, round(depth / 4)) if middle is None else middle
    rest = depth - loops * mid
    if rest < 0:
        raise ValueError(f"a middle block of {mid} layers looped {loops} times is {loops * mid} layers, more than "
                         f"depth {depth} (the unrolled depth)")
    return math.ceil(rest / 2), mid, rest // 2


def loop_connection_params(n: int, d_model: int) -> int:
    """Parameters of one loop's connection: W_pre, W_post, W_res (n·C × n each), three gates α, the biases b_pre,
    b_post, b_res (n each) and e_l (C)."""
    return 3 * n * n * d_model + 3 + 3 * n + d_model


@register("hyperloop", family="transformer", paper=HYPERLOOP_PAPER, spec=TransformerSpec())
def hyperloop(spec: TransformerSpec, *, n: int = 4, loops: int | None = None, middle: int | None = None
              ) -> TransformerLM:
    """A Hyperloop Transformer of unrolled depth ``spec.depth``: ``n`` streams (the paper's 4), the middle block of
    ``middle`` layers (default: a quarter of the depth) looped ``loops`` times (default: the paper's 3, or the depth
    where it is shallower)."""
    positive_int("n", n, "the number of parallel streams")
    if loops is None:
        loops = min(LOOPS, spec.depth)
    positive_int("loops", loops, "how many times the middle block is applied")
    if middle is not None:
        positive_int("middle", middle, "the layers of the looped middle block")
    split = loop_split(spec.depth, loops, middle)
    model = HyperloopLM(DESIGNS["preln"], dataclasses.replace(spec, depth=sum(split)))
    model.split = split
    model.connections = nn.ModuleList(LoopConnection(n, spec.d_model, i) for i in range(loops))
    return model
