"""A run that ends at chance learned nothing: each task's chance level, the failed_to_learn rule, what a real run
records, what claims make of such runs, and that resume keeps the outcomes a rerun would repeat."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from test_claims import board, claim, one, runs
from test_tokens import llmc_set

from bench.runs import chance, tasks
from bench.runs.config import RunConfig
from bench.runs.results import ResultsStore
from bench.runs.runner import execute
from bench.runs.tasks.base import TaskOptions, prior_entropy
from bench.sweeps.driver import run_sweep
from bench.sweeps.executors import make_executor
from bench.sweeps.options import SweepOptions


def test_prior_entropy_is_the_loss_of_predicting_the_frequencies() -> None:
    assert prior_entropy(torch.arange(10).repeat(7)) == pytest.approx(math.log(10))
    # p = (1/2, 1/4, 1/4): H = ln 2 / 2 + 2 · ln 4 / 4 = 1.5 ln 2; the ignored positions count nowhere
    assert prior_entropy(torch.tensor([[0, 0], [1, 2]])) == pytest.approx(1.5 * math.log(2))
    assert prior_entropy(torch.tensor([0, 0, 1, 2, -100, -100]), ignore=-100) == pytest.approx(1.5 * math.log(2))


def test_every_task_declares_its_chance_level(tmp_path: Path) -> None:
    digits = tasks.get("digits")
    labels = np.bincount(digits.train_y.numpy()) / len(digits.train_y)  # type: ignore[attr-defined]
    assert digits.chance_loss == pytest.approx(-(labels * np.log(labels)).sum()) and 2.29 < digits.chance_loss < 2.31
    text = tasks.get("tinytext", options=TaskOptions(seq_len=16))
    freq = np.bincount(text.train.numpy(), minlength=256) / len(text.train)  # type: ignore[attr-defined]
    freq = freq[freq > 0]
    assert text.chance_loss == pytest.approx(-(freq * np.log(freq)).sum())
    copy = tasks.get("copy", options=TaskOptions(train_size=64, val_size=16))
    scored = copy.train[1][copy.train[1] != -100]  # type: ignore[attr-defined]
    assert copy.chance_loss == pytest.approx(prior_entropy(scored))
    shards = tasks.get("tokens", options=TaskOptions(data_path=str(llmc_set(tmp_path)), seq_len=8, vocab_size=4096,
                                                     workers=0))
    assert shards.chance_loss == pytest.approx(math.log(1600))  # 1,600 distinct training tokens, each once
    assert shards.info["chance_loss_tokens"] == 1600


ROW = {"status": "ok", "chance_loss": 2.3, "final_train_loss": 2.29, "final_val_loss": 2.31}


@pytest.mark.parametrize(("row", "failed"), [
    (ROW, True),  # on the label prior
    (ROW | {"final_train_loss": 1e5, "final_val_loss": 1e5}, True),  # far above it: no better
    (ROW | {"final_train_loss": 2.0}, False),  # 13% below chance: it learned something
    (ROW | {"final_train_loss": 0.05}, False),  # memorised random labels (validation at chance): it learned
    (ROW | {"final_train_loss": 2.3 * 0.991, "final_val_loss": None}, True),  # 0.9% below: inside the band
    (ROW | {"final_train_loss": 2.3 * 0.989, "final_val_loss": None}, False),
    (ROW | {"status": "diverged"}, False),  # a failure of its own
    (ROW | {"chance_loss": None}, False),  # no chance level declared: never judged
    (ROW | {"final_train_loss": None, "final_val_loss": None}, False),
])
def test_the_failed_to_learn_rule(row: dict, failed: bool) -> None:
    reason = chance.failed_to_learn(row)
    assert (reason is not None) == failed
    judged = chance.judge(row)
    assert judged["status"] == ("failed_to_learn" if failed else row["status"])
    assert {k: judged[k] for k in row if k not in ("status", "error")} == {k: v for k, v in row.items()
                                                                            if k not in ("status", "error")}
    assert chance.failed_to_learn(row, band=0.0) is None  # --chance-band 0: never


def test_the_reason_names_the_loss_and_the_level() -> None:
    assert chance.failed_to_learn(ROW) == (
        "ended at chance: its lowest final loss (train loss 2.29) is not 1% below the task's chance level, 2.3 nats "
        "(the loss of predicting the training targets' frequencies)")


def test_a_run_that_stays_at_chance_is_recorded_failed_to_learn_with_its_numbers(tmp_path: Path) -> None:
    cfg = RunConfig(variant="plain", depth=8, steps=2, batch_size=16, eval_every=2, measure=())
    row = execute(cfg, tmp_path)["row"]
    assert row["status"] == "failed_to_learn" and row["error"].startswith("ended at chance: its lowest final loss")
    assert row["chance_loss"] == pytest.approx(tasks.get("digits").chance_loss)
    assert row["final_train_loss"] >= 0.99 * row["chance_loss"] and row["final_val_acc"] is not None
    stored = ResultsStore(tmp_path).load_leaderboard().iloc[0]
    assert stored["status"] == "failed_to_learn"
    assert stored["final_train_loss"] == pytest.approx(row["final_train_loss"])
    learned = execute(RunConfig(variant="plain", depth=8, steps=60, batch_size=32, eval_every=60, measure=()), tmp_path)
    assert learned["row"]["status"] == "ok" and learned["row"]["final_train_loss"] < 0.9 * row["chance_loss"]


def test_two_groups_at_chance_never_agree_and_one_counts_as_the_failed_group() -> None:
    at_chance = runs("plain", 56, [None, None, None], statuses=["failed_to_learn"] * 3)
    also = runs("plain", 20, [None, None, None], statuses=["failed_to_learn"] * 3)
    similar = claim(where={"variant": "plain"}, compare="depth", a=20, b=56, expect="similar", threshold=0.1)
    assert one(similar, board(also, at_chance)).verdict == "inconclusive"
    # The user's run: two seeds NaN, the third ended at chance; the other group trained.
    failed = runs("plain", 56, [None, None, None], statuses=["diverged", "diverged", "failed_to_learn"])
    trained = runs("plain", 20, [0.1, 0.12, 0.11])
    worse = claim(where={"variant": "plain"}, compare="depth", a=20, b=56, expect="greater", threshold=0.01)
    r = one(worse, board(trained, failed))
    assert r.verdict == "agrees" and "every run of one group failed" in r.note


def test_cost_figures_count_whatever_the_status() -> None:
    from bench.analysis.stats import aggregate_long

    rows = pd.DataFrame(runs("plain", 20, [1.0, 1.0], statuses=["ok", "failed_to_learn"]))
    rows["step_time_ms"], rows["final_train_loss"] = [10.0, 12.0], [1.0, 2.3]
    agg = aggregate_long(rows, ("variant",), ("step_time_ms", "final_train_loss")).set_index("metric")
    assert agg.loc["step_time_ms", "n"] == 2 and agg.loc["step_time_ms", "mean"] == pytest.approx(11.0)
    assert agg.loc["final_train_loss", "n"] == 1 and agg.loc["final_train_loss", "n_failed"] == 1


def test_resume_keeps_what_a_rerun_would_repeat(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A diverged or chance-level row is a result (the same configuration and seed give it again): skipped on
    resume unless --retry-failed; a killed one always runs again."""
    store = ResultsStore(tmp_path)
    configs = [RunConfig(variant="plain", depth=8, steps=1, batch_size=16, eval_every=1, measure=(), seed=s)
               for s in range(3)]
    for cfg, status in zip(configs, ("diverged", "failed_to_learn", "killed"), strict=True):
        store.append({"run_id": cfg.run_id, "config_hash": cfg.config_hash(), "variant": "plain", "status": status,
                      "git_sha": "unknown"}, {"run_id": cfg.run_id, "config": cfg.to_dict()})
    written = run_sweep(configs, tmp_path, make_executor(configs, SweepOptions()))
    assert written == [configs[2].run_id]
    out = capsys.readouterr().out
    assert "already recorded as diverged (--retry-failed runs it again), skipped" in out
    assert "2 recorded as diverged or at chance and kept" in out
    status = dict(zip(*store.load_leaderboard()[["run_id", "status"]].to_numpy().T, strict=True))
    again = run_sweep(configs, tmp_path, make_executor(configs, SweepOptions()), progress=False, retry_failed=True)
    assert set(again) == {c.run_id for c in configs if status[c.run_id] != "ok"} >= {c.run_id for c in configs[:2]}
