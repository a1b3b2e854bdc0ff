"""The forest plot a study with many designs leads with: each compared design's difference from its baseline, with
the interval its verdict read, per configuration (depth), the margin drawn.

The rows are the study's compare claims on one metric that compare designs (the variant, or an axis: norm,
placement, ...; not a depth or a learning rate), when there are at least :data:`MIN_ROWS` of them: the verdicts of
:mod:`bench.analysis.claims` (paired by seed where the runs pair, Welch's otherwise; under ``--until-decided`` the
looks' level). The panels are the contexts the claims were judged in (``depth=6``, ``depth=24``). A row's point is
the difference ``b − a``, its bar the interval, its colour the design's (the study's palette), a filled point a
decided verdict and an open one an inconclusive verdict; a verdict without an interval (a group whose every run
failed) is its words alone. The solid line is no difference and the dashed tick on each row its claim's margin (−m
for ``less``, +m for ``greater``, ±m for ``similar``). Nothing here reads a variant's name.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from bench.analysis.claims import AXES, Result, evaluate_claims, parse_claims
from bench.analysis.sequential import Looks, read_looks
from bench.analysis.studyfile import NoStudy, find_study, read_study_file
from bench.reports.plotdata import Colour, palette_of
from bench.runs.reading import remembered

MIN_ROWS = 3  # designs compared on one metric below which a study gets no forest plot
DESIGN_FIELDS = ("variant", *AXES)  # a claim that compares these compares designs (not depths, rates, ...)
_MARGIN_SIDES = {"less": (-1,), "not_less": (-1,), "greater": (1,), "not_greater": (1,), "similar": (-1, 1)}
_WORDS = {"agrees": "agrees", "disagrees": "DISAGREES", "inconclusive": "inconclusive"}


def study_results(root: Path, study: str, board: pd.DataFrame, probes: pd.DataFrame,
                  runs: Sequence[Mapping[str, Any]]) -> tuple[Path | None, list[Result], Looks | None]:
    """The study file of ``study``'s runs (None without one), its leaderboard claims' verdicts on its runs of
    ``board`` (read at the level of the looks it was run under with ``--until-decided``) and those looks. A study
    file that is there but cannot be read is an error (ValueError), never a report without its claims."""
    try:
        path: Path | None = find_study(study, root)
    except NoStudy:
        return None, [], None
    assert path is not None
    claims = [c for c in parse_claims(read_study_file(path).get("claims", []), str(path)) if c.table == "leaderboard"]
    looks = read_looks(root, study)
    if not claims:
        return path, [], looks
    rows = board[board["study"] == study]
    chosen = probes[probes["run_id"].isin(rows["run_id"])] if len(probes) else probes
    # Evaluated once per command (the report's claims section, its forest plots and the site read the same verdicts)
    key = ("claims", str(root.resolve()), study, tuple(sorted(map(str, rows["run_id"]))), tuple(rows.columns),
           len(chosen))
    results = remembered(key, lambda: evaluate_claims(claims, rows, chosen, runs, looks.level if looks else 0.95))
    return path, results, looks


def forest_data(results: Sequence[Result]) -> pd.DataFrame:
    """One row per compare verdict of two groups that ran: ``metric, claim, design, baseline, context, diff, low,
    high, margin, expect, verdict, test, n, level``; ``design`` and ``baseline`` are the compared groups' values;
    ``diff``, ``low`` and ``high`` are NaN where there is no interval (a group whose every run failed)."""
    rows = []
    for r in results:
        c = r.claim
        if c.kind != "compare" or c.compare not in DESIGN_FIELDS or not r.groups or r.note.startswith("no runs with"):
            continue  # not a comparison of designs, or one of its groups never ran here
        base, design = (g.label.split("=", 1)[-1] for g in r.groups)
        rows.append({"metric": c.metric, "claim": c.id, "design": design, "baseline": base,
                     "context": r.context or "all", "diff": r.diff, "low": r.diff - r.spread,
                     "high": r.diff + r.spread, "margin": r.threshold, "expect": c.expect, "verdict": r.verdict,
                     "test": r.test, "n": r.compared, "level": r.level})
    return pd.DataFrame(rows, columns=["metric", "claim", "design", "baseline", "context", "diff", "low", "high",
                                       "margin", "expect", "verdict", "test", "n", "level"])


def forest_metrics(data: pd.DataFrame) -> list[str]:
    """The metrics on which enough designs are compared for a forest plot (:data:`MIN_ROWS` claims), most first."""
    counts = data.drop_duplicates(["metric", "claim"])["metric"].value_counts()
    return [str(m) for m, n in counts.items() if n >= MIN_ROWS]


def plot_forest(data: pd.DataFrame, metric: str, colours: Mapping[str, Colour] | None = None) -> Figure:
    """The forest plot of ``data``'s (:func:`forest_data`) verdicts on ``metric`` (module docstring)."""
    data = data[data["metric"] == metric]
    contexts = list(dict.fromkeys(data["context"]))
    rows = list(dict.fromkeys(zip(data["claim"], data["design"], data["baseline"], strict=True)))
    colours = colours or palette_of(pd.DataFrame({"variant": [d for _, d, _ in rows]}))
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(3.6 * len(contexts) + 2.6, 0.34 * len(rows) + 1.9), layout="constrained")
        axes = fig.subplots(1, len(contexts), squeeze=False, sharey=True)[0]
    ys = {row: len(rows) - 1 - i for i, row in enumerate(rows)}  # the first claim on top
    for ax, context in zip(axes, contexts, strict=True):
        for r in data[data["context"] == context].itertuples(index=False):
            y, colour = ys[(r.claim, r.design, r.baseline)], colours.get(str(r.design), (0.3, 0.3, 0.3))
            if not (math.isfinite(r.low) and math.isfinite(r.high)):  # no interval: its verdict in words alone
                ax.annotate(f"{_WORDS[str(r.verdict)]} (no interval)", (1.0, y), xycoords=("axes fraction", "data"),
                            xytext=(4, 0), textcoords="offset points", va="center", fontsize="x-small")
                continue
            ax.plot([r.low, r.high], [y, y], color=colour, linewidth=2, solid_capstyle="butt",
                    label=f"{r.claim}: {context}")
            ax.plot([r.diff], [y], marker="o", markersize=6, color=colour,
                    markerfacecolor=colour if r.verdict != "inconclusive" else "white", label="_point")
            for side in _MARGIN_SIDES.get(str(r.expect), ()):
                ax.plot([side * r.margin] * 2, [y - 0.35, y + 0.35], color="0.25", linestyle="--", linewidth=1,
                        label="_margin")
            ax.annotate(_WORDS[str(r.verdict)], (1.0, y), xycoords=("axes fraction", "data"), xytext=(4, 0),
                        textcoords="offset points", va="center", fontsize="x-small")
        ax.axvline(0.0, color="black", linewidth=0.8, label="_zero")
        level = data["level"].iloc[0] if len(data) else 0.95
        ax.set(xlabel=f"difference, {100 * level:.4g}% CI", ylim=(-0.7, len(rows) - 0.3))
        ax.set_title(textwrap.fill(context, 40), fontsize="medium")
    axes[0].set_yticks(list(ys.values()), [f"{d} − {b}" for _, d, b in ys])
    tests = ", ".join(sorted(set(data["test"]) - {""}))
    fig.suptitle(f"Each design against its baseline, {metric}: difference and interval ({tests}; n seeds per "
                 "claim in the report); dashed: the claim's margin; open point: inconclusive", fontsize="medium")
    fig.legend(handles=[Line2D([], [], color="0.3", marker="o", linestyle="-", label="decided"),
                        Line2D([], [], color="0.3", marker="o", markerfacecolor="white", linestyle="-",
                               label="inconclusive"),
                        Line2D([], [], color="0.25", linestyle="--", label="margin")],
               loc="outside lower center", ncols=3, fontsize="small", frameon=False)
    return fig


def forest_figures(root: Path, study: str, board: pd.DataFrame, probes: pd.DataFrame,
                   runs: Sequence[Mapping[str, Any]], colours: Mapping[str, Colour]) -> list[tuple[str, Any]]:
    """``(file stem, make figure)`` of each forest plot a study's claims give (none below :data:`MIN_ROWS`)."""
    _, results, _ = study_results(root, study, board, probes, runs)
    data = forest_data(results)
    return [(f"forest_{m}", lambda m=m: plot_forest(data, m, colours)) for m in forest_metrics(data)]


__all__ = ["forest_data", "forest_figures", "forest_metrics", "plot_forest", "study_results"]

