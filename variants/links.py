"""How a Transformer sublayer's join reads the outputs of the sublayers before it: the public path for designs that
link layers (DenseFormer, MUDDFormer, Attention Residuals, value and embedding skips, a design of one's own).

Three parts, each small:

- :class:`SublayerSpec` says which sublayer a join is built for: its ``index`` among all sublayers in forward order
  (``2·i`` is layer ``i``'s attention, ``2·i + 1`` its feed-forward), its ``kind`` (``"attn"`` or ``"ffn"``), the
  stack's ``depth`` (layers) and ``d_model``. A :class:`~variants.transformer.Design`'s join factory receives it,
  so a join knows where it sits without a counter in a closure.
- :class:`Source` names an earlier value: the embeddings (:data:`EMBEDDINGS`), the branch output ``F_j`` of
  sublayer ``j`` (:func:`branch`), the residual stream sublayer ``j`` left (:func:`output`), the values ``V`` of
  attention sublayer ``j`` (:func:`values`) or a value of a design's own that sublayer ``j`` computed (:func:`own`:
  Attention Residuals' block sums). A module declares what it reads in its ``reads`` attribute, a tuple of sources,
  set when it is built; a module that reads nothing earlier declares nothing.
- :class:`Past` is what the blocks pass along: it keeps, during one forward, exactly the values some module
  declared, and hands each the sources it declared, in order. A :class:`~variants.lm_blocks.Sublayer`'s join gets
  them after ``x`` and ``F(x)``: ``join(x, fx, *sources)``; a layer, unit or attention of a design's own reads them
  with :meth:`Past.read` and leaves what it computed with :meth:`Past.put`. No module keeps a tensor between
  sublayers or forwards, and what a module reads is what it declared, so ``bench diff`` and the fairness guard see
  every link (:func:`reads`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

KINDS = ("attn", "ffn")


@dataclass(frozen=True)
class SublayerSpec:
    """Which sublayer of the stack a join is built for (module docstring)."""

    index: int  # among all sublayers in forward order: 2·layer (attention), 2·layer + 1 (feed-forward)
    kind: str  # "attn" or "ffn"
    depth: int  # layers in the stack (2·depth sublayers)
    d_model: int  # width of the residual stream

    @property
    def layer(self) -> int:
        """The layer the sublayer belongs to (0-based)."""
        return self.index // 2

    @staticmethod
    def of(index: int, depth: int, d_model: int) -> SublayerSpec:
        """Sublayer ``index`` of a ``depth``-layer stack of width ``d_model``."""
        return SublayerSpec(index, KINDS[index % 2], depth, d_model)


class Source(NamedTuple):
    """An earlier value a module may read: ``what`` is ``"embeddings"``, ``"branch"`` (``F_j``, the branch output of
    sublayer ``j``), ``"output"`` (the residual stream after sublayer ``j``), ``"values"`` (the attention values of
    sublayer ``j``) or a name of a design's own (:func:`own`), ``j`` = ``sublayer``."""

    what: str
    sublayer: int = -1

    def __str__(self) -> str:
        """Named by the sublayer's module path in the family's stack (``blocks.{j // 2}.{attn|ffn}``); a value of no
        sublayer (the embeddings) by its name."""
        if self.sublayer < 0:
            return self.what
        where = f"blocks.{self.sublayer // 2}.{KINDS[self.sublayer % 2]}"
        return f"{SHORT.get(self.what, self.what)}({where})"


EMBEDDINGS = Source("embeddings")
SHORT = {"branch": "F", "output": "out", "values": "V"}  # how a source is printed (bench diff's reads rows)


def branch(index: int) -> Source:
    """``F_index``: the branch output of sublayer ``index`` (before its join)."""
    return Source("branch", _index(index))


def output(index: int) -> Source:
    """The residual stream after sublayer ``index`` (what its join returned)."""
    return Source("output", _index(index))


def values(index: int) -> Source:
    """``V_index``: the values (batch, heads, seq, d_head) attention sublayer ``index`` attended over."""
    return Source("values", _index(index))


def own(what: str, index: int) -> Source:
    """A value named ``what`` of a design's own that sublayer ``index`` computed (Attention Residuals' block sum)."""
    return Source(what, _index(index))


def _index(index: int) -> int:
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"a sublayer index is a non-negative integer (sublayers count from 0), got {index!r}")
    return index


def reads(module: nn.Module) -> tuple[Source, ...]:
    """The sources ``module`` declares it reads (its ``reads`` attribute); () when it declares none."""
    declared = getattr(module, "reads", ())
    return tuple(declared) if isinstance(declared, (tuple, list)) else ()


class Past:
    """The values of one forward that joins declared they read (module docstring), passed along by the blocks.

    ``keep`` is every source some join of the model declared; :meth:`record` keeps a sublayer's branch output and
    output where they are among them (nothing else is held), and :meth:`read` hands them back."""

    def __init__(self, embeddings: torch.Tensor, keep: Iterable[Source] = ()) -> None:
        self.keep = frozenset(keep)
        self.kept: dict[Source, torch.Tensor] = {EMBEDDINGS: embeddings}

    def record(self, index: int, fx: torch.Tensor, y: torch.Tensor) -> None:
        """Sublayer ``index`` computed branch output ``fx`` and output ``y``."""
        if not self.keep:  # no join reads anything earlier (Pre-LN's): nothing to look up
            return
        for source, value in ((Source("branch", index), fx), (Source("output", index), y)):
            if source in self.keep:
                self.kept[source] = value

    def put(self, source: Source, value: torch.Tensor) -> None:
        """Keep ``value`` as ``source`` where some module declared it reads it (else drop it)."""
        if source in self.keep:
            self.kept[source] = value

    def read(self, sources: Iterable[Source]) -> tuple[torch.Tensor, ...]:
        """The values of ``sources``, in order; ValueError names one not computed yet or not declared."""
        out = []
        for source in sources:
            if source not in self.kept:
                why = "it comes later in the stack" if source in self.keep else "no module declared it (its `reads`)"
                raise ValueError(f"{source} is not available to read: {why}")
            out.append(self.kept[source])
        return tuple(out)


def needs_past(module: nn.Module, past: Past | None) -> Past:
    """``past``; a ValueError where a layer that reads earlier values was called without the forward's Past."""
    if past is None:
        raise ValueError(f"{type(module).__name__} reads earlier values: call it with the forward's Past "
                         "(layer(x, past))")
    return past
