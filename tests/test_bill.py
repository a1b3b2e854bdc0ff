"""The dry run's bill (bench.sweeps.bill): what a study costs, measured per model configuration, nothing recorded."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch
from _nets import write

from bench.cli import main
from bench.runs.config import RunConfig
from bench.sweeps import bill

STUDY = '''
name = "tiny"
vary = ["combinator", "placement"]
[base]
task = "digits"
steps = 12
batch_size = 32
eval_every = 4
probe_every = 6
timing_warmup = 1
timing_repeats = 2
timing_steps = 2
[grid]
variant = ["plain", "resnet"]
depth = [8]
seed = [0, 1, 2]
'''


@pytest.mark.slow  # every model of a study built and timed: about a minute
def test_a_dry_run_prints_the_bill_and_records_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = write(tmp_path / "tiny.toml", STUDY)
    code = main(["sweep", str(study), "--dry-run", "--jobs", "2", "--results-dir", str(tmp_path / "res")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert not (tmp_path / "res").exists()
    assert out.count("  measuring ") == 2  # one per model configuration, not per run
    lines = {line.split()[0]: line.split() for line in out.splitlines() if re.match(r"(plain|resnet)-d8 digits", line)}
    assert lines["plain-d8"][2:4] == ["3", "36"] and lines["resnet-d8"][2:4] == ["3", "36"]  # runs, steps
    total = re.search(r"total: 6 runs, 72 steps, (\S+) training FLOPs; on this device \(.+\): (.+) with --jobs 2 "
                      r"\((.+) one at a time\)", out)
    assert total is not None and float(total.group(1)) > 0
    assert "the training FLOPs alone would take: H200 " in out and "read these as lower bounds" in out


def test_the_runs_are_scheduled_longest_first_on_the_slots() -> None:
    assert bill.schedule([5, 3, 3, 2, 1], 2) == 7  # 5+2 | 3+3+1
    assert bill.schedule([4, 4, 4], 1) == 12 and bill.schedule([1], 8) == 1


def test_each_run_pays_setup_steps_evaluations_probes_and_the_first_of_a_configuration_its_measurement() -> None:
    costs = bill.Costs("k", setup_s=2.0, measure_s=10.0, step_s=0.5, eval_s=3.0, probe_s=1.0, flops_per_step=1e9,
                       peak_mb=10.0, mfu=0.2, num_train=1000, stand_in=None)
    cfg = RunConfig(variant="resnet", steps=100, eval_every=25, probe_every=50)
    first = bill.RunBill(cfg, costs, steps=100, evals=4, probe_calls=3, measures=True)
    other = bill.RunBill(cfg, costs, steps=100, evals=4, probe_calls=3, measures=False)
    assert first.seconds == pytest.approx(2 + 10 + 100 * 0.5 + 4 * 3 + 3 * 1) and other.seconds == first.seconds - 10
    assert first.train_flops == 1e11
    assert bill._steps(RunConfig(variant="a", epochs=2, batch_size=100), costs) == 20
    assert bill._steps(RunConfig(variant="a", epochs=2, batch_size=50, grad_accum=2), costs) == 20  # global batches
    assert bill._steps(RunConfig(variant="a", batch_size=100), costs) == 300  # 30 epochs by default
    sequences = dataclasses.replace(costs, default_steps=300)
    assert bill._steps(RunConfig(variant="a", batch_size=100), sequences) == 300  # the task's default run length
    assert bill._steps(RunConfig(variant="a", epochs=1, batch_size=100), sequences) == 10
    unknown = dataclasses.replace(costs, num_train=None)
    with pytest.raises(ValueError, match="its synthetic data is not on this machine, so its epochs cannot be counted"):
        bill._steps(RunConfig(variant="a", task="synthetic", epochs=1), unknown)


def test_the_accelerator_line_is_left_out_when_the_measured_peak_is_not_the_real_one() -> None:
    costs = bill.Costs("k", setup_s=1.0, measure_s=0.0, step_s=0.5, eval_s=0.0, probe_s=0.0, flops_per_step=1e9,
                       peak_mb=None, mfu=0.25, num_train=1000, stand_in=None)
    cfg = RunConfig(variant="resnet", steps=10)
    options = bill.SweepOptions()
    lines = bill.render([bill.RunBill(cfg, costs, 10, 1, 0, False)], options, "cpu", {"H100": 1e15})
    assert lines[-1].startswith("at the model FLOP utilisation measured here (25.0% of this device's peak)")
    assert "would take: H100 0 s (one device" in lines[-1]  # 1e10 FLOPs / (0.25 x 1e15 FLOP/s)
    over = dataclasses.replace(costs, mfu=6.25)  # a CPU's emulated bf16 matmul taken for its peak
    lines = bill.render([bill.RunBill(cfg, over, 10, 1, 0, False)], options, "cpu", {"H100": 1e15})
    assert lines[-1] == ("no accelerator figures: the model FLOP utilisation measured here (625%) exceeds this "
                         "device's measured peak, so that peak is not its real one")


def test_a_cpu_peak_in_bf16_is_never_below_fp32s() -> None:
    """A CPU without bf16 units emulates bf16 matmuls; a run under bf16 autocast is timed against fp32's rate too."""
    from bench.runs.measure import measured_matmul_peak

    _, source = measured_matmul_peak(torch.device("cpu"), "bf16", n=64, repeats=1)
    assert source.endswith("(the faster of bfloat16 and float32)")
    _, source = measured_matmul_peak(torch.device("cpu"), "fp16", n=64, repeats=1)
    assert "float32 matmul" in source and "faster" not in source


@pytest.mark.slow  # full-size stand-ins timed: about 30 s
def test_a_task_without_its_data_is_measured_on_a_stand_in_of_the_same_shapes(tmp_path: Path) -> None:
    cfg = RunConfig(variant="resnet", depth=8, task="cifar10", data_dir=str(tmp_path / "none"), epochs=1,
                    batch_size=16, measure=())
    stand, num_train, name = bill._stand_in(cfg)
    assert name == "synthetic" and num_train == 50_000
    assert (stand.task, stand.image_size, stand.num_classes) == ("synthetic", 32, 10)
    costs = bill.measure_costs(cfg, "k", threads=1)
    assert costs.stand_in == "synthetic" and costs.num_train == 50_000 and costs.step_s > 0 and costs.eval_s > 0
    assert bill._steps(cfg, costs) == 3125  # an epoch of CIFAR-10 at batch 16


@pytest.mark.slow  # a ResNet-110 timed on the CPU: about a minute
def test_a_full_scale_preset_dry_runs_on_the_cpu(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["reproduce", "degradation", "--preset", "cifar10_110", "--dry-run", "--set",
                 f"data_dir={tmp_path / 'no-cifar'}", "--results-dir", str(tmp_path / "res")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "resnet-d110 cifar10 (as synthetic)" in out and "total: 5 runs, 320,000 steps" in out
    assert not (tmp_path / "res").exists()


def test_a_tokens_run_without_its_shards_is_measured_on_generated_shards_of_its_vocabulary(tmp_path: Path) -> None:
    cfg = RunConfig(variant="preln", depth=2, task="tokens", data_path=str(tmp_path / "none"), vocab_size=1000,
                    seq_len=16, batch_size=4, steps=50, eval_tokens=320,
                    model_args={"d_model": 32, "n_heads": 2, "d_ff": 64}, measure=())
    stand, num_train, name = bill._stand_in(cfg)
    assert name == "generated shards" and num_train is None and stand.task == "tokens" and stand.vocab_size == 1000
    costs = bill.measure_costs(cfg, "k", threads=1)
    assert costs.stand_in == "generated shards" and costs.num_train is None and costs.step_s > 0
    assert bill._steps(cfg, costs) == 50
    assert bill.STAND_INS["tokens"](cfg)[2] == 20  # one evaluation reads 320 tokens: 20 windows of 16


def test_a_step_too_heavy_to_time_twenty_times_is_the_median_of_three(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    """Above the budget even at 2 samples (GPT-2 small at 1,024 tokens on a CPU), a step is timed 3 times after one
    untimed, and an evaluation on one batch per split; the bill scales both to the run's batch and splits."""
    cfg = RunConfig(variant="preln", depth=2, task="tokens", data_path=str(tmp_path / "none"), vocab_size=1000,
                    seq_len=16, batch_size=8, steps=50, eval_tokens=320,
                    model_args={"d_model": 32, "n_heads": 2, "d_ff": 64}, measure=())
    assert bill.measure_costs(cfg, "k", threads=1).timed_steps == 20
    monkeypatch.setattr(bill, "STEP_BUDGET", 1.0)
    seen: list[tuple[int, int, int, int]] = []
    real_setup, real_eval = bill.setup, bill.eval_pass
    monkeypatch.setattr(bill, "setup", lambda c: seen.append(
        (c.batch_size, c.timing_warmup, c.timing_repeats, c.timing_steps)) or real_setup(c))
    evaluated: list[int] = []
    monkeypatch.setattr(bill, "eval_pass", lambda model, task, batches: evaluated.append(len(batches))
                        or real_eval(model, task, batches))
    costs = bill.measure_costs(cfg, "k", threads=1)
    assert costs.timed_steps == 3 and costs.step_s > 0 and costs.eval_s > 0
    assert seen[-1] == (2, 1, 3, 1)  # halved to 2 samples, then 1 untimed + the median of 3 single steps
    assert evaluated == [1, 1]  # one batch of the validation split, one of the training-error subset
    assert costs.peak_mb is None  # not timed whole: no peak-memory figure
