"""What a Transformer design of the family is: :class:`Design`, its placements, its join factory, its attention and
feed-forward bodies, its init where the paper is one, and at most a layer class (:class:`~variants.lm_blocks.Block`:
the units a design has of its own, how a layer is built where it sits, what the layers hand each other).

A design reads earlier values of the forward only through :class:`~variants.links.Past` (:mod:`variants.links`): its
joins, layers, units and attention declare what they read in ``reads``; the model keeps those values during one
forward and nothing else. The shipped cross-layer designs are the worked examples: MUDDFormer and DeepCrossAttention
(``variants.dense``), Attention Residuals (``variants.attn_res``), DenseFormer (``variants.denseformer``), value
residual learning (``variants.attention``), the speedrun's embedding skip and backout (``variants.speedrun``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn

from .attention import CausalSelfAttention, QKVNormAttention, ValueResidualAttention, ValueResidualPreLN
from .blocks import NormFactory, PostNorm, ResidualUnit
from .combinators import COMBINATORS, Combinator, Scaled
from .ffn import FfnArg
from .links import SublayerSpec
from .lm_blocks import B2T, PLACEMENTS, Block, ReZero, Stream, canonical
from .lm_inits import deepnorm_alpha_beta

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
      :data:`DEFAULT_INIT` applies; ``ffn`` pins the feed-forward body the same way (a name of
      :data:`~variants.ffn.FFNS` or a registered one; None: the spec's, the ``ffn`` axis).
    - ``attention``: the attention body's class (HybridNorm's QKV-Norm, ResFormer's values; default the family's).

    - ``block``: the layer class, for a design that needs one (B2T's, ReZero's one scale per layer, a cross-layer
      design's connection, ResiDual's two streams): a :class:`~variants.lm_blocks.Block` subclass whose class methods
      build its units (``unit``), the layer where it sits (``make``) and what the layers hand each other
      (``stream``: several streams, or the end backout reads). None: the layer written for each pair of placements.

    Whether a final norm closes the stack follows the placements (:meth:`final_norm`)."""

    paper: str
    placements: str | Callable[[int], Sequence[str | tuple[str, str]]]
    combinator: JoinFactory | Callable[[int, int], Combinator] = field(default=lambda at: COMBINATORS["add"]())
    init: str | None = None
    block: type[Block] | None = None  # the layer around two units (None: the one written for their placements)
    attention: type[CausalSelfAttention] = CausalSelfAttention  # HybridNorm's QKV-Norm, ResFormer's values
    ffn: str | FfnArg | None = None  # the feed-forward body where the paper is one (None: the spec's, the ffn axis)

    def __new__(cls, *args: Any, **fields: Any) -> Design:
        """Refuses a field the class no longer has, saying what replaced it (before the dataclass's own check)."""
        for name in fields.keys() & REMOVED:
            raise TypeError(f"Design has no field {name!r}: {REMOVED[name]}")
        return super().__new__(cls)

    def final_norm(self, depth: int) -> bool:
        """Whether a final norm closes the stack: where its last sublayer leaves the stream un-normalised (placement
        ``pre``, ``sandwich`` or ``none``: a residual add after the last norm), unless the stack has no norm at all
        (ReZero, T-Fixup). Post-LN ends normalised; HybridNorm's last sublayer (``none``) does not."""
        placements = [canonical(p) for pair in self.layouts(depth) for p in pair]
        return placements[-1] != "post" and any(p != "none" for p in placements)

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


# Fields a Design once had, and what replaced each: the error a plugin that still passes one gets.
REMOVED = {
    "dense": "DenseFormer's averages sit between layers, in its own model: variants.denseformer.DenseFormer(design, "
             "spec) builds them after every layer of the design (each reads the layers' feed-forward join outputs)",
    "unit": "a design's units are its layer class's: subclass variants.Block, override its class method "
            "unit(body, join, norm, at, placement) and pass Design(block=YourLayer)",
    "stream": "what the layers hand each other is their layer class's: subclass variants.Block, override its class "
              "method stream(norm, spec, layers) and pass Design(block=YourLayer)",
    "final_norm": "the final norm follows the placements (Design.final_norm(depth)): one closes a stack whose last "
                  "sublayer leaves the stream un-normalised (pre, sandwich, none), unless it has no norm at all; to "
                  "change it, set model.norm on the built model",
}


def _positional(factory: Callable[..., object]) -> int:
    """How many positional arguments ``factory`` requires (1 where its signature cannot be read)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return 1
    return sum(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


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




class DualLayer(Block):
    """``(x_a, x_d) ← ffn(attn(x_a, x_d))``: a ResiDual layer (Xie 2023, §3.2), two :class:`DualPostNorm` sublayers
    on the two streams of :class:`DualStream`."""

    @classmethod
    def unit(cls, body: nn.Module, join: Combinator, norm: NormFactory, at: SublayerSpec,
             placement: str) -> ResidualUnit:
        return DualPostNorm(body, join, norm)

    @classmethod
    def stream(cls, norm: NormFactory, spec: Any, layers: Sequence[Block]) -> DualStream:
        return DualStream(norm)


def mixln_post_layers(depth: int) -> int:
    """Mix-LN (Li 2024) with its α = 0.25: the first ⌊depth/4⌋ layers are Post-LN (rounded down)."""
    return depth // 4



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
        block=ReZero,  # the paper's "single additional learned parameter per layer"
    ),
    "b2t": Design(
        "Takase et al. 2023, B2T Connection: Serving Stability and Performance in Deep Transformers, Fig. 1(c)",
        "post", block=B2T,
    ),
    "admin": Design(
        "Liu et al. 2020, Understanding the Difficulty of Training Transformers (Admin, §4.3): Post-LN, "
        "x_i = LN(ω_i ⊙ x_{i-1} + f_i(x_{i-1})), ω_i from a profiling pass at init", "post",
        lambda at: Scaled(alpha=1.0, alpha_shape=(at.d_model,), channel_dim=-1), init="admin",
    ),
    "resi_dual": Design(
        "Xie et al. 2023, ResiDual: Transformer with Dual Residual Connections (Pre-Post-LN, §3.2)", "post",
        block=DualLayer,
    ),
    "hybridnorm": Design(
        "Zhuo et al. 2025, HybridNorm: Towards Stable and Efficient Transformer Training via Hybrid Normalization "
        "(QKV-Norm in attention, Post-Norm in the FFN; §3.1)", lambda depth: [("post", "none")] * depth,
        attention=QKVNormAttention,
    ),
    "value_residual": Design(
        "Zhou et al. 2024, Value Residual Learning (ResFormer, eq. 6, λ1 = λ2 = 0.5; Pre-LN base)", "pre",
        attention=ValueResidualAttention, block=ValueResidualPreLN,
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
