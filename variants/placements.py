"""Axis 2 of the variant space: where the normalisation sits around a residual unit.

A :class:`Residual` unit owns a ``body`` (the branch F), a :class:`~variants.combinators.Combinator`
and the norm layers its placement needs. Placements, by name:

- ``post``: ``y = norm(combine(x, F(x)))`` — original ResNet/Transformer (Vaswani 2017; He 2015).
- ``pre``: ``y = combine(x, F(norm(x)))`` — Pre-LN (Xiong 2020; GPT-2), pre-activation (He 2016).
- ``sandwich`` (``peri``): ``y = combine(x, norm_out(F(norm(x))))`` — Sandwich-LN (Ding 2021,
  CogView) / Peri-LN (Kim 2025).
- ``none``: ``y = combine(x, F(x))`` — ReZero, Fixup, SkipInit.

The He-2016 CNN orderings, which move ReLUs as well as BN, are units of their own in
``variants.preact``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from timm.layers import DropPath
from torch import nn

from .combinators import Combinator

NormFactory = Callable[[], nn.Module]


class Residual(nn.Module):
    """``combine(x, F(x))`` with norms placed per ``placement``; stochastic depth drops the branch."""

    PLACEMENTS = ("post", "pre", "sandwich", "peri", "none")

    def __init__(
        self,
        body: nn.Module,
        combinator: Combinator,
        placement: str,
        norm: NormFactory | None = None,
        drop_path: float = 0.0,
    ) -> None:
        super().__init__()
        if placement not in self.PLACEMENTS:
            raise ValueError(f"norm placement must be one of {self.PLACEMENTS}, got {placement!r}")
        if placement != "none" and norm is None:
            raise ValueError(f"placement {placement!r} needs a norm factory")
        self.placement = "sandwich" if placement == "peri" else placement
        self.body = body
        self.combine = combinator
        # Norm modules exist only where the placement uses them, so parameter counts are exact.
        self.norm_in = norm() if self.placement in ("pre", "sandwich") else nn.Identity()  # type: ignore[misc]
        self.norm_branch = norm() if self.placement == "sandwich" else nn.Identity()  # type: ignore[misc]
        self.norm_out = norm() if self.placement == "post" else nn.Identity()  # type: ignore[misc]
        self.drop_path = DropPath(drop_path)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fx = self.drop_path(self.norm_branch(self.body(self.norm_in(x))))
        return self.norm_out(self.combine(x, fx))


def drop_path_rates(rate: float, n_blocks: int) -> list[float]:
    """The linear decay rule of Huang 2016 §3: block ``l`` of ``L`` drops with ``p_l = l/L · rate``."""
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"drop_path_rate must be in [0, 1), got {rate}")
    return [rate * (i + 1) / n_blocks for i in range(n_blocks)]
