"""bench.reports.plots: figures checked by their data (lines, scales, labels, colours), from a fake results dir."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import seaborn as sns
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from torch import nn

import variants
from bench.reports import plots
from bench.reports.drawing import CLIP_NOTE
from bench.runs.config import RunConfig
from bench.runs.results import ResultsStore
from variants import registry

SEEDS = (0, 1, 2)
# final train accuracy per (variant, depth, seed)
ACC = {("plain", 20): (0.95, 0.96, 0.97), ("plain", 56): (0.80, 0.82, 0.84),
       ("resnet", 20): (0.96, 0.97, 0.98), ("resnet", 56): (0.98, 0.99, 1.00)}  # fmt: skip


def loss_curve(variant: str, depth: int, seed: int, warmup: int) -> list[float]:
    base = {"plain": 2.0, "resnet": 1.5, "postln": 3.0, "preln": 2.5}[variant] + depth / 100 + seed / 10
    return [base / (s + 1) + (1.0 if warmup == 0 and variant == "postln" else 0.0) for s in range(5)]


def add_run(store: ResultsStore, variant: str, depth: int, seed: int, task: str = "digits", **row) -> None:
    warmup = row.pop("warmup_steps", 0)
    run_id = f"{variant}{depth}-{task}-w{warmup}-s{seed}"
    acc = ACC.get((variant, depth), (0.5, 0.5, 0.5))[seed]
    full = {"run_id": run_id, "variant": variant, "family": row.pop("family", "cifar"), "depth": depth, "task": task,
            "seed": seed, "status": "ok", "final_train_acc": acc, "final_val_acc": acc - 0.05,
            "train_samples_per_s": 1000.0 * 20 / depth + seed, "peak_mem_mb": 10.0 * depth + seed,
            "warmup_steps": warmup} | row  # fmt: skip
    losses = loss_curve(variant, depth, seed, warmup)
    curves = {
        "train": [{"step": s, "loss": v, "lr": 0.1} for s, v in enumerate(losses)] + [{"step": 5, "loss": None}],
        "eval": [{"step": s, "epoch": s / 4, "wall_s": 1.0, "val_acc": acc * s / 4} for s in (0, 4)],
    }
    probes = [{"step": 0, "layer": i, "block": f"b{i}", "metric": "grad_norm", "value": (i + 1) * (seed + 1) * depth}
              for i in range(3)]  # fmt: skip
    probes += [{"step": 4, "layer": 0, "block": "b0", "metric": "grad_norm", "value": 99.0}]
    store.append(full, {"run_id": run_id, "row": full, "config": {}, "curves": curves, "probes": probes})


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("results")
    store = ResultsStore(root)
    for variant, depth in ACC:
        for seed in SEEDS:
            add_run(store, variant, depth, seed)
    for variant in ("postln", "preln"):
        for warmup in (0, 50):
            for seed in (0, 1):
                add_run(store, variant, 6, seed, task="copy", family="transformer", warmup_steps=warmup)
    return root, plots.load_frames(root)


def line(ax, label: str):
    found = [ln for ln in ax.get_lines() if ln.get_label() == label]
    assert len(found) == 1, [ln.get_label() for ln in ax.get_lines()]
    return found[0]


def legend_labels(fig) -> list[str]:
    (legend,) = fig.legends  # one legend per figure, not one per panel
    return [t.get_text() for t in legend.get_texts()]


def assert_labelled(ax) -> None:
    assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()


def assert_legend_outside(fig) -> None:
    """The figure's single legend is drawn inside the figure, clear of every axes and every title, so it covers
    neither data nor a title."""
    FigureCanvasAgg(fig).draw()
    (legend,) = fig.legends
    box = legend.get_window_extent()
    assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0 and box.y1 <= fig.bbox.y1
    titles = [t for t in (fig._suptitle, *(ax.title for ax in fig.axes)) if t is not None and t.get_text()]
    assert titles
    for ax in fig.axes:
        assert ax.get_legend() is None and not box.overlaps(ax.get_window_extent())
    for title in titles:
        assert not box.overlaps(title.get_window_extent()), title.get_text()


def assert_fraction_axis(ax) -> None:
    low, high = ax.get_ylim()
    assert low >= -0.02 and high <= 1.02


def band_ys(ax) -> np.ndarray:
    """Every y of the CI bands (fill_between polygons) of an axes."""
    polys = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert polys
    return np.concatenate([path.vertices[:, 1] for c in polys for path in c.get_paths()])


def bar_ys(ax) -> np.ndarray:
    """Every y of the CI error bars (vertical LineCollections) of an axes."""
    segs = [seg for c in ax.collections if isinstance(c, LineCollection) for seg in c.get_segments()]
    assert segs
    return np.concatenate([np.asarray(seg)[:, 1] for seg in segs])


def cie_lab(rgb) -> np.ndarray:
    """CIE L*a*b* (D65) of sRGB colours in [0, 1]: the space where a distance of ~2.3 is just noticeable."""
    c = np.asarray(rgb, dtype=float)
    c = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    m = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    xyz = c @ m.T / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], axis=-1)


def test_palette_maps_a_studys_sorted_variants_to_well_separated_colours():
    """One colour per variant, from the study's sorted variant list: tab10 in turn, whatever order they come in."""
    tab10 = [tuple(c) for c in sns.color_palette("tab10")]
    p = plots.palette(["skipinit", "plain", "fixup", "resnet", "plain"])
    assert p == {"fixup": tab10[0], "plain": tab10[1], "resnet": tab10[2], "skipinit": tab10[3]}
    # The frontier study's 15 designs: 15 colours, no two closer than 17 in CIE L*a*b* (SkipInit and the
    # un-normalised net are no longer two near-identical blues).
    frontier = ["admin", "b2t", "deepnorm", "denseformer", "hybridnorm", "hyper_connections", "laurel", "llama_like",
                "mhc", "ngpt", "postln", "preln", "resi_dual", "t_fixup", "value_residual"]  # fmt: skip
    for names in (frontier, [f"v{i:02d}" for i in range(20)]):  # and all 20 of the two palettes
        lab = cie_lab(list(plots.palette(names).values()))
        distance = np.linalg.norm(lab[:, None] - lab[None], axis=-1)
        assert distance[np.triu_indices(len(names), 1)].min() > 17
    many = plots.palette(f"v{i:02d}" for i in range(25))  # past the two palettes: still all distinct
    assert len(set(many.values())) == 25


def test_variant_key_comes_from_the_registry_not_the_name():
    assert plots.variant_key("resnet56", 56) == "resnet"
    assert plots.variant_key("resnet", 56) == "resnet"  # the base at any depth
    assert plots.variant_key("resnet18", 18) == "resnet_imagenet"  # the preset's base, not a name prefix
    assert plots.variant_key("rezero_resnet56", 56) == "rezero"
    assert plots.variant_key("highway_mlp20", 20) == "highway_mlp"
    assert plots.variant_key("preact_resnet110", 110) == "preact"
    # Presets that pin more than depth keep what they set apart, so designs never share a series.
    assert plots.variant_key("preact_resnet164", 164) == "preact (block=bottleneck, shortcut=B)"
    assert plots.variant_key("preact_resnet1001", 1001) == "preact (block=bottleneck, shortcut=B)"
    assert plots.variant_key("densenet_bc100_k12", 100) == "densenet (bc=True)"
    assert plots.variant_key("densenet100_k12", 100) == plots.variant_key("densenet40_k12", 40) == "densenet"
    assert plots.variant_key("plain", None) == "plain"
    # Names the registry does not know (a plugin not loaded now) are their own series; nothing raises.
    assert plots.variant_key("my_old_plugin56", 56) == "my_old_plugin56"
    assert plots.variant_key("timm:resnet18", None) == "timm:resnet18"


def test_is_ln_transformer_reads_the_axes():
    assert [plots.is_ln_transformer(v) for v in ("postln", "preln", "gpt2_small")] == ["post", "pre", "pre"]
    # DeepNorm (scaled shortcut), ReZero (no norm), Mix-LN (mixed), Sandwich, a post-norm CNN, an unknown name.
    for name in ("deepnorm", "rezero_lm", "mixln", "sandwich", "resnet", "my_old_postln"):
        assert plots.is_ln_transformer(name) is None, name


def test_plugin_variants_are_classified_by_metadata(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # registrations vanish after the test

    def build(*, depth: int = 4, width: int = 8) -> nn.Module:
        return nn.Linear(width, width)

    lm = {"combinator": "add", "placement": "post", "body": "attention+ffn"}
    variants.register("my_lm_v2", family="mine", paper="-", axes=lm)(build)
    variants.register("postln_style_cnn", family="mine", paper="-", axes=lm | {"body": "conv"})(build)
    variants.register_preset("my_lm_v2_12", "my_lm_v2", depth=12)
    variants.register_preset("wide_lm3", "my_lm_v2", depth=3, width=16)
    assert plots.is_ln_transformer("my_lm_v2") == "post" and plots.is_ln_transformer("postln_style_cnn") is None
    assert plots.variant_key("my_lm_v2_12", 12) == "my_lm_v2"
    assert plots.variant_key("wide_lm3", 3) == "my_lm_v2 (width=16)"


def test_learning_curves_plot_seed_means(results):
    _, frames = results
    fig = plots.plot_learning_curves(frames.curves, "digits")
    left, right = fig.axes
    ln = line(left, "plain (depth 20)")
    expected = np.mean([loss_curve("plain", 20, s, 0) for s in SEEDS], axis=0)
    assert list(ln.get_xdata()) == [0, 1, 2, 3, 4, 5]
    np.testing.assert_allclose(ln.get_ydata(), [*expected, np.nan])  # the null loss at step 5 is a gap
    assert set(frames.curves["metric"]) == {"loss", "val_acc"}  # lr, epoch, wall_s are axes, not metrics
    assert ln.get_linestyle() == "-" and line(left, "plain (depth 56)").get_linestyle() == "--"
    val = line(right, "resnet (depth 56)")  # digits is a classifier: its primary curve is the validation error
    np.testing.assert_allclose(val.get_ydata(), [1.0, 1 - np.mean(ACC[("resnet", 56)])])
    assert len(left.collections) == 4  # one CI band per series
    assert left.get_yscale() == "log" and right.get_yscale() == "linear"
    for ax in (left, right):
        assert_labelled(ax)
    # One legend: each variant once (colour), each depth once (line style).
    assert legend_labels(fig) == ["plain", "resnet", "depth 20", "depth 56"]
    assert [h.get_linestyle() for h in fig.legends[0].legend_handles[2:]] == ["-", "--"]
    assert_legend_outside(fig)
    assert "validation error" in right.get_ylabel() and "clipped" in fig.get_suptitle()
    assert "(on a log axis, the band's lower side is its upper side's factor below the mean)" in " ".join(
        fig.get_suptitle().split())  # the title wraps


def test_learning_curve_bands_stay_in_the_metric_range(results):
    _, frames = results
    left, right = plots.plot_learning_curves(frames.curves, "digits").axes
    # resnet56 val acc at step 4: 0.99 ± t(2)·0.01/√3 = 0.99 ± 0.0248 -> the upper edge is clipped to 1.
    acc = band_ys(right)
    assert acc.min() >= 0.0 and acc.max() == 1.0
    assert_fraction_axis(right)
    assert band_ys(left).min() >= 0.0


def test_curves_frame_keeps_non_finite_values_as_gaps():
    run = {"run_id": "r", "row": {"variant": "plain"}, "curves": {
        "train": [{"step": 0, "loss": 2.0}, {"step": 1, "loss": None}, {"step": 2, "loss": float("inf")}],
        "eval": [{"step": 2, "val_acc": 0.5}, {"step": 4, "train_acc": 0.7}]}}  # fmt: skip
    df = plots.curves_frame([run])
    train = df[df["split"] == "train"]
    assert train["step"].tolist() == [0, 1, 2]
    np.testing.assert_allclose(train["value"].to_numpy(dtype=float), [2.0, np.nan, np.nan])
    # A metric an evaluation does not record is absent, not a gap: val_acc has one row, train_acc one.
    assert df[df["split"] == "eval"][["step", "metric"]].values.tolist() == [[2, "val_acc"], [4, "train_acc"]]


def test_degradation_plot_means_vs_depth(results):
    _, frames = results
    fig = plots.plot_degradation(frames.leaderboard, "digits")
    ax = fig.axes[0]
    for variant in ("plain", "resnet"):
        ln = line(ax, variant)
        assert list(ln.get_xdata()) == [20, 56]
        np.testing.assert_allclose(ln.get_ydata(), [1 - np.mean(ACC[(variant, d)]) for d in (20, 56)])
    assert_labelled(ax)
    assert legend_labels(fig) == ["plain", "resnet"]
    assert_legend_outside(fig)


def test_degradation_error_bars_are_clipped_to_0_1(results):
    _, frames = results
    fig = plots.plot_degradation(frames.leaderboard, "digits")
    ax = fig.axes[0]
    # resnet56 error 0.02/0.01/0.00: 0.01 ± t(2)·0.01/√3 = 0.01 ± 0.0248 -> the lower end is clipped to 0.
    ys = bar_ys(ax)
    assert ys.min() == 0.0 and ys.max() <= 1.0
    assert_fraction_axis(ax)
    assert "clipped" in ax.get_title()


def test_grad_norm_at_init_is_per_layer_on_a_log_scale(results):
    _, frames = results
    fig = plots.plot_grad_norm_init(frames.probes, "digits")
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    ln = line(ax, "resnet (depth 56)")
    assert list(ln.get_xdata()) == [0, 1, 2]
    np.testing.assert_allclose(ln.get_ydata(), [(i + 1) * 2 * 56 for i in range(3)])  # mean of seed factors 1,2,3
    # One line per variant and depth; colour = variant, style = depth.
    labels = [ln.get_label() for ln in ax.get_lines() if not ln.get_label().startswith("_")]  # not error-bar caps
    assert sorted(labels) == sorted(f"{v} (depth {d})" for v, d in ACC)
    assert line(ax, "plain (depth 20)").get_linestyle() == "-" and ln.get_linestyle() == "--"
    assert to_rgb(ln.get_color()) == to_rgb(plots.palette_of(frames.probes)["resnet"])
    # Seed factors 1, 2, 3: mean 2x ± t(2)·x/√3 = 2x ± 2.48x -> the lower ends are clipped to 0, never below.
    assert bar_ys(ax).min() == 0.0
    assert legend_labels(fig) == ["plain", "resnet", "depth 20", "depth 56"]
    assert_labelled(ax) and assert_legend_outside(fig)
    # Rows recorded before probes carried `kind` or `weight_grad_norm`: one panel of the whole-unit norm.
    assert len(fig.axes) == 1 and ax.get_title() == "Residual unit" and "all the unit's parameters" in ax.get_ylabel()


def transformer_probes(seed: int) -> list[dict]:
    """Layers alternate attention / feed-forward; weight-only norms (layer+1)(seed+1), whole-unit norms 100."""
    rows = []
    for layer in range(4):
        where = {"step": 0, "layer": layer, "block": f"u{layer}", "kind": ("attn", "ffn")[layer % 2]}
        rows += [where | {"metric": "grad_norm", "value": 100.0},
                 where | {"metric": "weight_grad_norm", "value": (layer + 1.0) * (seed + 1)}]  # fmt: skip
    return rows


def test_grad_norm_at_init_has_a_panel_per_sublayer_kind_and_prefers_weight_norms(tmp_path):
    store = ResultsStore(tmp_path)
    for seed in (0, 1):
        row = {"run_id": f"postln-s{seed}", "variant": "postln", "family": "transformer", "depth": 2, "task": "copy",
               "seed": seed, "status": "ok"}  # fmt: skip
        store.append(row, {"run_id": row["run_id"], "row": row, "config": {}, "curves": {},
                           "probes": transformer_probes(seed)})
    old = {"run_id": "old", "variant": "preln", "family": "transformer", "depth": 2, "task": "copy", "seed": 0,
           "status": "ok"}  # fmt: skip
    old_probes = [{"step": 0, "layer": i, "block": f"u{i}", "metric": "grad_norm", "value": 1.0} for i in range(4)]
    store.append(old, {"run_id": "old", "row": old, "config": {}, "curves": {}, "probes": old_probes})
    probes = plots.load_frames(tmp_path).probes
    assert probes["kind"].isna().sum() == 4  # the old run's rows load with an empty kind

    stats, metric, task = plots.grad_norm_init_data(probes)
    assert (metric, task) == ("weight_grad_norm", "copy")
    assert set(stats["key"]) == {"postln"}  # a figure never mixes whole-unit and weight-only norms
    fig = plots.plot_grad_norm_init(probes)
    attn, ffn = fig.axes
    assert (attn.get_title(), ffn.get_title()) == ("Attention sublayer", "Feed-forward sublayer")
    # Seed factors 1 and 2 -> mean 1.5 x (layer + 1); x is the index within the kind (Transformer layer).
    for ax, layers in ((attn, (0, 2)), (ffn, (1, 3))):
        ln = line(ax, "postln (depth 2)")
        assert list(ln.get_xdata()) == [0, 1]
        np.testing.assert_allclose(ln.get_ydata(), [1.5 * (i + 1) for i in layers])
        assert ax.get_yscale() == "log" and "weight matrices" in ax.get_ylabel()
        assert_labelled(ax)
    assert legend_labels(fig) == ["postln"]
    assert_legend_outside(fig)


def test_cost_plot_has_throughput_and_memory_panels(results):
    _, frames = results
    fig = plots.plot_cost(frames.leaderboard, "digits")
    thr, mem = fig.axes
    np.testing.assert_allclose(line(thr, "plain").get_ydata(), [1001.0, 1000 * 20 / 56 + 1])
    np.testing.assert_allclose(line(mem, "resnet").get_ydata(), [201.0, 561.0])
    assert "samples/s" in thr.get_ylabel() and mem.get_ylabel() == "peak memory (MiB)"  # 2**20 bytes, as measured
    assert bar_ys(thr).min() >= 0 and bar_ys(mem).min() >= 0
    assert_labelled(thr) and assert_labelled(mem)
    assert legend_labels(fig) == ["plain", "resnet"]
    assert_legend_outside(fig)


def test_the_cost_figure_keeps_apart_the_load_bands_of_a_configuration(results):
    _, frames = results
    def cost(f):
        return next(d for d in plots.drawings(f, None) if d.name == "cost_digits")
    assert cost(frames).args[0] is frames.leaderboard  # no configuration measured in two bands: drawn as before
    runs = [r | {"measurements": {"load": {"load_1m": 0.4 if r["row"]["seed"] == 0 else 6.0, "cpus": 2}}}
            for r in frames.runs]  # seed 0 on a quiet machine, the others beside other work
    board = frames.leaderboard.assign(config_hash=frames.leaderboard["variant"] + frames.leaderboard["depth"].map(str))
    fig = plots.plot_cost(*cost(plots.frames_of(board, runs)).args)
    quiet, busy = (line(fig.axes[0], f"plain (@ unrecorded at load/CPU {band})") for band in ("0-0.5", "2-4"))
    np.testing.assert_allclose(quiet.get_ydata(), [1000.0, 1000 * 20 / 56])  # seed 0's figure alone
    np.testing.assert_allclose(busy.get_ydata(), [1001.5, 1000 * 20 / 56 + 1.5])  # seeds 1 and 2's, not seed 0's too
    assert legend_labels(fig)[-2:] == ["@ unrecorded at load/CPU 0-0.5", "@ unrecorded at load/CPU 2-4"]


def test_the_pareto_figure_has_a_point_per_load_band_at_the_configurations_seed_mean(results):
    """Seed 0 timed on a quiet machine, seeds 1 and 2 beside other work: each configuration gets a point per band,
    at that band's throughput, labelled with the band; its validation error is the mean over all three seeds."""
    _, frames = results
    runs = [r | {"measurements": {"load": {"load_1m": 0.4 if r["row"]["seed"] == 0 else 6.0, "cpus": 2}}}
            for r in frames.runs]
    board = frames.leaderboard.assign(config_hash=frames.leaderboard["variant"] + frames.leaderboard["depth"].map(str))
    pareto = next(d for d in plots.drawings(plots.frames_of(board, runs), None) if d.name == "pareto_digits")
    pts, column, _, _ = plots.pareto_points(*pareto.args)
    resnet = pts[pts["series"] == "resnet"].set_index(["style", "depth"])
    quiet, busy = "@ unrecorded at load/CPU 0-0.5", "@ unrecorded at load/CPU 2-4"
    assert sorted(resnet.index) == [(quiet, 20), (quiet, 56), (busy, 20), (busy, 56)]
    assert resnet.loc[(quiet, 20), column] == 1000.0 and resnet.loc[(busy, 20), column] == 1001.5
    for band in (quiet, busy):  # every seed's error, whichever band timed it
        assert resnet.loc[(band, 56), "val_error"] == pytest.approx(1 - (np.mean(ACC[("resnet", 56)]) - 0.05))
    ax = plots.plot_pareto(*pareto.args, **pareto.kwargs).axes[0]
    np.testing.assert_allclose(line(ax, f"resnet ({busy})").get_xdata(), [1001.5, 1000 * 20 / 56 + 1.5])
    assert ax.get_xlabel() == "training throughput (samples/s; each point the mean of its measurements)"
    # each configuration's two bands nearly coincide: the second label one line under the first, never "2020"
    labels = sorted((t.get_text(), t.xy, t.xyann) for t in ax.texts)
    at = {(text, round(xy[0], 1)): offset for text, xy, offset in labels}
    assert at[("20", 1000.0)] == (3, 3) and at[("20", 1001.5)] == (3, -6)


def test_label_lines_lowers_the_labels_of_points_near_an_earlier_one() -> None:
    from bench.reports.costfigs import label_lines
    x, y = pd.Series([100.0, 101.0, 500.0, 102.0]), pd.Series([0.5, 0.5, 0.1, 0.5])
    assert label_lines(x, y) == [0, 1, 0, 2]  # 101 and 102 lie within 3% of the spans of 100; 500 alone
    assert label_lines(x, pd.Series([0.5, 0.1, 0.5, 0.3])) == [0, 0, 0, 0]  # same x, far apart in y
    assert label_lines(pd.Series([], dtype=float), pd.Series([], dtype=float)) == []


def test_pareto_front_mask():
    x = np.array([1.0, 2.0, 3.0, 2.0, 0.5])
    y = np.array([0.9, 0.8, 0.5, 0.7, 0.9])
    assert plots.pareto_front(x, y).tolist() == [True, True, True, False, False]


def test_pareto_plot_points_and_front(results):
    _, frames = results
    ax = plots.plot_pareto(frames.leaderboard, "digits").axes[0]
    res = line(ax, "resnet")  # the classifier's primary metric: validation error, lower is better
    np.testing.assert_allclose(res.get_ydata(), [1 - (np.mean(ACC[("resnet", d)]) - 0.05) for d in (20, 56)])
    front = line(ax, "Pareto front")
    # resnet20 is the fastest and resnet56 the most accurate; plain is dominated at both depths.
    np.testing.assert_allclose(front.get_xdata(), [1000 * 20 / 56 + 1, 1001.0])
    np.testing.assert_allclose(front.get_ydata(), [0.06, 0.08])
    assert front.get_marker() == "o" and front.get_drawstyle() == "steps-post"  # drawn, a point of it too
    assert_labelled(ax)
    assert_fraction_axis(ax)
    assert legend_labels(ax.figure) == ["plain", "resnet", "Pareto front"]
    assert_legend_outside(ax.figure)


def test_warmup_plot_styles_and_labels(results):
    _, frames = results
    fig = plots.plot_warmup(frames.curves, "copy")
    ax = fig.axes[0]
    cold, warm = line(ax, "postln, no warm-up"), line(ax, "postln, warm-up 50 steps")
    assert cold.get_linestyle() == "--" and warm.get_linestyle() == "-"
    expected = np.mean([loss_curve("postln", 6, s, 0) for s in (0, 1)], axis=0)
    np.testing.assert_allclose(cold.get_ydata(), [*expected, np.nan])
    assert to_rgb(cold.get_color()) == to_rgb(plots.palette_of(frames.curves)["postln"])
    assert legend_labels(fig) == ["postln", "preln", "warm-up on", "warm-up off"]
    assert ax.get_yscale() == "log" and band_ys(ax).min() >= 0.0
    assert_labelled(ax) and assert_legend_outside(fig)


SPIKE = 1e10  # one seed's training loss at step 10 of Fixup


@pytest.fixture(scope="module")
def study_figures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Figure]:
    """Every figure make_all draws for a study like a user's SkipInit question: BN ResNet at 120 and 300 steps,
    Fixup, SkipInit and the un-normalised net at 120, two seeds each, one Fixup seed spiking to 1e10."""
    root = tmp_path_factory.mktemp("study")
    store = ResultsStore(root)
    for variant, steps in (("resnet", 120), ("resnet", 300), ("fixup", 120), ("skipinit", 120), ("plain", 120)):
        for seed in (0, 1):
            cfg = RunConfig(variant=variant, depth=20, task="digits", seed=seed, steps=steps)
            losses = [2.3 * 0.9**s + seed / 10 for s in range(25)]
            if (variant, seed) == ("fixup", 1):
                losses[10] = SPIKE
            row = {"run_id": cfg.run_id, "config_hash": cfg.config_hash(), "variant": variant, "depth": 20,
                   "task": "digits", "seed": seed, "status": "ok", "study": "skip", "final_train_acc": 0.9,
                   "final_val_acc": 0.8 + seed / 100, "train_samples_per_s": 100.0 + seed, "peak_mem_mb": 10.0}
            curves = {"train": [{"step": s, "loss": v} for s, v in enumerate(losses)],
                      "eval": [{"step": s, "val_acc": 0.8 * s / 24} for s in (0, 12, 24)]}
            probes = [{"step": 0, "layer": i, "block": f"b{i}", "metric": "grad_norm", "value": i + 1.0 + seed}
                      for i in range(3)]
            store.append(row, {"run_id": cfg.run_id, "row": row, "config": cfg.to_dict(), "curves": curves,
                               "probes": probes})  # fmt: skip
    drawn: dict[str, Figure] = {}
    with pytest.MonkeyPatch.context() as mp:  # keep the figures, write nothing
        mp.setattr(Figure, "savefig", lambda fig, path, **kw: drawn.setdefault(Path(path).stem, fig))
        plots.make_all(root, "skip")
    assert sorted(drawn) == ["cost_digits", "curves_digits", "grad_norm_init_digits", "pareto_digits"]
    return drawn


def test_a_variant_has_one_colour_in_every_figure_of_a_study(study_figures):
    """Colour = variant in every figure (the configurations by line style or marker), and no two variants share
    one: before, BN ResNet's 120-step runs and Fixup could share a colour while its 300-step runs had another."""
    colour: dict[str, set] = {}
    for fig in study_figures.values():
        for ax in fig.axes:
            for ln in ax.get_lines():
                name = str(ln.get_label())
                if not name.startswith("_") and name != "Pareto front":
                    colour.setdefault(name.split(" (")[0], set()).add(to_rgb(ln.get_color()))
    assert sorted(colour) == ["fixup", "plain", "resnet", "skipinit"]
    assert all(len(c) == 1 for c in colour.values()), colour  # one colour per variant, across 4 figures
    assert len({c for cs in colour.values() for c in cs}) == 4  # four variants, four colours
    left = study_figures["curves_digits"].axes[0]
    short, long_ = line(left, "resnet (depth 20, steps=120)"), line(left, "resnet (depth 20, steps=300)")
    assert short.get_color() == long_.get_color() and short.get_linestyle() != long_.get_linestyle()
    assert to_rgb(line(left, "fixup (depth 20, steps=120)").get_color()) != to_rgb(short.get_color())
    assert legend_labels(study_figures["curves_digits"]) == [
        "fixup", "plain", "resnet", "skipinit", "depth 20, steps=120", "depth 20, steps=300"]  # fmt: skip


def test_the_legend_covers_no_title_and_no_data(study_figures):
    """Before, the legend of a one-panel figure overprinted its (long) suptitle."""
    for fig in study_figures.values():
        assert_legend_outside(fig)


def test_a_loss_spike_does_not_set_the_y_axis(study_figures):
    """One 1e10 loss among losses of 0.2-2.4: the axis follows the bulk, the spike is a marker on the top edge in
    Fixup's colour, and the y label says how many points are off-scale."""
    left = study_figures["curves_digits"].axes[0]
    low, high = left.get_ylim()
    assert 0.05 < low < 0.2 and 2.4 < high < 5  # the bulk: 2.3·0.9^24 = 0.18 .. 2.4 (seed 1's start)
    (edge,) = [ln for ln in left.get_lines() if ln.get_label() == "_off-scale"]
    assert list(edge.get_xdata()) == [10] and edge.get_color() == line(left, "fixup (depth 20, steps=120)").get_color()
    assert "(1 off-scale" in left.get_ylabel()
    # A clean curve (its start 10x its end) keeps the default limits: only values far outside the bulk are cut.
    assert plots.robust_limits(np.r_[[2.3 * 0.9**s for s in range(25)]], log=True) is None
    assert plots.robust_limits(np.r_[np.ones(18), SPIKE], log=True) is None  # under 20 values nothing is cut


def test_figures_need_one_task(results):
    _, frames = results
    with pytest.raises(ValueError, match=r"exactly one task; found \['copy', 'digits'\]"):
        plots.plot_learning_curves(frames.curves)
    with pytest.raises(ValueError, match="found none"):
        plots.plot_degradation(frames.leaderboard, "cifar10")


def test_make_all_writes_only_figures_with_data(results, tmp_path):
    root, _ = results
    names = sorted(p.name for p in plots.make_all(root))
    assert names == ["cost_copy.png", "cost_digits.png", "curves_copy.png", "curves_digits.png",
                     "degradation_digits.png", "grad_norm_init_copy.png", "grad_norm_init_digits.png",
                     "pareto_copy.png", "pareto_digits.png", "warmup_copy.png"]  # fmt: skip
    assert all((root / "plots" / n).stat().st_size > 0 for n in names)
    assert plots.make_all(tmp_path) == []  # an empty results directory: nothing to draw


def test_load_frames_filters_a_study(tmp_path):
    store = ResultsStore(tmp_path)
    add_run(store, "resnet", 20, 0, study="degradation")
    add_run(store, "plain", 20, 0)
    frames = plots.load_frames(tmp_path, "degradation")
    assert frames.leaderboard["variant"].tolist() == ["resnet"]
    assert set(frames.curves["variant"]) == {"resnet"} and set(frames.probes["variant"]) == {"resnet"}
    with pytest.raises(ValueError, match=r"no runs of study 'postln' .*studies: \['degradation'\]"):
        plots.load_frames(tmp_path, "postln")


def test_series_never_pool_configurations(tmp_path) -> None:
    """Runs of one variant and depth that differ in their init are two series, each over its own seeds."""
    from bench.reports.plotdata import load_frames, with_key

    store = ResultsStore(tmp_path)
    for init, acc in (("xavier", 0.9), ("normal", 0.5)):
        for seed in (0, 1):
            cfg = RunConfig(variant="postln", depth=6, task="copy", seed=seed, model_args=(("init", init),))
            row = {"run_id": cfg.run_id, "config_hash": cfg.config_hash(), "variant": "postln", "depth": 6,
                   "task": "copy", "seed": seed, "status": "ok", "init": init, "final_train_acc": acc}
            store.append(row, {"run_id": cfg.run_id, "row": row, "config": cfg.to_dict(), "curves": {}})
    board = with_key(load_frames(tmp_path).leaderboard)
    means = board.groupby("key")["final_train_acc"].mean().to_dict()
    assert means == {"postln (init=normal)": 0.5, "postln (init=xavier)": 0.9}


def test_loss_vs_time_plots_mean_loss_at_mean_training_time(tmp_path):
    """Each point: an evaluation step, x = the seeds' mean training time to it, y = their mean validation loss."""
    store = ResultsStore(tmp_path)
    times = {("slow", 0): (2.0, 4.0), ("slow", 1): (4.0, 6.0), ("fast", 0): (1.0, 2.0), ("fast", 1): (1.0, 3.0)}
    losses = {("slow", 0): (3.0, 2.0), ("slow", 1): (3.2, 2.2), ("fast", 0): (3.1, 2.5), ("fast", 1): (2.9, 2.7)}
    for (variant, seed), (t1, t2) in times.items():
        l1, l2 = losses[(variant, seed)]
        run_id = f"{variant}-d6-tinytext-0000000{int(variant == 'fast')}-s{seed}"
        row = {"run_id": run_id, "variant": variant, "depth": 6, "task": "tinytext", "seed": seed, "status": "ok"}
        evals = [{"step": 10, "train_time_s": t1, "val_loss": l1}, {"step": 20, "train_time_s": t2, "val_loss": l2}]
        curves = {"train": [{"step": 1, "loss": 3.0}], "eval": evals}
        store.append(row, {"run_id": run_id, "row": row, "config": {}, "curves": curves, "probes": []})
    frames = plots.load_frames(tmp_path)
    evals = frames.curves[frames.curves["split"] == "eval"]
    assert sorted(evals["train_time_s"].unique().tolist()) == [1.0, 2.0, 3.0, 4.0, 6.0]
    assert frames.curves[frames.curves["split"] == "train"]["train_time_s"].isna().all()
    fig = plots.plot_loss_vs_time(frames.curves, "tinytext")
    ax = fig.axes[0]
    slow = line(ax, "slow (depth 6)")
    np.testing.assert_allclose(slow.get_xdata(), [3.0, 5.0])
    np.testing.assert_allclose(slow.get_ydata(), [3.1, 2.1])
    fast = line(ax, "fast (depth 6)")
    np.testing.assert_allclose(fast.get_xdata(), [1.0, 2.5])
    np.testing.assert_allclose(fast.get_ydata(), [3.0, 2.6])
    assert "training time" in ax.get_xlabel() and ax.get_yscale() == "log"
    names = [p.stem for p in plots.make_all(tmp_path)]
    assert "loss_vs_time_tinytext" in names


def test_loss_vs_time_says_in_its_title_where_its_runs_were_made_in_several_load_bands(tmp_path):
    """Seed 0 run on a quiet machine, seed 1 beside other work: the x axis pools two loads' seconds, and the title
    says so, naming the bands; with every run in one band the drawing and its title are as before."""
    store = ResultsStore(tmp_path)
    for seed, load in enumerate((0.4, 6.0)):
        run_id = f"slow-d6-tinytext-00000000-s{seed}"
        row = {"run_id": run_id, "variant": "slow", "depth": 6, "task": "tinytext", "seed": seed, "status": "ok"}
        evals = [{"step": 10, "train_time_s": 2.0 + seed, "val_loss": 3.0}]
        store.append(row, {"run_id": run_id, "row": row, "config": {}, "curves": {"train": [{"step": 1, "loss": 3.0}],
                                                                                    "eval": evals},
                           "probes": [], "measurements": {"load": {"load_1m": load, "cpus": 2}}})
    frames = plots.load_frames(tmp_path)
    drawing = next(d for d in plots.drawings(frames, None) if d.name == "loss_vs_time_tinytext")
    assert drawing.kwargs["bands"] == ["load/CPU 0-0.5", "load/CPU 2-4"]
    title = plots.plot_loss_vs_time(*drawing.args, **drawing.kwargs).axes[0].get_title()
    assert title.endswith("\nruns made in 2 load bands (load/CPU 0-0.5, load/CPU 2-4): x is each run's wall clock at "
                          "its own load")
    quiet = plots.frames_of(frames.leaderboard, [r | {"measurements": {"load": {"load_1m": 0.4, "cpus": 2}}}
                                                  for r in frames.runs])
    drawing = next(d for d in plots.drawings(quiet, None) if d.name == "loss_vs_time_tinytext")
    assert "bands" not in drawing.kwargs
    title = plots.plot_loss_vs_time(*drawing.args, **drawing.kwargs).axes[0].get_title()
    assert title.endswith("mean over seeds, band = " + CLIP_NOTE) and "load" not in title


def test_a_configuration_without_a_value_leaves_a_gap(tmp_path):
    """A depth whose runs recorded no peak memory: a NaN mean (an empty error bar), drawn as a gap."""
    store = ResultsStore(tmp_path)
    for depth in (20, 56):
        for seed in (0, 1):
            add_run(store, "resnet", depth, seed, peak_mem_mb=None if depth == 56 else 10.0 + seed)
    fig = plots.plot_cost(plots.load_frames(tmp_path).leaderboard, "digits")
    np.testing.assert_allclose(line(fig.axes[1], "resnet").get_ydata(), [10.5, np.nan])


def test_a_band_on_a_log_axis_mirrors_its_upper_factor_below_the_mean() -> None:
    """A loss whose seeds' 95% interval reaches 0 (clipped) would fill every decade below the curve on a log axis:
    there the band's lower edge is mean²/hi, the upper side's factor below the mean; on a linear axis the interval."""
    import pandas as pd

    from bench.reports.drawing import series_lines
    stats = pd.DataFrame({"series": "plain", "style": "", "step": [0, 1], "mean": [1.0, 0.01], "lo": [0.0, 0.0],
                          "hi": [2.0, 0.03], "ci": [1.5, 0.05]})
    for log, low in ((True, [0.5, 0.01**2 / 0.03]), (False, [0.0, 0.0])):
        fig = Figure()
        ax = fig.add_subplot()
        series_lines(ax, stats, "step", {"plain": (0.0, 0.0, 1.0)}, {"": ("-", None)}, True, log=log)
        (poly,) = [c for c in ax.collections if isinstance(c, PolyCollection)]
        ys = {round(float(x), 9): [] for x in (0, 1)}
        for x, y in poly.get_paths()[0].vertices:
            ys[round(float(x), 9)].append(float(y))
        assert [min(ys[0.0]), min(ys[1.0])] == pytest.approx(low) and [max(ys[0.0]), max(ys[1.0])] == [2.0, 0.03]


def test_pareto_points_carry_the_seeds_interval_as_error_bars(results):
    """A difference of two validation images must not look large: each point has the 95% t-CI of its seeds."""
    _, frames = results
    ax = plots.plot_pareto(frames.leaderboard, "digits").axes[0]
    expected = []
    for accs in ACC.values():  # validation error 1 - (accuracy - 0.05) over 3 seeds, its t interval
        error, half = 1 - (np.mean(accs) - 0.05), 4.302653 * np.std(accs, ddof=1) / np.sqrt(3)
        expected += [max(error - half, 0.0), min(error + half, 1.0)]
    expected.sort()
    np.testing.assert_allclose(sorted(bar_ys(ax)), expected)
    assert "bars: 95% t-CI" in ax.get_title()
