"""bench.report: REPORT.md content from fake results directories — table numbers and claim verdicts both ways."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.report import markdown_table, write_report
from bench.results import ResultsStore

T975_2 = 4.302653  # Student t quantile, 0.975, 2 degrees of freedom (printed tables)


def add(store: ResultsStore, variant: str, depth: int, seed: int, acc: float | None, status: str = "ok", **row) -> None:
    task = row.pop("task", "digits")
    run_id = f"{variant}{depth}-{task}-w{row.get('warmup_steps', 0)}-s{seed}"
    full = {"run_id": run_id, "variant": variant, "depth": depth, "task": task, "seed": seed, "status": status,
            "final_train_acc": acc, "final_val_acc": None if acc is None else acc - 0.1,
            "torch_version": "2.14.1", "device_name": "cpu"} | row  # fmt: skip
    probes = row.pop("probes", None) or []
    full.pop("probes", None)
    store.append(
        full, {"run_id": run_id, "row": full, "curves": {"train": [{"step": 0, "loss": 1.0}]}, "probes": probes}
    )


def grad_probes(depth: int, seed: int) -> list[dict]:
    """Gradient norms at step 0 (what probe_every records) for three residual units."""
    return [{"step": 0, "layer": i, "block": f"b{i}", "metric": "grad_norm", "value": (i + 1.0) * depth + seed}
            for i in range(3)]  # fmt: skip


def degradation_dir(root: Path, plain_degrades: bool, probes: bool = False) -> Path:
    store = ResultsStore(root)
    deep_plain = (0.80, 0.82, 0.84) if plain_degrades else (0.96, 0.97, 0.98)
    deep_resnet = (0.98, 0.99, 1.00) if plain_degrades else (0.70, 0.75, 0.80)
    for seed in range(3):
        for variant, depth, acc in (("plain", 20, (0.95, 0.96, 0.97)), ("plain", 56, deep_plain),
                                    ("resnet", 20, (0.96, 0.97, 0.98)), ("resnet", 56, deep_resnet)):  # fmt: skip
            extra = {"steps_to_target": (100, 200, None)[seed]} if (variant, depth) == ("plain", 20) else {}
            add(store, variant, depth, seed, acc[seed], probes=grad_probes(depth, seed) if probes else None, **extra)
    return root


def table_row(text: str, prefix: str) -> list[str]:
    rows = [line for line in text.splitlines() if line.startswith(prefix)]
    assert len(rows) == 1, rows
    return [c.strip() for c in rows[0].strip("|").split("|")]


def test_leaderboard_table_numbers(tmp_path):
    text = write_report(degradation_dir(tmp_path, True)).read_text()
    header = table_row(text, "| variant |")
    cells = dict(zip(header, table_row(text, "| plain | 20 | digits |"), strict=True))
    # train acc 0.95/0.96/0.97: mean 96.00 %, std 1.00 %, 95% CI half-width t(2)·1/√3 %.
    assert cells["train acc (%)"] == f"96.00 ± 1.00 (±{T975_2 / math.sqrt(3):.2f})"
    assert cells["val acc (%)"] == f"86.00 ± 1.00 (±{T975_2 / math.sqrt(3):.2f})"
    assert cells["ok/runs"] == "3/3"
    assert cells["steps→target (reached)"] == "150 (2/3)"  # the run that never reached it is not its last step
    assert cells["samples/s"] == "—"  # not measured in these fake runs


def test_degradation_claims_agree_when_plain_degrades(tmp_path):
    text = write_report(degradation_dir(tmp_path, True)).read_text()
    assert "Measured final train error, depth 20→56: 0.0400 → 0.1800; degrades: **yes** — agrees with" in text
    assert "Measured final train error, depth 20→56: 0.0300 → 0.0100; degrades: **no** — agrees with" in text
    assert "DISAGREES" not in text and "inconclusive**" not in text
    assert "Seeds that failed to train (error > 0.5), depth 20→56: 0/3 → 0/3." in text
    assert "He et al. 2015" in text and "HIGHER training error" in text


def test_degradation_claims_disagree_when_the_data_say_otherwise(tmp_path):
    text = write_report(degradation_dir(tmp_path, False)).read_text()
    plain = [line for line in text.splitlines() if "0.0400 → 0.0300" in line]
    assert plain and "degrades: **no** — DISAGREES with the paper" in plain[0]
    resnet = [line for line in text.splitlines() if "0.0300 → 0.2500" in line]
    assert resnet and "degrades: **yes** — DISAGREES with the paper" in resnet[0]


def test_a_deepest_depth_that_never_trained_counts_as_degradation(tmp_path):
    store = ResultsStore(tmp_path)
    for seed in range(2):
        add(store, "plain", 20, seed, 0.95)
        add(store, "plain", 110, seed, None, status="diverged", error="loss is nan")
    text = write_report(tmp_path).read_text()
    assert "depth 20→110: 0.0500 → failed (2/2); degrades: **yes** — agrees with" in text
    assert "Seeds that failed to train (error > 0.5), depth 20→110: 0/2 → 0/0 (+2 not ok)." in text
    failed = table_row(text, "| plain | 110 |")
    assert failed[3] == "0/2" and failed[4] == "—"  # diverged runs are counted, never averaged


def test_small_differences_within_noise_are_not_degradation(tmp_path):
    store = ResultsStore(tmp_path)
    for seed in range(3):
        add(store, "resnet", 20, seed, (0.96, 0.97, 0.98)[seed])
        add(store, "resnet", 56, seed, (0.955, 0.965, 0.975)[seed])  # +0.5 points: below the 1-point tolerance
    assert "degrades: **no** — agrees with" in write_report(tmp_path).read_text()


def test_a_rise_within_the_seed_spread_is_inconclusive(tmp_path):
    store = ResultsStore(tmp_path)
    for seed in range(3):
        add(store, "resnet", 20, seed, 1.0)
        add(store, "resnet", 56, seed, (0.30, 1.00, 0.98)[seed])  # error 0.70/0.00/0.02: one seed never trained
        add(store, "plain", 20, seed, 1.0)
        add(store, "plain", 56, seed, (0.40, 0.30, 0.35)[seed])  # all three fail: a clear rise
    lines = write_report(tmp_path).read_text().splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("- **resnet**"))
    # 0.24 rise > 0.01, but the CI half-width t(2)·std/√3 ≈ 0.99: the data cannot decide.
    assert lines[i + 1] == (
        "  Measured final train error, depth 20→56: 0.0000 → 0.2400; degrades: **inconclusive** — "
        "cannot confirm or refute with n=3 seeds; more seeds or a longer schedule needed."
    )
    assert lines[i + 2] == "  Seeds that failed to train (error > 0.5), depth 20→56: 0/3 → 1/3."
    j = next(i for i, line in enumerate(lines) if line.startswith("- **plain**"))
    assert "degrades: **yes** — agrees with the paper." in lines[j + 1]
    assert lines[j + 2].endswith("depth 20→56: 0/3 → 3/3.")


def test_one_seed_per_depth_is_inconclusive(tmp_path):
    store = ResultsStore(tmp_path)
    add(store, "plain", 20, 0, 0.99)
    add(store, "plain", 56, 0, 0.90)  # a 0.09 rise with no spread to judge it by
    text = write_report(tmp_path).read_text()
    assert "0.0100 → 0.1000; degrades: **inconclusive** — cannot confirm or refute with n=1 seed;" in text


def transformer_dir(root: Path, post_needs_warmup: bool) -> Path:
    store = ResultsStore(root)
    for seed in range(2):
        for variant in ("postln", "preln"):
            # Units alternate attention / feed-forward; only the FFN sublayers count (Xiong's Fig. 3), so
            # the large first attention unit (it sees the raw embeddings) must not enter the ratio.
            warm_probes = [{"step": 0, "layer": i, "block": f"blocks.{i // 2}.{'ffn' if i % 2 else 'attn'}.combine",
                            "metric": "grad_norm",
                            "value": 100.0 if i == 0 else
                            (1.0 + i // 2 if variant == "postln" else 1.0) if post_needs_warmup else 1.0}
                           for i in range(8)]  # fmt: skip
            common = {"task": "copy", "family": "transformer"}
            add(store, variant, 6, seed, 0.9, warmup_steps=100, final_train_loss=1.0, probes=warm_probes, **common)
            if variant == "postln" and post_needs_warmup:
                add(store, variant, 6, seed, None, status="diverged", warmup_steps=0, **common)
            else:
                add(store, variant, 6, seed, 0.9, warmup_steps=0, final_train_loss=1.02, **common)
    return root


def test_post_ln_needs_warmup_claim_agrees(tmp_path):
    text = write_report(transformer_dir(tmp_path, True)).read_text()
    post = next(line for line in text.splitlines() if line.startswith("- **postln** (depth=6), Post-LN, on copy"))
    assert "without: —, failed 2/2" in post and "worse: **yes** — agrees with" in post
    pre = next(line for line in text.splitlines() if line.startswith("- **preln** (depth=6), Pre-LN, on copy"))
    assert "With warm-up: final train loss 1.0000, failed 0/2" in pre and "worse: **no** — agrees with" in pre
    assert "**postln** depth 6 on copy: last/first FFN gradient norm at step 0 = 4; grows: **yes** — agrees" in text
    assert "**preln** depth 6 on copy: last/first FFN gradient norm at step 0 = 1; grows: **no** — agrees" in text
    assert "for seed in 0 1; do python -m bench run --variant postln --depth 6 --task copy" in text
    assert "--warmup-steps 100 --seed $seed; done" in text
    assert "![warmup_copy](plots/warmup_copy.png)" in text


def test_post_ln_claim_is_inconclusive_within_the_seed_spread(tmp_path):
    store = ResultsStore(tmp_path)
    common = {"task": "copy", "family": "transformer"}
    for seed in range(2):
        add(store, "postln", 6, seed, 0.9, warmup_steps=100, final_train_loss=1.0, **common)
        add(store, "postln", 6, seed, 0.9, warmup_steps=0, final_train_loss=(1.2, 2.0)[seed], **common)
        add(store, "preln", 6, seed, 0.9, warmup_steps=100, final_train_loss=1.0, **common)
    # Pre-LN without warm-up: one run diverged, the other is as good: more failures, not all -> undecided.
    add(store, "preln", 6, 0, None, status="diverged", warmup_steps=0, **common)
    add(store, "preln", 6, 1, 0.9, warmup_steps=0, final_train_loss=1.0, **common)
    text = write_report(tmp_path).read_text()
    post = next(line for line in text.splitlines() if line.startswith("- **postln** (depth=6), Post-LN"))
    # 1.6 vs 1.0 is a 60% rise, but the CI half-width t(1)·0.566/√2 ≈ 5.1 swallows it.
    assert "without: 1.6000, failed 0/2" in post
    assert post.endswith("worse: **inconclusive** — cannot confirm or refute with n=2 seeds; more seeds or a "
                         "longer schedule needed.")  # fmt: skip
    pre = next(line for line in text.splitlines() if line.startswith("- **preln** (depth=6), Pre-LN"))
    assert "without: 1.0000, failed 1/2" in pre and "worse: **inconclusive** — cannot confirm" in pre
    assert "DISAGREES" not in text and "agrees with" not in text


def test_post_ln_claim_disagrees_when_it_trains_fine_without_warmup(tmp_path):
    text = write_report(transformer_dir(tmp_path, False)).read_text()
    post = next(line for line in text.splitlines() if line.startswith("- **postln** (depth=6), Post-LN, on copy"))
    assert "without: 1.0200, failed 0/2" in post and "worse: **no** — DISAGREES with the paper" in post
    assert "grows: **no** — DISAGREES" in text


def test_report_of_one_study_and_errors(tmp_path):
    store = ResultsStore(tmp_path)
    add(store, "resnet", 20, 0, 0.9, study="degradation")
    add(store, "plain", 20, 0, 0.8)
    text = write_report(tmp_path, study="degradation").read_text()
    assert text.startswith("# resbench report — study degradation")
    assert "| resnet | 20 | digits | 1/1 | 90.00 (n=1) |" in text and "| plain |" not in text
    assert "python -m bench reproduce degradation" in text
    assert f"(figures: `python -m bench plot --results-dir {tmp_path} --study degradation`)" in text
    assert "![curves_digits](plots/degradation/curves_digits.png)" in text
    with pytest.raises(ValueError, match="no runs of study 'nope'"):
        write_report(tmp_path, study="nope")
    with pytest.raises(ValueError, match=r"no runs in .*nothing to report"):
        write_report(tmp_path / "empty")


def test_markdown_table_escapes_pipes():
    assert markdown_table(["a", "b"], [["x|y", 1]]) == "| a | b |\n|---|---|\n| x\\|y | 1 |"


def test_runs_of_different_recipes_are_never_pooled(tmp_path):
    store = ResultsStore(tmp_path)
    for seed in range(2):
        add(store, "resnet", 20, seed, 0.9, lr=0.1)
        add(store, "resnet", 20, seed + 10, 0.5, lr=0.01)
    text = write_report(tmp_path).read_text()
    assert table_row(text, "| variant |")[:5] == ["variant", "depth", "task", "lr", "ok/runs"]
    assert table_row(text, "| resnet | 20 | digits | 0.01 |")[5] == "50.00 ± 0.00 (±0.00)"
    assert table_row(text, "| resnet | 20 | digits | 0.1 |")[5] == "90.00 ± 0.00 (±0.00)"


def test_grad_norm_figure_is_drawn_and_linked_when_runs_have_step_0_probes(tmp_path):
    text = write_report(degradation_dir(tmp_path, True, probes=True)).read_text()
    assert "![grad_norm_init_digits](plots/grad_norm_init_digits.png)" in text
    assert (tmp_path / "plots" / "grad_norm_init_digits.png").stat().st_size > 0
    assert "clipped to the metric's valid range" in text  # the figure note states the CI clipping
    assert "(figures: `python -m bench plot --results-dir " in text and "--study" not in text
    bare = write_report(degradation_dir(tmp_path / "bare", True)).read_text()
    assert "grad_norm_init" not in bare  # no probes, no figure


def test_study_report_and_probe_table_files(tmp_path: Path) -> None:
    import pandas as pd

    root = degradation_dir(tmp_path, True)
    store = ResultsStore(root)
    run = store.load_runs()[0]
    run["probes"] = [{"step": 0, "layer": 0, "block": "stages.0.0", "metric": "grad_norm", "value": 2.5}]
    store.append(run["row"] | {"study": "deg"}, run)
    path = write_report(root, "deg")
    assert path.name == "REPORT-deg.md" and "[probes-deg.csv](probes-deg.csv)" in path.read_text()
    table = pd.read_csv(root / "probes-deg.csv")
    assert table[["run_id", "step", "layer", "metric", "value"]].values.tolist() == [
        [run["run_id"], 0, 0, "grad_norm", 2.5]
    ]
    assert not (root / "REPORT.md").exists()
