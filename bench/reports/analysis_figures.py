"""The figures of the analyses (:mod:`bench.analysis`): what a lesion study, a gradient-correlation measurement
and a loss-landscape slice look like, drawn from the tables the analyses compute.

- :func:`lesion_figure`: Veit et al. 2016, "Residual Networks Behave Like Ensembles of Relatively Shallow
  Networks", Figs. 3 and 5.
- :func:`gradcorr_figure`: Balduzzi et al. 2017, "The Shattered Gradients Problem", Figs. 1-2.
- :func:`landscape_figure`: Li et al. 2018, "Visualizing the Loss Landscape of Neural Nets", Figs. 1 and 5.

Colours are the report's (:func:`bench.reports.plots.variant_colour`), so a design has one colour everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatterSciNotation, LogLocator, MaxNLocator

from bench.analysis.landscape import surface
from bench.analysis.stats import mean_ci
from bench.reports.plots import variant_colour

_OFFSET = 5.0  # gap between the RMS-normalised derivative traces: excursions beyond 2.5 RMS are rare
_LOG_RATIO = 100.0  # a positive loss spanning more than this factor is drawn on log levels / a log axis


# -- lesions ---------------------------------------------------------------------------------------------------


def plot_lesion(tables: dict[str, pd.DataFrame], path: Path | str, title: str = "") -> Path:
    """Veit et al.'s two views, one line per label (its tables, e.g. the seeds of one model, pooled): the error
    after deleting each single unit, by position (the intact error dashed), and the error against the number of
    units deleted at once (mean ± std over units, draws and seeds). Returns the figure's path."""
    fig = lesion_figure(tables, title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return path


def lesion_figure(tables: dict[str, pd.DataFrame], title: str = "") -> Figure:
    """The :func:`plot_lesion` figure as a :class:`matplotlib.figure.Figure` (its lines carry the plotted data)."""
    colours = dict(zip(tables, sns.color_palette("colorblind", len(tables)), strict=True))
    fig = Figure(figsize=(11, 4))
    single, many = fig.subplots(1, 2)
    for label, t in tables.items():
        c = colours[label]
        per_unit = t[t["mode"] == "single"].groupby("layer")["error"].mean()
        single.plot(per_unit.index, per_unit.to_numpy(), marker=".", color=c, label=label)
        single.axhline(float(t.loc[t["mode"] == "intact", "error"].mean()), color=c, ls="--", lw=1)
        used = t[(t["mode"] != "random") | (t["k"] > 1)]
        curve = used.groupby("k")["error"].agg(["mean", "std"])
        many.errorbar(curve.index, curve["mean"], yerr=curve["std"].fillna(0.0), color=c, marker="o", capsize=3,
                      label=label)
    single.set(xlabel="deleted unit (position among all units)", ylabel="validation error",
               title="one unit deleted (dashed: none)", ylim=(0, 1))
    many.set(xlabel="units deleted at once", ylabel="validation error", title="k random units deleted (mean ± std)",
             ylim=(0, 1))
    for ax in (single, many):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    many.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
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


def gradcorr_figure(summary: pd.DataFrame, acf: pd.DataFrame, series: pd.DataFrame) -> Figure:
    """Three panels: neighbour correlation vs depth (mean over seeds, 95% t-CI band); ACF vs lag at each
    variant's largest depth; the directional derivative along the line there (lowest seed), each divided by its
    RMS and offset by 5 per variant — smooth (correlated) vs white noise (shattered)."""
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(17, 4.8), layout="constrained")
        left, mid, right = fig.subplots(1, 3)
    names = sorted(summary["variant"].unique())
    for v in names:
        colour = variant_colour(v)
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
        right.plot(part["t"], y / rms + _OFFSET * i, color=variant_colour(v), linewidth=1,
                   label=f"{v} (depth {part['depth'].iloc[0]}, seed {part['seed'].iloc[0]})")  # fmt: skip
    right.set(xlabel="t (position on the line x0 + t d)", ylabel=f"df/dt ÷ its RMS, offset {_OFFSET:g} per variant",
              title="Derivative along the line at the largest depth")  # fmt: skip
    for ax in (left, mid, right):
        ax.legend(fontsize="small")
    fig.suptitle("Shattered gradients at initialisation (Balduzzi et al. 2017, Fig. 1-2)")
    return fig


def plot_gradcorr(summary: pd.DataFrame, acf: pd.DataFrame, series: pd.DataFrame, path: Path | str) -> Path:
    """Write :func:`gradcorr_figure` as a PNG at ``path`` (parent directories created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    gradcorr_figure(summary, acf, series).savefig(path, dpi=120)
    return path


# -- loss landscapes -------------------------------------------------------------------------------------------


Colour = tuple[float, float, float]


def _colours(labels: Sequence[str], given: Mapping[str, Colour] | None) -> list[Colour]:
    """``given[label]``, else the project's colour of the label (:func:`bench.reports.plots.variant_colour`; an empty
    label gets tab10's first); tab10 by position for all when two labels would share a colour."""
    tab10 = sns.color_palette("tab10", max(len(labels), 1))
    colours = [
        given[label] if given and label in given else variant_colour(label) if label else tab10[0] for label in labels
    ]
    return colours if len(set(colours)) == len(colours) else list(tab10)


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


def landscape_figure(frames: Mapping[str, pd.DataFrame], title: str = "", colours: Mapping[str, Colour] | None = None
                     ) -> Figure:
    """1-D slices: loss (and accuracy, where every frame has it) vs α, one line per label; 2-D slices: one filled
    contour panel per label on shared levels and one colour bar. The origin (trained weights) is marked.
    ``colours`` maps labels to line colours (e.g. ``variant_colour(variant)`` when labels are run names)."""
    if not frames:
        raise ValueError("no slices to plot")
    dims = {2 if "beta" in f.columns else 1 for f in frames.values()}
    if len(dims) != 1:
        raise ValueError("cannot plot 1-D and 2-D slices in one figure")

    labels = list(frames)
    line_colours = _colours(labels, colours)
    with sns.axes_style("whitegrid"):
        if dims == {1}:
            with_acc = all("acc" in f.columns for f in frames.values())
            fig = Figure(figsize=(6.4 * (1 + with_acc) + 1.6, 4.8), layout="constrained")
            axes = fig.subplots(1, 1 + with_acc, squeeze=False)[0]
            for label, colour in zip(labels, line_colours, strict=True):
                part = frames[label].sort_values("alpha")
                for ax, col in zip(axes, ("loss", "acc"), strict=False):
                    ax.plot(part["alpha"], part[col], color=colour, marker="o", markersize=3, label=label)
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
                fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right upper", fontsize="small")
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
    frames: Mapping[str, pd.DataFrame], path: Path | str, title: str = "", colours: Mapping[str, Colour] | None = None
) -> Path:
    """Write :func:`landscape_figure` of ``{label: slice}`` to ``path`` (parent folders created); return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    landscape_figure(frames, title, colours).savefig(path, dpi=120)
    return path


def plot_slice(frame: pd.DataFrame, path: Path | str, title: str = "") -> Path:
    """One slice's figure (:func:`plot_landscape` with a single, unlabelled slice)."""
    return plot_landscape({"": frame}, path, title)
