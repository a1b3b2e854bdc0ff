"""Decoder-only Transformer language models, one per published LayerNorm placement.

Every variant is the same stack — token + learned position embeddings, ``depth`` layers of
(causal self-attention sublayer, GELU feed-forward sublayer), an LM head tied to the token embedding —
and differs only along the residual axes (norm placement, combinator). Initialisation is an axis of its
own (``init``, see :data:`INITS`): every placement defaults to the same scheme, Xavier-uniform (Glorot &
Bengio 2010, the init of Vaswani et al. 2017 and of Xiong et al. 2020's experiments), so ``postln`` vs
``preln`` differs only in where LayerNorm sits. Variants whose paper *is* an init pin theirs: ``deepnorm``
(DeepNet's β-scaled Xavier) and the ``gpt2_small`` preset (GPT-2's N(0, 0.02) with 1/√(2N) residual
projections). ``--model-arg init=gpt2|normal|xavier|deepnorm`` picks another scheme for any other variant.
Norm type (``norm``) and feed-forward body (``ffn``) are axes too; a plugin adds values to all three with
``variants.register_norm``/``register_ffn``/``register_init`` and builds its own variant on the family's
defaults with :func:`build_transformer` and :class:`TransformerSpec`.

- ``postln``: ``x ← LN(x + F(x))``, no final LN — Vaswani et al. 2017, "Attention Is All You Need".
- ``preln``: ``x ← x + F(LN(x))``, final LN — Xiong et al. 2020, "On Layer Normalization in the
  Transformer Architecture"; Radford et al. 2019, GPT-2 "Language Models are Unsupervised Multitask
  Learners". ``gpt2_small`` is GPT-2's 124M configuration.
- ``sandwich`` (= Peri-LN): ``x ← x + LN(F(LN(x)))``, final LN — Ding et al. 2021, "CogView: Mastering
  Text-to-Image Generation via Transformers"; Kim et al. 2025, "Peri-LN: Revisiting Layer Normalization
  in the Transformer Architecture".
- ``deepnorm``: ``x ← LN(α·x + F(x))`` — Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000 Layers".
- ``rezero_lm``: ``x ← x + α·F(x)``, α a learnable scalar starting at 0 (one per layer, shared by its
  attention and feed-forward sublayers, as in the authors' code), no LN at
  all — Bachlechner et al. 2020, "ReZero is All You Need: Fast Convergence at Large Depth" (the name
  ``rezero`` is the CIFAR ResNet of ``variants.normfree``).
- ``b2t``: Post-LN with the bottom-to-top connection, ``h = LN(x + Attn(x))``, ``x ← LN(h + FFN(h) + x)`` —
  Takase et al. 2023, "B2T Connection: Serving Stability and Performance in Deep Transformers".
- ``denseformer``: Pre-LN blocks, each followed by a learned depth-weighted average of the embeddings and
  all earlier block outputs, the identity at init — Pagliardini et al. 2024, "DenseFormer" (``variants.denseformer``).
- ``mixln``: Post-LN in the first ⌊N/4⌋ layers, Pre-LN after — Li et al. 2024, "Mix-LN: Unleashing the
  Power of Deeper Layers by Combining Pre-LN and Post-LN" (trained there with ``init=normal``).

The family is in files a reader can hold: this one is the model (:class:`TransformerLM`), its trunk spec and
builder; the attention bodies are ``variants.attention``, the feed-forward bodies ``variants.ffn``, the init schemes
``variants.lm_inits``, :class:`Design` and the table of shipped designs ``variants.lm_design``, the layers
``variants.lm_blocks``, and how a layer reads the past ``variants.links``. Every name is importable from here.

Embeddings are initialised the GPT-2 way (token N(0, 0.02), position N(0, 0.01), no √d scaling) in
every variant: with a tied head, larger embeddings make a freshly initialised model predict its own
input token (loss far above ln V), an artifact that would confound the placement comparison.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from .attention import CausalSelfAttention, QKVNormAttention, ValueResidualAttention
from .checks import choice, flag, positive_int, rate
from .combinators import Laurel
from .ffn import FFNS, FeedForward, FfnArg, SwiGLU, resolve_ffn, swiglu_hidden
from .links import Past, SublayerSpec, reads
from .lm_blocks import B2T, Block, Layer, Stream, layer_for
from .lm_design import (
    DESIGNS,
    Design,
    DualLayer,
    DualPostNorm,
    DualStream,
    JoinFactory,
    design_of,
    mixln_post_layers,
)
from .lm_inits import (
    DEFAULT_INIT,
    INITS,
    InitArg,
    admin_profile,
    deepnorm_alpha_beta,
    linears,
    resolve_init,
    t_fixup_scale,
)
from .norms import LN_EPS, NORMS, NormArg, ScaleNorm, resolve_norm
from .registry import register

# The family's names, imported from here by the other Transformer modules and by plugins (the bodies, inits and
# design parts live in files of their own: variants.attention, .ffn, .lm_inits, .lm_design).
__all__ = [
    "B2T",
    "DEFAULT_INIT",
    "DESIGNS",
    "FFNS",
    "INITS",
    "LN_EPS",
    "NORMS",
    "Block",
    "CausalSelfAttention",
    "Design",
    "DualLayer",
    "DualPostNorm",
    "DualStream",
    "FeedForward",
    "FfnArg",
    "InitArg",
    "JoinFactory",
    "Layer",
    "NormArg",
    "QKVNormAttention",
    "ScaleNorm",
    "Stream",
    "SwiGLU",
    "TransformerLM",
    "TransformerSpec",
    "TrunkSpec",
    "ValueResidualAttention",
    "admin_profile",
    "build_transformer",
    "check_token_ids",
    "deepnorm_alpha_beta",
    "design_of",
    "linears",
    "mixln_post_layers",
    "resolve_ffn",
    "resolve_init",
    "swiglu_hidden",
    "t_fixup_scale",
    "transformer_flops_per_token",
]


class TransformerLM(nn.Module):
    """Decoder-only LM: ``(B, T)`` token ids -> ``(B, T, vocab_size)`` logits; head tied to the token embedding."""

    def __init__(self, design: Design, spec: TransformerSpec) -> None:
        """``design``'s stack on the trunk ``spec`` (validated when it was made)."""
        super().__init__()
        depth, d_model, dropout, bias = spec.depth, spec.d_model, spec.dropout, spec.bias
        _, scheme = resolve_init(spec.init)
        _, norm_of_width = resolve_norm(spec.norm, bias)
        _, make_ffn = resolve_ffn(spec.ffn)
        self.max_len = spec.max_len
        self.tok_emb = nn.Embedding(spec.vocab_size, d_model)
        self.pos_emb = nn.Embedding(spec.max_len, d_model)
        self.drop = nn.Dropout(dropout)
        make_norm = partial(norm_of_width, d_model)
        make_join = design.join()
        layers: list[Block] = []
        for i, (p_attn, p_ffn) in enumerate(design.layouts(depth)):
            layer = design.block or layer_for(p_attn, p_ffn)  # the layer class: its units, its build, its stream
            at_attn, at_ffn = SublayerSpec.of(2 * i, depth, d_model), SublayerSpec.of(2 * i + 1, depth, d_model)
            attn = design.attention.make(d_model, spec.n_heads, dropout, bias, head_norm=norm_of_width, at=at_attn)
            units = (layer.unit(attn, make_join(at_attn), make_norm, at_attn, p_attn),
                     layer.unit(make_ffn(d_model, spec.d_ff, dropout, bias), make_join(at_ffn), make_norm, at_ffn,
                                p_ffn))
            layers.append(layer.make(*units, at=at_attn))
        self.blocks = nn.ModuleList(layers)
        self.stream = (design.block or Block).stream(make_norm, spec, layers)
        # What the forward's Past keeps: every earlier value a module (a join, a layer, an attention, a DenseFormer
        # average, the stream's end) declared it reads.
        self.links = frozenset(s for m in self.modules() for s in reads(m))
        self.norm = make_norm() if design.final_norm(depth) else nn.Identity()
        for module in self.modules():
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        nn.init.normal_(self.tok_emb.weight, std=0.02)
        nn.init.normal_(self.pos_emb.weight, std=0.01)
        scheme(self)

    def bodies(self) -> list[tuple[CausalSelfAttention, nn.Module]]:
        """The (attention, feed-forward) branch modules of every layer, for the init schemes."""
        blocks = cast(list[Block], list(self.blocks))
        return [(cast(CausalSelfAttention, b.attn.body), b.ffn.body) for b in blocks]

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = check_token_ids(idx, self.max_len)
        pos = torch.arange(t, device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        past = Past(x, self.links)  # what the layers pass along: the earlier values modules declared they read
        state = self.stream.begin(x)
        for block in self.blocks:
            state = block(state, past)
        return F.linear(self.norm(end_of(self.stream, state, past)), self.tok_emb.weight)


def end_of(stream: Stream, state: Any, past: Past) -> torch.Tensor:
    """The stream's :meth:`~Stream.end`, handed the earlier values it declares it reads (backout's) after the state."""
    earlier = past.read(reads(stream))
    return stream.end(state, *earlier) if earlier else stream.end(state)


def check_token_ids(idx: torch.Tensor, max_len: int) -> int:
    """The family's input check: ``(batch, seq_len)`` token ids with ``seq_len <= max_len``; returns seq_len."""
    if idx.dim() != 2:
        raise ValueError(f"expected token ids of shape (batch, seq_len), got shape {tuple(idx.shape)}")
    t = idx.shape[1]
    if t > max_len:
        raise ValueError(f"sequence length {t} exceeds max_len {max_len}; build the model with max_len >= {t}")
    return int(t)


def validate_sizes(**kw: object) -> None:
    """The family's checks of a builder's sizes and dropout (ValueError naming the argument and what it wants)."""
    sizes = {key: positive_int(key, kw[key]) for key in ("depth", "d_model", "n_heads", "d_ff", "vocab_size",
                                                          "max_len")}
    if sizes["d_model"] % sizes["n_heads"]:
        raise ValueError(f"d_model ({sizes['d_model']}) must be divisible by n_heads ({sizes['n_heads']})")
    rate("dropout", kw["dropout"])


def transformer_flops_per_token(depth: int, d_model: int, d_ff: int, n_ctx: int, vocab_size: int) -> int:
    """Forward+backward FLOPs per token of a :class:`TransformerLM`, counting matmuls only (multiply-add = 2).

    ``6·M + 12·depth·n_ctx·d_model`` with ``M = depth·(4·d_model² + 2·d_model·d_ff) + d_model·vocab_size`` the
    weights that enter a matmul (q|k|v, out, fc1, fc2; the tied head once; no biases, norms or position
    table). The forward is ``2·M`` plus ``4·n_ctx·d_model`` per layer for QKᵀ and AV; backward is twice the
    forward. Attention is counted dense (PaLM's MFU convention, Chowdhery et al. 2022, App. B, and what
    ``torch.utils.flop_counter`` reports); Kaplan et al. 2020 halve it for the causal mask: ``6N + 6·L·n_ctx·d``.
    """
    matmul_weights = depth * (4 * d_model * d_model + 2 * d_model * d_ff) + d_model * vocab_size
    return 6 * matmul_weights + 12 * depth * n_ctx * d_model


@dataclass(frozen=True, kw_only=True)
class TrunkSpec:
    """The sizes every Transformer LM of the family is built at, validated on construction: what nGPT, whose
    normalisation is its own norm, init and stream, shares with every other design (:class:`TransformerSpec`)."""

    depth: int = 6  # layers, each an attention sublayer then a feed-forward sublayer
    d_model: int = 128  # width of the residual stream
    n_heads: int = 4  # attention heads (d_model must divide by it)
    d_ff: int = 512  # feed-forward width (SwiGLU: 2/3 of it, swiglu_hidden)
    vocab_size: int = 256  # tokens (byte-level tasks: 256)
    max_len: int = 256  # longest sequence (rows of the learned position table)
    dropout: float = 0.0  # on attention probabilities and each sublayer's output
    bias: bool = True  # biases in every linear layer and LayerNorm

    def __post_init__(self) -> None:
        validate_sizes(depth=self.depth, d_model=self.d_model, n_heads=self.n_heads, d_ff=self.d_ff,
                       vocab_size=self.vocab_size, max_len=self.max_len, dropout=self.dropout)
        flag("bias", self.bias)


@dataclass(frozen=True, kw_only=True)
class TransformerSpec(TrunkSpec):
    """The trunk of every Transformer LM of the family (:class:`TrunkSpec`'s sizes, and the norm type,
    feed-forward body and initialisation of its stack), with its defaults, validated on construction.

    Every builder of the family takes one (:class:`TransformerLM` is built from a :class:`Design` and a spec), so a
    new trunk field is one line here. What a plugin builds a variant on (:func:`build_transformer`), registering it
    with ``spec=TransformerSpec(...)`` so each field is a keyword argument of the variant (``--model-arg
    d_model=256``) defaulting to the registered instance's value. ``init``, ``norm`` and ``ffn`` take a name (the
    family's own, :data:`INITS`, :data:`NORMS`, :data:`FFNS`, or one registered with ``variants.register_init``/
    ``register_norm``/``register_ffn``) or the draw/factory itself.
    """

    init: str | InitArg = DEFAULT_INIT  # the scheme; a design that *is* an init (DeepNet) needs its own here
    norm: str | NormArg = "layernorm"  # the norm type of every norm in the stack (its placement is the design's)
    ffn: str | FfnArg = "gelu"  # the feed-forward body

    def __post_init__(self) -> None:
        super().__post_init__()
        resolve_init(self.init)
        resolve_norm(self.norm, self.bias)
        resolve_ffn(self.ffn)


def build_transformer(design: str | Design, spec: TransformerSpec | None = None, /, **overrides: Any) -> TransformerLM:
    """The family's LM of ``design`` (:func:`design_of`: a :class:`Design`, a name of :data:`DESIGNS` or a placement)
    on ``spec`` (default: :class:`TransformerSpec`'s defaults, the family's), with ``overrides`` replacing spec
    fields: ``build_transformer("sandwich", norm="dyt")``. A plugin registers a variant on it without copying a
    default::

        @variants.register("sandwich_dyt", family="transformer", paper="...", spec=variants.TransformerSpec(norm="dyt"))
        def sandwich_dyt(spec):
            return variants.build_transformer("sandwich", spec)

    A design whose paper is an initialisation (``deepnorm``, ``admin``, ``t_fixup``) must be given that ``init``, one
    that pins its feed-forward body (:attr:`Design.ffn`) that ``ffn``.
    """
    resolved = design_of(design)
    spec = dataclasses.replace(spec or TransformerSpec(), **overrides)
    if resolved.init is not None and spec.init != resolved.init:
        raise ValueError(f"design {design!r} is its initialisation: init must be {resolved.init!r}, got {spec.init!r}")
    if resolved.ffn is not None and spec.ffn != resolved.ffn:
        raise ValueError(f"design {design!r} pins its feed-forward body: ffn must be {resolved.ffn!r}, got "
                         f"{spec.ffn!r}")
    return TransformerLM(resolved, spec)


def _on_spec(design: Design) -> Callable[[TransformerSpec], TransformerLM]:
    """The registered builder of ``design``: its LM on the spec the registry hands it."""

    def build(spec: TransformerSpec) -> TransformerLM:
        return build_transformer(design, spec)

    build.__doc__ = f"{design.paper}: :func:`build_transformer` of this design on ``spec``."
    return build


_BUILDERS = {name: _on_spec(design) for name, design in DESIGNS.items()}
for _name, _design in DESIGNS.items():
    # the paper is the init (or the feed-forward body): not overridable
    _pinned: dict[str, Any] = {key: getattr(_design, key) for key in ("init", "ffn") if getattr(_design, key)}
    register(_name, family="transformer", paper=_design.paper, spec=TransformerSpec(**_pinned),
             **_pinned)(_BUILDERS[_name])

# GPT-2 small (124,439,808 parameters): the trunk and GPT-2's init are pinned; vocab_size/max_len default to
# GPT-2's 50257/1024 but stay overridable so the preset also runs on the byte-level tasks. Pre-LN's own builder:
# the same code as ``preln`` at another size.
_GPT2_TRUNK: dict[str, Any] = dict(depth=12, d_model=768, n_heads=12, d_ff=3072, bias=True, init="gpt2")
register(
    "gpt2_small", family="transformer", paper="Radford et al. 2019, Language Models are Unsupervised Multitask "
    "Learners (GPT-2 small)", spec=TransformerSpec(**_GPT2_TRUNK, vocab_size=50257, max_len=1024), **_GPT2_TRUNK,
)(_BUILDERS["preln"])

# The block of LLaMA (Touvron et al. 2023, §2.2): Pre-norm with RMSNorm, a SwiGLU feed-forward, no biases; its
# rotary position encoding is not part of the residual design and is not reproduced (learned positions, as
# every variant here). Any other placement takes norm=/ffn= too (``--model-arg norm=rmsnorm``).
_LLAMA_TRUNK: dict[str, Any] = dict(norm="rmsnorm", ffn="swiglu", bias=False)
register(
    "llama_like", family="transformer", paper="Touvron et al. 2023, LLaMA: Open and Efficient Foundation Language "
    "Models, §2.2 (pre-normalisation with RMSNorm, Zhang & Sennrich 2019; SwiGLU, Shazeer 2020)",
    spec=TransformerSpec(**_LLAMA_TRUNK), **_LLAMA_TRUNK,
)(_BUILDERS["preln"])

LAUREL_PAPER = ("Menghani et al. 2025, LAuReL: Learned Augmented Residual Layer (ICML), eq. 5 (RW+LR, r = 4 as its "
                "LLM-1B); one LAuReL join per residual sublayer of a Pre-LN stack")


@register("laurel", family="transformer", paper=LAUREL_PAPER, spec=TransformerSpec())
def laurel(spec: TransformerSpec, *, form: str = "rw+lr", rank: int = 4) -> TransformerLM:
    """Pre-LN with every residual join a :class:`~variants.combinators.Laurel` of ``form`` (rw, lr, rw+lr) and
    ``rank``. The paper counts one LAuReL per layer (2N(4D+1) extra weights in LLM-1B) without saying which
    residual it wraps; here each of the 2N joins gets its own (4·D·r + 2 weights each, still < 1% of the model)."""
    choice("LAuReL form", form, Laurel.FORMS)
    positive_int("LAuReL rank", rank)
    return build_transformer(Design(LAUREL_PAPER, "pre", lambda at: Laurel(at.d_model, form=form, rank=rank)), spec)
