"""The cost figures: throughput and peak memory vs depth, and a study's primary metric against throughput with the
Pareto front.

A sweep measures a model configuration's cost once and copies the figures into its other seeds' rows (the rows'
``cost_source``): a point is one measurement, not a mean over seeds, and its ``n`` says so. An error bar is drawn
only where a point has more than one measurement. A throughput measured on a busy machine is lower than the
machine's: each figure says how busy it was when its figures were measured (the run JSONs' ``measurements.load``:
the 1-minute load average and the share of the CPUs other processes used; runs recorded before that: unrecorded).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from bench.analysis.stats import MACHINE_KEY, domain, t_halfwidth, unbanded_machines, with_derived
from bench.reports.drawing import (
    CLIP_NOTE,
    config_style,
    figure,
    legend,
    legend_columns,
    limit,
    line_styles,
    natural,
    per_machine,
    series_lines,
    suptitle,
    throughput_column,
)
from bench.reports.plotdata import Colour, mean_ci, one_task, palette_of, with_key
from bench.runs.primary import primary

_PARETO_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def measured_once(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``df`` that each hold a measurement of their own: of the rows that share a ``cost_source`` (copies of
    one measurement), the first; every row without one."""
    if "cost_source" not in df.columns:
        return df
    source = df["cost_source"].astype(object)
    own = source.isna() | (source.astype(str) == "")
    return df[own | ~source.duplicated()]


def load_note(df: pd.DataFrame) -> str:
    """How busy the machine was when ``df``'s cost figures were measured: the range of the recorded 1-minute load
    averages (of how many CPUs) and of the share of the CPUs other processes used, or that it was not recorded."""
    if "load_1m" not in df.columns or df["load_1m"].isna().all():
        return "machine load when measured: not recorded"
    load, cpus = df["load_1m"].dropna(), df["load_cpus"].dropna()
    other = df["other_cpu"].dropna() if "other_cpu" in df.columns else pd.Series(dtype=float)
    text = f"machine load when measured: 1-min load average {_span(load, '.1f')}"
    text += f" on {int(cpus.max())} CPUs" if len(cpus) else ""
    return text + (f", other processes {_span(100 * other, '.0f')}% of the CPU time" if len(other) else "")


def _span(values: pd.Series, fmt: str) -> str:
    low, high = float(values.min()), float(values.max())
    return format(low, fmt) if format(low, fmt) == format(high, fmt) else f"{format(low, fmt)}-{format(high, fmt)}"


def _n_note(stats: pd.DataFrame) -> str:
    counts = sorted({int(n) for n in stats["count"]})
    what = "measurement" if counts == [1] else "measurements"
    return f"n = {counts[0] if len(counts) == 1 else f'{counts[0]}-{counts[-1]}'} {what} per point"


def plot_cost(leaderboard: pd.DataFrame, task: str | None = None,
              colours: Mapping[str, Colour] | None = None) -> Figure:
    """Two panels: training throughput vs depth and peak memory vs depth, one line per variant (and machine); each
    measurement counted once, bars only over more than one (module docstring)."""
    colours = colours or palette_of(leaderboard)
    df, task = one_task(leaderboard[leaderboard["status"] == "ok"], task)
    df = measured_once(per_machine(config_style(with_key(df))))
    styles = line_styles(df["style"])
    column, unit = throughput_column(df)
    fig, axes = figure(2)
    notes = []
    for ax, col, ylabel in zip(
        axes, (column, "peak_mem_mb"), (f"training throughput ({unit})", "peak memory (MiB)"), strict=True
    ):
        stats = mean_ci(df, ["series", "style"], "depth", col)  # a depth without a value: a gap in its line
        series_lines(ax, stats, "depth", colours, styles, False)
        ax.set(xlabel="depth (layers)", ylabel=ylabel, title=f"{ylabel.split(' (')[0]} vs depth — {task}")
        limit(ax, col)
        if (stats["count"] > 0).any():
            notes.append(_n_note(stats[stats["count"] > 0]))
    legend(fig, colours, df["series"], styles)
    bars = f"bars = {CLIP_NOTE} where n > 1" if any(not n.startswith("n = 1 ") for n in notes) else "no bars (n = 1)"
    suptitle(fig, f"Cost vs depth on {task}: {'; '.join(dict.fromkeys(notes)) or 'no measurement'}, {bars}; "
                  f"{load_note(df)}")
    return fig


def pareto_front(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Mask of the points no other point beats on both axes (higher x and higher y are better)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ge = (x[None, :] >= x[:, None]) & (y[None, :] >= y[:, None])
    gt = (x[None, :] > x[:, None]) | (y[None, :] > y[:, None])
    return np.asarray(~(ge & gt).any(axis=1))


def pareto_points(leaderboard: pd.DataFrame, task: str | None = None, metric: str | None = None
                  ) -> tuple[pd.DataFrame, str, str, str]:
    """The points of the Pareto figure: per (variant, configuration, depth) the seed mean of ``metric`` (default:
    the task's primary metric, :mod:`bench.runs.primary`) and the configuration's throughput (measured once); where
    a configuration's throughput was measured in several load bands (a board of
    :func:`bench.analysis.stats.with_mixed_load_bands`), a point per band, its style naming it, each at the seed mean
    over every band (a convergence value pools every seed of a machine),
    and ``front``, whether no other point has both a higher throughput and a better value (lower for a loss or an
    error, higher for an accuracy); with the throughput column, its unit and the task."""
    df, task = one_task(leaderboard[leaderboard["status"] == "ok"], task)
    metric = metric or primary(task).final
    df = with_derived(config_style(with_key(df)))  # train_error, val_error: a classifier's
    pooled = per_machine(df.assign(**{MACHINE_KEY: unbanded_machines(df)}))["style"]  # its machine's, every band
    df = per_machine(df).assign(_pooled=pooled)
    column, unit = throughput_column(df)
    keys = ["series", "style", "depth"]
    values = df.assign(_v=pd.to_numeric(df[metric], errors="coerce")).groupby(["series", "_pooled", "depth"])["_v"]
    value = values.mean().rename(metric)
    half = pd.Series(t_halfwidth(values.std().to_numpy(), values.count().to_numpy()), index=value.index, name="ci")
    speed = measured_once(df).groupby([*keys, "_pooled"])[column].mean(numeric_only=True).reset_index()
    pts = speed.merge(pd.concat([value, half], axis=1).reset_index(), on=["series", "_pooled", "depth"])
    pts = pts.dropna(subset=[column, metric]).drop(columns="_pooled")
    low, high = domain(metric)
    pts = pts.assign(lo=(pts[metric] - pts["ci"]).clip(low, high), hi=(pts[metric] + pts["ci"]).clip(low, high))
    better = -pts[metric] if _lower_is_better(metric) else pts[metric]
    return pts.assign(front=pareto_front(pts[column].to_numpy(), better.to_numpy())), column, unit, task


NEAR = 0.03  # two points closer than this share of the axes' spans in both x and y: their depth labels would touch


def label_lines(x: pd.Series, y: pd.Series) -> list[int]:
    """Per point, how many lines below the usual place its label goes: the number of points before it (in order)
    within :data:`NEAR` of it, so labels of nearly coinciding points (a configuration timed in two load bands) read
    one under the other, never run into one ("2020"); 0 for a point alone."""
    xs, ys = x.to_numpy(dtype=float), y.to_numpy(dtype=float)
    if not len(xs):
        return []
    close = [np.abs(v[:, None] - v[None, :]) < NEAR * (float(np.ptp(v)) or 1.0) for v in (xs, ys)]
    near = close[0] & close[1]
    return [int(near[i, :i].sum()) for i in range(len(xs))]


PER_POINT = "each point the mean of its measurements"  # a cost point's throughput, in every figure drawing one


def _lower_is_better(metric: str) -> bool:
    return metric.endswith(("_loss", "_error"))


def plot_pareto(leaderboard: pd.DataFrame, task: str | None = None, metric: str | None = None,
                colours: Mapping[str, Colour] | None = None) -> Figure:
    """The task's primary metric (or ``metric``) vs throughput, one point per (variant, configuration, depth) (seed
    means; and machine), with the Pareto front drawn as the staircase through its points; colour = variant, marker =
    configuration, the label of a point its depth."""
    colours = colours or palette_of(leaderboard)
    pts, column, unit, task = pareto_points(leaderboard, task, metric)
    metric = metric or primary(task).final
    configs = sorted(set(pts["style"]), key=natural)
    markers = {s: _PARETO_MARKERS[i % len(_PARETO_MARKERS)] for i, s in enumerate(configs)}
    fig, (ax,) = figure()
    for (series, style), s in pts.groupby(["series", "style"]):
        label = f"{series} ({style})" if style else str(series)
        ax.plot(s[column], s[metric], linestyle="", marker=markers[style], color=colours[str(series)], label=label)
        has = s["ci"].notna().to_numpy()
        if has.any():  # the seeds' spread: a difference inside it is not one the figure shows
            mean = s[metric].to_numpy(dtype=float)[has]
            yerr = np.vstack([mean - s["lo"].to_numpy(dtype=float)[has], s["hi"].to_numpy(dtype=float)[has] - mean])
            ax.errorbar(s[column].to_numpy(dtype=float)[has], mean, yerr=yerr, fmt="none",
                        ecolor=colours[str(series)], capsize=3, alpha=0.8)
    for (x, y), depth, lower in zip(pts[[column, metric]].itertuples(index=False), pts["depth"],
                                    label_lines(pts[column], pts[metric]), strict=True):
        ax.annotate(str(depth), (x, y), fontsize="x-small", xytext=(3, 3 - 9 * lower), textcoords="offset points")
    front = pts[pts["front"]].sort_values(column)
    # the staircase: from each front point, level to the next faster one (a point between two is dominated)
    ax.plot(front[column], front[metric], color="black", linestyle="--", linewidth=1.2, marker="o", markersize=9,
            markerfacecolor="none", drawstyle="steps-post" if len(front) > 1 else "default", label="Pareto front")
    words = primary(task)
    ylabel = {words.final: words.label, words.train: words.train_label}.get(metric, metric.replace("_", " "))
    ax.set(xlabel=f"training throughput ({unit}; {PER_POINT})", ylabel=ylabel,
           title=f"{ylabel.split(' (')[0]} vs throughput — {task} (seed means, bars: {CLIP_NOTE}; labels: depth; "
                 f"{'lower' if _lower_is_better(metric) else 'higher'} is better)")
    limit(ax, metric)
    handles = [Line2D([], [], color=colours[k], linestyle="", marker="o", label=k) for k in sorted(set(pts["series"]))]
    if len(markers) > 1:
        handles += [Line2D([], [], color="0.35", linestyle="", marker=m, label=s) for s, m in markers.items()]
    handles.append(Line2D([], [], color="black", linestyle="--", linewidth=1.2, marker="o", markerfacecolor="none",
                          label="Pareto front"))
    fig.legend(handles=handles, loc="outside lower center", ncols=legend_columns(fig, handles), fontsize="small",
               frameon=False, title="colour: variant" + ("; marker: configuration" if len(markers) > 1 else ""))
    return fig
