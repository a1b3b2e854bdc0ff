"""Shattered gradients: how correlated a network's input gradients are at nearby inputs, at initialisation.

Balduzzi et al. 2017, "The Shattered Gradients Problem: If resnets are the answer, then what is the question?"
(ICML), Fig. 1-2: along a line through input space the gradient of a plain deep net decorrelates like white
noise as depth grows (correlation ~ 2^-L), while with shortcuts it decays far more slowly (~ 1/sqrt(L)).

Quantities, for a model ``m`` with output ``m(x)`` of shape ``O`` per sample:

- the line: ``x_i = x0 + t_i * d`` for ``t_i`` evenly spaced in ``[-span, span]``, ``i = 0..P-1``
  (:func:`line_inputs`). :func:`measure` takes ``x0`` = the first input of the task's training split and
  ``d`` = a Gaussian direction scaled to ``||d||_F = ||x0||_F``, so with ``span = 1`` the line runs from
  ``x0 - d`` to ``x0 + d``: perturbations as large as the input itself, a meaningful stretch of input space;
- the scalar ``f(x) = <r, m(x)>`` for a fixed random unit readout ``r`` over the outputs;
- the gradient ``g_i = df/dx (x_i)``, flattened to ``D`` components (:func:`line_gradients`), computed in
  eval mode so each point's output depends on that point only (BatchNorm uses running statistics,
  first calibrated on real inputs by :func:`calibrate_batchnorm`);
- ``rho(a, b)``: the Pearson correlation of two gradient vectors, the ``D`` components as samples
  (each vector centred by its own mean); NaN where either vector has zero variance (e.g. a zero gradient);
- ``acf[k]`` = nanmean over ``i`` of ``rho(g_i, g_{i+k})``, ``k = 0..max_lag`` (``acf[0] = 1``). It is the
  autocorrelation of the gradient *vectors* along the line, not of one directional derivative, so it does not
  depend on which direction one projects on. NaN pairs are left out of the mean (all NaN -> NaN);
- ``neighbor_corr`` = ``acf[1]``: the mean correlation of neighbouring gradients; 1 for a linear model;
- ``corr_length``: the smallest lag ``k`` with ``acf[k] < 1/e`` (NaN if none within ``max_lag``), in points;
- ``dfdt_i = g_i . d``: the derivative of ``f(x0 + t d)`` w.r.t. ``t`` — Balduzzi's Fig. 1 picture, smooth for a
  residual net, white noise for a deep plain one.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

import variants as variants_registry
from bench.runs.config import RunConfig
from bench.runs.train import setup

__all__ = ["GradCorr", "GradCorrFrames", "calibrate_batchnorm", "correlations", "line_gradients", "line_inputs",
           "measure", "measure_grid"]  # fmt: skip


@dataclass
class GradCorr:
    """One measurement: the summary numbers, the ACF (variant, depth, seed, lag, acf) and the derivative along
    the line (variant, depth, seed, t, dfdt)."""

    summary: dict[str, Any]
    acf: pd.DataFrame
    series: pd.DataFrame


@dataclass
class GradCorrFrames:
    """Many measurements: ``summary`` has one row per (variant, depth, seed); ``acf``/``series`` as in GradCorr."""

    summary: pd.DataFrame
    acf: pd.DataFrame
    series: pd.DataFrame


def line_inputs(x0: Tensor, direction: Tensor, points: int, span: float) -> Tensor:
    """``points`` inputs ``x0 + t * direction``, ``t`` evenly spaced in ``[-span, span]``: shape (points, *x0.shape)."""
    if points < 3:
        raise ValueError(f"a line needs points >= 3 (neighbours on both sides), got {points}")
    if not span > 0:
        raise ValueError(f"span must be > 0, got {span}")
    if direction.shape != x0.shape:
        raise ValueError(f"direction has shape {tuple(direction.shape)}, x0 has {tuple(x0.shape)}; they must match")
    t = torch.linspace(-span, span, points, dtype=x0.dtype, device=x0.device)
    return x0.unsqueeze(0) + t.view(-1, *([1] * x0.dim())) * direction.unsqueeze(0)


@contextlib.contextmanager
def _modes(model: nn.Module, train: bool) -> Iterator[None]:
    """Every submodule in ``train`` mode inside; each one's own mode restored afterwards (they may differ)."""
    saved = [(m, m.training) for m in model.modules()]
    model.train(train)
    try:
        yield
    finally:
        for m, mode in saved:
            m.training = mode


def line_gradients(model: nn.Module, xs: Tensor, readout: Tensor, batch: int = 64) -> Tensor:
    """``g_i = d<readout, model(x_i)>/dx_i`` for each row of ``xs``, flattened: shape (points, D).

    Runs in eval mode (each sample's output then depends on that sample only, so the gradient of the chunk's
    summed scalars w.r.t. the chunk is the per-sample gradients). ``torch.autograd.grad`` w.r.t. the inputs
    only: parameters' ``.grad`` are left untouched."""
    if not xs.is_floating_point():
        raise ValueError(f"input gradients need floating-point inputs, got {xs.dtype}")
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    out: list[Tensor] = []
    with _modes(model, False), torch.enable_grad():
        for chunk in xs.split(batch):
            x = chunk.detach().clone().requires_grad_(True)
            scalar = (model(x) * readout).sum()
            (g,) = torch.autograd.grad(scalar, x)
            out.append(g.reshape(len(chunk), -1))
    return torch.cat(out)


def calibrate_batchnorm(model: nn.Module, x: Tensor) -> None:
    """Set every BatchNorm's running statistics to those of ``x`` (one forward pass in train mode, no grad).

    A net at initialisation has running mean 0 / variance 1, which do not describe its activations, so its
    eval-mode outputs (and gradients) would be those of a different network. After this, eval mode normalises
    with the statistics of a real batch: each point's gradient is the one of the network a training batch sees,
    without the points of the line interacting through batch statistics. ``momentum=None`` makes the running
    statistics the plain (cumulative) average; each module's momentum and every module's mode are restored."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    momenta = [m.momentum for m in norms]
    try:
        for m in norms:
            m.reset_running_stats()
            m.momentum = None
        with _modes(model, True), torch.no_grad():
            model(x)
    finally:
        for m, momentum in zip(norms, momenta, strict=True):
            m.momentum = momentum


def correlations(grads: Tensor, max_lag: int) -> dict[str, Any]:
    """``neighbor_corr``, ``acf`` (list, lag 0..max_lag) and ``corr_length`` of gradients (points, D), in float64
    (definitions in the module docstring)."""
    p = grads.shape[0]
    if not 1 <= max_lag < p:
        raise ValueError(f"max_lag must be in [1, points - 1] = [1, {p - 1}], got {max_lag}")
    g = grads.detach().reshape(p, -1).to(torch.float64).cpu().numpy()
    centred = g - g.mean(axis=1, keepdims=True)
    norm = np.linalg.norm(centred, axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        unit = np.where(norm > 0, centred / norm, np.nan)  # zero variance: correlation undefined -> NaN
    acf = [_nanmean(np.clip((unit[: p - k] * unit[k:]).sum(axis=1), -1.0, 1.0)) for k in range(max_lag + 1)]
    below = [k for k, a in enumerate(acf) if a < 1 / math.e]  # NaN compares False: never "below"
    return {"neighbor_corr": acf[1], "acf": acf, "corr_length": float(below[0]) if below else math.nan}


def _nanmean(a: np.ndarray) -> float:
    ok = a[np.isfinite(a)]
    return float(ok.mean()) if ok.size else math.nan


def measure(
    variant: str, depth: int | None, *, task: str = "digits", seed: int = 0, points: int = 256, span: float = 1.0,
    max_lag: int = 32, calibrate: int = 512, batch: int = 64,
) -> GradCorr:  # fmt: skip
    """Shattering of ``variant`` at ``depth`` at initialisation on ``task``'s inputs, built exactly as a training
    run builds it (:func:`bench.runs.train.setup`, CPU). ``calibrate`` training inputs set BatchNorm statistics (0:
    keep 0/1). Deterministic: the global RNG and determinism flag are restored; draws use a seeded generator."""
    if not 1 <= max_lag < points or calibrate < 0:  # cheap checks first: building the task and model is not
        raise ValueError(f"need 1 <= max_lag < points and calibrate >= 0, got {max_lag=}, {points=}, {calibrate=}")
    cfg = RunConfig(variant=variant, depth=depth, task=task, seed=seed, device="cpu")
    flag = torch.are_deterministic_algorithms_enabled()
    try:
        with torch.random.fork_rng(devices=[]):
            s = setup(cfg)
    finally:
        torch.use_deterministic_algorithms(flag)
    inputs = _train_inputs(s.task, max(calibrate, 1))
    if not inputs.is_floating_point():
        raise ValueError(
            f"gradcorr needs a task with continuous inputs (images); task {task!r} feeds token ids ({inputs.dtype}), "
            "whose input gradient is not defined"
        )
    model = s.model
    if calibrate > 0:
        calibrate_batchnorm(model, inputs[:calibrate])
    x0 = inputs[0]
    gen = torch.Generator().manual_seed(seed)
    direction = torch.randn(x0.shape, generator=gen, dtype=x0.dtype)
    direction *= x0.norm() / direction.norm()
    xs = line_inputs(x0, direction, points, span)
    with torch.no_grad(), _modes(model, False):
        out_shape = model(x0.unsqueeze(0)).shape[1:]
    readout = torch.randn(out_shape, generator=gen, dtype=x0.dtype)
    readout /= readout.norm()
    grads = line_gradients(model, xs, readout, batch)
    c = correlations(grads, max_lag)
    info = {} if variant.startswith("timm:") else variants_registry.describe(variant)
    depth_used = s.model_kwargs.get("depth", info.get("fixed", {}).get("depth", info.get("defaults", {}).get("depth")))
    meta = {"variant": variant, "depth": depth_used, "seed": seed}
    summary = {
        **meta, "task": task, "points": points, "span": span, "max_lag": max_lag, "calibrate": calibrate,
        "neighbor_corr": c["neighbor_corr"], "corr_length": c["corr_length"],
        "params": sum(p.numel() for p in model.parameters()),
    }  # fmt: skip
    acf = pd.DataFrame({**meta, "lag": range(max_lag + 1), "acf": c["acf"]})
    t = torch.linspace(-span, span, points, dtype=torch.float64).numpy()
    dfdt = (grads.to(torch.float64) @ direction.reshape(-1).to(torch.float64)).numpy()
    return GradCorr(summary, acf, pd.DataFrame({**meta, "t": t, "dfdt": dfdt}))


def _train_inputs(task: Any, n: int) -> Tensor:
    """The first ``n`` inputs of the task's fixed training subset (fewer if it holds fewer)."""
    got: list[Tensor] = []
    for x, _ in task.train_eval_batches(n):
        got.append(x)
        if sum(len(b) for b in got) >= n:
            break
    return torch.cat(got)[:n]


def measure_grid(variants: Sequence[str], depths: Sequence[int], seeds: Sequence[int], **kw: Any) -> GradCorrFrames:
    """:func:`measure` for every (variant, depth, seed); an invalid depth raises the registry's ValueError."""
    runs = [measure(v, d, seed=s, **kw) for v in variants for d in depths for s in seeds]
    return GradCorrFrames(
        pd.DataFrame([r.summary for r in runs]),
        pd.concat([r.acf for r in runs], ignore_index=True),
        pd.concat([r.series for r in runs], ignore_index=True),
    )
