"""The papers' figures, re-drawn from a results directory (seaborn style, matplotlib Agg, no pyplot state).

- learning curves with seed confidence bands;
- the degradation plot — final training error vs depth (He et al. 2015, "Deep Residual Learning for
  Image Recognition", Fig. 1 and 6; Srivastava et al. 2015, "Training Very Deep Networks", Fig. 1);
- gradient norm per layer at initialisation (Xiong et al. 2020, "On Layer Normalization in the
  Transformer Architecture", Fig. 3);
- throughput and peak memory vs depth, and accuracy vs throughput with the Pareto front;
- Post-LN vs Pre-LN loss curves with and without learning-rate warm-up (Xiong et al. 2020, Fig. 2).

Every mean is over seeds with a Student-t 95% CI (the rule of :mod:`bench.stats`). Colour encodes
the variant and is the same in every figure (:func:`palette`); line style encodes depth (or warm-up).
Figures are built as :class:`matplotlib.figure.Figure` objects, so nothing leaks into pyplot.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from scipy import stats as sps

from bench.results import ResultsStore

# Fixed colours for the known designs (one per design axis point, so `highway_mlp` shares `highway`'s
# colour); anything else hashes into _FALLBACK, which is stable across runs and figures.
_KNOWN = ("plain", "highway", "resnet", "preact", "densenet", "postln", "preln", "sandwich", "deepnorm",
          "rezero", "layerscale", "skipinit", "fixup", "mixln", "densenet_bc")  # fmt: skip
_COLOURS = sns.color_palette("tab10") + sns.color_palette("Dark2")
_TABLE = {name: _COLOURS[i % len(_COLOURS)] for i, name in enumerate(_KNOWN)}
_TABLE["residual_mlp"] = _TABLE["resnet"]  # the fully-connected ResNet: same design, same colour
_FALLBACK = sns.color_palette("husl", 32)
_DEPTH_STYLES = ("-", "--", ":", "-.")
_POST_LN, _PRE_LN = re.compile(r"post[-_]?ln"), re.compile(r"pre[-_]?ln")
_METRIC_LABELS = {
    ("train", "loss"): "training loss (cross-entropy, nats)",
    ("eval", "val_acc"): "validation accuracy (fraction)",
    ("eval", "val_loss"): "validation loss (cross-entropy, nats)",
    ("eval", "train_acc"): "training accuracy (fraction)",
    ("eval", "bpc"): "validation bits per character (bits)",
    ("eval", "ppl"): "validation perplexity (exp nats)",
}
_NOT_METRICS = ("step", "epoch", "wall_s", "train_time_s", "lr")  # curve columns that are axes, not metrics
_META = ("run_id", "variant", "family", "depth", "task", "seed", "warmup_steps", "status", "study")


def variant_colour(name: str) -> tuple[float, float, float]:
    """A variant's colour: the table entry of its name, else of its longest ``_``-prefix once digits are
    dropped (``densenet_bc100_k12`` -> ``densenet_bc``, ``preact_resnet164`` -> ``preact``), else a stable hash."""
    parts = re.sub(r"\d+", "", name).strip("_-").split("_")
    for key in (name, *("_".join(parts[:i]) for i in range(len(parts), 0, -1))):
        if key in _TABLE:
            return tuple(_TABLE[key])  # type: ignore[return-value]
    digest = int.from_bytes(hashlib.sha1(name.encode()).digest()[:4], "big")
    return tuple(_FALLBACK[digest % len(_FALLBACK)])  # type: ignore[return-value]


def palette(variants: Iterable[str]) -> dict[str, tuple[float, float, float]]:
    """``{variant: colour}``; each colour depends only on the name, never on the other names shown."""
    return {v: variant_colour(v) for v in variants}


def variant_key(variant: str, depth: Any) -> str:
    """The series name on depth axes: the variant without its depth suffix (``resnet56`` at depth 56 -> ``resnet``)."""
    try:
        suffix = str(int(depth))
    except (TypeError, ValueError):
        return variant
    return re.sub(rf"[-_]?{suffix}$", "", variant) if variant.endswith(suffix) and variant != suffix else variant


@dataclass
class Frames:
    """Everything the plots and the report read: the leaderboard and tidy curves/probes with run metadata."""

    leaderboard: pd.DataFrame
    curves: pd.DataFrame  # run meta + split ("train"|"eval"), step, metric, value
    probes: pd.DataFrame  # run meta + step, layer, block, metric, value


def curves_frame(runs: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Tidy curves of run JSONs: one row per run, split, step and metric (non-finite losses dropped)."""
    parts = []
    for run in runs:
        meta = {k: run.get("row", {}).get(k) for k in _META} | {"run_id": run["run_id"]}
        for split in ("train", "eval"):
            points = pd.DataFrame(run.get("curves", {}).get(split, []))
            if points.empty:
                continue
            values = [c for c in points.columns if c not in _NOT_METRICS]
            long = points.melt(id_vars=["step"], value_vars=values, var_name="metric", value_name="value")
            parts.append(long.assign(split=split, **meta))
    cols = [*_META, "split", "step", "metric", "value"]
    if not parts:
        return pd.DataFrame(columns=cols)
    df = pd.concat(parts, ignore_index=True)[cols]
    df["value"] = pd.to_numeric(df["value"], errors="coerce")
    return df[np.isfinite(df["value"].to_numpy(dtype=float))].reset_index(drop=True)


def probes_frame(runs: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Tidy probe rows of run JSONs joined with each run's metadata (variant, depth, task, seed ...)."""
    rows = []
    for run in runs:
        meta = {k: run.get("row", {}).get(k) for k in _META} | {"run_id": run["run_id"]}
        rows += [meta | dict(r) for r in run.get("probes", [])]
    return pd.DataFrame(rows, columns=[*_META, "step", "layer", "block", "metric", "value"])


def load_frames(results_dir: str | Path, study: str | None = None) -> Frames:
    """Read ``results_dir``; with ``study``, keep only that study's runs (ValueError if it has none)."""
    store = ResultsStore(results_dir)
    board, runs = store.load_leaderboard(), store.load_runs()
    if study is not None:
        if not (board["study"] == study).any():
            raise ValueError(
                f"no runs of study {study!r} in {results_dir}; "
                f"studies: {sorted(board['study'].dropna().unique().tolist())}"
            )
        board = board[board["study"] == study].reset_index(drop=True)
        runs = [r for r in runs if r["run_id"] in set(board["run_id"])]
    return Frames(board, curves_frame(runs), probes_frame(runs))


def _one_task(df: pd.DataFrame, task: str | None) -> tuple[pd.DataFrame, str]:
    if task is not None:
        df = df[df["task"] == task]
    tasks = sorted(df["task"].dropna().unique().tolist())
    if len(tasks) != 1:
        raise ValueError(f"the figure needs data of exactly one task; found {tasks or 'none'} (pass task=...)")
    return df, str(tasks[0])


def _mean_ci(df: pd.DataFrame, keys: list[str], x: str, y: str) -> pd.DataFrame:
    """Per ``keys + [x]``: mean of ``y`` over runs and its 95% t-CI half-width (NaN for one run)."""
    g = df.assign(_y=pd.to_numeric(df[y], errors="coerce")).dropna(subset=["_y"]).groupby([*keys, x])["_y"]
    out = g.agg(["mean", "std", "count"]).reset_index()
    n = out["count"].to_numpy(dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["ci"] = np.where(n > 1, sps.t.ppf(0.975, np.maximum(n - 1, 1)) * out["std"] / np.sqrt(n), np.nan)
    return out.sort_values([*keys, x])


def _series(
    ax: Axes, stats: pd.DataFrame, x: str, key: str, style: str | None, band: bool, labels: dict[Any, str]
) -> None:
    """One mean line per (key, style) value, coloured by key, with a CI band or CI error bars."""
    styles = (
        {s: _DEPTH_STYLES[i % len(_DEPTH_STYLES)] for i, s in enumerate(sorted(stats[style].unique()))} if style else {}
    )
    for ident, s in stats.groupby([key, style] if style else [key], sort=True):
        ident = ident if isinstance(ident, tuple) else (ident,)
        colour, ls = variant_colour(str(ident[0])), styles.get(ident[-1], "-")
        xs, mean, ci = s[x].to_numpy(dtype=float), s["mean"].to_numpy(), s["ci"].fillna(0).to_numpy()
        ax.plot(
            xs, mean, color=colour, linestyle=ls, marker=None if band else "o", label=labels.get(ident, str(ident[0]))
        )
        if band:
            ax.fill_between(xs, mean - ci, mean + ci, color=colour, alpha=0.2, linewidth=0)
        else:
            ax.errorbar(xs, mean, yerr=ci, fmt="none", ecolor=colour, capsize=3)


def _depth_labels(stats: pd.DataFrame, key: str) -> dict[Any, str]:
    several = stats.groupby(key)["depth"].nunique() > 1
    return {
        (k, d): f"{k} (depth {d})" if several[k] else str(k)
        for k, d in stats[[key, "depth"]].drop_duplicates().itertuples(index=False)
    }


def _figure(ncols: int = 1) -> tuple[Figure, list[Axes]]:
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(6.4 * ncols, 4.6), layout="constrained")
        axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def plot_learning_curves(curves: pd.DataFrame, task: str | None = None, val_metric: str = "val_acc") -> Figure:
    """Training loss and a validation metric vs step, mean over seeds with 95% t-CI bands."""
    df, task = _one_task(curves, task)
    fig, (left, right) = _figure(2)
    panels = ((left, "train", "loss"), (right, "eval", val_metric))
    for ax, split, metric in panels:
        stats = _mean_ci(df[(df["split"] == split) & (df["metric"] == metric)], ["variant", "depth"], "step", "value")
        _series(ax, stats, "step", "variant", "depth", True, _depth_labels(stats, "variant"))
        ylabel = _METRIC_LABELS.get((split, metric), f"{split} {metric}")
        ax.set(xlabel="step (optimizer updates)", ylabel=ylabel, title=f"{ylabel.split(' (')[0]} — {task}")
        if stats.size:
            ax.legend(fontsize="small")
    fig.suptitle(f"Learning curves on {task} (mean over seeds, 95% CI)")
    return fig


def plot_degradation(leaderboard: pd.DataFrame, task: str | None = None) -> Figure:
    """Final training error (1 - final train accuracy) vs depth, one line per variant, 95% CI error bars."""
    df, task = _one_task(leaderboard[leaderboard["status"] == "ok"], task)
    df = df.assign(
        key=[variant_key(v, d) for v, d in zip(df["variant"], df["depth"], strict=True)],
        train_error=1.0 - pd.to_numeric(df["final_train_acc"], errors="coerce"),
    )
    stats = _mean_ci(df, ["key"], "depth", "train_error")
    fig, (ax,) = _figure()
    _series(ax, stats, "depth", "key", None, False, {})
    ax.set(
        xlabel="depth (layers)",
        ylabel="final training error (1 − train accuracy)",
        title=f"Degradation: training error vs depth — {task}",
    )
    ax.legend(title="variant")
    return fig


def plot_grad_norm_init(probes: pd.DataFrame, task: str | None = None) -> Figure:
    """Gradient norm of each residual unit's parameters at step 0 vs layer index (log scale), per variant."""
    df, task = _one_task(probes[(probes["step"] == 0) & (probes["metric"] == "grad_norm")], task)
    stats = _mean_ci(df, ["variant", "depth"], "layer", "value")
    fig, (ax,) = _figure()
    _series(ax, stats, "layer", "variant", "depth", False, _depth_labels(stats, "variant"))
    ax.set_yscale("log")
    ax.set(
        xlabel="layer (residual unit index, input → output)",
        ylabel="gradient L2 norm at initialisation",
        title=f"Per-layer gradient norm at step 0 — {task}",
    )
    ax.legend(title="variant")
    return fig


def _throughput_column(df: pd.DataFrame) -> tuple[str, str]:
    tokens = pd.to_numeric(df["train_tokens_per_s"], errors="coerce")
    return (
        ("train_tokens_per_s", "tokens/s") if len(df) and tokens.notna().all() else ("train_samples_per_s", "samples/s")
    )


def plot_cost(leaderboard: pd.DataFrame, task: str | None = None) -> Figure:
    """Two panels: training throughput vs depth and peak memory vs depth, one line per variant."""
    df, task = _one_task(leaderboard[leaderboard["status"] == "ok"], task)
    df = df.assign(key=[variant_key(v, d) for v, d in zip(df["variant"], df["depth"], strict=True)])
    column, unit = _throughput_column(df)
    fig, axes = _figure(2)
    for ax, col, ylabel in zip(
        axes, (column, "peak_mem_mb"), (f"training throughput ({unit})", "peak memory (MB)"), strict=True
    ):
        _series(ax, _mean_ci(df, ["key"], "depth", col), "depth", "key", None, False, {})
        ax.set(xlabel="depth (layers)", ylabel=ylabel, title=f"{ylabel.split(' (')[0]} vs depth — {task}")
        ax.legend(title="variant")
    return fig


def pareto_front(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Mask of the points no other point beats on both axes (higher x and higher y are better)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ge = (x[None, :] >= x[:, None]) & (y[None, :] >= y[:, None])
    gt = (x[None, :] > x[:, None]) | (y[None, :] > y[:, None])
    return np.asarray(~(ge & gt).any(axis=1))


def plot_pareto(leaderboard: pd.DataFrame, task: str | None = None, metric: str = "final_val_acc") -> Figure:
    """Accuracy vs throughput, one point per (variant, depth) (seed means), with the Pareto front."""
    df, task = _one_task(leaderboard[leaderboard["status"] == "ok"], task)
    df = df.assign(key=[variant_key(v, d) for v, d in zip(df["variant"], df["depth"], strict=True)])
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
        title=f"Accuracy vs throughput — {task}",
    )
    ax.legend(title="variant (labels: depth)", fontsize="small")
    return fig


def is_ln_transformer(variant: str) -> str | None:
    """``"post"`` or ``"pre"`` when the variant's name says Post-LN / Pre-LN, else None."""
    return "post" if _POST_LN.search(variant) else "pre" if _PRE_LN.search(variant) else None


def plot_warmup(curves: pd.DataFrame, task: str | None = None) -> Figure:
    """Post-LN vs Pre-LN (transformer family): training loss with (solid) and without (dashed) warm-up."""
    tf = (curves["family"] == "transformer") | curves["variant"].map(lambda v: is_ln_transformer(str(v)) is not None)
    df, task = _one_task(curves[tf & (curves["split"] == "train") & (curves["metric"] == "loss")], task)
    stats = _mean_ci(df.assign(warmup=df["warmup_steps"].fillna(0).astype(int)), ["variant", "warmup"], "step", "value")
    fig, (ax,) = _figure()
    for (variant, warmup), s in stats.groupby(["variant", "warmup"]):
        label = f"{variant}, warm-up {warmup} steps" if warmup > 0 else f"{variant}, no warm-up"
        colour, xs, mean = variant_colour(str(variant)), s["step"].to_numpy(dtype=float), s["mean"].to_numpy()
        ax.plot(xs, mean, color=colour, linestyle="-" if warmup > 0 else "--", label=label)
        ci = s["ci"].fillna(0).to_numpy()
        ax.fill_between(xs, mean - ci, mean + ci, color=colour, alpha=0.2, linewidth=0)
    ax.set(
        xlabel="step (optimizer updates)",
        ylabel="training loss (cross-entropy, nats)",
        title=f"Post-LN vs Pre-LN, with and without warm-up — {task}",
    )
    ax.legend(fontsize="small")
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
        keys = pd.Series([variant_key(v, d) for v, d in zip(t_ok["variant"], t_ok["depth"], strict=True)], dtype=object)
        with_acc = t_ok["final_train_acc"].notna().to_numpy()
        if len(t_ok) and (t_ok[with_acc].groupby(keys[with_acc].to_numpy())["depth"].nunique() > 1).any():
            jobs.append((f"degradation_{task}", lambda t=task: plot_degradation(board, t)))
        if ((probes["task"] == task) & (probes["step"] == 0) & (probes["metric"] == "grad_norm")).any():
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
