"""Figures drawn again only when their data or code changed (bench.reports.figcache), and `bench plot` without
--study drawing each study's figures as its report does: checked on decoded pixels and file modification times."""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from bench.cli import main
from bench.reports import facets, plots
from bench.reports.drawing import fixed_title_y
from bench.reports.facets import Row, faceted
from bench.reports.figcache import KEY_FILE, Drawing, Keys, read_keys
from bench.runs.results import ResultsStore

OLD = 1_000_000_000  # a modification time (2001) no figure drawn now can have


def add_run(store: ResultsStore, study: str, variant: str, depth: int, seed: int) -> None:
    """A run with curves and a final accuracy, and no probes or cost figures: two figures per study, quick to draw."""
    run_id = f"{study or 'none'}-{variant}{depth}-s{seed}"
    acc = 0.9 - depth / 200 * (variant == "plain") + seed / 100
    row = {"run_id": run_id, "variant": variant, "family": "cifar", "depth": depth, "task": "digits", "seed": seed,
           "status": "ok", "final_train_acc": acc, "final_val_acc": acc - 0.05, "study": study}
    curves = {"train": [{"step": s, "loss": (2.0 + depth / 100 + seed / 10) / (s + 1)} for s in range(5)],
              "eval": [{"step": s, "val_acc": acc * s / 4} for s in (0, 4)]}
    store.append(row, {"run_id": run_id, "row": row, "config": {}, "curves": curves, "probes": []})


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("results")
    store = ResultsStore(root)
    for study, names, depths in (("alpha", ("plain", "resnet"), (20, 56)), ("beta", ("resnet", "preact"), (20,))):
        for variant in names:
            for depth in depths:
                for seed in (0, 1):
                    add_run(store, study, variant, depth, seed)
    add_run(store, "", "plain", 20, 0)  # a run of no study
    return root


def pixels(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGBA"))


def same_pixels(a: Path, b: Path) -> bool:
    x, y = pixels(a), pixels(b)
    return x.shape == y.shape and bool((x == y).all())


@pytest.fixture(scope="module")
def alpha(results: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of ``results`` with study alpha's figures drawn."""
    root = tmp_path_factory.mktemp("alpha") / "r"
    shutil.copytree(results, root)
    assert sorted(p.name for p in plots.make_all(root, "alpha")) == ["curves_digits.png", "degradation_digits.png"]
    return root


@pytest.fixture()
def drawn(alpha: Path, tmp_path: Path) -> tuple[Path, list[Path], dict[str, np.ndarray]]:
    """A copy of ``alpha``, its figures' modification times set to OLD, and their pixels."""
    root = tmp_path / "r"
    shutil.copytree(alpha, root)
    paths = [root / "plots" / "alpha" / name for name in ("curves_digits.png", "degradation_digits.png")]
    for p in paths:
        os.utime(p, ns=(OLD * 10**9, OLD * 10**9))
    return root, paths, {p.name: pixels(p) for p in paths}


def redrawn(paths: list[Path]) -> list[str]:
    return sorted(p.name for p in paths if p.stat().st_mtime_ns != OLD * 10**9)


def unchanged_pixels(paths: list[Path], before: dict[str, np.ndarray]) -> bool:
    return all(np.array_equal(pixels(p), before[p.name]) for p in paths)


def test_plot_without_study_draws_each_studys_report_figures(results, tmp_path):
    plotted, reported = tmp_path / "plotted", tmp_path / "reported"
    shutil.copytree(results, plotted)
    shutil.copytree(results, reported)
    assert main(["plot", "--results-dir", str(plotted), "--jobs", "1"]) == 0
    for study in ("alpha", "beta"):
        assert main(["report", "--results-dir", str(reported), "--study", study, "--jobs", "1"]) == 0
    for study, names in (("alpha", ["curves_digits.png", "degradation_digits.png"]), ("beta", ["curves_digits.png"])):
        assert sorted(p.name for p in (plotted / "plots" / study).glob("*.png")) == names
        for name in names:  # the report's figures, to the pixel
            assert same_pixels(plotted / "plots" / study / name, reported / "plots" / study / name), (study, name)
    # the run of no study alone in plots/, as a results folder of that run alone draws it (no pooled figure)
    assert sorted(p.name for p in (plotted / "plots").glob("*.png")) == ["curves_digits.png"]
    alone = tmp_path / "alone"
    add_run(ResultsStore(alone), "", "plain", 20, 0)
    assert plots.make_all(alone) == [alone / "plots" / "curves_digits.png"]
    assert same_pixels(plotted / "plots" / "curves_digits.png", alone / "plots" / "curves_digits.png")


def test_an_unchanged_figure_is_not_drawn_again(drawn):
    root, paths, before = drawn
    assert plots.make_all(root, "alpha") == paths
    assert redrawn(paths) == []
    assert unchanged_pixels(paths, before)


def test_a_stale_key_draws_its_figure_again(drawn):
    root, paths, before = drawn
    keys = root / "plots" / "alpha" / KEY_FILE
    data = json.loads(keys.read_text())
    data["figures"]["degradation_digits.png"]["key"] = "0" * 64  # drawn from other data or code
    keys.write_text(json.dumps(data))
    plots.make_all(root, "alpha")
    assert redrawn(paths) == ["degradation_digits.png"]
    assert unchanged_pixels(paths, before)
    assert json.loads(keys.read_text())["figures"]["degradation_digits.png"]["key"] != "0" * 64  # the new key recorded


def test_a_damaged_key_file_draws_every_figure_again(drawn):
    root, paths, before = drawn
    (root / "plots" / "alpha" / KEY_FILE).write_bytes(b'{"format": 1, "figures": {"curves_')  # cut short
    plots.make_all(root, "alpha")
    assert redrawn(paths) == ["curves_digits.png", "degradation_digits.png"]
    assert unchanged_pixels(paths, before)
    plots.make_all(root, "alpha")  # the key file written again: nothing more to draw
    assert all(p.stat().st_mtime_ns > OLD * 10**9 for p in paths)


@pytest.mark.parametrize("text", ["", "[]", "\x00\xff", '{"format": 2, "figures": {}}', '{"format": 1, "figures": []}',
                                  '{"format": 1, "figures": {"a.png": {"key": "k"}}}'])
def test_a_key_file_that_is_not_one_holds_no_keys(tmp_path, text):
    (tmp_path / KEY_FILE).write_text(text, encoding="utf-8")
    assert read_keys(tmp_path) == {}


def test_a_png_changed_on_disk_is_drawn_again(drawn):
    root, paths, before = drawn
    png = root / "plots" / "alpha" / "degradation_digits.png"
    Image.fromarray(before[png.name][::-1].copy()).save(png)  # not the PNG written for its key
    os.utime(png, ns=(OLD * 10**9, OLD * 10**9))
    plots.make_all(root, "alpha")
    assert redrawn(paths) == ["degradation_digits.png"]
    assert unchanged_pixels(paths, before)


def test_no_cache_draws_every_figure(drawn):
    root, paths, before = drawn
    assert main(["plot", "--results-dir", str(root), "--study", "alpha", "--jobs", "1", "--no-cache"]) == 0
    assert redrawn(paths) == ["curves_digits.png", "degradation_digits.png"]
    assert unchanged_pixels(paths, before)


def test_a_key_follows_the_data_and_the_arguments(results):
    curves = plots.load_frames(results, "alpha").curves
    keys = Keys()
    key = keys.key(Drawing("c", plots.plot_learning_curves, (curves, "digits")))
    assert key == Keys().key(Drawing("c", plots.plot_learning_curves, (curves.copy(), "digits")))
    changed = curves.copy()
    changed.loc[changed.index[-1], "value"] += 1e-9
    assert keys.key(Drawing("c", plots.plot_learning_curves, (changed, "digits"))) != key
    assert keys.key(Drawing("c", plots.plot_learning_curves, (curves, "digits"), {"baseline": "plain"})) != key
    assert keys.key(Drawing("c", plots.plot_loss_vs_time, (curves, "digits"))) != key
    assert keys.key(Drawing("c", plots.plot_learning_curves, (curves, object()))) is None  # no stable key: drawn


def _png(fig) -> np.ndarray:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    buffer.seek(0)
    return np.asarray(Image.open(buffer).convert("RGBA"))


def test_a_pinned_title_lands_where_matplotlib_places_it(results, monkeypatch):
    """A log-axis panel's title at fixed_title_y: the same pixels as matplotlib's automatic placement (a faceted
    figure and an unfaceted one), which is what the pinning skips."""
    steps = np.arange(5.0)
    stats = pd.DataFrame([{"series": s, "style": "depth 20", "step": x, "mean": m * 10 ** -x, "lo": m * 10 ** -x / 2,
                           "hi": m * 10 ** -x * 2, "ci": 1.0} for s, m in (("plain", 3.0), ("resnet", 2.0))
                          for x in steps])
    colours = {"plain": (0.1, 0.2, 0.7), "resnet": (0.8, 0.3, 0.1)}
    row = Row(stats, "step", "step", "training loss", "loss", True)
    curves = plots.load_frames(results, "alpha").curves
    draw = [lambda: faceted([row], colours, "plain", "t"), lambda: plots.plot_learning_curves(curves, colours=colours)]
    pinned = [_png(d()) for d in draw]
    monkeypatch.setattr(facets, "fixed_title_y", lambda log: None)
    monkeypatch.setattr(plots, "fixed_title_y", lambda log: None)
    automatic = [_png(d()) for d in draw]
    assert [a.shape == b.shape and (a == b).all() for a, b in zip(pinned, automatic, strict=True)] == [True, True]
    assert fixed_title_y(True) == 1.0 and fixed_title_y(False) is None  # a linear axis may have an offset text
