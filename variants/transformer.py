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
  all earlier block outputs, the identity at init — Pagliardini et al. 2024, "DenseFormer".
- ``mixln``: Post-LN in the first ⌊N/4⌋ layers, Pre-LN after — Li et al. 2024, "Mix-LN: Unleashing the
  Power of Deeper Layers by Combining Pre-LN and Post-LN" (trained there with ``init=normal``).

Embeddings are initialised the GPT-2 way (token N(0, 0.02), position N(0, 0.01), no √d scaling) in
every variant: with a tied head, larger embeddings make a freshly initialised model predict its own
input token (loss far above ln V), an artifact that would confound the placement comparison.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from . import axes
from .blocks import NormFactory, PostNorm, ResidualUnit
from .checks import choice, flag, positive_int, rate
from .combinators import COMBINATORS, Combinator, Laurel, Scaled
from .links import EMBEDDINGS, Past, Source, SublayerSpec, output, reads
from .lm_blocks import B2T, PLACEMENTS, Block, Layer, Sublayer, canonical, layer_for
from .norms import LN_EPS, NORMS, NormArg, ScaleNorm, resolve_norm  # noqa: F401  (re-exported: the family's names)
from .registry import register


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
             first: CausalSelfAttention | None) -> CausalSelfAttention:
        """The attention of one layer; ``head_norm(d)`` makes a norm of width d, ``first`` is layer 0's attention
        (None in layer 0). Subclasses that need either override this."""
        return cls(d_model, n_heads, dropout, bias)

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v of shape (batch, heads, seq, d_head): what a variant that touches attention overrides."""
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, c // self.n_heads).permute(2, 0, 3, 1, 4)
        return q, k, v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.heads(x)
        p = self.attn_dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        return self.resid_dropout(self.proj(y.transpose(1, 2).reshape(b, t, c)))


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
             first: CausalSelfAttention | None) -> CausalSelfAttention:
        return cls(d_model, n_heads, dropout, bias, head_norm)

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = super().heads(x)
        return self.q_norm(q), self.k_norm(k), self.v_norm(v)


class ValueResidualAttention(CausalSelfAttention):
    """Zhou et al. 2024, "Value Residual Learning" (ResFormer), eq. 6 with λ₁ = λ₂ = ½: every layer after the first
    attends over ``½·(V_n + V_1)``, V_1 the first layer's values of the same forward pass (layer 0 keeps its own).

    The first layer's values are held on that layer's module from its forward until the last later layer has
    read them, then dropped (no graph outlives the forward); later layers hold a reference to it, not a
    submodule, so its parameters stay registered once."""

    def __init__(self, d_model: int, n_heads: int, dropout: float, bias: bool,
                 first: ValueResidualAttention | None) -> None:
        super().__init__(d_model, n_heads, dropout, bias)
        self._first = (first,) if first is not None else ()  # a tuple: nn.Module does not register it
        self.values: torch.Tensor | None = None
        self._readers = self._reads = 0
        if first is not None:
            first._readers += 1

    @classmethod
    def make(cls, d_model: int, n_heads: int, dropout: float, bias: bool, *, head_norm: Callable[[int], nn.Module],
             first: CausalSelfAttention | None) -> CausalSelfAttention:
        if first is not None and not isinstance(first, ValueResidualAttention):
            raise TypeError("a value-residual layer needs a value-residual first layer")
        return cls(d_model, n_heads, dropout, bias, first)

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = super().heads(x)
        if not self._first:
            # A new pass starts here: what an interrupted pass left (values, a count of its readers) is dropped, so
            # a forward that raised mid-way (an out-of-memory in one phase) never breaks the next.
            self.values, self._reads = (v if self._readers else None), 0
            return q, k, v
        first = self._first[0]
        v1 = first.values
        assert v1 is not None, "layer 0 runs first"
        first._reads += 1
        if first._reads == first._readers:  # the last reader of this forward
            first.values, first._reads = None, 0
        return q, k, 0.5 * (v + v1)


class FeedForward(nn.Module):
    """Position-wise ``fc2(GELU(fc1(x)))`` (GPT-2's tanh-approximate GELU) for every variant."""

    probe_kind = "ffn"

    def __init__(self, d_model: int, d_ff: int, dropout: float, bias: bool) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff, bias=bias)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.fc2(self.act(self.fc1(x))))


class SwiGLU(nn.Module):
    """Shazeer 2020, "GLU Variants Improve Transformer", eq. 6: ``fc2(SiLU(x·W) ⊙ (x·V))``, W and V fused in
    ``fc1`` (output rows 0:h are W, h:2h are V). ``h`` = :func:`swiglu_hidden` of ``d_ff``."""

    probe_kind = "ffn"

    def __init__(self, d_model: int, d_ff: int, dropout: float, bias: bool) -> None:
        super().__init__()
        hidden = swiglu_hidden(d_ff)
        self.fc1 = nn.Linear(d_model, 2 * hidden, bias=bias)
        self.fc2 = nn.Linear(hidden, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.fc1(x).chunk(2, dim=-1)
        return self.dropout(self.fc2(F.silu(gate) * up))


def swiglu_hidden(d_ff: int) -> int:
    """SwiGLU's hidden width for a GELU width ``d_ff``: round(2/3 · d_ff), so that its three matrices hold the
    parameters of the GELU FFN's two (Shazeer 2020 §2 reduces the width this way; so does LLaMA)."""
    return max(1, round(2 * d_ff / 3))


# The feed-forward body: GPT-2's GELU MLP or Shazeer's SwiGLU.
FFNS: dict[str, Callable[[int, int, float, bool], nn.Module]] = {"gelu": FeedForward, "swiglu": SwiGLU}
# A plugin adds to both with variants.register_norm / register_ffn (variants.axes), or passes a factory directly
# (the norm types, NORMS and NormArg, are variants.norms'):
FfnArg = Callable[..., nn.Module]  # factory(d_model, d_ff, dropout, bias): the feed-forward body
InitArg = Callable[[torch.Tensor], object]  # draw(weight): fills one weight in place
axes.ship("ffn", FFNS)


class DepthWeightedAverage(nn.Module):
    """Pagliardini et al. 2024, "DenseFormer: Enhancing Information Flow in Transformers via Depth Weighted
    Averaging", §3: after block i the next block reads ``Σ_j α_ij · X_j`` over the embeddings ``X_0`` and the
    outputs ``X_1 .. X_i`` of blocks 1..i; α starts at the identity (1 on ``X_i``, 0 elsewhere), where the model
    equals its Pre-LN base.

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


class Stream(nn.Module):
    """What the blocks hand each other. This base class is the one residual stream; a design that keeps several
    (ResiDual's two) widens the embeddings into its state in :meth:`begin` and folds the state back to one
    d_model vector per token in :meth:`end`, before the final norm and the head."""

    def begin(self, x: torch.Tensor) -> Any:
        return x

    def end(self, state: Any) -> torch.Tensor:
        return cast(torch.Tensor, state)


class DualStream(Stream):
    """Xie et al. 2023, "ResiDual: Transformer with Dual Residual Connections", §3.2: the Post-LN stream x_a and
    the dual stream x_d (Pre-LN's un-normalised sum of every sublayer's output) both start at the embeddings;
    the model's output is ``x_a + LN(x_d)`` (the authors' code, with its default scales 1)."""

    def __init__(self, norm: NormFactory) -> None:
        super().__init__()
        self.norm_dual = norm()

    def begin(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, x

    def end(self, state: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x_a, x_d = state
        return x_a + self.norm_dual(x_d)


class DualPostNorm(PostNorm):
    """ResiDual's sublayer (Xie 2023, eq. 4–5): ``x_a ← LN(x_a + F(x_a))``, ``x_d ← x_d + F(x_a)``; the Post-LN
    join is the probed one."""

    placement = "dual"  # the paper's Pre-Post-LN (PPLN)

    def forward(self, state: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        x_a, x_d = state
        fx = self.drop_path(self.body(x_a))
        return self.norm_out(self.combine(x_a, fx)), x_d + fx


def deepnorm_alpha_beta(depth: int) -> tuple[float, float]:
    """DeepNet's decoder-only constants (Wang 2022, Fig. 2): α = (2N)^¼ on the shortcut, β = (8N)^-¼ on the init."""
    if depth < 1:
        raise ValueError(f"depth must be >= 1 (number of Transformer layers), got {depth}")
    return (2 * depth) ** 0.25, (8 * depth) ** -0.25


def mixln_post_layers(depth: int) -> int:
    """Mix-LN (Li 2024) with its α = 0.25: the first ⌊depth/4⌋ layers are Post-LN (rounded down)."""
    return depth // 4


# --- initialisation schemes (linear layers only; biases start at 0, LayerNorms at weight 1 / bias 0) ---


def linears(body: nn.Module) -> list[nn.Linear]:
    """The ``nn.Linear`` layers of a sublayer body in module order: q|k|v then the output projection for the
    attention, fc1 then fc2 for the shipped feed-forward bodies (a registered one: whatever it holds). The last is
    the projection back into the residual stream."""
    return [m for m in body.modules() if isinstance(m, nn.Linear)]


def _init_gpt2(model: TransformerLM) -> None:
    """GPT-2 / Megatron: N(0, 0.02); residual output projections N(0, 0.02/√(2N)) (GPT-2 §2.3, N layers)."""
    resid_std = 0.02 / math.sqrt(2 * len(model.blocks))
    for attn, ffn in model.bodies():
        for lins in (linears(attn), linears(ffn)):
            for i, lin in enumerate(lins):
                nn.init.normal_(lin.weight, std=resid_std if i == len(lins) - 1 else 0.02)


def _init_draw(model: TransformerLM, draw: Callable[[torch.Tensor], object]) -> None:
    """``draw`` on every linear weight of every sublayer body, attention then feed-forward, layer by layer."""
    for attn, ffn in model.bodies():
        for lin in (*linears(attn), *linears(ffn)):
            draw(lin.weight)


def _init_normal(model: TransformerLM) -> None:
    """LLaMA-style N(0, 0.02) everywhere, no depth scaling (the setup Mix-LN trains in)."""
    _init_draw(model, lambda w: nn.init.normal_(w, std=0.02))


def _init_xavier(model: TransformerLM) -> None:
    """Xavier-uniform (Glorot 2010), as tensor2tensor/PyTorch ``nn.Transformer`` (fused q|k|v like ``in_proj``)."""
    _init_draw(model, nn.init.xavier_uniform_)


def _init_deepnorm(model: TransformerLM) -> None:
    """DeepNet Fig. 2: xavier_normal with gain β on ffn, v and out projections, gain 1 on q and k."""
    _, beta = deepnorm_alpha_beta(len(model.blocks))
    for attn, ffn in model.bodies():
        d = attn.proj.weight.shape[0]
        with torch.no_grad():
            for rows, gain in ((slice(0, d), 1.0), (slice(d, 2 * d), 1.0), (slice(2 * d, 3 * d), beta)):
                nn.init.xavier_normal_(attn.qkv.weight[rows], gain=gain)  # q, k, v each a d×d matrix
        for lin in (attn.proj, *linears(ffn)):
            nn.init.xavier_normal_(lin.weight, gain=beta)


def t_fixup_scale(depth: int) -> float:
    """T-Fixup's decoder factor (Huang et al. 2020, Algorithm 1 step 2): (9N)^-¼ for N decoder layers."""
    if depth < 1:
        raise ValueError(f"depth must be >= 1 (number of Transformer layers), got {depth}")
    return (9 * depth) ** -0.25


def _init_t_fixup(model: TransformerLM) -> None:
    """Huang et al. 2020, "Improving Transformer Optimization Through Better Initialization", Algorithm 1 (decoder):
    Xavier-uniform everywhere; token embeddings N(0, d^-½); then v, the attention output projection, both feed-
    forward matrices and the token embeddings scaled by (9N)^-¼ (q and k keep Xavier). The learned position
    table keeps the family's N(0, 0.01): the paper's positions are fixed sinusoids, outside Algorithm 1."""
    _init_xavier(model)
    scale = t_fixup_scale(len(model.blocks))
    d = model.tok_emb.weight.shape[1]
    with torch.no_grad():
        nn.init.normal_(model.tok_emb.weight, std=d ** -0.5)
        model.tok_emb.weight.mul_(scale)
        for attn, ffn in model.bodies():
            attn.qkv.weight[2 * d:].mul_(scale)  # v (rows 2d:3d of the fused q|k|v)
            for lin in (attn.proj, *linears(ffn)):
                lin.weight.mul_(scale)


def _init_admin(model: TransformerLM) -> None:
    """Liu et al. 2020, "Understanding the Difficulty of Training Transformers" (Admin, §4.3): Post-LN with
    ``x_i = LN(ω_i ⊙ x_{i-1} + f_i(x_{i-1}))``, ω_i a learnable vector set by one profiling forward pass.

    Xavier weights first (the family default); then the recurrence of the authors' code (Transformer-Clinic,
    ``adaptive-profiling``), sublayer by sublayer in forward order: ``ω_1 = 1``,
    ``ω_{i+1} = √(Var[ω_i·x_{i-1}] + Var[f_i(x_{i-1})])`` (variances over the whole batch), i.e. the paper's
    ``ω_i² = Σ_{j<i} Var[f_j]`` plus the embeddings' variance. The authors profile on the first training
    batch; the registry builds a model before it sees data, so the profile here runs on 4 sequences of
    uniformly random tokens drawn from torch's generator (reproducible under the run's seed)."""
    _init_xavier(model)
    if model.tok_emb.weight.is_meta:  # a meta-device build (describe, the confound guard): shapes only
        return
    vocab, device = model.tok_emb.num_embeddings, model.tok_emb.weight.device
    admin_profile(model, torch.randint(0, vocab, (4, min(model.max_len, 64)), device=device))


def admin_profile(model: TransformerLM, idx: torch.Tensor) -> None:
    """Set every learnable shortcut weight ω (Admin's) by the profiling recurrence of :func:`_init_admin` on the
    token batch ``idx``, in one forward pass without gradients."""
    joins = [m for m in model.modules() if isinstance(m, Scaled) and isinstance(m.alpha, nn.Parameter)]
    running = [1.0]

    def profile(module: nn.Module, args: tuple[torch.Tensor, torch.Tensor]) -> None:
        x, fx = args
        alpha = cast(nn.Parameter, cast(Scaled, module).alpha)
        alpha.data.fill_(running[0])
        running[0] = math.sqrt(float((alpha * x).var()) + float(fx.var()))

    hooks = [j.register_forward_pre_hook(profile) for j in joins]
    try:
        with torch.no_grad():
            model(idx)
    finally:
        for h in hooks:
            h.remove()


INITS: dict[str, Callable[[TransformerLM], None]] = {
    "gpt2": _init_gpt2,
    "normal": _init_normal,
    "xavier": _init_xavier,
    "deepnorm": _init_deepnorm,
    "t_fixup": _init_t_fixup,
    "admin": _init_admin,
}
axes.ship("init", INITS)
# One default for every placement (Xiong et al. 2020 ran Post-LN and Pre-LN under Xavier): a comparison of
# placements must not also compare initialisations.
DEFAULT_INIT = "xavier"


def resolve_init(init: object) -> tuple[str, Callable[[TransformerLM], None]]:
    """``(name, scheme)`` of an ``init`` argument: a name of :data:`INITS`, a registered init (``variants.
    register_init``) or a draw ``(weight) -> Any`` passed directly; either draw fills every sublayer's linear
    weights (:func:`_init_draw`)."""
    name, value = axes.lookup("init", init, INITS, message=lambda known: (
        f"unknown init {init!r}; choose one of: {', '.join(known)} (or pass a draw (weight) -> None)"))
    if isinstance(init, str) and init in INITS:
        return name, cast(Callable[[TransformerLM], None], value)
    return name, partial(_init_draw, draw=cast(InitArg, value))


def resolve_ffn(ffn: object) -> tuple[str, Callable[[int, int, float, bool], nn.Module]]:
    """``(name, make)`` of an ``ffn`` argument (a name of :data:`FFNS`, a registered body or a factory)."""
    name, factory = axes.lookup("ffn", ffn, FFNS, message=lambda known: (
        f"unknown ffn {ffn!r}; choose one of: {', '.join(known)} (or pass a factory (d_model, d_ff, dropout, bias))"))
    if name in FFNS and factory is FFNS[name]:
        return name, factory
    return name, lambda *args: axes.tagged(factory(*args), "ffn", name)


# A sublayer's unit from (index over all sublayers, placement, body, combinator, norm factory), for a design whose
# sublayers are units of its own (index 2i is layer i's attention, 2i + 1 its feed-forward).
UnitFactory = Callable[[int, str, nn.Module, Combinator, NormFactory], ResidualUnit]
JoinFactory = Callable[[SublayerSpec], Combinator]  # the join of one sublayer, told which (variants.links)


@dataclass(frozen=True)
class Design:
    """A Transformer variant on the family's trunk: where its norms sit, how each sublayer joins, what else it adds.

    - ``placements``: one norm placement for every layer (``"pre"``, ``"post"``, ``"sandwich"``/``"peri"``,
      ``"none"``), or ``placements(depth)``, one per layer: a placement for both sublayers or an (attention,
      feed-forward) pair. A layer is the class written for its pair (``PreLN``, ``PostLN``, ``PeriLN``, ``NoNorm``,
      ``HybridNorm``: :data:`variants.lm_blocks.LAYERS`), else a :class:`~variants.lm_blocks.Layer`.
    - ``combinator``: the join factory, called once per sublayer in forward order with its
      :class:`~variants.links.SublayerSpec` (``index``, ``kind``, ``depth``, ``d_model``); a join that reads earlier
      outputs declares them in ``reads`` and receives them after ``x`` and ``F(x)`` (:mod:`variants.links`). A
      factory of no argument (a join class such as ``Add``) or of two, ``(depth, d_model)``, is taken too. Default:
      ``x + F(x)``.
    - ``init`` pins a scheme only where the paper *is* an initialisation (DeepNet, T-Fixup), else the family default
      :data:`DEFAULT_INIT` applies.

    The other fields are for the designs that need them: the layer class (``block``, B2T's), one scale shared by a
    layer's two joins (ReZero), DenseFormer's averages, another attention, units and layers of a design's own, the
    state the layers hand each other (``stream``) and whether a final norm closes the stack."""

    paper: str
    placements: str | Callable[[int], Sequence[str | tuple[str, str]]]
    combinator: JoinFactory | Callable[[int, int], Combinator] = field(default=lambda at: COMBINATORS["add"]())
    init: str | None = None
    one_scale_per_layer: bool = False  # ReZero: both sublayers of a layer share one learnable α
    block: type[Layer] | None = None  # the layer around two Sublayers (None: the one written for their placements)
    dense: bool = False  # DenseFormer: a depth-weighted average of all earlier outputs after every block
    attention: type[CausalSelfAttention] = CausalSelfAttention  # HybridNorm's QKV-Norm, ResFormer's values
    unit: UnitFactory | None = None  # units of the design's own (None: a Sublayer of the placement)
    stream: Callable[[NormFactory], Stream] = field(default=lambda norm: Stream())  # ResiDual: two streams
    final_norm: bool | None = None  # None: when the last sublayer leaves the stream un-normalised (pre/sandwich)
    # A layer that needs to know where it sits (a cross-layer design's connection to the layers before it):
    # layer(i, attn, ffn) for layer i; None: block(attn, ffn).
    layer: Callable[[int, ResidualUnit, ResidualUnit], Block] | None = None

    def layouts(self, depth: int) -> list[tuple[str, str]]:
        """The (attention, feed-forward) placements of each of ``depth`` layers."""
        each = [self.placements] * depth if isinstance(self.placements, str) else self.placements(depth)
        return [(p, p) if isinstance(p, str) else p for p in each]

    def join(self) -> JoinFactory:
        """:attr:`combinator` as a factory given the :class:`~variants.links.SublayerSpec`."""
        make = self.combinator
        wants = _positional(make)
        if wants == 0:  # a join class that takes nothing: Add, or a plugin's
            return lambda at: cast(Callable[[], Combinator], make)()
        if wants == 2:  # the older form: (depth, d_model)
            two = cast(Callable[[int, int], Combinator], make)
            return lambda at: two(at.depth, at.d_model)
        return cast(JoinFactory, make)


def _positional(factory: Callable[..., object]) -> int:
    """How many positional arguments ``factory`` requires (1 where its signature cannot be read)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return 1
    return sum(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


DESIGNS: dict[str, Design] = {
    "postln": Design("Vaswani et al. 2017, Attention Is All You Need", "post"),
    "preln": Design(
        "Xiong et al. 2020, On Layer Normalization in the Transformer Architecture; Radford et al. 2019, GPT-2", "pre",
    ),
    "sandwich": Design(
        "Ding et al. 2021, CogView (Sandwich-LN); Kim et al. 2025, Peri-LN: Revisiting Layer Normalization "
        "in the Transformer Architecture", "sandwich",
    ),
    "deepnorm": Design(
        "Wang et al. 2022, DeepNet: Scaling Transformers to 1,000 Layers", "post",
        lambda at: COMBINATORS["scaled"](alpha=deepnorm_alpha_beta(at.depth)[0]), init="deepnorm",
    ),
    "rezero_lm": Design(
        "Bachlechner et al. 2020, ReZero is All You Need: Fast Convergence at Large Depth", "none",
        lambda at: COMBINATORS["scaled"](alpha=1.0, beta=0.0, learnable_beta=True),
        one_scale_per_layer=True,  # the paper's "single additional learned parameter per layer"
    ),
    "b2t": Design(
        "Takase et al. 2023, B2T Connection: Serving Stability and Performance in Deep Transformers, Fig. 1(c)",
        "post", block=B2T,
    ),
    "denseformer": Design(
        "Pagliardini et al. 2024, DenseFormer: Enhancing Information Flow in Transformers via Depth Weighted "
        "Averaging (DWA after every block, all earlier outputs)", "pre", dense=True,
    ),
    "admin": Design(
        "Liu et al. 2020, Understanding the Difficulty of Training Transformers (Admin, §4.3): Post-LN, "
        "x_i = LN(ω_i ⊙ x_{i-1} + f_i(x_{i-1})), ω_i from a profiling pass at init", "post",
        lambda at: Scaled(alpha=1.0, alpha_shape=(at.d_model,), channel_dim=-1), init="admin",
    ),
    "resi_dual": Design(
        "Xie et al. 2023, ResiDual: Transformer with Dual Residual Connections (Pre-Post-LN, §3.2)", "post",
        unit=lambda index, placement, body, combine, norm: DualPostNorm(body, combine, norm), stream=DualStream,
    ),
    "hybridnorm": Design(
        "Zhuo et al. 2025, HybridNorm: Towards Stable and Efficient Transformer Training via Hybrid Normalization "
        "(QKV-Norm in attention, Post-Norm in the FFN; §3.1)", lambda depth: [("post", "none")] * depth,
        attention=QKVNormAttention, final_norm=True,
    ),
    "value_residual": Design(
        "Zhou et al. 2024, Value Residual Learning (ResFormer, eq. 6, λ1 = λ2 = 0.5; Pre-LN base)", "pre",
        attention=ValueResidualAttention,
    ),
    "t_fixup": Design(
        "Huang et al. 2020, Improving Transformer Optimization Through Better Initialization (T-Fixup, "
        "Algorithm 1, decoder): no LayerNorm", "none", init="t_fixup",
    ),
    "mixln": Design(
        "Li et al. 2024, Mix-LN: Unleashing the Power of Deeper Layers by Combining Pre-LN and Post-LN",
        lambda depth: ["post"] * mixln_post_layers(depth) + ["pre"] * (depth - mixln_post_layers(depth)),
    ),
}


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

        def unit(index: int, placement: str, body: nn.Module, join: Combinator) -> ResidualUnit:
            if design.unit is not None:
                return design.unit(index, placement, body, join, make_norm)
            return Sublayer(body, join, make_norm, at=SublayerSpec.of(index, depth, d_model), placement=placement)

        placements = design.layouts(depth)
        layers: list[Block] = []
        first: CausalSelfAttention | None = None
        for i, (p_attn, p_ffn) in enumerate(placements):
            attn = design.attention.make(d_model, spec.n_heads, dropout, bias, first=first, head_norm=norm_of_width)
            first = attn if first is None else first
            units = (unit(2 * i, p_attn, attn, make_join(SublayerSpec.of(2 * i, depth, d_model))),
                     unit(2 * i + 1, p_ffn, make_ffn(d_model, spec.d_ff, dropout, bias),
                          make_join(SublayerSpec.of(2 * i + 1, depth, d_model))))
            if design.layer is not None:
                layers.append(design.layer(i, *units))
            else:
                block = design.block or (Block if design.unit is not None else layer_for(p_attn, p_ffn))
                layers.append(block(*units))
        self.blocks = nn.ModuleList(layers)
        self.stream = design.stream(make_norm)
        # DenseFormer's averages: one after each block, over the embeddings and every block output so far.
        self.dwa = nn.ModuleList(DepthWeightedAverage(i) for i in range(depth)) if design.dense else None
        if design.one_scale_per_layer:
            for blk in self.blocks:  # two Scaled modules (probes see both joins), one parameter
                assert isinstance(blk, Block)
                blk.ffn.combine.beta = blk.attn.combine.beta
        # What the forward's Past keeps: every earlier value a join (or a DenseFormer average) declared it reads.
        readers = [m.combine for m in self.modules() if isinstance(m, Sublayer)] + list(self.dwa or ())
        self.links = frozenset(s for m in readers for s in reads(m))
        # A final LN is needed exactly when the last layer leaves the stream un-normalised by a
        # residual add after a norm (pre/sandwich); post-LN ends normalised, ReZero has no LN by design.
        final = design.final_norm if design.final_norm is not None else canonical(placements[-1][1]) in ("pre",
                                                                                                     "sandwich")
        self.norm = make_norm() if final else nn.Identity()
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
        past = Past(x, self.links)  # what the layers pass along: the earlier values joins declared they read
        state = self.stream.begin(x)
        for i, block in enumerate(self.blocks):
            state = block(state, past)
            if self.dwa is not None:
                state = self.dwa[i](*past.read(reads(self.dwa[i])))
        return F.linear(self.norm(self.stream.end(state)), self.tok_emb.weight)


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


def design_of(design: str | Design) -> Design:
    """A :class:`Design`: one given, a name of :data:`DESIGNS` (``"preln"``, ``"b2t"`` ...), or a norm placement of
    ``variants.blocks.PLACEMENTS`` (``"pre"``, ``"post"``, ``"sandwich"``, ``"peri"``, ``"none"``) with identity
    joins on every sublayer."""
    if isinstance(design, Design):
        return design
    if isinstance(design, str) and design in DESIGNS:
        return DESIGNS[design]
    if isinstance(design, str) and design in PLACEMENTS:
        return Design(f"{design} placement", design)
    raise ValueError(f"design must be a Design, one of {tuple(DESIGNS)} or a placement of {tuple(PLACEMENTS)}, "
                     f"got {design!r}")


def build_transformer(design: str | Design, spec: TransformerSpec | None = None, /, **overrides: Any) -> TransformerLM:
    """The family's LM of ``design`` (:func:`design_of`: a :class:`Design`, a name of :data:`DESIGNS` or a placement)
    on ``spec`` (default: :class:`TransformerSpec`'s defaults, the family's), with ``overrides`` replacing spec
    fields: ``build_transformer("sandwich", norm="dyt")``. A plugin registers a variant on it without copying a
    default::

        @variants.register("sandwich_dyt", family="transformer", paper="...", spec=variants.TransformerSpec(norm="dyt"))
        def sandwich_dyt(spec):
            return variants.build_transformer("sandwich", spec)

    A design whose paper is an initialisation (``deepnorm``, ``admin``, ``t_fixup``) must be given that ``init``.
    """
    resolved = design_of(design)
    spec = dataclasses.replace(spec or TransformerSpec(), **overrides)
    if resolved.init is not None and spec.init != resolved.init:
        raise ValueError(f"design {design!r} is its initialisation: init must be {resolved.init!r}, got {spec.init!r}")
    return TransformerLM(resolved, spec)


def _on_spec(design: Design) -> Callable[[TransformerSpec], TransformerLM]:
    """The registered builder of ``design``: its LM on the spec the registry hands it."""

    def build(spec: TransformerSpec) -> TransformerLM:
        return build_transformer(design, spec)

    build.__doc__ = f"{design.paper}: :func:`build_transformer` of this design on ``spec``."
    return build


_BUILDERS = {name: _on_spec(design) for name, design in DESIGNS.items()}
for _name, _design in DESIGNS.items():
    _pinned: dict[str, Any] = {"init": _design.init} if _design.init else {}  # the paper is the init: not overridable
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
