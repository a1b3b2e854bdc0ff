"""The scaling fit's tables as text (``bench scaling-fit``): per design its fitted L(C) = E + A·C^(−α), then per
design and size its compute multiplier against the baseline (:mod:`bench.analysis.multiplier`)."""

from __future__ import annotations

import math

import pandas as pd

from bench.analysis.multiplier import ScalingFit
from bench.reports.markdown import MISSING


def _cell(value: float, lo: float, hi: float, digits: int = 3) -> str:
    """``value [lo, hi]``; the value alone where the interval is not known; ``inf`` spelled ``never``."""
    def num(v: float) -> str:
        return "never" if v == math.inf else f"{v:.{digits}g}"

    if not math.isfinite(value) and value != math.inf:
        return MISSING
    if math.isnan(lo) or math.isnan(hi):
        return num(value)
    return f"{num(value)} [{num(lo)}, {num(hi)}]"


def fits_table(fit: ScalingFit) -> pd.DataFrame:
    """One row per design: its ladder, E (``fixed`` where held at the task's floor), A, α and α − α_baseline."""
    f = fit.fits()
    e = [f"{v:.4g} (fixed)" for v in f["E"]] if fit.e_fixed is not None else \
        [_cell(*r) for r in zip(f["E"], f["E_lo"], f["E_hi"], strict=True)]
    return pd.DataFrame({
        "design": f["design"], "sizes": f["sizes"], "seeds": f["seeds"], "E": e,
        "A": [_cell(*r) for r in zip(f["A"], f["A_lo"], f["A_hi"], strict=True)],
        "alpha": [_cell(*r) for r in zip(f["alpha"], f["alpha_lo"], f["alpha_hi"], strict=True)],
        f"alpha - alpha({fit.baseline})": [MISSING if d == fit.baseline else _cell(v, lo, hi, 2) for d, v, lo, hi in
                                           zip(f["design"], f["alpha_diff"], f["alpha_diff_lo"], f["alpha_diff_hi"],
                                               strict=True)],
    })


def multipliers_table(fit: ScalingFit) -> pd.DataFrame:
    """One row per design and size: compute, mean loss, the compute multiplier and the steps-to-target ratio."""
    m = fit.multipliers()
    return pd.DataFrame({
        "design": m["design"], "size": m["size"], "train FLOPs": [f"{c:.3g}" for c in m["compute"]],
        "loss": [f"{v:.4g}" for v in m["loss"]],
        "compute multiplier": [_cell(*r) for r in zip(m["multiplier"], m["multiplier_lo"], m["multiplier_hi"],
                                                      strict=True)],
        "steps-to-target ratio": [_cell(*r) for r in zip(m["steps_ratio"], m["steps_ratio_lo"],
                                                         m["steps_ratio_hi"], strict=True)],
    })


def _markdown(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def render_scaling(fit: ScalingFit, fmt: str = "markdown") -> str:
    """Both tables, as markdown (with a line saying how E was treated and what a multiplier is) or CSV (the numbers
    with their interval bounds, fits then multipliers)."""
    if fmt == "csv":
        return fit.fits().to_csv(index=False) + "\n" + fit.multipliers().to_csv(index=False)
    floor = (f"E held at the task's known floor, {fit.e_fixed:.4g} nats" if fit.e_fixed is not None else
             "E fitted")
    return "\n\n".join([
        f"L(C) = E + A*C^-alpha per design, least squares on log L; {floor}; 95% bootstrap intervals over "
        f"{fit.n_seeds} seed(s)",
        _markdown(fits_table(fit)),
        f"compute multiplier: the compute {fit.baseline} needs on its fitted curve to reach the design's fitted "
        "loss at its compute, / the design's compute (> 1: the design is worth more compute than it spends)",
        _markdown(multipliers_table(fit)),
    ]) + "\n"
