"""The papers' figures, re-drawn from a results directory (seaborn style, matplotlib Agg, no pyplot state).

- a forest plot of each compared design's difference from its baseline, the first figure of a study with claims
  (:mod:`bench.reports.forest`);
- learning curves with seed confidence bands: the training loss and the task's primary evaluation metric
  (validation loss for a language model, validation error for a classifier: :mod:`bench.runs.primary`),
  faceted where one axis would hold more than a handful of lines (:mod:`bench.reports.facets`);
- the degradation plot — the final training figure vs depth: training error for a classifier (He et al. 2015,
  "Deep Residual Learning for Image Recognition", Fig. 1 and 6; Srivastava et al. 2015, "Training Very Deep
  Networks", Fig. 1), training loss for a language model;
- gradient norm per layer at initialisation, one panel per sublayer kind (attention, feed-forward, ...), of
  the weight matrices where recorded (Xiong et al. 2020, "On Layer Normalization in the Transformer
  Architecture", Fig. 3);
- throughput and peak memory vs depth, and the primary metric vs throughput with the Pareto front
  (:mod:`bench.reports.costfigs`);
- Post-LN vs Pre-LN loss curves with and without learning-rate warm-up (Xiong et al. 2020, Fig. 2).

Every mean is over seeds with a Student-t 95% CI (the rule of :mod:`bench.analysis.stats`), clipped to the
metric's valid range (:data:`bench.reports.plotdata.DOMAINS`). A series is a :func:`variant_key`, read from the
registry's metadata, never from the spelling of a name. How the figures encode what (colour = variant, line style =
the rest of the configuration, one legend below the axes, spike-robust y axes, no point nudged off its x) is
:mod:`bench.reports.drawing`'s.

Figures are :class:`matplotlib.figure.Figure` objects: nothing leaks into pyplot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from bench.analysis.stats import load_bands, with_derived, with_mixed_load_bands
from bench.reports import figcache
from bench.reports.costfigs import pareto_front, pareto_points, plot_cost, plot_pareto
from bench.reports.drawing import (
    CLIP_NOTE,
    LOG_BAND_NOTE,
    LOG_METRICS,
    METRIC_LABELS,
    band_edges,
    config_style,
    figure,
    fixed_title_y,
    legend,
    limit,
    line_styles,
    robust_limits,
    series_lines,
    suptitle,
)
from bench.reports.facets import Row, crowded, faceted
from bench.reports.figcache import Drawing
from bench.reports.forest import forest_data, forest_metrics, plot_forest, study_results
from bench.reports.parallel import draw_all
from bench.reports.plotdata import (
    Colour,
    Frames,
    curves_frame,
    frames_of,
    grad_norm_init_data,
    is_ln_transformer,
    load_frames,
    mean_ci,
    one_task,
    palette,
    palette_of,
    probes_frame,
    variant_key,
    with_key,
)
from bench.runs.names import file_name, slug
from bench.runs.primary import primary
from bench.runs.reading import read_runs
from bench.runs.results import ResultsStore

__all__ = [
    "Colour", "Frames", "curves_frame", "grad_norm_init_data", "is_ln_transformer", "line_styles", "load_frames",
    "make_all", "make_every", "palette", "palette_of", "pareto_front", "pareto_points", "plot_cost", "plot_degradation",
    "plot_grad_norm_init", "plot_learning_curves", "plot_loss_vs_time", "plot_pareto", "plot_warmup",
    "probes_frame", "robust_limits", "variant_key",
]  # fmt: skip

_GRAD_LABELS = {
    "weight_grad_norm": "gradient L2 norm of the weight matrices (Linear/Conv)",
    "grad_norm": "gradient L2 norm of all the unit's parameters",
}
_KIND_TITLES = {"attn": "attention sublayer", "ffn": "feed-forward sublayer", "mlp": "MLP layer",
                "conv": "convolutional unit", "": "residual unit"}  # fmt: skip


def eval_curve(df: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The evaluation rows of ``metric``; ``val_error`` (a classifier's primary curve) from the recorded ``val_acc``."""
    part = df[df["split"] == "eval"]
    if metric == "val_error":
        acc = part[part["metric"] == "val_acc"]
        return acc.assign(metric="val_error", value=1.0 - pd.to_numeric(acc["value"], errors="coerce"))
    return part[part["metric"] == metric]


def _label(split: str, metric: str) -> str:
    return METRIC_LABELS.get((split, metric), f"{split} {metric}")


def plot_learning_curves(curves: pd.DataFrame, task: str | None = None, val_metric: str | None = None,
                         colours: Mapping[str, Colour] | None = None, baseline: str | None = None) -> Figure:
    """Training loss (log y) and the evaluation metric (default: the task's primary one) vs step, mean over seeds
    with clipped 95% t-CI bands. Faceted (:func:`bench.reports.facets.faceted`, each panel with ``baseline``) where
    one axis would hold more than a handful of lines. ``colours``: the study's :func:`palette` (default:
    :func:`palette_of` ``curves``)."""
    colours = colours or palette_of(curves)
    df, task = one_task(curves, task)
    df = with_key(df)
    val_metric = val_metric or primary(task).curve
    parts = (("train", "loss", df[(df["split"] == "train") & (df["metric"] == "loss")]),
             ("eval", val_metric, eval_curve(df, val_metric)))
    stats = [(split, metric, mean_ci(part, ["series", "style"], "step", "value", metric))
             for split, metric, part in parts]
    title = f"Learning curves on {task}: mean over seeds, band = {CLIP_NOTE} ({LOG_BAND_NOTE}); gaps = non-finite loss"
    if any(crowded(s) for _, _, s in stats):
        rows = [Row(s, "step", "step", _label(split, metric), metric, metric in LOG_METRICS)
                for split, metric, s in stats]
        return faceted(rows, colours, baseline, title)
    styles = line_styles(df["style"])
    fig, axes = figure(2)
    for ax, (split, metric, s) in zip(axes, stats, strict=True):
        series_lines(ax, s, "step", colours, styles, True, log=metric in LOG_METRICS)
        ylabel = _label(split, metric)
        ax.set(xlabel="step (optimizer updates)", ylabel=ylabel)
        ax.set_title(f"{ylabel.split(' (')[0]} — {task}", y=fixed_title_y(metric in LOG_METRICS))
        limit(ax, metric, log=metric in LOG_METRICS)
    legend(fig, colours, df["series"], styles)
    suptitle(fig, title)
    return fig


def _load_words(bands: Sequence[str]) -> str:
    """The title's words on the load bands the drawn runs were made in: none for one band (the figure unchanged)."""
    if len(bands) < 2:
        return ""
    return (f"; runs made in {len(bands)} load bands ({', '.join(bands)}): x is each run's wall clock at its own "
            "load")


def plot_loss_vs_time(curves: pd.DataFrame, task: str | None = None, metric: str = "val_loss",
                      colours: Mapping[str, Colour] | None = None, baseline: str | None = None,
                      bands: Sequence[str] = ()) -> Figure:
    """Validation loss (log y) against training time: one point per evaluation, at the mean over seeds of the
    time trained up to it (x) and the mean loss (y, clipped 95% t-CI band). What a design buys per second of
    this machine, where a step that costs more counts against it. Faceted as :func:`plot_learning_curves`. Where
    the runs were made in more than one load band (``bands``), the title says so: their seconds were not alike."""
    colours = colours or palette_of(curves)
    df, task = one_task(curves, task)
    part = with_key(df[(df["split"] == "eval") & (df["metric"] == metric)])
    styles = line_styles(part["style"])
    stats = mean_ci(part, ["series", "style"], "step", "value", metric)
    when = part.groupby(["series", "style", "step"])["train_time_s"].mean().rename("time_s").reset_index()
    stats = stats.merge(when, on=["series", "style", "step"]).sort_values(["series", "style", "time_s"])
    ylabel = _label("eval", metric)
    xlabel = "training time (s, timed steps only; mean over seeds)"
    if crowded(stats):
        return faceted([Row(stats, "time_s", xlabel, ylabel, metric, metric in LOG_METRICS)],
                       colours, baseline, f"{ylabel.split(' (')[0]} vs wall-clock — {task}: mean over seeds, band = "
                                          f"{CLIP_NOTE}{_load_words(bands)}")
    fig, (ax,) = figure()
    series_lines(ax, stats, "time_s", colours, styles, True, log=metric in LOG_METRICS)
    ax.set(xlabel=xlabel, ylabel=ylabel)
    loads = _load_words(bands).replace("; ", "\n", 1)
    ax.set_title(f"{ylabel.split(' (')[0]} vs wall-clock — {task}\nmean over seeds, band = {CLIP_NOTE}{loads}",
                 y=fixed_title_y(metric in LOG_METRICS))
    limit(ax, metric, log=metric in LOG_METRICS)
    legend(fig, colours, part["series"], styles)
    return fig


def degradation_data(leaderboard: pd.DataFrame, task: str | None = None) -> tuple[pd.DataFrame, str, str]:
    """The degradation figure's statistics, per series, configuration and depth, of the task's training figure
    (:attr:`bench.runs.primary.Primary.train`: training error for a classifier, training loss for a
    language model) over its ok runs; with that metric and the task."""
    df, task = one_task(leaderboard[leaderboard["status"] == "ok"], task)
    metric = primary(task).train
    df = config_style(with_key(with_derived(df)))
    return mean_ci(df, ["series", "style"], "depth", metric), metric, task


def plot_degradation(leaderboard: pd.DataFrame, task: str | None = None,
                     colours: Mapping[str, Colour] | None = None) -> Figure:
    """The task's final training figure (training error, or training loss for a language model) vs depth, one line
    per variant, clipped 95% CI bars."""
    colours = colours or palette_of(leaderboard)
    stats, metric, task = degradation_data(leaderboard, task)
    styles = line_styles(stats["style"])
    fig, (ax,) = figure()
    series_lines(ax, stats, "depth", colours, styles, False)
    what = primary(task).train_label
    ax.set(xlabel="depth (layers)", ylabel=f"final {what}",
           title=f"Degradation: {what.split(' (')[0]} vs depth — {task}\nmean over seeds, bars = {CLIP_NOTE}")
    limit(ax, metric)
    legend(fig, colours, stats["series"], styles)
    return fig


def plot_grad_norm_init(probes: pd.DataFrame, task: str | None = None,
                        colours: Mapping[str, Colour] | None = None) -> Figure:
    """Gradient norm per unit at step 0 vs its index within its kind (log y): one panel per sublayer kind
    (attention, feed-forward, ...), one line per variant and depth, each point at its unit's index (two models
    with equal norms draw as one line). Plots Xiong et al.'s weight-matrix norm (``weight_grad_norm``) when
    recorded, else the whole-unit ``grad_norm`` (:func:`grad_norm_init_data`)."""
    colours = colours or palette_of(probes)
    stats, metric, task = grad_norm_init_data(probes, task)
    kinds = sorted(stats["kind"].unique(), key=lambda k: (k == "", k))  # rows without a kind: last panel
    styles = line_styles(stats["style"])
    fig, axes = figure(len(kinds))
    ylabel = _GRAD_LABELS[metric]
    for ax, kind in zip(axes, kinds, strict=True):
        series_lines(ax, stats[stats["kind"] == kind], "index", colours, styles, False)
        ax.set(
            xlabel=f"{_KIND_TITLES.get(kind, f'{kind} units')} index (input → output)",
            ylabel=ylabel,
        )
        ax.set_title(_KIND_TITLES.get(kind, f"{kind} units").capitalize(), y=fixed_title_y(True))
        limit(ax, metric, log=True)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # units are whole
    legend(fig, colours, stats["series"], styles)
    suptitle(fig, f"{ylabel.split(' (')[0]} at step 0 — {task}: mean over seeds, bars = {CLIP_NOTE} (≥ 0)")
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
    fig, (ax,) = figure()
    for (series, style, warmup), s in stats.groupby(["series", "style", "warmup"]):
        name = f"{series} ({style})" if several[series] and style else str(series)
        label = f"{name}, warm-up {warmup} steps" if warmup > 0 else f"{name}, no warm-up"
        colour, xs = colours[str(series)], s["step"].to_numpy(dtype=float)
        ax.plot(xs, s["mean"].to_numpy(), color=colour, linestyle="-" if warmup > 0 else "--", label=label)
        edges = band_edges(s["mean"].to_numpy(dtype=float), s["lo"].to_numpy(dtype=float),
                           s["hi"].to_numpy(dtype=float), log=True)
        ax.fill_between(xs, *edges, color=colour, alpha=0.2, linewidth=0)
    ax.set(
        xlabel="step (optimizer updates)",
        ylabel="training loss (cross-entropy, nats)",
        title=f"Post-LN vs Pre-LN, with and without warm-up — {task}\nmean over seeds, band = {CLIP_NOTE} (≥ 0; "
              f"{LOG_BAND_NOTE})",
    )
    limit(ax, "loss", log=True)
    legend(fig, colours, stats["series"], {"warm-up on": ("-", None), "warm-up off": ("--", None)})
    return fig


def make_all(results_dir: str | Path, study: str | None = None, workers: int = 1, cached: bool = True) -> list[Path]:
    """Write every figure there is data for to ``results_dir/plots/`` (``plots/<study>/`` for one study), every
    one with the colours of one :func:`palette` of the runs' variants; a study with claims leads with its forest
    plots, and its crowded curve figures put the claims' baseline in every panel. ``workers`` processes draw them
    (:func:`bench.reports.parallel.draw_all`: the same files as one); with ``cached``, a figure whose data and code
    are those it was last drawn from is not drawn again (:mod:`bench.reports.figcache`)."""
    frames = load_frames(results_dir, study)
    out = Path(results_dir) / "plots" / (file_name(study, "study") if study else "")
    colours = palette_of(frames.leaderboard, frames.curves, frames.probes)
    baseline, forest = None, []
    if study:
        _, results, _ = study_results(Path(results_dir), study, frames.leaderboard, frames.probes, frames.runs)
        data = forest_data(results)
        forest = [Drawing(f"forest_{m}", plot_forest, (data, m, colours)) for m in forest_metrics(data)]
        baseline = str(data["baseline"].mode().iloc[0]) if len(data) else None
    return draw_jobs(out, [*forest, *drawings(frames, baseline, colours)], workers, cached)


def make_every(results_dir: str | Path, workers: int = 1, cached: bool = True) -> list[Path]:
    """``bench plot`` without ``--study``: each study's figures, as its report draws them (:func:`make_all` of the
    study, into ``plots/<study>/``), and the runs that belong to no study pooled into ``plots/``."""
    store = ResultsStore(results_dir)
    board = store.load_leaderboard()
    if board.empty:
        return []
    study = board["study"].fillna("").astype(str)
    paths = [p for s in sorted(set(study) - {""}) for p in make_all(results_dir, s, workers, cached)]
    if (study == "").any():
        board = board[study == ""].reset_index(drop=True)
        runs = read_runs(results_dir, set(board["run_id"]))
        store.warn_missing(board, runs)
        paths += draw_jobs(Path(results_dir) / "plots", drawings(frames_of(board, runs), None), workers, cached)
    return paths


def draw_jobs(out: Path, jobs: list[Drawing], workers: int, cached: bool) -> list[Path]:
    """Draw ``jobs`` into ``out`` (those not up to date, with ``cached``) and record their keys; every job's path."""
    todo = [(out / f"{slug(d.name)}.png", d) for d in jobs]
    stale_jobs, keys = figcache.stale(todo, cached)
    draw_all(stale_jobs, workers)
    figcache.record(stale_jobs, keys)
    return [path for path, _ in todo]


def drawings(frames: Frames, baseline: str | None, colours: Mapping[str, Colour] | None = None) -> list[Drawing]:
    """The figures there is data for in ``frames``, per task, in ``colours`` (default: one :func:`palette` of the
    runs' variants)."""
    board, curves, probes = frames.leaderboard, frames.curves, frames.probes
    colours = colours or palette_of(board, curves, probes)
    ok = with_derived(board[board["status"] == "ok"])
    jobs: list[Drawing] = []
    for task in sorted(board["task"].dropna().unique()):
        t_ok, t_curves = ok[ok["task"] == task], curves[curves["task"] == task]
        if len(t_curves):
            jobs.append(Drawing(f"curves_{task}", plot_learning_curves, (curves, task),
                                {"colours": colours, "baseline": baseline}))
        timed = t_curves[(t_curves["metric"] == "val_loss") & t_curves["train_time_s"].notna()]
        if len(timed):  # the load bands of the runs drawn, named in the title where there are several
            drawn = board[board["run_id"].isin(set(timed["run_id"]))] if "run_id" in timed else board.iloc[:0]
            bands = sorted(load_bands(drawn, frames.runs).dropna().unique())
            jobs.append(Drawing(f"loss_vs_time_{task}", plot_loss_vs_time, (curves, task),
                                {"colours": colours, "baseline": baseline, **({"bands": bands} if len(bands) > 1
                                                                              else {})}))
        trained = with_key(t_ok[t_ok[primary(task).train].notna()]) if primary(task).train in t_ok else t_ok.iloc[:0]
        if len(trained) and (trained.groupby("key")["depth"].nunique() > 1).any():
            jobs.append(Drawing(f"degradation_{task}", plot_degradation, (board, task, colours)))
        grads = probes["metric"].isin(("grad_norm", "weight_grad_norm"))
        if ((probes["task"] == task) & (probes["step"] == 0) & grads).any():
            jobs.append(Drawing(f"grad_norm_init_{task}", plot_grad_norm_init, (probes, task, colours)))
        # a configuration measured in several load bands (a colleague's seed run beside other work): a line or point
        # per band, as the leaderboard and compare keep them apart; else the board as it is
        measured = bool(t_ok[["train_samples_per_s", "peak_mem_mb"]].notna().any().any())
        banded = with_mixed_load_bands(board, frames.runs) if measured else board
        if measured:
            jobs.append(Drawing(f"cost_{task}", plot_cost, (banded, task, colours)))
        final = primary(task).final
        if final in t_ok and (t_ok[final].notna() & t_ok["train_samples_per_s"].notna()).any():
            jobs.append(Drawing(f"pareto_{task}", plot_pareto, (banded, task), {"colours": colours}))
        ln = board[(board["task"] == task) & board["variant"].map(lambda v: is_ln_transformer(str(v)) is not None)]
        if ln["warmup_steps"].fillna(0).gt(0).nunique() == 2 and len(t_curves):
            jobs.append(Drawing(f"warmup_{task}", plot_warmup, (curves, task, colours)))
    return jobs
