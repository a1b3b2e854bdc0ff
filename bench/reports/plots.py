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
registry's metadata, never from the spelling of a name. Colour encodes the series and is the same in
every figure (:func:`palette`); line style encodes depth (or warm-up). Legends sit outside the axes
so they never hide data. Figures are :class:`matplotlib.figure.Figure` objects: nothing leaks into pyplot.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
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

__all__ = [
    "Frames", "curves_frame", "grad_norm_init_data", "is_ln_transformer", "load_frames", "make_all", "palette",
    "pareto_front",
    "plot_cost", "plot_degradation", "plot_grad_norm_init", "plot_learning_curves", "plot_loss_vs_time", "plot_pareto",
    "plot_warmup", "probes_frame", "variant_colour", "variant_key",
]  # fmt: skip

# Fixed colours for the known designs, by registered name or series key (:func:`variant_key`); the MLP
# counterparts share their design's colour. Any other name hashes into _FALLBACK, stable across runs and figures.
_KNOWN = ("plain", "highway", "resnet", "preact", "densenet", "postln", "preln", "sandwich", "deepnorm",
          "rezero", "layerscale", "skipinit", "fixup", "mixln")  # fmt: skip
_COLOURS = sns.color_palette("tab10") + sns.color_palette("Dark2")
_TABLE = {name: _COLOURS[i % len(_COLOURS)] for i, name in enumerate(_KNOWN)}
_TABLE |= {"residual_mlp": _TABLE["resnet"], "plain_mlp": _TABLE["plain"], "highway_mlp": _TABLE["highway"],
           "preact_mlp": _TABLE["preact"]}  # fmt: skip
# The Transformer designs of the shipped studies, by index into _COLOURS: chosen so that the designs of every shipped
# study (frontier, crosslayer, normfree, gpt2, with preln 6 and postln 5) have distinct colours (tested); a colour
# shared with a CNN design of _KNOWN never meets it in one figure.
_TRANSFORMERS = {"llama_like": 0, "b2t": 1, "denseformer": 2, "resi_dual": 3, "admin": 4, "hybridnorm": 7,
                 "value_residual": 9, "laurel": 10, "t_fixup": 11, "hyper_connections": 12, "mhc": 13, "ngpt": 14,
                 "frac_connections": 15, "mudd": 16, "dca": 17, "attn_res": 0, "attn_res_block": 1, "speedrun": 3,
                 "lns": 9, "dyt": 10}  # fmt: skip
_TABLE |= {name: _COLOURS[i] for name, i in _TRANSFORMERS.items()}
_FALLBACK = sns.color_palette("husl", 32)
_DEPTH_STYLES: tuple[Any, ...] = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)))
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
CLIP_NOTE = "95% t-CI clipped to the metric's range"
_GRAD_LABELS = {
    "weight_grad_norm": "gradient L2 norm of the weight matrices (Linear/Conv)",
    "grad_norm": "gradient L2 norm of all the unit's parameters",
}
_KIND_TITLES = {"attn": "attention sublayer", "ffn": "feed-forward sublayer", "mlp": "MLP layer",
                "conv": "convolutional unit", "": "residual unit"}  # fmt: skip


def variant_colour(name: str) -> tuple[float, float, float]:
    """A variant's (or series key's) colour: the table entry of the name, else of its :func:`variant_key`
    (``resnet56`` -> ``resnet``, ``highway_mlp20`` -> ``highway_mlp``), else a stable hash of that key, so a
    preset of another design (``preact_resnet164``, bottleneck) never borrows its base's colour."""
    if name in _TABLE:
        return tuple(_TABLE[name])  # type: ignore[return-value]
    key = variant_key(name)
    if key in _TABLE:
        return tuple(_TABLE[key])  # type: ignore[return-value]
    digest = int.from_bytes(hashlib.sha1(key.encode()).digest()[:4], "big")
    return tuple(_FALLBACK[digest % len(_FALLBACK)])  # type: ignore[return-value]


def palette(variants: Iterable[str]) -> dict[str, tuple[float, float, float]]:
    """``{variant: colour}``; each colour depends only on the name, never on the other names shown."""
    return {v: variant_colour(v) for v in variants}


def depth_styles(depths: Iterable[Any]) -> dict[Any, Any]:
    """``{depth: line style}``, shallowest solid; one mapping per figure so every panel and the legend agree."""
    return {d: _DEPTH_STYLES[i % len(_DEPTH_STYLES)] for i, d in enumerate(sorted(set(depths)))}


def _series(
    ax: Axes, stats: pd.DataFrame, x: str, styles: dict[Any, Any] | None, band: bool, style_col: str = "depth"
) -> None:
    """One mean line per key (and style value), coloured by key, with its clipped CI as a band or error bars.

    Line labels are ``key`` or ``key (depth d)``: they name the series for tests and readers of the
    artist tree; the figure legend is built separately from one handle per colour and per style."""
    groups = ["key", style_col] if styles is not None else ["key"]
    grouped = list(stats.groupby(groups, sort=True))
    for i, (ident, s) in enumerate(grouped):
        ident = ident if isinstance(ident, tuple) else (ident,)
        colour = variant_colour(str(ident[0]))
        ls = styles[ident[1]] if styles is not None else "-"
        label = f"{ident[0]} ({style_col} {ident[1]})" if styles is not None else str(ident[0])
        xs, mean = s[x].to_numpy(dtype=float), s["mean"].to_numpy(dtype=float)
        lo, hi = s["lo"].to_numpy(dtype=float), s["hi"].to_numpy(dtype=float)
        if band:
            ax.plot(xs, mean, color=colour, linestyle=ls, label=label)
            ax.fill_between(xs, lo, hi, color=colour, alpha=0.2, linewidth=0)
            continue
        # Series sharing an x are nudged apart on screen (the data stay exact) so no error bar hides another.
        shift = offset_copy(ax.transData, fig=ax.figure, x=_DODGE_PT * (i - (len(grouped) - 1) / 2), units="points")  # type: ignore[arg-type]
        ax.plot(xs, mean, color=colour, linestyle=ls, marker="o", label=label, transform=shift)
        yerr = np.vstack([mean - lo, hi - mean])
        ax.errorbar(xs, mean, yerr=yerr, fmt="none", ecolor=colour, capsize=3, transform=shift)
        # Artists off transData do not grow the data limits: add the (unshifted) bars by hand.
        pts = np.column_stack([np.r_[xs, xs, xs], np.r_[mean, lo, hi]])
        ax.update_datalim(pts[np.isfinite(pts).all(axis=1)])
    ax.autoscale_view()


def _legend(fig: Figure, keys: Iterable[str], styles: dict[Any, Any] | None = None, what: str = "depth") -> None:
    """One legend for the whole figure, outside the axes on the right: colour = variant, style = ``what``."""
    handles = [Line2D([], [], color=variant_colour(k), linewidth=2, label=k) for k in sorted(set(keys))]
    if styles and len(styles) > 1:
        handles += [Line2D([], [], color="0.35", linestyle=ls, label=f"{what} {d}") for d, ls in styles.items()]
    fig.legend(handles=handles, loc="outside right upper", fontsize="small", title="colour: variant")


def _limit(ax: Axes, metric: str, log: bool = False) -> None:
    """Keep a [0, 1] metric's axis within [-0.02, 1.02]; log axes start a little below the smallest positive
    value drawn, so a band clipped at 0 runs off the bottom instead of stretching the axis to 1e-300."""
    if log:
        ax.set_yscale("log")
        ys = np.concatenate([np.asarray(a.get_ydata(), dtype=float) for a in ax.get_lines()] or [np.array([])])
        ys = ys[np.isfinite(ys) & (ys > 0)]
        if ys.size:
            ax.set_ylim(bottom=ys.min() / 2)
    elif domain(metric) == (0.0, 1.0):
        low, high = ax.get_ylim()
        ax.set_ylim(max(low, _FRACTION_LIMITS[0]), min(high, _FRACTION_LIMITS[1]))


def _figure(ncols: int = 1) -> tuple[Figure, list[Axes]]:
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(6.4 * ncols + 1.6, 4.8), layout="constrained")
        axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def plot_learning_curves(curves: pd.DataFrame, task: str | None = None, val_metric: str = "val_acc") -> Figure:
    """Training loss (log y) and a validation metric vs step, mean over seeds with clipped 95% t-CI bands."""
    df, task = one_task(curves, task)
    df = with_key(df)
    styles = depth_styles(df["depth"].dropna())
    fig, (left, right) = _figure(2)
    for ax, split, metric in ((left, "train", "loss"), (right, "eval", val_metric)):
        part = df[(df["split"] == split) & (df["metric"] == metric)]
        _series(ax, mean_ci(part, ["key", "depth"], "step", "value", metric), "step", styles, True)
        ylabel = _METRIC_LABELS.get((split, metric), f"{split} {metric}")
        ax.set(xlabel="step (optimizer updates)", ylabel=ylabel, title=f"{ylabel.split(' (')[0]} — {task}")
        _limit(ax, metric, log=metric in _LOG_METRICS)
    _legend(fig, df["key"], styles)
    fig.suptitle(f"Learning curves on {task}: mean over seeds, band = {CLIP_NOTE}; gaps = non-finite loss")
    return fig


def plot_loss_vs_time(curves: pd.DataFrame, task: str | None = None, metric: str = "val_loss") -> Figure:
    """Validation loss (log y) against training time: one point per evaluation, at the mean over seeds of the
    time trained up to it (x) and the mean loss (y, clipped 95% t-CI band). What a design buys per second of
    this machine, where a step that costs more counts against it."""
    df, task = one_task(curves, task)
    part = with_key(df[(df["split"] == "eval") & (df["metric"] == metric)])
    styles = depth_styles(part["depth"].dropna())
    stats = mean_ci(part, ["key", "depth"], "step", "value", metric)
    when = part.groupby(["key", "depth", "step"])["train_time_s"].mean().rename("time_s").reset_index()
    stats = stats.merge(when, on=["key", "depth", "step"]).sort_values(["key", "depth", "time_s"])
    fig, (ax,) = _figure()
    _series(ax, stats, "time_s", styles, True)
    ylabel = _METRIC_LABELS.get(("eval", metric), f"eval {metric}")
    ax.set(xlabel="training time (s, timed steps only; mean over seeds)", ylabel=ylabel,
           title=f"{ylabel.split(' (')[0]} vs wall-clock — {task}\nmean over seeds, band = {CLIP_NOTE}")
    _limit(ax, metric, log=metric in _LOG_METRICS)
    _legend(fig, part["key"], styles)
    return fig


def plot_degradation(leaderboard: pd.DataFrame, task: str | None = None) -> Figure:
    """Final training error (1 - final train accuracy) vs depth, one line per variant, clipped 95% CI bars."""
    df, task = one_task(leaderboard[leaderboard["status"] == "ok"], task)
    df = with_key(df).assign(train_error=1.0 - pd.to_numeric(df["final_train_acc"], errors="coerce"))
    fig, (ax,) = _figure()
    _series(ax, mean_ci(df, ["key"], "depth", "train_error"), "depth", None, False)
    ax.set(
        xlabel="depth (layers)",
        ylabel="final training error (1 − train accuracy)",
        title=f"Degradation: training error vs depth — {task}\nmean over seeds, bars = {CLIP_NOTE} [0, 1]",
    )
    _limit(ax, "train_error")
    _legend(fig, df["key"])
    return fig


def plot_grad_norm_init(probes: pd.DataFrame, task: str | None = None) -> Figure:
    """Gradient norm per unit at step 0 vs its index within its kind (log y): one panel per sublayer kind
    (attention, feed-forward, ...), one line per variant and depth. Plots Xiong et al.'s weight-matrix norm
    (``weight_grad_norm``) when recorded, else the whole-unit ``grad_norm`` (:func:`grad_norm_init_data`)."""
    stats, metric, task = grad_norm_init_data(probes, task)
    kinds = sorted(stats["kind"].unique(), key=lambda k: (k == "", k))  # rows without a kind: last panel
    styles = depth_styles(stats["depth"].dropna())
    fig, axes = _figure(len(kinds))
    ylabel = _GRAD_LABELS[metric]
    for ax, kind in zip(axes, kinds, strict=True):
        _series(ax, stats[stats["kind"] == kind], "index", styles, False)
        ax.set(
            xlabel=f"{_KIND_TITLES.get(kind, f'{kind} units')} index (input → output)",
            ylabel=ylabel,
            title=_KIND_TITLES.get(kind, f"{kind} units").capitalize(),
        )
        _limit(ax, metric, log=True)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # units are whole
    _legend(fig, stats["key"], styles)
    fig.suptitle(f"{ylabel.split(' (')[0]} at step 0 — {task}: mean over seeds, bars = {CLIP_NOTE} (≥ 0)")
    return fig


def _throughput_column(df: pd.DataFrame) -> tuple[str, str]:
    tokens = pd.to_numeric(df["train_tokens_per_s"], errors="coerce")
    return (
        ("train_tokens_per_s", "tokens/s") if len(df) and tokens.notna().all() else ("train_samples_per_s", "samples/s")
    )


def per_machine(df: pd.DataFrame) -> pd.DataFrame:
    """Where ``df``'s runs were measured on several machines, each series ``key`` names its machine (``preln @
    9275ebfd``): a cost figure is never pooled across machines (:mod:`bench.analysis.stats`)."""
    return df.assign(key=df["key"] + " @ " + machines_of(df)) if several_machines(df) else df


def plot_cost(leaderboard: pd.DataFrame, task: str | None = None) -> Figure:
    """Two panels: training throughput vs depth and peak memory vs depth, one line per variant (and machine)."""
    df, task = one_task(leaderboard[leaderboard["status"] == "ok"], task)
    df = per_machine(with_key(df))
    column, unit = _throughput_column(df)
    fig, axes = _figure(2)
    for ax, col, ylabel in zip(
        axes, (column, "peak_mem_mb"), (f"training throughput ({unit})", "peak memory (MB)"), strict=True
    ):
        _series(ax, mean_ci(df, ["key"], "depth", col), "depth", None, False)
        ax.set(xlabel="depth (layers)", ylabel=ylabel, title=f"{ylabel.split(' (')[0]} vs depth — {task}")
    _legend(fig, df["key"])
    fig.suptitle(f"Cost vs depth on {task}: mean over seeds, bars = {CLIP_NOTE} (≥ 0)")
    return fig


def pareto_front(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Mask of the points no other point beats on both axes (higher x and higher y are better)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ge = (x[None, :] >= x[:, None]) & (y[None, :] >= y[:, None])
    gt = (x[None, :] > x[:, None]) | (y[None, :] > y[:, None])
    return np.asarray(~(ge & gt).any(axis=1))


def plot_pareto(leaderboard: pd.DataFrame, task: str | None = None, metric: str = "final_val_acc") -> Figure:
    """Accuracy vs throughput, one point per (variant, depth) (seed means; and machine), with the Pareto front."""
    df, task = one_task(leaderboard[leaderboard["status"] == "ok"], task)
    df = per_machine(with_key(df))
    column, unit = _throughput_column(df)
    pts = df.groupby(["key", "depth"])[[column, metric]].mean(numeric_only=True).dropna().reset_index()
    fig, (ax,) = _figure()
    for key, s in pts.groupby("key"):
        ax.plot(s[column], s[metric], linestyle="", marker="o", color=variant_colour(str(key)), label=str(key))
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
    fig.legend(*ax.get_legend_handles_labels(), loc="outside right upper", fontsize="small", title="variant")
    return fig


def plot_warmup(curves: pd.DataFrame, task: str | None = None) -> Figure:
    """Post-LN vs Pre-LN (transformer family): training loss (log y) with (solid) and without (dashed) warm-up."""
    tf = (curves["family"] == "transformer") | curves["variant"].map(lambda v: is_ln_transformer(str(v)) is not None)
    df, task = one_task(curves[tf & (curves["split"] == "train") & (curves["metric"] == "loss")], task)
    df = with_key(df).assign(warmup=df["warmup_steps"].fillna(0).astype(int))
    stats = mean_ci(df, ["key", "depth", "warmup"], "step", "value", "loss")
    several = stats.groupby("key")["depth"].nunique() > 1
    fig, (ax,) = _figure()
    for (key, depth, warmup), s in stats.groupby(["key", "depth", "warmup"]):
        name = f"{key} (depth {depth})" if several[key] else str(key)
        label = f"{name}, warm-up {warmup} steps" if warmup > 0 else f"{name}, no warm-up"
        colour, xs = variant_colour(str(key)), s["step"].to_numpy(dtype=float)
        ax.plot(xs, s["mean"].to_numpy(), color=colour, linestyle="-" if warmup > 0 else "--", label=label)
        ax.fill_between(xs, s["lo"].to_numpy(), s["hi"].to_numpy(), color=colour, alpha=0.2, linewidth=0)
    ax.set(
        xlabel="step (optimizer updates)",
        ylabel="training loss (cross-entropy, nats)",
        title=f"Post-LN vs Pre-LN, with and without warm-up — {task}\nmean over seeds, band = {CLIP_NOTE} (≥ 0)",
    )
    _limit(ax, "loss", log=True)
    _legend(fig, stats["key"], {"on": "-", "off": "--"}, what="warm-up")
    return fig


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def make_all(results_dir: str | Path, study: str | None = None) -> list[Path]:
    """Write every figure there is data for to ``results_dir/plots/`` (``plots/<study>/`` for one study)."""
    frames = load_frames(results_dir, study)
    out = Path(results_dir) / "plots" / (_slug(study) if study else "")
    board, curves, probes = frames.leaderboard, frames.curves, frames.probes
    ok = board[board["status"] == "ok"]
    jobs: list[tuple[str, Any]] = []
    for task in sorted(board["task"].dropna().unique()):
        t_ok, t_curves = ok[ok["task"] == task], curves[curves["task"] == task]
        if len(t_curves):
            jobs.append((f"curves_{task}", lambda t=task: plot_learning_curves(curves, t)))
        timed = t_curves[(t_curves["metric"] == "val_loss") & t_curves["train_time_s"].notna()]
        if len(timed):
            jobs.append((f"loss_vs_time_{task}", lambda t=task: plot_loss_vs_time(curves, t)))
        with_acc = with_key(t_ok[t_ok["final_train_acc"].notna()])
        if len(with_acc) and (with_acc.groupby("key")["depth"].nunique() > 1).any():
            jobs.append((f"degradation_{task}", lambda t=task: plot_degradation(board, t)))
        grads = probes["metric"].isin(("grad_norm", "weight_grad_norm"))
        if ((probes["task"] == task) & (probes["step"] == 0) & grads).any():
            jobs.append((f"grad_norm_init_{task}", lambda t=task: plot_grad_norm_init(probes, t)))
        if t_ok[["train_samples_per_s", "peak_mem_mb"]].notna().any().any():
            jobs.append((f"cost_{task}", lambda t=task: plot_cost(board, t)))
        if (t_ok["final_val_acc"].notna() & t_ok["train_samples_per_s"].notna()).any():
            jobs.append((f"pareto_{task}", lambda t=task: plot_pareto(board, t)))
        ln = board[(board["task"] == task) & board["variant"].map(lambda v: is_ln_transformer(str(v)) is not None)]
        if ln["warmup_steps"].fillna(0).gt(0).nunique() == 2 and len(t_curves):
            jobs.append((f"warmup_{task}", lambda t=task: plot_warmup(curves, t)))
    paths = []
    for name, make in jobs:
        path = out / f"{_slug(name)}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        make().savefig(path, dpi=120)
        paths.append(path)
    return paths
