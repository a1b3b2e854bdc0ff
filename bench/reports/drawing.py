"""How resbench's figures draw: the shared encodings and axis rules of :mod:`bench.reports.plots` and the figure
modules beside it (line styles, legends below the axes, spike-robust y limits, the one-task and per-machine rules).

Colour is the variant (:func:`bench.reports.plotdata.palette`); line style and marker the rest of a configuration
(:func:`line_styles`); one legend per figure, below the axes (:func:`legend`); the y axis follows the bulk of the
values drawn and marks the rest on its edge (:func:`limit`, :func:`robust_limits`); every point at its x (no series
is nudged sideways: two identical models draw as one).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.axis import Axis, XAxis
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import NullLocator

from bench.analysis.stats import machines_of, several_machines
from bench.reports.plotdata import Colour, domain

_LINESTYLES: tuple[Any, ...] = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)))
_MARKERS: tuple[str | None, ...] = (None, "o", "s", "^", "D", "v", "P", "X")  # a second axis of style past 6 lines
METRIC_LABELS = {
    ("train", "loss"): "training loss (cross-entropy, nats)",
    ("eval", "val_acc"): "validation accuracy (fraction)",
    ("eval", "val_error"): "validation error (1 − accuracy)",
    ("eval", "val_loss"): "validation loss (cross-entropy, nats)",
    ("eval", "train_acc"): "training accuracy (fraction)",
    ("eval", "bpc"): "validation bits per character (bits)",
    ("eval", "ppl"): "validation perplexity (exp nats)",
}
LOG_METRICS = ("loss", "val_loss", "ppl", "grad_norm", "weight_grad_norm")  # positive, spanning decades: log y
_FRACTION_LIMITS = (-0.02, 1.02)  # y range of a [0, 1] metric: its whole domain and a sliver of margin
# Spike-robust limits (robust_limits): the 1st-99th percentile of the drawn values, widened by FENCE times that
# range on each side; a value beyond is off-scale. Fewer than _ROBUST_MIN values: nothing is called off-scale.
_QUANTILES = (0.01, 0.99)
_FENCE = 1.0
_ROBUST_MIN = 20
_MARGIN = 0.05  # of the range, either side, as matplotlib's autoscale leaves
_OFF_SCALE = "_off-scale"  # label of the edge markers of off-scale points (underscore: not in a legend)
CLIP_NOTE = "95% t-CI clipped to the metric's range"
LOG_BAND_NOTE = "on a log axis, the band's lower side is its upper side's factor below the mean"  # band_edges


def band_edges(mean: np.ndarray, lo: np.ndarray, hi: np.ndarray, log: bool) -> tuple[np.ndarray, np.ndarray]:
    """The edges a band is filled between: the interval ``[lo, hi]``; on a log axis ``[mean²/hi, hi]``, the upper
    side's factor mirrored below the mean. An interval of a positive quantity reaches far lower than its mean over
    few seeds (clipped at 0, on a log axis it would fill every decade below the curves); the same factor each side
    reads as the seeds' spread and stays near the curve."""
    if not log:
        return lo, hi
    with np.errstate(divide="ignore", invalid="ignore"):
        mirrored = mean * mean / hi
    return np.where(np.isfinite(mirrored) & (mirrored > 0), mirrored, lo), hi


def natural(text: str) -> list[Any]:
    """Sort key reading the numbers in ``text`` as numbers: ``depth 20`` before ``depth 110``."""
    return [float(p) if i % 2 else p for i, p in enumerate(re.split(r"(\d+(?:\.\d+)?)", text))]


def line_styles(styles: Iterable[str]) -> dict[str, tuple[Any, str | None]]:
    """``{style label: (line style, marker)}``, the first (naturally sorted: shallowest depth) solid and without
    marker; past six line styles a marker tells them apart. One mapping per figure, so panels and legend agree."""
    names = sorted({str(s) for s in styles}, key=natural)
    n = len(_LINESTYLES)
    return {s: (_LINESTYLES[i % n], _MARKERS[(i // n) % len(_MARKERS)]) for i, s in enumerate(names)}


def series_lines(
    ax: Axes, stats: pd.DataFrame, x: str, colours: Mapping[str, Colour], styles: Mapping[str, tuple[Any, Any]],
    band: bool, log: bool = False,
) -> None:
    """One mean line per series and style, coloured by its variant series, styled by the rest of its
    configuration, with its clipped CI as a band (on a ``log`` axis: :func:`band_edges`) or error bars.

    Line labels are ``series`` or ``series (style)`` (``plain (depth 20)``): they name the line for tests and
    readers of the artist tree; the figure legend is built separately from one handle per colour and per style."""
    for (series, style), s in stats.groupby(["series", "style"], sort=True):
        colour = colours[str(series)]
        ls, marker = styles.get(str(style), ("-", None))
        label = f"{series} ({style})" if style else str(series)
        xs, mean = s[x].to_numpy(dtype=float), s["mean"].to_numpy(dtype=float)
        lo, hi = s["lo"].to_numpy(dtype=float), s["hi"].to_numpy(dtype=float)
        if band:
            every = max(1, len(xs) // 8)  # a marker (a style past the sixth) every ~1/8 of the line, not every point
            ax.plot(xs, mean, color=colour, linestyle=ls, marker=marker, markersize=4, markevery=every, label=label)
            ax.fill_between(xs, *band_edges(mean, lo, hi, log), color=colour, alpha=0.2, linewidth=0)
            continue
        # Every point at its own x: series sharing an x overlap (identical values look identical; a depth is never
        # shifted), and an error bar is drawn only where the point has an interval (more than one value).
        ax.plot(xs, mean, color=colour, linestyle=ls, marker=marker or "o", label=label)
        has = np.isfinite(s["ci"].to_numpy(dtype=float)) if "ci" in s else np.ones(len(xs), dtype=bool)
        if has.any():
            yerr = np.vstack([mean[has] - lo[has], hi[has] - mean[has]])
            ax.errorbar(xs[has], mean[has], yerr=yerr, fmt="none", ecolor=colour, capsize=3, alpha=0.8)
    ax.autoscale_view()


def legend(fig: Figure, colours: Mapping[str, Colour], series: Iterable[str],
           styles: Mapping[str, tuple[Any, Any]] | None = None) -> None:
    """One legend for the whole figure, below the axes (constrained layout makes room for it), so it covers
    neither data nor a title: a line per variant drawn (its colour), then a grey line per style when more than one."""
    handles = [Line2D([], [], color=colours[k], linewidth=2, label=k) for k in sorted(set(map(str, series)))]
    if styles and len(styles) > 1:
        handles += [Line2D([], [], color="0.35", linestyle=ls, marker=m, label=s) for s, (ls, m) in styles.items()]
    fig.legend(handles=handles, loc="outside lower center", ncols=legend_columns(fig, handles), fontsize="small",
               frameon=False, title="colour: variant" + ("; line: configuration" if styles and len(styles) > 1 else ""))


def legend_columns(fig: Figure, handles: list[Line2D]) -> int:
    """As many legend columns as fit the figure's width: an entry is its longest label at ~0.6 em a character of
    'small' text (10 pt x 0.833), plus the handle and the padding (~4 em)."""
    em = 10 * 0.833 / 72  # inches
    entry = (max(len(str(h.get_label())) for h in handles) * 0.6 + 4) * em
    return max(1, min(len(handles), int(0.95 * fig.get_figwidth() / entry)))


def suptitle(fig: Figure, text: str) -> None:
    """A figure title wrapped to the figure's width, so it never runs past the edges."""
    chars = int(fig.get_figwidth() * 72 / (0.6 * 12))  # 'large' (12 pt) characters average ~0.6 em
    fig.suptitle(textwrap.fill(text, chars))


def drawn_ys(ax: Axes) -> np.ndarray:
    """Every y value drawn on ``ax``: lines (means, error-bar caps), CI bands and error bars."""
    parts = [np.asarray(ln.get_ydata(), dtype=float) for ln in ax.get_lines() if ln.get_label() != _OFF_SCALE]
    for c in ax.collections:
        if isinstance(c, PolyCollection):
            parts += [np.asarray(p.vertices, dtype=float)[:, 1] for p in c.get_paths()]
        elif isinstance(c, LineCollection):
            parts += [np.asarray(seg, dtype=float).reshape(-1, 2)[:, 1] for seg in c.get_segments()]
    return np.concatenate(parts) if parts else np.array([])


def robust_limits(ys: np.ndarray, log: bool = False) -> tuple[float, float] | None:
    """y limits that follow the bulk of ``ys`` and ignore spikes, or None when every value fits.

    On log10(y) for a log axis, else on y: the 1st and 99th percentiles (the second-smallest and second-largest
    value below 100 values), widened by once their distance on each side, fence the values; limits are the
    extreme values inside the fence, plus a 5% margin. With fewer than 20 finite values none is an outlier."""
    ys = np.asarray(ys, dtype=float)
    ys = ys[np.isfinite(ys) & (ys > 0)] if log else ys[np.isfinite(ys)]
    if ys.size < _ROBUST_MIN:
        return None
    t = np.log10(ys) if log else ys
    q_lo = float(np.quantile(t, _QUANTILES[0], method="higher"))
    q_hi = float(np.quantile(t, _QUANTILES[1], method="lower"))
    span = q_hi - q_lo or max(abs(q_hi), 1.0)
    inside = t[(t >= q_lo - _FENCE * span) & (t <= q_hi + _FENCE * span)]
    if inside.size == t.size:
        return None
    low, high = float(inside.min()), float(inside.max())
    pad = _MARGIN * ((high - low) or span)
    low, high = low - pad, high + pad
    return (10**low, 10**high) if log else (low, high)


def mark_off_scale(ax: Axes) -> int:
    """Triangles on the top (bottom) edge at the x of each mean beyond the y limits, in its line's colour; the
    number of such points."""
    low, high = ax.get_ylim()
    edge = ax.get_xaxis_transform()  # x in data, y in axes fraction
    count = 0
    for ln in [ln for ln in ax.get_lines() if not str(ln.get_label()).startswith("_")]:
        xs, ys = np.asarray(ln.get_xdata(), dtype=float), np.asarray(ln.get_ydata(), dtype=float)
        for where, marker, y in ((ys > high, "^", 1.0), (ys < low, "v", 0.0)):
            if where.any():
                ax.plot(xs[where], np.full(int(where.sum()), y), linestyle="", marker=marker, color=ln.get_color(),
                        clip_on=False, transform=edge, label=_OFF_SCALE)
                count += int(where.sum())
    return count


def limit(ax: Axes, metric: str, log: bool = False) -> None:
    """Keep a [0, 1] metric's axis within [-0.02, 1.02]. Any other axis follows :func:`robust_limits` of what is
    drawn: off-scale means are marked on the edge and counted in the y label. A log axis starts at most half the
    smallest positive value drawn, so a band clipped at 0 runs off the bottom instead of stretching the axis to
    1e-300."""
    if domain(metric) == (0.0, 1.0) and not log:
        low, high = ax.get_ylim()
        ax.set_ylim(max(low, _FRACTION_LIMITS[0]), min(high, _FRACTION_LIMITS[1]))
        return
    if log:
        ax.set_yscale("log")
    ys = drawn_ys(ax)
    limits = robust_limits(ys, log)
    if limits is not None:
        ax.set_ylim(*limits)
        n = mark_off_scale(ax)
        if n:
            ax.set_ylabel(f"{ax.get_ylabel()}\n({n} off-scale: ▲/▼ on the edge)")
    elif log:
        ys = ys[np.isfinite(ys) & (ys > 0)]
        if ys.size:
            ax.set_ylim(bottom=ys.min() / 2)


def fixed_title_y(log: bool) -> float | None:
    """The ``y`` to give ``set_title`` of a panel whose y axis is ``log``: 1.0, the height matplotlib's automatic
    placement gives a title unless the y axis's offset text ("1e6", "+1.2e3") or x tick labels on top would touch
    it. A log axis has no offset text and our x ticks are below, so the title lands where it would, and matplotlib
    skips the placement, which measures every tick label of the y axis again at each layout pass and draw (a
    quarter of a faceted figure's drawing). None (automatic) for a linear axis."""
    return 1.0 if log else None


def blank(ax: Axes) -> None:
    """``ax`` drawn as empty space: no frame, ticks, grid, title or x label; its y label (a row's label) stays."""
    ax.set_frame_on(False)
    ax.set_title("")
    ax.set_xlabel("")
    for axis in (ax.xaxis, ax.yaxis):  # no ticks: no labels or grid lines to lay out
        axis.set_major_locator(NullLocator())
        axis.set_minor_locator(NullLocator())


def measured_once(fig: Figure) -> None:
    """Settings that leave every pixel of ``fig`` where it is and spare matplotlib re-measuring, at each layout pass,
    each axis label placement and the saved figure's tight bounding box, what cannot change
    (:func:`spines_as_edges`, :func:`blank_minor_ticks_off`). Applied just before saving, when nothing more is drawn."""
    spines_as_edges(fig)
    blank_minor_ticks_off(fig)


def _sides(axis: Axis) -> tuple[str, str]:
    return ("bottom", "top") if isinstance(axis, XAxis) else ("left", "right")


def _draws_tick_marks(axis: Axis, which: tuple[Literal["major", "minor"], ...] = ("major", "minor")) -> bool:
    return any(axis.get_tick_params(which=w).get(s, True) for w in which for s in _sides(axis))


def spines_as_edges(fig: Figure) -> None:
    """Each spine of ``fig`` whose axis draws no tick marks (seaborn's whitegrid style draws none) detached from its
    axis, so that measuring it does not update the axis's ticks.

    ``Spine.get_window_extent`` is the spine's segment of the axes' edge, widened by the length of its axis's tick
    marks where they are drawn; to know, it updates every tick of the axis (locations, labels), at each layout pass,
    for the tight bounding box and at each placement of the axis label, a fifth of a save of a figure of many panels.
    With no tick marks the extent is the bare segment, which a detached spine (its ``axis`` None, as a spine
    starts) returns directly: the same numbers, so the same layout, and a spine's drawing does not read its axis.
    (Taking the spines out of the layout instead is not the same: a spine's end can lie a rounding error past the
    axes' box, and that moved a figure's panels and 30 of its pixels.)"""
    for ax in fig.axes:
        for spine in ax.spines.values():
            if spine.axis is not None and not _draws_tick_marks(spine.axis):
                spine.axis = None


def blank_minor_ticks_off(fig: Figure) -> None:
    """The labels of each axis's minor ticks turned off where those ticks draw nothing: no tick marks, no grid lines
    (seaborn's whitegrid style), and an empty label at every one for the axis's limits (a log axis spanning more
    than a decade labels only its decades, the major ticks), while a major tick in view has a label.

    matplotlib skips a group of ticks none of whose parts is on; otherwise it makes a tick (two lines, two labels) for
    each minor tick of a log axis and places and measures every one at each layout pass and draw. An empty label
    draws nothing, and its box is a point at the tick labels' inner edge, strictly inside the box of the axes, the
    labelled major ticks and the axis label beyond them: no pixel, position or bounding box changes."""
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if _draws_tick_marks(axis, ("minor",)) or axis.get_tick_params(which="minor").get("gridOn", True):
                continue
            low, high = sorted(axis.get_view_interval())
            major = [x for x in axis.get_majorticklocs() if low <= x <= high]
            minor = list(axis.get_minorticklocs())
            if (minor and not any(axis.get_minor_formatter().format_ticks(minor))
                    and any(axis.get_major_formatter().format_ticks(major))):
                axis.set_tick_params(which="minor", **{f"label{s}": False for s in _sides(axis)})


def figure(ncols: int = 1) -> tuple[Figure, list[Axes]]:
    """A figure of ``ncols`` panels side by side (seaborn's whitegrid, constrained layout)."""
    fig, grid = figure_grid(1, ncols)
    return fig, grid[0]


def figure_grid(nrows: int, ncols: int, width: float = 6.4, height: float = 4.8, sharey: Any = False
                ) -> tuple[Figure, list[list[Axes]]]:
    """A figure of ``nrows`` x ``ncols`` panels of ``width`` x ``height`` inches each."""
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(width * ncols + 1.6, height * nrows), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False, sharey=sharey)
    return fig, [list(row) for row in axes]


def config_style(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` (:func:`with_key`'d) with ``style`` the configuration label alone: for figures whose x is depth."""
    return df.assign(style=df["config"].fillna("").astype(str) if "config" in df.columns else "")


def throughput_column(df: pd.DataFrame) -> tuple[str, str]:
    tokens = pd.to_numeric(df["train_tokens_per_s"], errors="coerce")
    return (
        ("train_tokens_per_s", "tokens/s") if len(df) and tokens.notna().all() else ("train_samples_per_s", "samples/s")
    )


def per_machine(df: pd.DataFrame) -> pd.DataFrame:
    """Where ``df``'s runs were measured on several machines, each series' style names its machine (``depth=6 @
    9275ebfd``): a cost figure is never pooled across machines (:mod:`bench.analysis.stats`); colour stays the
    variant's."""
    if not several_machines(df):
        return df
    machine = machines_of(df)
    return df.assign(style=[f"{s} @ {m}" if s else f"@ {m}" for s, m in zip(df["style"], machine, strict=True)])

