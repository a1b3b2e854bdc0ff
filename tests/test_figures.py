"""The figures of a language-model study with many designs, checked by their data: the forest plot it leads with,
faceted curves, the primary metric (loss, not accuracy) in the curves, degradation and Pareto figures, cost figures
that say n and the machine load and draw no bar over one measurement, no series nudged off its x."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _studies import beats_preln_claims
from matplotlib.collections import LineCollection

from bench.analysis.claims import evaluate_claims, parse_claim
from bench.reports import plots
from bench.reports.facets import MAX_LINES
from bench.reports.forest import forest_data, plot_forest
from bench.runs.config import RunConfig
from bench.runs.results import COLUMNS, ResultsStore

DESIGNS = ("preln", "mhc", "mudd", "dca", "hyper_connections", "frac_connections", "denseformer", "attn_res",
           "speedrun")  # fmt: skip
LOAD = {"load_1m": 1.93, "cpus": 2, "other_cpu": 0.45}


def loss(variant: str, depth: int, seed: int) -> float:
    """A final loss: the seed's shared part (0.1 per seed) and a design's own offset."""
    return 2.0 + 0.1 * seed + 0.01 * DESIGNS.index(variant) + depth / 1000


def add(store: ResultsStore, variant: str, depth: int, seed: int, identical_probes: bool = False) -> None:
    cfg = RunConfig(variant=variant, depth=depth, seed=seed, task="tinytext", study="x")
    source = RunConfig(variant=variant, depth=depth, seed=0, task="tinytext", study="x").run_id  # seed 0 measured
    final = loss(variant, depth, seed)
    row = {"run_id": cfg.run_id, "config_hash": cfg.config_hash(), "variant": variant, "depth": depth,
           "task": "tinytext", "seed": seed, "status": "ok", "final_val_loss": final, "final_train_loss": final - 0.1,
           "final_val_acc": 0.3, "final_train_acc": 0.3, "train_samples_per_s": 100.0 / depth + DESIGNS.index(variant),
           "train_tokens_per_s": 3200.0 / depth + 10 * DESIGNS.index(variant), "peak_mem_mb": 10.0 * depth,
           "cost_source": source, "study": "x"}
    curves = {"train": [{"step": s, "loss": final + 1 / (s + 1)} for s in range(3)],
              "eval": [{"step": s, "val_loss": final + 1 / (s + 1), "val_acc": 0.3, "train_time_s": 1.0 + s}
                       for s in (0, 2)]}
    value = 1.0 if identical_probes else 1.0 + DESIGNS.index(variant)
    probes = [{"step": 0, "layer": i, "block": f"b{i}", "kind": "ffn", "metric": "weight_grad_norm",
               "value": value * (i + 1)} for i in range(3)]
    measurements = {"load": LOAD} if seed == 0 else {}
    store.append({k: v for k, v in row.items() if k in COLUMNS},
                 {"run_id": cfg.run_id, "row": row, "config": cfg.to_dict(), "curves": curves, "probes": probes,
                  "measurements": measurements})


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, plots.Frames]:
    root = tmp_path_factory.mktemp("lm")
    store = ResultsStore(root)
    for variant in DESIGNS:
        for depth in (6, 24):
            for seed in range(3):
                add(store, variant, depth, seed)
    return root, plots.load_frames(root)


def labelled(ax) -> list:
    return [ln for ln in ax.get_lines() if not str(ln.get_label()).startswith("_")]


def test_many_designs_are_faceted_a_handful_per_panel_each_with_the_baseline(study) -> None:
    _, frames = study
    fig = plots.plot_learning_curves(frames.curves, "tinytext", baseline="preln")
    # 9 designs: panels of the baseline and 5 others; rows: training loss and validation loss, at each depth
    assert len(fig.axes) == 2 * 2 * 2
    for ax in fig.axes:
        lines = labelled(ax)
        assert 2 <= len(lines) <= MAX_LINES and any(str(ln.get_label()).startswith("preln") for ln in lines)
    drawn = {str(ln.get_label()) for ax in fig.axes for ln in labelled(ax)}
    assert {d.split(" (")[0] for d in drawn} == set(DESIGNS)  # every design somewhere
    assert "validation loss" in fig.axes[4].get_ylabel() and "depth 6" in fig.axes[4].get_ylabel()


def test_a_panel_whose_designs_never_ran_at_its_depth_is_left_blank_with_the_rows_label(study) -> None:
    _, frames = study
    # at depth 24 only the designs of the second column ran: the first column's panels of that depth are empty
    second = ("mhc", "mudd", "speedrun")
    curves = frames.curves[(frames.curves["depth"] == 6) | frames.curves["variant"].isin(second)]
    fig = plots.plot_learning_curves(curves, "tinytext", baseline="preln")
    grid = [fig.axes[i:i + 2] for i in range(0, len(fig.axes), 2)]  # rows: train 6, train 24, val 6, val 24
    assert len(grid) == 4
    for row, (first, other) in enumerate(grid):
        assert other.has_data() and other.axison and other.get_frame_on() and len(other.get_yticks()) > 0
        if row % 2 == 0:  # depth 6: every design ran
            assert first.has_data() and first.get_frame_on() and len(first.get_xticks()) > 0
            continue
        assert not first.has_data() and not first.get_frame_on()
        assert (first.get_title(), first.get_xlabel()) == ("", "")
        assert list(first.get_xticks()) == [] and list(first.get_yticks()) == []
        assert list(first.get_yticks(minor=True)) == []
        assert first.get_ylabel().endswith("\ndepth 24")  # the row still says what it shows


def test_a_language_models_curves_degradation_and_pareto_are_in_its_loss(study) -> None:
    _, frames = study
    few = frames.curves[frames.curves["variant"].isin(["preln", "mhc"]) & (frames.curves["depth"] == 6)]
    _, right = plots.plot_learning_curves(few, "tinytext").axes
    assert right.get_ylabel() == "validation loss (cross-entropy, nats)"
    np.testing.assert_allclose(labelled(right)[0].get_ydata()[-1], np.mean([loss("mhc", 6, s) for s in range(3)])
                               + 1 / 3)
    board = frames.leaderboard[frames.leaderboard["variant"].isin(["preln", "mhc"])]
    ax = plots.plot_degradation(board, "tinytext").axes[0]
    assert ax.get_ylabel() == "final training loss (nats)" and "training loss vs depth" in ax.get_title()
    mhc = next(ln for ln in labelled(ax) if ln.get_label() == "mhc")
    np.testing.assert_allclose(mhc.get_ydata(), [np.mean([loss("mhc", d, s) - 0.1 for s in range(3)])
                                                 for d in (6, 24)])
    ax = plots.plot_pareto(board, "tinytext").axes[0]
    front = next(ln for ln in ax.get_lines() if ln.get_label() == "Pareto front")
    # lower loss is better: preln at depth 6 has the lowest loss, mhc at depth 6 the highest throughput; both
    # dominate depth 24 (slower and worse)
    assert front.get_xdata().tolist() == pytest.approx([3200 / 6, 3200 / 6 + 10])
    assert front.get_ydata().tolist() == pytest.approx([np.mean([loss(v, 6, s) for s in range(3)])
                                                        for v in ("preln", "mhc")])
    assert ax.get_ylabel() == "validation loss (nats)" and "lower is better" in ax.get_title()


def test_cost_figures_say_n_and_the_load_and_draw_no_bar_over_one_measurement(study) -> None:
    _, frames = study
    fig = plots.plot_cost(frames.leaderboard, "tinytext")
    title = fig.get_suptitle().replace("\n", " ")
    assert "n = 1 measurement per point" in title and "no bars (n = 1)" in title
    assert "1-min load average 1.9 on 2 CPUs, other processes 45% of the CPU time" in title
    for ax in fig.axes:  # the seeds' copies of one measurement are one point, with no error bar
        assert not [c for c in ax.collections if isinstance(c, LineCollection)]
        mhc = next(ln for ln in labelled(ax) if ln.get_label() == "mhc")
        assert len(mhc.get_xdata()) == 2


def test_a_cost_measured_more_than_once_gets_bars_and_says_so(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    for seed in range(2):
        add(store, "preln", 6, seed)
    board = plots.load_frames(tmp_path).leaderboard.assign(cost_source="")  # each run measured its own
    fig = plots.plot_cost(board, "tinytext")
    assert "n = 2 measurements per point" in fig.get_suptitle().replace("\n", " ")
    assert [c for c in fig.axes[1].collections if isinstance(c, LineCollection)]


def test_identical_models_draw_identical_points_never_offset(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    for variant in ("preln", "mhc"):
        for depth in (6, 24):
            add(store, variant, depth, 0, identical_probes=True)
    ax = plots.plot_grad_norm_init(plots.load_frames(tmp_path).probes, "tinytext").axes[0]
    lines = {str(ln.get_label()): ln for ln in labelled(ax)}
    for depth in (6, 24):
        a, b = lines[f"preln (depth {depth})"], lines[f"mhc (depth {depth})"]
        assert a.get_xydata().tolist() == b.get_xydata().tolist()
        assert a.get_transform() == b.get_transform() == ax.transData  # no screen offset between series
    assert lines["preln (depth 6)"].get_xdata().tolist() == [0, 1, 2]


def test_the_forest_plot_draws_each_designs_difference_interval_and_margin(study) -> None:
    _, frames = study
    claims = [parse_claim({"id": f"{d}-beats-preln", "paper": "P", "text": "t", "metric": "final_val_loss",
                           "where": {"variant": ["preln", d]}, "for_each": "depth", "compare": "variant",
                           "a": "preln", "b": d, "expect": "less", "threshold": 0.005}) for d in ("mhc", "mudd")]
    results = evaluate_claims(claims, frames.leaderboard, None, frames.runs)
    data = forest_data(results)
    assert data[["claim", "design", "baseline", "context", "test", "n"]].values.tolist() == [
        ["mhc-beats-preln", "mhc", "preln", "depth=6", "exact", 3],
        ["mhc-beats-preln", "mhc", "preln", "depth=24", "exact", 3],
        ["mudd-beats-preln", "mudd", "preln", "depth=6", "exact", 3],
        ["mudd-beats-preln", "mudd", "preln", "depth=24", "exact", 3]]
    # each seed's difference is the design's offset exactly (the seed's part is shared): known exactly, no t test,
    # an interval of width 0
    assert data["diff"].tolist() == pytest.approx([0.01, 0.01, 0.02, 0.02])
    assert (data["high"] - data["low"]).tolist() == pytest.approx([0.0] * 4)
    assert set(data["verdict"]) == {"disagrees"}
    fig = plot_forest(data, "final_val_loss")
    assert [ax.get_title() for ax in fig.axes] == ["depth=6", "depth=24"]
    ax = fig.axes[0]
    bar = next(ln for ln in ax.get_lines() if ln.get_label() == "mudd-beats-preln: depth=6")
    assert bar.get_xdata().tolist() == pytest.approx([0.02, 0.02]) and bar.get_ydata().tolist() == [0, 0]
    margins = [ln for ln in ax.get_lines() if ln.get_label() == "_margin"]
    assert {tuple(ln.get_xdata()) for ln in margins} == {(-0.005, -0.005)}  # "less": the margin below 0
    ticks = dict(zip(ax.get_yticks(), (t.get_text() for t in ax.get_yticklabels()), strict=True))
    assert ticks == {1: "mhc − preln", 0: "mudd − preln"}  # the first claim on top
    assert {t.get_text() for t in ax.texts} == {"DISAGREES"}


def test_a_study_with_claims_leads_with_its_forest_plot(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    for variant in DESIGNS[:4]:
        for seed in range(3):
            add(store, variant, 6, seed)
    claims = beats_preln_claims(DESIGNS[1:4])
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "x.toml").write_text(f'name = "x"\n{claims}', encoding="utf-8")
    paths = plots.make_all(tmp_path, "x")
    assert paths[0].name == "forest_final_val_loss.png"
    assert {p.name for p in paths} >= {"curves_tinytext.png", "cost_tinytext.png", "pareto_tinytext.png"}


def test_frames_carry_the_recorded_load(study) -> None:
    _, frames = study
    board = frames.leaderboard
    measured = board[board["seed"] == 0]
    assert set(measured["load_1m"]) == {1.93} and set(measured["other_cpu"]) == {0.45}
    assert pd.isna(board[board["seed"] == 1]["load_1m"]).all()  # its figures are seed 0's: their load is there


def test_a_verdict_without_an_interval_is_a_row_of_words() -> None:
    """Every run of one group failed: the verdict stands (the failed group counts as the worse), with no interval."""
    data = pd.DataFrame([{"metric": "final_val_loss", "claim": "c", "design": "attn_res", "baseline": "preln",
                          "context": "depth=24", "diff": np.nan, "low": np.nan, "high": np.nan, "margin": 0.0,
                          "expect": "less", "verdict": "disagrees", "test": "", "n": 0, "level": 0.95}])
    ax = plot_forest(data, "final_val_loss").axes[0]
    assert [t.get_text() for t in ax.texts] == ["DISAGREES (no interval)"]
    assert not [ln for ln in ax.get_lines() if ln.get_label() == "c: depth=24"]


def test_only_comparisons_of_designs_make_a_forest(study) -> None:
    _, frames = study
    deeper = parse_claim({"id": "deeper", "paper": "P", "text": "t", "metric": "final_val_loss",
                          "where": {"variant": "preln"}, "compare": "depth", "a": 6, "b": 24, "expect": "less"})
    (result,) = evaluate_claims([deeper], frames.leaderboard, None, frames.runs)
    assert result.test == "exact" and forest_data([result]).empty  # a depth is no design
