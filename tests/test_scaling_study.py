"""A scaling study as data: the ``zip`` key of study files, the multiplier claim kind, and the bill of a budgeted
run; the shipped ``scaling`` study's grid."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from test_scaling import BASE, FLAT, _results

from bench.analysis.claims import describe, evaluate_claims, parse_claim
from bench.runs.config import build
from bench.runs.results import ResultsStore
from bench.sweeps.bill import _steps
from bench.sweeps.config_costs import Costs
from bench.sweeps.study import load_study

LADDER = '''
name = "ladder"
vary = ["combinator"]
param_tolerance = 0.5
zip = ["model_args", "steps"]
[base]
task = "copy"
seq_len = 8
[grid]
variant = ["preln", "mudd"]
model_args = [{ d_model = 16, n_heads = 2 }, { d_model = 32, n_heads = 2 }, { d_model = 64, n_heads = 2 }]
steps = [10, 20, 40]
seed = [0, 1]
'''


def test_zip_steps_grid_lists_together(tmp_path: Path) -> None:
    path = tmp_path / "ladder.toml"
    path.write_text(LADDER)
    configs = load_study(path).configs()
    assert len(configs) == 2 * 3 * 2  # designs x (width, steps) pairs x seeds, not x 3 x 3
    assert sorted({(dict(c.model_args)["d_model"], c.steps) for c in configs}) == [(16, 10), (32, 20), (64, 40)]


@pytest.mark.parametrize(("edit", "message"), [
    (('steps = [10, 20, 40]', 'steps = [10, 20]'), r"`zip` steps its grid lists together, so each must be a grid "
                                                   r"list of one length; got \{'model_args': 3, 'steps': 2\}"),
    (('zip = ["model_args", "steps"]', 'zip = ["model_args", "depth"]'), r"'depth': 'not in the grid'"),
    (('zip = ["model_args", "steps"]', 'zip = ["model_args"]'), r"`zip` must list two or more grid keys"),
])
def test_zip_refuses_lists_that_cannot_step_together(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    path = tmp_path / "ladder.toml"
    path.write_text(LADDER.replace(*edit))
    with pytest.raises(ValueError, match=message):
        load_study(path).configs()


def test_the_shipped_scaling_study_is_a_ladder_of_equal_flop_budgets() -> None:
    study = load_study("scaling")
    assert study.together == ("model_args", "budget_flops")
    grid = study.grid
    widths = [m["d_model"] for m in grid["model_args"]]
    assert widths == [32, 48, 64, 96, 128] and grid["budget_flops"][-1] / grid["budget_flops"][0] >= 10
    assert {c.kind for c in study.claims} == {"multiplier"}
    assert {(c.b, c.quantity) for c in study.claims} == {
        ("mudd", "multiplier"), ("hyper_connections", "multiplier"), ("hyper_connections", "steps_ratio"),
        ("denseformer", "multiplier"),
        ("vwn_1_5x", "multiplier"), ("mudd", "alpha_diff")}


def test_the_bill_counts_a_budgeted_runs_steps() -> None:
    cfg = build({"variant": "preln", "task": "copy", "batch_size": 8, "budget_flops": 1e9})
    costs = Costs("k", 0.0, 0.0, 0.01, 0.0, 0.0, 1.4e7, None, None, 64, None)
    assert _steps(cfg, costs) == 71  # 1e9 // 1.4e7
    with pytest.raises(ValueError, match=r"--budget-flops 1e\+09 is less than one training step of preln"):
        _steps(cfg, Costs("k", 0.0, 0.0, 0.01, 0.0, 0.0, 2e9, None, None, 64, None))


CLAIM = {"id": "hc-multiplier", "kind": "multiplier", "paper": "p", "text": "t", "metric": "final_val_loss",
         "a": "preln", "b": "hc"}


@pytest.mark.parametrize(("fields", "verdicts"), [
    ({"expect_range": [1.5, 2.5]}, {"agrees"}),  # the multiplier is 2
    ({"expect_range": [3.0, 4.0]}, {"disagrees"}),
    ({"quantity": "alpha_diff", "expect_range": [-0.05, 0.05]}, {"agrees"}),  # a shift leaves α alone
])
def test_a_multiplier_claim_is_judged_on_its_interval(tmp_path: Path, fields: dict, verdicts: set[str]) -> None:
    root = _results(tmp_path / "r")
    store = ResultsStore(root)
    board, runs = store.load_leaderboard(), store.load_runs()
    claim = parse_claim({**CLAIM, **fields})
    results = evaluate_claims([claim], board, runs=runs)
    assert {r.verdict for r in results} == verdicts
    assert len(results) == (1 if claim.quantity == "alpha_diff" else 4)  # one verdict per size of b
    if claim.quantity == "multiplier":
        assert results[0].context == "size d_model=16" and math.isclose(results[0].diff, 2.0, rel_tol=0.05)
        assert "95% bootstrap over 3 seed(s)" in results[0].note


@pytest.mark.parametrize(("expect", "verdict"), [([1.5, 2.1], "disagrees"), ([0.5, 2.0], "inconclusive")])
def test_a_steps_ratio_claim_where_the_design_never_reached_the_target_is_an_upper_bound(
        tmp_path: Path, expect: list[float], verdict: str) -> None:
    # hc's training loss stays above preln's final one: each of its runs counts whole, so 1.0 is an upper bound,
    # below a claimed 1.5 (disagrees), and never "agrees" with a range that contains it
    store = ResultsStore(_results(tmp_path / "r", train={"preln": BASE, "hc": FLAT}))
    claim = parse_claim({**CLAIM, "quantity": "steps_ratio", "expect_range": expect})
    results = evaluate_claims([claim], store.load_leaderboard(), runs=store.load_runs())
    assert {r.verdict for r in results} == {verdict} and len(results) == 4
    assert results[0].note.endswith("3 of 3 seed(s) of hc never reached the target, so the ratio and its interval "
                                    "are upper bounds")


def test_a_multiplier_read_off_curves_the_runs_do_not_follow_decides_nothing(tmp_path: Path) -> None:
    """Both designs 15 % above their curve at the second width: the fitted curves miss their own points beyond the
    seeds' 1 % scatter, and the multiplier (still about 2) is no verdict; it agreed before the test existed."""
    store = ResultsStore(_results(tmp_path / "r", bend=1.15))
    claim = parse_claim({**CLAIM, "expect_range": [1.5, 2.5]})
    results = evaluate_claims([claim], store.load_leaderboard(), runs=store.load_runs())
    assert {r.verdict for r in results} == {"inconclusive"}
    assert results[0].note.endswith("): not a reading of the runs")
    assert "the fitted L(C) of preln, hc misses its own points beyond the seeds' scatter (lack of fit p " in \
        results[0].note


def test_a_multiplier_claim_on_too_short_a_ladder_is_inconclusive_saying_why(tmp_path: Path) -> None:
    store = ResultsStore(_results(tmp_path / "r", sizes=2))
    claim = parse_claim({**CLAIM, "expect_range": [1.5, 2.5]})
    (result,) = evaluate_claims([claim], store.load_leaderboard(), runs=store.load_runs())
    assert result.verdict == "inconclusive" and "preln has 2 size(s) on its ladder" in result.note


@pytest.mark.parametrize(("fields", "message"), [
    ({"quantity": "speedup", "expect_range": [1, 2]}, "unknown quantity 'speedup'; quantities: multiplier, "),
    ({"metric": "final_val_acc", "expect_range": [1, 2]}, "a multiplier claim fits a loss: metric must be "),
    ({}, r"missing field\(s\) \['expect_range'\]"),
])
def test_a_malformed_multiplier_claim_is_refused(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_claim({**CLAIM, **fields})


def test_describe_a_multiplier_claim() -> None:
    claim = parse_claim({**CLAIM, "expect_range": [1.8, 2.4]})
    assert describe(claim) == "multiplier of hc vs preln (final_val_loss): 95% interval in [1.8, 2.4]"


def test_the_report_section_of_a_study_with_a_multiplier_claim(tmp_path: Path) -> None:
    from test_scaling import COMPUTE, curve

    from bench.reports.scaling import figure_data, report_lines

    root = _results(tmp_path / "r")
    (root / "studies").mkdir()
    (root / "studies" / "ladder.toml").write_text(
        'name = "ladder"\n[[claims]]\nid = "m"\nkind = "multiplier"\npaper = "p"\ntext = "t"\n'
        'metric = "final_val_loss"\na = "preln"\nb = "hc"\nexpect_range = [1.5, 2.5]\n')
    store = ResultsStore(root)
    lines = report_lines(root, "ladder", store.load_leaderboard(), store.load_runs())
    assert lines[0] == "## Scaling fit" and "![scaling](plots/ladder/scaling.png)" in lines
    assert (root / "plots" / "ladder" / "scaling.png").stat().st_size > 0
    assert "\n| hc | d_model=16 | 1e+12 |" in "\n".join(lines)
    fit = load_fit(root)
    dots, curves = figure_data(fit, points=5)
    preln = dots[dots["design"] == "preln"]
    assert preln["loss"].to_numpy() == pytest.approx(curve(COMPUTE[:4]))  # seeds at -1 %, 0, +1 %: their mean
    assert (preln["low"] < preln["loss"]).all() and (preln["loss"] < preln["high"]).all()
    assert len(curves) == 10 and curves["compute"].min() == pytest.approx(COMPUTE[0])


def load_fit(root: Path):  # type: ignore[no-untyped-def]
    import bench

    return bench.scaling_fit(bench.load(root), "preln", draws=50)


def test_a_study_without_a_multiplier_claim_has_no_scaling_section(tmp_path: Path) -> None:
    from bench.reports.scaling import report_lines

    root = _results(tmp_path / "r")
    (root / "studies").mkdir()
    (root / "studies" / "ladder.toml").write_text('name = "ladder"\n')
    store = ResultsStore(root)
    assert report_lines(root, "ladder", store.load_leaderboard(), store.load_runs()) == []
