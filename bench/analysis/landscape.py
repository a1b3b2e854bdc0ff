"""Loss-landscape slices with filter-normalised random directions.

Li, Xu, Taylor, Studer & Goldstein 2018, "Visualizing the Loss Landscape of Neural Nets" (NeurIPS): §4 (filter
normalisation), §5-6 and Fig. 5 (the 2-D slice of ResNet-56 looks convex, that of the plain 56-layer net chaotic).

Quantities (θ: the model's parameters, in ``named_parameters`` order; buffers such as BatchNorm running statistics
are no part of θ and are never changed):

- *direction* d: one tensor per parameter. For a parameter of dim >= 2 (conv and linear weights, embeddings) the
  entries are drawn N(0, 1) and each *filter* — the slice along dim 0, one output channel or unit — is rescaled
  to the norm of the same filter of the weights, d_f <- d_f / ||d_f|| · ||θ_f|| (Frobenius norms; a zero filter
  of θ gets a zero direction). Parameters of dim <= 1 (biases, BatchNorm/LayerNorm γ and β, scalar gates) get a
  zero direction, as Li et al. do for BN parameters ("ignore biasbn"): they are few, and a slice along them
  would mix a scale change with the shape the figure is about. Directions are not orthogonalised (two random
  directions in ~10^5-10^7 dimensions are nearly orthogonal, as Li et al. note).
- *slice*: the loss L(α) = loss(θ + α·d1) (1-D) or L(α, β) = loss(θ + α·d1 + β·d2) (2-D) on a fixed list of
  batches, in eval mode; the loss of the list is the sample-weighted mean of the per-batch means
  (Σ_b n_b·loss_b / Σ_b n_b, n_b the length of the batch's target along dim 0); ``acc`` is the fraction of
  correct argmax predictions over all targets when the output is class logits (shape ``target.shape + (C,)``,
  integer targets).
- :func:`summary` of a slice (the origin is the trained model; a 2-D slice must be a full, evenly spaced grid):
  ``loss_center`` = L(0); ``edge_rise`` = mean of L over the grid's boundary (1-D: the two ends; 2-D: every
  point with α or β at an extreme) minus L(0); ``nonconvex_fraction`` = the fraction of interior points where
  the finite-difference Hessian has a negative eigenvalue below -τ: 1-D, L(i-1) - 2L(i) + L(i+1) < -τ; 2-D,
  the smallest eigenvalue of [[Δαα, Δαβ], [Δαβ, Δββ]] with Δαα = L(i-1,j) - 2L(i,j) + L(i+1,j), Δββ likewise
  along β and Δαβ = (L(i+1,j+1) - L(i+1,j-1) - L(i-1,j+1) + L(i-1,j-1)) / 4, which is diag(hα, hβ)·H·diag(hα, hβ)
  for the step sizes h, so it has the signs of the Hessian's eigenvalues (Sylvester's law of inertia) — the
  grid's analogue of Li et al.'s map of |λmin/λmax| of the true Hessian (§6, Fig. 7). τ = 10^-6·(max L - min L)
  keeps rounding noise on a linear stretch from counting. ``roughness`` = total variation over every grid line
  (the one line in 1-D; in 2-D each row along α and each column along β), Σ |L(k+1) - L(k)|, divided by the sum
  over the same lines of (max - min): it is >= 1, = 1 iff every line is monotone, <= 2 when every line falls
  then rises (or rises then falls), and exactly 2 for a parabola a·α² on a grid symmetric about its vertex
  (1 + ((s - |c|)/(s + |c|))² for a·(α - c)² on [-s, s], c a grid point); more wiggles, larger values. A constant slice
  has roughness 1. ``nonconvex_fraction`` and ``roughness`` are NaN when the slice holds a non-finite loss.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

__all__ = ["directions", "grid", "landscape", "random_direction", "summary", "surface"]

Direction = dict[str, Tensor]
_RTOL = 1e-6  # τ of nonconvex_fraction, relative to the slice's loss range


def random_direction(model: nn.Module, generator: torch.Generator) -> Direction:
    """A filter-normalised Gaussian direction (module docstring): zero for parameters of dim <= 1.

    Entries are drawn in float32 on the generator's device, for the parameters of dim >= 2 only, in
    ``named_parameters`` order, so the direction does not depend on the model's dtype or device."""
    out: Direction = {}
    for name, p in model.named_parameters():
        if p.dim() <= 1:
            out[name] = torch.zeros_like(p, memory_format=torch.contiguous_format)
            continue
        d = torch.randn(p.shape, generator=generator, dtype=torch.float32, device=generator.device)
        d = d.to(device=p.device, dtype=torch.float64)
        theta = p.detach().to(torch.float64)
        scale = theta.flatten(1).norm(dim=1) / d.flatten(1).norm(dim=1).clamp_min(torch.finfo(torch.float64).tiny)
        out[name] = (d * scale.view(-1, *[1] * (p.dim() - 1))).to(p.dtype)
    return out


def directions(model: nn.Module, dims: int, seed: int) -> list[Direction]:
    """``dims`` (1 or 2) directions drawn one after the other from a CPU generator seeded with ``seed``."""
    if dims not in (1, 2):
        raise ValueError(f"dims must be 1 or 2 (a line or a plane through the weights), got {dims!r}")
    generator = torch.Generator().manual_seed(seed)
    return [random_direction(model, generator) for _ in range(dims)]


def grid(points: int, span: float) -> Tensor:
    """``points`` float64 coordinates evenly spaced over [-span, span], symmetric, with exactly 0 in the middle."""
    if isinstance(points, bool) or not isinstance(points, int) or points < 3 or points % 2 == 0:
        raise ValueError(
            f"points must be an odd integer >= 3 so the trained weights (0) lie on the grid, got {points!r}"
        )
    if not (isinstance(span, (int, float)) and math.isfinite(span) and span > 0):
        raise ValueError(f"span must be a positive finite number, got {span!r}")
    half = (points - 1) // 2
    return torch.arange(-half, half + 1, dtype=torch.float64) / half * span


LossFn = Callable[[Tensor, Tensor], Tensor]


def landscape(
    model: nn.Module,
    loss_fn: LossFn,
    batches: Sequence[tuple[Tensor, Tensor]],
    dirs: Sequence[Direction],
    coords: Tensor,
    progress: Callable[[int, int], None] | None = None,
) -> pd.DataFrame:
    """The slice along ``dirs`` at every point of ``coords`` (× ``coords`` in 2-D): columns alpha, [beta,] loss,
    [acc]; rows α-major. The parameters and every module's train/eval mode are restored exactly afterwards (from
    saved copies), also when ``loss_fn`` or the model raises. ``progress(done, total)`` is called after each point."""
    if len(dirs) not in (1, 2):
        raise ValueError(f"need 1 or 2 directions, got {len(dirs)}")
    if coords.dim() != 1 or coords.numel() == 0 or not bool(torch.isfinite(coords).all()):
        raise ValueError("coords must be a non-empty 1-D tensor of finite numbers (see grid())")
    if not batches:
        raise ValueError("no batches to evaluate the loss on")
    params = dict(model.named_parameters())
    for d in dirs:
        if set(d) != set(params) or any(d[n].shape != p.shape for n, p in params.items()):
            raise ValueError("a direction must hold one tensor per model parameter, of the parameter's shape")
    moving = [n for n in params if any(bool(d[n].any()) for d in dirs)]  # the rest stay at θ throughout
    steps = {n: [d[n].to(device=params[n].device, dtype=params[n].dtype) for d in dirs] for n in moving}
    saved = {n: params[n].detach().clone() for n in moving}
    modes = [(m, m.training) for m in model.modules()]
    values = coords.tolist()
    points = [(a,) for a in values] if len(dirs) == 1 else [(a, b) for a in values for b in values]
    rows = []
    try:
        model.eval()
        with torch.no_grad():
            for k, point in enumerate(points):
                for n in moving:
                    p = params[n]
                    p.copy_(saved[n])
                    for step, c in zip(steps[n], point, strict=True):
                        p.add_(step, alpha=c)
                rows.append((*point, *_evaluate(model, loss_fn, batches)))
                if progress is not None:
                    progress(k + 1, len(points))
    finally:
        with torch.no_grad():
            for n in moving:
                params[n].copy_(saved[n])
        for m, training in modes:
            m.training = training
    columns = [*("alpha", "beta")[: len(dirs)], "loss", "acc"]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.drop(columns="acc") if frame["acc"].isna().all() else frame


def _evaluate(model: nn.Module, loss_fn: LossFn, batches: Sequence[tuple[Tensor, Tensor]]) -> tuple[float, float]:
    """(sample-weighted mean loss, accuracy or NaN when some batch's output is not class logits)."""
    loss_sum: Tensor | float = 0.0
    correct: Tensor | float = 0.0
    samples = targets = 0
    logits = True
    for x, y in batches:
        out = model(x)
        n = y.shape[0] if y.dim() else 1
        loss_sum = loss_sum + loss_fn(out, y).detach().double() * n
        samples += n
        is_logits = out.dim() >= 1 and out.shape[:-1] == y.shape and not y.is_floating_point() and y.dtype != torch.bool
        logits = logits and is_logits
        if logits:
            correct = correct + (out.argmax(-1) == y).sum()
            targets += y.numel()
    acc = float(correct) / targets if logits and targets else math.nan  # one host sync per point
    return float(loss_sum) / samples, acc


def surface(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """(α values, β values or None, loss as an (α, β) or (α,) array), sorted; checks for a full grid."""
    if "beta" not in frame.columns:
        part = frame.sort_values("alpha")
        alpha = part["alpha"].to_numpy(dtype=float)
        if len(np.unique(alpha)) != len(alpha):
            raise ValueError("the slice repeats an alpha value")
        return alpha, None, part["loss"].to_numpy(dtype=float)
    alpha, beta = np.unique(frame["alpha"].to_numpy(float)), np.unique(frame["beta"].to_numpy(float))
    if len(frame) != len(alpha) * len(beta) or frame.duplicated(["alpha", "beta"]).any():
        raise ValueError("a 2-D slice must hold every (alpha, beta) of its grid exactly once")
    table = frame.pivot(index="alpha", columns="beta", values="loss").sort_index().sort_index(axis=1)
    return alpha, beta, table.to_numpy(dtype=float)


def _check_axis(values: np.ndarray, name: str) -> int:
    """Index of 0 on an evenly spaced axis of >= 3 points."""
    steps = np.diff(values)
    if len(values) < 3 or not np.allclose(steps, steps[0], rtol=1e-6, atol=0.0):
        raise ValueError(f"{name} must be >= 3 evenly spaced values (see grid())")
    if not (values == 0).any():
        raise ValueError(f"the slice has no point at the origin ({name} = 0), where the trained weights are")
    return int(np.flatnonzero(values == 0)[0])


def summary(frame: pd.DataFrame) -> dict[str, float]:
    """``loss_center``, ``edge_rise``, ``nonconvex_fraction`` and ``roughness`` of a slice (module docstring)."""
    alpha, beta, z = surface(frame)
    i = _check_axis(alpha, "alpha")
    finite = bool(np.isfinite(z).all())
    tol = _RTOL * (np.max(z) - np.min(z)) if finite else 0.0
    if beta is None:
        center, edge = z[i], (z[0] + z[-1]) / 2
        lam_min = z[:-2] - 2 * z[1:-1] + z[2:]
        lines = [z]
    else:
        j = _check_axis(beta, "beta")
        center = z[i, j]
        boundary = np.ones_like(z, dtype=bool)
        boundary[1:-1, 1:-1] = False
        edge = z[boundary].mean()
        c = z[1:-1, 1:-1]
        daa, dbb = z[:-2, 1:-1] - 2 * c + z[2:, 1:-1], z[1:-1, :-2] - 2 * c + z[1:-1, 2:]
        dab = (z[2:, 2:] - z[2:, :-2] - z[:-2, 2:] + z[:-2, :-2]) / 4
        lam_min = (daa + dbb) / 2 - np.sqrt(((daa - dbb) / 2) ** 2 + dab**2)
        lines = [*z.T, *z]  # rows along α (one per β), then columns along β
    variation = sum(float(np.abs(np.diff(line)).sum()) for line in lines)
    ranges = sum(float(np.ptp(line)) for line in lines)
    return {
        "loss_center": float(center),
        "edge_rise": float(edge - center),
        "nonconvex_fraction": float(np.mean(lam_min < -tol)) if finite else math.nan,
        "roughness": (variation / ranges if ranges > 0 else 1.0) if finite else math.nan,
    }
