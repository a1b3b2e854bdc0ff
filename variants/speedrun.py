"""The residual stream of the modded-nanogpt speedrun: skip-to-embedding lambdas, value embeddings, a gated U-net skip
and backout, on the family's Pre-LN layers.

Jordan et al. 2024–26, "modded-nanogpt: speedrunning the NanoGPT baseline" (github.com/KellerJordan/modded-nanogpt,
the record history of track 1 in its README). Several records that cut the time changed nothing but the residual
stream; each is here, in the form the record that introduced it (or last refined it) gives it, scaled from the
record's 11 or 12 layers to any depth:

- skip to the embedding with lambdas (records of 11/2024, "Value and embedding skip connections"; per sublayer in the
  2026 records): every sublayer computes ``x ← λ_res·x + λ_post·F(norm(x)) + λ₀·x₀``, x₀ the embeddings, with λ_res =
  λ_post = 1 and λ₀ = 0 at init (the records start λ_res at 1.1 per layer, tuned for 11 layers: compounded over 24
  it would scale the embeddings ×9.8, so the plain residual's 1 here);
- value embeddings (12/2024, "Value Embeddings"; gated since 12/2025, "Gates on value embeds"): in the first and
  the last ``n_value_embeds`` layers (a U-net pattern: layer i and layer depth − 1 − i share table i), the
  attention adds a token embedding of its own to its values, ``v ← v + g·ve[token]``, behind a gate per head read
  from the first 12 features of its input, ``g = W_g·x[:12]``, zero at init (the record's ``2σ(W_g·x[:12])`` is 1
  at init; this one lets the model start as Pre-LN's stream);
- a gated U-net skip (11/2024, "U-net pattern skip connections"; gated 12/2025): the stream after layer ⌊3L/11⌉ is
  added before layer ⌊6L/11⌉ (the record's 3 → 6 of 11), ``x ← x + σ(λ_skip)·2σ(W_s·x₀[:12])·x_skip`` with
  λ_skip = −1.5 and W_s = 0 (the record's: 0.18 at init);
- backout (10/2025, "Backout"): before the final norm, ``x ← x − λ_b·x_k`` removes part of the stream after layer
  k = ⌊2L/3⌋ (the record's 2/3 point), λ_b = 0.5 at init (the record's).

Each trick is also registered alone on Pre-LN, so that a study adds one at a time: ``preln_x0`` (the lambdas and the
embeddings in every sublayer; Pre-LN exactly at init), ``preln_unet`` (the gated skip), ``preln_backout`` — and
``preln_xsa``, exclusive self attention (Zhai 2026, arXiv 2603.09078) in every attention: ``z_i = y_i −
(y_i·v_i)·v_i/‖v_i‖²`` per head, the paper's form. The records (train_gpt.py at f411b3d, 08/2026) gate it instead,
``y − tanh(α)·(y·v)/‖v‖²·v`` with α per head and token from their MUDD gate, 0 at init, in layers 1, 3, 4 and 7 of
11; that gate is the MUDD machinery's and is not reproduced.

Not reproduced: the records' trimmed MUDD connections (``mudd`` is MUDDFormer itself), their smear gate, attention
lambdas, rotary positions and ReLU² MLP (not the residual stream), and their per-parameter learning rates.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, cast

import torch
import torch.nn.functional as F
from torch import nn

from . import axes, init_marks
from .blocks import NormFactory, ResidualUnit
from .combinators import COMBINATORS, Combinator
from .links import EMBEDDINGS, Past, SublayerSpec, needs_past, output, reads
from .registry import register
from .transformer import (
    Block,
    CausalSelfAttention,
    Design,
    Stream,
    TransformerLM,
    TransformerSpec,
    check_token_ids,
    end_of,
)

axes.ship("combinator", ["speedrun"])
SPEEDRUN_PAPER = ("Jordan et al. 2024-26, modded-nanogpt speedrun records (github.com/KellerJordan/modded-nanogpt, "
                  "track 1): skip-to-embedding lambdas, gated value embeddings, gated U-net skip, backout; Pre-LN")
GATE_FEATURES = 12  # the records' gates read the first 12 features
SKIP_LAMBDA, BACKOUT_LAMBDA = -1.5, 0.5  # the records' inits: σ(-1.5) ≈ 0.18 on the skip, 0.5 backed out
XSA_ALPHA = 1.0  # Zhai 2026: the whole component along the token's own value is removed


class State(NamedTuple):
    """What the speedrun's layers hand each other: the stream and the value embeddings of this forward's tokens (an
    input, like the token embeddings). The embeddings x₀ and the streams the U-net skip and backout read are earlier
    values: they come from the forward's :class:`~variants.links.Past`."""

    x: torch.Tensor  # the stream
    values: tuple[torch.Tensor, ...]  # the value-embedding tables looked up at the tokens, (B, T, d) each


class SkipToEmbedding(Combinator):
    """``y = λ_res·x + λ_post·F(x) + λ₀·x₀``: the speedrun's join, the embeddings x₀ added back at every sublayer."""

    axis = "speedrun"
    reads = (EMBEDDINGS,)  # x₀, the third argument (variants.links)

    def __init__(self) -> None:
        super().__init__()
        self.resid = nn.Parameter(torch.tensor(1.0))  # λ_res
        self.post = nn.Parameter(torch.tensor(1.0))  # λ_post
        self.x0 = nn.Parameter(torch.tensor(0.0))  # λ₀

    def forward(self, x: torch.Tensor, fx: torch.Tensor, x0: torch.Tensor | None = None) -> torch.Tensor:
        y = self.resid * x + self.post * fx
        return y if x0 is None else y + self.x0 * x0


class ValueEmbeddingAttention(CausalSelfAttention):
    """``v ← v + g·ve``, ``g = W_g·x[:12]`` one gate per head (zero at init), then causal attention: the speedrun's
    gated value embeddings (``ve`` None: the family's attention)."""

    def __init__(self, d_model: int, n_heads: int, dropout: float, bias: bool) -> None:
        super().__init__(d_model, n_heads, dropout, bias)
        # W_g, a parameter rather than an nn.Linear: the init schemes draw a body's linear layers (the last as the
        # projection into the stream), and this gate must start at 0 and is no projection.
        self.gate: nn.Parameter | None = nn.Parameter(torch.zeros(n_heads, min(GATE_FEATURES, d_model)))

    def forward(self, x: torch.Tensor, ve: torch.Tensor | None = None) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.heads(x)
        if ve is not None and self.gate is not None:
            g = (x[..., :self.gate.shape[1]] @ self.gate.T).transpose(1, 2).unsqueeze(-1)  # (B, H, T, 1)
            v = v + g * ve.view(b, t, self.n_heads, c // self.n_heads).transpose(1, 2)
        p = self.attn_dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        return self.resid_dropout(self.proj(y.transpose(1, 2).reshape(b, t, c)))


class StatePreNorm(ResidualUnit):
    """``x ← x + F(norm(x))``: Pre-LN's sublayer on the speedrun's :class:`State` (the embeddings and the saved
    streams carried along; its value embedding, where its layer has one, handed to the attention)."""

    placement = "pre"

    def __init__(self, body: nn.Module, combine: Combinator, norm: NormFactory, value_table: int | None = None) -> None:
        super().__init__(body, combine)
        self.norm_in = norm()  # PreNorm's name: a Pre-LN state dict loads as it is
        self.value_table = value_table

    def branch(self, state: State) -> torch.Tensor:
        """``F(norm(x))``, the value embedding handed to F where this sublayer has one."""
        h = self.norm_in(state.x)
        fx = self.body(h) if self.value_table is None else self.body(h, state.values[self.value_table])
        return cast(torch.Tensor, self.drop_path(fx))

    def forward(self, state: State, past: Past | None = None) -> State:  # type: ignore[override]
        return state._replace(x=self.combine(state.x, self.branch(state)))


class SpeedrunUnit(StatePreNorm):
    """``x ← λ_res·x + λ_post·F(norm(x)) + λ₀·x₀``: a Pre-LN sublayer of the speedrun, joined by
    :class:`SkipToEmbedding`, x₀ read from the forward's Past."""

    def forward(self, state: State, past: Past | None = None) -> State:  # type: ignore[override]
        (x0,) = needs_past(self, past).read(reads(self.combine))
        return state._replace(x=self.combine(state.x, self.branch(state), x0))


class SpeedrunLayer(Block):
    """``x ← ffn(attn(x + σ(λ_skip)·2σ(W_s·x₀[:12])·x_skip))`` where the U-net skip lands (else ``ffn(attn(x))``),
    x₀ and x_skip (the stream after layer ``skip_from``) read from the forward's Past (``reads``); every layer leaves
    its output there (kept where a later module reads it: the skip's ``skip_in`` layer, the ``backout`` layer)."""

    def __init__(self, attn: ResidualUnit, ffn: ResidualUnit, *, index: int, skip_in: bool, skip_out: bool,
                 backout: bool, gate_features: int = GATE_FEATURES, skip_from: int | None = None) -> None:
        super().__init__(attn, ffn)
        self.skip_in, self.backout = skip_in, backout  # what later modules read of this layer (its output)
        self.out = output(2 * index + 1)
        self.skip_lambda: nn.Parameter | None = None
        # where the skip lands: it reads x₀ (its gate) and the stream after layer skip_from (variants.links)
        self.reads = (EMBEDDINGS, output(2 * skip_from + 1)) if skip_out and skip_from is not None else ()
        if skip_out:
            self.skip_lambda = nn.Parameter(torch.tensor(SKIP_LAMBDA))
            self.skip_gate = nn.Linear(gate_features, 1, bias=False)
            nn.init.zeros_(self.skip_gate.weight)
            init_marks.mark_init(self.skip_gate, "zero")  # the skip starts closed under every scheme

    has_skip, has_backout = True, True  # the tricks of this layer class: the speedrun's both

    @classmethod
    def unit(cls, body: nn.Module, join: Combinator, norm: NormFactory, at: SublayerSpec,
             placement: str) -> ResidualUnit:
        """A Pre-LN sublayer on the speedrun's :class:`State`: joined by :class:`SkipToEmbedding` (x₀ read from the
        Past) or by the design's other join (``preln_unet``'s, ``preln_backout``'s ``x + F``)."""
        return SpeedrunUnit(body, join, norm) if isinstance(join, SkipToEmbedding) else StatePreNorm(body, join, norm)

    @classmethod
    def stream(cls, norm: NormFactory, spec: Any, layers: Sequence[Block]) -> EmbeddingStream:
        """The stream with the value embeddings beside it, and :class:`Backout` at its end where the layers have
        it."""
        return Backout(positions(spec.depth)["backout"]) if cls.has_backout else EmbeddingStream()

    @classmethod
    def make(cls, attn: ResidualUnit, ffn: ResidualUnit, at: SublayerSpec) -> Block:
        """Layer ``at.layer`` with the skip and backout marks of :func:`positions` at ``at.depth`` (the skip dropped
        where it would not go forward)."""
        pos, i = positions(at.depth), at.layer
        skips = cls.has_skip and pos["skip_in"] < pos["skip_out"]
        return cls(attn, ffn, index=i, skip_in=skips and i == pos["skip_in"], skip_out=skips and i == pos["skip_out"],
                   backout=cls.has_backout and i == pos["backout"], gate_features=min(GATE_FEATURES, at.d_model),
                   skip_from=pos["skip_in"])

    def forward(self, state: State, past: Past | None = None) -> State:  # type: ignore[override]
        past = needs_past(self, past)
        if self.skip_lambda is not None and self.reads:
            x0, skip = past.read(self.reads)
            x0 = x0[..., :self.skip_gate.in_features]
            gate = torch.sigmoid(self.skip_lambda) * 2 * torch.sigmoid(self.skip_gate(x0))
            state = state._replace(x=state.x + gate * skip)
        state = self.ffn(self.attn(state, past), past)
        past.put(self.out, state.x)
        return state


class UnetSkipLayer(SpeedrunLayer):
    """``x ← ffn(attn(x + σ(λ_skip)·2σ(W_s·x₀[:12])·x_skip))`` where the U-net skip lands (else ``ffn(attn(x))``):
    :class:`SpeedrunLayer` with the skip alone (``preln_unet``)."""

    has_backout = False


class BackoutLayer(SpeedrunLayer):
    """``x ← ffn(attn(x))``, its output left in the Past for backout at the end: :class:`SpeedrunLayer` without the
    skip (``preln_backout``)."""

    has_skip = False


class EmbeddingStream(Stream):
    """``State(x, values = ())``: the stream with the value embeddings beside it (:class:`SpeedrunLM` looks them
    up); its output is the stream ``x``."""

    def begin(self, x: torch.Tensor) -> State:
        return State(x, ())

    def end(self, state: State) -> torch.Tensor:
        return state.x


class Backout(EmbeddingStream):
    """``y = x − λ_b·x_k``: the speedrun's backout before the final norm (λ_b = 0.5 at init), x_k the stream after
    layer ``k``, read from the forward's Past (``reads``)."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.backout = nn.Parameter(torch.tensor(BACKOUT_LAMBDA))
        self.reads = (output(2 * k + 1),)

    def end(self, state: State, x_k: torch.Tensor | None = None) -> torch.Tensor:
        assert x_k is not None, "the model hands backout the stream it reads (its `reads`)"
        return state.x - self.backout * x_k


def positions(depth: int) -> dict[str, int]:
    """The layers of the skip (from ``skip_in``'s output to ``skip_out``'s input: the record's 3 → 6 of 11) and of
    backout (⌊2L/3⌋), 0-based; the skip is dropped where it would not go forward."""
    return {"skip_in": round(3 * depth / 11), "skip_out": round(6 * depth / 11), "backout": min(2 * depth // 3,
                                                                                                 depth - 1)}


class SpeedrunLM(TransformerLM):
    """The family's LM with the speedrun's stream: the token ids also look up the value embeddings."""

    value_embeds: nn.ModuleList

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = check_token_ids(idx, self.max_len)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(torch.arange(t, device=idx.device)))
        past = Past(x, self.links)
        state = cast(State, self.stream.begin(x))._replace(values=tuple(table(idx) for table in self.value_embeds))
        for block in self.blocks:
            state = block(state, past)
        return F.linear(self.norm(end_of(self.stream, state, past)), self.tok_emb.weight)


@register("speedrun", family="transformer", paper=SPEEDRUN_PAPER, spec=TransformerSpec())
def speedrun(spec: TransformerSpec, *, n_value_embeds: int = 3) -> TransformerLM:
    """The speedrun's residual stream on Pre-LN layers; ``n_value_embeds`` tables (the records' 3), each shared by
    layer i and layer depth − 1 − i (fewer where the stack is shallower)."""
    depth, d_model = spec.depth, spec.d_model
    if isinstance(n_value_embeds, bool) or not isinstance(n_value_embeds, int) or n_value_embeds < 0:
        raise ValueError(f"n_value_embeds must be a non-negative integer, got {n_value_embeds!r}")
    tables = min(n_value_embeds, (depth + 1) // 2)
    table_of = {i: i for i in range(tables)} | {depth - 1 - i: i for i in range(tables)}

    design = Design(SPEEDRUN_PAPER, lambda d: ["pre"] * d, lambda depth, d: SkipToEmbedding(),
                    attention=ValueEmbeddingAttention, block=SpeedrunLayer)
    model = SpeedrunLM(design, spec)
    for layer, block in enumerate(cast(list[Block], list(model.blocks))):  # each attention's table, if it has one
        unit = cast(SpeedrunUnit, block.attn)
        unit.value_table = table_of.get(layer)
        if unit.value_table is None:
            cast(ValueEmbeddingAttention, unit.body).gate = None  # no value embedding in this layer: no gate
    model.value_embeds = nn.ModuleList(nn.Embedding(spec.vocab_size, d_model) for _ in range(tables))
    for table in model.value_embeds:
        nn.init.normal_(cast(nn.Embedding, table).weight, std=0.02)  # the family's token-embedding draw
    return model


class ExclusiveSelfAttention(CausalSelfAttention):
    """``z_i = y_i − α·(y_i·v̂_i)·v̂_i``, ``v̂_i = v_i/‖v_i‖``: Zhai 2026, "Exclusive Self Attention" (XSA, arXiv
    2603.09078), each head's attention output y_i less its component along the token's own value v_i (α = 1, the
    paper's ``z_i = y_i − (y_iᵀv_i)·v_i/‖v_i‖²``), then the output projection; α = 0 is the family's attention."""

    def __init__(self, d_model: int, n_heads: int, dropout: float, bias: bool) -> None:
        super().__init__(d_model, n_heads, dropout, bias)
        self.alpha = XSA_ALPHA  # a constant of the design, not a parameter

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.heads(x)
        p = self.attn_dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)  # (B, H, T, d_head)
        v_hat = F.normalize(v, dim=-1)
        z = y - self.alpha * (y * v_hat).sum(-1, keepdim=True) * v_hat
        return self.resid_dropout(self.proj(z.transpose(1, 2).reshape(b, t, c)))


# Each of the speedrun's tricks alone on Pre-LN, so that a study adds one at a time. The stream tricks (U-net skip,
# backout) and XSA change no join, unit placement or body type the registry derives; each declares the axis it is on.
RECORDS = "Jordan et al. 2024-26, modded-nanogpt speedrun records (github.com/KellerJordan/modded-nanogpt, track 1)"
X0_PAPER = (f"{RECORDS}, 'Value and embedding skip connections' (11/2024; per sublayer in the 2026 records): "
            "x ← λ_res·x + λ_post·F(norm(x)) + λ₀·x₀ alone on Pre-LN, λ_res = λ_post = 1, λ₀ = 0 at init")
UNET_PAPER = (f"{RECORDS}, 'U-net pattern skip connections' (11/2024; gated 12/2025): the stream after layer "
              "⌊3L/11⌉ added before layer ⌊6L/11⌉ behind σ(λ_skip)·2σ(W_s·x₀[:12]), alone on Pre-LN")
BACKOUT_PAPER = (f"{RECORDS}, 'Backout' (10/2025): x − λ_b·x_k before the final norm, k = ⌊2L/3⌋, λ_b = 0.5 at init, "
                 "alone on Pre-LN")
XSA_PAPER = ("Zhai 2026, Exclusive Self Attention (arXiv 2603.09078): z_i = y_i − (y_i·v_i)·v_i/‖v_i‖² per head "
             "before the output projection, on Pre-LN")


def _pre(depth: int) -> list[str]:
    return ["pre"] * depth


def _add(depth: int, d_model: int) -> Combinator:
    return COMBINATORS["add"]()


@register("preln_x0", family="transformer", paper=X0_PAPER, spec=TransformerSpec())
def preln_x0(spec: TransformerSpec) -> TransformerLM:
    """Pre-LN with every sublayer joined by :class:`SkipToEmbedding`: learned λ_res, λ_post and the embeddings x₀
    added back with λ₀ (Pre-LN exactly at init)."""
    return TransformerLM(Design(X0_PAPER, "pre", lambda at: SkipToEmbedding()), spec)  # x₀ read from the Past


@register("preln_unet", family="transformer", paper=UNET_PAPER, spec=TransformerSpec(), axes={"stream": "unet"})
def preln_unet(spec: TransformerSpec) -> TransformerLM:
    """Pre-LN with the speedrun's gated U-net skip (:class:`UnetSkipLayer`, at :func:`positions`; none where the stack
    is too shallow for it to go forward)."""
    design = Design(UNET_PAPER, _pre, _add, block=UnetSkipLayer)
    return TransformerLM(design, spec)


@register("preln_backout", family="transformer", paper=BACKOUT_PAPER, spec=TransformerSpec(),
          axes={"stream": "backout"})
def preln_backout(spec: TransformerSpec) -> TransformerLM:
    """Pre-LN with the speedrun's backout: λ_b of the stream after layer ⌊2L/3⌋ (:class:`BackoutLayer`, read from the
    forward's Past) subtracted before the final norm (:class:`Backout`)."""
    design = Design(BACKOUT_PAPER, _pre, _add, block=BackoutLayer)
    return TransformerLM(design, spec)


@register("preln_xsa", family="transformer", paper=XSA_PAPER, spec=TransformerSpec(), axes={"attention": "xsa"})
def preln_xsa(spec: TransformerSpec) -> TransformerLM:
    """Pre-LN with every attention an :class:`ExclusiveSelfAttention`."""
    return TransformerLM(Design(XSA_PAPER, _pre, _add, attention=ExclusiveSelfAttention), spec)
