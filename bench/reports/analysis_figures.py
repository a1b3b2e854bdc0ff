"""The figures of the analyses (:mod:`bench.analysis`): what a lesion study, a gradient-correlation measurement
and a loss-landscape slice look like, drawn from the tables the analyses compute.

- :func:`lesion_figure`: Veit et al. 2016, "Residual Networks Behave Like Ensembles of Relatively Shallow
  Networks", Figs. 3 and 5.
- :func:`gradcorr_figure`: Balduzzi et al. 2017, "The Shattered Gradients Problem", Figs. 1-2.
- :func:`landscape_figure`: Li et al. 2018, "Visualizing the Loss Landscape of Neural Nets", Figs. 1 and 5.

Colour = variant, as in the report's figures: a study's analysis figure takes the study's
:func:`bench.reports.plots.palette` (:mod:`bench.reports.analysis_step` passes it), so a design has one colour in
every figure of the study; depth, seed and the rest are told apart by line style.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import LogFormatterSciNotation, LogLocator, MaxNLocator

from bench.analysis.landscape import surface
from bench.analysis.stats import mean_ci, t_ci
from bench.reports.plotdata import variant_key
from bench.reports.plots import Colour, line_styles, palette

_OFFSET = 5.0  # gap between the RMS-normalised derivative traces: excursions beyond 2.5 RMS are rare
_LOG_RATIO = 100.0  # a positive loss spanning more than this factor is drawn on log levels / a log axis


# -- lesions ---------------------------------------------------------------------------------------------------


def plot_lesion(tables: dict[str, pd.DataFrame], path: Path | str, title: str = "",
                colours: Mapping[str, Colour] | None = None) -> Path:
    """Veit et al.'s two views, one line per label (its tables, e.g. the seeds of one model, pooled): the error
    after deleting each single unit, by position (intact: thin dotted), and the error against the number of
    units deleted at once (mean ± std over units, draws and seeds). Returns the figure's path."""
    fig = lesion_figure(tables, title, colours)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return path


def _variant_of(label: str, table: pd.DataFrame) -> str:
    """The variant series (:func:`bench.reports.plotdata.variant_key`) of a table's runs, else its label."""
    names = table["variant"].dropna().unique() if "variant" in table.columns else []
    return variant_key(str(names[0])) if len(names) == 1 else label


def label_colours(labels: Mapping[str, str], colours: Mapping[str, Colour] | None = None
                  ) -> dict[str, tuple[Colour, object]]:
    """``{label: (colour, line style)}`` of series ``{label: variant}``: the colour of the label's variant in
    ``colours`` (the study's palette; default: :func:`bench.reports.plots.palette` of these variants), and a line
    style per label among those of one variant (its depths, seeds), solid first."""
    given = dict(colours) if colours else {}
    own = palette(v for v in labels.values() if v not in given)
    out: dict[str, tuple[Colour, object]] = {}
    for variant in dict.fromkeys(labels.values()):
        mine = [label for label, v in labels.items() if v == variant]
        styles = line_styles(mine)
        for label in mine:
            out[label] = (given.get(variant) or own[variant], styles[label][0])
    return {label: out[label] for label in labels}


def lesion_figure(tables: dict[str, pd.DataFrame], title: str = "", colours: Mapping[str, Colour] | None = None
                  ) -> Figure:
    """The :func:`plot_lesion` figure as a :class:`matplotlib.figure.Figure` (its lines carry the plotted data):
    colour = the tables' variant (``colours``, the study's palette), line style = the rest (depth)."""
    looks = label_colours({label: _variant_of(label, t) for label, t in tables.items()}, colours)
    fig = Figure(figsize=(11, 4), layout="constrained")
    single, many = fig.subplots(1, 2)
    for label, t in tables.items():
        c, ls = looks[label]
        per_unit = t[t["mode"] == "single"].groupby("layer")["error"].mean()
        single.plot(per_unit.index, per_unit.to_numpy(), marker=".", color=c, linestyle=ls, label=label)
        single.axhline(float(t.loc[t["mode"] == "intact", "error"].mean()), color=c, ls=":", lw=1)
        used = t[(t["mode"] != "random") | (t["k"] > 1)]
        curve = used.groupby("k")["error"].agg(["mean", "std"])
        many.errorbar(curve.index, curve["mean"], yerr=curve["std"].fillna(0.0), color=c, linestyle=ls, marker="o",
                      capsize=3, label=label)
    single.set(xlabel="deleted unit (position among all units)", ylabel="validation error",
               title="one unit deleted (thin dotted: none)", ylim=(0, 1))
    many.set(xlabel="units deleted at once", ylabel="validation error", title="k random units deleted (mean ± std)",
             ylim=(0, 1))
    for ax in (single, many):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.legend(*many.get_legend_handles_labels(), loc="outside lower center", ncols=min(len(tables), 6),
               frameon=False, title="colour: variant; line: depth")
    if title:
        fig.suptitle(title)
    return fig


# -- gradient correlation ------------------------------------------------------------------------------------


def _corr_stats(df: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """:func:`bench.analysis.stats.mean_ci` over seeds, the interval clipped to a correlation's range [-1, 1]."""
    st = mean_ci(df, ["variant"], x, y)
    return st.assign(lo=st["lo"].clip(-1, 1), hi=st["hi"].clip(-1, 1))


def _deepest(df: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """Rows of ``df`` at each variant's largest measured depth."""
    top = summary.groupby("variant")["depth"].max()
    return df[df["depth"] == df["variant"].map(top)]


def gradcorr_figure(summary: pd.DataFrame, acf: pd.DataFrame, series: pd.DataFrame,
                    colours: Mapping[str, Colour] | None = None) -> Figure:
    """Three panels: neighbour correlation vs depth (mean over seeds, 95% t-CI band); ACF vs lag at each
    variant's largest depth; the directional derivative along the line there (lowest seed), each divided by its
    RMS and offset by 5 per variant — smooth (correlated) vs white noise (shattered). Colour = variant
    (``colours``, the study's palette; default: :func:`bench.reports.plots.palette` of these variants)."""
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(17, 4.8), layout="constrained")
        left, mid, right = fig.subplots(1, 3)
    names = sorted(summary["variant"].unique())
    keys = {v: variant_key(str(v)) for v in names}
    given = dict(colours) if colours else {}
    own = palette(k for k in keys.values() if k not in given)
    colour_of = {v: given.get(k) or own[k] for v, k in keys.items()}
    for v in names:
        colour = colour_of[v]
        st = _corr_stats(summary[summary["variant"] == v], "depth", "neighbor_corr")
        left.plot(st["depth"], st["mean"], "o-", color=colour, label=v)
        left.fill_between(st["depth"], st["lo"], st["hi"], color=colour, alpha=0.2, linewidth=0)
        deep = _deepest(acf[acf["variant"] == v], summary)
        sa = _corr_stats(deep, "lag", "acf")
        mid.plot(sa["lag"], sa["mean"], color=colour, label=f"{v} (depth {deep['depth'].iloc[0]})")
        mid.fill_between(sa["lag"], sa["lo"], sa["hi"], color=colour, alpha=0.2, linewidth=0)
    mid.axhline(1 / math.e, color="0.4", linestyle=":", linewidth=1, label="1/e (correlation length)")
    left.axhline(0.0, color="0.4", linewidth=0.8)
    left.set_ylim(-0.1, 1.05)  # linear: a shattered (white-noise) gradient sits at 0 and may dip below it
    left.set(xlabel="depth (layers)", ylabel="correlation of neighbouring gradients",
             title="Neighbour correlation vs depth (mean, 95% CI over seeds)")  # fmt: skip
    mid.set(xlabel="lag (points along the line)", ylabel="mean Pearson corr(g_i, g_i+lag)",
            title="Gradient autocorrelation at the largest depth")  # fmt: skip
    deep = _deepest(series, summary)
    for i, v in enumerate(names):
        part = deep[deep["variant"] == v]
        part = part[part["seed"] == part["seed"].min()].sort_values("t")
        y = part["dfdt"].to_numpy(dtype=float)
        rms = float(np.sqrt(np.mean(y**2))) or 1.0
        right.plot(part["t"], y / rms + _OFFSET * i, color=colour_of[v], linewidth=1,
                   label=f"{v} (depth {part['depth'].iloc[0]}, seed {part['seed'].iloc[0]})")  # fmt: skip
    right.set(xlabel="t (position on the line x0 + t d)", ylabel=f"df/dt ÷ its RMS, offset {_OFFSET:g} per variant",
              title="Derivative along the line at the largest depth")  # fmt: skip
    handles = [Line2D([], [], color=colour_of[v], linewidth=2, label=v) for v in names]
    handles.append(Line2D([], [], color="0.4", linestyle=":", linewidth=1, label="1/e (correlation length)"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 6), fontsize="small",
               frameon=False, title="colour: variant (middle and right: its largest depth)")
    fig.suptitle("Shattered gradients at initialisation (Balduzzi et al. 2017, Fig. 1-2)")
    return fig


def plot_gradcorr(summary: pd.DataFrame, acf: pd.DataFrame, series: pd.DataFrame, path: Path | str,
                  colours: Mapping[str, Colour] | None = None) -> Path:
    """Write :func:`gradcorr_figure` as a PNG at ``path`` (parent directories created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    gradcorr_figure(summary, acf, series, colours).savefig(path, dpi=120)
    return path


# -- loss landscapes -------------------------------------------------------------------------------------------


def _levels(frames: Mapping[str, pd.DataFrame]) -> tuple[np.ndarray, Normalize]:
    """Contour levels shared by every panel: 16 over the finite losses, log-spaced when they span > 100×."""
    losses = np.concatenate([f["loss"].to_numpy(float) for f in frames.values()])
    losses = losses[np.isfinite(losses)]
    if not len(losses):
        raise ValueError("no finite loss to draw")
    lo, hi = float(losses.min()), float(losses.max())
    if hi <= lo:
        hi = lo + max(abs(lo), 1.0) * 1e-6
    if lo > 0 and hi / lo > _LOG_RATIO:
        return np.geomspace(lo, hi, 16), LogNorm(lo, hi)
    return np.linspace(lo, hi, 16), Normalize(lo, hi)


def landscape_figure(frames: Mapping[str, pd.DataFrame], title: str = "", colours: Mapping[str, Colour] | None = None,
                     variants: Mapping[str, str] | None = None) -> Figure:
    """1-D slices: loss (and accuracy, where every frame has it) vs α, one line per label; 2-D slices: one filled
    contour panel per label on shared levels and one colour bar. The origin (trained weights) is marked.
    Colour = the label's variant (``variants``: ``{label: variant series}``, default the label itself) in ``colours``
    (the study's palette); labels of one variant (seeds, depths) differ by line style."""
    if not frames:
        raise ValueError("no slices to plot")
    dims = {2 if "beta" in f.columns else 1 for f in frames.values()}
    if len(dims) != 1:
        raise ValueError("cannot plot 1-D and 2-D slices in one figure")

    labels = list(frames)
    looks = label_colours({label: (variants or {}).get(label, label) for label in labels}, colours)
    with sns.axes_style("whitegrid"):
        if dims == {1}:
            with_acc = all("acc" in f.columns for f in frames.values())
            fig = Figure(figsize=(6.4 * (1 + with_acc) + 1.6, 4.8), layout="constrained")
            axes = fig.subplots(1, 1 + with_acc, squeeze=False)[0]
            for label in labels:
                part = frames[label].sort_values("alpha")
                colour, ls = looks[label]
                for ax, col in zip(axes, ("loss", "acc"), strict=False):
                    ax.plot(part["alpha"], part[col], color=colour, linestyle=ls, marker="o", markersize=3, label=label)
            losses = np.concatenate([f["loss"].to_numpy(float) for f in frames.values()])
            losses = losses[np.isfinite(losses)]
            if len(losses) and losses.min() > 0 and losses.max() / losses.min() > _LOG_RATIO:
                axes[0].set_yscale("log")
            axes[0].set(xlabel="α (filter-normalised direction)", ylabel="loss", title="loss along the slice")
            if with_acc:
                axes[1].set(
                    xlabel="α (filter-normalised direction)",
                    ylabel="accuracy (fraction)",
                    title="accuracy along the slice",
                    ylim=(-0.02, 1.02),
                )
            for ax in axes:
                ax.axvline(0.0, color="0.5", linestyle=":", linewidth=1)
            if any(labels):
                fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center",
                           ncols=min(len(labels), 6), fontsize="small", frameon=False)
        else:
            levels, norm = _levels(frames)
            ncols = min(len(frames), 4)
            nrows = -(-len(frames) // ncols)
            fig = Figure(figsize=(4.4 * ncols + 1.2, 4.2 * nrows), layout="constrained")
            axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
            for ax, label in zip(axes, labels, strict=False):
                alpha, beta, z = surface(frames[label])
                masked = np.ma.masked_invalid(z.T)  # rows along β for contourf
                filled = ax.contourf(alpha, beta, masked, levels=levels, norm=norm, cmap="viridis")
                ax.contour(alpha, beta, masked, levels=levels, colors="k", linewidths=0.4)
                ax.plot([0.0], [0.0], marker="*", color="white", markeredgecolor="k", markersize=10)
                ax.set(xlabel="α (direction 1)", ylabel="β (direction 2)", title=label, aspect="equal")
            for ax in axes[len(labels) :]:
                ax.set_visible(False)
            scale = "log-spaced" if isinstance(norm, LogNorm) else "evenly spaced"
            bar = fig.colorbar(filled, ax=list(axes[: len(labels)]), label=f"loss ({scale} levels, shared)")
            if isinstance(norm, LogNorm):  # ticks at decades, not at the (unround) levels
                bar.locator, bar.formatter = LogLocator(), LogFormatterSciNotation()
            else:
                bar.locator = MaxNLocator(6)
            bar.update_ticks()
    if title:
        fig.suptitle(title)
    return fig


def plot_landscape(
    frames: Mapping[str, pd.DataFrame], path: Path | str, title: str = "", colours: Mapping[str, Colour] | None = None,
    variants: Mapping[str, str] | None = None,
) -> Path:
    """Write :func:`landscape_figure` of ``{label: slice}`` to ``path`` (parent folders created); return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    landscape_figure(frames, title, colours, variants).savefig(path, dpi=120)
    return path


def plot_slice(frame: pd.DataFrame, path: Path | str, title: str = "") -> Path:
    """One slice's figure (:func:`plot_landscape` with a single, unlabelled slice)."""
    return plot_landscape({"": frame}, path, title)


# -- cost at a paper's shape -----------------------------------------------------------------------------------


COST_METRICS = {"step_overhead": "step time", "mem_overhead": "step memory", "flops_overhead": "training FLOPs",
                "params_overhead": "parameters"}


def cost_figure(summary: pd.DataFrame, colours: Mapping[str, Colour] | None = None) -> Figure:
    """One panel per overhead (step time, step memory, FLOPs, parameters): a bar per design and mode, the mean over
    the timed rounds with its 95% CI (Student t), in percent of the baseline's; 0 is the baseline."""
    modes = list(dict.fromkeys(summary["mode"]))
    names = list(dict.fromkeys(summary["variant"]))
    colour_of = label_colours({n: n for n in names}, colours)
    fig = Figure(figsize=(4.2 * len(COST_METRICS), 0.45 * len(names) * len(modes) + 1.8), layout="constrained")
    axes = fig.subplots(1, len(COST_METRICS), sharey=True)
    ticks = [f"{n} ({m})" if len(modes) > 1 else n for n in names for m in modes]
    for ax, (metric, what) in zip(axes, COST_METRICS.items(), strict=True):
        for i, (name, mode) in enumerate((n, m) for n in names for m in modes):
            values = summary.loc[(summary["variant"] == name) & (summary["mode"] == mode), metric].to_numpy(float)
            s = t_ci(values)
            ax.barh(i, 100 * s["mean"], xerr=100 * s["ci"] if s["n"] > 1 else None, color=colour_of[name][0],
                    hatch="//" if mode == "compiled" else None, capsize=3)
        ax.axvline(0, color="0.3", linewidth=0.8)
        ax.set(xlabel=f"{what}: % over the baseline", title=what)
    axes[0].set_yticks(range(len(ticks)), ticks)
    axes[0].invert_yaxis()
    row = summary.iloc[0]
    fig.suptitle(f"What each design adds to {row['baseline']} at {row['shape']} ({row['device']}, batch "
                 f"{row['batch']}; mean and 95% CI over the timed rounds)")
    return fig


def plot_cost(summary: pd.DataFrame, path: Path | str, colours: Mapping[str, Colour] | None = None) -> Path:
    """Write :func:`cost_figure` as a PNG at ``path`` (parent directories created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cost_figure(summary, colours).savefig(path, dpi=120)
    return path
