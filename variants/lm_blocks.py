"""The Transformer's layers, each ``forward`` the equations of its paper, read in one screen.

A layer is an attention sublayer then a feed-forward sublayer. Each sublayer is a :class:`Sublayer`: its branch
``body`` (``Attn`` or ``FFN``), its join ``combine`` (``x + F`` unless the design gives another: ReZero's ``x + α·F``,
DeepNet's ``α·x + F``, LAuReL ...) and the norms its placement has. The layer classes below write the residual
stream out, so that a reader checks each against the paper's equation:

==================  ===========================================================  =====================================
layer               ``forward``                                                  paper
==================  ===========================================================  =====================================
:class:`PreLN`      ``h = x + Attn(LN(x))``, ``y = h + FFN(LN(h))``              Xiong et al. 2020; GPT-2
:class:`PostLN`     ``h = LN(x + Attn(x))``, ``y = LN(h + FFN(h))``              Vaswani et al. 2017
:class:`PeriLN`     ``h = x + LN(Attn(LN(x)))``, ``y = h + LN(FFN(LN(h)))``      Ding et al. 2021; Kim et al. 2025
:class:`NoNorm`     ``h = x + Attn(x)``, ``y = h + FFN(h)``                      T-Fixup (no LayerNorm)
:class:`ReZero`     ``h = x + α·Attn(x)``, ``y = h + α·FFN(h)``, one α            Bachlechner et al. 2020
:class:`B2T`        ``h = LN(x + Attn(x))``, ``y = LN(h + FFN(h) + x)``          Takase et al. 2023
:class:`HybridNorm` ``h = LN(x + Attn(x))``, ``y = h + FFN(h)``                  Zhuo et al. 2025
==================  ===========================================================  =====================================

(``+`` is the sublayer's join.) Any other pair of placements is a :class:`Layer`, ``y = ffn(attn(x))`` with each
sublayer's own formula (:meth:`Sublayer.forward`); a design with units of its own (Hyper-Connections' multi-stream
units, ResiDual's dual stream ...) composes them in a :class:`Block`. Every layer takes the forward's
:class:`~variants.links.Past` and hands it to its joins, which read from it the earlier values they declare
(:mod:`variants.links`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
from torch import nn

from .blocks import NormFactory, ResidualUnit
from .combinators import Combinator
from .links import Past, SublayerSpec, reads

# The norms of each placement, by the names the units of variants.blocks give them (state dicts line up).
NORMS: dict[str, tuple[str, ...]] = {"post": ("norm_out",), "pre": ("norm_in",), "sandwich": ("norm_in", "norm_branch"),
                                     "none": ()}
ALIASES = {"peri": "sandwich"}  # Kim et al. 2025's name for the sandwich
PLACEMENTS = ("post", "pre", "sandwich", "peri", "none")  # variants.blocks.PLACEMENTS's names, in its order


def canonical(placement: str) -> str:
    """A placement's canonical name (``peri`` is ``sandwich``); ValueError names the accepted ones."""
    if placement not in PLACEMENTS:
        raise ValueError(f"norm placement must be one of {PLACEMENTS}, got {placement!r}")
    return ALIASES.get(placement, placement)


class Sublayer(ResidualUnit):
    """``y = norm_out(join(x, norm_branch(F(norm_in(x)))))``, each norm where its placement has one (``pre``: norm_in;
    ``post``: norm_out; ``sandwich``: norm_in and norm_branch; ``none``: no norm): one sublayer of a Transformer layer.

    ``at`` (:class:`~variants.links.SublayerSpec`) says which sublayer it is; its join reads the earlier values it
    declares (:meth:`join`). The layer classes of this module write this formula out for their placements."""

    norm_in: nn.Module  # each where its placement has it (NORMS): an absent norm is no attribute at all
    norm_branch: nn.Module
    norm_out: nn.Module

    def __init__(self, body: nn.Module, combine: Combinator, norm: NormFactory, *, at: SublayerSpec,
                 placement: str) -> None:
        super().__init__(body, combine)
        self.placement = canonical(placement)
        self.at = at
        for name in NORMS[self.placement]:
            setattr(self, name, norm())

    def join(self, x: torch.Tensor, fx: torch.Tensor, past: Past | None) -> torch.Tensor:
        """``combine(x, fx, *sources)``, the sources those its join declares (``reads``), read from ``past``; what
        later joins read of this sublayer (``fx``, the result) is kept in ``past``."""
        sources = reads(self.combine)
        if past is None:
            if sources:
                raise ValueError(f"the join of sublayer {self.at.index} reads {', '.join(map(str, sources))}: call its "
                                 "layer with the forward's Past (layer(x, past))")
            return self.combine(x, fx)
        y = self.combine(x, fx, *past.read(sources))
        past.record(self.at.index, fx, y)
        return y

    def _norm(self, name: str, x: torch.Tensor) -> torch.Tensor:
        norm = self._modules.get(name)
        return x if norm is None else norm(x)

    def forward(self, x: torch.Tensor, past: Past | None = None) -> torch.Tensor:  # type: ignore[override]
        fx = self._norm("norm_branch", self.body(self._norm("norm_in", x)))
        return self._norm("norm_out", self.join(x, fx, past))


class Stream(nn.Module):
    """What the layers hand each other. This base class is the one residual stream; a layer class that keeps several
    (ResiDual's two, Hyper-Connections' n) widens the embeddings into its state in :meth:`begin` and folds the state
    back to one d_model vector per token in :meth:`end`, before the final norm and the head. A stream whose end reads
    an earlier value (the speedrun's backout) declares it in ``reads`` and takes it after the state:
    ``end(state, *earlier)``."""

    def begin(self, x: torch.Tensor) -> Any:
        return x

    def end(self, state: Any) -> torch.Tensor:
        return cast(torch.Tensor, state)


class Block(nn.Module):
    """``x = ffn(attn(x))``: one Transformer layer of a design's own units, its attention sublayer then its
    feed-forward sublayer, each unit's ``forward`` its formula.

    A layer class is all a design adds to its placements, joins and bodies: what its two units are (:meth:`unit`),
    how it is built where it sits (:meth:`make`) and what the layers hand each other (:meth:`stream`); each is a
    class method a layer of a design's own overrides."""

    def __init__(self, attn: ResidualUnit, ffn: ResidualUnit) -> None:
        super().__init__()
        self.attn = attn
        self.ffn = ffn

    @classmethod
    def unit(cls, body: nn.Module, join: Combinator, norm: NormFactory, at: SublayerSpec,
             placement: str) -> ResidualUnit:
        """Sublayer ``at`` of a layer of this class: its branch ``body``, its ``join`` (the design's, built for
        ``at``), the norm factory of the stack and the sublayer's placement. A :class:`Sublayer` of that placement;
        a layer of units of its own (ResiDual's dual stream, Hyper-Connections' n streams) overrides this."""
        return Sublayer(body, join, norm, at=at, placement=placement)

    @classmethod
    def make(cls, attn: ResidualUnit, ffn: ResidualUnit, at: SublayerSpec) -> Block:
        """The layer ``at.layer`` of the stack (``at``: its attention sublayer's spec, the stack's depth and width).
        A layer that needs to know where it sits (a cross-layer design's connection to the layers before it)
        overrides this; the others are ``cls(attn, ffn)``."""
        return cls(attn, ffn)

    @classmethod
    def stream(cls, norm: NormFactory, spec: Any, layers: Sequence[Block]) -> Stream:
        """What layers of this class hand each other, built after them: the one residual stream (:class:`Stream`).
        ``spec`` is the model's :class:`~variants.transformer.TransformerSpec` (its depth, width, biases), ``layers``
        the built stack; a layer class that keeps several streams, or reads an earlier value at the end, overrides
        this."""
        return Stream()

    def forward(self, x: torch.Tensor, past: Past | None = None) -> torch.Tensor:
        return self.ffn(self.attn(x))


class Layer(Block):
    """``x = ffn(attn(x))``: a layer of two :class:`Sublayer` of any placements, each its own formula (the classes
    below write out the published pairs)."""

    attn: Sublayer
    ffn: Sublayer
    placements: tuple[str, str] | None = None  # (attention, feed-forward): what a paper's layer is written for

    def __init__(self, attn: Sublayer, ffn: Sublayer) -> None:
        super().__init__(attn, ffn)
        if self.placements is not None and (attn.placement, ffn.placement) != self.placements:
            raise ValueError(f"{type(self).__name__} is written for placements {self.placements}, got "
                             f"{(attn.placement, ffn.placement)}")

    def forward(self, x: torch.Tensor, past: Past | None = None) -> torch.Tensor:
        return self.ffn(self.attn(x, past), past)


class PreLN(Layer):
    """Pre-LN, Xiong et al. 2020 (GPT-2): ``h = x + Attn(LN(x))``, ``y = h + FFN(LN(h))``, each ``+`` the join."""

    placements = ("pre", "pre")

    def forward(self, x: torch.Tensor, past: Past | None = None) -> torch.Tensor:
        a, f = self.attn, self.ffn
        h = a.join(x, a.body(a.norm_in(x)), past)
        return f.join(h, f.body(f.norm_in(h)), past)


class PostLN(Layer):
    """Post-LN, Vaswani et al. 2017: ``h = LN(x + Attn(x))``, ``y = LN(h + FFN(h))``, each ``+`` the join."""

    placements = ("post", "post")

    def forward(self, x: torch.Tensor, past: Past | None = None) -> torch.Tensor:
        a, f = self.attn, self.ffn
        h = a.norm_out(a.join(x, a.body(x), past))
        return f.norm_out(f.join(h, f.body(h), past))


class PeriLN(Layer):
    """Peri-LN (Kim et al. 2025) = Sandwich-LN (Ding et al. 2021): ``h = x + LN(Attn(LN(x)))``,
    ``y = h + LN(FFN(LN(h)))``, each ``+`` the join."""

    placements = ("sandwich", "sandwich")

    def forward(self, x: torch.Tensor, past: Past | None = None) -> torch.Tensor:
        a, f = self.attn, self.ffn
        h = a.join(x, a.norm_branch(a.body(a.norm_in(x))), past)
        return f.join(h, f.norm_branch(f.body(f.norm_in(h))), past)


class NoNorm(Layer):
    """No LayerNorm (ReZero, Bachlechner et al. 2020; T-Fixup, Huang et al. 2020): ``h = x + Attn(x)``,
    ``y = h + FFN(h)``, each ``+`` the join (ReZero's ``x + α·F``)."""

    placements = ("none", "none")

    def forward(self, x: torch.Tensor, past: Past | None = None) -> torch.Tensor:
        a, f = self.attn, self.ffn
        h = a.join(x, a.body(x), past)
        return f.join(h, f.body(h), past)


class ReZero(NoNorm):
    """ReZero, Bachlechner et al. 2020: ``h = x + α·Attn(x)``, ``y = h + α·FFN(h)``, one α per layer (the paper's
    "single additional learned parameter per layer", shared by the layer's two joins, as in the authors' code)."""

    def __init__(self, attn: Sublayer, ffn: Sublayer) -> None:
        super().__init__(attn, ffn)
        ffn.combine.beta = attn.combine.beta  # two joins (probes see both), one parameter


class B2T(PostLN):
    """B2T connection, Takase et al. 2023, Fig. 1(c): ``h = LN(x + Attn(x))``, ``y = LN(h + FFN(h) + x)``: a Post-LN
    layer whose input also skips to its last norm (inside it, next to the feed-forward's own join)."""

    def forward(self, x: torch.Tensor, past: Past | None = None) -> torch.Tensor:
        a, f = self.attn, self.ffn
        h = a.norm_out(a.join(x, a.body(x), past))
        return f.norm_out(f.join(h, f.body(h), past) + x)


class HybridNorm(Layer):
    """HybridNorm, Zhuo et al. 2025, §3.1 (``x' = x + Attn(x)``, ``y = FFN(N(x')) + N(x')``), regrouped around the
    same two joins: ``h = LN(x + Attn(x))``, ``y = h + FFN(h)``; its attention normalises q, k and v itself."""

    placements = ("post", "none")

    def forward(self, x: torch.Tensor, past: Past | None = None) -> torch.Tensor:
        a, f = self.attn, self.ffn
        h = a.norm_out(a.join(x, a.body(x), past))
        return f.join(h, f.body(h), past)


# The layer of each pair of placements; any other pair is a Layer.
LAYERS: dict[tuple[str, str], type[Layer]] = {
    cls.placements: cls for cls in (PreLN, PostLN, PeriLN, NoNorm, HybridNorm) if cls.placements is not None
}


def layer_for(attn: str, ffn: str) -> type[Layer]:
    """The layer class of two placements (:data:`LAYERS`, else :class:`Layer`)."""
    return LAYERS.get((canonical(attn), canonical(ffn)), Layer)
