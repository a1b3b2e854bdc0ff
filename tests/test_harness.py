"""`bench run` end to end: rows, run JSONs, statuses, determinism, measurement phases."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest
import torch

from bench.cli import main
from bench.runs import runner as run_mod
from bench.runs import train as train_mod
from bench.runs.config import RunConfig
from bench.runs.results import COLUMNS, ResultsStore
from bench.runs.runner import execute


def cfg(**kw: object) -> RunConfig:
    base = dict(variant="resnet20", steps=4, batch_size=32, eval_every=2, measure=("flops", "throughput"),
                timing_warmup=0, timing_repeats=1, timing_steps=1, chance_band=0.0)  # 4 steps end at chance
    return RunConfig(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.slow
def test_run_writes_row_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--variant", "resnet20", "--steps", "4", "--batch-size", "32", "--eval-every", "2",
                 "--measure", "flops", "throughput", "--target", "0.05", "--results-dir", str(tmp_path),
                 "--timing-warmup", "0", "--timing-repeats", "2", "--timing-steps", "1", "--chance-band", "0"])
    assert code == 0
    out = capsys.readouterr().out
    assert "resnet20 (depth 20, 269,434 parameters) on digits, 4 steps" in out and "status ok" in out
    df = ResultsStore(tmp_path).load_leaderboard()
    assert list(df.columns) == list(COLUMNS) and len(df) == 1
    r = df.iloc[0]
    # in_chans=1 on digits: the 3x3 stem has 2x16x9 = 288 fewer weights than the RGB resnet20 (269,722)
    assert (r.variant, r.family, r.depth, r.params, r.task, r.steps, r.status) == (
        "resnet20", "resnet", 20, 269434, "digits", 4, "ok")
    assert r.epochs == pytest.approx(4 * 32 / 1437)
    assert 0 <= r.final_val_acc <= 1 and 0 <= r.final_train_acc <= 1 and r.best_val_acc >= r.final_val_acc
    assert r.steps_to_target == 2 and r.time_to_target_s > 0  # 5% accuracy is reached at the first evaluation
    assert r.train_flops_per_sample > 0 and r.train_samples_per_s > 0 and r.mfu > 0
    assert 2.5 < r.train_flops_per_sample / r.fwd_flops_per_sample < 3  # backward ~2x forward, minus the stem's
    c = RunConfig(variant="resnet20", steps=4, batch_size=32, eval_every=2, target=0.05)
    assert r.config_hash == c.config_hash() and r.run_id == c.run_id  # the hash in the run id, seed excluded
    assert math.isnan(r.peak_mem_mb) and r.torch_version == torch.__version__
    run = json.loads((tmp_path / "runs" / f"{r.run_id}.json").read_text())
    assert [p["step"] for p in run["curves"]["train"]] == [1, 2, 3, 4]
    assert [p["step"] for p in run["curves"]["eval"]] == [2, 4]
    assert run["config"]["variant"] == "resnet20" and run["env"]["torch"] == torch.__version__
    assert len(run["measurements"]["throughput"]["step_times_ms"]) == 2
    assert run["measurements"]["peak_source"].startswith("measured:")  # no datasheet peak for a CPU
    # FLOPs per sample: the counter's figure for one batch, divided by the batch; MFU uses forward + backward
    flops = run["measurements"]["flops"]
    assert flops["per_step"] == pytest.approx(r.train_flops_per_sample * 32)
    assert flops["fwd_per_step"] == pytest.approx(r.fwd_flops_per_sample * 32)
    assert r.achieved_tflops == pytest.approx(flops["per_step"] / (r.step_time_ms / 1e3) / 1e12)
    assert run["init"] == r.init and run["warmup_ended_at"] == 0  # no warm-up asked for


@pytest.mark.parametrize(("world_size", "timed", "method", "mfu"), [
    (1, True, "timed", 0.25),
    (2, True, "timed", 0.125),  # two devices ran the step: twice the peak (was 0.25, world_size times too high)
    (1, False, "training_loop", None),  # no timing phase: the loop's own average, said so, and no MFU from it
])
def test_a_rows_throughput_says_where_it_came_from_and_its_mfu_counts_every_device(
        world_size: int, timed: bool, method: str, mfu: float | None) -> None:
    s = train_mod.setup(cfg(measure=()))
    rec = train_mod.Record(steps_done=4, train_time_s=0.2)  # the training loop: 50 ms per step
    rec.measurements = {"flops": {"per_step": 4e9}, "peak_flops": 1.6e12}
    if timed:
        rec.measurements["throughput"] = {"samples_per_s": 3200.0, "median_step_ms": 10.0}
    row = run_mod.build_row(dataclasses.replace(s.cfg, world_size=world_size), s, rec, {"device_name": "cpu",
                            "torch": torch.__version__, "git_sha": "x"}, 1.0)
    assert row["throughput_method"] == method
    assert row["step_time_ms"] == (10.0 if timed else 50.0)
    assert row["train_samples_per_s"] == (3200.0 if timed else 32 / 0.05)
    assert row["mfu"] == (pytest.approx(mfu) if mfu else None)
    assert row["achieved_tflops"] == (pytest.approx(0.4) if timed else None)  # 4e9 FLOPs in 10 ms, the whole step


def test_a_warmup_in_epochs_is_made_steps_on_the_runs_task() -> None:
    s = train_mod.setup(cfg(warmup_epochs=1.0, steps=60, measure=()))
    assert s.warmup_steps == math.ceil(1437 / 32)  # digits: 1,437 training images at batch 32
    runner = train_mod.StepRunner(s.cfg, s, s.model, train_mod.batch_generator(s))
    assert runner.opt.param_groups[0]["lr"] == pytest.approx(0.1 / 45)  # the first step of a linear warm-up


def test_a_finished_step_runner_frees_its_optimiser_without_the_cycle_collector() -> None:
    """Its schedule once held the runner (a reference cycle): a measuring phase's optimiser state lived on until the
    cycle collector ran, and a CUDA memory phase after it counted that state in the run's peak."""
    import gc
    import weakref

    s = train_mod.setup(cfg(steps=2, measure=(), optimizer="adamw"))
    gc.collect()
    gc.disable()
    try:
        runner = train_mod.StepRunner(s.cfg, s, s.model, train_mod.batch_generator(s))
        runner()  # one step: the optimiser holds its state now
        assert runner.opt.state and runner.warmup_end == s.warmup_steps
        optimiser = weakref.ref(runner.opt)
        del runner
        assert optimiser() is None
    finally:
        gc.enable()


def test_flops_match_forward_backward_formula(tmp_path: Path) -> None:
    """resnet20's FLOPs at 8x8: the forward column is one sample's forward; backward is twice forward, except
    that the stem conv computes no input gradient (the image needs none), so train = 3 x forward - the stem's."""
    from torch.utils.flop_counter import FlopCounterMode

    import variants

    model = variants.create("resnet20", in_chans=1)
    with FlopCounterMode(display=False) as c:
        model(torch.randn(1, 1, 8, 8))
    result = execute(cfg(measure=("flops",)), tmp_path)
    stem = 2 * 8 * 8 * 16 * 1 * 3 * 3  # multiply-adds x 2 of a 3x3 conv, 1 -> 16 channels, 8x8 output
    assert result["row"]["fwd_flops_per_sample"] == c.get_total_flops()
    assert result["row"]["train_flops_per_sample"] == 3 * c.get_total_flops() - stem


def test_forward_flops_of_resnet50_match_the_published_figure() -> None:
    """timm lists ResNet-50 at 224x224 as 4.09 GMACs: 8.18e9 FLOPs at 2 per multiply-add (counted on meta)."""
    import variants
    from bench.runs import measure

    with torch.device("meta"):
        model = variants.create("resnet50")
        x, y = torch.empty(2, 3, 224, 224), torch.zeros(2, dtype=torch.long)
    fwd, train = measure.count_flops(lambda: torch.nn.functional.cross_entropy(model(x), y), torch.device("cpu"))
    assert fwd / 2 == pytest.approx(8.18e9, rel=0.01)
    assert train / fwd == pytest.approx(3, rel=0.02)  # backward = 2x forward, less the stem's input gradient


@pytest.mark.slow
def test_memory_phase_measures_a_real_peak(tmp_path: Path) -> None:
    result = execute(cfg(measure=("memory",), steps=1), tmp_path)
    mem = result["measurements"]["memory"]
    assert mem["method"] == "cpu_rss_peak_minus_baseline_subprocess" and mem["exact"]
    assert 0 < mem["peak_mb"] < mem["process_peak_mb"]
    assert result["row"]["peak_mem_mb"] == mem["peak_mb"]


def test_diverging_run_is_recorded(tmp_path: Path) -> None:
    result = execute(cfg(lr=1e6, steps=20, eval_every=20, schedule="constant", measure=()), tmp_path)
    row = result["row"]
    assert row["status"] == "diverged"
    assert "at step" in row["error"] and ("nan" in row["error"] or "exceeded" in row["error"])
    assert row["steps"] < 20 and row["final_val_acc"] is None
    assert ResultsStore(tmp_path).load_leaderboard()["status"].tolist() == ["diverged"]


@pytest.mark.parametrize(
    ("exc", "status", "message"),
    [
        (torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "oom", "OutOfMemoryError"),
        (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes"), "oom", "can't"),
        (RuntimeError("shape mismatch\nin layer 3"), "error", "RuntimeError: shape mismatch in layer 3"),
    ],
)
def test_failures_become_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exc: Exception, status: str,
                              message: str) -> None:
    calls = {"n": 0}
    real = train_mod.StepRunner.__call__

    def flaky(self: train_mod.StepRunner) -> torch.Tensor:
        calls["n"] += 1
        if calls["n"] == 3:
            raise exc
        return real(self)

    monkeypatch.setattr(train_mod.StepRunner, "__call__", flaky)
    result = execute(cfg(measure=(), steps=5, eval_every=1), tmp_path)
    row = result["row"]
    assert row["status"] == status and message in row["error"] and "\n" not in row["error"]
    assert row["steps"] == 2 and len(result["curves"]["train"]) == 2
    assert len(ResultsStore(tmp_path).load_leaderboard()) == 1


@pytest.mark.slow
def test_deterministic_runs_are_bit_identical(tmp_path: Path) -> None:
    c = cfg(deterministic=True, steps=6, measure=("flops", "throughput"), variant="preact", depth=8,
            model_args=(("drop_path_rate", 0.2),))
    a = execute(c, tmp_path / "a")["curves"]
    b = execute(c, tmp_path / "b")["curves"]
    assert [p["loss"] for p in a["train"]] == [p["loss"] for p in b["train"]]
    assert a["eval"][-1]["val_loss"] == b["eval"][-1]["val_loss"]
    other = execute(cfg(deterministic=True, steps=6, measure=(), variant="preact", depth=8, seed=1,
                        model_args=(("drop_path_rate", 0.2),)), tmp_path / "c")["curves"]
    assert [p["loss"] for p in other["train"]] != [p["loss"] for p in a["train"]]
    torch.use_deterministic_algorithms(False)


@pytest.mark.slow
def test_measuring_does_not_change_training(tmp_path: Path) -> None:
    with_measure = execute(cfg(steps=3, measure=("flops", "throughput")), tmp_path / "a")
    without = execute(cfg(steps=3, measure=()), tmp_path / "b")
    assert [p["loss"] for p in with_measure["curves"]["train"]] == [p["loss"] for p in without["curves"]["train"]]


def test_probes_recorded_and_off_during_timing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.runs import measure, probes

    state = {"timing": False, "probe_calls": 0}
    real_time_steps, real_probe = measure.time_steps, probes.probe

    def timed(*a: object, **k: object) -> list[float]:
        state["timing"] = True
        try:
            return real_time_steps(*a, **k)  # type: ignore[arg-type]
        finally:
            state["timing"] = False

    def watched(*a: object, **k: object) -> list[dict]:
        assert not state["timing"], "a probe ran inside the timed region"
        state["probe_calls"] += 1
        return real_probe(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(measure, "time_steps", timed)
    monkeypatch.setattr(probes, "probe", watched)
    result = execute(cfg(steps=4, probe_every=2, measure=("throughput",)), tmp_path)
    steps = sorted({p["step"] for p in result["probes"]})
    assert steps == [0, 2, 4] and state["probe_calls"] == 3
    layers = {p["layer"] for p in result["probes"] if p["metric"] == "grad_norm" and p["step"] == 0}
    assert len(layers) == 9  # resnet20: 3 stages x 3 residual units


def test_variant_task_mismatch_and_model_args(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"variant 'postln' \(transformer\) cannot run image task 'digits'"):
        execute(cfg(variant="postln"), tmp_path)
    with pytest.raises(ValueError, match=r"conflicts with what task 'digits' sets"):
        execute(cfg(model_args=(("num_classes", 5),)), tmp_path)
    with pytest.raises(ValueError, match="give the depth once"):
        execute(cfg(variant="resnet", depth=20, model_args=(("depth", 20),)), tmp_path)
    with pytest.raises(ValueError, match="timm models take images"):
        execute(cfg(variant="timm:resnet18", task="copy"), tmp_path)
    assert not (tmp_path / "leaderboard.csv").exists()


def test_transformer_on_text_task(tmp_path: Path) -> None:
    c = cfg(variant="preln", depth=2, task="copy", optimizer="adamw", lr=1e-3, seq_len=32, train_size=64,
            val_size=32, steps=3, eval_every=3, model_args=(("d_model", 32), ("n_heads", 2), ("d_ff", 64)))
    row = execute(c, tmp_path)["row"]
    assert row["status"] == "ok" and row["family"] == "transformer"
    assert row["train_tokens_per_s"] == pytest.approx(row["train_samples_per_s"] * 32)
    assert row["train_flops_per_sample"] > row["fwd_flops_per_sample"] > 0
    assert row["init"] == "xavier"  # the transformer family's default scheme, read from the registry
    gpt2 = execute(dataclasses.replace(c, model_args=(*c.model_args, ("init", "gpt2")), measure=()), tmp_path)
    assert gpt2["row"]["init"] == "gpt2" and gpt2["init"] == "gpt2"
    assert ResultsStore(tmp_path).load_leaderboard().set_index("run_id").loc[gpt2["run_id"], "init"] == "gpt2"


def test_init_is_read_from_the_registry_without_special_cases() -> None:
    def init(variant: str, **model_kwargs: object) -> str:
        return run_mod.init_scheme(RunConfig(variant=variant), model_kwargs)

    assert init("deepnorm") == "deepnorm"  # a preset whose paper is an init pins it
    assert init("preln", init="normal") == "normal"  # the run's own keyword wins over the default
    assert init("timm:resnet18") == "default"  # no init keyword: the model's own default


def test_classify_failure() -> None:
    assert run_mod.classify_failure(train_mod.Diverged(3, "x")) == "diverged"
    assert run_mod.classify_failure(ValueError("x")) == "error"


@pytest.mark.parametrize("name", ["digits", "synthetic", "text", "tinytext", "copy", "reverse", "recall"])
def test_every_task_has_an_epoch_length(name: str) -> None:
    from bench.runs.tasks import TaskOptions, get

    task = get(name, options=TaskOptions(train_size=64, val_size=16, seq_len=16, image_size=8))
    assert task.num_train > 0  # epochs in the row and --epochs both divide by it


def test_a_failing_measurement_phase_does_not_stop_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.runs import measure

    def killed(*a: object, **k: object) -> dict:
        raise RuntimeError("memory probe subprocess was killed (SIGKILL): out of memory?")

    monkeypatch.setattr(measure, "cpu_peak_memory_subprocess", killed)
    result = execute(cfg(measure=("memory", "flops")), tmp_path)
    assert result["row"]["status"] == "ok" and result["row"]["steps"] == 4
    assert result["measurements"]["memory"] == {"error": "RuntimeError: memory probe subprocess was killed "
                                                         "(SIGKILL): out of memory?"}
    assert result["row"]["peak_mem_mb"] is None and result["row"]["train_flops_per_sample"] > 0


# -- bad input is found before anything runs -------------------------------------------------------------------


def test_bad_results_dir_or_leaderboard_refused_before_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    def no_setup(*a: object) -> None:
        raise AssertionError("setup ran before the results directory was checked")

    monkeypatch.setattr(run_mod, "setup", no_setup)
    (tmp_path / "file").write_text("x")
    assert main(["run", "--variant", "resnet20", "--steps", "1", "--results-dir", str(tmp_path / "file")]) == 2
    err = capsys.readouterr().err
    assert err == f"error: results directory {tmp_path / 'file'} is an existing file; pass another --results-dir\n"
    board = tmp_path / "res" / "leaderboard.csv"
    board.parent.mkdir()
    board.write_text(",".join(COLUMNS) + "\n" + 'a,"unterminated\n')
    b = re.escape(str(board))
    with pytest.raises(ValueError, match=f"{b} line 2 is damaged .*fix or delete line 2 of {b}"):
        execute(cfg(), tmp_path / "res")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["file", "leaderboard.csv", "res"]


# -- He 2015 §4.2: warm up until the training error is below 80% --------------------------------------------------


def test_warmup_ends_at_the_first_batch_below_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scripted batch errors 1.0, 0.9, 0.7: the warm-up (cap 50) ends after the third step, then full lr."""
    c = cfg(lr=0.1, schedule="constant", warmup_kind="constant", warmup_steps=50, warmup_factor=0.1,
            warmup_until_error=0.8)
    s = train_mod.setup(c)
    errors = iter([1.0, 0.9, 0.7])
    seen: list[int] = []

    def scripted(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        seen.append(len(y))
        return torch.tensor(round((1 - next(errors)) * len(y)))

    monkeypatch.setattr(s.task, "correct", scripted)
    runner = train_mod.StepRunner(c, s, s.model, train_mod.batch_generator(s),
                                  watch_warmup_error=True)
    lrs = []
    for _ in range(5):
        lrs.append(runner.sched.get_last_lr()[0])
        runner()
    assert lrs == pytest.approx([0.01, 0.01, 0.01, 0.1, 0.1])
    assert runner.warmup_end == 3 and seen == [32, 32, 32]  # no error computed once the warm-up is over
    timing = train_mod.StepRunner(c, s, s.model, train_mod.batch_generator(s))
    for _ in range(3):
        timing()  # the timing phase's runner never computes the error (no host sync)
    assert timing.warmup_end == 50 and seen == [32, 32, 32]


def test_warmup_until_error_in_a_real_run(tmp_path: Path) -> None:
    """A threshold of 100% error ends the warm-up at the first batch with any correct prediction."""
    c = cfg(steps=8, eval_every=8, lr=0.1, warmup_kind="constant", warmup_steps=6, warmup_factor=0.1,
            warmup_until_error=1.0, schedule="constant", measure=())
    result = execute(c, tmp_path)
    ended = result["warmup_ended_at"]
    assert result["row"]["status"] == "ok" and 1 <= ended < 6
    lrs = [p["lr"] for p in result["curves"]["train"]]
    assert lrs == pytest.approx([0.01] * ended + [0.1] * (8 - ended))
    capped = execute(dataclasses.replace(c, warmup_until_error=1e-9), tmp_path)  # never below it: the cap ends it
    assert capped["warmup_ended_at"] == 6
    assert [p["lr"] for p in capped["curves"]["train"]] == pytest.approx([0.01] * 6 + [0.1] * 2)


@pytest.mark.parametrize(
    ("chunk", "start", "step", "message"),
    [
        ([2.0, 2.5, 20.5], 10, 13, "loss 20.5 exceeded 10 x first-step loss 2 at step 13"),  # finite but exploding
        ([2.0, 25.0, 30.0], 0, 2, "loss 25 exceeded 10 x first-step loss 2 at step 2"),  # the first of two above it
        ([2.0, float("nan"), 30.0], 0, 2, "loss became nan at step 2"),  # the first bad value wins
        ([float("nan"), float("inf")], 0, 1, "loss became nan at step 1"),
        ([float("inf")], 4, 5, "loss became inf at step 5"),
    ],
)
def test_divergence_rule_names_the_first_bad_step(chunk: list[float], start: int, step: int, message: str) -> None:
    with pytest.raises(train_mod.Diverged, match=re.escape(message)) as exc:
        train_mod._check_divergence(torch.tensor(chunk), start, 2.0, 10.0)
    assert exc.value.step == step


def test_divergence_rule_allows_loss_up_to_the_factor() -> None:
    train_mod._check_divergence(torch.tensor([2.0, 19.99, 20.0]), 0, 2.0, 10.0)  # 10 x 2.0 is not above it
    train_mod._check_divergence(torch.tensor([1e9]), 0, math.inf, 10.0)  # no finite first loss: no ratio rule


# -- steps to target: the first evaluation at or above it, never a later one -----------------------------------------


def _scripted_eval_point(monkeypatch: pytest.MonkeyPatch, val_accs: list[float],
                         target: float | None) -> train_mod.Record:
    """Evaluation points at steps 2, 4, 6 (train time 1, 2, 3 s) whose validation accuracies are ``val_accs``."""
    from types import SimpleNamespace

    accs = iter(val_accs)
    monkeypatch.setattr(train_mod, "evaluate", lambda s, model, batches: (1.0, next(accs) if batches == "val" else 0.0))
    task = SimpleNamespace(num_train=100, val_batches=lambda b: "val", train_eval_batches=lambda b: "train",
                           extra_metrics=lambda loss: {})
    cfg = SimpleNamespace(batch_size=10, global_batch=10, target=target, target_loss=None, eval_batches=None)
    s = SimpleNamespace(model=torch.nn.Identity(), task=task, cfg=cfg)  # a model without residual scalars
    rec = train_mod.Record()
    for step in (2, 4, 6):
        rec.train_time_s = step / 2
        train_mod._eval_point(s, rec, step)  # type: ignore[arg-type]
    assert [p["val_acc"] for p in rec.eval_curve] == val_accs
    return rec


def test_steps_to_target_is_the_first_evaluation_that_reaches_it(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = _scripted_eval_point(monkeypatch, [0.4, 0.5, 0.7], target=0.5)  # exactly the target counts as reached
    assert (rec.steps_to_target, rec.time_to_target_s) == (4, 2.0)  # not the later, higher evaluation
    never = _scripted_eval_point(monkeypatch, [0.4, 0.45, 0.49], target=0.5)
    assert (never.steps_to_target, never.time_to_target_s) == (None, None)  # not reached: no value, not the last step
    untargeted = _scripted_eval_point(monkeypatch, [0.4, 0.5, 0.7], target=None)
    assert untargeted.steps_to_target is None


def test_warmup_goes_on_while_the_error_equals_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    """"Below 80%": a batch at exactly 80% error (8 of 40 right) does not end the warm-up; 75% does."""
    c = cfg(variant="resnet", depth=8, batch_size=40, lr=0.1, schedule="constant", warmup_kind="constant",
            warmup_steps=50, warmup_factor=0.1, warmup_until_error=0.8)
    s = train_mod.setup(c)
    correct = iter([8, 10])
    monkeypatch.setattr(s.task, "correct", lambda logits, y: torch.tensor(next(correct)))
    runner = train_mod.StepRunner(c, s, s.model, train_mod.batch_generator(s),
                                  watch_warmup_error=True)
    runner()
    assert runner.warmup_end == 50  # 1 - 8/40 = 0.8: not below 0.8
    runner()
    assert runner.warmup_end == 2


@pytest.mark.parametrize(("warmup_steps", "ended_at"), [(3, 3), (4, None), (0, 0)])
def test_warmup_ended_at_is_none_for_a_run_that_stopped_inside_its_warmup(tmp_path: Path, warmup_steps: int,
                                                                       ended_at: int | None) -> None:
    """A 3-step run: a 3-step warm-up was made (3); a 4-step one was not (None); no warm-up is 0 steps of it."""
    c = cfg(variant="resnet", depth=8, steps=3, eval_every=3, warmup_steps=warmup_steps, measure=())
    result = execute(c, tmp_path)
    assert result["row"]["status"] == "ok" and result["warmup_ended_at"] == ended_at


def test_git_sha_is_dirty_for_code_changes_but_not_for_the_results_directory(tmp_path: Path) -> None:
    import subprocess

    from bench.runs.env import git_sha

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "leaderboard.csv").write_text("run_id\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    sha = git_sha(tmp_path)
    assert len(sha) == 40 and not sha.endswith("-dirty")
    (tmp_path / "results" / "leaderboard.csv").write_text("run_id\nr1\n")  # a sweep appended a row
    assert git_sha(tmp_path) == sha
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_sha(tmp_path) == f"{sha}-dirty"
    assert git_sha(tmp_path / "results" / "nowhere") == "unknown"


def test_cost_figures_measured_on_another_machine_are_not_reused() -> None:
    """A sweep spread over a cluster (Ray) may hand a run the figures another node measured: they describe that
    node only, so the run measures its own; figures of this machine are reused as before."""
    from bench.runs.env import environment, machine_id

    c = cfg(steps=1, measure=("flops",))
    here = machine_id(environment(torch.device("cpu")))
    theirs = {"flops": {"per_step": 1.0, "train_per_sample": 1.0, "fwd_per_step": 1.0, "fwd_per_sample": 1.0,
                        "method": "elsewhere"}}
    elsewhere = run_mod.run_config(c, reuse=run_mod.Reuse("other-run", theirs, machine="node-7/NVIDIA H200"))
    assert elsewhere["cost_source"] == c.run_id and elsewhere["measurements"]["flops"]["method"] != "elsewhere"
    local = run_mod.run_config(c, reuse=run_mod.Reuse("other-run", theirs, machine=here))
    assert local["cost_source"] == "other-run" and local["measurements"] == theirs
