"""The dry run's bill (bench.sweeps.bill): what a study costs, measured per model configuration, nothing recorded."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from _nets import write

import variants
from bench.cli import main
from bench.runs.config import RunConfig
from bench.sweeps import bill, config_costs

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


@pytest.mark.slow  # every model of a study built, counted and timed once: some 10 s
def test_a_dry_run_prints_the_bill_and_records_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = write(tmp_path / "tiny.toml", STUDY)
    code = main(["sweep", str(study), "--dry-run", "--jobs", "2", "--results-dir", str(tmp_path / "res")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert not (tmp_path / "res").exists()
    assert out.count("  timing plain-d8-") == 1 and out.count("  timing resnet-d8-") == 1  # per configuration
    said = re.search(r"  timing (\d+) steps of 2 model configurations \(1 thread\): their FLOPs alone take (\d+) ms "
                     "at ", out)
    assert said is not None and said.start() < out.index("  timing plain-d8-")  # the bill's own time, said first
    assert int(said.group(1)) == 2 * (1 + config_costs.MAX_REPEATS) and int(said.group(2)) > 0  # never "at least 0 s"
    assert re.search(r"billed in \d+ s", out)
    lines = {line.split()[0]: line.split() for line in out.splitlines() if re.match(r"(plain|resnet)-d8 digits", line)}
    assert lines["plain-d8"][2:4] == ["3", "36"] and lines["resnet-d8"][2:4] == ["3", "36"]  # runs, steps
    total = re.search(r"total: 6 runs, 72 steps, (\S+) training FLOPs; on this device \(.+\), idle: (.+) with "
                      r"--jobs 2 \((.+) one at a time\)", out)
    assert total is not None and float(total.group(1)) > 0
    assert re.search(r"with --jobs 2 \(.+ one at a time\), the study's checks \(\d+ m?s\) included", out)
    assert re.search(r"machine load while billing: 1-min load average \d+\.\d on \d+ CPUs, other processes \d+% "
                     r"of the CPU time, the bill \d+\.\d\dx longer on the wall clock than in CPU time over \d+ s", out)
    assert "the training FLOPs alone would take: H200 " in out and "read these as lower bounds" in out


def test_the_runs_are_scheduled_longest_first_on_the_slots() -> None:
    assert bill.schedule([5, 3, 3, 2, 1], 2) == 7  # 5+2 | 3+3+1
    assert bill.schedule([4, 4, 4], 1) == 12 and bill.schedule([1], 8) == 1


def test_each_run_pays_setup_steps_evaluations_probes_and_the_first_of_a_configuration_its_measurement() -> None:
    costs = config_costs.Costs("k", setup_s=2.0, measure_s=10.0, step_s=0.5, eval_s=3.0, probe_s=1.0,
                               flops_per_step=1e9, peak_mb=10.0, mfu=0.2, num_train=1000, stand_in=None)
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


def test_a_run_pays_its_process_start_where_it_starts_one() -> None:
    """The local executor forks its runs from a server that imports once: the first run pays that start, the others
    nothing; another executor starts a process per run, each paying it. A run's bill adds it to the rest."""
    local, ray = bill.SweepOptions(), bill.SweepOptions(executor="ray")
    assert [bill.start_seconds(i, local, 4.0) for i in range(3)] == [4.0, 0.0, 0.0]
    assert [bill.start_seconds(i, ray, 4.0) for i in range(3)] == [4.0, 4.0, 4.0]
    costs = config_costs.Costs("k", setup_s=2.0, measure_s=0.0, step_s=0.5, eval_s=3.0, probe_s=1.0,
                               flops_per_step=1e9, peak_mb=None, mfu=None, num_train=1000, stand_in=None)
    cfg = RunConfig(variant="resnet", steps=10)
    started = bill.RunBill(cfg, costs, steps=10, evals=1, probe_calls=0, measures=False, start_s=4.0)
    assert started.seconds == 4.0 + 2.0 + 10 * 0.5 + 3.0


def test_the_process_start_is_billed_apart_from_the_per_run_figures() -> None:
    """The first run's process start is a line of its own: it does not inflate the per-run figure of whichever
    configuration runs first (two runs each: 5 s a run, not 5 + 4/2); with a process per run, each run pays it."""
    costs = {k: config_costs.Costs(k, setup_s=2.0, measure_s=0.0, step_s=0.3, eval_s=0.0, probe_s=0.0,
                                   flops_per_step=1e9, peak_mb=None, mfu=None, num_train=1000, stand_in=None)
             for k in ("a", "b")}
    runs = [bill.RunBill(RunConfig(variant=v, steps=10, seed=seed), costs[k], 10, 0, 0, False,
                         start_s=4.0 if (k, seed) == ("a", 0) else 0.0)
            for k, v in (("a", "plain"), ("b", "resnet")) for seed in (0, 1)]
    lines = bill.render(runs, bill.SweepOptions(), "cpu", {})
    assert [line.split()[-4:] for line in lines[1:3]] == [["5", "s", "-", "n/a"]] * 2  # per run, no measurement
    assert lines[3] == ("peak MiB n/a: on a CPU a step's peak memory needs a process of its own (`bench run --measure "
                        "memory`, or the runs record it); on CUDA it is the timed step's, where the step ran whole")
    assert lines[4] == "+ 4 s process start, once (the sweep's first run; the others fork from it)"
    assert lines[5].startswith("total: 4 runs, 40 steps, 4e+10 training FLOPs; on this device (cpu), idle: 24 s "
                               "with --jobs 1 (an estimate of what it should take with the CPUs to itself; load "
                               "makes it longer)")  # an estimate, not a floor: a sweep can take less
    each = [dataclasses.replace(b, start_s=4.0) for b in runs]
    assert bill.render(each, bill.SweepOptions(executor="ray"), "cpu", {})[4] == "+ 4 s process start in each of 4 runs"
    measured = [dataclasses.replace(b, costs=dataclasses.replace(b.costs, peak_mb=12.0)) for b in runs]
    lines = bill.render(measured, bill.SweepOptions(), "cpu", {})
    assert lines[1].split()[-1] == "12" and lines[3].startswith("+ 4 s process start")  # every peak known: no note


def test_the_accelerator_line_is_left_out_when_the_measured_peak_is_not_the_real_one() -> None:
    costs = config_costs.Costs("k", setup_s=1.0, measure_s=0.0, step_s=0.5, eval_s=0.0, probe_s=0.0,
                               flops_per_step=1e9, peak_mb=None, mfu=0.25, num_train=1000, stand_in=None)
    cfg = RunConfig(variant="resnet", steps=10)
    options = bill.SweepOptions()
    lines = bill.render([bill.RunBill(cfg, costs, 10, 1, 0, False)], options, "cpu", {"H100": 1e15})
    # what the utilisation divides by, spelt out (1e9 FLOPs in 0.5 s over the rate it is 25% of), and what a run's
    # `mfu` divides by instead
    # two lines: the estimate (1e10 FLOPs / (0.25 x 1e15 FLOP/s)), then what the utilisation divides by
    assert lines[-2] == ("on accelerators, at the model FLOP utilisation measured here (25.0%), the training FLOPs "
                         "alone would take: H100 <1 ms (one device, no evaluation; small models use less of an "
                         "accelerator's peak than of a CPU's: read these as lower bounds)")
    assert lines[-1] == ("that utilisation: the steps' achieved 2.0 GFLOP/s over 8.0 GFLOP/s, this device's measured "
                         "rates for their op classes (a lone matmul's and convolution's, weighted by the steps' "
                         "FLOPs; on a CPU in CPU time per thread: idle figures); a run's `mfu` divides its wall-clock "
                         "rate at its load by its `peak_source` (on a CPU a 1024x1024 matmul's): compare achieved "
                         "rates (`achieved_tflops`)")
    over = dataclasses.replace(costs, mfu=6.25)  # a CPU's emulated bf16 matmul taken for its peak
    lines = bill.render([bill.RunBill(cfg, over, 10, 1, 0, False)], options, "cpu", {"H100": 1e15})
    assert lines[-1] == ("no accelerator figures: the steps timed here ran at 625% of the peak this device reached on "
                         "a lone matmul and convolution, so that peak is below its real one and no utilisation can be "
                         "read from it; bill again on a quieter machine (on a CPU in bf16 or fp16, also with --set "
                         "precision=fp32)")


def test_a_cpu_peak_in_bf16_is_never_below_fp32s() -> None:
    """A CPU without bf16 units emulates bf16 matmuls; a run under bf16 autocast is timed against fp32's rate too."""
    from bench.runs.measure import measured_matmul_peak

    _, source = measured_matmul_peak(torch.device("cpu"), "bf16", n=64, repeats=1)
    assert source.endswith("(the faster of bfloat16 and float32)")
    _, source = measured_matmul_peak(torch.device("cpu"), "fp16", n=64, repeats=1)
    assert "float32 matmul" in source and "faster" not in source


@pytest.mark.slow  # a full-size stand-in timed once
def test_a_task_without_its_data_is_measured_on_a_stand_in_of_the_same_shapes(tmp_path: Path) -> None:
    cfg = RunConfig(variant="resnet", depth=8, task="cifar10", data_dir=str(tmp_path / "none"), epochs=1,
                    batch_size=16, measure=())
    stand, num_train, name = config_costs._setup(cfg)
    assert name == "synthetic" and num_train == 50_000
    assert (stand.cfg.task, stand.cfg.image_size, stand.cfg.num_classes) == ("synthetic", 32, 10)
    costs = config_costs.measure_costs(config_costs.plan(cfg, "k"), RATES)
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
    stand, num_train, name = config_costs._setup(cfg)
    assert name == "generated shards" and num_train is None and stand.cfg.task == "tokens"
    assert stand.cfg.vocab_size == 1000
    costs = config_costs.measure_costs(config_costs.plan(cfg, "k"), RATES)
    assert costs.stand_in == "generated shards" and costs.num_train is None and costs.step_s > 0
    assert bill._steps(cfg, costs) == 50
    assert config_costs.STAND_INS["tokens"](cfg)[2] == 20  # one evaluation reads 320 tokens: 20 windows of 16


class CountingRunner(config_costs.StepRunner):
    calls = 0

    def __call__(self) -> torch.Tensor:
        CountingRunner.calls += 1
        return super().__call__()


@pytest.fixture
def timed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """Every step the bill takes counted (CountingRunner.calls) and each timing call recorded (warm-up, repeats,
    steps); a timed step reads 100 ms of wall time and 1000 s of CPU time (so the wall time is the step's), the
    device's rates :data:`RATES`, a process's start 4 s (no process started)."""
    CountingRunner.calls = 0
    monkeypatch.setattr(bill, "process_start", lambda: 4.0)
    monkeypatch.setattr(config_costs, "StepRunner", CountingRunner)
    clock = iter(range(0, 10**9, 1000))
    monkeypatch.setattr(bill.measure, "cpu_seconds", lambda: float(next(clock)))
    calls: list[tuple[int, int, int]] = []
    real = bill.measure.time_steps

    def time_steps(step: Any, device: torch.device, warmup: int, repeats: int, steps: int) -> list[float]:
        calls.append((warmup, repeats, steps))
        real(step, device, warmup, repeats, steps)
        return [100.0] * repeats

    monkeypatch.setattr(bill.measure, "time_steps", time_steps)
    monkeypatch.setattr(bill.measure, "device_rates", lambda device, precision: RATES)
    return calls


RATES = {"matmul": 4e10, "conv": 1e11}
TINY = RunConfig(variant="resnet", depth=8, task="digits", batch_size=32, grad_accum=2, steps=12, eval_every=4,
                 probe_every=6, measure=("flops", "throughput", "memory"), timing_warmup=1, timing_repeats=2,
                 timing_steps=2)


def test_the_bill_is_the_one_timed_step_scaled_by_exact_flops(timed: list[tuple[int, int, int]],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A step over the budget is timed on a halving of the batch that fits it; every figure follows from the median
    of its timed steps (100 ms) and the step's FLOPs, counted exactly on the meta device."""
    from torch.utils.flop_counter import FlopCounterMode

    model = variants.create("resnet", depth=8, in_chans=1)
    x, y = torch.randn(32, 1, 8, 8), torch.randint(0, 10, (32,))
    with FlopCounterMode(display=False) as direct:
        torch.nn.functional.cross_entropy(model(x), y).backward()
    with FlopCounterMode(display=False) as direct_fwd:
        model(x)
    train, fwd = direct.get_total_flops(), direct_fwd.get_total_flops()
    monkeypatch.setattr(config_costs, "STEP_BUDGET", train * 10 / 32)  # 10 samples' worth: 32 -> 16 -> 8
    p = config_costs.plan(TINY, "k")
    assert (p.micro.train, p.micro.forward, p.timed, p.warmup) == (train, fwd, 8, 1)
    conv, mm = p.micro.train_by_class["conv"], p.micro.train_by_class["matmul"]
    assert conv + mm == train and mm == 3 * 32 * 2 * 64 * 10  # the classifier's forward and two gradients
    assert p.expected_s(RATES) == conv / 4 / 1e11 + mm / 4 / 4e10  # one step of a quarter of the batch
    assert p.repeats(RATES) == config_costs.MAX_REPEATS  # milliseconds each: as many as the bill times
    c = config_costs.measure_costs(p, RATES)
    assert timed == [(1, 5, 1)] and CountingRunner.calls == 6  # one untimed step, five timed: nothing else
    micro_s = 0.1 * 32 / 8  # one micro-batch of 32, from the 8 timed
    step_s = 2 * micro_s  # grad_accum 2
    assert c.step_s == step_s and c.flops_per_step == 2 * train and c.timed_samples == 8
    assert c.flops_by_class == {"matmul": 2 * mm, "conv": 2 * conv}
    assert c.measure_s == micro_s + (1 + 2 * 2) * step_s + (config_costs.PROCESS_START_S + 4 * step_s)
    assert c.eval_s == (360 + 1437) * (micro_s / 32 * fwd / train)  # digits: 360 validation, 1,437 training samples
    assert c.probe_s == micro_s and c.peak_mb is None
    assert c.mfu == 2 * train / step_s / (2 * train / (2 * conv / 1e11 + 2 * mm / 4e10))
    run = bill.RunBill(TINY, c, steps=12, evals=3, probe_calls=3, measures=True)
    assert run.seconds == c.setup_s + c.measure_s + 12 * step_s + 3 * c.eval_s + 3 * micro_s


def test_the_bill_times_one_step_per_model_configuration(timed: list[tuple[int, int, int]],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs that differ in their seed share a configuration: two configurations of four runs take twelve steps (one
    untimed, five timed each); a step over the budget even at one sample is timed once, with no warm-up."""
    configs = [dataclasses.replace(TINY, variant=v, seed=seed, measure=()) for v in ("plain", "resnet")
               for seed in (0, 1)]
    said: list[str] = []
    bills = bill.bill(configs, bill.SweepOptions(), bill.measure.cost_key, say=said.append)
    assert CountingRunner.calls == 12 and timed == [(1, 5, 1)] * 2
    assert [b.measures for b in bills] == [False] * 4 and bills[0].costs is bills[1].costs
    assert [b.start_s for b in bills] == [4.0, 0.0, 0.0, 0.0]  # the fork server's start, with the first run
    assert said[0] == "  counting the FLOPs of 2 model configurations on the meta device ..."
    assert re.match(r"  timing 12 steps of 2 model configurations \(\d threads?\): their FLOPs alone take 17 ms at "
                    r"this device's rates \(matmul 40 GFLOP/s, conv 100 GFLOP/s\)$", said[1])
    assert said[2].startswith("  timing plain-d8-digits-") and ": 5 steps of 32 samples (" in said[2]
    CountingRunner.calls, timed[:] = 0, []
    monkeypatch.setattr(config_costs, "STEP_BUDGET", 1.0)
    bills = bill.bill(configs[:1], bill.SweepOptions(), bill.measure.cost_key, say=said.append)
    assert CountingRunner.calls == 1 and timed == [(0, 1, 1)] and bills[0].costs.timed_samples == 1
    assert bills[0].costs.step_s == 0.1 * 32 * 2


def test_on_a_busy_cpu_the_bill_reads_the_steps_cpu_time(timed: list[tuple[int, int, int]],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine busy with other work makes each step take longer on the wall clock, not in CPU time: the bill reads
    the steps' CPU time per thread (an idle core's figure) where it is the smaller, and scales the sweep by the load
    average it measured (the sweep's threads and the other runnable ones share the CPUs)."""
    clock = iter(float(x) for x in range(0, 10**6, 3))  # 3 CPU seconds a call: 0.5 s for each of 6 steps
    monkeypatch.setattr(bill.measure, "cpu_seconds", lambda: next(clock) / 10)  # 0.05 s a step, not 0.1 s
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    c = config_costs.measure_costs(config_costs.plan(dataclasses.replace(TINY, measure=()), "k"), RATES)
    assert c.step_s == pytest.approx(0.05 * 32 / 32 * 2)  # grad_accum 2: two micro-batches
    # a load average of 2.5 while the bill ran one thread: 1.5 other threads; two jobs of one thread join them
    assert bill.slowdown({"load_1m": 2.5, "cpus": 2}, jobs=2, threads=1) == pytest.approx(1.75)
    assert bill.slowdown({"load_1m": 1.5, "cpus": 4}, jobs=2, threads=1) == 1.0  # room for both
    assert bill.slowdown({"load_1m": 6.0, "cpus": 2}, jobs=2, threads=1, own=2) == pytest.approx(3.0)
    assert bill.slowdown({}, jobs=2, threads=1) == 1.0
    busy = dataclasses.replace(c, load={"load_1m": 2.5, "cpus": 2, "other_cpu": 0.75})
    monkeypatch.setattr(bill, "plan_placements", lambda jobs, gpus, **kw: [SimpleNamespace(threads=1)] * jobs)
    lines = bill.render([bill.RunBill(TINY, busy, 10, 0, 0, False)], bill.SweepOptions(jobs=2), "cpu", {})
    idle = bill.RunBill(TINY, c, 10, 0, 0, False).seconds
    said = next(line for line in lines if line.startswith("machine load"))
    assert said == ("machine load while billing: 1-min load average 2.5 on 2 CPUs, other processes 75% of the CPU "
                    "time (the steps were timed in CPU time: an idle machine's figures; the sweep shares the CPUs "
                    f"with the other work): at that load, {bill._clock(1.75 * idle)} (1.75x), while the load stays "
                    "as it was when billed")


def test_a_family_is_timed_once_and_its_bill_rises_with_its_flops(timed: list[tuple[int, int, int]]) -> None:
    """Two depths of one variant are one family: only the shallower step is timed (one untimed, five timed steps),
    and the deeper one's step is that time scaled by its exact FLOPs, so the family's bill is monotone in FLOPs (a
    deep net's single noisy step billed it below a shallower one's)."""
    configs = [dataclasses.replace(TINY, depth=d, measure=(), grad_accum=1) for d in (14, 8)]
    said: list[str] = []
    bills = bill.bill(configs, bill.SweepOptions(), bill.measure.cost_key, say=said.append)
    assert timed == [(1, 5, 1)] and CountingRunner.calls == 6
    assert said[2].startswith("  timing resnet-d8-digits-") and said[2].endswith(", for 2 depths ...")
    deep, shallow = (b.costs for b in bills)
    assert shallow.step_s == 0.1 and deep.step_s == pytest.approx(0.1 * deep.flops_per_step / shallow.flops_per_step)
    assert deep.flops_per_step > shallow.flops_per_step and bills[0].seconds > bills[1].seconds
    plans = [config_costs.plan(c, str(i)) for i, c in enumerate(configs)]
    assert [len(f) for f in config_costs.families(plans).values()] == [2]


def test_at_a_load_the_bill_reads_the_slowdown_it_saw_itself() -> None:
    """A load average of 12 on 2 CPUs, most of it threads that hardly run: the bill took 1.6x longer on the
    wall clock than in CPU time, and that, not (1 + 11) / 2 = 6, is what the sweep's one job sees; two jobs on two
    idle CPUs see nothing; two jobs where the bill's one thread had the CPU to itself get half as much each."""
    seen = {"load_1m": 12.0, "cpus": 2, "wall_over_cpu": 1.6}
    assert bill.slowdown(seen, jobs=1, threads=1) == pytest.approx(1.6)
    assert bill.slowdown({"load_1m": 12.0, "cpus": 2}, jobs=1, threads=1) == pytest.approx(6.0)
    assert bill.slowdown({"load_1m": 1.0, "cpus": 2, "wall_over_cpu": 1.0}, jobs=2, threads=1) == 1.0
    assert bill.slowdown({"load_1m": 1.0, "cpus": 1, "wall_over_cpu": 1.0}, jobs=2, threads=1) == pytest.approx(2.0)
    assert "the bill 1.60x longer on the wall clock than in CPU time (" in bill.load_line(seen)
    assert "the bill 1.60x longer on the wall clock than in CPU time over 12 s (" in bill.load_line(
        {**seen, "window_s": 12.0})


def test_the_bill_times_its_steps_with_the_threads_a_run_would_get_now(timed: list[tuple[int, int, int]],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """On a busy machine a sweep's run trains on the cores free when it starts (one of two at a load average of 8),
    so the bill times its steps on as many threads, and says so: two threads that wait on each other where other
    work holds the cores spin, and their CPU time had billed a pre-activation ResNet's step on digits at 10 to 20 times
    the run's."""
    seen: list[int] = []
    real = bill.measure.time_steps  # the fixture's: 100 ms a step

    def time_steps(step: Any, device: torch.device, warmup: int, repeats: int, steps: int) -> list[float]:
        seen.append(torch.get_num_threads())
        return real(step, device, warmup, repeats, steps)

    monkeypatch.setattr(bill.measure, "time_steps", time_steps)
    monkeypatch.setattr("bench.sweeps.executors.local.usable_cores", lambda: 2)
    monkeypatch.setattr(bill, "free_cores", lambda: 1, raising=False)  # (the old bill had no such name)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        said: list[str] = []
        bills = bill.bill([dataclasses.replace(TINY, measure=())], bill.SweepOptions(), bill.measure.cost_key,
                          say=said.append)
        assert torch.get_num_threads() == 2  # restored
    finally:
        torch.set_num_threads(before)
    assert seen == [1] and " (1 thread): " in said[1] and bills[0].costs.load["threads"] == 1
    monkeypatch.setattr(bill, "free_cores", lambda: 2)  # an idle machine: both cores for one job, one each for two
    try:
        torch.set_num_threads(2)
        assert bill.run_threads(bill.SweepOptions()) == 2 and bill.run_threads(bill.SweepOptions(jobs=2)) == 1
        torch.set_num_threads(1)  # never more than this process's own threads, as the executor caps its jobs
        assert bill.run_threads(bill.SweepOptions()) == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.usefixtures("clean_plugins")
def test_the_plugin_cnn_bill_check_runs_the_docs_plugin_as_written() -> None:
    """scripts/bill_check.py's plugin CNN case (docs/performance.md): the pre-activation plugin of docs/plugins.md,
    character for character, against `preact` at depths 8 and 20, 2 seeds, 300 steps."""
    from bench.analysis.studyfile import PLUGIN_ORIGIN, study_plugins
    from bench.runs import plugins
    from bench.sweeps.study import load_study

    repo = Path(__file__).resolve().parents[1]
    page = (repo / "docs" / "plugins.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(.*?)```", page.split("the pre-activation plugin", 1)[1], re.S)
    folder = repo / "scripts" / "studies"
    assert block is not None and (folder / "mixshort.py").read_text(encoding="utf-8") == block.group(1)
    study = folder / "mixshort_study.toml"
    plugins.load_plugins(study_plugins(study), PLUGIN_ORIGIN)
    configs = load_study(study).configs(None)
    assert sorted((c.variant, c.depth, c.seed) for c in configs) == sorted(
        (v, d, s) for v in ("preact", "preact_mix") for d in (8, 20) for s in (0, 1))
    assert {(c.task, c.steps, c.batch_size, c.eval_every, c.probe_every) for c in configs} == {("digits", 300, 128,
                                                                                                  30, 300)}


def test_a_family_is_set_up_once_and_its_deeper_models_counted_on_the_meta_device_only(
        timed: list[tuple[int, int, int]], monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's set-up (task, a meta-device forward that checks the model fits, the model built) is made once per
    family: the deeper configuration is counted on the meta device, with the same FLOPs as when it is set up whole,
    and its activations counted in that same forward; a deeper model that does not fit is refused as a run's set-up
    refuses it."""
    from bench.runs import measure
    from bench.runs.tasks import TaskError

    calls: list[int | None] = []
    real = config_costs._setup
    monkeypatch.setattr(config_costs, "_setup", lambda cfg: calls.append(cfg.depth) or real(cfg))
    shallow, deep = (dataclasses.replace(TINY, depth=d, measure=()) for d in (8, 14))
    bill.bill([shallow, deep, dataclasses.replace(deep, seed=1)], bill.SweepOptions(), bill.measure.cost_key,
              say=lambda line: None)
    assert calls == [8]  # the family's first configuration only
    like = config_costs.plan(shallow, "a")
    lite, whole = config_costs.plan(deep, "b", like), config_costs.plan(deep, "c")
    assert (lite.micro.forward, lite.micro.train_by_class) == (whole.micro.forward, whole.micro.train_by_class)
    assert lite.timed == whole.timed and lite.s.model_kwargs == whole.s.model_kwargs and lite.setup_s == like.setup_s
    with torch.device("meta"):
        model = variants.create("resnet", **whole.s.model_kwargs)
    alone = measure.meta_activation_bytes(model, torch.empty(32, 1, 8, 8))  # the set-up's own count
    assert lite.micro.activation_bytes == pytest.approx(alone, rel=0.01)  # under the FLOP counter: one output apart
    monkeypatch.setattr("bench.runs.tasks.base.available_memory", lambda: 1)
    with pytest.raises(TaskError, match=r"^resnet with [\d,]+ parameters .* and [\d.]+ MiB of activations at "
                                        r"--batch-size 32 needs about"):
        config_costs.plan(deep, "d", like)


def test_the_device_rates_are_timed_in_cpu_time_on_a_cpu_and_on_the_wall_clock_on_cuda(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The bill's steps are timed in CPU time per thread on a CPU (an idle core's figure); the peak rates it divides
    them by are timed alike, or a busy machine lowers the peak alone and the utilisation comes out over 100 %. Here
    each repeat reads 2^-20 s of CPU time, less than any wall time: the rates are their FLOPs over that."""
    from bench.runs import measure

    tick = 2.0**-20
    clock = iter(k * tick for k in range(10**6))
    monkeypatch.setattr(measure, "cpu_seconds", lambda: next(clock), raising=False)  # (the old one had none)
    monkeypatch.setattr(measure, "_RATES", {})
    threads = torch.get_num_threads()
    rates = measure.device_rates(torch.device("cpu"), "fp32")
    per_step = tick / threads  # one matmul repeat is 3 steps, a convolution's 1
    assert rates["matmul"] == pytest.approx(2 * 512**3 / (per_step / 3))
    assert rates["conv"] == pytest.approx(2 * 8 * 32 * 32 * 64 * 64 * 9 / per_step)
    # on CUDA the kernels are not this process's CPU time: the wall clock, as before (device faked: 10 ms a step)
    monkeypatch.setattr(measure, "synchronize", lambda device: None)
    times = measure.idle_steps(lambda: __import__("time").sleep(0.01), torch.device("cuda"), warmup=0, repeats=2,
                               steps=1)
    assert len(times) == 2 and min(times) >= 10.0


def test_the_slowdown_rests_on_the_whole_bill_and_two_estimates_apart_print_a_range(
        timed: list[tuple[int, int, int]], monkeypatch: pytest.MonkeyPatch) -> None:
    """The measured slowdown is the bill's whole wall time over its CPU time (30 s of wall over 12 s of CPU here),
    not the fraction of a second its timed steps take; where it and the load-average model disagree by more than
    25 % the bill prints the range between them, each named, else the higher; nothing on an idle machine."""
    walls = iter([100.0, 130.0])
    monkeypatch.setattr(bill, "time", SimpleNamespace(perf_counter=lambda: next(walls)))
    cpus = iter([0.0] + [12.0] * 100)  # the bill's start, then 12 CPU seconds later for every later reading
    monkeypatch.setattr(bill.measure, "cpu_seconds", lambda: next(cpus))
    monkeypatch.setattr(bill, "timed_seconds", lambda p, rates: 0.1)
    bills = bill.bill([dataclasses.replace(TINY, measure=())], bill.SweepOptions(), bill.measure.cost_key,
                      say=lambda line: None)
    load = bills[0].costs.load
    assert (load["wall_over_cpu"], load["window_s"]) == (2.5, 30.0)
    # a load average of 3.1 on 2 CPUs: (1 + 2.1) / 2 = 1.55x by the model; the bill's own 2.00x (the same share)
    busy = {"load_1m": 3.1, "cpus": 2, "wall_over_cpu": 2.0}
    factors = bill.slowdowns(busy, jobs=1, threads=1)
    assert factors == {"by the load average": pytest.approx(1.55), "by the bill's own wall over CPU time": 2.0}
    assert bill.at_load(72.0, factors) == (": at that load, between 1.9 min and 2.4 min (1.55x by the load average, "
                                           "2.00x by the bill's own wall over CPU time), while the load stays as it "
                                           "was when billed")
    close = bill.slowdowns({**busy, "wall_over_cpu": 1.7}, jobs=1, threads=1)  # 1.7 / 1.55: within 25 %
    assert bill.at_load(72.0, close) == ": at that load, 2.0 min (1.70x), while the load stays as it was when billed"
    assert bill.at_load(72.0, bill.slowdowns({"load_1m": 0.5, "cpus": 2, "wall_over_cpu": 1.0}, 1, 1)) == ""
    assert bill.at_load(72.0, bill.slowdowns({}, 1, 1)) == ""


STUDY_MEASURED = STUDY.replace("timing_steps = 2\n", 'timing_steps = 2\nmeasure = ["flops", "throughput"]\n').replace(
    "seed = [0, 1, 2]", "seed = [0, 1]")


def test_a_configuration_whose_figures_are_recorded_is_billed_no_measurement(
        timed: list[tuple[int, int, int]], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A sweep reuses the cost figures of a recorded run of a configuration (bench.sweeps.driver.recorded_figures):
    the dry run on that folder bills no run of it a measurement, and its table says so ("recorded"); the other
    configuration's measurement is billed once, in a column of its own, and the per-run column is the training
    alone, so the two configurations' per-run figures are equal (same steps, same timed step here)."""
    from bench.runs.results import ResultsStore
    from bench.sweeps.study import load_study

    study = write(tmp_path / "tiny.toml", STUDY_MEASURED)
    configs = load_study(study).configs(None)
    plain = next(c for c in configs if c.variant == "plain" and c.seed == 0)
    res = tmp_path / "res"
    ResultsStore(res).append({"run_id": plain.run_id, "status": "ok"},
                             {"run_id": plain.run_id, "config": plain.to_dict(), "env": {}, "measurements": {
                                 "flops": {"train_flops_per_sample": 1.0}, "throughput": {"step_time_ms": 1.0},
                                 "peak_flops": 1e12}})
    assert main(["sweep", str(study), "--dry-run", "--results-dir", str(res)]) == 0
    out = capsys.readouterr().out
    assert "4 runs checked, 1 of them already recorded in" in out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if re.match(r"(plain|resnet)-d8 ", line)}
    assert rows["plain-d8"][1:3] == ["1", "12"] and rows["plain-d8"][-2:] == ["recorded", "n/a"]
    assert rows["resnet-d8"][1:3] == ["2", "24"] and rows["resnet-d8"][-3] != "-"  # measured once: its seconds
    assert rows["plain-d8"][4:6] == rows["resnet-d8"][4:6]  # per run: the training alone
    assert "measure" in out.splitlines()[out.splitlines().index(next(line for line in out.splitlines()
                                                                      if line.startswith("configuration")))]

    todo = [c for c in configs if c.run_id != plain.run_id]
    key = bill.measure.cost_key(plain)
    fresh = bill.bill(todo, bill.SweepOptions(), bill.measure.cost_key, say=lambda line: None)
    reused = bill.bill(todo, bill.SweepOptions(), bill.measure.cost_key, say=lambda line: None, recorded={key})
    mine = [(a, b) for a, b in zip(fresh, reused, strict=True) if a.costs.key == key]
    assert [(a.measures, b.measures, b.recorded) for a, b in mine] == [(True, False, True)]
    assert mine[0][0].seconds - mine[0][1].seconds == pytest.approx(mine[0][0].costs.measure_s)  # the measurement
    assert mine[0][0].costs.measure_s > 0
    assert [(a.measures, b.measures) for a, b in zip(fresh, reused, strict=True) if a.costs.key != key] == [
        (True, True), (False, False)]  # the other configuration: measured in its first run as before
    lines = bill.render(reused, bill.SweepOptions(), "cpu", {})
    assert lines[0].split()[-4:] == ["run", "measure", "peak", "MiB"] and lines[1].split()[-2:] == ["recorded", "n/a"]


def test_the_recorded_figures_are_each_configurations_first_complete_ones() -> None:
    """One function says which configurations a folder has complete figures for (the driver's reuse and the dry
    run's bill both ask it): the first recorded run of a key whose measurements cover every phase it asks for; a run
    whose phase failed, or without its JSON, gives none; --measure-every-run reuses nothing."""
    from bench.sweeps.driver import recorded_figures

    ok = {"flops": {"x": 1}, "throughput": {"x": 2}, "peak_flops": 1e12}
    base = dataclasses.replace(TINY, measure=("flops", "throughput"))
    a = [dataclasses.replace(base, seed=s) for s in range(3)]
    b = [dataclasses.replace(base, variant="plain", seed=s) for s in range(2)]
    runs = {a[0].run_id: {"measurements": {**ok, "throughput": {"error": "oom"}}},  # a failed phase: not complete
            a[1].run_id: {"measurements": ok, "cost_source": "a9", "env": {"hostname": "h", "device_name": "cpu"}},
            a[2].run_id: {"measurements": ok},
            b[0].run_id: {"measurements": {"flops": {"x": 1}}}}  # b[1]: no JSON

    def load_run(run_id: str) -> dict[str, Any]:
        if run_id not in runs:
            raise ValueError(f"no run {run_id}")
        return runs[run_id]

    store: Any = SimpleNamespace(load_run=load_run)
    found = recorded_figures(store, [*a, *b])
    assert list(found) == [bill.measure.cost_key(a[0])]
    reuse = found[bill.measure.cost_key(a[0])]
    assert (reuse.source, reuse.machine, reuse.measurements) == ("a9", "h/cpu", ok)  # a[1]'s, not a[2]'s
    assert recorded_figures(store, [*a, *b], measure_every_run=True) == {}
