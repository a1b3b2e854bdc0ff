"""bench.analysis.stats: CI arithmetic by hand, the ok-only and not-reached rules, Welch and the bootstrap, grouping."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from bench.analysis.stats import (
    aggregate,
    aggregate_long,
    by_configuration,
    compare,
    config_table,
    differing_fields,
    first_reach,
    t_ci,
    target_summary,
    with_config_columns,
    with_config_hash,
)
from bench.runs.config import RunConfig

# t_{0.975} quantiles from a printed table (Student's t): df=2 -> 4.303, df=3 -> 3.182, df=4 -> 2.776.
T975 = {2: 4.302653, 3: 3.182446, 4: 2.776445}


def board(rows: list[tuple]) -> pd.DataFrame:
    cols = ["variant", "depth", "task", "seed", "status", "final_val_acc", "steps_to_target", "time_to_target_s"]
    return pd.DataFrame(rows, columns=cols)


def test_t_ci_by_hand():
    # values 2, 4, 6: mean 4, sample std 2 (ddof=1), half-width t(0.975, 2)·2/√3.
    s = t_ci([2.0, 4.0, 6.0])
    assert s["n"] == 3 and s["mean"] == 4.0 and s["std"] == pytest.approx(2.0) and s["median"] == 4.0
    assert s["ci"] == pytest.approx(T975[2] * 2 / math.sqrt(3), rel=1e-6)
    assert (s["ci_low"], s["ci_high"]) == pytest.approx((4 - s["ci"], 4 + s["ci"]))
    one = t_ci([5.0, math.nan])  # non-finite values are dropped; n=1 has no spread
    assert one["n"] == 1 and one["mean"] == 5.0 and all(math.isnan(one[k]) for k in ("std", "ci", "ci_low", "ci_high"))
    none = t_ci([])
    assert none["n"] == 0 and math.isnan(none["mean"])


def test_aggregate_counts_only_ok_runs_and_reports_failures():
    df = board(
        [
            ("resnet", 20, "digits", 0, "ok", 0.90, 100, 1.0),
            ("resnet", 20, "digits", 1, "ok", 0.92, 200, 2.0),
            ("resnet", 20, "digits", 2, "ok", 0.94, None, None),
            ("resnet", 20, "digits", 3, "ok", 0.96, 300, 3.0),
            ("resnet", 20, "digits", 4, "diverged", 0.10, None, None),
            ("plain", 20, "digits", 0, "ok", 0.80, None, None),
            ("plain", 20, "digits", 1, "oom", None, None, None),
        ]
    )
    wide = aggregate(df, metrics=("final_val_acc",)).set_index("variant")
    r = wide.loc["resnet"]
    assert (r["n_runs"], r["n_failed"], r["final_val_acc_n"]) == (5, 1, 4)
    values = np.array([0.90, 0.92, 0.94, 0.96])  # the diverged run's 0.10 is not averaged in
    std = float(np.sqrt(((values - values.mean()) ** 2).sum() / 3))
    assert r["final_val_acc_mean"] == pytest.approx(0.93)
    assert r["final_val_acc_std"] == pytest.approx(std)
    assert r["final_val_acc_ci"] == pytest.approx(T975[3] * std / 2, rel=1e-6)
    assert r["final_val_acc_ci_high"] == pytest.approx(0.93 + T975[3] * std / 2, rel=1e-6)
    p = wide.loc["plain"]
    assert (p["n_runs"], p["n_failed"], p["final_val_acc_n"], p["final_val_acc_mean"]) == (2, 1, 1, 0.80)
    assert math.isnan(p["final_val_acc_std"]) and math.isnan(p["final_val_acc_ci"])


def test_not_reached_runs_are_nan_never_their_last_step():
    df = board(
        [
            ("resnet", 20, "digits", 0, "ok", 0.9, 100, 1.0),
            ("resnet", 20, "digits", 1, "ok", 0.9, 300, 3.0),
            ("resnet", 20, "digits", 2, "ok", 0.9, None, None),
            ("resnet", 20, "digits", 3, "diverged", 0.1, None, None),
        ]
    )
    s = target_summary(df).iloc[0]
    assert (s["reached"], s["n_runs"], s["median"], s["mean"]) == (2, 4, 200.0, 200.0)
    t = target_summary(df, metric="time_to_target_s").iloc[0]
    assert (t["reached"], t["mean"]) == (2, 2.0)
    long = aggregate_long(df, metrics=("steps_to_target",)).iloc[0]
    assert (long["n"], long["n_runs"], long["n_failed"]) == (2, 4, 1)
    with pytest.raises(ValueError, match="target_summary is for"):
        target_summary(df, metric="final_val_acc")


def test_first_reach_rule():
    assert first_reach([0, 10, 20, 30], [0.1, 0.5, 0.8, 0.9], 0.8) == 20.0
    assert math.isnan(first_reach([0, 10, 20], [0.1, 0.5, 0.79], 0.8))  # never: NaN, not 20
    assert first_reach([0, 1, 2], [3.0, float("nan"), 0.5], 1.0, higher_is_better=False) == 2.0
    assert math.isnan(first_reach([0, 1], [float("nan"), float("inf")], 0.5))
    with pytest.raises(ValueError, match="differ in length"):
        first_reach([0, 1], [0.5], 0.5)


def test_aggregate_missing_columns_error():
    with pytest.raises(ValueError, match=r"lacks columns \['peak_mem_mb'\]"):
        aggregate(board([]), metrics=("peak_mem_mb",))


def two_variants() -> pd.DataFrame:
    a = [0.91, 0.93, 0.92, 0.95]
    b = [0.85, 0.90, 0.86]
    rows = [("resnet", 20, "digits", i, "ok", v, None, None) for i, v in enumerate(a)]
    rows += [("plain", 20, "digits", i, "ok", v, None, None) for i, v in enumerate(b)]
    rows += [("plain", 20, "digits", 9, "diverged", 0.1, None, None)]
    return board(rows)


def test_compare_welch_matches_the_hand_formula():
    res = compare(two_variants(), "resnet", "plain", "final_val_acc", n_boot=2000, seed=1)
    a, b = np.array([0.91, 0.93, 0.92, 0.95]), np.array([0.85, 0.90, 0.86])
    va, vb = a.var(ddof=1) / 4, b.var(ddof=1) / 3
    t_hand = (a.mean() - b.mean()) / math.sqrt(va + vb)
    dof_hand = (va + vb) ** 2 / (va**2 / 3 + vb**2 / 2)
    assert res["t"] == pytest.approx(t_hand)
    assert res["p"] == pytest.approx(2 * sps.t.sf(abs(t_hand), dof_hand))
    assert res["dof"] == pytest.approx(dof_hand)
    assert (res["n_a"], res["n_b"]) == (4, 3)  # the diverged plain run is not a seed
    assert res["diff"] == pytest.approx(a.mean() - b.mean())
    assert res["boot_ci_low"] < res["diff"] < res["boot_ci_high"]


def test_bootstrap_is_deterministic_for_a_seed():
    df = two_variants()
    first = compare(df, "resnet", "plain", "final_val_acc", n_boot=5000, seed=3)
    again = compare(df, "resnet", "plain", "final_val_acc", n_boot=5000, seed=3)
    other = compare(df, "resnet", "plain", "final_val_acc", n_boot=5000, seed=4)
    assert (first["boot_ci_low"], first["boot_ci_high"]) == (again["boot_ci_low"], again["boot_ci_high"])
    assert (first["boot_ci_low"], first["boot_ci_high"]) != (other["boot_ci_low"], other["boot_ci_high"])


def test_compare_needs_two_seeds_per_side():
    df = two_variants()
    df = df[~((df["variant"] == "plain") & (df["seed"].isin([1, 2])))]
    with pytest.raises(
        ValueError, match=r"at least 2 seeds per side are needed .* got 4 for 'resnet' and 1 for 'plain'"
    ):
        compare(df, "resnet", "plain", "final_val_acc")


def test_compare_by_several_columns_and_mixed_groups():
    df = two_variants()
    deeper = df[df["variant"] == "resnet"].assign(depth=56)
    both = pd.concat([df, deeper], ignore_index=True)
    with pytest.raises(ValueError, match=r"'resnet' spans several depths \(\[20, 56\]\)"):
        compare(both, "resnet", "plain", "final_val_acc")
    res = compare(both, ("resnet", 56), ("resnet", 20), "final_val_acc", by=("variant", "depth"))
    assert res["diff"] == pytest.approx(0.0)
    with pytest.raises(ValueError, match="does not match by"):
        compare(both, "resnet", ("plain", 20), "final_val_acc", by=("variant", "depth"))


def config_rows(cfg: RunConfig, values: list[float], **row) -> list[dict]:
    """Leaderboard rows of one config's seeds, identified as bench identifies them."""
    return [{"run_id": RunConfig(**{**cfg.to_dict(), "seed": s}).run_id, "config_hash": cfg.config_hash(),
             "variant": cfg.variant, "depth": cfg.depth, "task": cfg.task, "seed": s, "status": "ok",
             "warmup_steps": cfg.warmup_steps, "final_val_acc": v} | row for s, v in enumerate(values)]  # fmt: skip


def test_configs_differing_only_in_warmup_never_pool():
    cold = RunConfig(variant="postln", depth=6, task="text", optimizer="adam")
    warm = RunConfig(variant="postln", depth=6, task="text", optimizer="adam", warmup_steps=100)
    assert cold.config_hash() != warm.config_hash()
    df = pd.DataFrame(config_rows(cold, [0.5, 0.52, 0.54]) + config_rows(warm, [0.9, 0.92, 0.94]))
    long = aggregate_long(df, metrics=("final_val_acc",))  # by variant, depth, task only: still two groups
    assert sorted(long["config_hash"]) == sorted([cold.config_hash(), warm.config_hash()])
    assert sorted(long["mean"]) == pytest.approx([0.52, 0.92]) and list(long["n"]) == [3, 3]
    wide = aggregate(df, metrics=("final_val_acc",))
    assert len(wide) == 2 and sorted(wide["final_val_acc_mean"]) == pytest.approx([0.52, 0.92])
    assert len(target_summary(df.assign(steps_to_target=1.0))) == 2
    # Without the column, the hash is read from the run id; pooling stays off.
    assert len(aggregate_long(df.drop(columns="config_hash"), metrics=("final_val_acc",))) == 2
    assert len(aggregate_long(df, metrics=("final_val_acc",), by_config=False)) == 1  # only on request
    with pytest.raises(ValueError, match=r"'postln' spans several configurations \(config_hash \['"):
        compare(df, "postln", "postln", "final_val_acc")
    assert differing_fields(df) == ["warmup_steps"]
    assert differing_fields(df, exclude=("warmup_steps",)) == []


def test_config_hash_from_the_run_id_where_the_column_lacks_it():
    df = pd.DataFrame({"run_id": ["resnet-d20-digits-0a1b2c3d-s4", "odd", "x-deadbeef-s1"],
                       "config_hash": [None, None, "feedface"]})  # fmt: skip
    assert with_config_hash(df)["config_hash"].tolist()[0] == "0a1b2c3d"
    assert pd.isna(with_config_hash(df)["config_hash"].iloc[1])
    assert with_config_hash(df)["config_hash"].iloc[2] == "feedface"  # a recorded hash is kept
    bare = pd.DataFrame({"variant": ["a"]})
    assert with_config_hash(bare) is bare  # nothing to read it from


def test_differing_fields_read_run_configs_and_model_arguments():
    xavier = RunConfig(variant="postln", depth=6, task="text", model_args=(("init", "xavier"),), eval_every=10)
    normal = RunConfig(variant="postln", depth=6, task="text", model_args=(("init", "normal"),), eval_every=10)
    rows = config_rows(xavier, [0.5, 0.6]) + config_rows(normal, [0.7, 0.8])
    df = pd.DataFrame(rows).assign(precision="fp32")
    runs = [{"run_id": r["run_id"], "config": RunConfig(**{**(xavier if i < 2 else normal).to_dict(),
             "seed": r["seed"], "data_dir": f"/data{i}"}).to_dict()} for i, r in enumerate(rows)]  # fmt: skip
    assert differing_fields(df) == []  # the leaderboard alone cannot tell them apart
    assert differing_fields(df, runs) == ["init"]  # data_dir differs too, but it is no part of a config
    table = config_table(df, runs)
    assert table["init"].tolist() == ["xavier", "xavier", "normal", "normal"]
    assert table["eval_every"].tolist() == [10] * 4 and "seed" not in table and "data_dir" not in table
    assert table["betas"].iloc[0] == (0.9, 0.999)  # lists from JSON are hashable tuples
    shown = with_config_columns(df, runs, ["init", "nothing_records_this"])
    assert shown["init"].tolist() == ["xavier", "xavier", "normal", "normal"]
    assert shown["nothing_records_this"].isna().all() and list(df.columns) == list(shown.columns)[:-2]
    # A leaderboard value wins over the JSON's; a field that varies within one configuration is not one.
    board_init = df.assign(init=["a", "a", "b", "b"], lr=[0.1, 0.2, 0.1, 0.2])
    assert config_table(board_init, runs)["init"].tolist() == ["a", "a", "b", "b"]
    assert differing_fields(board_init, runs) == ["init"]
    clash = RunConfig(variant="v", model_args=(("lr", 5),))
    flat = config_table(pd.DataFrame(config_rows(clash, [1.0])), [{"run_id": clash.run_id, "config": clash.to_dict()}])
    assert flat["model_args.lr"].tolist() == [5] and flat["lr"].tolist() == [0.1]  # a model argument named like a field


def test_a_field_an_older_run_json_lacks_reads_as_its_default():
    # Runs written before world_size existed were one process: they pool with the new runs' world_size 1, and
    # only a real difference (2 processes) separates configurations.
    cfg = RunConfig(variant="preln", depth=6, task="text")
    ddp = RunConfig(variant="preln", depth=6, task="text", world_size=2)
    rows = config_rows(cfg, [0.5, 0.6]) + config_rows(ddp, [0.7])
    old = {k: v for k, v in cfg.to_dict().items() if k != "world_size"}
    runs = [{"run_id": rows[0]["run_id"], "config": {**old, "seed": 0}},
            {"run_id": rows[1]["run_id"], "config": {**cfg.to_dict(), "seed": 1}},
            {"run_id": rows[2]["run_id"], "config": ddp.to_dict()}]
    df = pd.DataFrame(rows)
    assert config_table(df, runs)["world_size"].tolist() == [1, 1, 2]
    assert differing_fields(df.iloc[:2], runs) == [] and differing_fields(df, runs) == ["world_size"]
    assert config_table(df, [{"run_id": rows[0]["run_id"], "config": {}}]).columns.tolist() == \
        config_table(df).columns.tolist()  # no config recorded: nothing is filled in


def test_a_run_that_records_no_config_takes_its_configurations_values():
    """A run JSON lost (or its config): what the run does not record is unknown, not different. Filled from the
    other runs of its configuration, it neither hides the field (which merged the two configurations below into rows
    that look alike, and blanked every comparison with them) nor splits its configuration."""
    short = RunConfig(variant="plain", depth=6, task="digits", eval_every=30)
    long = RunConfig(variant="plain", depth=6, task="digits", eval_every=150)
    df = pd.DataFrame(config_rows(short, [0.5, 0.6, 0.7]) + config_rows(long, [0.4, 0.3, 0.2]))
    runs = [{"run_id": r.run_id, "config": {**(short if r.Index < 3 else long).to_dict(), "seed": r.seed}}
            for r in df.itertuples()]
    lost = runs[1:]  # the first run's JSON is missing
    assert differing_fields(df, lost) == ["eval_every"]
    assert config_table(df, lost)["eval_every"].tolist() == [30, 30, 30, 150, 150, 150]
    # no other run of its configuration records it: it stays unknown and counts neither way (not 40 blank fields)
    alone = df.iloc[[0, 3, 4, 5]]
    assert differing_fields(alone, lost) == [] and pd.isna(config_table(alone, lost)["eval_every"].iloc[0])
    # the other runs of its configuration disagree: nothing is filled, and the field still varies within it
    lr = df.assign(lr=[None, 0.1, 0.2, 0.1, 0.1, 0.1])
    assert pd.isna(config_table(lr, lost)["lr"].iloc[0]) and differing_fields(lr, lost) == ["eval_every"]


def test_t_ci_drops_infinite_values_too():
    s = t_ci([5.0, math.inf, -math.inf, math.nan, 7.0])
    assert (s["n"], s["mean"], s["median"]) == (2, 6.0, 6.0)
    assert s["ci"] == pytest.approx(12.706205, rel=1e-6)  # t(0.975, 1) · std √2 / √2 (printed table)


def test_a_failed_run_that_reached_the_target_first_still_counts_for_it():
    """Steps to target: every run of the group counts, whatever its status (it reached the target before failing)."""
    df = board(
        [
            ("resnet", 20, "digits", 0, "ok", 0.9, 100, 1.0),
            ("resnet", 20, "digits", 1, "ok", 0.9, None, None),
            ("resnet", 20, "digits", 2, "diverged", None, 50, 0.5),
        ]
    )
    s = target_summary(df).iloc[0]
    assert (s["reached"], s["n_runs"], s["mean"]) == (2, 3, 75.0)
    wide = aggregate(df, metrics=("final_val_acc", "time_to_target_s")).iloc[0]
    assert (wide["final_val_acc_n"], wide["time_to_target_s_n"], wide["time_to_target_s_mean"]) == (2, 2, 0.75)


def test_by_configuration_names_groups_by_the_base_and_the_differing_fields():
    cold = RunConfig(variant="postln", depth=6, task="text")
    warm = RunConfig(variant="postln", depth=6, task="text", warmup_steps=100)
    other = RunConfig(variant="preln", depth=6, task="text")
    df = pd.DataFrame(config_rows(cold, [0.5, 0.6]) + config_rows(warm, [0.8, 0.9]) + config_rows(other, [0.7, 0.7]))
    runs = [
        {"run_id": r["run_id"], "config": {"model_args": [["init", "normal" if r["variant"] == "preln" else "xavier"]]}}
        for r in config_rows(cold, [0, 0]) + config_rows(warm, [0, 0]) + config_rows(other, [0, 0])
    ]
    frame, by = by_configuration(df, runs)
    # variant differs too, but it is a base column: named once, first
    assert by == ["variant", "depth", "task", "warmup_steps", "init"]
    assert frame["init"].tolist() == ["xavier"] * 4 + ["normal"] * 2  # from the run JSONs
    assert list(frame.columns) == [*df.columns, "init"]  # a column the board has keeps its place
    _, by_variant_only = by_configuration(df[df["variant"] == "postln"], None, base=("variant",))
    assert by_variant_only == ["variant", "warmup_steps"]
    means = aggregate(frame, by, metrics=("final_val_acc",))
    assert means[["variant", "warmup_steps", "init", "final_val_acc_mean"]].values.tolist() == [
        ["postln", 0, "xavier", pytest.approx(0.55)],
        ["postln", 100, "xavier", pytest.approx(0.85)],
        ["preln", 0, "normal", pytest.approx(0.7)],
    ]
