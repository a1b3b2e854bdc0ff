"""The feed-forward bodies of the Transformer family, an axis of its own (``ffn``): GPT-2's GELU MLP and Shazeer's
SwiGLU; a plugin adds one with ``variants.register_ffn`` or passes a factory ``(d_model, d_ff, dropout, bias)``.

- :class:`FeedForward`: ``fc2(GELU(fc1(x)))`` — Radford et al. 2019 (GPT-2), the tanh-approximate GELU.
- :class:`SwiGLU`: ``fc2(SiLU(x·W) ⊙ (x·V))`` — Shazeer 2020, "GLU Variants Improve Transformer", eq. 6.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from . import axes


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
FfnArg = Callable[..., nn.Module]  # factory(d_model, d_ff, dropout, bias): the feed-forward body
axes.ship("ffn", FFNS)


def resolve_ffn(ffn: object) -> tuple[str, Callable[[int, int, float, bool], nn.Module]]:
    """``(name, make)`` of an ``ffn`` argument (a name of :data:`FFNS`, a registered body or a factory)."""
    name, factory = axes.lookup("ffn", ffn, FFNS, message=lambda known: (
        f"unknown ffn {ffn!r}; choose one of: {', '.join(known)} (or pass a factory (d_model, d_ff, dropout, bias))"))
    if name in FFNS and factory is FFNS[name]:
        return name, factory
    return name, lambda *args: axes.tagged(factory(*args), "ffn", name)
