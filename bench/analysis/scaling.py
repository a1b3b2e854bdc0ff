"""Loss against training compute, L(C) = E + A·C^(−α), fitted per design with bootstrap intervals over seeds.

The form is Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models" (approach 3, Eq. 2 with the
model size and data folded into one compute axis, as Kaplan et al. 2020 fit L(C)). E is the irreducible loss, A
and α the reducible part's scale and exponent.

**The objective.** Least squares on log-residuals, ``log L_i − log(E + A·C_i^(−α))``, over the ladder's sizes
(each the mean over seeds of its final loss). Hoffmann et al. minimise a Huber loss (δ = 1e-3) of the same
residuals; the Huber loss is there for a sweep of hundreds of heterogeneous runs, some of them off the curve. A
ladder here is a handful of sizes, each the mean of a few seeds, from which diverged and failed runs are already
left out by their status: no outliers to be robust to, and a Huber loss with δ = 1e-3 would treat every residual
of a small ladder (~1e-2) as one, i.e. fit the median rather than the mean. Log-residuals, because a loss's noise
across seeds is close to proportional to the loss.

**The solver.** Levenberg–Marquardt on (u, log A, α), with E = min(L)·sigmoid(u), so E stays in (0, min L), run on
a whole batch of ladders at once (numpy, one 3×3 solve per ladder and iteration): the bootstrap's resamples are
one batch. Three starts per ladder (E at 10 %, 50 %, 90 % of the lowest loss, log A and α then from the straight
line through log(L − E) against log C), the lowest residual kept: a three-parameter fit on few points has
valleys in which E and A trade off.

**E fixed.** Where the irreducible loss is known (``tinytext``: the entropy rate of the corpus's generating
process, :func:`known_floor`), E is held at it and only log A and α are fitted: the fit becomes two parameters on
a line in log(L − E) against log C, with one minimum, and the E–A trade-off that makes a free E's interval wide
on a ladder spanning one or two decades is gone. The price: a wrong E bends every other parameter.

**Lack of fit.** An interval over seeds says how well the seeds pin each size's mean, not whether the curve goes
through the means: a ladder whose sizes do not lie on one power law gives a fit, tight intervals and a multiplier
read off a curve the runs do not follow. :func:`lack_of_fit` tests it as a regression with replicates is tested
(Draper & Smith, *Applied Regression Analysis*, §2.1): on log L, the misfit of the curve at the sizes' means against
the seeds' scatter around them, F = (SS_lof / (k − p)) / (SS_pe / (N − k)) for k sizes, N runs and p fitted
parameters, with its F-distribution p-value. Where it is below :data:`MISFIT`, the curve misses its own points by
more than the seeds explain.

**Intervals.** The seeds are resampled with replacement (the same seeds for every design, so designs that share
seeds stay paired), the ladder refitted on each resample, and the 2.5 % and 97.5 % percentiles of a parameter's
fits around the point fit widened by sqrt(n / (n − 1)) · t(n − 1) / z for n seeds (:func:`widening`): the
bootstrap's spread of a mean over n seeds is the plug-in one, too narrow by the first factor, and the spread is
itself estimated from n seeds (Student's t over the normal quantile).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from bench.analysis.stats import t_quantile

ITERATIONS = 60  # Levenberg–Marquardt steps: a ladder of 3-10 points converges in 10-30
STARTS = (0.1, 0.5, 0.9)  # E's starts, as fractions of the lowest loss of the ladder
LEVEL = 0.95  # the intervals' coverage
BOOTSTRAP = 400  # resamples of the seeds: the percentiles of a 95 % interval stabilise to about 1 % of its width
MISFIT = 0.05  # a lack-of-fit p-value below this: the fitted curve misses its sizes' means (module docstring)


@dataclass(frozen=True)
class Curve:
    """One fitted curve L(C) = E + A·C^(−α) (``log_a`` = log A, natural logarithm)."""

    e: float
    log_a: float
    alpha: float

    def loss(self, compute: np.ndarray | float) -> np.ndarray:
        return self.e + np.exp(self.log_a - self.alpha * np.log(compute))

    def compute_for(self, loss: np.ndarray | float) -> np.ndarray:
        """The compute at which the curve reaches ``loss``: (A / (L − E))^(1/α); inf where L ≤ E (never)."""
        return compute_for(np.asarray(self.e), np.asarray(self.log_a), np.asarray(self.alpha), loss)


def compute_for(e: np.ndarray, log_a: np.ndarray, alpha: np.ndarray, loss: np.ndarray | float) -> np.ndarray:
    """Elementwise (broadcast) inverse of L(C): the compute where E + A·C^(−α) = ``loss``; inf where ``loss`` ≤ E."""
    gap = np.asarray(loss, dtype=float) - e
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = np.exp((log_a - np.log(np.where(gap > 0, gap, np.nan))) / alpha)
    return np.where(gap > 0, out, np.inf)


def _line(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares intercept and slope of ``y`` on ``x`` per row (rows of a batch, NaN-free)."""
    xm, ym = x.mean(axis=1, keepdims=True), y.mean(axis=1, keepdims=True)
    slope = ((x - xm) * (y - ym)).sum(axis=1) / np.maximum(((x - xm) ** 2).sum(axis=1), 1e-300)
    return ym[:, 0] - slope * xm[:, 0], slope


def _residuals(theta: np.ndarray, x: np.ndarray, logl: np.ndarray, top: np.ndarray,
               e_fixed: float | None) -> tuple[np.ndarray, np.ndarray]:
    """Log-residuals (B, n) and their Jacobian (B, n, 3) in (u, log A, α) at ``theta`` (B, 3)."""
    u, a, alpha = theta[:, :1], theta[:, 1:2], theta[:, 2:3]
    sig = 1.0 / (1.0 + np.exp(-u))
    e = np.full_like(u, e_fixed) if e_fixed is not None else top[:, None] * sig
    power = np.exp(np.clip(a - alpha * x, -700, 700))
    model = e + power
    r = logl - np.log(model)
    de = np.zeros_like(u) if e_fixed is not None else top[:, None] * sig * (1 - sig)
    jac = -np.stack([de / model + 0 * x, power / model, -x * power / model], axis=2)
    return r, jac


def _lm(theta: np.ndarray, x: np.ndarray, logl: np.ndarray, top: np.ndarray,
        e_fixed: float | None) -> tuple[np.ndarray, np.ndarray]:
    """Levenberg–Marquardt from ``theta`` for every ladder of the batch; the fitted theta and its residual sum."""
    free = np.array([e_fixed is None, True, True], dtype=float)
    lam = np.full(len(theta), 1e-3)
    r, jac = _residuals(theta, x, logl, top, e_fixed)
    sse = (r**2).sum(axis=1)
    for _ in range(ITERATIONS):
        jac = jac * free
        jtj = np.einsum("bni,bnj->bij", jac, jac)
        damp = lam[:, None] * (np.einsum("bii->bi", jtj) + 1e-12) + (1 - free) * 1.0
        step = np.linalg.solve(jtj + damp[:, :, None] * np.eye(3), -np.einsum("bni,bn->bi", jac, r)[:, :, None])
        trial = theta + step[:, :, 0] * free
        r_new, jac_new = _residuals(trial, x, logl, top, e_fixed)
        sse_new = (r_new**2).sum(axis=1)
        better = np.isfinite(sse_new) & (sse_new <= sse)
        theta = np.where(better[:, None], trial, theta)
        r = np.where(better[:, None], r_new, r)
        jac = np.where(better[:, None, None], jac_new, jac)
        sse = np.where(better, sse_new, sse)
        lam = np.where(better, lam / 3, lam * 4)
    return theta, sse


def fit_batch(compute: np.ndarray, loss: np.ndarray, e_fixed: float | None = None) -> np.ndarray:
    """Fit L(C) to each row of ``loss`` (B, n) at ``compute`` (n,) or (B, n); returns (B, 3) rows of (E, log A, α).
    A row whose fit failed (a NaN loss) is NaN."""
    loss = np.atleast_2d(np.asarray(loss, dtype=float))
    x = np.broadcast_to(np.log(np.asarray(compute, dtype=float)), loss.shape).copy()
    ok = np.isfinite(loss).all(axis=1) & (loss > 0).all(axis=1)
    if e_fixed is not None:
        ok &= (loss > e_fixed).all(axis=1)
    out = np.full((len(loss), 3), np.nan)
    if not ok.any():
        return out
    x, loss = x[ok], loss[ok]
    scale = x.mean(axis=1, keepdims=True)  # centred log compute: A's and α's errors decouple
    xc, logl, top = x - scale, np.log(loss), loss.min(axis=1)
    best_theta, best_sse = None, None
    for frac in ((None,) if e_fixed is not None else STARTS):
        e0 = np.full(len(loss), e_fixed) if e_fixed is not None else frac * top
        a0, slope = _line(xc, np.log(loss - e0[:, None]))
        u0 = np.zeros(len(loss)) if frac is None else np.full(len(loss), math.log(frac / (1 - frac)))
        theta, sse = _lm(np.stack([u0, a0, -slope], axis=1), xc, logl, top, e_fixed)
        if best_theta is None or best_sse is None:
            best_theta, best_sse = theta, sse
        else:
            keep = sse < best_sse
            best_theta = np.where(keep[:, None], theta, best_theta)
            best_sse = np.where(keep, sse, best_sse)
    assert best_theta is not None
    u, a_c, alpha = best_theta.T
    e = np.full(len(loss), e_fixed) if e_fixed is not None else top / (1 + np.exp(-u))
    out[ok] = np.stack([e, a_c + alpha * scale[:, 0], alpha], axis=1)  # log A at log C = 0
    return out


@dataclass(frozen=True)
class LackOfFit:
    """The lack-of-fit F test of one fitted ladder (module docstring): F on (``dfn``, ``dfd``) degrees of freedom and
    its p-value; NaN where the ladder has too few sizes or runs to test (k ≤ p or N ≤ k)."""

    f: float
    dfn: int
    dfd: int
    p: float

    @property
    def misfit(self) -> bool:
        return bool(self.p < MISFIT)


def lack_of_fit(loss: np.ndarray, fitted: np.ndarray, n_params: int) -> LackOfFit:
    """The lack-of-fit test of the curve whose values at the sizes are ``fitted`` (k,) against the runs ``loss``
    (k sizes, seeds; NaN: no run) it was fitted to, ``n_params`` parameters fitted, on log L (module docstring)."""
    logl = np.log(np.asarray(loss, dtype=float))
    n = np.isfinite(logl).sum(axis=1)
    sizes, runs = int((n > 0).sum()), int(n.sum())
    dfn, dfd = sizes - n_params, runs - sizes
    if dfn <= 0 or dfd <= 0:
        return LackOfFit(math.nan, dfn, dfd, math.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.log(np.nanmean(np.asarray(loss, dtype=float), axis=1))  # the fit's own points: log of the mean
        lof = float(np.nansum(n * (means - np.log(np.asarray(fitted, dtype=float))) ** 2))
        pure = float(np.nansum((logl - np.nanmean(logl, axis=1, keepdims=True)) ** 2))
    f = (lof / dfn) / (pure / dfd) if pure > 0 else (math.inf if lof > 0 else math.nan)
    return LackOfFit(f, dfn, dfd, float(special.fdtrc(dfn, dfd, f)) if math.isfinite(f) else 0.0 if f > 0 else
                     math.nan)


def resample(n_seeds: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """``draws`` bootstrap resamples of seed indices (draws, n_seeds); row 0 is the sample itself."""
    idx = rng.integers(0, n_seeds, size=(draws, n_seeds))
    idx[0] = np.arange(n_seeds)
    return idx


def seed_means(loss: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Per resample (rows of ``idx``) the mean over the resampled seeds of each size of ``loss`` (sizes, seeds), a
    missing run (NaN) left out: (draws, sizes); NaN where a size has no run in the resample."""
    picked = loss[:, idx]  # (sizes, draws, seeds)
    with np.errstate(invalid="ignore"):
        counts = np.isfinite(picked).sum(axis=2)
        total = np.where(np.isfinite(picked), picked, 0.0).sum(axis=2)
        return np.where(counts > 0, total / np.maximum(counts, 1), np.nan).T


def interval(point: np.ndarray | float, draws: np.ndarray, n_seeds: int, level: float = LEVEL,
             positive: bool = False) -> tuple[float, float]:
    """The percentile interval of ``draws`` (NaN left out) around ``point``, widened by :func:`widening` (module
    docstring); (NaN, NaN) with fewer than 10 finite draws. Infinite draws (a loss the baseline never reaches)
    count as beyond every finite one. ``positive``: a quantity above 0 (A, E, a multiplier, a ratio) is widened on
    the log scale, so its interval stays above 0."""
    d = np.asarray(draws, dtype=float)
    d = d[~np.isnan(d)]
    if len(d) < 10 or not np.isfinite(point):
        return math.nan, math.nan
    lo, hi = (float(v) for v in np.quantile(d, [(1 - level) / 2, (1 + level) / 2]))
    widen = widening(n_seeds, level)
    p = float(point)
    if positive and p > 0 and lo > 0:
        with np.errstate(over="ignore"):
            return (float(np.exp(math.log(p) - widen * (math.log(p) - math.log(lo)))),
                    float(np.exp(math.log(p) + widen * (np.log(hi) - math.log(p)))))
    return p - widen * (p - lo), p + widen * (hi - p)


def widening(n_seeds: int, level: float = LEVEL) -> float:
    """How much wider than the bootstrap's percentiles an interval over ``n_seeds`` seeds is drawn: sqrt(n / (n − 1))
    (the plug-in spread of a mean is too narrow by it) times Student's t over the normal quantile with n − 1 degrees
    of freedom (the spread itself is estimated from n seeds); 1 for one seed, whose interval says nothing."""
    if n_seeds < 2:
        return 1.0
    q = (1 + level) / 2
    return math.sqrt(n_seeds / (n_seeds - 1)) * float(t_quantile(q, n_seeds - 1) / special.ndtri(q))  # t / normal


def check_ladder(design: str, compute: Sequence[float], min_sizes: int = 3, tolerance: float = 0.01) -> None:
    """Bad input for a fit: fewer than ``min_sizes`` sizes, or two sizes whose compute is within ``tolerance``
    (relative) of each other. ValueError naming the design and what is wrong."""
    c = sorted(float(v) for v in compute)
    if len(c) < min_sizes:
        raise ValueError(f"scaling fit: {design} has {len(c)} size(s) on its ladder; fitting E, A and α needs at "
                         f"least {min_sizes} sizes of different compute")
    if any(not (v > 0 and math.isfinite(v)) for v in c):
        raise ValueError(f"scaling fit: {design} has a size whose training compute is not a positive number ({c})")
    same = [(a, b) for a, b in itertools.pairwise(c) if (b - a) / b <= tolerance]
    if same:
        a, b = same[0]
        raise ValueError(f"scaling fit: two sizes of {design} do not differ in training compute ({a:.4g} and {b:.4g} "
                         f"FLOPs, within {tolerance:.0%}): a ladder's sizes must differ in compute")
