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


def test_dry_run_lists_every_check_within_the_device_time(gc):
    done = check("--dry-run")
    assert done.returncode == 0, done.stderr
    for step in gc.STEPS:
        assert step.name in done.stdout
    assert gc.INSTALL_S + sum(s.budget_s for s in gc.STEPS) <= gc.WHOLE_BUDGET_S == 480
    assert gc.INSTALL_S + sum(s.quick_s for s in gc.STEPS) <= gc.QUICK_BUDGET_S == 240
    total = gc.INSTALL_S + sum(s.budget_s for s in gc.STEPS)
    assert f"= {total} s at most (limit 480 s)" in done.stdout
    quick = check("--dry-run", "--quick")
    assert "executor-per-gpu" not in quick.stdout and "headline-resnet50" in quick.stdout
    assert "(limit 240 s)" in quick.stdout


def test_the_shell_wrapper_does_not_install_on_a_dry_run():
    done = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "--dry-run", "--only", "cuda-oom"],
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable})
    assert done.returncode == 0, done.stderr
    assert "cuda-oom" in done.stdout and "gpu-tests" not in done.stdout


def test_plan_numbers_stay_those_of_the_full_list(gc):
    chosen = gc.plan(False, ["cuda-oom", "analyses"])
    assert [(n, s.name) for n, s, _ in chosen] == [(6, "cuda-oom"), (9, "analyses")]
    assert [b for *_, b in gc.plan(True, ["analyses"])] == []  # not in --quick


def test_a_failed_or_skipped_step_never_stops_the_next_and_the_summary_says_each(gc, tmp_path):
    seen = []

    def ok(ctx):
        seen.append("ok")
        return "3 img/s", {"x": 1}

    def boom(ctx):
        seen.append("boom")
        raise RuntimeError("bench exited 1: it broke")

    def skip(ctx):
        seen.append("skip")
        raise gc.Skip("needs two GPUs")

    def slow(ctx):
        seen.append("slow")
        ctx.run([sys.executable, "-c", "import time; time.sleep(30)"])
        return "never", {}

    steps = [(1, gc.Step("a", boom, 5, 5), 5), (2, gc.Step("b", skip, 5, 5), 5), (3, gc.Step("c", slow, 2, 0), 2),
             (4, gc.Step("d", ok, 5, 5), 5)]
    ctx = gc.Context(tmp_path, "cuda", False, None)
    results = gc.run_steps(ctx, steps)
    assert seen == ["boom", "skip", "slow", "ok"]
    assert [r.status for r in results] == ["failed", "skipped", "failed", "ok"]
    assert results[0].figure == "RuntimeError: bench exited 1: it broke"
    assert results[2].figure == "over its time limit of 2 s" and results[2].seconds < 10
    md = (tmp_path / "summary.md").read_text()
    assert "Device: cuda. 1 ok, 2 failed, 1 skipped" in md
    assert "| 4 | d | ok | 3 img/s |" in md and "| 2 | b | skipped | needs two GPUs |" in md
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["counts"] == {"ok": 1, "failed": 2, "skipped": 1}
    assert data["steps"][3]["detail"] == {"x": 1}
    assert (tmp_path / "logs" / "03-c.log").read_text().startswith("$ ")


def test_timm_benchmark_output_is_read(gc):
    out = 'Benchmarking...\n--result\n{\n    "train_samples_per_sec": 1234.5,\n    "train_step_time": 207.3\n}\n'
    assert gc.timm_samples_per_s(out) == 1234.5
    with pytest.raises(RuntimeError, match="no train_samples_per_sec"):
        gc.timm_samples_per_s("Model resnet50 created, param count: 25557032\n")


def test_a_bill_total_is_read(gc):
    out = ("configuration   runs ...\ntotal: 10 runs, 640,000 steps, 2.79e+17 training FLOPs; on this device "
           "(NVIDIA H200): 3.2 h with --jobs 1\nat the model FLOP utilisation measured here ...\n")
    assert gc.bill_total(out) == {"runs": 10, "steps": 640_000, "train_flops": 2.79e17, "device": "NVIDIA H200",
                                  "wall": "3.2 h"}
    with pytest.raises(RuntimeError, match="no bill total"):
        gc.bill_total("dry run of study 'gpt2' (full): 6 runs checked\n")


def test_the_cost_step_keeps_the_tables_made_in_time(gc, tmp_path, monkeypatch):
    """On a GPU the first table must be made in the step's time; later ones out of time are named, not fatal; the
    CUDA runs name designs of their shapes' families (a wrong name would fail only on the GPU)."""
    from bench.runs.cost import check_designs, shape_of

    for run in gc.COST_RUNS_CUDA:
        check_designs(shape_of(run.shape), run.designs, precision=run.precision)
    calls: list[tuple[str, ...]] = []

    def bench(self, *args, timeout=None, check=True):
        calls.append(args)
        if len(calls) > 1:
            raise subprocess.TimeoutExpired("bench", 1)
        out = Path(args[-1])
        out.write_text("design,step_rel,mem_rel\npreln,1,1\nmhc,1.2,1.5\ndca,1.3,1.4\nattn_res,1.1,1.05\n")

    monkeypatch.setattr(gc.Context, "bench", bench)
    figure, detail = gc.step_cost(gc.Context(tmp_path, "cuda", False, None))
    assert figure.endswith("at gpt2_small, batch 8, eager bf16; not reached: resnet50_224 eager bf16, "
                           "gpt2_small compiled bf16")
    assert detail["not_reached"] == ["resnet50_224 eager bf16", "gpt2_small compiled bf16"]
    assert detail["runs"][0]["relative"]["mhc"] == {"step_rel": 1.2, "mem_rel": 1.5}
    assert "--compile" in calls[2] and "bf16" in calls[0]
    calls.clear()
    calls.append(("pretend a first call",))  # now every call times out, the first table's too
    with pytest.raises(subprocess.TimeoutExpired):
        gc.step_cost(gc.Context(tmp_path, "cuda", False, None))


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
        ("gpu-tests", "skipped"), ("executor-per-gpu", "skipped"), ("cuda-oom", "skipped")]
    assert data["steps"][0]["figure"] == "the gpu-marked tests need CUDA"


CPU_FORMS = ("headline-resnet50", "gpt2-small-tokens", "torchrun-nccl", "imagefolder-loader", "resume-after-sigterm",
             "analyses", "full-scale-bills", "cost-gpt2-small")


@pytest.mark.gpucheck  # each check's CPU form: a few bench commands, 40-160 s on 2 busy cores; CI's own step
@pytest.mark.parametrize("name", CPU_FORMS)
def test_cpu_forms_of_the_checks_pass(name, tmp_path):
    """Every check that has a CPU form runs it (one check per test, so that xdist spreads them): a failure on the GPU
    machine is then CUDA's, not the check's."""
    done = check(str(tmp_path), "--device", "cpu", "--only", name)
    data = json.loads((tmp_path / "summary.json").read_text())
    assert done.returncode == 0, (tmp_path / "summary.md").read_text()
    assert [(s["name"], s["status"]) for s in data["steps"]] == [(name, "ok")]
    detail = data["steps"][0]["detail"]
    if name == "torchrun-nccl":
        assert detail["max_loss_gap"] <= 1e-3
    if name == "resume-after-sigterm":
        assert detail["resumed"] > 0
    if name == "headline-resnet50":
        assert detail["eager_harness"] > 0 and detail["registry_eager_harness"] > 0
    if name == "imagefolder-loader":
        # a short CPU run of the loader learns nothing (failed_to_learn); the check measures the input pipeline
        assert 0 <= detail["input_bound_fraction"] <= 1 and detail["status"] in ("ok", "failed_to_learn")
    if name == "gpt2-small-tokens":
        # A few CPU steps learn nothing (failed_to_learn); the check measures throughput.
        assert detail["tokens_per_s"] > 0 and detail["status"] in ("ok", "failed_to_learn")
    if name == "cost-gpt2-small":
        assert [(r["shape"], set(r["relative"]), r["precision"], r["mode"]) for r in detail["runs"]] == [
            ("cifar_resnet110", {"preact"}, "fp32", "eager"), ("resnet50_224", {"resnet_imagenet_a"}, "fp32", "eager")]
        assert detail["not_reached"] == [] and detail["runs"][1]["relative"]["resnet_imagenet_a"]["step_rel"] > 0
        assert (tmp_path / "cost-1.csv").read_text().startswith("design,")
    if name == "full-scale-bills":
        assert detail["bills"]["tiny"]["runs"] == 1 and detail["bills"]["tiny"]["steps"] == 20
        assert detail["not_reached"] == [] and not (tmp_path / "bills").exists()  # a dry run records nothing
