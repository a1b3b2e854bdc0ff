"""The compute multiplier where a user reads a comparison: ``bench compare``'s columns
(bench.analysis.multiplier_columns), the REPORT of a scaling study written by ``bench report``, and the study's page
on the results site (bench.reports.site_scaling)."""

from __future__ import annotations

import hashlib
import io
import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_scaling import COMPUTE, E, curve

import bench
from bench.analysis.multiplier_columns import NOTE
from bench.cli import main
from bench.runs.results import ResultsStore

WIDTHS = (16, 32, 64, 128)
CLAIM = ('[[claims]]\nid = "hc-multiplier"\nkind = "multiplier"\npaper = "p"\ntext = "t"\nmetric = "final_val_loss"\n'
         'a = "preln"\nb = "hc"\nexpect_range = [1.5, 2.5]\n')


def ladder_results(root: Path, sizes: int = 4, short: str | None = None, budget: bool = True,
                   study: str = CLAIM, tasks: tuple[str, ...] = ("tinytext",), floor: float = E) -> Path:
    """Two designs on a ladder of ``sizes`` widths, each width at its own FLOP budget (``budget``), 3 seeds: preln on
    the curve, hc on the curve at twice the compute and reaching the target in half of preln's 100 steps; ``short``:
    a design that ran only the first two sizes. ``study``: the claims of the study file ``ladder``; ``floor``: the
    task's known irreducible loss, in nats."""
    store = ResultsStore(root)
    (root / "studies").mkdir(parents=True, exist_ok=True)
    (root / "studies" / "ladder.toml").write_text(f'name = "ladder"\n{study}', encoding="utf-8")
    for task, (design, factor, steps) in itertools.product(tasks, (("preln", 1.0, 100), ("hc", 2.0, 50))):
        for i, width in enumerate(WIDTHS[:2 if design == short else sizes]):
            c = float(COMPUTE[i])
            config_hash = hashlib.sha256(f"{design}{width}{task}".encode()).hexdigest()[:8]
            for seed in range(3):
                loss = float(curve(np.array([factor * c]))[0]) * (1 + 0.01 * (seed - 1))
                run_id = f"{design}-d4-{task}-{config_hash}-s{seed}"
                row = {"run_id": run_id, "config_hash": config_hash, "variant": design, "depth": 4,
                       "task": task, "seed": seed, "status": "ok", "steps": 100, "batch_size": 8,
                       "grad_accum": 1, "train_flops_per_sample": c / 800, "final_val_loss": loss,
                       "final_val_acc": 0.5, "steps_to_target": steps, "study": "ladder",
                       **({"budget_flops": c} if budget else {})}
                config = {"variant": design, "depth": 4, "seed": seed, "task": task, "study": "ladder",
                          "model_args": [["d_model", width]], **({"budget_flops": c} if budget else {})}
                store.append(row, {"run_id": run_id, "row": row, "config": config,
                                   "task": {"entropy_floor_bpc": floor / math.log(2)}})
    return root


def compare(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[str, str]:
    assert main(["compare", "--results-dir", str(root), "--study", "ladder", "--baseline", "preln", *args]) == 0
    captured = capsys.readouterr()
    return captured.out, captured.err


def test_compare_gains_each_designs_multiplier_and_steps_ratio_from_the_fit(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    root = ladder_results(tmp_path / "r")
    out, _ = compare(root, capsys)
    lines = out.splitlines()
    assert lines[0].endswith("| mean ± CI (n) | compute multiplier [95% CI] | steps-to-target ratio [95% CI] |")
    hc = [line for line in lines if line.startswith("| hc |")]
    assert len(hc) == 4 and all(line.split(" | ")[-2].startswith("2 [") for line in hc)  # the curve at 2x compute
    assert all(line.endswith(" | 2 [2, 2] |") for line in hc)  # 100 steps / 50, in every resample
    assert all(line.endswith(" | 1 [1, 1] | 1 [1, 1] |") for line in lines if line.startswith("| preln |"))
    assert lines[-1].startswith("compute multiplier: the compute preln needs on its fitted final_val_loss curve")
    assert "over 3 seed(s), E held at the task's known floor, 1 nats" in lines[-1]
    assert lines[-1].endswith("python -m bench scaling-fit --study ladder --baseline preln")
    # CSV: the numbers of bench scaling-fit, the one code: same fit, same bootstrap draws
    out, err = compare(root, capsys, "--format", "csv")
    table = pd.read_csv(io.StringIO(out)).sort_values(["variant", "budget_flops"])
    fit = bench.scaling_fit(bench.load(root), "preln").multipliers().sort_values(["design", "compute"])
    assert table["variant"].tolist() == fit["design"].tolist() == ["hc"] * 4 + ["preln"] * 4
    for col in ("multiplier", "multiplier_lo", "multiplier_hi", "steps_ratio", "steps_ratio_lo", "steps_ratio_hi"):
        assert table[col].to_numpy() == pytest.approx(fit[col].to_numpy(), rel=1e-12)
    assert err.startswith("compute multiplier: the compute preln needs")  # the note, outside the CSV


def test_the_python_api_has_the_columns_and_the_note(tmp_path: Path) -> None:
    table = bench.compare(bench.load(ladder_results(tmp_path / "r")), "preln")
    assert table.query("variant == 'hc'")["multiplier"].to_numpy() == pytest.approx(2.0, rel=0.01)
    assert table.attrs[NOTE].startswith("compute multiplier: the compute preln needs")


@pytest.mark.parametrize(("build", "args", "note"), [
    ({"sizes": 2}, [], "compute multiplier: not shown; scaling fit: preln has 2 size(s) on its ladder; fitting E, A "
                       "and α needs at least 3 sizes of different compute"),
    ({"tasks": ("tinytext", "copy")}, [], "compute multiplier: not shown; scaling fit: the runs span several tasks "
                                          "(copy, tinytext), and a ladder is one task's sizes; choose one with --where "
                                          "task=T"),
    ({"floor": 4.0}, [], "compute multiplier: not shown; scaling fit: the baseline 'preln''s curve could not be "
                         "fitted (a mean loss at or below the fixed floor E = 4 nats?)"),
    ({}, ["--metric", "final_val_acc"], "compute multiplier: not shown, since the fit models a loss (final_val_loss "
                                        "or final_train_loss) and none of the compared metrics (final_val_acc) is one"),
])
def test_a_ladder_that_cannot_be_fitted_shows_no_columns_and_says_why(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str], build: dict,
                                                                     args: list[str], note: str) -> None:
    root = ladder_results(tmp_path / "r", **build)
    out, _ = compare(root, capsys, *args)
    assert "compute multiplier [95% CI]" not in out and out.rstrip().splitlines()[-1] == note
    out, err = compare(root, capsys, *args, "--format", "csv")
    assert "multiplier" not in pd.read_csv(io.StringIO(out)).columns and err == note + "\n"


def test_a_design_with_too_short_a_ladder_is_left_out_of_the_fit_and_named(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = compare(ladder_results(tmp_path / "r", short="hc"), capsys)
    lines = out.splitlines()
    assert all(line.endswith(" | — | — |") for line in lines if line.startswith("| hc |"))  # no fake number
    assert all(line.endswith(" | 1 [1, 1] | 1 [1, 1] |") for line in lines if line.startswith("| preln |"))
    assert lines[-1].endswith("; not fitted: scaling fit: hc has 2 size(s) on its ladder; fitting E, A and α needs "
                              "at least 3 sizes of different compute")


def test_runs_without_a_compute_budget_compare_as_before(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = ladder_results(tmp_path / "r", budget=False)
    out, err = compare(root, capsys)
    assert "multiplier" not in out and out.splitlines()[-1].startswith("| preln |") and err == ""
    assert NOTE not in bench.compare(bench.load(root), "preln").attrs


# -- the REPORT --------------------------------------------------------------------------------------------------


def test_bench_report_of_a_scaling_study_has_the_tables_and_the_figure(tmp_path: Path) -> None:
    root = ladder_results(tmp_path / "r")
    assert main(["report", "--study", "ladder", "--results-dir", str(root)]) == 0
    report = next(root.glob("REPORT*ladder*.md")).read_text(encoding="utf-8")
    section = report[report.index("## Scaling fit"):]
    assert "| design | sizes | seeds | E | A | alpha | alpha - alpha(preln) |" in section
    assert "| design | size | train FLOPs | loss | compute multiplier | steps-to-target ratio |" in section
    assert "| hc | budget_flops=1e+12 d_model=16 | 1e+12 | 2.625 | 2 [" in section
    assert "![scaling](plots/ladder/scaling.png)" in section
    assert (root / "plots" / "ladder" / "scaling.png").read_bytes()[:4] == b"\x89PNG"


# -- the site ----------------------------------------------------------------------------------------------------


def test_the_site_figure_draws_points_with_intervals_and_fitted_curves_on_log_axes(tmp_path: Path) -> None:
    pytest.importorskip("plotly", reason="bench site needs plotly: pip install 'resbench[site]'")
    from bench.reports.site_scaling import scaling_plot

    fit = bench.scaling_fit(bench.load(ladder_results(tmp_path / "r")), "preln", draws=50)
    fig = scaling_plot(fit, "final_val_loss")
    assert fig["layout"]["xaxis"]["type"] == fig["layout"]["yaxis"]["type"] == "log"
    lines = {t["legendgroup"]: t for t in fig["data"] if t["mode"] == "lines"}
    dots = {t["legendgroup"]: t for t in fig["data"] if t["mode"] == "markers"}
    assert sorted(lines) == sorted(dots) == ["hc", "preln"]
    assert dots["preln"]["y"] == pytest.approx(curve(COMPUTE[:4]).tolist())  # seeds at -1 %, 0, +1 %: their mean
    assert all(v > 0 for t in dots.values() for v in (*t["error_y"]["array"], *t["error_y"]["arrayminus"]))
    e, log_a, alpha = fit.params["hc"][0]
    assert lines["hc"]["y"][-1] == pytest.approx(e + math.exp(log_a - alpha * math.log(COMPUTE[3])))
    assert lines["hc"]["line"]["color"] == dots["hc"]["marker"]["color"] != dots["preln"]["marker"]["color"]


def test_the_study_page_has_the_scaling_figure_and_the_multiplier_table(tmp_path: Path) -> None:
    pytest.importorskip("plotly", reason="bench site needs plotly: pip install 'resbench[site]'")
    from bench.reports.site import build_site

    site = build_site(ladder_results(tmp_path / "r"), tmp_path / "site").root
    page = (site / "study" / "ladder.html").read_text(encoding="utf-8")
    assert "<h2>Scaling fit and compute multipliers</h2>" in page and 'data-figure="scaling ladder"' in page
    assert "<code>python -m bench scaling-fit --study ladder --baseline preln</code>" in page
    assert '<table class="multipliers"><thead><tr><th>design</th><th>size</th>' in page
    assert "<tr><td>hc</td><td>budget_flops=1e+12 d_model=16</td><td>1e+12</td><td>2.625</td><td>2 [" in page
    assert page.count("<tr><td>hc</td>") == 5  # its row of the fits, its four sizes
    short = build_site(ladder_results(tmp_path / "s", sizes=2), tmp_path / "site2").root
    page = (short / "study" / "ladder.html").read_text(encoding="utf-8")
    assert "<p>No fit: scaling fit: preln has 2 size(s) on its ladder;" in page and 'class="multipliers"' not in page
    none = build_site(ladder_results(tmp_path / "t", study=""), tmp_path / "site3").root
    assert "Scaling fit" not in (none / "study" / "ladder.html").read_text(encoding="utf-8")
