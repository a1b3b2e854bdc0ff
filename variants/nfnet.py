"""NFNets: residual nets without normalisation, ``h ← h + α·f(h/β)`` with scaled weight standardisation.

Brock, De, Smith & Simonyan 2021, "High-Performance Large-Scale Image Recognition Without Normalization" (ICML
2021, arXiv 2102.06171), §3–4 and Fig. 6/Table 1, building on Brock, De & Smith 2021, "Characterizing signal
propagation to close the performance gap in unnormalized ResNets" (ICLR 2021, arXiv 2101.08692), §4:

- the residual unit ``h_{i+1} = h_i + α·f_i(h_i/β_i)`` with α = 0.2 and β_i = √Var(h_i) the expected standard
  deviation of the stream, tracked analytically (``Var(h_{i+1}) = Var(h_i) + α²``, reset to 1 after each transition
  unit, whose shortcut sees the normalised input); as DeepMind's code does, the branch input is ``act(h)/β`` (the
  activation before the division) and a learnable scalar g = 0 multiplies the branch (SkipInit), so
  ``y = x + α·g·F(act(x)/β)``;
- every convolution weight-standardised, ``Ŵ = g_c·(W − μ)/(√N·σ)`` per output channel (μ, σ over its fan-in N, a
  learnable gain g_c), and every activation scaled by the γ that keeps unit variance (GELU: 1.7015);
- the NFNet bottleneck: 1×1, 3×3 grouped, 3×3 grouped (the extra one), 1×1 (width ratio 0.5, groups of 128
  channels), then squeeze-and-excite (ratio 0.5) times 2;
- adaptive gradient clipping (§4.1): every weight's gradient rescaled unit-wise (per output row) so that
  ``‖G‖ ≤ λ·max(‖W‖, 10⁻³)``, λ = 0.01, except the classifier's. Here it is a hook each parameter runs after its
  gradient is accumulated (``clipping=0`` removes it), so any optimiser sees clipped gradients.

``nfnet_imagenet`` (preset ``nfnet_f0``, F1, F2) is layer for layer timm's ``dm_nfnet_f*`` (the same parameter
count; timm's weights load with their names mapped), but with symmetric padding where DeepMind pads "SAME"
(stride-2 convolutions). ``nfnet_cifar`` puts the NFNet unit on He et al. 2015's CIFAR stages (widths 4w, 8w, 16w
out of a 2w bottleneck, group width ``group_size``), depth 12n + 2 (four weighted layers a unit). No plain version:
without its shortcut the unit starts at zero (g = 0) and the α, β bookkeeping has nothing to keep.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from . import init_marks
from .blocks import ResidualUnit
from .checks import check_positive, positive_int, real
from .combinators import Combinator
from .layers import DRAWN_LATER, CifarSpec, InitArg, Slot, build_cifar, check_init, drop_path_rates, init_weights_
from .registry import register, register_preset

NFNET_PAPER = ("Brock et al. 2021, High-Performance Large-Scale Image Recognition Without Normalization (ICML 2021, "
               "arXiv 2102.06171), §3-4")
ALPHA = 0.2  # α
GELU_GAMMA = 1.7015043497085571  # γ of GELU: Var(γ·GELU(z)) = 1 for z ~ N(0, 1) (the authors' constant)
WS_EPS = 1e-5  # the weight standardisation's ε (timm's std_conv_eps)
AGC_CLIPPING = 0.01  # λ
AGC_EPS = 1e-3  # the floor of ‖W‖
# F-variants (§4, Table 1): blocks per stage; widths (256, 512, 1536, 1536) for all.
F_DEPTHS = {"f0": (1, 2, 6, 3), "f1": (2, 4, 12, 6), "f2": (3, 6, 18, 9)}
F_WIDTHS = (256, 512, 1536, 1536)


class ScaledStdConv2d(nn.Conv2d):
    """``y = conv(x, Ŵ)``, ``Ŵ = g·(W − μ)/√(N·(σ² + ε))`` per output channel: scaled weight standardisation
    (Brock et al. 2021a, eq. 2; σ² the biased variance over the fan-in N, as timm's and DeepMind's code)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
                 gain_init: float = 1.0) -> None:
        super().__init__(cin, cout, kernel, stride=stride, padding=kernel // 2, groups=groups, bias=True)
        self.gain = nn.Parameter(torch.full((cout, 1, 1, 1), gain_init))
        self.eps = WS_EPS

    def standardized(self) -> torch.Tensor:
        w = self.weight.flatten(1)
        var, mean = torch.var_mean(w, dim=1, unbiased=False, keepdim=True)
        return ((w - mean) * torch.rsqrt((var + self.eps) * w.shape[1])).view_as(self.weight) * self.gain

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.standardized(), self.bias, self.stride, self.padding, self.dilation, self.groups)


class GammaGELU(nn.Module):
    """``y = γ·GELU(x)``, γ = 1.7015: the GELU that keeps a unit-Gaussian input at unit variance."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x) * GELU_GAMMA


class SqueezeExcite(nn.Module):
    """``y = 2·x ⊙ σ(W₂·ReLU(W₁·mean(x)))``: squeeze-and-excite with the NF gain 2 (ratio 0.5)."""

    def __init__(self, channels: int, ratio: float = 0.5, gain: float = 2.0) -> None:
        super().__init__()
        hidden = max(1, int(channels * ratio))
        self.fc1 = nn.Conv2d(channels, hidden, 1)
        self.fc2 = nn.Conv2d(hidden, channels, 1)
        self.gain = gain

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.mean((2, 3), keepdim=True)
        return self.gain * x * torch.sigmoid(self.fc2(F.relu(self.fc1(s))))


class SkipInitScaled(Combinator):
    """``y = x + α·g·F``: the NF join, α fixed (0.2), g a learnable scalar starting at 0 (SkipInit)."""

    axis = "scaled"

    def __init__(self, alpha: float = ALPHA) -> None:
        super().__init__()
        self.alpha = alpha
        self.skipinit_gain = nn.Parameter(torch.tensor(0.0))

    def residual_scalars(self) -> dict[str, torch.Tensor | float]:
        """α (fixed) and the learned gain g."""
        return {"alpha": self.alpha, "gain": self.skipinit_gain}

    def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        return x + self.alpha * self.skipinit_gain * fx


class NFBlock(ResidualUnit):
    """``y = s + α·g·F(h)`` with ``h = act(x)/β``, β = √Var(x), and ``s = x`` (or a pooled 1×1 projection of h where the
    unit changes the shape): the NFNet unit (Brock et al. 2021, Fig. 6; DeepMind's order of act and 1/β);
    ``F = 2·SE(W₃·act(W₂b·act(W₂·act(W₁·h))))``."""

    placement = "pre"  # the activation opens the branch; nothing follows the join

    def __init__(self, cin: int, cout: int, stride: int, beta: float, *, group_size: int, alpha: float = ALPHA,
                 drop_path: float = 0.0) -> None:
        mid = cout // 2
        groups = max(1, mid // group_size)
        body = nn.Sequential(
            ScaledStdConv2d(cin, mid, 1), GammaGELU(),
            ScaledStdConv2d(mid, mid, 3, stride=stride, groups=groups), GammaGELU(),
            ScaledStdConv2d(mid, mid, 3, groups=groups), GammaGELU(),
            ScaledStdConv2d(mid, cout, 1), SqueezeExcite(cout),
        )
        projects = cin != cout or stride != 1
        shortcut = nn.Sequential(nn.AvgPool2d(2, stride, ceil_mode=True, count_include_pad=False) if stride > 1
                                 else nn.Identity(), ScaledStdConv2d(cin, cout, 1)) if projects else None
        super().__init__(body, SkipInitScaled(alpha), shortcut=shortcut, drop_path=drop_path)
        self.act = GammaGELU()
        self.beta = beta  # 1/√Var(x): multiplies act(x)
        self.projects = projects

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(x) * self.beta
        return self.combine(self.shortcut(h) if self.projects else x, self.drop_path(self.body(h)))


def nf_units(widths: Sequence[int], depths: Sequence[int], strides: Sequence[int], cin: int, group_size: int,
             rates: Iterator[float], alpha: float = ALPHA) -> list[list[NFBlock]]:
    """The NFNet stages: β from the analytic variance (1 at a stage's start, + α² per unit)."""
    stages, var = [], 1.0
    for width, n, stride in zip(widths, depths, strides, strict=True):
        units = []
        for i in range(n):
            units.append(NFBlock(cin, width, stride if i == 0 else 1, var ** -0.5, group_size=group_size, alpha=alpha,
                                 drop_path=next(rates)))
            var = (1.0 if i == 0 else var) + alpha**2
            cin = width
        stages.append(units)
    return stages


def _agc_hook(clipping: float) -> object:
    def clip(p: torch.Tensor) -> None:
        if p.grad is None:
            return
        dims = tuple(range(1, p.dim())) if p.dim() > 1 else None
        w_norm = torch.linalg.vector_norm(p.detach(), dim=dims, keepdim=True).clamp_min(AGC_EPS)
        g_norm = torch.linalg.vector_norm(p.grad, dim=dims, keepdim=True)
        p.grad.mul_(torch.where(g_norm > clipping * w_norm, clipping * w_norm / g_norm.clamp_min(1e-6), 1.0))

    return clip


def adaptive_gradient_clipping(model: nn.Module, clipping: float, skip: nn.Module | None = None) -> None:
    """Brock et al. 2021, §4.1: a hook on every parameter (but ``skip``'s) that rescales its accumulated gradient unit
    by unit, ``G ← λ·max(‖W‖, 10⁻³)/‖G‖·G`` where ``‖G‖/max(‖W‖, 10⁻³) > λ`` (norms per output row; whole tensor
    for a scalar or vector)."""
    skipped = {id(p) for p in skip.parameters()} if skip is not None else set()
    for p in model.parameters():
        if id(p) not in skipped and p.requires_grad:
            p.register_post_accumulate_grad_hook(_agc_hook(clipping))  # type: ignore[arg-type]


class NFNet(nn.Module):
    """``stem -> stages -> final 1×1 conv -> head``: the ImageNet NFNet (stem: four 3×3 convs, 16-32-64-128 channels,
    strides 2 and 2; final conv to twice the last width; head: average pool, linear)."""

    def __init__(self, depths: Sequence[int], widths: Sequence[int], num_classes: int, in_chans: int,
                 drop_path_rate: float, group_size: int = 128) -> None:
        super().__init__()
        act = GammaGELU
        self.stem = nn.Sequential(ScaledStdConv2d(in_chans, 16, 3, stride=2), act(), ScaledStdConv2d(16, 32, 3), act(),
                                  ScaledStdConv2d(32, 64, 3), act(), ScaledStdConv2d(64, 128, 3, stride=2))
        rates = iter(drop_path_rates(drop_path_rate, sum(depths)))
        stages = nf_units(widths, depths, [1] + [2] * (len(depths) - 1), 128, group_size, rates)
        self.stages = nn.Sequential(*(nn.Sequential(*s) for s in stages))
        self.final_conv = nn.Sequential(ScaledStdConv2d(widths[-1], 2 * widths[-1], 1), act())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * widths[-1], num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.final_conv(self.stages(self.stem(x))))


def nf_init_(model: nn.Module) -> nn.Module:
    """timm's NFNet draw: convolutions He-normal (fan-in, linear gain; weight standardisation makes the scale moot),
    biases 0, the classifier N(0, 0.01)."""
    if any(p.is_meta for p in model.parameters()):
        return model
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="linear")
            init_marks.drawn(m, "nf_fan_in")  # the family's own draw: kaiming leaves it
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.01)
        if isinstance(m, (nn.Conv2d, nn.Linear)) and m.bias is not None:
            nn.init.zeros_(m.bias)
    return model


def _clipping(clipping: float) -> float | None:
    """AGC's λ, or None where ``clipping`` is 0 (no clipping)."""
    value = real("clipping", clipping, "AGC's λ; 0: no clipping")
    if value < 0:
        raise ValueError(f"clipping (AGC's λ; 0: no clipping) must be >= 0, got {clipping!r}")
    return value or None


@register("nfnet_imagenet", family="nfnet", paper=f"{NFNET_PAPER}, Table 1 (NFNet-F0..F2)")
def nfnet_imagenet(*, depths: tuple[int, ...] = F_DEPTHS["f0"], num_classes: int = 1000, in_chans: int = 3,
                   drop_path_rate: float = 0.0, clipping: float = AGC_CLIPPING,
                   init: InitArg = "kaiming") -> nn.Module:
    """The ImageNet NFNet with ``depths`` units per stage (NFNet-F0: 1, 2, 6, 3), AGC at λ = ``clipping``; ``init``
    a scheme of ``variants.layers.INIT_SCHEMES`` (``kaiming``: :func:`nf_init_`, timm's)."""
    if not isinstance(depths, (tuple, list)) or len(depths) != 4:
        raise ValueError(f"depths must give the units of the 4 stages, got {depths!r}")
    for d in depths:
        positive_int("depths", d)
    check_positive(num_classes=num_classes, in_chans=in_chans)
    lam = _clipping(clipping)
    check_init(init)
    model = init_weights_(nf_init_(NFNet(tuple(depths), F_WIDTHS, num_classes, in_chans, drop_path_rate)), init)
    if lam is not None:
        adaptive_gradient_clipping(model, lam, skip=cast(nn.Module, model.head))
    return model


for _name, _depths in F_DEPTHS.items():
    register_preset(f"nfnet_{_name}", "nfnet_imagenet", depths=_depths,
                    paper=f"{NFNET_PAPER}, Table 1 (NFNet-{_name.upper()}, timm dm_nfnet_{_name})")


def nf_cifar_units(depth: int) -> int:
    """Units per stage of a CIFAR NFNet: depth = 12n + 2 (four weighted layers a unit, the stem, the classifier)."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 14 or (depth - 2) % 12:
        raise ValueError(f"CIFAR NFNet depth must be 12n+2 with n >= 1, e.g. 14, 26, 38, 50, got {depth!r}")
    return (depth - 2) // 12


@register("nfnet_cifar", family="nfnet", paper=f"{NFNET_PAPER}; its unit on He et al. 2015's CIFAR stages",
          spec=CifarSpec(depth=26))
def nfnet_cifar(spec: CifarSpec, *, group_size: int = 16, alpha: float = ALPHA,
                clipping: float = AGC_CLIPPING) -> nn.Module:
    """:class:`NFBlock` units on the CIFAR stages (outputs 4w, 8w, 16w; bottleneck 2w, 4w, 8w in groups of
    ``group_size`` channels); a weight-standardised 3×3 stem; a final 1×1 conv to twice the width; AGC at λ =
    ``clipping``. ``init`` draws the convolutions (weight standardisation makes their scale moot)."""
    positive_int("group_size", group_size)
    a = real("alpha", alpha)
    lam = _clipping(clipping)
    if (spec.block, spec.shortcut) != ("basic", "A"):
        raise ValueError("an NFNet unit is its own bottleneck with its own projection shortcut: block and shortcut "
                         f"must keep their defaults, got block={spec.block!r}, shortcut={spec.shortcut!r}")
    n = nf_cifar_units(spec.depth)
    w = spec.width
    rates = iter(drop_path_rates(spec.drop_path_rate, 3 * n))
    stages = nf_units((4 * w, 8 * w, 16 * w), (n, n, n), (1, 2, 2), w, group_size, rates, a)
    units = iter(u for stage in stages for u in stage)

    def unit(s: Slot) -> nn.Module:
        return next(units)

    def stem(cin: int, width: int) -> nn.Module:
        return ScaledStdConv2d(cin, width, 3)

    def head(features: int) -> nn.Module:
        return nn.Sequential(ScaledStdConv2d(16 * w, 32 * w, 1), GammaGELU())

    spec_wide = CifarSpec(depth=spec.depth, width=spec.width, num_classes=spec.num_classes, in_chans=spec.in_chans,
                          block="bottleneck", init=spec.init)
    net = build_cifar(spec_wide, unit, what="CIFAR NFNet", stem=stem, head_pre=head, n=n, init=DRAWN_LATER)
    classifier = nn.Linear(32 * w, spec.num_classes)
    net.head[-1] = classifier
    init_weights_(nf_init_(net), spec.init)
    if lam is not None:
        adaptive_gradient_clipping(net, lam, skip=classifier)
    return net
