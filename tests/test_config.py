"""RunConfig validation, identity and the learning-rate schedules."""

from __future__ import annotations

import dataclasses
import math

import pytest

from bench.config import RECIPES, RunConfig, config_from_dict, lr_factor


def cfg(**kw: object) -> RunConfig:
    return RunConfig(variant="resnet20", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"variant": ""}, "--variant is required"),
        ({"epochs": 1.0, "steps": 5}, "give --epochs or --steps, not both"),
        ({"steps": 0}, "--steps must be >= 1"),
        ({"epochs": 0.0}, "--epochs must be a positive finite number"),
        ({"epochs": math.inf}, "--epochs must be a positive finite number"),
        ({"depth": 0}, "--depth must be >= 1"),
        ({"batch_size": 0}, "--batch-size must be >= 1"),
        ({"warmup_steps": -1}, "--warmup-steps must be >= 0"),
        ({"lr": -0.1}, "--lr must be a positive finite number"),
        ({"lr": math.inf}, "--lr must be a positive finite number"),
        ({"optimizer": "lion"}, "--optimizer must be one of sgd, adamw, adam"),
        ({"schedule": "poly"}, "--schedule must be one of"),
        ({"precision": "fp8"}, "--precision must be one of"),
        ({"device": "tpu"}, "--device must be one of"),
        ({"warmup_kind": "cubic"}, "--warmup-kind must be one of"),
        ({"milestones": (0.75, 0.5)}, "--milestones must be increasing fractions"),
        ({"milestones": (1.5,)}, "--milestones must be increasing fractions"),
        ({"target": 95.0}, r"--target is a validation accuracy in \(0, 1\]"),
        ({"eval_every": 0}, "--eval-every must be >= 1"),
        ({"probe_every": 0}, "--probe-every must be >= 1"),
        ({"grad_clip": 0.0}, "--grad-clip must be > 0"),
        ({"diverge_factor": 1.0}, "--diverge-factor must be > 1"),
        ({"measure": ("speed",)}, "--measure takes flops, throughput, memory"),
    ],
)
def test_validation_errors(kw: dict, message: str) -> None:
    base = {"variant": "resnet20", **kw}
    with pytest.raises(ValueError, match=message):
        RunConfig(**base)  # type: ignore[arg-type]


def test_hash_ignores_seed_and_measurement_knobs() -> None:
    a, b = cfg(seed=0), cfg(seed=3, timing_repeats=9, measure=())
    assert a.config_hash() == b.config_hash() and a.run_id != b.run_id
    # the same config in two studies (or presets) is two runs: neither replaces the other's row
    assert len({cfg().run_id, cfg(study="x").run_id, cfg(study="x", preset="quick").run_id}) == 3
    assert a.run_id.endswith("-s0") and b.run_id.endswith("-s3")
    assert cfg(lr=0.05).config_hash() != a.config_hash()
    assert RunConfig(variant="timm:resnet18").run_id.startswith("timm_resnet18-digits-")


def test_roundtrip_through_json_types() -> None:
    c = cfg(betas=(0.9, 0.98), milestones=(0.3,), model_args=(("shortcut", "B"),))
    d = dataclasses.asdict(c)
    d = {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}
    d["model_args"] = [["shortcut", "B"]]
    assert config_from_dict(d) == c
    with pytest.raises(ValueError, match=r"unknown run-config field\(s\) \['colour'\]"):
        config_from_dict({**d, "colour": 1})


def test_step_schedule_he2015() -> None:
    c = cfg(**RECIPES["he2015_cifar"])
    total = c.steps
    assert total == 64000
    assert lr_factor(0, total, c) == 1.0
    assert lr_factor(31999, total, c) == 1.0
    assert lr_factor(32000, total, c) == pytest.approx(0.1)
    assert lr_factor(48000, total, c) == pytest.approx(0.01)


def test_constant_warmup_resnet110() -> None:
    c = cfg(**RECIPES["he2015_cifar_warmup"])
    assert lr_factor(0, c.steps, c) * c.lr == pytest.approx(0.01)
    assert lr_factor(399, c.steps, c) * c.lr == pytest.approx(0.01)
    assert lr_factor(400, c.steps, c) * c.lr == pytest.approx(0.1)


def test_linear_warmup_then_cosine() -> None:
    c = cfg(schedule="cosine", warmup_steps=10)
    assert [lr_factor(i, 110, c) for i in (0, 4, 9)] == [0.1, 0.5, 1.0]
    assert lr_factor(10, 110, c) == 1.0
    assert lr_factor(60, 110, c) == pytest.approx(0.5)
    assert lr_factor(110, 110, c) == pytest.approx(0.0)


def test_inv_sqrt() -> None:
    c = cfg(schedule="inv_sqrt", warmup_steps=4)
    assert lr_factor(3, 100, c) == 1.0
    assert lr_factor(15, 100, c) == pytest.approx(math.sqrt(4 / 16))
    c0 = cfg(schedule="inv_sqrt")
    assert lr_factor(0, 100, c0) == 1.0 and lr_factor(99, 100, c0) == pytest.approx(0.1)


def test_constant() -> None:
    assert lr_factor(50, 100, cfg(schedule="constant")) == 1.0
