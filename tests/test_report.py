"""bench.reports.report: REPORT.md content from fake results directories — table numbers, and declared claims'
verdicts."""

from __future__ import annotations

import dataclasses
import math
import shlex
import statistics
from pathlib import Path

import pytest
from scipy import stats as sps

from bench.reports.report import _measured_at, markdown_table, write_report
from bench.runs.config import RunConfig
from bench.runs.results import COLUMNS, ResultsStore

T975_2 = 4.302653  # Student t quantile, 0.975, 2 degrees of freedom (printed tables)
CONFIG_FIELDS = ("task", "warmup_steps", "lr", "study", "eval_every", "preset")  # row keys that are also config fields


def add(store: ResultsStore, variant: str, depth: int, seed: int, acc: float | None, status: str = "ok",
        config: bool = True, **row) -> None:  # fmt: skip
    """One run, as bench writes it: run id and config hash of its RunConfig, the config in the run JSON."""
    cfg = RunConfig(variant=variant, depth=depth, seed=seed, **{k: row[k] for k in CONFIG_FIELDS if k in row})
    row.pop("eval_every", None)
    full = {"run_id": cfg.run_id, "config_hash": cfg.config_hash(), "variant": variant, "depth": depth,
            "task": cfg.task, "seed": seed, "status": status, "final_train_acc": acc,
            "final_val_acc": None if acc is None else acc - 0.1, "torch_version": "2.14.1", "device_name": "cpu",
            } | row  # fmt: skip
    probes = full.pop("probes", None) or []
    full = {k: v for k, v in full.items() if k in COLUMNS}
    run_json = {"run_id": cfg.run_id, "row": full, "curves": {"train": [{"step": 0, "loss": 1.0}]}, "probes": probes}
    store.append(full, run_json | {"config": cfg.to_dict() if config else {}})


def write_study(root: Path, name: str, claims: str) -> None:
    """The study file a sweep leaves in ``<results_dir>/studies/``: here only its claims."""
    path = root / "studies" / f"{name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'name = "{name}"\n{claims}', encoding="utf-8")


def claim_toml(**fields: object) -> str:
    """One ``[[claims]]`` table of a study file (strings quoted, dicts as inline tables, bools lower-case)."""

    def value(v: object) -> str:
        if isinstance(v, bool):
            return str(v).lower()
        if isinstance(v, str):
            return f'"{v}"'
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
        return str(v)

    return "\n[[claims]]\n" + "".join(f"{k} = {value(v)}\n" for k, v in fields.items())


def depth_claim(claim_id: str, paper: str, text: str, variant: str, expect: str) -> str:
    """A claim comparing the variant's training error at its smallest and largest depth (as degradation.toml)."""
    return claim_toml(id=claim_id, paper=paper, text=text, metric="train_error", where={"variant": variant},
                      compare="depth", a="min", b="max", expect=expect, threshold=0.01, count_above=0.5)


DEGRADATION_CLAIMS = depth_claim(
    "plain-degrades", "He et al. 2015, Fig. 1", "deeper plain nets have a higher training error", "plain", "greater"
) + depth_claim(
    "resnet-does-not-degrade", "He et al. 2015, Fig. 6", "deeper ResNets do not have a higher training error", "resnet",
    "not_greater",
)


def grad_probes(depth: int, seed: int) -> list[dict]:
    """Gradient norms at step 0 (what probe_every records) for three residual units."""
    return [{"step": 0, "layer": i, "block": f"b{i}", "metric": "grad_norm", "value": (i + 1.0) * depth + seed}
            for i in range(3)]  # fmt: skip


def degradation_dir(root: Path, plain_degrades: bool, probes: bool = False, study: str | None = None) -> Path:
    store = ResultsStore(root)
    if study:
        write_study(root, study, DEGRADATION_CLAIMS)
    deep_plain = (0.80, 0.82, 0.84) if plain_degrades else (0.98, 0.985, 0.99)
    deep_resnet = (0.98, 0.99, 1.00) if plain_degrades else (0.70, 0.75, 0.80)
    for seed in range(3):
        for variant, depth, acc in (("plain", 20, (0.95, 0.96, 0.97)), ("plain", 56, deep_plain),
                                    ("resnet", 20, (0.96, 0.97, 0.98)), ("resnet", 56, deep_resnet)):  # fmt: skip
            targeted = (variant, depth) == ("plain", 20)
            extra = {"steps_to_target": (100, 200, None)[seed], "target_acc": 0.9} if targeted else {}
            extra |= {"study": study} if study else {}
            add(store, variant, depth, seed, acc[seed], probes=grad_probes(depth, seed) if probes else None, **extra)
    return root


def table_row(text: str, prefix: str) -> list[str]:
    rows = [line for line in text.splitlines() if line.startswith(prefix)]
    assert len(rows) == 1, rows
    return [c.strip() for c in rows[0].strip("|").split("|")]


@pytest.fixture(scope="module")
def plain_degrades_report(tmp_path_factory: pytest.TempPathFactory) -> str:
    """REPORT.md of :func:`degradation_dir` where plain degrades (no study, no probes), written once for the tests
    that read it."""
    return write_report(degradation_dir(tmp_path_factory.mktemp("deg"), True)).read_text()


def test_leaderboard_table_numbers(plain_degrades_report):
    text = plain_degrades_report
    header = table_row(text, "| variant |")
    cells = dict(zip(header, table_row(text, "| plain | 20 | digits |"), strict=True))
    # digits is a classifier: its table leads with the error. Train acc 0.95/0.96/0.97: error 4.00 % ± 1.00 %,
    # 95% CI half-width t(2)·1/√3 %; val acc 0.85/0.86/0.87: error 14.00 %.
    assert header[4:6] == ["val error (%)", "train error (%)"]
    assert cells["train error (%)"] == f"4.00 ± 1.00 (±{T975_2 / math.sqrt(3):.2f})"
    assert cells["val error (%)"] == f"14.00 ± 1.00 (±{T975_2 / math.sqrt(3):.2f})"
    assert cells["ok/runs"] == "3/3"
    assert cells["steps→target (reached)"] == "150 (2/3)"  # the run that never reached it is not its last step
    assert cells["samples/s"] == "—"  # not measured in these fake runs
    # Rows whose runs set no target say so, not "— (0/3)" as if they had missed it.
    assert table_row(text, "| resnet | 56 | digits |")[-1] == "no target"


def test_the_leaderboard_says_at_which_scale_speed_and_memory_were_measured(tmp_path):
    store = ResultsStore(tmp_path)
    add(store, "resnet", 20, 0, 0.9)
    batch = RunConfig(variant="resnet", depth=20).batch_size
    assert f"measured at these runs' scale (batch {batch})" in write_report(tmp_path).read_text()
    runs = [{"model_kwargs": {"d_model": d}, "config": {"batch_size": 16}, "env": {"device_name": "AMD EPYC"}}
            for d in (64, 128, 64)]
    assert _measured_at(runs).startswith(" samples/s and peak MiB were measured at these runs' scale "
                                         "(d_model 64, 128; batch 16 on AMD EPYC)")
    assert _measured_at([{}]) == ""  # nothing recorded, nothing claimed


def test_no_steps_to_target_column_when_no_run_set_a_target(tmp_path):
    store = ResultsStore(tmp_path)
    for seed in range(3):
        add(store, "resnet", 20, seed, 0.9)
    text = write_report(tmp_path).read_text()
    assert table_row(text, "| variant |") == ["variant", "depth", "task", "ok/runs", "val error (%)",
                                              "train error (%)", "train loss", "samples/s", "peak MiB"]
    assert "steps→target" not in text and "(0/3)" not in text


def claim_block(text: str, claim_id: str) -> list[str]:
    """The bullet of one claim and its verdict sub-bullets."""
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith(f"- **{claim_id}**"))
    j = next((j for j in range(i + 1, len(lines)) if not lines[j].startswith("  - ")), len(lines))
    return lines[i:j]


def test_declared_claims_agree_when_plain_degrades(tmp_path):
    text = write_report(degradation_dir(tmp_path, True, study="deg"), "deg").read_text()
    assert "## Paper claims vs measured" in text
    assert ("Claims declared in `studies/deg.toml`; verdicts: 2 agree, 0 disagree, 0 inconclusive (1 paired t, "
            "1 exact).") in text
    ci_20, ci_56 = T975_2 * 0.01 / math.sqrt(3), T975_2 * 0.02 / math.sqrt(3)
    # the depths' runs share seeds 0-2: paired, per-seed rises 0.15, 0.14, 0.13 (sd 0.01)
    half = T975_2 * 0.01 / math.sqrt(3)
    p = sps.ttest_rel([0.20, 0.18, 0.16], [0.05, 0.04, 0.03]).pvalue
    assert claim_block(text, "plain-degrades") == [
        "- **plain-degrades** — He et al. 2015, Fig. 1: deeper plain nets have a higher training error. Test: "
        "train_error where variant=plain: depth=max vs min: greater by more than 0.01.",
        f"  - depth=20: 0.04 ± {ci_20:.4g} (95% CI; 3/3 runs, 0 above 0.5) → "
        f"depth=56: 0.18 ± {ci_56:.4g} (95% CI; 3/3 runs, 0 above "
        f"0.5); difference +0.14 (paired t, 3 seeds: 95% CI {0.14 - half:+.3g} … {0.14 + half:+.3g}; p {p:.2g}, "
        "exact sign-flip p 0.25; margin 0.01): **agrees**.",
    ]
    resnet = claim_block(text, "resnet-does-not-degrade")[1]
    assert "depth=20: 0.03 ±" in resnet and "depth=56: 0.01 ±" in resnet and resnet.endswith("**agrees**.")
    assert "DISAGREES" not in text and "inconclusive**" not in text


def test_declared_claims_disagree_when_the_data_say_otherwise(tmp_path):
    text = write_report(degradation_dir(tmp_path, False, study="deg"), "deg").read_text()
    plain = claim_block(text, "plain-degrades")[1]
    assert "depth=20: 0.04" in plain and "depth=56: 0.015" in plain and plain.endswith("**DISAGREES**.")
    resnet = claim_block(text, "resnet-does-not-degrade")[1]
    assert "depth=56: 0.25" in resnet and "difference +0.22" in resnet and resnet.endswith("**DISAGREES**.")


def test_a_deepest_depth_that_never_trained_counts_as_degradation(tmp_path):
    store = ResultsStore(tmp_path)
    write_study(tmp_path, "deg", DEGRADATION_CLAIMS)
    for seed in range(2):
        add(store, "plain", 20, seed, 0.95, study="deg")
        add(store, "plain", 110, seed, None, status="diverged", error="loss is nan", study="deg")
    text = write_report(tmp_path, "deg").read_text()
    assert claim_block(text, "plain-degrades")[1] == (
        "  - depth=20: 0.05 ± 0 (95% CI; 2/2 runs, 0 above 0.5) → depth=110: — (0/2 runs, 2 failed, 0 above 0.5); "
        "difference — (margin 0.01): **agrees** — every run of one group failed: it counts as the worse."
    )
    failed = table_row(text, "| plain | 110 |")
    assert failed[3] == "0/2" and failed[4] == "—"  # diverged runs are counted, never averaged
    assert claim_block(text, "resnet-does-not-degrade")[1] == "  - **inconclusive** — no runs match its where."


@pytest.mark.parametrize(("shallow", "deep", "verdict", "warned"), [
    ((0.96, 0.97, 0.98), (0.955, 0.965, 0.975), "agrees", False),  # paired: +0.5 points at every seed, below the margin
    # +0.5 points, CI to +0.62: below the margin, 29% of the errors and 20 times the seeds' spread: a warning
    ((0.97, 0.97, 0.97), (0.9655, 0.965, 0.9645), "agrees", True),
    ((0.96, 0.97, 0.98), (0.965, 0.955, 0.975), "inconclusive", False),  # -0.5, +1.5, +0.5 points: the CI reaches +3
])
def test_a_small_difference_is_no_degradation_only_where_its_interval_says_so(tmp_path, shallow, deep, verdict,
                                                                              warned):
    store = ResultsStore(tmp_path)
    write_study(tmp_path, "deg", DEGRADATION_CLAIMS)
    for seed in range(3):
        add(store, "resnet", 20, seed, shallow[seed], study="deg")
        add(store, "resnet", 56, seed, deep[seed], study="deg")
    text = write_report(tmp_path, "deg").read_text()
    line = claim_block(text, "resnet-does-not-degrade")[1]
    # the tally counts an agreement whose margin a warning says dwarfs the data apart
    assert (" agree (1 with a margin warning), " in text) is warned
    head, _, warning = line.partition(" — warning: the margin 0.01 is 29% of the values compared (|mean| at most "
                                      "0.035), 20 times their spread (seed-to-seed standard deviation at most "
                                      "0.0005): ")
    assert "difference +0.005" in head and head.endswith(f"**{verdict}**" + ("" if warned else "."))
    assert bool(warning) is warned


def test_a_rise_within_the_seed_spread_is_inconclusive_and_failed_seeds_are_counted(tmp_path):
    store = ResultsStore(tmp_path)
    write_study(tmp_path, "deg", DEGRADATION_CLAIMS)
    for seed in range(3):
        add(store, "resnet", 20, seed, 1.0, study="deg")
        add(store, "resnet", 56, seed, (0.30, 1.00, 0.98)[seed], study="deg")  # error 0.70/0/0.02: one never trained
        add(store, "plain", 20, seed, 1.0, study="deg")
        add(store, "plain", 56, seed, (0.40, 0.30, 0.35)[seed], study="deg")  # all three fail: a clear rise
    text = write_report(tmp_path, "deg").read_text()
    resnet = claim_block(text, "resnet-does-not-degrade")[1]
    # 0.24 rise > 0.01, but the CI half-width t(2)·std/√3 ≈ 0.99: the data cannot decide.
    ci = T975_2 * statistics.stdev([0.70, 0.0, 0.02]) / math.sqrt(3)
    assert f"depth=56: 0.24 ± {ci:.4g} (95% CI; 3/3 runs, 1 above 0.5)" in resnet
    assert resnet.endswith("**inconclusive**.")
    plain = claim_block(text, "plain-degrades")[1]
    assert "(95% CI; 3/3 runs, 3 above 0.5)" in plain and plain.endswith("**agrees**.")
    assert "verdicts: 1 agree, 0 disagree, 1 inconclusive (2 paired t)." in text


def test_one_seed_per_depth_is_inconclusive(tmp_path):
    store = ResultsStore(tmp_path)
    write_study(tmp_path, "deg", DEGRADATION_CLAIMS)
    add(store, "plain", 20, 0, 0.99, study="deg")
    add(store, "plain", 56, 0, 0.90, study="deg")  # a 0.09 rise with no spread to judge it by
    line = claim_block(write_report(tmp_path, "deg").read_text(), "plain-degrades")[1]
    assert line.startswith("  - depth=20: 0.01 (1/1 runs, 0 above 0.5) → depth=56: 0.1 (1/1 runs, 0 above 0.5)")
    assert line.endswith("**inconclusive**.")


WARMUP_CLAIMS = "".join(
    claim_toml(id=cid, paper="Xiong et al. 2020, Fig. 2", text=text, metric="final_train_loss",
               where={"placement": placement}, compare="warmup_steps", a="max", b=0, expect=expect, threshold=0.05,
               relative=True)
    for cid, text, placement, expect in [
        ("postln-needs-warmup", "Post-LN without warm-up ends worse", "post", "greater"),
        ("preln-trains-without-warmup", "Pre-LN does not need warm-up", "pre", "not_greater"),
    ]
) + claim_toml(id="postln-grad-grows", paper="Xiong et al. 2020, Fig. 3", text="Post-LN's gradient norm grows toward "
               "the output", kind="value", metric="probe:grad_norm:*:last_over_first",
               where={"placement": "post", "warmup_steps": 100}, expect="greater", threshold=1.5)


def transformer_dir(root: Path, post_needs_warmup: bool) -> Path:
    store = ResultsStore(root)
    write_study(root, "warmup", WARMUP_CLAIMS)
    for seed in range(3):
        for variant in ("postln", "preln"):
            grows = post_needs_warmup and variant == "postln"
            probes = [{"step": 0, "layer": i, "block": f"blocks.{i}", "kind": "ffn", "metric": "grad_norm",
                       "value": (1.0 + i) * (1 + seed / 10) if grows else 1.0} for i in range(4)]  # fmt: skip
            common = {"task": "copy", "family": "transformer", "study": "warmup"}
            add(store, variant, 6, seed, 0.9, warmup_steps=100, final_train_loss=1.0 + seed / 100, probes=probes,
                **common)  # fmt: skip
            if grows:
                add(store, variant, 6, seed, None, status="diverged", warmup_steps=0, **common)
            else:
                add(store, variant, 6, seed, 0.9, warmup_steps=0, final_train_loss=1.02 + seed / 100, **common)
    return root


def test_post_ln_needs_warmup_claims_agree(tmp_path):
    text = write_report(transformer_dir(tmp_path, True)).read_text()  # every study of the board: its claims
    assert "### Study `warmup`" in text
    post = claim_block(text, "postln-needs-warmup")[1]
    assert "warmup_steps=0: — (0/3 runs, 3 failed)" in post and post.endswith(
        "**agrees** — every run of one group failed: it counts as the worse."
    )
    pre = claim_block(text, "preln-trains-without-warmup")
    assert pre[0].endswith("Test: final_train_loss where placement=pre: warmup_steps=0 vs max: not greater by more "
                           "than 0.05 x |mean(a)|.")  # fmt: skip
    assert "margin 0.0505" in pre[1] and "difference +0.02" in pre[1] and pre[1].endswith("**agrees**.")
    grows = claim_block(text, "postln-grad-grows")[1]
    # 4 every seed
    assert grows == "  - all: 4 ± 0 (95% CI; 3/3 runs); mean − 1.5 = +2.5 (95% CI +2.5 … +2.5): **agrees**."
    assert "for seed in" not in text and "python -m bench reproduce warmup" in text
    assert "![warmup_copy](plots/warmup_copy.png)" in text


def test_post_ln_claims_disagree_when_it_trains_fine_without_warmup(tmp_path):
    text = write_report(transformer_dir(tmp_path, False)).read_text()
    assert claim_block(text, "postln-needs-warmup")[1].endswith("**DISAGREES**.")
    assert claim_block(text, "postln-grad-grows")[1].endswith("**DISAGREES**.")
    assert claim_block(text, "preln-trains-without-warmup")[1].endswith("**agrees**.")


def test_the_shipped_study_file_is_used_when_the_sweep_left_no_copy(tmp_path):
    store = ResultsStore(tmp_path)
    for seed in range(2):
        add(store, "plain", 20, seed, 0.95, study="degradation")
        add(store, "plain", 56, seed, 0.80 + seed / 100, study="degradation")
    text = write_report(tmp_path).read_text()
    assert "Claims declared in `bench/studies/degradation.toml`" in text
    assert claim_block(text, "plain-degrades")[1].endswith("**agrees**.")
    assert claim_block(text, "highway-does-not-degrade")[1] == "  - **inconclusive** — no runs match its where."
    write_study(tmp_path, "degradation", "")  # the copy the sweep ran from wins, even without claims
    assert "Paper claims vs measured" not in write_report(tmp_path).read_text()


def test_no_claims_without_a_study_and_a_bad_study_file_is_an_error(tmp_path):
    store = ResultsStore(tmp_path)
    add(store, "plain", 20, 0, 0.9)
    add(store, "plain", 56, 0, 0.5)
    assert "Paper claims vs measured" not in write_report(tmp_path).read_text()
    add(store, "plain", 56, 1, 0.5, study="mine")
    write_study(tmp_path, "mine", '[[claims]]\nid = "x"\nkind = "trend"\n')
    with pytest.raises(ValueError, match=r"mine.toml: claim 'x': unknown kind 'trend'"):
        write_report(tmp_path)


def test_report_of_one_study_and_errors(tmp_path):
    store = ResultsStore(tmp_path)
    add(store, "resnet", 20, 0, 0.9, study="degradation")
    add(store, "plain", 20, 0, 0.8)
    text = write_report(tmp_path, study="degradation").read_text()
    assert text.startswith("# resbench report — study degradation")
    assert "| resnet | 20 | digits | 1/1 | 20.00 (n=1) | 10.00 (n=1) |" in text and "| plain |" not in text
    assert "python -m bench reproduce degradation" in text
    assert f"(figures: `python -m bench plot --results-dir {tmp_path} --study degradation`)" in text
    assert "![curves_digits](plots/degradation/curves_digits.png)" in text
    with pytest.raises(ValueError, match="no runs of study 'nope'"):
        write_report(tmp_path, study="nope")
    with pytest.raises(ValueError, match=r"no runs in .*nothing to report"):
        write_report(tmp_path / "empty")


def test_a_study_with_runs_of_two_presets_gets_a_command_for_each(tmp_path):
    store = ResultsStore(tmp_path)
    add(store, "resnet", 20, 0, 0.9, study="degradation", preset="quick")
    add(store, "resnet", 20, 0, 0.9, study="degradation", preset="quick", lr=0.05)
    add(store, "resnet", 32, 0, 0.9, study="degradation")  # the study's full preset (no name)
    add(store, "resnet", 20, 0, 0.9, study="degradation", preset="other")
    text = write_report(tmp_path, study="degradation").read_text()
    commands = [line for line in text.splitlines() if line.startswith("python -m bench reproduce")]
    assert commands == [f"python -m bench reproduce degradation --results-dir {tmp_path}",
                        f"python -m bench reproduce degradation --preset other --results-dir {tmp_path}",
                        f"python -m bench reproduce degradation --preset quick --results-dir {tmp_path}"]


def test_markdown_table_escapes_pipes():
    assert markdown_table(["a", "b"], [["x|y", 1]]) == "| a | b |\n|---|---|\n| x\\|y | 1 |"


@pytest.mark.parametrize(
    ("variant", "depth", "task", "field", "a", "b"),
    [
        ("resnet", 20, "digits", "lr", 0.01, 0.1),  # two recipes
        ("postln", 6, "copy", "warmup_steps", 0, 100),  # configs differing only in warm-up
    ],
)
def test_configs_that_differ_in_one_field_are_never_pooled(tmp_path, variant, depth, task, field, a, b):
    store = ResultsStore(tmp_path)
    for seed in range(2):
        add(store, variant, depth, seed, 0.5, task=task, **{field: a})
        add(store, variant, depth, seed + 10, 0.9, task=task, **{field: b})
    text = write_report(tmp_path).read_text()
    assert table_row(text, "| variant |")[:5] == ["variant", "depth", "task", field, "ok/runs"]
    assert table_row(text, f"| {variant} | {depth} | {task} | {a} |")[5] == "60.00 ± 0.00 (±0.00)"  # val error
    assert table_row(text, f"| {variant} | {depth} | {task} | {b} |")[5] == "20.00 ± 0.00 (±0.00)"


def test_a_difference_recorded_only_in_the_config_hash_shows_the_hash(tmp_path):
    store = ResultsStore(tmp_path)
    for seed in range(2):  # eval_every is in no leaderboard column, and these runs' JSONs hold an empty config
        add(store, "resnet", 20, seed, 0.9, config=False)
        add(store, "resnet", 20, seed, 0.5, config=False, eval_every=7)
    text = write_report(tmp_path).read_text()
    assert table_row(text, "| variant |")[:5] == ["variant", "depth", "task", "config_hash", "ok/runs"]
    rows = [line for line in text.splitlines() if line.startswith("| resnet | 20 | digits |")]
    assert sorted(r.split("|")[6].strip() for r in rows) == ["20.00 ± 0.00 (±0.00)", "60.00 ± 0.00 (±0.00)"]
    store2 = ResultsStore(tmp_path / "with_configs")
    for seed in range(2):  # with the configs in the run JSONs, the field itself is the column
        add(store2, "resnet", 20, seed, 0.9)
        add(store2, "resnet", 20, seed, 0.5, eval_every=7)
    text = write_report(tmp_path / "with_configs").read_text()
    assert table_row(text, "| variant |")[:5] == ["variant", "depth", "task", "eval_every", "ok/runs"]
    assert table_row(text, "| resnet | 20 | digits | 7 |")[5] == "60.00 ± 0.00 (±0.00)"
    assert table_row(text, "| resnet | 20 | digits | — |")[5] == "20.00 ± 0.00 (±0.00)"


def test_grad_norm_figure_is_drawn_and_linked_when_runs_have_step_0_probes(tmp_path, plain_degrades_report):
    text = write_report(degradation_dir(tmp_path, True, probes=True)).read_text()
    assert "![grad_norm_init_digits](plots/grad_norm_init_digits.png)" in text
    assert (tmp_path / "plots" / "grad_norm_init_digits.png").stat().st_size > 0
    assert "clipped to the metric's valid range" in text  # the figure note states the CI clipping
    assert "(figures: `python -m bench plot --results-dir " in text and "--study" not in text
    assert "grad_norm_init" not in plain_degrades_report  # the same runs without probes: no figure


def test_study_report_and_probe_table_files(tmp_path: Path) -> None:
    import pandas as pd

    root = degradation_dir(tmp_path, True)
    store = ResultsStore(root)
    run = store.load_runs()[0]
    run["probes"] = [{"step": 0, "layer": 0, "block": "stages.0.0", "metric": "grad_norm", "value": 2.5}]
    store.append(run["row"] | {"study": "deg"}, run)
    path = write_report(root, "deg")
    assert path.name == "REPORT-deg.md" and "[probes-deg.csv.gz](probes-deg.csv.gz)" in path.read_text()
    gz = (root / "probes-deg.csv.gz").read_bytes()
    assert gz[:2] == b"\x1f\x8b" and not (root / "probes-deg.csv").exists()  # gzip, read as it is by pandas
    write_report(root, "deg")
    assert (root / "probes-deg.csv.gz").read_bytes() == gz  # an unchanged table: the same bytes (no timestamp)
    table = pd.read_csv(root / "probes-deg.csv.gz")
    assert table[["run_id", "step", "layer", "metric", "value"]].values.tolist() == [
        [run["run_id"], 0, 0, "grad_norm", 2.5]
    ]
    assert not (root / "REPORT.md").exists()


def test_the_reproduce_lines_rebuild_each_run_outside_a_study(tmp_path):
    """Every option a run was made with is in its command (not only variant, depth, task and warm-up), and a run
    without a depth (a timm model) is listed like any other; each line parses back to the run's config."""
    from bench.cli import build_parser, config_from_args

    store = ResultsStore(tmp_path)
    tuned = RunConfig(variant="preln", depth=2, task="copy", lr=3e-4, steps=7, optimizer="adamw",
                      model_args=(("d_model", 32), ("n_heads", 2)))
    timm = RunConfig(variant="timm:resnet18", task="digits", steps=3)
    for cfg in (tuned, dataclasses.replace(tuned, seed=1), timm):
        row = {"run_id": cfg.run_id, "config_hash": cfg.config_hash(), "variant": cfg.variant, "depth": cfg.depth,
               "task": cfg.task, "seed": cfg.seed, "status": "ok", "final_train_acc": 0.5}
        store.append(row, {"run_id": cfg.run_id, "row": row, "config": cfg.to_dict(), "curves": {}, "probes": []})
    text = write_report(tmp_path).read_text()
    loops = [line for line in text.splitlines() if line.startswith("for seed in")]
    assert len(loops) == 2, loops
    for line, cfg, seeds in zip(loops, (tuned, timm), ("0 1", "0"), strict=True):
        assert line.startswith(f"for seed in {seeds}; do python -m bench run ")
        argv = shlex.split(line.split("; do ", 1)[1].removesuffix("; done"))[4:]
        assert argv[-2:] == ["--seed", "$seed"]
        ns = build_parser().parse_args(["run", *argv[:-2]])
        assert config_from_args(ns) == cfg and ns.results_dir == str(tmp_path)


def test_the_leaderboard_marks_a_wall_time_that_pools_a_measuring_run_with_runs_that_reused_its_figures(
        tmp_path, capsys):  # fmt: skip
    """Seeds 0 and 2 ran the cost-measurement phases (6 s, 7 s), seed 1 reused seed 0's figures (2 s): the mean of
    the three says so, and a note says what wall_time_s includes; resnet 56's runs all measured, so no mark."""
    from bench.cli import main
    store = ResultsStore(tmp_path)
    first = RunConfig(variant="resnet", depth=20, seed=0).run_id
    for seed, wall in enumerate((6.0, 2.0, 7.0)):
        own = RunConfig(variant="resnet", depth=20, seed=seed).run_id
        add(store, "resnet", 20, seed, 0.9, wall_time_s=wall, cost_source=first if seed == 1 else own)
    for seed in range(2):
        add(store, "resnet", 56, seed, 0.9, wall_time_s=9.0 + seed,
            cost_source=RunConfig(variant="resnet", depth=56, seed=seed).run_id)
    assert main(["leaderboard", "--metrics", "wall_time_s", "--results-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    half = T975_2 * statistics.stdev((6.0, 2.0, 7.0)) / math.sqrt(3)
    cells = [line.split(maxsplit=5)[5] for line in out.splitlines()[1:]]  # after variant ... n_failed
    assert cells == [f"5 ± {half:.2g} (3) 2 measuring", f"9.5 ± {sps.t.ppf(0.975, 1) * 0.5:.2g} (2)"]
    assert err.strip().startswith("wall_time_s: each run's whole time, its cost-measurement phases")
    main(["leaderboard", "--results-dir", str(tmp_path)])
    assert "wall_time_s" not in "".join(capsys.readouterr())  # the note comes only with the column
