"""Curves of many designs, a handful per panel: a study of twenty designs at two depths drawn on one axis is a cloud
of bands, not a comparison.

Where a curve figure would draw more than :data:`MAX_LINES` lines on one axis, its lines are faceted: one row of
panels per configuration label (depth, ...), and the designs split across the columns, at most :data:`MAX_LINES` a
panel, each panel with the baseline (the variant the study's claims compare against) so that every design is seen
against it. Each row shares its y range. Colours stay the study's (a variant has one colour in every panel). A panel
none of whose designs ran in its row's configuration is left blank (:func:`bench.reports.drawing.blank`): an empty
axis with ticks says nothing, and each costs as much to lay out and draw as a full panel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd
from matplotlib.figure import Figure

from bench.reports.drawing import (
    blank,
    figure_grid,
    fixed_title_y,
    legend,
    limit,
    natural,
    series_lines,
    suptitle,
)
from bench.reports.plotdata import Colour

MAX_LINES = 6  # lines (designs x configurations) one axis may hold before a figure is faceted


def crowded(stats: pd.DataFrame) -> bool:
    """Whether ``stats`` (one row per series, style and x) would draw more than :data:`MAX_LINES` lines."""
    return len(stats[["series", "style"]].drop_duplicates()) > MAX_LINES


def panel_groups(series: Sequence[str], baseline: str | None, max_lines: int = MAX_LINES) -> list[list[str]]:
    """``series`` split into panels of at most ``max_lines``, each led by ``baseline`` where it is one of them."""
    names = sorted(dict.fromkeys(map(str, series)))
    has_base = baseline in names
    others = [s for s in names if s != baseline]
    per = max(1, max_lines - has_base)
    chunks = [others[i:i + per] for i in range(0, len(others), per)] or [[]]
    return [[str(baseline), *c] if has_base else c for c in chunks]


@dataclass(frozen=True)
class Row:
    """One row of panels: the statistics of one metric (:func:`bench.analysis.stats.mean_ci` rows, with ``series``
    and ``style``) drawn against ``x``."""

    stats: pd.DataFrame
    x: str
    xlabel: str
    ylabel: str
    metric: str
    log: bool


def faceted(rows: Sequence[Row], colours: Mapping[str, Colour], baseline: str | None, title: str) -> Figure:
    """A grid of panels: each :class:`Row` once per configuration label (its ``style``), the designs split across
    the columns (:func:`panel_groups`), bands drawn as in the unfaceted figures."""
    series = sorted({str(s) for r in rows for s in r.stats["series"]})
    groups = panel_groups(series, baseline)
    split = [(r, style) for r in rows for style in sorted(set(map(str, r.stats["style"])), key=natural)]
    fig, grid = figure_grid(len(split), len(groups), width=3.8, height=2.9)
    for (row, style), axes in zip(split, grid, strict=True):
        part = row.stats[row.stats["style"].astype(str) == style]
        for ax, group in zip(axes, groups, strict=True):
            series_lines(ax, part[part["series"].isin(group)], row.x, colours, {style: ("-", None)}, True,
                         log=row.log)
            ax.set_title(", ".join(g for g in group if g != baseline) or str(baseline), fontsize="small",
                         y=fixed_title_y(row.log))
            ax.set_xlabel(row.xlabel, fontsize="small")
            limit(ax, row.metric, log=row.log)
        axes[0].set_ylabel("\n".join(filter(None, [row.ylabel, style])), fontsize="small")
        drawn = [ax.get_ylim() for ax in axes if ax.has_data()]
        low, high = min(lo for lo, _ in drawn), max(hi for _, hi in drawn)
        for ax in axes if drawn and (low > 0 or not row.log) else ():  # one y range a row: its panels compare
            ax.set_ylim(low, high)
        for ax in axes:
            if not ax.has_data():
                blank(ax)  # the row's label (its first panel's y label) stays
    legend(fig, colours, series)
    suptitle(fig, title + (f"; each panel with {baseline}, the baseline" if baseline in series else ""))
    return fig
