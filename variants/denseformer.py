"""DenseFormer: after every block, a learned depth-weighted average of the embeddings and every block output so far.

Pagliardini, Mohtashami, Fleuret & Jaggi 2024, "DenseFormer: Enhancing Information Flow in Transformers via Depth
Weighted Averaging" (NeurIPS 2024), §3: Pre-LN blocks B_1 .. B_L, block i reading the average Y_{i-1} its
predecessor's :class:`DepthWeightedAverage` made (Y_0 the embeddings X_0)::

    X_i = B_i(Y_{i-1})                 (a Pre-LN layer of the family)
    Y_i = Σ_{j=0..i} α_ij · X_j        (DWA: over the embeddings and the block outputs, not the averages)

α starts at the identity (1 on X_i, 0 elsewhere), where the model equals its Pre-LN base. The averages read the
block outputs from the forward's :class:`~variants.links.Past`, as every cross-layer design does (``variants.dense``,
``variants.attn_res``): each declares them in ``reads`` and the model hands it those values. An average sits between
two layers, outside both, so DenseFormer is the family's model with the averages after its blocks (:class:`DenseFormer`)
rather than a join of its sublayers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .links import EMBEDDINGS, Past, Source, output, reads
from .registry import register
from .transformer import Design, TransformerLM, TransformerSpec, check_token_ids, end_of

DENSEFORMER_PAPER = ("Pagliardini et al. 2024, DenseFormer: Enhancing Information Flow in Transformers via Depth "
                     "Weighted Averaging (DWA after every block, all earlier outputs)")


class DepthWeightedAverage(nn.Module):
    """``Y_i = Σ_j α_ij · X_j`` over the embeddings ``X_0`` and the outputs ``X_1 .. X_i`` of blocks 1..i: DenseFormer
    (Pagliardini et al. 2024, §3); α starts at the identity (1 on ``X_i``, 0 elsewhere).

    ``reads`` (:mod:`variants.links`): the embeddings and the output of every layer up to ``layer`` (its
    feed-forward sublayer's), which the model hands it from the forward's :class:`~variants.links.Past`."""

    def __init__(self, layer: int) -> None:
        super().__init__()
        self.reads: tuple[Source, ...] = (EMBEDDINGS, *(output(2 * j + 1) for j in range(layer + 1)))
        self.alpha = nn.Parameter(torch.zeros(len(self.reads)))
        with torch.no_grad():
            self.alpha[-1] = 1.0

    def forward(self, *history: torch.Tensor) -> torch.Tensor:
        return torch.einsum("k,k...->...", self.alpha, torch.stack(history))


class DenseFormer(TransformerLM):
    """``X_i = B_i(Y_{i-1})``, ``Y_i = Σ_j α_ij·X_j``: the family's LM with a :class:`DepthWeightedAverage` after
    every block (``dwa``), each reading the block outputs so far from the forward's Past. ``X_j`` is what block j's
    feed-forward join returned: its output on the paper's Pre-LN layers (and on Peri-LN's), the sum before the last
    norm on a Post-LN layer."""

    def __init__(self, design: Design, spec: TransformerSpec) -> None:
        super().__init__(design, spec)
        final_norm = self.norm
        del self.norm  # registered again after the averages: the modules in the order the forward runs them
        self.dwa = nn.ModuleList(DepthWeightedAverage(i) for i in range(spec.depth))
        self.norm = final_norm
        self.links = self.links | {s for average in self.dwa for s in reads(average)}

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = check_token_ids(idx, self.max_len)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(torch.arange(t, device=idx.device)))
        past = Past(x, self.links)
        y = self.stream.begin(x)
        for block, average in zip(self.blocks, self.dwa, strict=True):
            y = block(y, past)  # X_i, kept in the Past as its feed-forward sublayer's output
            y = average(*past.read(reads(average)))  # Y_i = Σ_j α_ij·X_j over X_0 .. X_i
        return F.linear(self.norm(end_of(self.stream, y, past)), self.tok_emb.weight)


@register("denseformer", family="transformer", paper=DENSEFORMER_PAPER, spec=TransformerSpec())
def denseformer(spec: TransformerSpec) -> TransformerLM:
    """DenseFormer: Pre-LN layers, each followed by its :class:`DepthWeightedAverage`."""
    return DenseFormer(Design(DENSEFORMER_PAPER, "pre"), spec)
