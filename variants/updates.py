"""Residual updates other than addition: the orthogonal update and Deep Delta Learning.

- Orthogonal residual update: Oh, Kim, Jeong & Park 2025, "Revisiting Residual Connections: Orthogonal Updates for
  Stable and Efficient Deep Networks" (arXiv 2505.11881), §3: the branch adds only what is orthogonal to the stream,
  ``x + (f − ⟨f, x⟩/(‖x‖² + ε)·x)`` (ε = 1e-6, the authors'). Tested there on ResNetV2 and ViT, so it is here in
  both families: ``ortho_preln`` (Pre-LN, the inner product per token over the features, as their ViT's) and
  ``ortho_preact`` (He 2016's full pre-activation CIFAR ResNet, the inner product per sample over channels and
  positions, their ResNetV2 default, ``orthogonal_method="global"``).
- Deep Delta Learning: Zhang, Liu, Wang & Gu 2026, "Deep Delta Learning" (arXiv 2601.00417), §2 (the Delta
  Residual Block) and the authors' code at d_v = 1 (``DDL-vdim1-gpt``). The update is not ``x + F(x)`` with a
  modulated shortcut: the branch F gives only a *direction*, ``k = F(norm(x))/‖F(norm(x))‖``; the layer erases the
  stream's component along k and writes a learned scalar there,
  ``x ← (I − β·kkᵀ)·x + β·k·v = x + β·k·(v − kᵀx)`` (the Delta operator ``I − βkkᵀ``, β ∈ [0, 2]), with the gate
  ``β = 2σ(w_βᵀ·norm(x) + b_β)`` read from the sublayer's normalised input and the value ``v = 4σ(w_vᵀ·x + b_v)``
  from the stream (the code's ``ddl_v_sigmoid_scale = 4``). Init as the authors' code: β₀ = 1 (b_β = 0, their
  ``ddl_beta_init = 1.0`` "for baseline comparability"), w_β and w_v ~ N(0, (0.5/√d)²) (their hidden init); b_v = 0
  here (PyTorch's default draw there). At init the layer therefore projects the stream off k and writes v ≈ 2
  along it: the magnitude of F's output never enters, unlike a residual. ``deep_delta`` is Pre-LN with every join
  a :class:`DeltaJoin`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import torch
from torch import nn

from . import axes, init_marks
from .blocks import PREACT, NormFactory, ResidualUnit
from .checks import real
from .combinators import Combinator
from .layers import CifarSpec, Slot, build_cifar, conv3x3
from .links import SublayerSpec
from .registry import register
from .transformer import Block, Design, TransformerLM, TransformerSpec, build_transformer

axes.ship("combinator", ["orthogonal", "delta"])
ORTHO_PAPER = ("Oh et al. 2025, Revisiting Residual Connections: Orthogonal Updates for Stable and Efficient Deep "
               "Networks (arXiv 2505.11881), §3: x + f_⊥(x), f_⊥ = f − <f,x>/(||x||² + ε)·x")
DELTA_PAPER = ("Zhang, Liu, Wang & Gu 2026, Deep Delta Learning (arXiv 2601.00417), §2, d_v = 1: x + β·k·(v − kᵀx), "
               "k = F(norm(x))/||F||, β = 2σ(·) ∈ [0, 2], v = 4σ(·); Pre-LN base")
ORTHO_EPS = 1e-6  # the authors' residual_eps
DELTA_V_SCALE = 4.0  # v = 4σ(·), the code's ddl_v_sigmoid_scale
DELTA_K_EPS = 1e-5  # ‖k‖ = √(‖F‖² + ε²), the code's ddl_k_eps


class Orthogonal(Combinator):
    """``y = x + (f − ⟨f, x⟩/(‖x‖² + ε)·x)``: the orthogonal residual update (Oh et al. 2025, §3).

    ``dims``: the dimensions the inner product and norm run over (one projection per index of the others):
    ``(-1,)`` per token of a sequence, ``(1, 2, 3)`` per image (channels and positions)."""

    axis = "orthogonal"

    def __init__(self, dims: Sequence[int] = (-1,), eps: float = ORTHO_EPS) -> None:
        super().__init__()
        self.dims, self.eps = tuple(dims), eps

    def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        dot = (fx * x).sum(self.dims, keepdim=True)
        return x + fx - dot / (x.pow(2).sum(self.dims, keepdim=True) + self.eps) * x


class DeltaJoin(Combinator):
    """``y = x + β·k·(v − kᵀx)``, ``k = F/‖F‖``, ``β = 2σ(w_βᵀ·h + b_β)``, ``v = 4σ(w_vᵀ·x + b_v)``: Deep Delta
    Learning's update (Zhang et al. 2026, §2, d_v = 1), h the sublayer's normalised input (x where not given)."""

    axis = "delta"

    def __init__(self, d_model: int, beta_init: float = 1.0) -> None:
        super().__init__()
        if not 0.0 < beta_init < 2.0:
            raise ValueError(f"beta_init must lie in (0, 2) (β = 2σ(·)), got {beta_init!r}")
        self.beta = nn.Linear(d_model, 1)
        self.value = nn.Linear(d_model, 1)
        std = 0.5 / math.sqrt(d_model)
        nn.init.normal_(self.beta.weight, std=std)
        nn.init.normal_(self.value.weight, std=std)
        nn.init.constant_(self.beta.bias, math.log(beta_init / (2.0 - beta_init)))  # logit(β₀/2)
        nn.init.zeros_(self.value.bias)
        for layer in (self.beta, self.value):  # the paper's draw, not the Transformer scheme's
            init_marks.mark_init(layer, "own")

    def forward(self, x: torch.Tensor, fx: torch.Tensor, h: torch.Tensor | None = None) -> torch.Tensor:
        k = fx * torch.rsqrt(fx.pow(2).sum(-1, keepdim=True) + DELTA_K_EPS**2)
        beta = 2 * torch.sigmoid(self.beta(x if h is None else h))
        v = DELTA_V_SCALE * torch.sigmoid(self.value(x))
        return x + beta * k * (v - (k * x).sum(-1, keepdim=True))


class DeltaPreNorm(ResidualUnit):
    """``y = combine(x, F(norm(x)), norm(x))``: Pre-LN's sublayer whose join also reads the normalised input (Deep
    Delta Learning's gate β does)."""

    placement = "pre"

    def __init__(self, body: nn.Module, combine: DeltaJoin, norm: NormFactory, *, drop_path: float = 0.0) -> None:
        super().__init__(body, combine, drop_path=drop_path)
        self.norm_in = norm()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm_in(x)
        return self.combine(x, self.drop_path(self.body(h)), h)


class DeltaLayer(Block):
    """``h ← ffn(attn(h))``: a layer of two :class:`DeltaPreNorm` sublayers, each joined by :class:`DeltaJoin`."""

    @classmethod
    def unit(cls, body: nn.Module, join: Combinator, norm: NormFactory, at: SublayerSpec,
             placement: str) -> ResidualUnit:
        return DeltaPreNorm(body, cast(DeltaJoin, join), norm)


@register("ortho_preln", family="transformer", paper=ORTHO_PAPER, spec=TransformerSpec())
def ortho_preln(spec: TransformerSpec) -> TransformerLM:
    """Pre-LN with every join :class:`Orthogonal` over each token's features."""
    design = Design(ORTHO_PAPER, lambda depth: ["pre"] * depth, lambda depth, d: Orthogonal((-1,)))
    return build_transformer(design, spec)


@register("deep_delta", family="transformer", paper=DELTA_PAPER, spec=TransformerSpec())
def deep_delta(spec: TransformerSpec, *, beta_init: float = 1.0) -> TransformerLM:
    """Pre-LN sublayers (:class:`DeltaPreNorm`) joined by :class:`DeltaJoin`; β₀ = ``beta_init`` (the code's 1)."""
    real("beta_init", beta_init)
    d = spec.d_model
    design = Design(DELTA_PAPER, lambda depth: ["pre"] * depth, lambda depth, d_model: DeltaJoin(d, beta_init),
                    block=DeltaLayer)
    return build_transformer(design, spec)


@register("ortho_preact", family="preact", paper=f"{ORTHO_PAPER}; He et al. 2016 full pre-activation ResNet",
          spec=CifarSpec(depth=110))
def ortho_preact(spec: CifarSpec) -> nn.Module:
    """He 2016's full pre-activation CIFAR ResNet (:class:`~variants.blocks.PreActBasic` units) with every join
    :class:`Orthogonal` over each sample's channels and positions."""

    def unit(s: Slot) -> nn.Module:
        return PREACT[spec.block](s.cin, s.width, s.stride, shortcut=spec.shortcut, drop_path=s.drop_path,
                                  first=s.position == 0, combine=lambda c: Orthogonal((1, 2, 3)))

    def head(features: int) -> nn.Module:
        return nn.Sequential(nn.BatchNorm2d(features), nn.ReLU())

    return build_cifar(spec, unit, what="orthogonal pre-activation ResNet", stem=conv3x3, head_pre=head)
