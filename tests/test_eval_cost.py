"""Evaluation cost under control: --eval-batches caps every pass on a fixed subset, and the time spent evaluating is
recorded apart (eval_time_s) and left out of the training time, the throughput fallback and time_to_target_s."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from bench.runs import train
from bench.runs.config import RunConfig
from bench.runs.runner import run_config

EVAL_COST = 1000.0  # what one evaluation costs on the fake clock: far more than the whole training


def test_evaluation_is_capped_and_timed_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = itertools.count()  # every reading of the clock advances it by one "second"
    now = {"extra": 0.0}
    monkeypatch.setattr(train.time, "perf_counter", lambda: next(clock) + now["extra"])
    passes: list[int] = []
    real = train.evaluate

    def costly(s: Any, model: Any, batches: Any) -> tuple[float, float]:
        batches = list(batches)
        passes.append(len(batches))
        now["extra"] += EVAL_COST / 2  # each of the two passes of an evaluation
        return real(s, model, iter(batches))

    monkeypatch.setattr(train, "evaluate", costly)
    cfg = RunConfig(variant="residual_mlp", depth=2, task="digits", steps=4, eval_every=2, batch_size=32,
                    eval_batches=3, target=0.01, measure=())
    run = run_config(cfg)
    row = run["row"]
    assert passes == [3, 3, 3, 3]  # validation and training error, at steps 2 and 4, three batches each
    assert row["eval_time_s"] >= 2 * EVAL_COST
    assert row["steps_to_target"] == 2 and row["time_to_target_s"] < EVAL_COST
    train_time = run["curves"]["eval"][-1]["train_time_s"]
    assert train_time < EVAL_COST and row["step_time_ms"] == pytest.approx(train_time * 1e3 / 4)
