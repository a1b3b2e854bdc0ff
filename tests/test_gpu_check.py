"""The GPU check (scripts/gpu_check.py): its plan fits the device time, its summary is written whatever a step does,
and the steps with a CPU form run here, so that on a GPU only CUDA can fail."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "gpu_check.py"


@pytest.fixture(scope="module")
def gc():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=REPO)


def test_dry_run_lists_every_check_its_limit_and_its_source_within_the_device_time(gc):
    done = check("--dry-run")
    assert done.returncode == 0, done.stderr
    for step in gc.STEPS:
        assert step.name in done.stdout and step.source in done.stdout
    sure = gc.guaranteed(gc.plan(False), gc.WHOLE_BUDGET_S)
    assert gc.INSTALL_S + sum(s.budget_s for s in gc.STEPS[:sure]) <= gc.WHOLE_BUDGET_S == 480
    assert [s.name for s in gc.STEPS[:3]] == ["headline-resnet50-eager", "gpt2-small", "headline-resnet50-compiled"]
    assert "cost-gpt2-small" in [s.name for s in gc.STEPS[:sure]]  # the figures users quote first always run
    lines = done.stdout.splitlines()
    cut = next(i for i, line in enumerate(lines) if "as time allows" in line)
    assert lines[cut + 1].split()[1] == gc.STEPS[sure].name
    total = gc.INSTALL_S + sum(s.budget_s for s in gc.STEPS[:sure])
    assert f"install 20 s + the first {sure} checks = {total:.0f} s at most (limit 480 s)" in done.stdout
    quick = check("--dry-run", "--quick")
    assert "executor-per-gpu" not in quick.stdout and "headline-resnet50-eager" in quick.stdout
    assert "(limit 240 s)" in quick.stdout and "as time allows" not in quick.stdout  # all of --quick fits


def test_the_shell_wrapper_does_not_install_on_a_dry_run():
    done = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "--dry-run", "--only", "cuda-oom"],
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable})
    assert done.returncode == 0, done.stderr
    assert "cuda-oom" in done.stdout and "gpu-tests" not in done.stdout


def test_plan_numbers_stay_those_of_the_full_list(gc):
    chosen = gc.plan(False, ["cuda-oom", "analyses"])
    assert [(n, s.name) for n, s, _ in chosen] == [(6, "cuda-oom"), (10, "analyses")]
    assert [b for *_, b in gc.plan(True, ["analyses"])] == []  # not in --quick


def _step(gc, name, run, limit=5, describe=lambda found: ", ".join(f"{k} {v}" for k, v in found.items())):
    return gc.Step(name, run, describe, limit, "a test")


def test_a_failed_or_skipped_step_never_stops_the_next_and_the_summary_says_each(gc, tmp_path):
    seen = []

    def ok(ctx):
        seen.append("ok")
        ctx.found["img_s"] = 3

    def boom(ctx):
        seen.append("boom")
        raise RuntimeError("bench exited 1: it broke")

    def skip(ctx):
        seen.append("skip")
        raise gc.Skip("needs two GPUs")

    def slow(ctx):
        seen.append("slow")
        ctx.found["rows"] = 1  # made before its limit stopped it
        ctx.run([sys.executable, "-c", "import time; time.sleep(30)"])

    steps = [(1, _step(gc, "a", boom), 5), (2, _step(gc, "b", skip), 5), (3, _step(gc, "c", slow, 2), 2),
             (4, _step(gc, "d", ok), 5)]
    ctx = gc.Context(tmp_path, "cuda", False, None)
    results = gc.run_steps(ctx, steps)
    assert seen == ["boom", "skip", "slow", "ok"]
    assert [r.status for r in results] == ["failed", "skipped", "failed", "ok"]
    assert results[0].figure == "RuntimeError: bench exited 1: it broke"
    assert results[2].figure == "over its time limit of 2 s; made before: rows 1" and results[2].seconds < 10
    assert results[2].detail == {"rows": 1}
    md = (tmp_path / "summary.md").read_text()
    assert "Device: cuda. 1 ok, 2 failed, 1 skipped" in md
    assert "| 4 | d | ok | img_s 3 |" in md and "| 2 | b | skipped | needs two GPUs |" in md
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["counts"] == {"ok": 1, "failed": 2, "skipped": 1}
    assert data["steps"][3]["detail"] == {"img_s": 3}
    assert (tmp_path / "logs" / "03-c.log").read_text().startswith("$ ")


def test_a_step_whose_limit_does_not_fit_in_the_time_left_is_not_started(gc, tmp_path):
    started = []
    steps = [(1, _step(gc, "a", lambda ctx: started.append("a"), 5), 5),
             (2, _step(gc, "b", lambda ctx: started.append("b"), 50), 50),
             (3, _step(gc, "c", lambda ctx: started.append("c"), 5), 5)]
    results = gc.run_steps(gc.Context(tmp_path, "cuda", False, None), steps, budget=20)
    assert started == ["a", "c"] and [r.status for r in results] == ["ok", "skipped", "ok"]
    assert results[1].figure.startswith("not reached: ") and results[1].figure.endswith("its limit is 50 s")


def test_a_run_killed_after_writing_its_row_keeps_its_figures(gc, tmp_path, monkeypatch):
    """The first H100's GPT-2 run wrote its row, then its step's limit killed the process, and the summary kept none
    of it: the row is read whatever becomes of the command."""
    from bench.runs.results import ResultsStore, new_row

    def bench(self, *args, timeout=None, check=True, env=None):
        if "--results-dir" not in args:  # the token shards
            return subprocess.CompletedProcess(args, 0, "")
        results = Path(args[args.index("--results-dir") + 1])
        row = new_row(run_id="r", status="ok", train_tokens_per_s=213248.0, mfu=0.188, throughput_method="timed")
        ResultsStore(results).append(row, {"run_id": "r", "row": row, "config": {}})
        raise subprocess.TimeoutExpired("bench", 50)

    monkeypatch.setattr(gc.Context, "bench", bench)
    ctx = gc.Context(tmp_path, "cuda", False, None)
    (result,) = gc.run_steps(ctx, [(2, gc.STEPS[1], 90)])
    assert result.status == "failed" and result.detail["eager"]["train_tokens_per_s"] == 213248.0
    assert result.figure == ("over its time limit of 90 s; made before: eager 213,248 tokens/s, MFU 18.8%")


def test_timm_benchmark_output_is_read(gc):
    out = 'Benchmarking...\n--result\n{\n    "train_samples_per_sec": 1234.5,\n    "train_step_time": 207.3\n}\n'
    assert gc.timm_samples_per_s(out) == 1234.5
    with pytest.raises(RuntimeError, match="no train_samples_per_sec"):
        gc.timm_samples_per_s("Model resnet50 created, param count: 25557032\n")


def test_a_bill_total_is_read(gc):
    out = ("configuration   runs ...\ntotal: 10 runs, 640,000 steps, 2.79e+17 training FLOPs; on this device "
           "(NVIDIA H200), idle: 3.2 h with --jobs 1, the study's checks (77 ms) included\nmachine load while ...\n")
    assert gc.bill_total(out) == {"runs": 10, "steps": 640_000, "train_flops": 2.79e17, "device": "NVIDIA H200",
                                  "wall": "3.2 h"}
    with pytest.raises(RuntimeError, match="no bill total"):
        gc.bill_total("dry run of study 'gpt2' (full): 6 runs checked\n")


def test_the_cost_step_keeps_the_designs_made_in_time(gc, tmp_path, monkeypatch):
    """The table is written after each design: a step stopped by its limit reports the designs made before; the CUDA
    designs are of their shape's family (a wrong name would fail only on the GPU)."""
    from bench.runs.shapes import check_designs, shape_of

    shape, designs, _ = gc.COST_CUDA
    check_designs(shape_of(shape), designs, precision="bf16")
    calls: list[tuple[str, ...]] = []

    def bench(self, *args, timeout=None, check=True, env=None):
        calls.append(args)
        Path(args[-1]).write_text("design,flops_rel,step_rel,mem_rel,step_rel_compiled,mem_rel_compiled\n"
                                  "preln,1,1,1,1,1\nmhc,1.015,4.81,1.94,1.21,1.3\n")
        raise subprocess.TimeoutExpired("bench", 100)

    monkeypatch.setattr(gc.Context, "bench", bench)
    (result,) = gc.run_steps(gc.Context(tmp_path, "cuda", False, None), [(4, gc.STEPS[3], 100)])
    assert "--compile" in calls[0] and "bf16" in calls[0]
    assert result.status == "failed" and result.figure == (
        "over its time limit of 100 s; made before: Pre-LN's step = 1 at gpt2_small, batch 8, bf16: mhc 4.81x eager, "
        "1.21x compiled (1.015x the FLOPs; memory 1.94x eager, 1.30x compiled)")
    assert set(result.detail["designs"]) == {"mhc"}


def test_the_full_scale_presets_billed_on_a_gpu_exist(gc):
    """Each preset the bills step names is one of its study's (a renamed preset would fail only on the GPU)."""
    from bench.sweeps.study import load_study

    for study, preset in gc.FULL_SCALE:
        assert not preset or preset in load_study(study).presets, (study, preset)


def test_bad_arguments_are_refused(tmp_path):
    done = check(str(tmp_path), "--timm-benchmark", str(tmp_path / "nope.py"))
    assert done.returncode == 2 and "no such file" in done.stderr


def test_cuda_only_checks_say_why_they_skip_on_cpu(tmp_path):
    done = check(str(tmp_path), "--device", "cpu", "--only", "gpu-tests,executor-per-gpu,cuda-oom")
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((tmp_path / "summary.json").read_text())
    assert [(s["name"], s["status"]) for s in data["steps"]] == [
        ("gpu-tests", "skipped"), ("cuda-oom", "skipped"), ("executor-per-gpu", "skipped")]
    assert data["steps"][0]["figure"] == "the gpu-marked tests need CUDA (their CPU forms run in the test suite)"


# timm's benchmark.py as the check reads it: its result block. The CPU forms of the headline steps pair the harness
# with this stand-in (the real script is in timm's repository, not its wheel).
FAKE_TIMM = '''import sys
assert "--model" in sys.argv and "--bench" in sys.argv
print("--result\\n{\\n    \\"train_samples_per_sec\\": 50.0\\n}")
'''
CPU_FORMS = ("headline-resnet50-eager", "headline-resnet50-compiled", "gpt2-small", "cost-gpt2-small",
             "imagefolder-loader", "torchrun-nccl", "resume-after-sigterm", "analyses", "full-scale-bills")


@pytest.mark.gpucheck  # each check's CPU form: a few bench commands, 15-100 s on 2 busy cores; CI's own step
@pytest.mark.parametrize("name", CPU_FORMS)
def test_cpu_forms_of_the_checks_pass_with_every_figure(name, tmp_path):
    """Every check that has a CPU form runs it (one check per test, so that xdist spreads them) and reports each of
    its figures: a failure on the GPU machine is then CUDA's, not the check's."""
    fake = tmp_path / "timm_benchmark.py"
    fake.write_text(FAKE_TIMM)
    done = check(str(tmp_path / "out"), "--device", "cpu", "--only", name, "--timm-benchmark", str(fake))
    data = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert done.returncode == 0, (tmp_path / "out" / "summary.md").read_text()
    assert [(s["name"], s["status"]) for s in data["steps"]] == [(name, "ok")]
    detail = data["steps"][0]["detail"]
    if name.startswith("headline"):
        h = detail["harness"]
        assert h["train_samples_per_s"] > 0 and h["mfu"] > 0 and h["throughput_method"] == "timed"
        assert detail["timm"] == 50.0 and detail["ratio"] == pytest.approx(h["train_samples_per_s"] / 50.0)
        assert (h["peak_mem_mb"] is not None) == (name == "headline-resnet50-eager")
    if name == "gpt2-small":
        # A few CPU steps learn nothing; the figures are throughput and MFU, timed, eager and compiled.
        for tag in ("eager", "compiled"):
            r = detail[tag]
            assert r["train_tokens_per_s"] > 0 and r["mfu"] > 0 and r["throughput_method"] == "timed", r
    if name == "cost-gpt2-small":
        r = detail["designs"]["mhc"]
        assert r["step_rel"] > 0 and r["flops_rel"] == pytest.approx(81_592_320 / 64_487_424)
        assert (tmp_path / "out" / "cost.csv").read_text().startswith("design,")
    if name == "imagefolder-loader":
        # a short CPU run of the loader learns nothing (failed_to_learn); the check measures the input pipeline
        r = detail["run"]
        assert 0 <= r["input_bound_fraction"] <= 1 and r["status"] in ("ok", "failed_to_learn")
        assert set(detail["loader"]) == {0, 2} or set(detail["loader"]) == {"0", "2"}
        assert all(v > 0 for v in detail["loader"].values())
    if name == "torchrun-nccl":
        assert detail["max_loss_gap"] <= 1e-3 and detail["status"] == "ok"
    if name == "resume-after-sigterm":
        assert detail["resumed"] > 0 and detail["losses"] == 16
    if name == "analyses":
        assert detail["done"] == ["lesion", "landscape", "probes"]
    if name == "full-scale-bills":
        assert detail["bills"]["tiny"]["runs"] == 1 and detail["bills"]["tiny"]["steps"] == 20
        assert not (tmp_path / "out" / "bills").exists()  # a dry run records nothing
