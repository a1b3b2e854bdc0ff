"""How the scaling fit behaves on ladders drawn from a known curve: coverage and width of its intervals, E free or
held at its true value, and a worked compute multiplier.

    python scripts/scaling_fit_check.py [--draws 200] [--seeds 3] [--sizes 5] [--span 50] [--noise 0.01]

Each draw is a ladder of ``--sizes`` sizes spanning ``--span`` times in compute (3e10 to 1.5e12 FLOPs by default,
the ``scaling`` study's), ``--seeds`` seeds per size, each run's loss the curve L(C) = E + A·C^(−α) times
exp(N(0, noise)). The curve is one a small byte-level model on ``tinytext`` might follow: E = 0.463 nats (the
corpus's entropy rate), 1.6 nats above it at 3e10 FLOPs, α = 0.25. For E free and E held, the table gives how often
the 95% interval covers the true parameter and the interval's median width. Then one ladder of a design on the
same curve shifted by 2x in compute, against the baseline: the multiplier at each size with its interval. Seconds
on one core.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from bench.analysis import scaling
from bench.analysis.multiplier import Ladder, fit_ladders

E, ALPHA = 0.463, 0.25
LOG_A = math.log(1.6) + ALPHA * math.log(3e10)


def curve(c: np.ndarray) -> np.ndarray:
    return E + np.exp(LOG_A - ALPHA * np.log(c))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--draws", type=int, default=200)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--sizes", type=int, default=5)
    p.add_argument("--span", type=float, default=50.0)
    p.add_argument("--noise", type=float, default=0.01, help="the spread of log loss between seeds")
    p.add_argument("--resamples", type=int, default=200)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    compute = np.geomspace(3e10, 3e10 * args.span, args.sizes)
    loss = curve(compute)[None, :, None] * np.exp(rng.normal(0, args.noise, (args.draws, args.sizes, args.seeds)))
    idx = scaling.resample(args.seeds, args.resamples, rng)
    means = np.concatenate([scaling.seed_means(one, idx) for one in loss])
    print(f"{args.draws} ladders: {args.sizes} sizes over {args.span:g}x compute, {args.seeds} seeds, noise "
          f"{args.noise:g}; {args.resamples} bootstrap resamples each")
    print(f"{'E':<6} {'parameter':<9} {'covered':>8} {'median width':>13} {'failed fits':>12}")
    for label, fixed in (("free", None), ("held", E)):
        fits = scaling.fit_batch(compute, means, fixed).reshape(args.draws, args.resamples, 3)
        for j, (name, truth) in enumerate((("E", E), ("log A", LOG_A), ("alpha", ALPHA))):
            if fixed is not None and j == 0:
                continue
            bounds = np.array([scaling.interval(fits[k, 0, j], fits[k, 1:, j], args.seeds) for k in range(args.draws)])
            ok = np.isfinite(bounds).all(axis=1)
            covered = ((bounds[ok, 0] <= truth) & (truth <= bounds[ok, 1])).mean()
            width = np.median(bounds[ok, 1] - bounds[ok, 0])
            print(f"{label:<6} {name:<9} {covered:>8.0%} {width:>13.3g} {int((~ok).sum()):>12}")
    one = curve(compute)[:, None] * np.exp(rng.normal(0, args.noise, (args.sizes, args.seeds)))
    shifted = curve(2 * compute)[:, None] * np.exp(rng.normal(0, args.noise, (args.sizes, args.seeds)))
    sizes = tuple(f"{c:.3g}" for c in compute)
    none = np.full((args.sizes, args.seeds), np.nan)
    for label, fixed in (("free", None), ("held", E)):
        fit = fit_ladders({"base": Ladder("base", sizes, compute, one, none),
                           "design": Ladder("design", sizes, compute, shifted, none)}, "base", fixed)
        m = fit.multipliers().query("design == 'design'")
        cells = ", ".join(f"{s}: {v:.2f} [{lo:.2f}, {hi:.2f}]" for s, v, lo, hi in
                          zip(m["size"], m["multiplier"], m["multiplier_lo"], m["multiplier_hi"], strict=True))
        print(f"multiplier of a design shifted 2x in compute, E {label}: {cells}")


if __name__ == "__main__":
    main()
