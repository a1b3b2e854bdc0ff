"""Gradient-Preserving Activation Scaling on Pre-LN: the stream scaled down in the forward pass, its gradient not.

Chen et al. 2025, "GPAS: Accelerating Convergence of LLM Pretraining via Gradient-Preserving Activation Scaling"
(NeurIPS 2025, arXiv 2506.22049). After each sublayer's residual add, ``x' = x + F(norm(x))``, the stream becomes
``x' − SiLU(α)·sg(x')``, sg the stop-gradient: the forward value is ``(1 − SiLU(α))·x'`` (scaled down for α > 0, so
the shortcut does not drown the deeper sublayers' outputs as Pre-LN's variance grows), while ∂/∂x' is the identity,
as in Pre-LN, whatever α (no gradient vanishes through the scale). α is learned and starts at 0: SiLU(0) = 0, so the
model *is* Pre-LN at init, forward and backward.

The formula, the init and the sharing are the authors' code's (github.com/dandingsky/GPAS,
``peft_pretraining/modeling_llama.py`` at 3198068: ``GPASBlock``, ``hidden_states - act_fn(gate) *
hidden_states.detach()`` with ``gate`` 0 and SiLU, one block per decoder layer applied after its attention add and
again after its MLP add, ``norm_type = "pre_gpas"``); the paper's equation numbers are not cited here. Their LLaMA
uses RMSNorm and SwiGLU; here the family's trunk (``norm=rmsnorm``, ``ffn=swiglu`` give theirs).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import axes
from .blocks import ResidualUnit
from .combinators import Combinator
from .registry import register
from .transformer import Block, Design, TransformerLM, TransformerSpec

axes.ship("combinator", ["gpas"])
GPAS_PAPER = ("Chen et al. 2025, GPAS: Accelerating Convergence of LLM Pretraining via Gradient-Preserving Activation "
              "Scaling (NeurIPS 2025, arXiv 2506.22049): x' − SiLU(α)·sg(x') after each sublayer's add, one learned α "
              "per layer starting at 0 (the authors' code); Pre-LN base")


class GradientPreservingAdd(Combinator):
    """``y = x' − SiLU(α)·sg(x')``, ``x' = x + F(x)``: GPAS (Chen et al. 2025) on the residual add; α = 0 at init
    (the identity), sg the stop-gradient, so ``∂y/∂x' = I`` for any α."""

    axis = "gpas"

    def __init__(self) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.tensor(0.0))  # the authors' gate_init_value

    def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        s = x + fx
        return s - F.silu(self.alpha) * s.detach()


class GpasLayer(Block):
    """``x = ffn(attn(x))``, each sublayer Pre-LN joined by :class:`GradientPreservingAdd`, the two joins sharing one
    α (the authors' one GPASBlock per decoder layer)."""

    def __init__(self, attn: ResidualUnit, ffn: ResidualUnit) -> None:
        super().__init__(attn, ffn)
        assert isinstance(attn.combine, GradientPreservingAdd) and isinstance(ffn.combine, GradientPreservingAdd)
        ffn.combine.alpha = attn.combine.alpha


@register("gpas", family="transformer", paper=GPAS_PAPER, spec=TransformerSpec())
def gpas(spec: TransformerSpec) -> TransformerLM:
    """Pre-LN with every residual add followed by GPAS (:class:`GradientPreservingAdd`), one α per layer."""
    design = Design(GPAS_PAPER, lambda depth: ["pre"] * depth, lambda depth, d: GradientPreservingAdd(),
                    block=GpasLayer)
    return TransformerLM(design, spec)
