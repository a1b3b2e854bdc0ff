"""The papers' figures, re-drawn from a results directory (seaborn style, matplotlib Agg, no pyplot state).

- learning curves with seed confidence bands;
- the degradation plot — final training error vs depth (He et al. 2015, "Deep Residual Learning for
  Image Recognition", Fig. 1 and 6; Srivastava et al. 2015, "Training Very Deep Networks", Fig. 1);
- gradient norm per layer at initialisation, one panel per sublayer kind (attention, feed-forward, ...), of
  the weight matrices where recorded (Xiong et al. 2020, "On Layer Normalization in the Transformer
  Architecture", Fig. 3);
- throughput and peak memory vs depth, and accuracy vs throughput with the Pareto front;
- Post-LN vs Pre-LN loss curves with and without learning-rate warm-up (Xiong et al. 2020, Fig. 2).

Every mean is over seeds with a Student-t 95% CI (the rule of :mod:`bench.analysis.stats`), clipped to the
metric's valid range (:data:`bench.reports.plotdata.DOMAINS`). A series is a :func:`variant_key`, read from the
registry's metadata, never from the spelling of a name.

How the figures encode what:

- **Colour = variant, and nothing else.** :func:`palette` maps a study's sorted variant list to colours once
  (tab10, then seaborn's "dark" for the 11th to 20th); :func:`make_all` passes that one mapping to every figure,
  so a variant has the same colour in every figure of the study and two variants never share one.
- **Line style (and marker) = the rest of the configuration**: depth, and every configuration field that differs
  between the runs and that no axis shows (steps, learning rate, init ...:
  :func:`bench.reports.plotdata.config_labels`).
- **One legend per figure, below the axes**, so it covers neither data nor a title; long suptitles wrap.
- **Spike-robust y-axes**: the limits follow the bulk of the plotted values (:func:`robust_limits`); a value far
  outside it (a loss spike of 1e10) is drawn as a triangle on the edge and counted in the axis label.

Figures are :class:`matplotlib.figure.Figure` objects: nothing leaks into pyplot.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator
from matplotlib.transforms import offset_copy

from bench.analysis.stats import machines_of, several_machines
from bench.reports.plotdata import (
    Frames,
    curves_frame,
    domain,
    grad_norm_init_data,
    is_ln_transformer,
    load_frames,
    mean_ci,
    one_task,
    probes_frame,
    variant_key,
    with_key,
)
from bench.runs.names import file_name, slug

__all__ = [
    "Colour", "Frames", "curves_frame", "grad_norm_init_data", "is_ln_transformer", "line_styles", "load_frames",
    "make_all", "palette", "palette_of", "pareto_front", "plot_cost", "plot_degradation", "plot_grad_norm_init",
    "plot_learning_curves", "plot_loss_vs_time", "plot_pareto", "plot_warmup", "probes_frame", "robust_limits",
    "variant_key",
]  # fmt: skip

Colour = tuple[float, float, float]
# Two qualitative palettes of well-separated colours: tab10 first, then seaborn's "dark" (the same ten hues, darker):
# the smallest CIE76 distance between any two of the 20 is 17 (tested; 2.3 is a just-noticeable difference).
# Beyond 20 variants, evenly spaced husl hues: distinct, but nearer each other.
_PALETTES: tuple[Colour, ...] = tuple(map(tuple, [*sns.color_palette("tab10"), *sns.color_palette("dark")]))  # type: ignore[arg-type]
_LINESTYLES: tuple[Any, ...] = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)))
_MARKERS: tuple[str | None, ...] = (None, "o", "s", "^", "D", "v", "P", "X")  # a second axis of style past 6 lines
_METRIC_LABELS = {
    ("train", "loss"): "training loss (cross-entropy, nats)",
    ("eval", "val_acc"): "validation accuracy (fraction)",
    ("eval", "val_loss"): "validation loss (cross-entropy, nats)",
    ("eval", "train_acc"): "training accuracy (fraction)",
    ("eval", "bpc"): "validation bits per character (bits)",
    ("eval", "ppl"): "validation perplexity (exp nats)",
}
_LOG_METRICS = ("loss", "val_loss", "ppl", "grad_norm", "weight_grad_norm")  # positive, spanning decades: log y
_DODGE_PT = 4.0  # horizontal nudge between neighbouring error-bar series, in points
_FRACTION_LIMITS = (-0.02, 1.02)  # y range of a [0, 1] metric: its whole domain and a sliver of margin
# Spike-robust limits (robust_limits): the 1st-99th percentile of the drawn values, widened by FENCE times that
# range on each side; a value beyond is off-scale. Fewer than _ROBUST_MIN values: nothing is called off-scale.
_QUANTILES = (0.01, 0.99)
_FENCE = 1.0
_ROBUST_MIN = 20
_MARGIN = 0.05  # of the range, either side, as matplotlib's autoscale leaves
_OFF_SCALE = "_off-scale"  # label of the edge markers of off-scale points (underscore: not in a legend)
CLIP_NOTE = "95% t-CI clipped to the metric's range"
_GRAD_LABELS = {
    "weight_grad_norm": "gradient L2 norm of the weight matrices (Linear/Conv)",
    "grad_norm": "gradient L2 norm of all the unit's parameters",
}
_KIND_TITLES = {"attn": "attention sublayer", "ffn": "feed-forward sublayer", "mlp": "MLP layer",
                "conv": "convolutional unit", "": "residual unit"}  # fmt: skip


def palette(variants: Iterable[str]) -> dict[str, Colour]:
    """``{variant: colour}`` for one study: its distinct variants (series keys, :func:`variant_key`), sorted, take
    the colours of :data:`_PALETTES` in turn (evenly spaced husl hues past 20). Built once per study
    (:func:`make_all`) and passed to each figure, so a variant has one colour in all of them and no two variants
    share one."""
    names = sorted({str(v) for v in variants})
    extra = len(names) - len(_PALETTES)
    colours = [*_PALETTES, *(tuple(c) for c in sns.color_palette("husl", extra))] if extra > 0 else list(_PALETTES)
    return dict(zip(names, colours, strict=False))  # type: ignore[arg-type]


def palette_of(*frames: pd.DataFrame) -> dict[str, Colour]:
    """:func:`palette` of the variant series of every row of ``frames`` (any task): what a figure drawn on its own
    uses when it is not given the study's mapping."""
    return palette(s for df in frames if len(df) for s in with_key(df)["series"])


def _natural(text: str) -> list[Any]:
    """Sort key reading the numbers in ``text`` as numbers: ``depth 20`` before ``depth 110``."""
    return [float(p) if i % 2 else p for i, p in enumerate(re.split(r"(\d+(?:\.\d+)?)", text))]


def line_styles(styles: Iterable[str]) -> dict[str, tuple[Any, str | None]]:
    """``{style label: (line style, marker)}``, the first (naturally sorted: shallowest depth) solid and without
    marker; past six line styles a marker tells them apart. One mapping per figure, so panels and legend agree."""
    names = sorted({str(s) for s in styles}, key=_natural)
    n = len(_LINESTYLES)
    return {s: (_LINESTYLES[i % n], _MARKERS[(i // n) % len(_MARKERS)]) for i, s in enumerate(names)}


def _series(
    ax: Axes, stats: pd.DataFrame, x: str, colours: Mapping[str, Colour], styles: Mapping[str, tuple[Any, Any]],
    band: bool,
) -> None:
    """One mean line per series and style, coloured by its variant series, styled by the rest of its
    configuration, with its clipped CI as a band or error bars.

    Line labels are ``series`` or ``series (style)`` (``plain (depth 20)``): they name the line for tests and
    readers of the artist tree; the figure legend is built separately from one handle per colour and per style."""
    grouped = list(stats.groupby(["series", "style"], sort=True))
    for i, ((series, style), s) in enumerate(grouped):
        colour = colours[str(series)]
        ls, marker = styles.get(str(style), ("-", None))
        label = f"{series} ({style})" if style else str(series)
        xs, mean = s[x].to_numpy(dtype=float), s["mean"].to_numpy(dtype=float)
        lo, hi = s["lo"].to_numpy(dtype=float), s["hi"].to_numpy(dtype=float)
        if band:
            every = max(1, len(xs) // 8)  # a marker (a style past the sixth) every ~1/8 of the line, not every point
            ax.plot(xs, mean, color=colour, linestyle=ls, marker=marker, markersize=4, markevery=every, label=label)
            ax.fill_between(xs, lo, hi, color=colour, alpha=0.2, linewidth=0)
            continue
        # Series sharing an x are nudged apart on screen (the data stay exact) so no error bar hides another.
        shift = offset_copy(ax.transData, fig=ax.figure, x=_DODGE_PT * (i - (len(grouped) - 1) / 2), units="points")  # type: ignore[arg-type]
        ax.plot(xs, mean, color=colour, linestyle=ls, marker=marker or "o", label=label, transform=shift)
        yerr = np.vstack([mean - lo, hi - mean])
        ax.errorbar(xs, mean, yerr=yerr, fmt="none", ecolor=colour, capsize=3, transform=shift)
        # Artists off transData do not grow the data limits: add the (unshifted) bars by hand.
        pts = np.column_stack([np.r_[xs, xs, xs], np.r_[mean, lo, hi]])
        ax.update_datalim(pts[np.isfinite(pts).all(axis=1)])
    ax.autoscale_view()


def _legend(fig: Figure, colours: Mapping[str, Colour], series: Iterable[str],
            styles: Mapping[str, tuple[Any, Any]] | None = None) -> None:
    """One legend for the whole figure, below the axes (constrained layout makes room for it), so it covers
    neither data nor a title: a line per variant drawn (its colour), then a grey line per style when more than one."""
    handles = [Line2D([], [], color=colours[k], linewidth=2, label=k) for k in sorted(set(map(str, series)))]
    if styles and len(styles) > 1:
        handles += [Line2D([], [], color="0.35", linestyle=ls, marker=m, label=s) for s, (ls, m) in styles.items()]
    fig.legend(handles=handles, loc="outside lower center", ncols=_legend_columns(fig, handles), fontsize="small",
               frameon=False, title="colour: variant" + ("; line: configuration" if styles and len(styles) > 1 else ""))


def _legend_columns(fig: Figure, handles: list[Line2D]) -> int:
    """As many legend columns as fit the figure's width: an entry is its longest label at ~0.6 em a character of
    'small' text (10 pt x 0.833), plus the handle and the padding (~4 em)."""
    em = 10 * 0.833 / 72  # inches
    entry = (max(len(str(h.get_label())) for h in handles) * 0.6 + 4) * em
    return max(1, min(len(handles), int(0.95 * fig.get_figwidth() / entry)))


def _suptitle(fig: Figure, text: str) -> None:
    """A figure title wrapped to the figure's width, so it never runs past the edges."""
    chars = int(fig.get_figwidth() * 72 / (0.6 * 12))  # 'large' (12 pt) characters average ~0.6 em
    fig.suptitle(textwrap.fill(text, chars))


def _drawn_ys(ax: Axes) -> np.ndarray:
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


def _mark_off_scale(ax: Axes) -> int:
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


def _limit(ax: Axes, metric: str, log: bool = False) -> None:
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
    ys = _drawn_ys(ax)
    limits = robust_limits(ys, log)
    if limits is not None:
        ax.set_ylim(*limits)
        n = _mark_off_scale(ax)
        if n:
            ax.set_ylabel(f"{ax.get_ylabel()}\n({n} off-scale: ▲/▼ on the edge)")
    elif log:
        ys = ys[np.isfinite(ys) & (ys > 0)]
        if ys.size:
            ax.set_ylim(bottom=ys.min() / 2)


def _figure(ncols: int = 1) -> tuple[Figure, list[Axes]]:
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(6.4 * ncols + 1.6, 4.8), layout="constrained")
        axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def plot_learning_curves(curves: pd.DataFrame, task: str | None = None, val_metric: str = "val_acc",
                         colours: Mapping[str, Colour] | None = None) -> Figure:
    """Training loss (log y) and a validation metric vs step, mean over seeds with clipped 95% t-CI bands.
    ``colours``: the study's :func:`palette` (default: :func:`palette_of` ``curves``)."""
    colours = colours or palette_of(curves)
    df, task = one_task(curves, task)
    df = with_key(df)
    styles = line_styles(df["style"])
    fig, (left, right) = _figure(2)
    for ax, split, metric in ((left, "train", "loss"), (right, "eval", val_metric)):
        part = df[(df["split"] == split) & (df["metric"] == metric)]
        _series(ax, mean_ci(part, ["series", "style"], "step", "value", metric), "step", colours, styles, True)
        ylabel = _METRIC_LABELS.get((split, metric), f"{split} {metric}")
        ax.set(xlabel="step (optimizer updates)", ylabel=ylabel, title=f"{ylabel.split(' (')[0]} — {task}")
        _limit(ax, metric, log=metric in _LOG_METRICS)
    _legend(fig, colours, df["series"], styles)
    _suptitle(fig, f"Learning curves on {task}: mean over seeds, band = {CLIP_NOTE}; gaps = non-finite loss")
    return fig


def plot_loss_vs_time(curves: pd.DataFrame, task: str | None = None, metric: str = "val_loss",
                      colours: Mapping[str, Colour] | None = None) -> Figure:
    """Validation loss (log y) against training time: one point per evaluation, at the mean over seeds of the
    time trained up to it (x) and the mean loss (y, clipped 95% t-CI band). What a design buys per second of
    this machine, where a step that costs more counts against it."""
    colours = colours or palette_of(curves)
    df, task = one_task(curves, task)
    part = with_key(df[(df["split"] == "eval") & (df["metric"] == metric)])
    styles = line_styles(part["style"])
    stats = mean_ci(part, ["series", "style"], "step", "value", metric)
    when = part.groupby(["series", "style", "step"])["train_time_s"].mean().rename("time_s").reset_index()
    stats = stats.merge(when, on=["series", "style", "step"]).sort_values(["series", "style", "time_s"])
    fig, (ax,) = _figure()
    _series(ax, stats, "time_s", colours, styles, True)
    ylabel = _METRIC_LABELS.get(("eval", metric), f"eval {metric}")
    ax.set(xlabel="training time (s, timed steps only; mean over seeds)", ylabel=ylabel,
           title=f"{ylabel.split(' (')[0]} vs wall-clock — {task}\nmean over seeds, band = {CLIP_NOTE}")
    _limit(ax, metric, log=metric in _LOG_METRICS)
    _legend(fig, colours, part["series"], styles)
    return fig


def _config_style(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` (:func:`with_key`'d) with ``style`` the configuration label alone: for figures whose x is depth."""
    return df.assign(style=df["config"].fillna("").astype(str) if "config" in df.columns else "")


def plot_degradation(leaderboard: pd.DataFrame, task: str | None = None,
                     colours: Mapping[str, Colour] | None = None) -> Figure:
    """Final training error (1 - final train accuracy) vs depth, one line per variant, clipped 95% CI bars."""
    colours = colours or palette_of(leaderboard)
    df, task = one_task(leaderboard[leaderboard["status"] == "ok"], task)
    df = _config_style(with_key(df)).assign(train_error=1.0 - pd.to_numeric(df["final_train_acc"], errors="coerce"))
    styles = line_styles(df["style"])
    fig, (ax,) = _figure()
    _series(ax, mean_ci(df, ["series", "style"], "depth", "train_error"), "depth", colours, styles, False)
    ax.set(
        xlabel="depth (layers)",
        ylabel="final training error (1 − train accuracy)",
        title=f"Degradation: training error vs depth — {task}\nmean over seeds, bars = {CLIP_NOTE} [0, 1]",
    )
    _limit(ax, "train_error")
    _legend(fig, colours, df["series"], styles)
    return fig


def plot_grad_norm_init(probes: pd.DataFrame, task: str | None = None,
                        colours: Mapping[str, Colour] | None = None) -> Figure:
    """Gradient norm per unit at step 0 vs its index within its kind (log y): one panel per sublayer kind
    (attention, feed-forward, ...), one line per variant and depth. Plots Xiong et al.'s weight-matrix norm
    (``weight_grad_norm``) when recorded, else the whole-unit ``grad_norm`` (:func:`grad_norm_init_data`)."""
    colours = colours or palette_of(probes)
    stats, metric, task = grad_norm_init_data(probes, task)
    kinds = sorted(stats["kind"].unique(), key=lambda k: (k == "", k))  # rows without a kind: last panel
    styles = line_styles(stats["style"])
    fig, axes = _figure(len(kinds))
    ylabel = _GRAD_LABELS[metric]
    for ax, kind in zip(axes, kinds, strict=True):
        _series(ax, stats[stats["kind"] == kind], "index", colours, styles, False)
        ax.set(
            xlabel=f"{_KIND_TITLES.get(kind, f'{kind} units')} index (input → output)",
            ylabel=ylabel,
            title=_KIND_TITLES.get(kind, f"{kind} units").capitalize(),
        )
        _limit(ax, metric, log=True)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # units are whole
    _legend(fig, colours, stats["series"], styles)
    _suptitle(fig, f"{ylabel.split(' (')[0]} at step 0 — {task}: mean over seeds, bars = {CLIP_NOTE} (≥ 0)")
    return fig


def _throughput_column(df: pd.DataFrame) -> tuple[str, str]:
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


def plot_cost(leaderboard: pd.DataFrame, task: str | None = None,
              colours: Mapping[str, Colour] | None = None) -> Figure:
    """Two panels: training throughput vs depth and peak memory vs depth, one line per variant (and machine)."""
    colours = colours or palette_of(leaderboard)
    df, task = one_task(leaderboard[leaderboard["status"] == "ok"], task)
    df = per_machine(_config_style(with_key(df)))
    styles = line_styles(df["style"])
    column, unit = _throughput_column(df)
    fig, axes = _figure(2)
    for ax, col, ylabel in zip(
        axes, (column, "peak_mem_mb"), (f"training throughput ({unit})", "peak memory (MB)"), strict=True
    ):
        _series(ax, mean_ci(df, ["series", "style"], "depth", col), "depth", colours, styles, False)
        ax.set(xlabel="depth (layers)", ylabel=ylabel, title=f"{ylabel.split(' (')[0]} vs depth — {task}")
        _limit(ax, col)
    _legend(fig, colours, df["series"], styles)
    _suptitle(fig, f"Cost vs depth on {task}: mean over seeds, bars = {CLIP_NOTE} (≥ 0)")
    return fig


def pareto_front(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Mask of the points no other point beats on both axes (higher x and higher y are better)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ge = (x[None, :] >= x[:, None]) & (y[None, :] >= y[:, None])
    gt = (x[None, :] > x[:, None]) | (y[None, :] > y[:, None])
    return np.asarray(~(ge & gt).any(axis=1))


_PARETO_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def plot_pareto(leaderboard: pd.DataFrame, task: str | None = None, metric: str = "final_val_acc",
                colours: Mapping[str, Colour] | None = None) -> Figure:
    """Accuracy vs throughput, one point per (variant, configuration, depth) (seed means; and machine), with the
    Pareto front; colour = variant, marker = configuration, the label of a point its depth."""
    colours = colours or palette_of(leaderboard)
    df, task = one_task(leaderboard[leaderboard["status"] == "ok"], task)
    df = per_machine(_config_style(with_key(df)))
    column, unit = _throughput_column(df)
    pts = df.groupby(["series", "style", "depth"])[[column, metric]].mean(numeric_only=True).dropna().reset_index()
    configs = sorted(set(pts["style"]), key=_natural)
    markers = {s: _PARETO_MARKERS[i % len(_PARETO_MARKERS)] for i, s in enumerate(configs)}
    fig, (ax,) = _figure()
    for (series, style), s in pts.groupby(["series", "style"]):
        label = f"{series} ({style})" if style else str(series)
        ax.plot(s[column], s[metric], linestyle="", marker=markers[style], color=colours[str(series)], label=label)
        for row in s.itertuples(index=False):
            ax.annotate(
                str(row.depth),
                (getattr(row, column), getattr(row, metric)),
                fontsize="x-small",
                xytext=(3, 3),
                textcoords="offset points",
            )
    front = pts[pareto_front(pts[column].to_numpy(), pts[metric].to_numpy())].sort_values(column)
    ax.plot(front[column], front[metric], color="black", linestyle="--", linewidth=1, label="Pareto front")
    ax.set(
        xlabel=f"training throughput ({unit})",
        ylabel=metric.replace("_", " ") + " (fraction)",
        title=f"Accuracy vs throughput — {task} (seed means; labels: depth)",
    )
    _limit(ax, metric)
    handles = [Line2D([], [], color=colours[k], linestyle="", marker="o", label=k) for k in sorted(set(pts["series"]))]
    if len(markers) > 1:
        handles += [Line2D([], [], color="0.35", linestyle="", marker=m, label=s) for s, m in markers.items()]
    handles.append(Line2D([], [], color="black", linestyle="--", linewidth=1, label="Pareto front"))
    fig.legend(handles=handles, loc="outside lower center", ncols=_legend_columns(fig, handles), fontsize="small",
               frameon=False, title="colour: variant" + ("; marker: configuration" if len(markers) > 1 else ""))
    return fig


def plot_warmup(curves: pd.DataFrame, task: str | None = None,
                colours: Mapping[str, Colour] | None = None) -> Figure:
    """Post-LN vs Pre-LN (transformer family): training loss (log y) with (solid) and without (dashed) warm-up."""
    colours = colours or palette_of(curves)
    tf = (curves["family"] == "transformer") | curves["variant"].map(lambda v: is_ln_transformer(str(v)) is not None)
    df, task = one_task(curves[tf & (curves["split"] == "train") & (curves["metric"] == "loss")], task)
    df = with_key(df).assign(warmup=df["warmup_steps"].fillna(0).astype(int))
    stats = mean_ci(df, ["series", "style", "warmup"], "step", "value", "loss")
    several = stats.groupby("series")["style"].nunique() > 1
    fig, (ax,) = _figure()
    for (series, style, warmup), s in stats.groupby(["series", "style", "warmup"]):
        name = f"{series} ({style})" if several[series] and style else str(series)
        label = f"{name}, warm-up {warmup} steps" if warmup > 0 else f"{name}, no warm-up"
        colour, xs = colours[str(series)], s["step"].to_numpy(dtype=float)
        ax.plot(xs, s["mean"].to_numpy(), color=colour, linestyle="-" if warmup > 0 else "--", label=label)
        ax.fill_between(xs, s["lo"].to_numpy(), s["hi"].to_numpy(), color=colour, alpha=0.2, linewidth=0)
    ax.set(
        xlabel="step (optimizer updates)",
        ylabel="training loss (cross-entropy, nats)",
        title=f"Post-LN vs Pre-LN, with and without warm-up — {task}\nmean over seeds, band = {CLIP_NOTE} (≥ 0)",
    )
    _limit(ax, "loss", log=True)
    _legend(fig, colours, stats["series"], {"warm-up on": ("-", None), "warm-up off": ("--", None)})
    return fig


def make_all(results_dir: str | Path, study: str | None = None) -> list[Path]:
    """Write every figure there is data for to ``results_dir/plots/`` (``plots/<study>/`` for one study), every
    one with the colours of one :func:`palette` of the runs' variants."""
    frames = load_frames(results_dir, study)
    out = Path(results_dir) / "plots" / (file_name(study, "study") if study else "")
    board, curves, probes = frames.leaderboard, frames.curves, frames.probes
    colours = palette_of(board, curves, probes)
    ok = board[board["status"] == "ok"]
    jobs: list[tuple[str, Any]] = []
    for task in sorted(board["task"].dropna().unique()):
        t_ok, t_curves = ok[ok["task"] == task], curves[curves["task"] == task]
        if len(t_curves):
            jobs.append((f"curves_{task}", lambda t=task: plot_learning_curves(curves, t, colours=colours)))
        timed = t_curves[(t_curves["metric"] == "val_loss") & t_curves["train_time_s"].notna()]
        if len(timed):
            jobs.append((f"loss_vs_time_{task}", lambda t=task: plot_loss_vs_time(curves, t, colours=colours)))
        with_acc = with_key(t_ok[t_ok["final_train_acc"].notna()])
        if len(with_acc) and (with_acc.groupby("key")["depth"].nunique() > 1).any():
            jobs.append((f"degradation_{task}", lambda t=task: plot_degradation(board, t, colours)))
        grads = probes["metric"].isin(("grad_norm", "weight_grad_norm"))
        if ((probes["task"] == task) & (probes["step"] == 0) & grads).any():
            jobs.append((f"grad_norm_init_{task}", lambda t=task: plot_grad_norm_init(probes, t, colours)))
        if t_ok[["train_samples_per_s", "peak_mem_mb"]].notna().any().any():
            jobs.append((f"cost_{task}", lambda t=task: plot_cost(board, t, colours)))
        if (t_ok["final_val_acc"].notna() & t_ok["train_samples_per_s"].notna()).any():
            jobs.append((f"pareto_{task}", lambda t=task: plot_pareto(board, t, colours=colours)))
        ln = board[(board["task"] == task) & board["variant"].map(lambda v: is_ln_transformer(str(v)) is not None)]
        if ln["warmup_steps"].fillna(0).gt(0).nunique() == 2 and len(t_curves):
            jobs.append((f"warmup_{task}", lambda t=task: plot_warmup(curves, t, colours)))
    paths = []
    for name, make in jobs:
        path = out / f"{slug(name)}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        make().savefig(path, dpi=120, bbox_inches="tight")  # whatever the layout left outside the figure
        paths.append(path)
    return paths
