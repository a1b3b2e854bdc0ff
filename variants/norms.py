"""The norm-type axis of the Transformer family: what every norm of a stack computes (its placement is the design's).

Each value of :data:`NORMS` maps a name to a factory ``(d, bias) -> module`` of a norm over the last dimension of
width ``d``; ``--model-arg norm=NAME`` builds every norm of any Transformer placement (Pre-LN, Post-LN, sandwich,
HC/mHC, LAuReL, the cross-layer designs...) with it, and :func:`variants.registry.derive_axes` reports the name.

- ``layernorm``: Ba et al. 2016, "Layer Normalization": ``γ ⊙ (x − μ)/√(σ² + ε) + β``.
- ``rmsnorm``: Zhang & Sennrich 2019, "Root Mean Square Layer Normalization": ``γ ⊙ x/RMS(x)``, no bias.
- ``scalenorm``: Nguyen & Salazar 2019, "Transformers without Tears", §2.2 (:class:`ScaleNorm`).
- ``dyt``: Zhu, Chen, He, LeCun & Liu 2025, "Transformers without Normalization" (CVPR 2025, arXiv 2503.10622),
  eq. 1 (:class:`DyT`): ``γ ⊙ tanh(α·x) + β``, α one learnable scalar starting at α₀ = 0.5 (§4, the paper's
  default for every non-LLM model; its LLaMA recipe sets α₀ per site, the ``dyt_llama`` preset).
- ``derf``: Chen, Lu, Zhu, Sun & Liu 2025, "Stronger Normalization-Free Transformers" (arXiv 2512.10938)
  (:class:`Derf`): ``γ ⊙ erf(α·x + s) + β``, α and s learnable scalars starting at 0.5 and 0.
- ``seednorm``: Cai, Zhu, Liu & Min 2025, "SeeDNorm: Self-Rescaled Dynamic Normalization" (ICLR 2026, arXiv
  2510.22777), eq. 1 (:class:`SeeDNorm`): ``[tanh(x·βᵀ)·α + γ] ⊙ x/RMS(x)``.

DyT and Derf are point-wise: nothing is computed across the features, the norm's "statistics" are learned scalars.
With ``bias=False`` (a LLaMA-style stack) they keep γ only, as the DyT authors' LLaMA code does.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from . import axes

LN_EPS = 1e-5  # GPT-2's LayerNorm epsilon, every norm's here
DYT_ALPHA = 0.5  # DyT's α₀ (Zhu et al. 2025, §4: "α₀ = 0.5 ... for all non-LLM models")
DERF_ALPHA, DERF_SHIFT = 0.5, 0.0  # Derf's α₀ and s₀


class ScaleNorm(nn.Module):
    """Nguyen & Salazar 2019, "Transformers without Tears", §2.2: ``g · x / ‖x‖`` over the feature dimension,
    one learned scalar ``g`` starting at √d."""

    norm_axis = "scalenorm"  # the variant's norm axis (variants.registry.derive_axes)

    def __init__(self, d_model: int, eps: float = LN_EPS) -> None:
        super().__init__()
        self.g = nn.Parameter(torch.tensor(math.sqrt(d_model)))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.g * x / torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min(self.eps)


class DyT(nn.Module):
    """``DyT(x) = γ ⊙ tanh(α·x) + β``: Zhu et al. 2025, "Transformers without Normalization", eq. 1.

    α is one learnable scalar (α₀ = ``alpha_init``), γ and β per feature (1 and 0); ``bias=False`` drops β."""

    norm_axis = "dyt"

    def __init__(self, d: int, bias: bool = True, alpha_init: float = DYT_ALPHA) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.tensor(float(alpha_init)))
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.weight * torch.tanh(self.alpha * x)
        return y if self.bias is None else y + self.bias


class Derf(nn.Module):
    """``Derf(x) = γ ⊙ erf(α·x + s) + β``: Chen et al. 2025, "Stronger Normalization-Free Transformers".

    α and the shift s are learnable scalars (0.5 and 0 at init), γ and β per feature (1 and 0)."""

    norm_axis = "derf"

    def __init__(self, d: int, bias: bool = True, alpha_init: float = DERF_ALPHA,
                 shift_init: float = DERF_SHIFT) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.tensor(float(alpha_init)))
        self.shift = nn.Parameter(torch.tensor(float(shift_init)))
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.weight * torch.erf(self.alpha * x + self.shift)
        return y if self.bias is None else y + self.bias


class SeeDNorm(nn.Module):
    """``SeeDNorm(x) = [tanh(x·βᵀ)·α + γ] ⊙ x/RMS(x)``: Cai et al. 2025, "SeeDNorm", eq. 1 (σ = tanh).

    ``RMS(x) = √(mean(x²) + ε)``; β, α, γ are vectors of width d: ``x·βᵀ`` is one scalar per token, which rescales
    the static gain γ by α. Init (the paper prints none): β = 0, α = 1, γ = 1, so SeeDNorm starts as RMSNorm and
    α first moves once β has. No bias (it extends RMSNorm)."""

    norm_axis = "seednorm"

    def __init__(self, d: int, eps: float = LN_EPS) -> None:
        super().__init__()
        self.beta = nn.Parameter(torch.zeros(d))
        self.alpha = nn.Parameter(torch.ones(d))
        self.weight = nn.Parameter(torch.ones(d))  # γ, RMSNorm's name for it
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = torch.tanh(x @ self.beta).unsqueeze(-1) * self.alpha + self.weight
        return scale * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


# The norm-type axis: name -> factory (d, bias).
NORMS: dict[str, Callable[[int, bool], nn.Module]] = {
    "layernorm": lambda d, bias: nn.LayerNorm(d, eps=LN_EPS, bias=bias),  # Ba et al. 2016
    "rmsnorm": lambda d, bias: nn.RMSNorm(d, eps=LN_EPS),  # Zhang & Sennrich 2019: x / rms(x) · g, no mean, no bias
    "scalenorm": lambda d, bias: ScaleNorm(d),  # Nguyen & Salazar 2019
    "dyt": lambda d, bias: DyT(d, bias=bias),  # Zhu et al. 2025
    "derf": lambda d, bias: Derf(d, bias=bias),  # Chen et al. 2025
    "seednorm": lambda d, bias: SeeDNorm(d),  # Cai et al. 2025
}
NormArg = Callable[..., nn.Module]  # factory(d) or factory(d, bias=...): one norm of width d
axes.ship("norm", NORMS)


def resolve_norm(norm: object, bias: bool) -> tuple[str, Callable[[int], nn.Module]]:
    """``(name, make)`` of a ``norm`` argument (a name of :data:`NORMS`, a registered norm or a factory):
    ``make(d)`` builds one norm of width d, tagged with the name where it is not one of :data:`NORMS`."""
    name, factory = axes.lookup("norm", norm, NORMS, message=lambda known: (
        f"unknown norm {norm!r}; choose one of: {', '.join(known)} (or pass a norm factory)"))
    if name in NORMS and factory is NORMS[name]:
        return name, lambda d: factory(d, bias)
    return name, lambda d: axes.tagged(axes.make_norm(factory, d, bias), "norm", name)

