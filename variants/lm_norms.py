"""Transformer LMs of the 2025 norm types in their papers' placements, and LayerNorm Scaling.

The norm types themselves (DyT, Derf, SeeDNorm) live in ``variants.norms``: every Transformer placement takes them
(``--model-arg norm=dyt``). The presets here are the papers' own points of the space:

- ``dyt``: Zhu, Chen, He, LeCun & Liu 2025, "Transformers without Normalization" (CVPR 2025, arXiv 2503.10622):
  every norm of a Pre-LN stack, the final one included, replaced by ``DyT(x) = γ ⊙ tanh(α·x) + β`` with α₀ = 0.5
  (§4: the default of every non-LLM model in the paper). ``final_norm`` swaps the final norm alone for another type
  (the question users ask: must the last norm be DyT too?), ``alpha_init`` sets α₀.
- ``dyt_llama``: the paper's LLaMA recipe (§7, Table 12; the authors' LLaMA code): the LLaMA block (RMSNorm → DyT,
  SwiGLU, no biases, so DyT keeps γ only) with α₀ = 0.8 in the attention sublayers' DyT and 0.2 in the
  feed-forward ones and the final one (the values of their smallest model, 7B), and a learnable scalar on the
  embeddings starting at √d_model. Their rotary positions are not reproduced (learned positions, as the family);
  the scalar multiplies the position table too.
- ``derf``: Chen, Lu, Zhu, Sun & Liu 2025, "Stronger Normalization-Free Transformers" (arXiv 2512.10938): DyT's
  placement with ``Derf(x) = γ ⊙ erf(α·x + s) + β`` (α₀ = 0.5, s₀ = 0).
- ``seednorm``: Cai, Zhu, Liu & Min 2025, "SeeDNorm: Self-Rescaled Dynamic Normalization" (ICLR 2026, arXiv
  2510.22777): every norm of a Pre-LN stack a ``SeeDNorm``.
- ``lns``: Sun, Song, Li, Yin, Zheng & Liu 2025, "The Curse of Depth in Large Language Models" (NeurIPS 2025, arXiv
  2502.05795), §4, LayerNorm Scaling: Pre-LN whose every sublayer of layer ℓ (1-based, both sublayers of a layer
  share ℓ) reads ``LN(x)/√ℓ``; no parameter; the final norm unscaled. The paper removes GPT-2's depth-scaled init
  when applying it (its footnote 1): train it under ``init=normal`` (N(0, 0.02), no 1/√(2N)) or ``xavier``, not
  ``gpt2``. Any norm type may be scaled (``norm=dyt``: ``DyT(x)/√ℓ``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import torch
from torch import nn

from . import axes
from .blocks import NormFactory, ResidualUnit
from .checks import choice, real
from .combinators import Add, Combinator
from .links import SublayerSpec
from .lm_blocks import PreLN
from .norms import NORMS, DyT, resolve_norm
from .registry import register
from .transformer import Block, Design, Stream, TransformerLM, TransformerSpec, build_transformer

DYT_PAPER = ("Zhu, Chen, He, LeCun & Liu 2025, Transformers without Normalization (CVPR 2025, arXiv 2503.10622), "
             "eq. 1, DyT(x) = γ⊙tanh(αx) + β in every norm of a Pre-LN stack, α0 = 0.5 (§4)")
DYT_LLAMA_PAPER = ("Zhu et al. 2025, Transformers without Normalization (arXiv 2503.10622), §7 and Table 12: the "
                   "LLaMA block with DyT, α0 0.8 (attention) / 0.2 (FFN, final), embeddings × learnable √d")
DERF_PAPER = ("Chen, Lu, Zhu, Sun & Liu 2025, Stronger Normalization-Free Transformers (arXiv 2512.10938): "
              "Derf(x) = γ⊙erf(αx + s) + β in every norm of a Pre-LN stack")
SEEDNORM_PAPER = ("Cai, Zhu, Liu & Min 2025, SeeDNorm: Self-Rescaled Dynamic Normalization (ICLR 2026, arXiv "
                  "2510.22777), eq. 1, in every norm of a Pre-LN stack")
LNS_PAPER = ("Sun et al. 2025, The Curse of Depth in Large Language Models (NeurIPS 2025, arXiv 2502.05795), §4: "
             "LayerNorm Scaling, x + F(LN(x)/√ℓ) for layer ℓ")
LLAMA_ALPHA = {"attn": 0.8, "ffn": 0.2, "final": 0.2}  # DyT Table 12, LLaMA 7B (its smallest model)


class LayerNormScaling(ResidualUnit):
    """``y = combine(x, F(norm(x)/√ℓ))``: LayerNorm Scaling (Sun et al. 2025, §4) on a sublayer of layer ℓ (1-based).

    Pre-LN's unit with the norm's output scaled down by √ℓ, so deep layers stop adding ever larger updates to a
    stream whose variance grows with depth; ``norm_in`` keeps Pre-LN's name (its state dict loads as it is)."""

    placement = "pre-lns"

    def __init__(self, body: nn.Module, combine: Combinator, norm: NormFactory, layer: int, *,
                 drop_path: float = 0.0) -> None:
        super().__init__(body, combine, drop_path=drop_path)
        if layer < 1:
            raise ValueError(f"LayerNorm Scaling counts layers from 1, got layer {layer}")
        self.norm_in = norm()
        self.layer = layer
        self.scale = layer ** -0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.combine(x, self.drop_path(self.body(self.norm_in(x) * self.scale)))


def _add(depth: int, d_model: int) -> Combinator:
    return Add()


class LnsLayer(Block):
    """``h = x + Attn(LN(x)/√ℓ)``, ``y = h + FFN(LN(h)/√ℓ)``: layer ℓ (from 1) of LayerNorm Scaling, two
    :class:`LayerNormScaling` sublayers."""

    @classmethod
    def unit(cls, body: nn.Module, join: Combinator, norm: NormFactory, at: SublayerSpec,
             placement: str) -> ResidualUnit:
        return LayerNormScaling(body, join, norm, at.layer + 1)


LNS = Design(LNS_PAPER, lambda depth: ["pre"] * depth, _add, block=LnsLayer)


@register("lns", family="transformer", paper=LNS_PAPER, spec=TransformerSpec())
def lns(spec: TransformerSpec) -> TransformerLM:
    """LayerNorm Scaling: :class:`LayerNormScaling` sublayers (``x + F(norm(x)/√ℓ)``), a final norm, on ``spec``."""
    return build_transformer(LNS, spec)


def set_alpha(norm: nn.Module, alpha: float) -> None:
    """α₀ of a DyT/Derf norm (``alpha``, a learnable scalar) set to ``alpha``; any other norm type raises."""
    param = getattr(norm, "alpha", None)
    if not isinstance(param, nn.Parameter) or param.dim() != 0:
        raise ValueError(f"alpha_init needs a norm with a scalar α (dyt, derf), got {type(norm).__name__}")
    with torch.no_grad():
        param.fill_(alpha)


def _normfree_lm(spec: TransformerSpec, alpha_init: float | None, final_norm: str | None) -> TransformerLM:
    """Pre-LN on ``spec``; α₀ of every norm set to ``alpha_init`` (None: the type's own); the final norm of type
    ``final_norm`` (None: ``spec.norm``)."""
    model = build_transformer("preln", spec)
    if alpha_init is not None:
        for blk in cast(list[Block], list(model.blocks)):
            for unit in (blk.attn, blk.ffn):
                set_alpha(cast(nn.Module, unit.norm_in), alpha_init)
        set_alpha(model.norm, alpha_init)
    if final_norm is not None:
        model.norm = resolve_norm(final_norm, spec.bias)[1](spec.d_model)
    return model


def _final_norm(value: object) -> str:
    """A norm type's name for ``final_norm``: the family's or a registered one."""
    return choice("final_norm", value, [*NORMS, *axes.registered("norm")])


@register("dyt", family="transformer", paper=DYT_PAPER, spec=TransformerSpec(norm="dyt"), norm="dyt")
def dyt(spec: TransformerSpec, *, alpha_init: float = 0.5, final_norm: str = "dyt") -> TransformerLM:
    """Pre-LN with DyT in every norm (α₀ = ``alpha_init``, the paper's 0.5); ``final_norm`` another type for the
    last norm alone (``"layernorm"``: DyT in the sublayers only)."""
    final = _final_norm(final_norm)
    return _normfree_lm(spec, real("alpha_init", alpha_init), None if final == "dyt" else final)


@register("derf", family="transformer", paper=DERF_PAPER, spec=TransformerSpec(norm="derf"), norm="derf")
def derf(spec: TransformerSpec, *, alpha_init: float = 0.5, final_norm: str = "derf") -> TransformerLM:
    """Pre-LN with Derf in every norm (α₀ = ``alpha_init``, s₀ = 0); ``final_norm`` as :func:`dyt`'s."""
    final = _final_norm(final_norm)
    return _normfree_lm(spec, real("alpha_init", alpha_init), None if final == "derf" else final)


@register("seednorm", family="transformer", paper=SEEDNORM_PAPER, spec=TransformerSpec(norm="seednorm"),
          norm="seednorm")
def seednorm(spec: TransformerSpec) -> TransformerLM:
    """Pre-LN with SeeDNorm in every norm."""
    return _normfree_lm(spec, None, None)


class EmbeddingScale(Stream):
    """``h₀ = s·x``: the DyT authors' learnable scalar on the embeddings of their LLaMA (``s₀ = √d_model``), so that
    the first tanh sees inputs of the size a LayerNorm would have made."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(math.sqrt(d_model)))

    def begin(self, x: torch.Tensor) -> Any:
        return self.scale * x


class ScaledEmbeddingPreLN(PreLN):
    """Pre-LN, ``h = x + Attn(LN(x))``, ``y = h + FFN(LN(h))``, on embeddings scaled by a learnable s
    (:class:`EmbeddingScale`): the DyT authors' LLaMA layer."""

    @classmethod
    def stream(cls, norm: NormFactory, spec: Any, layers: Sequence[Block]) -> Stream:
        return EmbeddingScale(spec.d_model)


@register("dyt_llama", family="transformer", paper=DYT_LLAMA_PAPER, norm="dyt", ffn="swiglu", bias=False,
          spec=TransformerSpec(norm="dyt", ffn="swiglu", bias=False))
def dyt_llama(spec: TransformerSpec, *, alpha_attn: float = LLAMA_ALPHA["attn"], alpha_ffn: float = LLAMA_ALPHA["ffn"],
              alpha_final: float = LLAMA_ALPHA["final"]) -> TransformerLM:
    """The LLaMA block with DyT: α₀ ``alpha_attn`` before attention, ``alpha_ffn`` before the feed-forward body,
    ``alpha_final`` in the final norm; the embeddings scaled by a learnable s₀ = √d_model (:class:`EmbeddingScale`)."""
    alphas = {key: real(f"alpha_{key}", value) for key, value in
              (("attn", alpha_attn), ("ffn", alpha_ffn), ("final", alpha_final))}
    design = Design(DYT_LLAMA_PAPER, lambda depth: ["pre"] * depth, _add, block=ScaledEmbeddingPreLN)
    model = build_transformer(design, spec)
    for blk in cast(list[Block], list(model.blocks)):
        set_alpha(cast(nn.Module, blk.attn.norm_in), alphas["attn"])
        set_alpha(cast(nn.Module, blk.ffn.norm_in), alphas["ffn"])
    set_alpha(model.norm, alphas["final"])
    assert isinstance(model.norm, DyT)
    return model
