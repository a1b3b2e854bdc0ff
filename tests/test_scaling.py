"""Budgets in compute (bench.runs.budget, bench.sweeps.budgets) and the scaling fit with its compute multipliers
(bench.analysis.scaling, bench.analysis.multiplier, ``bench scaling-fit``)."""

from __future__ import annotations

import dataclasses
import io
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from bench.analysis import scaling
from bench.analysis.multiplier import Curve, Ladder, check_metric, fit_ladders, floor_of, steps_ratio_text
from bench.cli import main
from bench.runs import budget
from bench.runs.config import build
from bench.runs.results import COLUMNS, ResultsStore
from bench.runs.tasks import get as get_task
from bench.runs.train import model_kwargs, task_options
from bench.sweeps.budgets import budget_steps

TINY = dict(depth=2, task="copy", seq_len=16, train_size=64, val_size=32, batch_size=8,
            model_args={"d_model": 32, "n_heads": 2, "d_ff": 64})
# A curve in the range of the studies': E 1 nat, the reducible part 2 nats at 1e12 FLOPs, falling as C^-0.3.
E, ALPHA = 1.0, 0.3
LOG_A = math.log(2.0) + ALPHA * math.log(1e12)
COMPUTE = np.logspace(12, 15, 6)


def curve(c: np.ndarray) -> np.ndarray:
    return E + np.exp(LOG_A - ALPHA * np.log(c))


def ladder(name: str, loss: np.ndarray, compute: np.ndarray = COMPUTE, steps: np.ndarray | None = None) -> Ladder:
    sizes = tuple(f"size{i}" for i in range(len(compute)))
    return Ladder(name, sizes, np.asarray(compute, dtype=float), loss,
                  np.full(loss.shape, np.nan) if steps is None else steps)


# -- budgets ---------------------------------------------------------------------------------------------------


def _step_flops(cfg) -> float:  # type: ignore[no-untyped-def]
    task = get_task(cfg.task, device=torch.device("cpu"), seed=0, options=task_options(cfg))
    return budget.step_flops(cfg, task, model_kwargs(cfg, task))


def test_a_flop_budget_gives_each_design_the_steps_its_flops_allow() -> None:
    configs = [build({**TINY, "variant": v, "budget_flops": 1e9}) for v in ("preln", "hyper_connections", "vwn")]
    steps = budget_steps(configs)
    per_step = {c.variant: _step_flops(c) for c in configs}
    got = {c.variant: steps[c.run_id] for c in configs}
    assert got == {"preln": 68, "hyper_connections": 55, "vwn": 6}  # 1e9 over 1.457e7, 1.811e7, 1.467e8 FLOPs
    for v, n in got.items():  # never more than the budget, and less by under one step
        assert n * per_step[v] <= 1e9 < (n + 1) * per_step[v]
    assert per_step["preln"] < per_step["hyper_connections"] < per_step["vwn"]  # costlier: fewer steps
    assert got["preln"] > got["hyper_connections"] > got["vwn"]


def test_a_samples_budget_is_steps_of_the_global_batch() -> None:
    cfg = build({**TINY, "variant": "preln", "budget_samples": 100, "grad_accum": 2})
    assert budget.budget_steps(cfg) == 6  # 100 // (8 x 2)
    assert budget_steps([cfg]) == {cfg.run_id: 6}


def test_a_budget_is_the_one_training_length() -> None:
    with pytest.raises(ValueError, match="give one training length: --steps or --budget-flops, not both"):
        build({**TINY, "variant": "preln", "budget_flops": 1e9, "steps": 10})
    with pytest.raises(ValueError, match=r"--budget-samples 7 is less than one optimiser step, which takes the "
                                         r"global batch of 8 samples: give at least 8"):
        build({**TINY, "variant": "preln", "budget_samples": 7})
    with pytest.raises(ValueError, match=r"--budget-flops must be a finite number > 0, got -1"):
        build({**TINY, "variant": "preln", "budget_flops": -1})


def test_a_study_whose_budget_buys_some_design_no_step_is_refused_before_any_run() -> None:
    configs = [build({**TINY, "variant": v, "budget_flops": 5e7, "study": "tiny"}) for v in ("preln", "vwn")]
    with pytest.raises(ValueError, match=r"study 'tiny': --budget-flops 5e\+07 is less than one training step of vwn "
                                         r"\(depth 2\) at its global batch of 8: one step takes 1\.467e\+08 FLOPs"):
        budget_steps(configs, "tiny")


def test_bench_run_refuses_a_budget_under_one_step_and_writes_nothing(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", "--variant", "preln", "--depth", "2", "--task", "copy", "--seq-len", "16", "--train-size", "64",
            "--val-size", "32", "--batch-size", "8", "--model-arg", "d_model=32", "--model-arg", "n_heads=2",
            "--model-arg", "d_ff=64", "--results-dir", str(tmp_path / "r"), "--quiet"]
    assert main([*args, "--budget-flops", "1e6"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --budget-flops 1e+06 is less than one training step of preln (depth 2)")
    assert not (tmp_path / "r").exists()


def test_the_row_records_the_budget_and_the_compute_spent(tmp_path: Path) -> None:
    import bench

    run = bench.run("preln", **{**TINY, "budget_flops": 5e7}, optimizer="adamw", lr=1e-3, measure=(),
                    results_dir=tmp_path)
    row = run.row
    assert row["steps"] == 3 and row["budget_flops"] == 5e7 and row["budget_samples"] is None  # 5e7 // 1.457e7
    assert row["train_flops"] == 3 * 14573568.0
    board = ResultsStore(tmp_path).load_leaderboard()
    assert list(board.columns) == list(COLUMNS) and board["train_flops"].tolist() == [3 * 14573568.0]


# -- the fit ---------------------------------------------------------------------------------------------------


def test_the_fit_recovers_a_noiseless_curve_exactly() -> None:
    e, log_a, alpha = scaling.fit_batch(COMPUTE, curve(COMPUTE)[None])[0]
    assert (e, log_a, alpha) == pytest.approx((E, LOG_A, ALPHA), rel=1e-6)
    fixed = scaling.fit_batch(COMPUTE, curve(COMPUTE)[None], e_fixed=E)[0]
    assert fixed == pytest.approx((E, LOG_A, ALPHA), rel=1e-9)


def test_the_intervals_cover_the_true_parameters_in_at_least_90_percent_of_200_draws() -> None:
    # 200 noisy ladders (6 sizes over 3 decades, 5 seeds, 2% noise per run), 60 bootstrap resamples each: all
    # 12,000 refits in one batch of the vectorised solver (about 2 s); the shipped default is 400 resamples.
    rng = np.random.default_rng(7)
    draws, seeds, resamples = 200, 5, 60
    loss = curve(COMPUTE)[None, :, None] * np.exp(rng.normal(0, 0.02, (draws, len(COMPUTE), seeds)))
    idx = scaling.resample(seeds, resamples, rng)
    fits = scaling.fit_batch(COMPUTE, np.concatenate([scaling.seed_means(one, idx) for one in loss]))
    fits = fits.reshape(draws, resamples, 3)
    covered = np.zeros(3)
    for k in range(draws):
        for j, truth in enumerate((E, LOG_A, ALPHA)):
            lo, hi = scaling.interval(fits[k, 0, j], fits[k, 1:, j], seeds)
            covered[j] += lo <= truth <= hi
    assert (covered / draws >= 0.9).all(), covered / draws


def test_a_design_against_itself_has_multiplier_one_within_its_interval() -> None:
    rng = np.random.default_rng(3)
    noisy = [curve(COMPUTE)[:, None] * np.exp(rng.normal(0, 0.02, (len(COMPUTE), 5))) for _ in range(2)]
    fit = fit_ladders({"base": ladder("base", noisy[0]), "same": ladder("same", noisy[1])}, "base", draws=200)
    m = fit.multipliers().set_index(["design", "size"]).loc["same"]
    assert ((m["multiplier_lo"] <= 1) & (m["multiplier_hi"] >= 1)).all()
    f = fit.fits().set_index("design")
    assert f.loc["same", "alpha_diff_lo"] <= 0 <= f.loc["same", "alpha_diff_hi"]
    assert f.loc["base", "alpha_diff"] == 0  # the baseline against itself, draw by draw


def test_a_curve_shifted_by_a_known_factor_in_compute_gets_that_factor_back() -> None:
    k = 2.0  # the design at C reaches what the baseline reaches at 2C
    exact = fit_ladders({"base": ladder("base", curve(COMPUTE)[:, None]),
                         "better": ladder("better", curve(k * COMPUTE)[:, None])}, "base", draws=20)
    assert exact.multipliers().query("design == 'better'")["multiplier"].to_numpy() == pytest.approx(k, rel=1e-6)
    rng = np.random.default_rng(5)
    noise = np.exp(rng.normal(0, 0.01, (2, len(COMPUTE), 5)))
    fit = fit_ladders({"base": ladder("base", curve(COMPUTE)[:, None] * noise[0]),
                       "better": ladder("better", curve(k * COMPUTE)[:, None] * noise[1])}, "base", draws=200)
    m = fit.multipliers().query("design == 'better'")
    assert ((m["multiplier_lo"] <= k) & (k <= m["multiplier_hi"])).all()
    assert m["multiplier"].to_numpy() == pytest.approx(k, rel=0.25)


def test_the_lack_of_fit_test_is_the_f_test_of_a_regression_with_replicates() -> None:
    """Draper & Smith's test on log L: the misfit at the sizes' means against the seeds' scatter around them."""
    from scipy import stats as sps

    loss = np.array([[2.0, 2.1, 1.9], [1.5, 1.6, np.nan], [1.2, 1.25, 1.15]])
    fitted = np.array([2.1, 1.5, 1.2])
    test = scaling.lack_of_fit(loss, fitted, 2)
    logl, n = np.log(loss), np.array([3, 2, 3])
    lof = sum(n[i] * (np.log(np.nanmean(loss[i])) - np.log(fitted[i])) ** 2 for i in range(3))
    pure = sum(np.nansum((logl[i] - np.nanmean(logl[i])) ** 2) for i in range(3))
    f = (lof / 1) / (pure / 5)  # 3 sizes - 2 parameters; 8 runs - 3 sizes
    assert (test.dfn, test.dfd) == (1, 5) and test.f == pytest.approx(f)
    assert test.p == pytest.approx(sps.f.sf(f, 1, 5)) and test.misfit == (test.p < 0.05)
    assert math.isnan(scaling.lack_of_fit(loss, fitted, 3).p)  # 3 sizes, 3 parameters: nothing left to test
    # a noisy ladder on the curve passes; the same ladder bent 10% at one size misses
    rng = np.random.default_rng(4)
    noisy = curve(COMPUTE)[:, None] * np.exp(rng.normal(0, 0.02, (len(COMPUTE), 3)))
    on = fit_ladders({"base": ladder("base", noisy)}, "base", draws=20)
    bent = fit_ladders({"base": ladder("base", noisy * np.where(np.arange(6) == 2, 1.1, 1.0)[:, None])}, "base",
                       draws=20)
    assert not on.lack_of_fit("base").misfit and bent.lack_of_fit("base").misfit
    assert on.misfits("base") == "" and bent.misfits("base").startswith("the fitted L(C) of base misses its own ")


def test_with_the_floor_fixed_the_interval_of_alpha_is_narrower() -> None:
    rng = np.random.default_rng(11)
    loss = curve(COMPUTE)[:, None] * np.exp(rng.normal(0, 0.02, (len(COMPUTE), 5)))
    free = fit_ladders({"b": ladder("b", loss)}, "b", draws=200).fits().iloc[0]
    fixed = fit_ladders({"b": ladder("b", loss)}, "b", e_fixed=E, draws=200).fits().iloc[0]
    assert fixed["E"] == fixed["E_lo"] == fixed["E_hi"] == E  # held: every resample has it
    assert fixed["alpha_hi"] - fixed["alpha_lo"] < 0.5 * (free["alpha_hi"] - free["alpha_lo"])


def test_the_steps_to_target_ratio_is_the_baselines_mean_steps_over_the_designs() -> None:
    loss = curve(COMPUTE)[:, None].repeat(3, axis=1)
    steps_b = np.array([[180.0, 170.0, 190.0]] * len(COMPUTE))
    fit = fit_ladders({"b": ladder("b", loss, steps=steps_b), "d": ladder("d", loss, steps=steps_b / 1.8)}, "b",
                      draws=50)
    assert fit.multipliers().query("design == 'd'")["steps_ratio"].to_numpy() == pytest.approx(1.8)


STEPS = np.arange(1.0, 101.0)
BASE, FAST, FLAT = 10 - 0.05 * STEPS, 10 - 0.11 * STEPS, np.full(100, 9.0)  # 100 steps each


def test_the_steps_ratio_reads_training_curves_against_the_baselines_final_loss() -> None:
    # trailing mean over 5 steps; the baseline's final one is 10 - 0.05 * 98 = 5.1, which it first reaches at step
    # 100, the fast design at step 47 (10 - 0.11 * 45 = 5.05); the flat one never does, so its whole run counts
    loss = curve(COMPUTE)[:, None].repeat(3, axis=1)

    def run(name: str, losses: np.ndarray) -> Ladder:
        drawn = Curve(STEPS * 8, losses)
        return dataclasses.replace(ladder(name, loss), curves=tuple((drawn,) * 3 for _ in COMPUTE))

    fit = fit_ladders({"b": run("b", BASE), "fast": run("fast", FAST), "flat": run("flat", FLAT)}, "b", draws=50)
    m = fit.multipliers().set_index("design")
    assert m.loc["fast", "steps_ratio"].to_numpy() == pytest.approx(100 / 47)
    assert m.loc["fast", "steps_ratio_short"].tolist() == [0] * len(COMPUTE)
    assert m.loc["flat", "steps_ratio"].to_numpy() == pytest.approx(1.0)  # an upper bound:
    assert m.loc["flat", "steps_ratio_short"].tolist() == [3] * len(COMPUTE)  # no seed reached the target
    assert steps_ratio_text(fit).startswith("the samples b needs to reach its own final training loss (the trailing "
                                            "mean over 5% of its steps)")


def test_a_fit_refuses_too_few_sizes_sizes_equal_in_compute_and_a_metric_that_is_not_a_loss() -> None:
    two = curve(COMPUTE[:2])[:, None]
    with pytest.raises(ValueError, match=r"scaling fit: small has 2 size\(s\) on its ladder; fitting E, A and α needs "
                                         "at least 3 sizes"):
        fit_ladders({"small": ladder("small", two, COMPUTE[:2])}, "small")
    same = np.array([1e12, 1e13, 1.005e13])
    with pytest.raises(ValueError, match=r"two sizes of flat do not differ in training compute "
                                         r"\(1e\+13 and 1\.005e\+13"):
        fit_ladders({"flat": ladder("flat", curve(same)[:, None], same)}, "flat")
    with pytest.raises(ValueError, match=r"--metric final_val_acc: a scaling fit models a loss .* choose "
                                         "final_val_loss or final_train_loss"):
        check_metric("final_val_acc")
    with pytest.raises(ValueError, match=r"the baseline 'preln' has no runs here; designs: \['b'\]"):
        fit_ladders({"b": ladder("b", curve(COMPUTE)[:, None])}, "preln")


# -- bench scaling-fit -----------------------------------------------------------------------------------------


def _results(root: Path, sizes: int = 4, floor_bpc: float | None = E / math.log(2),
             train: dict[str, np.ndarray] | None = None, bend: float = 1.0) -> Path:
    """A results folder of two designs on a ladder of ``sizes`` widths, 3 seeds: preln on the curve, hc on the curve
    at twice the compute; ``train``: per design the training loss of each of its steps, recorded as every run's
    training curve; ``bend``: the factor of both designs' losses at the second width (1: on the curve)."""
    store = ResultsStore(root)
    for design, factor in (("preln", 1.0), ("hc", 2.0)):
        for i, width in enumerate((16, 32, 64, 128, 256)[:sizes]):
            c = float(COMPUTE[i])
            for seed in range(3):
                loss = float(curve(np.array([factor * c]))[0]) * (1 + 0.01 * (seed - 1)) * (bend if i == 1 else 1.0)
                run_id = f"{design}-w{width}-s{seed}"
                row = {"run_id": run_id, "variant": design, "task": "tinytext", "seed": seed, "status": "ok",
                       "steps": 100, "batch_size": 8, "grad_accum": 1, "train_flops_per_sample": c / 800,
                       "final_val_loss": loss, "final_val_acc": 0.5, "study": "ladder"}
                config = {"variant": design, "seed": seed, "task": "tinytext", "model_args": [["d_model", width]],
                          "study": "ladder"}
                task = {"entropy_floor_bpc": floor_bpc} if floor_bpc is not None else {}
                curves = {"train": [{"step": s + 1, "loss": float(v)} for s, v in enumerate(train[design])]} \
                    if train else {}
                store.append(row, {"run_id": run_id, "row": row, "config": config, "task": task, "curves": curves})
    return root


def test_scaling_fit_prints_each_designs_fit_and_multiplier(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    root = _results(tmp_path / "r")
    assert main(["scaling-fit", "--results-dir", str(root), "--baseline", "preln", "--draws", "50"]) == 0
    out = capsys.readouterr().out
    assert "E held at the task's known floor, 1 nats" in out
    assert "| design | sizes | seeds | E | A | alpha | alpha - alpha(preln) |" in out
    assert "| hc | d_model=16 | 1e+12 |" in out and "| preln | d_model=128 | 6.31e+13 |" in out
    hc = [line for line in out.splitlines() if line.startswith("| hc | d_model=")]
    assert len(hc) == 4 and all(" | 2 [" in line for line in hc)  # the multiplier, 2.00 to 3 digits
    assert main(["scaling-fit", "--results-dir", str(root), "--baseline", "preln", "--draws", "50",
                 "--free-floor", "--format", "csv"]) == 0
    fits, mults = (pd.read_csv(io.StringIO(part)) for part in capsys.readouterr().out.split("\n\n"))
    assert fits["E_fixed"].tolist() == [False, False] and fits["E"].to_numpy() == pytest.approx(E, rel=0.05)
    m = mults
    assert m.query("design == 'hc'")["multiplier"].to_numpy() == pytest.approx(2.0, rel=0.1)
    assert m.query("design == 'preln'")["multiplier"].to_numpy() == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize(("args", "sizes", "message"), [
    (["--metric", "final_val_acc"], 4, "error: --metric final_val_acc: a scaling fit models a loss"),
    ([], 2, "error: scaling fit: preln has 2 size(s) on its ladder"),
    (["--baseline", "postln"], 4, "error: scaling fit: the baseline 'postln' has no runs here"),
])
def test_scaling_fit_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                       sizes: int, message: str) -> None:
    root = _results(tmp_path / "r", sizes=sizes)
    before = sorted(p.name for p in root.rglob("*"))
    assert main(["scaling-fit", "--results-dir", str(root), "--baseline", "preln", *args]) == 2
    assert capsys.readouterr().err.startswith(message)
    assert sorted(p.name for p in root.rglob("*")) == before  # nothing written


def test_the_floor_is_known_only_where_every_run_records_it(tmp_path: Path) -> None:
    assert floor_of([{"task": {"entropy_floor_bpc": 1.0}}] * 2) == pytest.approx(math.log(2))
    assert floor_of([{"task": {"entropy_floor_bpc": 1.0}}, {"task": {}}]) is None
    assert floor_of([{"task": {"entropy_floor_bpc": 1.0}}, {"task": {"entropy_floor_bpc": 2.0}}]) is None
