"""bench.analysis.claims: the claim vocabulary (every parse error), each verdict branch on hand-built runs, probe
quantities."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from bench.analysis.claims import _matches, describe, evaluate_claims, parse_claim, parse_claims, probe_quantity
from bench.analysis.studyfile import STUDIES_DIR, find_study, read_study_file
from bench.reports.markdown import claim_lines
from bench.runs.config import RunConfig
from bench.sweeps.study import load_study


def load_claims(path):
    return load_study(path).claims

T975_2 = 4.302653  # Student t quantile, 0.975, 2 degrees of freedom (printed tables)


def runs(variant: str, depth: int, values, statuses=None, metric: str = "final_train_loss", seed0: int = 0,
         **config) -> list[dict]:
    """Leaderboard rows of one configuration, one per value (seed ``seed0``, +1, ...: two groups of other seeds do
    not pair); run ids and hashes as bench makes them."""
    rows = []
    for i, value in enumerate(values):
        seed = seed0 + i
        cfg = RunConfig(variant=variant, depth=depth, seed=seed, **config)
        status = statuses[i] if statuses else "ok"
        rows.append({"run_id": cfg.run_id, "config_hash": cfg.config_hash(), "variant": variant, "depth": depth,
                     "task": cfg.task, "seed": seed, "status": status, "warmup_steps": cfg.warmup_steps,
                     "lr": cfg.lr, metric: value if status in ("ok", "failed_to_learn") else None})  # fmt: skip
    return rows


def board(*groups: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([r for g in groups for r in g])


BASE = {"id": "c", "paper": "P 2020, Fig. 1", "text": "words", "metric": "final_train_loss"}


def claim(**kw):
    return parse_claim(BASE | kw)


def depth_claim(expect: str, **kw):
    return claim(where={"variant": "plain"}, compare="depth", a=20, b=56, expect=expect, **kw)


def one(claims, df, probes=None, run_jsons=None):
    (result,) = evaluate_claims(claims if isinstance(claims, list) else [claims], df, probes, run_jsons)
    return result


# --- parsing --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (["not", "a", "table"], r"claim: a claim is a table"),
        (BASE | {"kind": "trend"}, r"claim 'c': unknown kind 'trend'; kinds: compare, slope, value"),
        (
            BASE | {"compare": "depth", "a": 1, "b": 2, "expect": "greater", "colour": "red"},
            r"claim 'c': unknown field\(s\) \['colour'\] for kind 'compare'",
        ),
        (
            BASE | {"kind": "slope", "x": "depth", "expect_range": [0, 1], "a": 1},
            r"unknown field\(s\) \['a'\] for kind 'slope'",
        ),
        (
            BASE | {"kind": "value", "expect": "greater", "threshold": 1, "relative": True},
            r"unknown field\(s\) \['relative'\] for kind 'value'",
        ),
        (
            {k: v for k, v in BASE.items() if k != "metric"} | {"compare": "d", "a": 1, "b": 2, "expect": "less"},
            r"claim 'c': missing field\(s\) \['metric'\]",
        ),
        ({"paper": "p", "text": "t", "metric": "final_train_loss"}, r"claim: missing field\(s\) \['id', 'compare'"),
        (BASE | {"kind": "slope", "x": "depth"}, r"missing field\(s\) \['expect_range'\]"),
        (BASE | {"kind": "value", "expect": "greater"}, r"missing field\(s\) \['threshold'\]"),
        (BASE | {"text": " ", "compare": "d", "a": 1, "b": 2, "expect": "less"}, r"text must be a non-empty string"),
        (
            BASE | {"metric": "loss_at_end", "compare": "d", "a": 1, "b": 2, "expect": "less"},
            r"unknown metric 'loss_at_end': not a leaderboard column, one of train_error, val_error",
        ),
        (
            BASE | {"metric": "probe:grad_norm:ffn", "compare": "d", "a": 1, "b": 2, "expect": "less"},
            r"probe metric 'probe:grad_norm:ffn' is not probe:<probe metric>:<unit kind>:<position>",
        ),
        (
            BASE | {"metric": "probe:grad_norm:ffn:middle", "compare": "d", "a": 1, "b": 2, "expect": "less"},
            r"unknown position 'middle'; positions: first, last, last_over_first",
        ),
        (BASE | {"step": 5, "compare": "d", "a": 1, "b": 2, "expect": "less"}, r"step is for probe metrics only"),
        (
            BASE | {"metric": "probe:g:ffn:last", "step": -1, "compare": "d", "a": 1, "b": 2, "expect": "less"},
            r"step must be an integer >= 0, got -1",
        ),
        (BASE | {"where": "plain", "compare": "d", "a": 1, "b": 2, "expect": "less"}, r"where must be a table"),
        (
            BASE | {"where": {"variant": []}, "compare": "d", "a": 1, "b": 2, "expect": "less"},
            r"where.variant must be a value or a non-empty list of values, got \[\]",
        ),
        (
            BASE | {"where": {"variant": {"x": 1}}, "compare": "d", "a": 1, "b": 2, "expect": "less"},
            r"where.variant must be a value",
        ),
        (
            BASE | {"for_each": "depth", "compare": "depth", "a": 1, "b": 2, "expect": "less"},
            r"for_each and compare name the same field 'depth'",
        ),
        (BASE | {"compare": "", "a": 1, "b": 2, "expect": "less"}, r"compare must be a field name"),
        (
            BASE | {"count_above": "half", "compare": "d", "a": 1, "b": 2, "expect": "less"},
            r"count_above must be a number, got 'half'",
        ),
        (
            BASE | {"compare": "d", "a": 1, "b": 2, "expect": "bigger"},
            r"unknown expect 'bigger'; expect: greater, less, not_greater, not_less, similar",
        ),
        (
            BASE | {"kind": "value", "expect": "about", "threshold": 1},
            r"unknown expect 'about'; expect: greater, less, not_greater, not_less, similar$",
        ),
        (
            BASE | {"compare": "d", "a": 1, "b": 2, "expect": "less", "threshold": -0.1},
            r"threshold is a margin and must be >= 0, got -0.1",
        ),
        (
            BASE | {"compare": "d", "a": 1, "b": 2, "expect": "less", "threshold": "5%"},
            r"threshold must be a number, got '5%'",
        ),
        (
            BASE | {"compare": "d", "a": 1, "b": 2, "expect": "less", "relative": "yes"},
            r"relative must be true or false, got 'yes'",
        ),
        (BASE | {"compare": "d", "a": [1, 2], "b": 3, "expect": "less"}, r"a must be a single value"),
        (BASE | {"compare": "d", "a": "max", "b": "max", "expect": "less"}, r"a and b are the same value 'max'"),
        (
            BASE | {"kind": "slope", "x": "depth", "expect_range": [1, -1]},
            r"expect_range must be \[low, high\] with low < high, got \[1, -1\]",
        ),
        (BASE | {"kind": "slope", "x": "depth", "expect_range": [0, 1, 2]}, r"expect_range must be \[low, high\]"),
    ],
)
def test_parse_errors_name_the_claim_and_the_field(table, message):
    with pytest.raises(ValueError, match=message):
        parse_claim(table)


def test_every_problem_of_a_claim_is_reported_at_once():
    with pytest.raises(ValueError, match=r"claim 'c': text must be .*; step is for probe .*; unknown expect"):
        parse_claim(BASE | {"text": "", "step": 1, "compare": "d", "a": 1, "b": 2, "expect": "up"})


def test_parse_claims_checks_the_array_and_unique_ids(tmp_path: Path):
    good = BASE | {"compare": "d", "a": 1, "b": 2, "expect": "less"}
    with pytest.raises(ValueError, match=r"s.toml: claims must be an array of tables"):
        parse_claims({"id": "x"}, "s.toml")
    with pytest.raises(ValueError, match=r"s.toml: claim id\(s\) \['c'\] used more than once"):
        parse_claims([good, good], "s.toml")
    with pytest.raises(ValueError, match=r"s.toml: claim #2: missing field"):
        parse_claims([good, {"paper": "p"}], "s.toml")
    with pytest.raises(ValueError, match=r"s.toml: claim 'c': unknown expect"):
        parse_claims([good | {"expect": "up"}], "s.toml")
    inits = {"init": ["xavier", "normal"]}
    c = parse_claims([good | {"threshold": 1, "relative": True, "where": inits}])[0]
    assert (c.kind, c.threshold, c.relative, c.where, c.step) == ("compare", 1.0, True, inits, 0)


def test_load_claims_and_study_file_lookup(tmp_path: Path):
    with pytest.raises(ValueError, match="does not exist"):
        read_study_file(tmp_path / "none.toml")
    with pytest.raises(ValueError, match="does not exist"):
        find_study(tmp_path / "none.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[[claims]\n")
    with pytest.raises(ValueError, match="is not valid TOML"):
        load_claims(bad)
    (tmp_path / "none.toml").write_text('name = "none"\n')
    assert load_claims(tmp_path / "none.toml") == []
    assert find_study("degradation", tmp_path) == STUDIES_DIR / "degradation.toml"
    copy = tmp_path / "studies" / "degradation.toml"
    copy.parent.mkdir()
    copy.write_text('name = "degradation"\n')
    assert find_study("degradation", tmp_path) == copy  # the copy the sweep ran from wins
    assert find_study("degradation") == STUDIES_DIR / "degradation.toml"  # without a results directory: shipped
    with pytest.raises(ValueError, match=r"no shipped study 'unheard-of'; shipped studies: cost, crosslayer"):
        find_study("unheard-of", tmp_path)


@pytest.mark.parametrize("name", ["degradation", "pathfinder", "warmup", "xiong"])
def test_shipped_studies_declare_valid_claims(name):
    assert load_claims(STUDIES_DIR / f"{name}.toml")  # parsed, so each claim's fields are valid


def test_xiong_claims_are_made_under_both_inits():
    claims = load_claims(STUDIES_DIR / "xiong.toml")
    by_init = {i: sorted(c.id.removesuffix(f"-{i}") for c in claims if c.where.get("init") == i)
               for i in ("xavier", "normal")}  # fmt: skip
    assert by_init["xavier"] == by_init["normal"] and len(by_init["xavier"]) == len(claims) / 2
    slopes = {c.id: c.expect_range for c in claims if c.kind == "slope"}
    assert slopes["preln-last-ffn-grad-falls-with-depth-xavier"] == (-0.75, -0.25)
    assert slopes["postln-last-ffn-grad-flat-in-depth-xavier"] == (-0.15, 0.15)


def test_describe_says_what_is_tested():
    c = claim(where={"variant": "plain"}, compare="depth", a="min", b="max", expect="not_greater", threshold=0.01)
    assert describe(c) == "final_train_loss where variant=plain: depth=max vs min: not greater by more than 0.01"
    s = claim(kind="slope", metric="probe:weight_grad_norm:ffn:last", where={"depth": [6, 12]}, x="depth",
              expect_range=[-0.75, -0.25])  # fmt: skip
    assert describe(s) == ("log-log slope of probe:weight_grad_norm:ffn:last at step 0 vs depth where depth=6|12: "
                           "in [-0.75, -0.25]")  # fmt: skip
    v = claim(kind="value", for_each="depth", expect="greater", threshold=1.5)
    assert describe(v) == "final_train_loss, for each depth: mean greater than 1.5"
    r = claim(compare="warmup_steps", a="max", b=0, expect="similar", threshold=0.05, relative=True)
    assert describe(r).endswith("warmup_steps=0 vs max: within ±0.05 x |mean(a)|, the whole 95% CI of the difference")


# --- compare verdicts --------------------------------------------------------------------------------------


def test_greater_agrees_with_the_paired_differences_by_hand():
    """Two depths of one variant, seeds 0-2 each: the configurations differ in the compared field alone, so the
    claim reads the per-seed differences 1.0, 1.1, 1.2: mean 1.1, sd 0.1, t(0.975, 2)·0.1/√3."""
    df = board(runs("plain", 20, [1.0, 1.1, 1.2]), runs("plain", 56, [2.0, 2.2, 2.4]))
    r = one(depth_claim("greater", threshold=0.5), df)
    assert (r.verdict, r.test, r.pairs, r.compared) == ("agrees", "paired t", 3, 3)
    assert (r.diff, r.spread) == pytest.approx((1.1, T975_2 * 0.1 / math.sqrt(3)))
    assert r.p == pytest.approx(sps.ttest_rel([2.0, 2.2, 2.4], [1.0, 1.1, 1.2]).pvalue)
    assert r.p_exact == pytest.approx(0.25)  # all three differences positive: 2 of 8 sign patterns


def test_greater_agrees_with_the_group_statistics_by_hand():
    """Other seeds in the two groups (nothing to pair): Welch's interval of the difference of the means."""
    df = board(runs("plain", 20, [1.0, 1.1, 1.2]), runs("plain", 56, [2.0, 2.2, 2.4], seed0=3))
    r = one(depth_claim("greater", threshold=0.5), df)
    assert (r.test, r.pairs, r.compared) == ("Welch", 0, 3)
    ci_a, ci_b = T975_2 * 0.1 / math.sqrt(3), T975_2 * 0.2 / math.sqrt(3)
    assert r.verdict == "agrees" and r.context == "" and r.note == ""
    (a, b) = r.groups
    assert (a.label, a.n_runs, a.n_failed, a.n, b.label) == ("depth=20", 3, 0, 3, "depth=56")
    assert (a.mean, a.ci, b.mean, b.ci) == pytest.approx((1.1, ci_a, 2.2, ci_b))
    va, vb = 0.1**2 / 3, 0.2**2 / 3  # Welch: the CI of the difference, t at the Welch-Satterthwaite dof
    dof = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 2)
    assert dof == pytest.approx(2.9412, abs=1e-4)
    half = float(sps.t.ppf(0.975, dof)) * math.sqrt(va + vb)
    assert (r.diff, r.threshold, r.spread) == pytest.approx((1.1, 0.5, half))
    assert r.diff - r.spread > 0.5  # the whole interval above the margin


# Baseline depth=20: [1.0, 1.1, 1.2], seeds 0-2; the deep group's seeds 10-12 do not pair. The verdict reads the 95%
# Welch CI of diff = mean(deep) - mean(baseline).
@pytest.mark.parametrize(
    ("deep", "expect", "threshold", "verdict"),
    [
        ([2.0, 2.2, 2.4], "greater", 0.5, "agrees"),  # diff 1.1, CI 0.69 … 1.51: wholly above 0.5
        ([1.0, 1.1, 1.2], "greater", 0.3, "disagrees"),  # diff 0, CI ±0.23: wholly at or below 0.3
        ([1.0, 1.1, 1.2], "greater", 0.01, "inconclusive"),  # diff 0 <= margin, but the CI reaches 0.23
        ([1.0, 2.0, 3.0], "greater", 0.01, "inconclusive"),  # diff 0.9 > margin, CI ~2.6: within the spread
        ([2.0, 2.2, 2.4], "not_greater", 0.5, "disagrees"),
        ([1.05, 1.15, 1.25], "not_greater", 0.3, "agrees"),  # CI -0.18 … +0.28: wholly below 0.3
        ([1.05, 1.15, 1.25], "not_greater", 0.1, "inconclusive"),  # the point estimate 0.05 alone is not enough
        ([0.0, 0.1, 0.2], "less", 0.5, "agrees"),
        ([2.0, 2.2, 2.4], "less", 0.0, "disagrees"),
        ([0.0, 0.1, 0.2], "not_less", 0.5, "disagrees"),
        ([2.0, 2.2, 2.4], "not_less", 0.0, "agrees"),
        ([1.02, 1.12, 1.22], "similar", 0.3, "agrees"),  # CI -0.21 … +0.25: inside ±0.3
        ([1.12, 1.22, 1.32], "similar", 0.2, "inconclusive"),  # diff 0.12 inside ±0.2, its CI (to 0.35) is not
        ([3.0, 3.1, 3.2], "similar", 0.2, "disagrees"),  # CI 1.77 … 2.23: wholly outside ±0.2
        ([1.0, 1.5, 2.0], "similar", 0.2, "inconclusive"),  # |diff| 0.4: above the margin, inside the spread
    ],
)
def test_each_expectation_maps_the_ci_rule_to_a_verdict(deep, expect, threshold, verdict):
    df = board(runs("plain", 20, [1.0, 1.1, 1.2]), runs("plain", 56, deep, seed0=10))
    assert one(depth_claim(expect, threshold=threshold), df).verdict == verdict


def test_similar_agrees_only_when_the_interval_of_the_difference_is_inside_the_margin():
    """A point estimate well inside the margin, with a seed spread three times wider than it, cannot tell: the
    user's SkipInit-vs-BatchNorm claim (diff 0.0065, margin 0.02, CI half-widths 0.056) read agrees before."""
    base, other = [0.10, 0.15, 0.20], [0.1065, 0.1565, 0.2065]
    similar = claim(metric="final_val_loss", where={"variant": "plain"}, compare="depth", a=20, b=56,
                    expect="similar", threshold=0.02)
    df = board(runs("plain", 20, base, metric="final_val_loss"),
               runs("plain", 56, other, metric="final_val_loss", seed0=3))  # unpaired: Welch
    r = one(similar, df)
    assert r.diff == pytest.approx(0.0065) and r.spread > 0.1 and r.verdict == "inconclusive"
    # The same values from the same seeds: each seed's difference is 0.006-0.007, and that is what pairing reads
    paired = board(runs("plain", 20, base, metric="final_val_loss"),
                   runs("plain", 56, [0.106, 0.157, 0.2065], metric="final_val_loss"))
    r = one(similar, paired)
    assert (r.test, r.verdict) == ("paired t", "agrees") and r.spread < 0.002
    tight = board(runs("plain", 20, [0.150, 0.151, 0.152], metric="final_val_loss"),
                  runs("plain", 56, [0.1565, 0.1575, 0.1585], metric="final_val_loss"))
    r = one(claim(metric="final_val_loss", where={"variant": "plain"}, compare="depth", a=20, b=56,
                  expect="similar", threshold=0.02), tight)
    assert r.verdict == "agrees" and abs(r.diff) + r.spread <= 0.02


def test_a_group_with_one_counted_run_is_inconclusive_either_way():
    df = board(runs("plain", 20, [1.0]), runs("plain", 56, [5.0]))
    assert one(depth_claim("greater"), df).verdict == "inconclusive"
    df = board(runs("plain", 20, [1.0, 1.1]), runs("plain", 56, [1.0]))
    assert one(depth_claim("not_greater", threshold=0.5), df).verdict == "inconclusive"


def test_relative_threshold_is_a_fraction_of_the_baseline_mean():
    df = board(runs("plain", 20, [10.0, 10.0, 10.0]), runs("plain", 56, [10.4, 10.4, 10.4]))
    r = one(depth_claim("greater", threshold=0.05, relative=True), df)  # margin 0.5 > rise 0.4: "no"
    assert r.threshold == pytest.approx(0.5) and r.verdict == "disagrees"
    r = one(depth_claim("greater", threshold=0.03, relative=True), df)  # margin 0.3; CIs 0: a clear rise
    assert r.threshold == pytest.approx(0.3) and r.verdict == "agrees"


def test_min_and_max_resolve_to_the_values_present():
    df = board(runs("plain", 20, [1.0, 1.1]), runs("plain", 56, [1.5, 1.6]), runs("plain", 110, [3.0, 3.1]))
    r = one(claim(where={"variant": "plain"}, compare="depth", a="min", b="max", expect="greater"), df)
    assert [g.label for g in r.groups] == ["depth=20", "depth=110"] and r.verdict == "agrees"
    lone = one(claim(compare="depth", a="min", b="max", expect="greater"), board(runs("plain", 20, [1.0, 1.1])))
    assert lone.verdict == "inconclusive" and lone.note == "only depth=20 is present"
    missing = one(depth_claim("greater"), board(runs("plain", 20, [1.0, 1.1])))
    assert missing.verdict == "inconclusive" and missing.note == "no runs with depth=56"


def test_a_group_whose_every_run_failed_counts_as_the_worse_one():
    failed = runs("plain", 56, [None, None], statuses=["diverged", "oom"])
    df = board(runs("plain", 20, [1.0, 1.1]), failed)
    r = one(depth_claim("greater", threshold=0.5), df)  # a loss: lower is better, so the failed group is "greater"
    assert r.verdict == "agrees" and "every run of one group failed" in r.note
    assert (r.groups[1].n, r.groups[1].n_failed, r.groups[1].n_runs) == (0, 2, 2)
    assert one(depth_claim("not_greater"), df).verdict == "disagrees"
    assert one(depth_claim("similar"), df).verdict == "disagrees"
    # The baseline failed instead: the deep group is the better one, so it is not greater.
    df = board(runs("plain", 20, [None, None], statuses=["diverged", "diverged"]), runs("plain", 56, [9.0, 9.0]))
    assert one(depth_claim("greater"), df).verdict == "disagrees"
    assert one(depth_claim("less"), df).verdict == "agrees"


def test_failures_on_an_accuracy_make_the_failed_group_lower():
    ok = runs("plain", 20, [0.9, 0.91], metric="final_train_acc")
    failed = runs("plain", 56, [None, None], statuses=["diverged", "diverged"], metric="final_train_acc")
    acc = claim(metric="final_train_acc", where={"variant": "plain"}, compare="depth", a=20, b=56, expect="less")
    assert one(acc, board(ok, failed)).verdict == "agrees"
    err = parse_claim(BASE | {"metric": "train_error", "compare": "depth", "a": 20, "b": 56, "expect": "greater"})
    r = one(err, board(ok, failed))  # train_error = 1 - acc: lower is better
    assert r.verdict == "agrees" and r.groups[0].mean == pytest.approx(0.095)


def test_failures_that_cannot_be_ranked_or_on_both_sides_are_inconclusive():
    both = board(runs("plain", 20, [None], statuses=["oom"]), runs("plain", 56, [None], statuses=["error"]))
    assert one(depth_claim("greater"), both).note.startswith("every run of both groups failed")
    stalled = board(*(runs("postln", d, [3.06, 3.07], ["failed_to_learn"] * 2, "final_val_loss") for d in (20, 56)))
    r = one(claim(metric="final_val_loss", compare="depth", a=20, b=56, expect="similar", threshold=0.1), stalled)
    assert r.verdict == "inconclusive" and "two failures never agree" in r.note  # both at chance: not "similar"
    mem = claim(metric="peak_mem_mb", compare="depth", a=20, b=56, expect="greater")
    df = board(runs("plain", 20, [5.0, 6.0], metric="peak_mem_mb"),
               runs("plain", 56, [None, None], statuses=["oom", "oom"], metric="peak_mem_mb"))  # fmt: skip
    r = one(mem, df)
    assert r.verdict == "inconclusive" and "peak_mem_mb cannot rank a failure" in r.note


def test_more_failures_in_one_group_must_be_borne_out_by_the_values():
    base = runs("plain", 20, [1.0, 1.0, 1.0, 1.0])
    # Deep: one of four runs diverged, the others as good: "not greater" alone would agree.
    deep = runs("plain", 56, [1.0, 1.0, 1.0, None], statuses=["ok", "ok", "ok", "diverged"])
    r = one(depth_claim("not_greater", threshold=0.1), board(base, deep))
    assert r.verdict == "inconclusive" and "more runs failed with depth=56" in r.note
    assert one(depth_claim("similar", threshold=0.1), board(base, deep)).verdict == "inconclusive"
    worse = runs("plain", 56, [2.0, 2.0, 2.0, None], statuses=["ok", "ok", "ok", "diverged"])
    assert one(depth_claim("greater", threshold=0.1), board(base, worse)).verdict == "agrees"  # both say worse


def test_fields_and_filters_that_select_nothing_are_inconclusive():
    df = board(runs("plain", 20, [1.0, 1.1]), runs("plain", 56, [2.0, 2.1]))
    r = one(claim(where={"init": "xavier"}, compare="depth", a=20, b=56, expect="greater"), df)
    assert r.verdict == "inconclusive" and r.note == "field(s) ['init'] not recorded for these runs"
    r = one(claim(where={"variant": "resnet"}, compare="depth", a=20, b=56, expect="greater"), df)
    assert r.note == "no runs match its where"
    r = one(claim(metric="final_val_acc", compare="depth", a=20, b=56, expect="greater"), df)
    assert r.note == "final_val_acc not recorded for these runs"


def test_for_each_gives_one_verdict_per_value():
    df = board(runs("plain", 20, [1.0, 1.01]), runs("resnet", 20, [1.0, 1.01]),
               runs("plain", 56, [3.0, 3.1]), runs("resnet", 56, [1.0, 1.1]))  # fmt: skip
    c = claim(for_each="depth", compare="variant", a="plain", b="resnet", expect="less", threshold=0.1)
    results = evaluate_claims([c], df)
    assert [(r.context, r.verdict) for r in results] == [("depth=20", "disagrees"), ("depth=56", "agrees")]


def test_seeds_pool_only_within_one_configuration():
    # The deep plain group was run at two learning rates: each gets its own verdict, never one pooled mean.
    df = board(runs("plain", 20, [1.0, 1.1], lr=0.1), runs("plain", 20, [1.0, 1.1], lr=0.01),
               runs("plain", 56, [3.0, 3.1], lr=0.1), runs("plain", 56, [1.0, 1.1], lr=0.01))  # fmt: skip
    results = evaluate_claims([depth_claim("greater", threshold=0.5)], df)
    assert [(r.context, r.verdict, r.groups[1].n) for r in results] == [
        ("lr=0.01", "disagrees", 2),
        ("lr=0.1", "agrees", 2),
    ]
    # A difference recorded nowhere but in the config hash: no pooled mean, no guess which config to compare.
    hidden = board(runs("plain", 20, [1.0, 1.1]), runs("plain", 20, [5.0, 5.1], eval_every=7),
                   runs("plain", 56, [3.0, 3.1]))  # fmt: skip
    r = one(depth_claim("greater", threshold=0.5), hidden)
    assert r.verdict == "inconclusive" and r.groups == () and "spans several configurations (config_hash)" in r.note


def test_a_configuration_without_one_group_is_left_out_where_another_has_both():
    # lr 0.01 ran the shallow net only (a preset of other designs): it asks nothing of a depth comparison
    df = board(runs("plain", 20, [1.0, 1.1], lr=0.1), runs("plain", 56, [3.0, 3.1], lr=0.1),
               runs("plain", 20, [1.0, 1.1], lr=0.01))  # fmt: skip
    r = one(depth_claim("greater", threshold=0.5), df)
    assert (r.context, r.verdict) == ("lr=0.1", "agrees")
    # no configuration has both: the claim still says which group is missing
    r = one(depth_claim("greater", threshold=0.5), board(runs("plain", 20, [1.0, 1.1])))
    assert r.verdict == "inconclusive" and r.note == "no runs with depth=56"


def test_a_field_that_differs_only_between_the_groups_is_reported_as_a_confound():
    df = board(runs("postln", 6, [1.0, 1.0], warmup_steps=100), runs("postln", 6, [2.0, 2.0]))
    df["init"] = ["xavier"] * 2 + ["gpt2"] * 2
    c = claim(compare="warmup_steps", a="max", b=0, expect="greater", threshold=0.5)
    r = one(c, df)
    assert r.verdict == "agrees" and r.note == "the groups also differ in init"


def test_where_reads_variant_axes_and_model_arguments_from_the_run_jsons():
    rows = runs("postln", 6, [2.0, 2.0], model_args=(("init", "xavier"),), warmup_steps=0)
    rows += runs("postln", 6, [1.0, 1.0], model_args=(("init", "xavier"),), warmup_steps=100)
    rows += runs("preln", 6, [9.0, 9.0], model_args=(("init", "normal"),), warmup_steps=0)
    rows += runs("preln", 6, [1.0, 1.0], model_args=(("init", "normal"),), warmup_steps=100)
    configs = [{"run_id": r["run_id"], "config": RunConfig(variant=r["variant"], depth=6, seed=r["seed"],
                warmup_steps=r["warmup_steps"], model_args=(("init", "xavier" if r["variant"] == "postln" else
                "normal"),)).to_dict()} for r in rows]  # fmt: skip
    df = board(rows)
    c = claim(where={"placement": "post", "init": "xavier"}, compare="warmup_steps", a="max", b=0, expect="greater",
              threshold=0.5)  # fmt: skip
    r = one(c, df, run_jsons=configs)
    assert r.verdict == "agrees" and r.groups[0].mean == pytest.approx(1.0)  # only postln: placement=post
    assert one(c, df).note == "field(s) ['init'] not recorded for these runs"  # without the JSONs


# --- value and slope ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "expect", "verdict"),
    [
        ([2.0, 2.1, 2.2], "greater", "agrees"),
        ([1.0, 1.1, 1.2], "greater", "disagrees"),
        ([1.0, 2.0, 3.0], "greater", "inconclusive"),  # mean 2 > 1.5, CI 2.5
        ([1.0, 1.1, 1.2], "not_greater", "agrees"),
        ([1.0, 1.1, 1.2], "less", "agrees"),
        ([2.0], "greater", "inconclusive"),
        ([1.0, 1.5, 1.6], "not_greater", "inconclusive"),  # mean 1.37 < 1.5 but within its CI (0.76): undecided
        ([1.45, 1.5, 1.55], "greater", "inconclusive"),  # mean at the threshold, inside the spread
        ([1.5, 1.5, 1.5], "greater", "disagrees"),  # at the threshold, no spread: not above it
    ],
)
def test_value_claims(values, expect, verdict):
    r = one(claim(kind="value", expect=expect, threshold=1.5), board(runs("postln", 6, values)))
    assert r.verdict == verdict
    assert r.diff == pytest.approx(np.mean(values) - 1.5)


def test_a_claim_on_one_axis_flags_designs_that_differ_in_another():
    """placement=pre vs post between DyT (Pre-LN with DyT) and Post-LN: they also differ in norm, so the
    difference is not placement's alone: unpaired, and said. Pre-LN against Post-LN differ in placement only."""
    c = claim(compare="placement", a="post", b="pre", expect="less")
    post, pre, dyt = (runs(v, 6, vals) for v, vals in (("postln", [5.4, 5.5, 5.3]), ("preln", [5.2, 5.25, 5.1]),
                                                        ("dyt", [5.2, 5.25, 5.1])))
    confounded = one(c, board(post, dyt))
    assert confounded.test == "Welch" and confounded.note == "the groups also differ in norm"
    clean = one(c, board(post, pre))
    assert clean.test == "paired t" and clean.note == "" and clean.verdict == "agrees"


def test_a_value_claims_group_is_labelled_at_the_level_it_was_read():
    """Under --until-decided a value claim's group interval is read at the looks' level; it once said 95%."""
    values = [2.0, 2.1, 2.3]
    (r,) = evaluate_claims([claim(kind="value", expect="greater", threshold=1.5)], board(runs("postln", 6, values)),
                           level=0.975)
    half = sps.t.ppf(1 - 0.025 / 2, 2) * np.std(values, ddof=1) / math.sqrt(3)
    assert r.groups[0].ci == pytest.approx(half)
    assert f"all: 2.133 ± {half:.4g} (97.5% CI; 3/3 runs)" in claim_lines([r])[1]


def slope_board(exponent: float, noise: tuple[float, ...] = (0.97, 1.0, 1.03), depths=(6, 12, 24, 48)) -> pd.DataFrame:
    return board(*(runs("preln", d, [3.0 * d**exponent * k for k in noise]) for d in depths))


@pytest.mark.parametrize(
    ("exponent", "noise", "verdict"),
    [
        (-0.5, (0.97, 1.0, 1.03), "agrees"),
        (0.0, (0.97, 1.0, 1.03), "disagrees"),
        (-0.5, (0.3, 1.0, 3.0), "inconclusive"),  # seed spread this wide: the CI leaves the range
    ],
)
def test_slope_ci_rule(exponent, noise, verdict):
    c = claim(kind="slope", x="depth", expect_range=[-0.75, -0.25])
    r = one(c, slope_board(exponent, noise))
    assert r.verdict == verdict and r.diff == pytest.approx(exponent, abs=1e-9 if noise[0] > 0.9 else 0.5)
    assert [g.label for g in r.groups] == ["depth=6", "depth=12", "depth=24", "depth=48"]


def test_slope_matches_a_hand_least_squares_fit():
    df = board(runs("preln", 6, [1.0, 2.0]), runs("preln", 12, [1.0]), runs("preln", 24, [0.5]))
    x, y = np.log([6, 6, 12, 24]), np.log([1.0, 2.0, 1.0, 0.5])
    slope = np.sum((x - x.mean()) * (y - y.mean())) / np.sum((x - x.mean()) ** 2)
    resid = y - y.mean() - slope * (x - x.mean())
    se = math.sqrt(np.sum(resid**2) / 2 / np.sum((x - x.mean()) ** 2))
    r = one(claim(kind="slope", x="depth", expect_range=[-0.75, -0.25]), df)
    assert r.diff == pytest.approx(slope) and r.spread == pytest.approx(T975_2 * se)


def test_slope_needs_three_positive_runs_at_two_x_values():
    c = claim(kind="slope", x="depth", expect_range=[-1, 1])
    r = one(c, board(runs("preln", 6, [1.0, 2.0]), runs("preln", 12, [0.0, -1.0])))
    assert r.verdict == "inconclusive"
    assert r.note == "2 non-positive value(s) left out of the log; 2 run(s) at 1 depth value(s): too few for a slope"


# --- probe quantities ---------------------------------------------------------------------------------------


def probe_rows(run_id: str, values: dict[tuple[int, str], float], step: int = 0, metric: str = "weight_grad_norm"):
    return [{"run_id": run_id, "step": step, "layer": layer, "block": f"blocks.{layer}", "kind": kind,
             "metric": metric, "value": v} for (layer, kind), v in values.items()]  # fmt: skip


def test_probe_quantity_first_last_and_ratio_of_one_kind():
    rows = probe_rows("r1", {(0, "attn"): 100.0, (1, "ffn"): 2.0, (2, "attn"): 7.0, (3, "ffn"): 6.0})
    rows += probe_rows("r1", {(1, "ffn"): 50.0, (3, "ffn"): 60.0}, step=10)  # a later step: not the default
    rows += probe_rows("r1", {(3, "ffn"): 99.0}, metric="grad_norm")  # another metric
    rows += probe_rows("r2", {(5, "ffn"): 4.0})  # one unit: no ratio
    rows += probe_rows("r3", {(0, "ffn"): 0.0, (1, "ffn"): 1.0})  # a zero first unit: no ratio
    probes = pd.DataFrame(rows)
    assert probe_quantity(probes, "weight_grad_norm", "ffn", "first").to_dict() == {"r1": 2.0, "r2": 4.0, "r3": 0.0}
    assert probe_quantity(probes, "weight_grad_norm", "ffn", "last").to_dict() == {"r1": 6.0, "r2": 4.0, "r3": 1.0}
    ratio = probe_quantity(probes, "weight_grad_norm", "ffn", "last_over_first")
    assert ratio["r1"] == 3.0 and math.isnan(ratio["r2"]) and math.isnan(ratio["r3"])
    assert probe_quantity(probes, "weight_grad_norm", "*", "first")["r1"] == 100.0  # every unit
    assert probe_quantity(probes, "weight_grad_norm", "ffn", "last_over_first", step=10)["r1"] == pytest.approx(1.2)
    two_calls = pd.DataFrame(probe_rows("r", {(0, "ffn"): 1.0}) + probe_rows("r", {(0, "ffn"): 3.0}))
    assert probe_quantity(two_calls, "weight_grad_norm", "ffn", "first")["r"] == 2.0  # mean per layer
    assert probe_quantity(probes.drop(columns="kind"), "weight_grad_norm", "ffn", "last").empty  # no kinds recorded
    assert probe_quantity(pd.DataFrame(), "weight_grad_norm", "*", "last").empty


def test_probe_claims_use_one_value_per_run_and_count_runs_that_failed_later():
    post = runs("postln", 12, [None, None], statuses=["diverged", "ok"], metric="x")
    pre = runs("preln", 12, [None, None], metric="x")
    probes = pd.DataFrame([row for i, r in enumerate(post + pre) for row in probe_rows(r["run_id"], {
        (0, "ffn"): 1.0, (1, "ffn"): (4.0 + i / 10 if r["variant"] == "postln" else 1.0 + i / 10)})])  # fmt: skip
    c = claim(metric="probe:weight_grad_norm:ffn:last", compare="placement", a="pre", b="post", expect="greater")
    r = one(c, board(post, pre), probes)
    assert r.verdict == "agrees"
    assert (r.groups[1].n, r.groups[1].n_failed, r.groups[1].mean) == (2, 1, 4.05)  # the diverged run's probe counts
    grows = claim(kind="value", metric="probe:weight_grad_norm:ffn:last_over_first", where={"placement": "post"},
                  expect="greater", threshold=1.5)  # fmt: skip
    assert one(grows, board(post, pre), probes).verdict == "agrees"
    assert one(grows, board(post, pre)).note == "probe:weight_grad_norm:ffn:last_over_first not recorded for these runs"


def test_a_diverged_seed_stays_in_its_configuration():
    """A diverged run made fewer steps than asked (leaderboard `steps`/`epochs` are outcomes); it is still a seed
    of the same configuration: counted as failed there, never split into a configuration of its own."""
    rows = runs("resnet", 110, [0.5, 0.2, None], statuses=["ok", "ok", "diverged"], steps=300)
    rows[2] |= {"steps": 9, "epochs": 0.8}
    for r in rows[:2]:
        r |= {"steps": 300, "epochs": 26.7}
    r = one(claim(kind="value", metric="final_train_loss", expect="less", threshold=0.01), board(rows))
    (g,) = r.groups
    assert (g.n_runs, g.n_failed, g.n) == (3, 1, 2)


# --- the verdict rules, directly -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("diff", "tol", "spread", "enough", "answer"),
    [
        (2.0, 0.5, 1.0, True, "yes"),  # above the margin and beyond the spread
        (0.5, 0.5, 0.0, True, "no"),  # at the margin is not above it
        (0.4, 0.5, 0.0, True, "no"),
        (1.0, 0.5, 1.0, True, "inconclusive"),  # above the margin, but only equal to the spread
        (2.0, 0.5, 1.0, False, "inconclusive"),  # fewer than two counted runs in a group
        (0.0, 0.5, 1.0, False, "inconclusive"),  # ... whatever the difference
        (math.nan, 0.5, 1.0, True, "inconclusive"),
    ],
)
def test_the_is_it_above_the_margin_test(diff, tol, spread, enough, answer):
    from bench.analysis.claims import _test

    assert _test(diff, tol, spread, enough) == answer


@pytest.mark.parametrize(
    ("expect", "verdict"),
    [("greater", "disagrees"), ("not_greater", "agrees"), ("less", "disagrees"), ("not_less", "agrees")],
)
def test_a_difference_equal_to_the_margin_is_not_above_it(expect, verdict):
    df = board(runs("plain", 20, [1.0, 1.0, 1.0]), runs("plain", 56, [1.5, 1.5, 1.5]))  # diff +0.5, no spread
    r = one(depth_claim(expect, threshold=0.5), df)
    assert (r.diff, r.threshold, r.spread, r.verdict) == (0.5, 0.5, 0.0, verdict)


def test_similar_at_the_margin_agrees_and_needs_two_runs_per_group():
    df = board(runs("plain", 20, [1.0, 1.0, 1.0]), runs("plain", 56, [1.25, 1.25, 1.25]))
    assert one(depth_claim("similar", threshold=0.25), df).verdict == "agrees"  # |diff| = 0.25 <= 0.25
    assert one(depth_claim("similar", threshold=0.2), df).verdict == "disagrees"  # 0.25 > 0.2 + no spread
    single = board(runs("plain", 20, [1.0]), runs("plain", 56, [1.0]))
    assert one(depth_claim("similar", threshold=0.1), single).verdict == "inconclusive"  # no spread to judge by


def test_a_relative_margin_is_a_fraction_of_the_baseline_magnitude():
    df = board(runs("plain", 20, [-10.0, -10.0, -10.0]), runs("plain", 56, [-9.6, -9.6, -9.6]))
    r = one(depth_claim("greater", threshold=0.05, relative=True), df)  # margin 0.05 x |-10| = 0.5 > rise 0.4
    assert r.threshold == pytest.approx(0.5) and r.verdict == "disagrees"


def test_a_failed_run_that_recorded_a_value_is_not_counted():
    rows = runs("plain", 56, [2.0, 2.2, 2.4])
    failed = runs("plain", 56, [None], statuses=["error"])
    failed[0] |= {"seed": 3, "run_id": rows[0]["run_id"][:-1] + "3", "final_train_loss": 100.0}  # raised after eval
    df = board(runs("plain", 20, [1.0, 1.1, 1.2]), rows, failed)
    r = one(depth_claim("greater", threshold=0.5), df)
    assert (r.groups[1].n_runs, r.groups[1].n_failed, r.groups[1].n) == (4, 1, 3)
    assert r.groups[1].mean == pytest.approx(2.2)
    value = one(claim(kind="value", where={"depth": 56}, expect="less", threshold=3.0), df)
    assert value.groups[0].mean == pytest.approx(2.2) and value.verdict == "agrees"


def test_count_above_counts_the_counted_runs_strictly_above():
    c = claim(kind="value", expect="greater", threshold=0.0, count_above=0.5)
    values = runs("plain", 20, [0.5, 0.6, 0.7, 0.4])
    failed = runs("plain", 20, [None], statuses=["diverged"])
    failed[0] |= {"seed": 9, "run_id": values[0]["run_id"][:-1] + "9", "final_train_loss": 0.9}
    (g,) = one(c, board(values, failed)).groups
    assert (g.n, g.n_failed, g.n_above) == (4, 1, 2)  # 0.6 and 0.7; 0.5 is not above; the failed 0.9 is no seed
    assert one(claim(kind="value", expect="greater", threshold=0.0), board(values)).groups[0].n_above is None
    cmp = one(
        depth_claim("greater", count_above=1.05),
        board(runs("plain", 20, [1.0, 1.1]), runs("plain", 56, [1.05, 2.0, 3.0])),
    )
    assert [g.n_above for g in cmp.groups] == [1, 2]


def test_partial_failures_on_a_metric_that_cannot_rank_them_leave_the_answer_alone():
    """peak memory: a run that ran out of memory is not "more memory"; the values decide."""
    mem = claim(metric="peak_mem_mb", compare="depth", a=20, b=56, expect="greater")
    df = board(
        runs("plain", 20, [5.0, 5.0, 5.0, 5.0], metric="peak_mem_mb"),
        runs("plain", 56, [9.0, 9.0, 9.0, None], statuses=["ok", "ok", "ok", "oom"], metric="peak_mem_mb"),
    )
    r = one(mem, df)
    assert r.verdict == "agrees" and r.note == ""
    assert one(claim(metric="peak_mem_mb", compare="depth", a=20, b=56, expect="less"), df).verdict == "disagrees"


def test_a_group_without_counted_runs_that_did_not_fail_is_inconclusive():
    """Runs that trained but recorded no value (a column added later, say) are not failures to rank."""
    df = board(runs("plain", 20, [1.0, 1.1]), runs("plain", 56, [None, None]))
    r = one(depth_claim("greater"), df)
    assert r.verdict == "inconclusive" and r.note == "no counted runs in a group"
    assert (r.groups[1].n, r.groups[1].n_failed, r.groups[1].n_runs) == (0, 0, 2)


def test_a_slope_needs_three_runs_even_at_two_x_values():
    c = claim(kind="slope", x="depth", expect_range=[-1, 1])
    r = one(c, board(runs("preln", 6, [1.0]), runs("preln", 12, [0.5])))
    assert r.verdict == "inconclusive" and r.note == "2 run(s) at 2 depth value(s): too few for a slope"


def test_claims_filter_on_the_axes_each_run_recorded_not_on_the_registry_now():
    """A run JSON keeps its variant's family and axes: a report made without the run's plugin loaded (an unknown
    name) still filters on them, and a variant edited since does not relabel the runs recorded before."""
    mine = runs("my_plugin_net", 20, [0.10, 0.11, 0.12]) + runs("resnet", 20, [0.30, 0.31, 0.29])
    recorded = [{"run_id": r["run_id"], "axes": {"family": "toy", "combinator": "gate" if r["variant"] != "resnet"
                                                 else "add", "placement": "post-activation"}} for r in mine]
    c = claim(where={"placement": "post-activation"}, compare="combinator", a="add", b="gate", expect="less")
    result = one(c, board(mine), run_jsons=recorded)
    assert result.verdict == "agrees" and [g.n for g in result.groups] == [3, 3]
    without = one(c, board(mine))  # runs recorded before run JSONs kept their axes: the registry's, where known
    assert without.verdict == "inconclusive" and "no runs with combinator=gate" in without.note


def test_a_value_claim_can_say_a_published_figure_is_reproduced():
    """expect = "similar" for one group against a paper's number: within the tolerance, give or take the CI."""
    c = claim(kind="value", metric="val_error", expect="similar", threshold=0.0875, tolerance=0.005,
              where={"variant": "resnet"})
    ok = [r | {"final_val_acc": 1 - e} for r, e in zip(runs("resnet", 20, [0, 0, 0]), [0.088, 0.0875, 0.087],
                                                        strict=True)]
    assert one(c, board(ok)).verdict == "agrees"  # mean 0.0875, CI ±0.0012: inside ±0.005
    wide = [r | {"final_val_acc": 1 - e} for r, e in zip(runs("resnet", 20, [0, 0, 0]), [0.09, 0.088, 0.091],
                                                          strict=True)]
    assert one(c, board(wide)).verdict == "inconclusive"  # mean 0.0897, CI ±0.0038: reaches past 0.0925
    far = [r | {"final_val_acc": 1 - e} for r, e in zip(runs("resnet", 20, [0, 0, 0]), [0.20, 0.21, 0.19],
                                                         strict=True)]
    result = one(c, board(far))
    assert result.verdict == "disagrees" and result.diff == pytest.approx(0.2 - 0.0875)
    assert describe(c) == "val_error where variant=resnet: mean 0.0875 ± 0.005, its whole 95% CI"
    with pytest.raises(ValueError, match='tolerance is for expect = "similar"'):
        claim(kind="value", expect="less", threshold=1.0, tolerance=0.1)


@pytest.mark.parametrize("column, expected", [
    (pd.Series(["a", "b"]), [True, False]),
    (pd.Series([None, "a"]), [False, True]),
    (pd.Series([20.0, 32.0]), [True, False]),
    (pd.Series([], dtype="str"), []),  # no rows (pandas 3's string dtype): an empty mask, no mixed-dtype 'or'
])
def test_a_filter_matches_rows_by_value(column: pd.Series, expected: list[bool]) -> None:
    value = 20 if column.dtype.kind == "f" else "a"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pandas 3 deprecates | between a bool mask and a str column
        mask = _matches(column, value)
    assert mask.dtype == bool and list(mask) == expected


def test_a_claim_filters_on_the_preset_its_runs_were_made_under():
    """The preset is no part of a configuration (nor of a run id), but a claim may still pick runs by the preset
    that asked for them (the run JSONs record it)."""
    rows = runs("plain", 20, [1.0, 1.1, 1.2]) + runs("plain", 56, [2.0, 2.2, 2.4])
    jsons = [{"run_id": r["run_id"], "config": {"variant": "plain", "depth": r["depth"], "seed": r["seed"],
                                                "preset": "quick" if r["depth"] == 20 else "deep"}} for r in rows]
    def by_preset(presets):
        return claim(where={"variant": "plain", "preset": presets}, compare="depth", a=20, b=56, expect="greater")

    assert one(by_preset(["quick", "deep"]), board(rows), None, jsons).verdict == "agrees"
    only = one(by_preset("quick"), board(rows), None, jsons)
    assert only.verdict == "inconclusive" and only.note == "no runs with depth=56"


def test_an_absolute_margin_larger_than_the_values_warns_and_names_relative() -> None:
    """A margin of 0.01 on losses near 0.001 agrees whatever the designs do: the verdict stands, with a warning
    naming `relative = true`; a margin within the values' size, or a relative one, warns of nothing."""
    df = board(runs("plain", 20, [0.0010, 0.0012, 0.0011]), runs("plain", 56, [0.0016, 0.0019, 0.0017]))
    r = one(depth_claim("similar", threshold=0.01), df)
    assert r.verdict == "agrees"
    assert r.note == ("warning: the margin 0.01 exceeds the values compared (|mean| at most 0.00173): every difference "
                      "between them is smaller, so the verdict reads the margin, not the data; for a margin relative "
                      "to the values, set relative = true (margin x |mean(a)|)")
    assert one(depth_claim("similar", threshold=0.1, relative=True), df).note == ""
    assert one(depth_claim("greater", threshold=0.0001), df).note == ""
    failed = board(runs("plain", 20, [0.0, 0.0]), runs("plain", 56, [None, None], statuses=["diverged", "diverged"]))
    dead = one(depth_claim("greater", threshold=0.01), failed)  # decided by the failures, not by the margin
    assert dead.verdict == "agrees" and "exceeds the values" not in dead.note
    text = "\n".join(claim_lines(evaluate_claims([depth_claim("similar", threshold=0.01)], df)))
    assert "set relative = true" in text


def test_a_margin_above_the_seed_spread_and_a_tenth_of_the_values_warns_where_it_grants_the_claim() -> None:
    """not_greater by 0.05 on losses near 0.085 that move 0.005 from seed to seed grants a difference of more than half
    the values, ten times what seeds make: a warning gives both and names `relative = true`. A margin within the
    spread, below a tenth of the values (what a well-sized similarity margin is), relative, or one a claim must
    exceed (greater, less) warns of nothing."""
    df = board(runs("plain", 20, [0.080, 0.085, 0.090]), runs("plain", 56, [0.082, 0.086, 0.088]))
    r = one(depth_claim("not_greater", threshold=0.05), df)
    assert r.verdict == "agrees"
    assert r.note == ("warning: the margin 0.05 is 59% of the values compared (|mean| at most 0.0853), 10 times their "
                      "spread (seed-to-seed standard deviation at most 0.005): the claim grants a difference that "
                      "large, beyond what seeds alone move the values, so an agreement says little; for a margin "
                      "relative to the values, set relative = true (margin x |mean(a)|)")
    assert one(depth_claim("similar", threshold=0.05), df).note == r.note
    assert one(depth_claim("not_less", threshold=0.05), df).note == r.note
    assert one(depth_claim("not_greater", threshold=0.004), df).note == ""  # within the spread
    assert one(depth_claim("not_greater", threshold=0.008), df).note == ""  # above it, but under a tenth of the values
    assert one(depth_claim("not_greater", threshold=0.5, relative=True), df).note == ""
    assert one(depth_claim("greater", threshold=0.05), df).note == ""
    assert one(depth_claim("less", threshold=0.05), df).note == ""
    still = board(runs("plain", 20, [0.08, 0.08]), runs("plain", 56, [0.08, 0.08]))  # seeds move nothing
    assert one(depth_claim("similar", threshold=0.05), still).note.startswith(
        "warning: the margin 0.05 is 62% of the values compared (|mean| at most 0.08), above their spread "
        "(seed-to-seed standard deviation at most 0): ")
    single = board(runs("plain", 20, [0.08]), runs("plain", 56, [0.09]))  # one seed: no spread to compare with
    assert one(depth_claim("not_greater", threshold=0.05), single).note == ""


def target_runs(variant: str, values, statuses=None, metric: str = "steps_to_target") -> list[dict]:
    """Runs at depth 20 that set an accuracy target of 0.9: ``values`` their steps (or time) to it, None never."""
    return [r | {"target_acc": 0.9, metric: v} for r, v in zip(runs(variant, 20, values, statuses, metric), values,
                                                                strict=True)]


def faster(expect: str, metric: str = "steps_to_target", **kw):
    return claim(metric=metric, compare="variant", a="plain", b="highway", expect=expect, **kw)


def test_a_run_that_never_reached_the_target_counts_against_its_group():
    """Highway reaches the target at steps 30 and 40 and never at seed 2; plain at 90, 95, 100. The two seeds that
    reached it alone would make highway faster (paired, -57.5 ± 31.8, as before this rule: agrees); the seed that never
    got there counts as a failed run does, so no verdict that makes highway the better design can stand."""
    df = board(target_runs("plain", [90, 95, 100]), target_runs("highway", [30, 40, None]))
    r = one(faster("less"), df)
    assert (r.verdict, r.test, r.pairs, r.diff) == ("inconclusive", "paired t", 2, -57.5)
    assert r.spread == pytest.approx(sps.t.ppf(0.975, 1) * 2.5)  # d = -60, -55: sd 3.54, over sqrt(2) pairs
    assert r.note == "more runs never reached the target with variant=highway, which the values do not bear out"
    assert [(g.n, g.n_runs, g.n_failed) for g in r.groups] == [(3, 3, 0), (2, 3, 0)]
    assert one(faster("greater"), df).verdict == "inconclusive"  # the values say faster, the miss says slower
    assert one(faster("similar", threshold=100), df).verdict == "inconclusive"
    slow = board(target_runs("plain", [90, 95, 100]), target_runs("highway", [130, 140, None]))
    assert one(faster("greater"), slow).verdict == "agrees"  # the values and the miss agree: highway is slower
    # The baseline missed it once and the design was faster at every seed: the miss bears the answer out.
    assert one(faster("less"), board(target_runs("plain", [90, 95, None]),
                                      target_runs("highway", [30, 40, 45]))).verdict == "agrees"


def test_a_group_that_never_reached_the_target_is_the_slower_one():
    """Every highway run trained (status ok) and never reached the target: it is the slower group, as a group whose
    every run failed is the worse one; neither group reaching it decides nothing; runs that set no target are not
    misses."""
    df = board(target_runs("plain", [90, 95, 100]), target_runs("highway", [None, None, None]))
    r = one(faster("less"), df)
    assert (r.verdict, r.note) == ("disagrees", "no run of one group reached the target: it counts as the worse")
    assert one(faster("greater"), df).verdict == "agrees"
    none = board(target_runs("plain", [None, None]), target_runs("highway", [None, None]))
    assert one(faster("less"), none).note == "no run of either group reached the target: two failures never agree"
    untargeted = board(*([r | {"target_acc": None, "target_loss": None} for r in runs(v, 20, values,
                                                                                       metric="steps_to_target")]
                         for v, values in (("plain", [90, 95]), ("highway", [None, None]))))
    assert one(faster("less"), untargeted).note == "no counted runs in a group"


def test_a_claim_on_a_time_read_off_the_wall_clock_is_never_paired_and_says_why():
    """Times to the target of the same seeds were taken at separate moments: Welch's test, never paired, and a note."""
    df = board(target_runs("plain", [5.0, 6.0, 7.0], metric="time_to_target_s"),
               target_runs("highway", [10.0, 11.5, 12.0], metric="time_to_target_s"))
    r = one(faster("greater", "time_to_target_s"), df)
    assert (r.verdict, r.test, r.pairs) == ("agrees", "Welch", 0)
    assert r.p == pytest.approx(sps.ttest_ind([10.0, 11.5, 12.0], [5.0, 6.0, 7.0], equal_var=False).pvalue)
    assert r.note == ("timed by separate runs, each at its own moment on the wall clock: the difference is confounded "
                      "with the load on the machine then (`bench cost` times designs side by side)")
