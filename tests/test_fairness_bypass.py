"""Designs the study guard once let through: a field zipped with the variant, a head count or dropout a builder fixes
inside, and timm models (bench.sweeps.fairness, bench.sweeps.settings)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from timm.layers import DropPath
from torch import nn

import variants
from bench.cli import main
from bench.runs.config import RunConfig
from bench.sweeps import fairness, settings
from bench.sweeps.fairness import check_grid, diff_models, format_diff
from bench.sweeps.study import load_study
from variants.attention import CausalSelfAttention

SMALL = {"d_model": 32, "n_heads": 2, "d_ff": 64}


def _runs(rows: list[tuple[str, dict]], **kw: object) -> list[RunConfig]:
    """Two seeds of each (variant, model_args) row, on the text task at depth 2."""
    return [RunConfig(variant=v, model_args=a, seed=s, study="t", task="text", depth=2, **kw)  # type: ignore[arg-type]
            for v, a in rows for s in (0, 1)]


# -- a field zipped with the variant ---------------------------------------------------------------------------------

ZIPPED = """
name = "zipped"
vary = ["placement"]
zip = ["variant", "model_args"]
[base]
task = "text"
depth = 2
steps = 1
[grid]
variant = ["postln", "preln"]
model_args = [{ d_model = 32, n_heads = 2, d_ff = 64 }, { d_model = 64, n_heads = 2, d_ff = 256 }]
seed = [0, 1]
"""


def test_sweep_refuses_a_width_zipped_with_the_variant_before_any_run(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Each variant at its own width shares no cell of the grid with the other: the guard compared nothing, and the
    four runs went ahead."""
    study = tmp_path / "zipped.toml"
    study.write_text(ZIPPED)
    results = tmp_path / "results"
    assert main(["sweep", str(study), "--results-dir", str(results)]) == 2
    assert capsys.readouterr().err == (
        "error: study 'zipped' zips 'model_args' with the variant (`zip`), so postln and preln run different values "
        "of it and never share a cell of the grid: model_args d_ff: 64 vs 256; model_args d_model: 32 vs 64; "
        "comparing them would compare those too: take 'model_args' out of `zip` (every variant then runs every "
        "value), or declare 'd_ff', 'd_model' in the study's `vary`\n")
    assert not results.exists()  # nothing written


def test_zipped_fields_declared_are_accepted_and_the_rest_still_compared(tmp_path: Path) -> None:
    """Declared, the widths pass (and the parameter counts they change); the runs of unlike cells are then compared
    on everything else: deepnorm's combinator is still refused."""
    study = tmp_path / "zipped.toml"
    study.write_text(ZIPPED.replace('vary = ["placement"]', 'vary = ["placement", "d_model", "d_ff"]'))
    with pytest.raises(ValueError, match=r"also differ in 'params': 33472 vs 132864"):
        load_study(study).configs()
    study.write_text(ZIPPED.replace('vary = ["placement"]', 'vary = ["placement", "d_model", "d_ff", "params"]'))
    assert len(load_study(study).configs()) == 4
    wide = {"d_model": 64, "n_heads": 2, "d_ff": 64}
    with pytest.raises(ValueError, match=r"^study 't' varies \['placement', 'd_model'\], but postln and deepnorm "
                                         r"\(depth 2\) also differ in 'combinator': 'add' vs 'scaled'; declare it"):
        check_grid(_runs([("postln", SMALL), ("deepnorm", wide)]), ["placement", "d_model"], study="t",
                   zipped=["model_args"])


def test_a_training_field_zipped_with_the_variant_is_refused_unless_declared() -> None:
    runs = _runs([("postln", {})], lr=1e-3) + _runs([("preln", {})], lr=1e-2)
    with pytest.raises(ValueError, match=r"^study 't' zips 'lr' with the variant \(`zip`\), so postln and preln run "
                                         r"different values of it and never share a cell of the grid: lr: 0.001 vs "
                                         r"0.01; .* or declare 'lr' in the study's `vary`$"):
        check_grid(runs, ["placement"], study="t", zipped=["lr"])
    check_grid(runs, ["placement", "lr"], study="t", zipped=["lr"])  # declared: a zipped field is a known name


def test_a_zip_that_gives_every_variant_every_value_is_a_crossed_grid() -> None:
    """variant = [postln, preln, postln, preln] zipped with two widths twice: each width holds both variants."""
    wide = {"d_model": 64, "n_heads": 2, "d_ff": 64}
    runs = _runs([("postln", SMALL), ("preln", SMALL), ("postln", wide), ("preln", wide)])
    check_grid(runs, ["placement"], study="t", zipped=["model_args"])
    with pytest.raises(ValueError, match=r"model_args d_model: \[32, 64\] vs 64;"):  # one width only preln runs
        check_grid(runs[2:], ["placement"], study="t", zipped=["model_args"])


def test_zipped_values_in_other_combinations_are_refused() -> None:
    """Both run both widths and both learning rates, never the same pairs of them: no cell holds both."""
    wide = {"d_model": 64, "n_heads": 2, "d_ff": 64}
    runs = (_runs([("postln", SMALL)], lr=1e-3) + _runs([("postln", wide)], lr=1e-2)
            + _runs([("preln", SMALL)], lr=1e-2) + _runs([("preln", wide)], lr=1e-3))
    with pytest.raises(ValueError) as refused:
        check_grid(runs, ["placement", "d_model", "lr"], study="t", zipped=["model_args", "lr"])
    assert str(refused.value) == (
        "study 't' zips 'model_args', 'lr' with the variant (`zip`), so postln and preln run their values in other "
        "combinations and never share a cell of the grid; take them out of `zip` (every variant then runs every "
        "value)")


# -- a head count or dropout fixed inside a builder ------------------------------------------------------------------


def test_settings_are_read_off_the_modules() -> None:
    model = nn.Sequential(nn.MultiheadAttention(16, 4, dropout=0.1), nn.Dropout(0.2), nn.Dropout(0.0),
                          DropPath(0.05), CausalSelfAttention(16, 8, 0.3, True))
    assert settings.read(model) == {"n_heads": (4, 8), "dropout": (0.1, 0.2, 0.3), "drop_path_rate": 0.05}
    # no attention: no head count; a dropout at 0 is the identity, as none
    assert settings.read(nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.0))) == {"dropout": 0.0, "drop_path_rate": 0.0}


@pytest.fixture
def fixed_inside() -> Iterator[None]:
    """Pre-LN behind builders that take no n_heads (8 inside) or no dropout (0.3 inside)."""
    @variants.register("t_preln_h8", family="transformer", paper="a plugin")
    def h8(*, depth: int = 2, vocab_size: int = 256, d_model: int = 64, d_ff: int = 256,
           init: str = "xavier") -> nn.Module:
        return variants.create("preln", depth=depth, vocab_size=vocab_size, d_model=d_model, d_ff=d_ff, n_heads=8,
                               init=init)

    @variants.register("t_preln_drop", family="transformer", paper="a plugin")
    def drop(*, depth: int = 2, vocab_size: int = 256, d_model: int = 64, n_heads: int = 4,
             d_ff: int = 256, init: str = "xavier") -> nn.Module:
        return variants.create("preln", depth=depth, vocab_size=vocab_size, d_model=d_model, n_heads=n_heads,
                               d_ff=d_ff, dropout=0.3, init=init)

    yield
    variants.unregister("t_preln_h8")
    variants.unregister("t_preln_drop")


@pytest.mark.usefixtures("fixed_inside")
@pytest.mark.parametrize(("variant", "axis", "a", "b"), [("t_preln_h8", "n_heads", 4, 8),
                                                         ("t_preln_drop", "dropout", 0.0, 0.3)])
def test_diff_and_guard_see_what_a_builder_fixes_inside(variant: str, axis: str, a: object, b: object) -> None:
    """`bench diff` said "do not differ"; the guard accepted the pair in a study varying nothing."""
    rows = diff_models("preln", variant, depth=2, model_args={"d_model": 64, "d_ff": 256})
    assert [(r.key, r.a, r.b, r.axis) for r in rows if r.differs] == [(f"{axis} (built)", a, b, axis)]
    assert format_diff("preln", variant, rows).splitlines()[-1] == (
        f"preln and {variant} differ in: {axis} (the guard's axes); a study comparing them declares {axis} in `vary`")
    runs = _runs([("preln", {"d_model": 64, "d_ff": 256}), (variant, {"d_model": 64, "d_ff": 256})])
    with pytest.raises(ValueError, match=rf"^study 't' varies nothing, but preln and {variant} \(depth 2\) also "
                                         rf"differ in '{axis}': {a!r} vs {b!r} \(read off the built modules, whatever "
                                         r"their builders take\); declare it"):
        check_grid(runs, [], study="t")
    check_grid(runs, [axis], study="t")


def test_a_built_row_is_checked_under_its_axis() -> None:
    row = fairness.DiffRow("n_heads", "n_heads (built)", 4, 8, True)
    assert fairness.guard_axis(row) == "n_heads"


# -- timm models -----------------------------------------------------------------------------------------------------


def test_timm_models_are_counted_at_the_task_shape() -> None:
    cfg = RunConfig(variant="timm:resnet10t", study="t")  # digits: one channel, 10 classes
    assert fairness.run_model_args(cfg) == {"num_classes": 10, "in_chans": 1}


def test_guard_compares_a_timm_model_by_its_parameter_count() -> None:
    """resnet20 against a timm ResNet in a study of the init: skipped before, now refused on the count, with what the
    guard compares of a timm model; declared, the pair passes (its axes unknown, not "-")."""
    runs = [RunConfig(variant=v, seed=0, study="t") for v in ("resnet20", "timm:resnet10t")]
    with pytest.raises(ValueError) as refused:
        check_grid(runs, ["init"], study="t")
    assert str(refused.value) == (
        "study 't' varies ['init'], but resnet20 and timm:resnet10t (depth 20) also differ in 'params': 269434 vs "
        "4927186 (parameter counts differ by more than the tolerance: 0.01); timm:resnet10t is a timm model, which "
        "declares no axes: the guard compares only what it builds (parameter count, head count, dropout and "
        "drop-path rates; the structure where `vary` names values only); declare it in the study's `vary` (or "
        "`param_tolerance`) or make the models match")
    check_grid(runs, ["init", "params"], study="t")


def test_diff_builds_a_timm_model_at_a_shape_without_the_shapes_depth(capsys: pytest.CaptureFixture[str]) -> None:
    """A timm model's depth is its name: `bench diff resnet20 timm:resnet18 --shape digits` once refused it."""
    assert main(["diff", "resnet20", "timm:resnet18", "--shape", "digits"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("resnet20 and timm:resnet18 differ in: params, ")
