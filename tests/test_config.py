"""RunConfig validation, identity and the learning-rate schedules."""

from __future__ import annotations

import dataclasses
import math

import pytest

from bench.runs.config import FIELD_DEFAULTS, RECIPES, RunConfig, build, config_from_dict, lr_factor


def cfg(**kw: object) -> RunConfig:
    return RunConfig(variant="resnet20", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"variant": ""}, "--variant is required"),
        ({"epochs": 1.0, "steps": 5}, "give --epochs or --steps, not both"),
        ({"steps": 0}, "--steps must be an integer >= 1, got 0"),
        ({"epochs": 0.0}, "--epochs must be a finite number > 0, got 0.0"),
        ({"epochs": math.inf}, "--epochs must be a finite number > 0, got inf"),
        ({"depth": 0}, r"--depth must be an integer in \[1, 10000\], got 0"),
        ({"batch_size": 0}, "--batch-size must be an integer >= 1, got 0"),
        ({"warmup_steps": -1}, "--warmup-steps must be an integer >= 0, got -1"),
        ({"lr": -0.1}, "--lr must be a finite number > 0, got -0.1"),
        ({"lr": math.inf}, "--lr must be a finite number > 0, got inf"),
        ({"lr_base": 0.0}, "--lr-base must be a finite number > 0, got 0.0"),
        ({"lr_base": 0.1, "lr": 0.05}, r"give --lr \(the peak lr itself, 0.05\) or --lr-base .*, not both"),
        ({"lr_base": 0.1, "lr_base_size": 0}, "--lr-base-size must be an integer >= 1"),
        ({"lr_base": 0.1, "lr_base_scale": "cube"}, "--lr-base-scale must be one of auto, linear, sqrt, got 'cube'"),
        ({"lr_base_size": 512}, "--lr-base-size and --lr-base-scale say how --lr-base scales: give --lr-base too"),
        ({"optimizer": "lion"}, "--optimizer must be one of sgd, adamw, adam"),
        ({"schedule": "poly"}, "--schedule must be one of"),
        ({"precision": "fp8"}, "--precision must be one of"),
        ({"device": "tpu"}, "--device must be one of"),
        ({"warmup_kind": "cubic"}, "--warmup-kind must be one of"),
        ({"milestones": (0.75, 0.5)}, "--milestones must be increasing fractions"),
        ({"milestones": (1.5,)},
         r"--milestones must be a list of values, each a finite number in \(0, 1\), got \[1.5\]"),
        ({"target": 95.0}, r"--target must be a finite number in \(0, 1\], got 95.0"),
        ({"eval_every": 0}, "--eval-every must be an integer >= 1"),
        ({"probe_every": 0}, "--probe-every must be an integer >= 1"),
        ({"grad_clip": 0.0}, "--grad-clip must be a finite number > 0"),
        ({"diverge_factor": 1.0}, "--diverge-factor must be a finite number > 1, got 1.0"),
        ({"measure": ("speed",)},
         r"--measure must be a list of values, each one of flops, throughput, memory, got \['speed'\]"),
        ({"warmup_epochs": 0.0}, "--warmup-epochs must be a finite number > 0, got 0.0"),
        ({"warmup_epochs": 5.0, "warmup_steps": 10}, "give --warmup-steps or --warmup-epochs, not both"),
        ({"compile_mode": "fastest"}, "--compile-mode must be one of default, reduce-overhead"),
        ({"compile_mode": "reduce-overhead"}, "--compile-mode reduce-overhead is a mode of --compile: give --compile"),
        ({"warmup_until_error": 0.0, "warmup_kind": "constant", "warmup_steps": 9},
         r"--warmup-until-error must be a finite number in \(0, 1\], got 0.0"),
        ({"warmup_until_error": 1.5, "warmup_kind": "constant", "warmup_steps": 9}, r"in \(0, 1\], got 1.5"),
        ({"warmup_until_error": math.nan, "warmup_kind": "constant", "warmup_steps": 9}, r"in \(0, 1\], got nan"),
        ({"warmup_until_error": 0.8, "warmup_steps": 9}, r"needs --warmup-kind constant .*\(got 'linear', 9\)"),
        ({"warmup_until_error": 0.8, "warmup_kind": "constant"},
         r"--warmup-steps >= 1 as its cap \(got 'constant', 0\)"),
    ],
)
def test_validation_errors(kw: dict, message: str) -> None:
    base = {"variant": "resnet20", **kw}
    with pytest.raises(ValueError, match=message):
        RunConfig(**base)  # type: ignore[arg-type]


def test_hash_ignores_seed_and_measurement_knobs() -> None:
    a, b = cfg(seed=0), cfg(seed=3, timing_repeats=9, measure=())
    assert a.config_hash() == b.config_hash() and a.run_id != b.run_id
    # the same config in two studies is two runs (neither replaces the other's row); in two presets, one run
    assert len({cfg().run_id, cfg(study="x").run_id}) == 2
    assert cfg(study="x", preset="quick").run_id == cfg(study="x", preset="since_mhc").run_id == cfg(study="x").run_id
    assert a.run_id.endswith("-s0") and b.run_id.endswith("-s3")
    assert cfg(lr=0.05).config_hash() != a.config_hash()
    assert RunConfig(variant="timm:resnet18").run_id.startswith("timm_resnet18-digits-")


def test_new_fields_at_their_default_keep_existing_run_ids() -> None:
    """Hashes recorded before warmup_until_error existed stay valid, so a rerun still resumes them; those runs were
    drawn from the global stream (init_stream's value before the field existed), and a config drawn by common random
    numbers, the default now, is another run."""
    assert cfg(init_stream="global").config_hash() == "6cf532bc"
    assert RunConfig(variant="preln", task="copy", lr=0.01, init_stream="global").config_hash() == "3e03e86d"
    assert cfg().config_hash() != "6cf532bc"
    warm = dict(warmup_kind="constant", warmup_steps=5)
    assert cfg(**warm).config_hash() != cfg(**warm, warmup_until_error=0.8).config_hash()


def test_roundtrip_through_json_types() -> None:
    c = cfg(betas=(0.9, 0.98), milestones=(0.3,), model_args=(("shortcut", "B"),))
    d = dataclasses.asdict(c)
    d = {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}
    d["model_args"] = [["shortcut", "B"]]
    assert config_from_dict(d) == c
    with pytest.raises(ValueError, match=r"unknown run-config field\(s\) \['colour'\]"):
        config_from_dict({**d, "colour": 1})


def test_lr_base_scales_with_the_global_batch_as_timm_does() -> None:
    """timm's train.py: lr = lr_base · global_batch / lr_base_size for SGD, its square root for the Adam family."""
    assert cfg(lr=0.05).peak_lr == 0.05  # --lr is the peak itself
    assert cfg(lr_base=0.1, lr_base_size=128, batch_size=4).peak_lr == pytest.approx(0.1 * 4 / 128)
    assert cfg(lr_base=0.1, lr_base_size=128, batch_size=4, grad_accum=8).peak_lr == pytest.approx(0.1 * 32 / 128)
    assert cfg(lr_base=1e-3, optimizer="adamw", batch_size=64).peak_lr == pytest.approx(1e-3 * math.sqrt(64 / 256))
    assert cfg(lr_base=1e-3, optimizer="adamw", lr_base_scale="linear", batch_size=64).peak_lr == pytest.approx(2.5e-4)
    assert cfg(lr_base=0.1, lr_base_scale="sqrt", batch_size=1024).peak_lr == pytest.approx(0.2)
    scaled = cfg(lr_base=0.1, batch_size=4)
    assert scaled.config_hash() != cfg(batch_size=4).config_hash()
    assert RunConfig(**{**scaled.to_dict(), "seed": 1}).peak_lr == scaled.peak_lr  # to_dict round-trips


def test_lr_base_replaces_a_recipes_lr_and_never_a_given_lr() -> None:
    """A recipe's lr gives way to --lr-base (as its steps to --epochs): the peak lr is scaled from --lr-base, the run
    hashes as without the recipe's lr; an --lr given beside --lr-base is refused, its default value included."""
    scaled = build({"variant": "preln", "recipe": "xiong2020", "lr_base": 1e-3, "batch_size": 64})
    assert scaled.lr == FIELD_DEFAULTS["lr"] and scaled.peak_lr == pytest.approx(1e-3 * math.sqrt(64 / 256))
    assert (scaled.optimizer, scaled.schedule, scaled.warmup_steps) == ("adam", "inv_sqrt", 4000)  # the recipe's rest
    for lr in (0.1, 5e-4):  # the field's default and the recipe's value
        with pytest.raises(ValueError, match=rf"give --lr \(the peak lr itself, {lr}\) or --lr-base .*, not both"):
            build({"variant": "preln", "recipe": "xiong2020", "lr": lr, "lr_base": 1e-3})


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


def test_he2015_resnet110_warmup_until_error_recipe() -> None:
    c = cfg(**RECIPES["he2015_cifar110"])
    assert (c.warmup_until_error, c.warmup_steps, c.warmup_kind, c.lr * c.warmup_factor) == (0.8, 400, "constant",
                                                                                             pytest.approx(0.01))
    rest = {k: v for k, v in RECIPES["he2015_cifar110"].items() if k != "warmup_until_error"}
    assert rest == RECIPES["he2015_cifar_warmup"]  # §4.2's rule, otherwise the same recipe


def test_warmup_end_overrides_warmup_steps() -> None:
    """A warm-up ended early by its error threshold: the schedule runs as if warmup_steps were that step."""
    c = cfg(schedule="cosine", warmup_kind="constant", warmup_steps=400, warmup_factor=0.1, warmup_until_error=0.8)
    assert lr_factor(2, 103, c, warmup_end=3) == 0.1
    assert lr_factor(3, 103, c, warmup_end=3) == 1.0
    assert lr_factor(53, 103, c, warmup_end=3) == pytest.approx(0.5)  # half way through the 100 steps after it
    assert lr_factor(3, 103, c) == 0.1 and lr_factor(399, 1000, c) == 0.1  # no override: the cap
    assert lr_factor(0, 10, c, warmup_end=0) == 1.0  # ended before the first step: no warm-up at all
    inv = cfg(schedule="inv_sqrt", warmup_kind="constant", warmup_steps=400)
    assert lr_factor(15, 100, inv, warmup_end=4) == pytest.approx(math.sqrt(4 / 16))


def test_linear_warmup_then_cosine() -> None:
    c = cfg(schedule="cosine", warmup_steps=10)
    assert [lr_factor(i, 110, c) for i in (0, 4, 9)] == [0.1, 0.5, 1.0]
    assert lr_factor(10, 110, c) == 1.0
    assert lr_factor(60, 110, c) == pytest.approx(0.5)
    assert lr_factor(110, 110, c) == pytest.approx(0.0)
    assert lr_factor(130, 110, c) == pytest.approx(0.0)  # past the end it stays at 0, never rises again


def test_inv_sqrt() -> None:
    c = cfg(schedule="inv_sqrt", warmup_steps=4)
    assert lr_factor(3, 100, c) == 1.0
    assert lr_factor(15, 100, c) == pytest.approx(math.sqrt(4 / 16))
    c0 = cfg(schedule="inv_sqrt")
    assert lr_factor(0, 100, c0) == 1.0 and lr_factor(99, 100, c0) == pytest.approx(0.1)


def test_constant() -> None:
    assert lr_factor(50, 100, cfg(schedule="constant")) == 1.0


def test_an_imagefolder_run_trains_with_he2015s_imagenet_recipe_unless_told_otherwise() -> None:
    """ResNet-50 at batch 64 on an image tree got lr 0.1, four times He's rate for that batch, and diverged."""
    first = build({"variant": "resnet50", "task": "imagefolder", "batch_size": 64})
    assert first.recipe == "he2015_imagenet" and first.optimizer == "sgd" and first.momentum == 0.9
    assert first.peak_lr == pytest.approx(0.1 * 64 / 256) and first.warmup_epochs == 5.0
    assert (first.schedule, first.weight_decay) == ("step", 1e-4)
    # each option given replaces the recipe's alternative to it
    own = build({"variant": "resnet50", "task": "imagefolder", "lr": 0.05, "warmup_steps": 0})
    assert (own.peak_lr, own.lr_base, own.warmup_epochs, own.recipe) == (0.05, None, None, "he2015_imagenet")
    assert build({"variant": "resnet50", "task": "imagefolder", "epochs": 2.0}).epochs == 2.0
    assert build({"variant": "preln", "task": "imagefolder", "recipe": "xiong2020"}).optimizer == "adam"
    assert build({"variant": "resnet20"}).recipe is None  # the other tasks keep the harness's defaults
    assert build({"variant": "preln", "recipe": "xiong2020", "lr_base": 1e-3}).lr_base == 1e-3  # lr_base replaces lr


def test_the_optimiser_gets_the_scaled_lr() -> None:
    from torch import nn

    from bench.runs.train import make_optimizer

    opt = make_optimizer(cfg(lr_base=0.1, lr_base_size=128, batch_size=4), nn.Linear(2, 2))
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * 4 / 128)
