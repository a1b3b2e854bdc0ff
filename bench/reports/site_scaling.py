"""The scaling section of a study's page on the results site (``bench site``): the study's scaling fit
(:func:`bench.reports.scaling.study_fit`, the one its REPORT shows) as an interactive log-log figure — each design's
points (mean over seeds with the 95% bootstrap interval of that mean) and its fitted curve L(C) = E + A·C^(−α), one
colour per design, the colours of the REPORT's figure — and the two tables of the REPORT: the fits (E, A, α and
α − α_baseline) and the compute multipliers (per design and size, with the steps-to-target ratio).

Figures here are plotly's JSON form, as every figure of the site (:mod:`bench.reports.site`); this module builds the
figure's data and the tables' HTML, and the site's page writes them."""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.colors import to_hex

from bench.analysis.multiplier import ScalingFit, steps_ratio_text
from bench.reports.plotdata import palette
from bench.reports.scaling import figure_data, fits_table, multipliers_table, study_fit


def _numbers(values: Any) -> list[float | None]:
    """JSON numbers: NaN and infinities become null."""
    return [float(v) if math.isfinite(float(v)) else None for v in values]


def scaling_plot(fit: ScalingFit, metric: str) -> dict[str, Any]:
    """The figure as plotly's JSON form: per design a line (its fitted curve over its ladder's span) and markers with
    asymmetric error bars (its points), in one legend group; both axes logarithmic."""
    dots, curves = figure_data(fit)
    colours = {d: to_hex(c) for d, c in palette(fit.ladders).items()}
    traces: list[dict[str, Any]] = []
    for d in fit.ladders:
        p, c = dots[dots["design"] == d], curves[curves["design"] == d]
        traces.append({"type": "scatter", "mode": "lines", "x": _numbers(c["compute"]), "y": _numbers(c["loss"]),
                       "name": f"{d} fit", "legendgroup": d, "showlegend": False, "line": {"color": colours[d]},
                       "hoverinfo": "skip"})
        traces.append({"type": "scatter", "mode": "markers", "x": _numbers(p["compute"]), "y": _numbers(p["loss"]),
                       "name": d, "legendgroup": d, "marker": {"color": colours[d], "size": 7},
                       "error_y": {"type": "data", "symmetric": False, "array": _numbers(p["high"] - p["loss"]),
                                   "arrayminus": _numbers(p["loss"] - p["low"]), "color": colours[d]},
                       "hovertemplate": f"{html.escape(d)}<br>%{{x:.3g}} FLOPs: %{{y:.4g}}<extra></extra>"})
    floor = f", E held at {fit.e_fixed:.3g}" if fit.e_fixed is not None else ""
    grid = {"gridcolor": "#e5e5e5", "zeroline": False, "type": "log"}
    return {"data": traces, "layout": {
        "title": {"text": f"{metric} against training FLOPs: L(C) = E + A·C^-α per design{floor}"},
        "xaxis": {"title": {"text": "training FLOPs"}, "exponentformat": "power", **grid},
        "yaxis": {"title": {"text": metric}, **grid},
        "legend": {"title": {"text": "design"}}, "plot_bgcolor": "white", "margin": {"t": 60, "r": 20}}}


def _table(df: pd.DataFrame, cls: str) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
                   for row in df.itertuples(index=False))
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def scaling_html(root: Path, study: str, board: pd.DataFrame, runs: Sequence[Mapping[str, Any]],
                 draw: Callable[[dict[str, Any], str], str]) -> list[str]:
    """The section's HTML for a study that declares a multiplier claim ([] for any other), the figure drawn by
    ``draw`` (the site's :meth:`_Figures.html`); where the fit is refused, one paragraph saying why."""
    found = study_fit(root, study, board, runs)
    if found is None:
        return []
    head = ["<h2>Scaling fit and compute multipliers</h2>"]
    if found.fit is None:
        return [*head, f"<p>No fit: {html.escape(found.reason)}.</p>"]
    fit = found.fit
    floor = (f"E held at the task's known floor, {fit.e_fixed:.4g} nats" if fit.e_fixed is not None else "E fitted")
    return [*head,
            f"<p>Each design's {html.escape(found.metric)} against its training FLOPs, fitted as L(C) = E + A·C^-α "
            f"({html.escape(floor)}); 95% bootstrap intervals over {fit.n_seeds} seed(s). The same tables: "
            f"<code>python -m bench scaling-fit --study {html.escape(study)} --baseline "
            f"{html.escape(found.baseline)}</code>.</p>",
            draw(scaling_plot(fit, found.metric), f"scaling {study}"),
            "<h3>Fits</h3>", _table(fits_table(fit), "scaling-fits"),
            f"<h3>Compute multipliers against {html.escape(found.baseline)}</h3>",
            f"<p>The compute {html.escape(found.baseline)} needs on its fitted curve to reach a design's fitted loss "
            "at that design's compute, divided by that compute (above 1: the design is worth more compute than it "
            f"spends); the steps-to-target ratio is {html.escape(steps_ratio_text(fit))}.</p>",
            _table(multipliers_table(fit), "multipliers")]
