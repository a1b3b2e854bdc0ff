"""`bench cost`: parameters and exact FLOPs at a paper's shape, step time and memory beside the baseline."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
import torch
from _nets import write
from torch.utils.flop_counter import FlopCounterMode

from bench.cli import main
from bench.reports.markdown import render_cost, render_profile
from bench.runs import cost, measure, shapes, side_by_side

TINY = shapes.Shape("tiny", "a tiny LM", "preln", ("transformer",),
                  {"depth": 2, "d_model": 32, "n_heads": 2, "d_ff": 64, "vocab_size": 97, "max_len": 16}, (16,), 97)


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> shapes.Shape:
    monkeypatch.setitem(shapes.SHAPES, "tiny", TINY)
    monkeypatch.setattr(side_by_side, "ROUND_S", 0.0)  # one step a turn: the tests count steps
    return TINY


def test_gpt2_small_counts_are_gpt2s() -> None:
    """Pre-LN at gpt2_small is GPT-2 small: 124,439,808 parameters with the embedding tied to the output, and a
    training step of 3x its forward's matmul FLOPs (the token embedding is a gather: no input gradient)."""
    d, ff, vocab, t, layers = 768, 3072, 50257, 1024, 12
    per_layer = (4 * d * d + 4 * d) + (2 * d * ff + ff + d) + 2 * 2 * d  # attention, MLP, two LayerNorms
    c = shapes.count("preln", shapes.SHAPES["gpt2_small"])
    assert c.params == vocab * d + t * d + layers * per_layer + 2 * d == 124_439_808
    # per token: the layers' weight matmuls and the output head; per layer: QK^T and AV over all t x t pairs
    forward = t * (2 * layers * (4 * d * d + 2 * d * ff) + 2 * vocab * d) + layers * 2 * 2 * t * t * d
    assert c.flops.forward == forward and c.flops.train == 3 * forward == 874_944_921_600


def test_the_baseline_is_built_once_per_mode_and_timed_beside_each_design(tiny: shapes.Shape,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Eager and compiled side by side, the compiled steps in the mode asked for; the baseline compiled once, not once
    per design (each compile of a GPT-2-sized model costs a minute on a GPU)."""
    built: list[tuple[str, bool]] = []
    real_trainee = side_by_side.trainee

    def trainee(name: str, *args: object, **kw: object) -> side_by_side.Trainee:
        made = real_trainee(name, *args, **kw)  # type: ignore[arg-type]
        built.append((name, made.compiled))
        return made

    modes: list[str] = []
    monkeypatch.setattr(side_by_side, "trainee", trainee)
    monkeypatch.setattr(cost.execution, "compiled", lambda module, mode: modes.append(mode) or module)
    table = cost.cost_table(["mhc", "hyper_connections"], "tiny", repeats=1, compiled=True,
                            compile_mode="max-autotune-no-cudagraphs")
    assert sorted(built) == sorted([("preln", False), ("preln", True), ("mhc", False), ("mhc", True),
                                    ("hyper_connections", False), ("hyper_connections", True)])
    assert modes == ["max-autotune-no-cudagraphs"] * 3
    assert {"step_rel", "step_rel_compiled", "time_per_flop", "time_per_flop_compiled"} <= set(table.columns)
    assert table.attrs["compile_mode"] == "max-autotune-no-cudagraphs" and table.attrs["optimizer_impl"] == "default"
    eager = cost.cost_table(["mhc"], "tiny", repeats=1)  # on a CPU: eager only, unless asked
    assert "step_rel_compiled" not in eager and eager.attrs["compile_mode"] is None


def test_the_counts_are_flop_counters_on_the_real_model(tiny: shapes.Shape) -> None:
    torch.manual_seed(0)
    model = shapes.build("hyper_connections", tiny)
    x, y = tiny.inputs(1)
    with measure.sdpa_kernel(measure.SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        tiny.loss(model(x), y).backward()
    c = shapes.count("hyper_connections", tiny)
    assert c.flops.train == counter.get_total_flops() and c.params == sum(p.numel() for p in model.parameters())


def test_the_table_is_relative_to_the_baseline_timed_alternately(tiny: shapes.Shape,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[int] = []
    real = side_by_side.measured_step

    def measured_step(step: side_by_side.Trainee, device: torch.device, steps: int) -> tuple[float, float]:
        order.append(sum(p.numel() for p in step.model.parameters()))
        assert steps == 1
        return real(step, device, steps)

    monkeypatch.setattr(side_by_side, "measured_step", measured_step)
    partial: list[cost.pd.DataFrame] = []
    table = cost.cost_table(["mhc"], "tiny", repeats=2, partial=partial.append)
    assert len(partial) == 1 and partial[0].equals(table)  # after each design timed: the table so far
    base, mhc = (shapes.count(n, tiny) for n in ("preln", "mhc"))
    assert list(table["design"]) == ["preln", "mhc"]  # the baseline first, added where not named
    assert order == [base.params, mhc.params] * 2  # alternating, after one untimed step each
    b, m = table.iloc[0], table.iloc[1]
    assert (b.params_rel, b.flops_rel, b.step_rel, b.mem_rel, b.time_per_flop) == (1.0, 1.0, 1.0, 1.0, 1.0)
    assert m.params == mhc.params and m.params_rel == mhc.params / base.params
    assert m.train_flops_per_sample == mhc.flops.train and m.flops_rel == mhc.flops.train / base.flops.train
    assert m.time_per_flop == m.step_rel / m.flops_rel and m.step_ms > 0
    assert table.attrs["shape"] == "tiny" and table.attrs["batch"] == 1


def test_cli_writes_the_table_with_its_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cost.md"
    assert main(["cost", "--designs", "hyper_connections", "--shape", "gpt2_small", "--no-timing",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("Cost at gpt2_small (GPT-2 small (Radford et al. 2019, 124M)")
    assert "| preln | 124,439,808 | 874,944,921,600 | 1 | 1 | 1 |" in printed
    assert out.read_text().startswith("Made by `python -m bench ") and printed in out.read_text()


def test_a_profile_says_which_operators_the_extra_time_is(tiny: shapes.Shape, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    table = cost.profile_pair("mhc", "tiny", steps=2)
    assert list(table.columns) == ["op", "base_ms", "design_ms", "extra_ms", "base_calls", "design_calls"]
    assert (table["extra_ms"] == table["design_ms"] - table["base_ms"]).all()
    assert table["extra_ms"].is_monotonic_decreasing
    a = table.attrs
    assert (a["design"], a["baseline"], a["steps"]) == ("mhc", "preln", 2)
    assert a["design_ms"] == pytest.approx(table["design_ms"].sum()) and a["base_ms"] > 0
    by_op = table.set_index("op")
    # Sinkhorn's iterations (in log space) are mHC's alone
    assert by_op.loc["aten::logsumexp", "base_calls"] == 0 and by_op.loc["aten::logsumexp", "design_calls"] > 0
    text = render_profile(table, top=3)
    assert text.startswith("Where mhc's training step goes at tiny, batch 1 in fp32 on ")
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert lines[0] == "| operator | preln ms | mhc ms | extra ms | share of the extra | preln calls | mhc calls |"
    assert len(lines) == 1 + 3 + 1 and lines[-1].startswith(f"| the other {len(table) - 3} operators |")
    out = tmp_path / "profile.csv"
    assert main(["cost", "--designs", "mhc", "--shape", "tiny", "--profile", "--repeats", "1", "--format", "csv",
                 "--out", str(out)]) == 0
    once = pd.read_csv(out).set_index("op")
    assert (once["design"] == "mhc").all() and capsys.readouterr().out == out.read_text()
    # calls are per step, whatever the number of steps profiled
    assert once.loc["aten::mm", ["base_calls", "design_calls"]].tolist() == \
        by_op.loc["aten::mm", ["base_calls", "design_calls"]].tolist()


def test_bf16_steps_run_the_forward_under_autocast(tiny: shapes.Shape, monkeypatch: pytest.MonkeyPatch) -> None:
    """The papers' precision on accelerators: the forward's matmuls in bf16, the weights and their gradients fp32."""
    seen: list[torch.dtype] = []
    real = side_by_side.Trainee.__post_init__

    def post_init(self: side_by_side.Trainee) -> None:
        real(self)
        linear = next(m for m in self.model.modules() if isinstance(m, torch.nn.Linear))
        linear.register_forward_hook(lambda m, i, out: seen.append(out.dtype))

    monkeypatch.setattr(side_by_side.Trainee, "__post_init__", post_init)
    table = cost.cost_table(["mhc"], "tiny", repeats=1, precision="bf16")
    assert set(seen) == {torch.bfloat16} and len(seen) == 2 * 2  # each model: one untimed step, one timed
    assert table.attrs["precision"] == "bf16" and table.iloc[1].step_ms > 0
    assert "; step time and memory at batch 1 in bf16 on " in render_cost(table)
    assert re.search(r" on \d+ threads?, per step the median of 1 rounds in which each design in turn takes as many "
                     r"steps as fill 0 s, memory: ", render_cost(table))  # the tiny fixture's turns: one step each
    seen.clear()
    cost.cost_table(["mhc"], "tiny", repeats=1)
    assert set(seen) == {torch.float32}
    with pytest.raises(ValueError, match=r"^unknown precision 'fp8'; precisions: fp32, bf16$"):
        cost.cost_table(["mhc"], "tiny", precision="fp8")


def test_unknown_shapes_and_designs_name_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match=r"unknown shape .gpt3.; shapes: gpt2_small, gpt2_medium, resnet50_224, "
                                         r"study_quick, cifar_resnet110, digits$"):
        cost.cost_table(["preln"], "gpt3")
    with pytest.raises(ValueError, match=r"^designs: 'resnet50' does not build at shape 'gpt2_small' \(GPT-2 small "
                                         r".*: variant 'resnet50' takes no keyword argument\(s\) "):
        cost.cost_table(["mhc", "resnet50"], "gpt2_small")
    assert main(["cost", "--designs", "nope", "--shape", "cifar_resnet110", "--no-timing"]) == 2
    assert "error: designs: unknown variant 'nope'; did you mean " in capsys.readouterr().err


def _fixed_steps(monkeypatch: pytest.MonkeyPatch, baseline_params: int) -> None:
    """Every timed step of the baseline takes 10 ms and 100 MiB, every other model's 15 ms and 130 MiB."""
    def measured_step(step: side_by_side.Trainee, device: torch.device, steps: int = 1) -> tuple[float, float]:
        ours = sum(p.numel() for p in step.model.parameters())
        return (10.0, 100.0) if ours == baseline_params else (15.0, 130.0)

    monkeypatch.setattr(side_by_side, "measured_step", measured_step)


def test_overhead_rounds_pair_each_round_with_the_baseline_step_before_it(tiny: shapes.Shape,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    base, mhc = (shapes.count(n, tiny) for n in ("preln", "mhc"))
    _fixed_steps(monkeypatch, base.params)
    table = cost.overhead_rounds(["preln", "mhc"], "tiny", repeats=3)  # the baseline named too: no row of its own
    assert list(table["variant"]) == ["mhc"] * 3 and list(table["repeat"]) == [0, 1, 2]
    assert (table["step_overhead"] == 0.5).all() and list(table["mem_overhead"]) == pytest.approx([0.3] * 3)
    assert (table["params_overhead"] == mhc.params / base.params - 1).all()
    assert (table["flops_overhead"] == mhc.flops.train / base.flops.train - 1).all()
    assert set(table["mode"]) == {"eager"} and set(table["baseline"]) == {"preln"} and set(table["batch"]) == {1}
    with pytest.raises(ValueError, match=r"unknown mode\(s\) 'jit'; modes: eager, compiled$"):
        cost.overhead_rounds(["mhc"], "tiny", modes=["jit"])


def test_a_cost_study_checks_the_papers_overheads(tiny: shapes.Shape, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A study that trains nothing: its cost analysis times each design beside the baseline, and its claims hold the
    rounds' overheads against a paper's figure by the value rule (here every round is the same: a CI of width 0)."""
    _fixed_steps(monkeypatch, shapes.count("preln", tiny).params)
    res = tmp_path / "res"
    study = write(tmp_path / "tinycost.toml", """
        name = "tinycost"
        [analysis]
        kind = "cost"
        designs = ["mhc"]
        shape = "tiny"
        repeats = 2
        [[claims]]
        id = "mhc-time"
        paper = "a paper's figure: +50% step time"
        text = "mHC adds half a step"
        table = "cost"
        metric = "step_overhead"
        kind = "value"
        where = { variant = "mhc", mode = "eager" }
        expect = "similar"
        threshold = 0.5
        tolerance = 0.01
        [[claims]]
        id = "mhc-cheap"
        paper = "a paper's figure: at most +6.7% step time"
        text = "mHC adds at most 6.7%"
        table = "cost"
        metric = "step_overhead"
        kind = "value"
        where = { variant = "mhc" }
        expect = "not_greater"
        threshold = 0.067
    """)
    assert main(["sweep", str(study), "--results-dir", str(res), "--quiet"]) == 0
    summary = pd.read_csv(res / "analysis" / "tinycost" / "cost-summary.csv")
    assert len(summary) == 2 and set(summary["step_overhead"]) == {0.5}
    assert (res / "plots" / "tinycost" / "cost.png").is_file()
    assert main(["report", "--results-dir", str(res), "--study", "tinycost"]) == 0
    report = (res / "REPORT-tinycost.md").read_text()
    assert "## Analysis: cost" in report and "| mhc | tiny | eager | 0.5 ± 0 | 0.3 ± 0 |" in report
    assert "**agrees**" in report.split("mhc-time")[1].split("mhc-cheap")[0]
    assert "**DISAGREES**" in report.split("mhc-cheap")[1]
    capsys.readouterr()
    bad = write(tmp_path / "badcost.toml", '[analysis]\nkind = "cost"\ndesigns = ["resnet50"]\nshape = "tiny"\n')
    assert main(["sweep", str(bad), "--results-dir", str(res), "--dry-run"]) == 2
    assert "study 'badcost': [analysis]: designs: 'resnet50' does not build at shape 'tiny'" in capsys.readouterr().err


def test_every_ratio_divides_by_the_one_baseline_timing(tiny: shapes.Shape, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two designs on a machine whose load drifts (each step 1 ms slower than the one before): one rotation of the
    baseline and both designs, so the baseline has one median time and `step_rel` is `step_ms` over it in every row
    (each design timed beside a run of its own gave a table whose ratios disagreed with its own step times)."""
    clock = iter(range(1, 1000))
    monkeypatch.setattr(side_by_side, "measured_step", lambda step, device, steps: (float(next(clock)), 100.0))
    table = cost.cost_table(["mhc", "hyper_connections"], "tiny", repeats=3).set_index("design")
    assert list(table.index) == ["preln", "mhc", "hyper_connections"]
    # after one untimed step each: rounds (1, 2, 3), (4, 5, 6), (7, 8, 9): medians 4, 5, 6
    assert list(table["step_ms"]) == [4.0, 5.0, 6.0]
    assert list(table["step_rel"]) == [1.0, 5.0 / 4.0, 6.0 / 4.0]
    assert (table["step_rel"] == table["step_ms"] / table.loc["preln", "step_ms"]).all()


def test_designs_that_do_not_fit_in_memory_together_are_timed_in_rotations_beside_the_baseline(
        tiny: shapes.Shape, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the memory holds the baseline and one design at a time, each design is timed in a rotation of its own
    beside the baseline, each ratio divided by the baseline's time in that rotation, which its row shows
    (`base_step_ms`); the table says so. (One rotation of every design kept 41 GPT-2-small models resident, 16 bytes
    a parameter each: 80 GB, and the process was killed for memory.)"""
    assert side_by_side.rotations(["b", "x", "y"], {"b": 1, "x": 1, "y": 1}, None) == [["b", "x", "y"]]  # unknown: one
    assert side_by_side.rotations(["b", "x"], {"b": 10, "x": 100}, 0) == [["b", "x"]]  # too big even alone: tried alone
    ones = {"b": 1, "x": 1, "y": 1, "z": 1}
    assert side_by_side.rotations(["b", "x", "y", "z"], ones, 2 * 16 * 3) == [["b", "x", "y"], ["b", "z"]]
    params = {n: shapes.count(n, tiny).params for n in ("preln", "mhc", "hyper_connections")}
    free = 2 * 16 * (params["preln"] + max(params["mhc"], params["hyper_connections"]))
    monkeypatch.setattr(side_by_side, "free_memory", lambda device: free)
    clock = iter(range(1, 1000))
    monkeypatch.setattr(side_by_side, "measured_step", lambda step, device, steps: (float(next(clock)), 100.0))
    table = cost.cost_table(["mhc", "hyper_connections"], "tiny", repeats=3)
    # rotation 1, (preln, mhc): rounds (1, 2), (3, 4), (5, 6); rotation 2, (preln, hyper_connections): (7, 8) ...
    assert table.attrs["rotations"] == 2
    t = table.set_index("design")
    assert list(t["step_ms"]) == [6.0, 4.0, 10.0]  # the baseline's: the median of its rotations' 3 and 9
    assert list(t["base_step_ms"]) == [6.0, 3.0, 9.0]
    assert list(t["step_rel"]) == [1.0, 4.0 / 3.0, 10.0 / 9.0]
    assert "timed in 2 rotations of the baseline beside the designs that fit in memory with it" in render_cost(table)


@pytest.mark.usefixtures("clean_plugins")
def test_a_plugin_design_of_its_own_family_at_a_depth_and_baseline_of_choice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A CNN plugin registered in a family of its own is costed beside `preact` at the digits shape at depth 56 (the
    shape's baseline, resnet, replaced); the table is relative to preact and every model has depth 56."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "plugins.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(.*?)```", page.split("the pre-activation plugin", 1)[1], re.S)
    assert block
    write(tmp_path / "mixshort.py", block.group(1))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "cost.csv"
    assert main(["cost", "--designs", "preact_mix", "--baseline", "preact", "--shape", "digits", "--depth", "56",
                 "--no-timing", "--plugin", "mixshort.py", "--format", "csv", "--out", str(out)]) == 0
    table = pd.read_csv(out)
    assert list(table["design"]) == ["preact", "preact_mix"]
    assert list(table["params"]) == [852_730, 898_581]  # preact-56 on one-channel digits, and the mix's 1x1s and a
    assert list(table["params_rel"]) == [1.0, 898_581 / 852_730]


@pytest.mark.parametrize(("args", "message"), [
    (["--baseline", "nope"], "error: baseline: unknown variant 'nope'"),
    (["--depth", "0"], "error: depth must be an integer in 1..2000, got 0"),
    (["--depth", "5000"], "error: depth must be an integer in 1..2000, got 5000"),
    (["--depth", "21"], "error: depth: 'resnet' (baseline) does not build at depth 21: CIFAR ResNet depth must be "
                        "6n+2 (basic) with n >= 1, e.g. 8, 14, 20, 32, 38, 56, 110, got 21\n"),
    (["--baseline", "preln"], "error: baseline: 'preln' does not build at shape 'digits' "),
])
def test_bad_baseline_and_depth_exit_2_naming_the_field_and_write_nothing(
        args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cost.md"
    assert main(["cost", "--designs", "preact", "--shape", "digits", *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message), err
    assert not out.exists()


def test_the_shapes_named_after_a_task_are_those_the_timed_note_names() -> None:
    """bench compare's note on a figure timed once names `--shape TASK` where a shape is named after the runs' task;
    it reads the list without torch (bench.analysis.timed.TASK_SHAPES), which must be this one."""
    from bench.analysis.timed import TASK_SHAPES, cost_command
    from bench.runs.tasks import TASKS

    assert set(shapes.SHAPES) & set(TASKS) == TASK_SHAPES
    assert "--shape digits --depth 8`" in cost_command(["a"], "b", [8], ["digits"])
    assert "--shape SHAPE --depth DEPTH` (DEPTH: 6, 24)" in cost_command(["a"], "b", [6, 24], ["tinytext"])


def test_diff_names_the_depth_a_design_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    """`bench diff --depth 21`, at a shape (the check `bench cost` runs) or at each variant's defaults: the field is
    the depth, and the design is named by diff's own argument (a or b), not cost's `designs`."""
    rule = "Pre-activation ResNet depth must be 6n+2 (basic) with n >= 1, e.g. 8, 14, 20, 32, 38, 56, 110, got 21\n"
    for shape in (["--shape", "digits"], []):
        assert main(["diff", "preact", "resnet", *shape, "--depth", "21"]) == 2
        assert capsys.readouterr().err == f"error: depth: 'preact' (a) does not build at depth 21: {rule}"
    assert main(["diff", "postln", "preact", "--depth", "21"]) == 2  # a Transformer builds at any depth
    assert capsys.readouterr().err == f"error: depth: 'preact' (b) does not build at depth 21: {rule}"
    assert main(["diff", "preact", "preact", "--model-arg", "width=0"]) == 2  # not the depth: the argument's role
    assert capsys.readouterr().err.startswith("error: a: 'preact' does not build with model arguments {'width': 0}: ")


def test_diff_checks_the_depth_range_as_cost_does(capsys: pytest.CaptureFixture[str]) -> None:
    """Out of 1..2000, `bench diff --depth` is refused as `bench cost --depth` is, naming the field, before any build
    (the builder's own rule, without the field, was printed for 0)."""
    for depth in ("0", "5000"):
        for shape in (["--shape", "digits"], []):
            assert main(["diff", "preact", "resnet", *shape, "--depth", depth]) == 2
            assert capsys.readouterr().err == f"error: depth must be an integer in 1..2000, got {depth}\n"


def test_a_shape_at_another_depth_says_only_that_depth() -> None:
    sh = shapes.at_depth(shapes.SHAPES["digits"], 8)
    assert sh.what == ("CIFAR nets (He et al. 2015, §4.2) on the bundled digits task's 8x8 one-channel images, 10 "
                       "classes, timed at 128 images, the batch of the degradation study, every model at depth 8")
    for shape in shapes.SHAPES.values():  # every shape's depth-free description leaves its depth out
        assert shape.at_any_depth and not re.search(r"depth|layers|ResNet-\d|n = ", shape.at_any_depth)


def test_each_turn_is_as_many_steps_as_fill_the_round() -> None:
    assert [side_by_side.steps_per_turn(s, 0.25) for s in (1.0, 0.25, 0.037, 0.001, 0.0)] == [1, 1, 7, 50, 50]
    calls: list[int] = []
    ms, _ = side_by_side.measured_step(lambda: calls.append(1), torch.device("cpu"), 5)
    assert len(calls) == 5 and ms >= 0


def test_the_steps_are_timed_with_the_threads_a_run_would_get(tiny: shapes.Shape,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """On a busy machine a step timed with torch's default threads spins where other work holds a core (a pair's
    step_rel read 1.50, 0.74 and 1.37 in a row at a load of 2 on 2 CPUs): it is timed with the free cores'."""
    seen: list[int] = []
    monkeypatch.setattr(side_by_side, "free_cores", lambda: 1)
    monkeypatch.setattr(side_by_side, "measured_step",
                        lambda step, device, steps: (seen.append(torch.get_num_threads()) or 1.0, 1.0))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        table = cost.cost_table(["mhc"], "tiny", repeats=2)
        assert set(seen) == {1} and torch.get_num_threads() == 2 and table.attrs["threads"] == 1
    finally:
        torch.set_num_threads(before)


def test_the_rounds_spread_is_said_and_a_wide_one_warns(tiny: shapes.Shape, monkeypatch: pytest.MonkeyPatch) -> None:
    times = iter([10.0, 13.0, 10.0, 14.0, 10.0, 12.0,  # mhc: ratios 1.3, 1.4, 1.2 (spread 17 %)
                  10.0, 10.0, 10.0, 15.0, 10.0, 12.0])  # the second table: 1.0, 1.5, 1.2 (spread 50 %)
    monkeypatch.setattr(side_by_side, "measured_step", lambda step, device, steps: (next(times), 1.0))
    monkeypatch.setattr(cost, "machine_load", lambda before: {"load_1m": 1.93, "cpus": 2, "other_cpu": 0.45})
    monkeypatch.setattr(side_by_side, "free_cores", lambda: 1)
    calm = cost.timing_notes(cost.cost_table(["mhc"], "tiny", repeats=3))
    assert calm == ["timed with 1 torch thread (those a run started now would get: the cores free now); machine load "
                    "while timing: 1.93 (1-minute average) on 2 CPUs, other processes 45% of all CPU time",
                    "mhc: step_rel 1.3 (rounds 1.2-1.4)"]
    busy = cost.timing_notes(cost.cost_table(["mhc"], "tiny", repeats=3))
    assert busy[1:] == ["mhc: step_rel 1.2 (rounds 1-1.5)",
                        "warning: the rounds' ratios of mhc spread by more than 25%: the machine was too busy to rank "
                        "these designs' step time; time again with more --repeats, or on a quieter machine"]
    assert cost.timing_notes(cost.cost_table(["mhc"], "tiny", measure_time=False)) == []


def test_the_cli_prints_the_timing_notes_and_says_what_the_memory_is(
        tiny: shapes.Shape, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(side_by_side, "measured_step", lambda step, device, steps: (10.0, 1.0))
    assert main(["cost", "--designs", "mhc", "--shape", "tiny", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "memory: the step's own, above what the process held before it" in out
    assert "as a CPU run's peak memory is measured too, above its set-up" in out
    assert out.endswith("\n\nmhc: step_rel 1 (rounds 1-1)\n")


def test_the_batch_help_is_the_shapes_batches() -> None:
    from bench.cli.parser import COST_BATCHES

    assert {name: s.batch for name, s in shapes.SHAPES.items()} == COST_BATCHES
