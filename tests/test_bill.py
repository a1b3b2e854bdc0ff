"""The dry run's bill (bench.sweeps.bill): what a study costs, measured per model configuration, nothing recorded."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
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
    assert bill._steps(RunConfig(variant="a", epochs=2, batch_size=100), 1000) == 20
    assert bill._steps(RunConfig(variant="a", epochs=2, batch_size=50, grad_accum=2), 1000) == 20  # global batches


@pytest.mark.slow  # full-size stand-ins timed: about 30 s
def test_a_task_without_its_data_is_measured_on_a_stand_in_of_the_same_shapes(tmp_path: Path) -> None:
    cfg = RunConfig(variant="resnet", depth=8, task="cifar10", data_dir=str(tmp_path / "none"), epochs=1,
                    batch_size=16, measure=())
    stand, num_train, name = bill._stand_in(cfg)
    assert name == "synthetic" and num_train == 50_000
    assert (stand.task, stand.image_size, stand.num_classes) == ("synthetic", 32, 10)
    costs = bill.measure_costs(cfg, "k", threads=1)
    assert costs.stand_in == "synthetic" and costs.num_train == 50_000 and costs.step_s > 0 and costs.eval_s > 0
    assert bill._steps(cfg, costs.num_train) == 3125  # an epoch of CIFAR-10 at batch 16


@pytest.mark.slow  # a ResNet-110 timed on the CPU: about a minute
def test_a_full_scale_preset_dry_runs_on_the_cpu(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["reproduce", "degradation", "--preset", "cifar10_110", "--dry-run", "--set",
                 f"data_dir={tmp_path / 'no-cifar'}", "--results-dir", str(tmp_path / "res")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "resnet-d110 cifar10 (as synthetic)" in out and "total: 5 runs, 320,000 steps" in out
    assert not (tmp_path / "res").exists()
