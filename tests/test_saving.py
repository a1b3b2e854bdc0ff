"""Figures saved with less re-measuring (bench.reports.drawing.measured_once): the spines of a figure without tick
marks detached from their axes (and still in the layout), and minor ticks that draw nothing turned off; checked on the
layout matplotlib computes, the tight bounding box and the decoded pixels, against the same figure saved as it is."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure
from PIL import Image

from bench.reports import parallel
from bench.reports.drawing import blank, figure, measured_once
from bench.reports.parallel import save

STEPS = np.arange(1.0, 11.0)


def whitegrid(low: float, high: float) -> Figure:
    """Two panels in the figures' style: a linear axis and a log axis from ``low`` to ``high``, titled and labelled."""
    fig, (lin, log) = figure(2)
    lin.plot(STEPS, STEPS / 10, label="acc")
    log.plot(STEPS, np.geomspace(high, low, len(STEPS)), label="loss")
    log.set_yscale("log")
    for ax in (lin, log):
        ax.set(xlabel="step", ylabel="value", title="panel")
    fig.suptitle("two panels")
    return fig


def with_blank_panel() -> Figure:
    fig, (full, empty) = figure(2)
    full.plot(STEPS, STEPS)
    full.set_ylabel("value")
    blank(empty)
    return fig


def ticked() -> Figure:
    """matplotlib's own style: tick marks out of the axes, so the spines' extents reach past the axes."""
    fig = Figure(figsize=(4, 3), layout="constrained")
    ax = fig.subplots()
    ax.plot(STEPS, STEPS**3)
    ax.set_yscale("log")
    return fig


FIGURES: dict[str, Callable[[], Figure]] = {
    "log axis over three decades": lambda: whitegrid(1e-3, 2.0),
    "log axis within one decade": lambda: whitegrid(2.0, 5.0),
    "a blank panel": with_blank_panel,
    "tick marks drawn": ticked,
}


def layout(fig: Figure) -> tuple[tuple[float, ...], list[tuple[float, ...]]]:
    """The figure's tight bounding box and each axes' position, as constrained layout leaves them."""
    fig.draw_without_rendering()
    return tuple(fig.get_tightbbox().bounds), [tuple(ax.get_position().bounds) for ax in fig.axes]


def pixels(fig: Figure) -> np.ndarray:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    buffer.seek(0)
    return np.asarray(Image.open(buffer).convert("RGBA"))


@pytest.mark.parametrize("make", FIGURES.values(), ids=list(FIGURES))
def test_a_figure_measured_once_has_the_same_layout_bounding_box_and_pixels(make) -> None:
    plain, measured = make(), make()
    measured_once(measured)
    assert layout(measured) == layout(plain)  # exactly: the same numbers, not close ones
    a, b = pixels(measured), pixels(plain)
    assert a.shape == b.shape and np.array_equal(a, b)


def test_the_spines_of_a_figure_without_tick_marks_are_detached_and_stay_in_the_layout() -> None:
    fig = whitegrid(1e-3, 2.0)
    measured_once(fig)
    spines = [s for ax in fig.axes for s in ax.spines.values()]
    assert len(spines) == 8 and all(s.axis is None for s in spines)
    assert all(s.get_in_layout() and s.get_visible() for s in spines)  # measured and drawn as before


def test_spines_beside_tick_marks_stay_measured() -> None:
    fig = ticked()
    measured_once(fig)
    (ax,) = fig.axes
    assert ax.spines["left"].axis is ax.yaxis and ax.spines["bottom"].axis is ax.xaxis


def minor_labels(fig: Figure) -> list[bool]:
    """Whether each log y axis of ``fig`` labels its minor ticks."""
    return [ax.yaxis.get_tick_params(which="minor")["labelleft"] for ax in fig.axes if ax.get_yscale() == "log"]


def test_minor_ticks_are_turned_off_only_where_every_label_is_empty() -> None:
    decades, within = whitegrid(1e-3, 2.0), whitegrid(2.0, 5.0)
    measured_once(decades)
    measured_once(within)
    assert minor_labels(decades) == [False]  # 1e-3..2: only the decades are labelled, all major ticks
    assert minor_labels(within) == [True]  # 2..5: matplotlib labels minor ticks (3, 4) on an axis under a decade
    assert any(t.get_text() for t in within.axes[1].yaxis.get_minorticklabels())


def test_figures_are_saved_measured_once_with_the_pixels_of_a_plain_save(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Figure] = []
    monkeypatch.setattr(parallel, "measured_once", lambda fig: (seen.append(fig), measured_once(fig)))
    save(tmp_path / "fig.png", lambda: whitegrid(1e-3, 2.0))
    assert len(seen) == 1 and all(s.axis is None for ax in seen[0].axes for s in ax.spines.values())
    saved = np.asarray(Image.open(tmp_path / "fig.png").convert("RGBA"))
    assert np.array_equal(saved, pixels(whitegrid(1e-3, 2.0)))
