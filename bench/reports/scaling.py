"""The scaling fit as text and as a figure: per design its fitted L(C) = E + A·C^(−α), then per design and size its
compute multiplier against the baseline (:mod:`bench.analysis.multiplier`); ``bench scaling-fit`` prints the
tables, and the REPORT of a study that declares a multiplier claim gains them with a log-log figure."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from bench.analysis.claims import parse_claims
from bench.analysis.multiplier import ScalingFit, fit_ladders, floor_of, ladders_from, steps_ratio_text
from bench.analysis.scaling import MISFIT, interval
from bench.analysis.studyfile import NoStudy, find_study, read_study_file
from bench.reports.drawing import figure, legend
from bench.reports.markdown import MISSING, bound_cell, interval_cell, md
from bench.reports.parallel import save
from bench.reports.plotdata import palette
from bench.runs.names import file_name


def fits_table(fit: ScalingFit) -> pd.DataFrame:
    """One row per design: its ladder, E (``fixed`` where held at the task's floor), A, α and α − α_baseline."""
    f = fit.fits()
    e = [f"{v:.4g} (fixed)" for v in f["E"]] if fit.e_fixed is not None else \
        [interval_cell(*r) for r in zip(f["E"], f["E_lo"], f["E_hi"], strict=True)]
    return pd.DataFrame({
        "design": f["design"], "sizes": f["sizes"], "seeds": f["seeds"], "E": e,
        "A": [interval_cell(*r) for r in zip(f["A"], f["A_lo"], f["A_hi"], strict=True)],
        "alpha": [interval_cell(*r) for r in zip(f["alpha"], f["alpha_lo"], f["alpha_hi"], strict=True)],
        f"alpha - alpha({fit.baseline})": [
            MISSING if d == fit.baseline else interval_cell(v, lo, hi, 2)
            for d, v, lo, hi in zip(f["design"], f["alpha_diff"], f["alpha_diff_lo"], f["alpha_diff_hi"], strict=True)],
        "lack of fit": [MISSING if math.isnan(p) else f"F {v:.3g}, p {p:.2g}{' (misses)' if p < MISFIT else ''}"
                        for v, p in zip(f["misfit_F"], f["misfit_p"], strict=True)],
    })


def multipliers_table(fit: ScalingFit) -> pd.DataFrame:
    """One row per design and size: compute, mean loss, the compute multiplier and the steps-to-target ratio."""
    m = fit.multipliers()
    return pd.DataFrame({
        "design": m["design"], "size": m["size"], "train FLOPs": [f"{c:.3g}" for c in m["compute"]],
        "loss": [f"{v:.4g}" for v in m["loss"]],
        "compute multiplier": [interval_cell(*r) for r in
                               zip(m["multiplier"], m["multiplier_lo"], m["multiplier_hi"], strict=True)],
        "steps-to-target ratio": [bound_cell(*r) for r in zip(
            m["steps_ratio"], m["steps_ratio_lo"], m["steps_ratio_hi"], m["steps_ratio_short"], strict=True)],
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
    missed = fit.misfits(*fit.ladders)
    return "\n\n".join([
        f"L(C) = E + A*C^-alpha per design, least squares on log L; {floor}; 95% bootstrap intervals over "
        f"{fit.n_seeds} seed(s); lack of fit: the F test of the curve's misses at the sizes' means against the seeds' "
        f"scatter around them (p < {MISFIT:g}: the curve misses its own points)",
        _markdown(fits_table(fit)),
        *([f"Not a reading of these runs: {missed}. The compute multipliers below are what the fitted curves say, "
           "and no claim's verdict rests on them; the steps-to-target ratio reads the runs' training curves, not the "
           "fit."] if missed else []),
        f"compute multiplier: the compute {fit.baseline} needs on its fitted curve to reach the design's fitted "
        "loss at its compute, / the design's compute (> 1: the design is worth more compute than it spends); "
        f"steps-to-target ratio: {steps_ratio_text(fit)}",
        _markdown(multipliers_table(fit)),
    ]) + "\n"


def figure_data(fit: ScalingFit, points: int = 50) -> tuple[pd.DataFrame, pd.DataFrame]:
    """What the log-log figure draws: per design and size its mean loss over seeds with the interval of that mean
    (``design, compute, loss, low, high``), and per design its fitted curve over its ladder's span (``design,
    compute, loss``)."""
    dots, lines = [], []
    for d, lad in fit.ladders.items():
        draws = np.stack([np.nanmean(lad.loss[:, idx], axis=1) for idx in fit.resamples])  # (draws, sizes)
        for i, c in enumerate(lad.compute):
            low, high = interval(draws[0, i], draws[1:, i], fit.n_seeds, positive=True)
            dots.append({"design": d, "compute": c, "loss": draws[0, i], "low": low, "high": high})
        e, log_a, alpha = fit.params[d][0]
        grid = np.geomspace(lad.compute.min(), lad.compute.max(), points)
        lines += [{"design": d, "compute": c, "loss": e + math.exp(log_a - alpha * math.log(c))} for c in grid]
    return pd.DataFrame(dots), pd.DataFrame(lines)


def scaling_figure(fit: ScalingFit, metric: str) -> Figure:
    """Loss against training FLOPs, both axes logarithmic: each design's points (mean over seeds, its bootstrap
    interval) and its fitted curve, one colour per design."""
    dots, lines = figure_data(fit)
    colours = palette(fit.ladders)
    fig, (ax,) = figure()
    for d in fit.ladders:
        p, c = dots[dots["design"] == d], lines[lines["design"] == d]
        ax.plot(c["compute"], c["loss"], color=colours[d], linewidth=1.5)
        ax.errorbar(p["compute"], p["loss"], yerr=[p["loss"] - p["low"], p["high"] - p["loss"]], fmt="o",
                    color=colours[d], markersize=4, capsize=2)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training FLOPs")
    ax.set_ylabel(metric)
    floor = f", E held at {fit.e_fixed:.3g}" if fit.e_fixed is not None else ""
    ax.set_title(f"L(C) = E + A·C^-α per design{floor}")
    legend(fig, colours, list(fit.ladders))
    return fig


@dataclass(frozen=True)
class StudyFit:
    """The scaling fit a study's REPORT and site page show: against the baseline ``a`` of the study's first
    multiplier claim, of that claim's loss ``metric``; ``fit`` None where it was refused, ``reason`` saying why."""

    baseline: str
    metric: str
    fit: ScalingFit | None
    reason: str = ""


def study_fit(root: Path, study: str, board: pd.DataFrame, runs: Sequence[Mapping[str, Any]]) -> StudyFit | None:
    """The scaling fit of ``study`` (:class:`StudyFit`); None for a study that declares no multiplier claim (or has no
    study file); a study file that cannot be read is an error (ValueError)."""
    try:
        path = find_study(study, root)
    except NoStudy:
        return None
    claims = parse_claims(read_study_file(path).get("claims", []), str(path))
    mine = [c for c in claims if c.kind == "multiplier"]
    if not mine:
        return None
    baseline, metric = str(mine[0].a), mine[0].metric
    try:
        return StudyFit(baseline, metric, fit_ladders(ladders_from(board, runs, metric), baseline, floor_of(runs)))
    except ValueError as exc:
        return StudyFit(baseline, metric, None, str(exc))


def report_lines(root: Path, study: str, board: pd.DataFrame, runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The REPORT section of a study that declares a multiplier claim (:func:`study_fit`): its tables, and the figure
    written to ``plots/<study>/scaling.png``; [] for any other study, and the reason in one line where the fit is
    refused."""
    found = study_fit(root, study, board, runs)
    if found is None:
        return []
    head = ["## Scaling fit", ""]
    if found.fit is None:
        return [*head, f"No fit: {md(found.reason)}.", ""]
    path, fit, metric = root / "plots" / file_name(study, "study") / "scaling.png", found.fit, found.metric
    save(path, lambda: scaling_figure(fit, metric))
    shown = path.relative_to(root).as_posix()
    return [*head, f"The same tables: `python -m bench scaling-fit --study {study} --baseline {found.baseline}`; the "
            "fit, its intervals and the multiplier are explained in resbench's docs/methodology.md.", "",
            render_scaling(fit).rstrip(), "", f"![scaling]({shown})", ""]
