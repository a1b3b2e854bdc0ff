"""Differences paired by seed (bench.analysis.pairing): the formula by hand and against scipy, the exact sign-flip p,
when runs pair and when they fall back to Welch, and the issue's worked example: the same runs, an interval no wider
than Welch's."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from bench.analysis.claims import evaluate_claims, parse_claim
from bench.analysis.pairing import difference, paired_interval, sign_flip_p
from bench.analysis.stats import two_groups
from bench.runs.config import RunConfig

# A seed's loss is mostly the seed's (0.09 apart), the design moves it a little: the situation of the issue.
SEED_PART = np.array([2.00, 2.09, 1.91, 2.05, 1.95])
OFFSET = np.array([-0.004, -0.001, -0.006, -0.002, -0.003])


def test_the_paired_interval_by_hand_and_against_scipy() -> None:
    base, design = SEED_PART, SEED_PART + OFFSET
    seeds = np.arange(5)
    pair = difference(design, base, seeds, seeds)
    d = OFFSET
    half = sps.t.ppf(0.975, 4) * d.std(ddof=1) / math.sqrt(5)
    assert (pair.test, pair.pairs, pair.n, pair.n_base) == ("paired t", 5, 5, 5)
    assert (pair.diff, pair.ci_diff) == pytest.approx((d.mean(), half))
    assert pair.p == pytest.approx(sps.ttest_rel(design, base).pvalue)
    assert pair.p_exact == pytest.approx(2 / 32)  # every difference negative: 2 of the 32 sign patterns
    welch = two_groups(design, base)
    assert welch.test == "Welch" and pair.ci_diff <= welch.ci_diff / 10  # the seed's part cancels in each pair


def test_sign_flip_p_counts_sign_patterns_by_hand() -> None:
    d = np.array([0.5, -1.0, 2.0])
    means = [abs(np.dot(s, d)) / 3 for s in itertools.product((1, -1), repeat=3)]
    assert sign_flip_p(d) == pytest.approx(np.mean([m >= abs(d.mean()) for m in means]))
    assert math.isnan(sign_flip_p(np.ones(17)))  # beyond 16 pairs: the t test alone


def test_the_same_difference_at_every_seed_is_exact_whatever_the_rounding() -> None:
    """-0.03 at every seed, added to losses near 2: the differences differ in their last bits (by how the values
    were rounded, which differs between numpy builds), and are still one difference known exactly, with no t test."""
    base = SEED_PART
    design = base - 0.03
    d = design - base
    assert d.std(ddof=1) > 0  # the rounding this test is about
    pair = difference(design, base, np.arange(5), np.arange(5))
    assert pair.diff == pytest.approx(-0.03) and pair.ci_diff == 0.0 and math.isnan(pair.p)
    moved = difference(design + np.array([0, 0, 0, 0, 1e-9]), base, np.arange(5), np.arange(5))
    assert moved.p < 1e-6 and moved.ci_diff > 0  # a spread beyond rounding is a spread: the t test is made


@pytest.mark.parametrize(("seeds", "seeds_base", "test", "pairs"), [
    ([0, 1, 2], [0, 1, 2], "paired t", 3),
    ([0, 1, 2], [1, 2, 3], "paired t", 2),  # seeds 1 and 2 pair; the others have no partner and are left out
    ([0, 1, 2], [3, 4, 5], "Welch", 0),  # nothing to pair
    ([0, 0, 1], [0, 1, 2], "Welch", 0),  # a seed twice on one side: not a pairing
    (None, [0, 1, 2], "Welch", 0),  # no seeds given: the caller found the groups differ in more than one field
])
def test_runs_pair_only_on_shared_single_seeds(seeds, seeds_base, test, pairs) -> None:
    x, base = np.array([1.0, 1.2, 1.1]), np.array([0.9, 1.0, 1.05])
    pair = difference(x, base, None if seeds is None else np.array(seeds), np.array(seeds_base))
    assert (pair.test, pair.pairs) == (test, pairs)


def test_a_non_finite_value_loses_its_pair() -> None:
    pair = difference(np.array([1.0, np.nan, 1.2]), np.array([0.9, 1.0, 1.0]), np.arange(3), np.arange(3))
    assert (pair.pairs, pair.n) == (2, 2) and pair.diff == pytest.approx(0.15)


def test_paired_interval_is_vectorised_over_studies() -> None:
    d = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    mean, half = paired_interval(d)
    assert mean.tolist() == [2.0, 0.0]
    assert half.tolist() == pytest.approx([sps.t.ppf(0.975, 2) / math.sqrt(3), 0.0])
    assert np.isnan(paired_interval(np.ones((2, 1)))[1]).all()


def board(offsets: dict[str, np.ndarray], seeds: dict[str, range]) -> pd.DataFrame:
    rows = []
    for variant, offset in offsets.items():
        for seed, value in zip(seeds[variant], SEED_PART[list(seeds[variant])] + offset, strict=True):
            cfg = RunConfig(variant=variant, depth=12, seed=seed, task="tinytext")
            rows.append({"run_id": cfg.run_id, "config_hash": cfg.config_hash(), "variant": variant, "depth": 12,
                         "task": "tinytext", "seed": seed, "status": "ok", "final_val_loss": value})
    return pd.DataFrame(rows)


CLAIM = parse_claim({"id": "two-step-beats-preln", "paper": "P", "text": "t", "metric": "final_val_loss",
                     "where": {"variant": ["preln", "twostep"]}, "compare": "variant", "a": "preln", "b": "twostep",
                     "expect": "less"})


def test_a_study_with_matched_seeds_is_compared_paired_with_an_interval_no_wider_than_welchs() -> None:
    """The acceptance test: the same runs, paired by seed, against Welch's interval on them."""
    runs = board({"preln": np.zeros(5), "twostep": OFFSET}, {"preln": range(5), "twostep": range(5)})
    (paired,) = evaluate_claims([CLAIM], runs)
    welch = two_groups(runs[runs["variant"] == "twostep"]["final_val_loss"],
                       runs[runs["variant"] == "preln"]["final_val_loss"])
    assert (paired.test, paired.pairs) == ("paired t", 5)
    assert paired.diff == pytest.approx(welch.diff) and paired.spread <= welch.ci_diff
    assert paired.verdict == "agrees"  # hi < 0: decided, where Welch's interval (±0.11) is not
    assert welch.diff + welch.ci_diff > 0
    # Other seeds on the two sides: nothing to pair, Welch's interval and verdict
    (unpaired,) = evaluate_claims([CLAIM], board({"preln": np.zeros(2), "twostep": OFFSET[2:]},
                                                 {"preln": range(2), "twostep": range(2, 5)}))
    assert (unpaired.test, unpaired.pairs, unpaired.verdict) == ("Welch", 0, "inconclusive")


def test_a_cost_figure_copied_into_other_seeds_rows_counts_once_and_never_pairs() -> None:
    """A sweep measures a configuration's step once and copies the figure into its other seeds' rows (their
    ``cost_source``): a claim on it compares the measurements, two a side here, not the four rows a side."""
    measured = {"preln": (10.0, 10.4), "twostep": (11.0, 11.6)}
    rows = []
    for variant, (first, second) in measured.items():
        for seed in range(4):
            cfg = RunConfig(variant=variant, depth=12, seed=seed, task="tinytext")
            source = RunConfig(variant=variant, depth=12, seed=seed - seed % 2, task="tinytext").run_id
            rows.append({"run_id": cfg.run_id, "config_hash": cfg.config_hash(), "variant": variant, "depth": 12,
                         "task": "tinytext", "seed": seed, "status": "ok", "cost_source": source,
                         "step_time_ms": first if seed < 2 else second})
    claim = parse_claim({"id": "costs-more", "paper": "P", "text": "t", "metric": "step_time_ms",
                         "where": {"variant": ["preln", "twostep"]}, "compare": "variant", "a": "preln",
                         "b": "twostep", "expect": "greater"})
    (result,) = evaluate_claims([claim], pd.DataFrame(rows))
    once = two_groups(measured["twostep"], measured["preln"])
    assert (result.test, [g.n for g in result.groups]) == ("Welch", [2, 2])
    assert (result.diff, result.spread) == pytest.approx((once.diff, once.ci_diff))
