"""Differences paired by seed: what two configurations' runs say about their difference when the seeds match.

A seed fixes a run's initialisation and the order of its data, the same for every design (bench.runs.train), so the
seed-to-seed spread of a loss is largely shared by the two configurations compared; their difference is what a claim
is about. Rules (the claims, ``bench compare`` and the figures use them):

- **When the runs pair.** Two groups pair when the caller has found that their configurations differ in the
  compared field only (a claim's groups with no confound, a row of ``bench compare`` and the baseline's
  configuration that matches it in every other field), each side holds each seed once, and at least
  :data:`~bench.analysis.stats.MIN_RUNS` seeds are on both sides. A run whose seed the other side lacks (a failed
  partner, a seed added to one side only) is left out of the pairs. A figure timed on the wall clock never pairs
  (:mod:`bench.analysis.timed`: a seed shares nothing of the load at the moments two runs took their times).
  Otherwise the comparison is Welch's, unpaired (:func:`bench.analysis.stats.two_groups`).
- **Paired t.** ``d_s = x_s − base_s`` for each shared seed s, n of them; ``diff = mean(d)``,
  ``sd = std(d, ddof=1)``, the interval ``diff ± t(1 − (1 − level)/2, n − 1) · sd / √n`` and the two-sided p of
  ``t = diff / (sd / √n)`` on n − 1 degrees of freedom. Constant differences: a width of 0, no p.
- **A check where n is small.** With at most :data:`EXACT_MAX` pairs the exact sign-flip permutation test is
  reported beside t's p: under no difference each ``d_s`` is as likely to have either sign, so p is the share of
  the 2^n sign patterns whose mean difference is at least as far from 0 as the one measured. It needs no normal
  distribution, and its smallest possible value, 2/2^n (0.25 with three pairs), says how much n pairs can show.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from bench.analysis.stats import (
    MIN_RUNS,
    PAIRED,
    ROUNDING,
    TwoGroups,
    observations,
    t_ci,
    t_quantile,
    t_tail,
    two_groups,
    without_spread,
)
from bench.analysis.timed import TIMED
from bench.runs.schema import COST_COLUMNS

EXACT_MAX = 16  # pairs up to which the exact sign-flip p is computed (2^16 sign patterns)


def paired_interval(d: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """The mean of the paired differences ``d`` along the last axis and its t-interval half-width at ``level``
    (NaN for fewer than two pairs); vectorised over the leading axes, so that a simulation of many studies and one
    claim use the same formula."""
    d = np.asarray(d, dtype=float)
    n = d.shape[-1]
    mean = d.mean(axis=-1)
    if n < MIN_RUNS:
        return mean, np.full(mean.shape, math.nan)
    half = t_quantile(0.5 + level / 2, n - 1) * d.std(axis=-1, ddof=1) / math.sqrt(n)
    return mean, half


def sign_flip_p(d: np.ndarray) -> float:
    """The exact two-sided sign-flip permutation p of the mean of the paired differences ``d`` (module docstring);
    NaN beyond :data:`EXACT_MAX` pairs or with none."""
    d = np.asarray(d, dtype=float)
    n = d.size
    if n == 0 or n > EXACT_MAX:
        return math.nan
    signs = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1) * 2 - 1
    means = np.abs(signs @ d) / n
    return float(np.mean(means >= abs(d.mean()) * (1 - 1e-12)))


def paired(x: Mapping[int, float], base: Mapping[int, float], level: float = 0.95) -> TwoGroups:
    """``x`` (a variant's values by seed) against ``base``'s, paired on the seeds both have (module docstring); each
    side's own count, mean and CI are over all its values."""
    x = {s: v for s, v in x.items() if math.isfinite(v)}
    base = {s: v for s, v in base.items() if math.isfinite(v)}
    seeds = sorted(set(x) & set(base))
    d = np.array([x[s] - base[s] for s in seeds], dtype=float)
    a, b = t_ci(list(x.values())), t_ci(list(base.values()))
    mean, half = paired_interval(d, level)
    out = TwoGroups(int(a["n"]), a["mean"], a["ci"], int(b["n"]), b["mean"], b["ci"], float(mean), test=PAIRED,
                    pairs=len(seeds), p_exact=sign_flip_p(d), level=level, ci_diff=float(half))
    sd = float(d.std(ddof=1))
    # The same difference at every seed (to within the rounding of the values subtracted, which differs between numpy
    # builds): known exactly, but there is no test to make.
    scale = max((abs(v) for v in (*x.values(), *base.values())), default=0.0)
    if sd <= ROUNDING * scale:
        return without_spread(out, scale)
    t = float(mean) / (sd / math.sqrt(d.size))
    dof = d.size - 1
    return dataclasses.replace(out, t=t, dof=float(dof), p=float(2 * t_tail(abs(t), dof)))


def seeded(rows: pd.DataFrame, metric: str, column: str | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """The values of ``metric`` (read from ``column``, default the metric's own) that the counted ``rows`` give a
    comparison, and their seeds: None where they cannot pair. A cost figure counts once per measurement
    (:func:`~bench.analysis.stats.observations`: a sweep copies it into its other seeds' rows) and never pairs; nor
    does a figure read off the wall clock (:data:`bench.analysis.timed.TIMED`: two designs' runs of one seed took their
    times at separate moments, so their difference is the load's as much as the designs'); rows that do not each
    record a seed for their value do not pair either."""
    if metric in COST_COLUMNS or metric in TIMED or "seed" not in rows.columns:
        return observations(rows, metric, column), None
    values = pd.to_numeric(rows[column or metric], errors="coerce").to_numpy(dtype=float)
    seeds = pd.to_numeric(rows["seed"], errors="coerce").to_numpy(dtype=float)
    if np.isnan(seeds[np.isfinite(values)]).any():
        return values, None
    return values, seeds


def pairs_up(seeds: np.ndarray, seeds_base: np.ndarray) -> bool:
    """Whether two sides' runs pair: each side holds each seed once and at least MIN_RUNS seeds are on both."""
    return (len(set(seeds)) == len(seeds) and len(set(seeds_base)) == len(seeds_base)
            and len(set(seeds) & set(seeds_base)) >= MIN_RUNS)


def difference(values: np.ndarray, baseline: np.ndarray, seeds: np.ndarray | None = None,
               seeds_base: np.ndarray | None = None, level: float = 0.95) -> TwoGroups:
    """The comparison of ``values`` (a variant's runs) with ``baseline``'s: paired by seed where the seeds are given
    and pair up (:func:`pairs_up`; the caller gives them only for two configurations that differ in the compared
    field alone), else Welch's, unpaired. Non-finite values are left out first."""
    values, baseline = np.asarray(values, dtype=float), np.asarray(baseline, dtype=float)
    if seeds is None or seeds_base is None:
        return two_groups(values, baseline, level)
    keep, keep_base = np.isfinite(values), np.isfinite(baseline)
    s, sb = np.asarray(seeds)[keep], np.asarray(seeds_base)[keep_base]
    if not pairs_up(s, sb):
        return two_groups(values, baseline, level)
    return paired(dict(zip(s.tolist(), values[keep].tolist(), strict=True)),
                  dict(zip(sb.tolist(), baseline[keep_base].tolist(), strict=True)), level)
