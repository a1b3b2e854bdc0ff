"""Long runs survive (bench.runs.resume): a run stopped by SIGTERM, or killed with SIGKILL after a periodic
checkpoint, and rerun ends exactly as the same run uninterrupted — every recorded value and every weight; gradient
accumulation follows the large batch; a preempted sweep continues its runs; every bad input is one error line."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _nets import write

from bench.cli import main
from bench.runs import resume
from bench.runs import runner as run_mod
from bench.runs.config import RunConfig
from bench.runs.results import ResultsStore

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.usefixtures("clean_plugins")  # tests/conftest.py

# The stopper plugin (tests/stopper_plugin.py, shared with the GPU check): a ReZero Transformer with dropout whose
# training forward sends its own process a signal at a forward the test chooses, once.
STOPPER = Path(__file__).parent / "stopper_plugin.py"

# Evaluations read 512 tokens (not the default 8,192): what is compared across a resume is the same, at an eighth
# of the evaluations' cost.
RUN = ["run", "--variant", "stopper", "--task", "tinytext", "--steps", "23", "--batch-size", "4", "--seq-len", "16",
       "--eval-every", "5", "--eval-tokens", "512", "--optimizer", "adamw", "--lr", "3e-3", "--warmup-steps", "4",
       "--probe-every", "7", "--deterministic", "--measure", "--save-checkpoint", "--quiet"]


def plugin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, at: int, sig: str = "SIGTERM") -> Path:
    """The stopper plugin, set to send ``sig`` at training forward ``at`` (of each process) once; its path."""
    marker = tmp_path / "stop-once"
    marker.touch()
    for name, value in (("MARKER", str(marker)), ("AT", str(at)), ("SIGNAL", sig)):
        monkeypatch.setenv(f"RESBENCH_STOP_{name}", value)
    return STOPPER


def recorded(res: Path) -> dict:
    """Everything a run records that does not measure time: the row's results, the curves, the probes, the learned
    residual scalars, the trained weights."""
    (run,) = ResultsStore(res).load_runs()
    timing = ("wall_time_s", "created_at", "train_samples_per_s", "train_tokens_per_s", "step_time_ms",
              "achieved_tflops", "time_to_target_s", "eval_time_s",
              "resumed_from_step", "restarts", "run_id", "git_sha", "device_name")
    row = {k: v for k, v in run["row"].items() if k not in timing}
    evals = [{k: v for k, v in p.items() if k != "train_time_s"} for p in run["curves"]["eval"]]
    weights = torch.load(res / "checkpoints" / f"{run['run_id']}.pt", weights_only=True)["state_dict"]
    return {"row": row, "train": run["curves"]["train"], "eval": evals, "probes": run["probes"],
            "scalars": run["residual_scalars"], "weights": weights}


def assert_same(a: dict, b: dict) -> None:
    assert a["row"] == b["row"]
    assert a["train"] == b["train"] and a["eval"] == b["eval"] and a["probes"] == b["probes"]
    assert a["scalars"] == b["scalars"] and {r["step"] for r in a["scalars"]} == {p["step"] for p in a["eval"]}
    assert a["weights"].keys() == b["weights"].keys()
    assert all(torch.equal(a["weights"][k], b["weights"][k]) for k in a["weights"])


def test_a_run_stopped_by_sigterm_and_rerun_ends_exactly_as_uninterrupted(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    at = random.Random(7).randint(3, 18)  # a step inside the run, away from its ends
    spec = str(plugin(monkeypatch, tmp_path, at))
    code = main([*RUN, "--plugin", spec, "--results-dir", str(tmp_path / "cut")])
    err = capsys.readouterr().err
    assert code == resume.EXIT_PREEMPTED, err
    assert "preempted: stopped by SIGTERM at step" in err and "rerun the same command to continue" in err
    assert not (tmp_path / "cut" / "leaderboard.csv").exists()  # an unfinished run has no row
    assert list((tmp_path / "cut" / "checkpoints").glob("*/step-*.pt"))
    assert main([*RUN, "--plugin", spec, "--results-dir", str(tmp_path / "cut")]) == 0  # the same command
    (row,) = ResultsStore(tmp_path / "cut").load_runs()
    assert row["row"]["resumed_from_step"] > 0 and row["row"]["restarts"] == 1
    assert not list((tmp_path / "cut" / "checkpoints").glob("*/step-*.pt"))  # recorded: the states are gone
    assert main([*RUN, "--plugin", spec, "--results-dir", str(tmp_path / "whole")]) == 0  # marker gone: no stop
    assert_same(recorded(tmp_path / "cut"), recorded(tmp_path / "whole"))


@pytest.mark.slow  # three interpreters started from scratch: about 30 s
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SIGKILL of a child process")
def test_a_run_killed_with_sigkill_resumes_from_its_last_periodic_checkpoint(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    spec = str(plugin(monkeypatch, tmp_path, 16, "SIGKILL"))  # the 16th training forward (2 probes among them): step 14
    cmd = [sys.executable, "-m", "bench", *RUN, "--checkpoint-every", "4", "--plugin", spec]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cut = subprocess.run([*cmd, "--results-dir", str(tmp_path / "cut")], env=env, capture_output=True, text=True)
    assert cut.returncode == -signal.SIGKILL, cut.stderr
    (kept,) = (tmp_path / "cut" / "checkpoints").iterdir()
    assert sorted(p.name for p in kept.glob("step-*.pt")) == ["step-000000008.pt", "step-000000012.pt"]  # keep 2
    again = subprocess.run([*cmd, "--results-dir", str(tmp_path / "cut")], env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert ResultsStore(tmp_path / "cut").load_runs()[0]["row"]["resumed_from_step"] == 12
    whole = subprocess.run([*cmd, "--results-dir", str(tmp_path / "whole")], env=env, capture_output=True, text=True)
    assert whole.returncode == 0, whole.stderr
    assert_same(recorded(tmp_path / "cut"), recorded(tmp_path / "whole"))


def test_gradient_accumulation_follows_the_large_batch(tmp_path: Path) -> None:
    """Four micro-batches of 8 sum to the gradient of one batch of 32 (a model without BatchNorm): the same
    samples (the global batch is drawn whole), the same steps, to floating-point tolerance."""
    base = ["run", "--variant", "preln", "--depth", "2", "--task", "tinytext", "--steps", "6", "--seq-len", "16",
            "--model-arg", "d_model=16", "--model-arg", "n_heads=2", "--optimizer", "adamw", "--lr", "3e-3",
            "--eval-every", "3", "--eval-tokens", "512", "--measure", "--quiet"]
    assert main([*base, "--batch-size", "32", "--results-dir", str(tmp_path / "big")]) == 0
    assert main([*base, "--batch-size", "8", "--grad-accum", "4", "--results-dir", str(tmp_path / "acc")]) == 0
    assert main([*base, "--batch-size", "8", "--global-batch-size", "32", "--results-dir", str(tmp_path / "g")]) == 0
    (big,), (acc,), (g,) = (ResultsStore(tmp_path / d).load_runs() for d in ("big", "acc", "g"))
    assert acc["row"]["grad_accum"] == 4 and acc["row"]["batch_size"] == 8 and acc["run_id"] == g["run_id"]
    assert acc["row"]["epochs"] == pytest.approx(big["row"]["epochs"])  # epochs count global batches
    losses = [[p["loss"] for p in r["curves"]["train"]] for r in (big, acc)]
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    vals = [[p["val_loss"] for p in r["curves"]["eval"]] for r in (big, acc)]
    assert vals[0] == pytest.approx(vals[1], rel=1e-5)


SWEEP = '''
name = "long"
[base]
variant = "stopper"
task = "tinytext"
steps = 12
batch_size = 4
seq_len = 16
eval_every = 4
eval_tokens = 512
optimizer = "adamw"
lr = 3e-3
deterministic = true
measure = []
chance_band = 0.0
[grid]
seed = [0, 1, 2]
'''


@pytest.mark.slow  # sweep drivers started from scratch: about 15 s
def test_a_preempted_sweep_continues_its_runs_when_rerun(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """One run of the sweep is stopped by SIGTERM mid-training: no row, its state saved, the sweep says how to go
    on (exit status 75); rerun, it continues that run (its row says from which step) and skips the others."""
    spec = str(plugin(monkeypatch, tmp_path, 6))
    study = write(tmp_path / "long.toml", SWEEP)
    args = ["sweep", str(study), "--plugin", spec, "--results-dir", str(tmp_path / "res")]
    code = main(args)
    out, err = capsys.readouterr()
    assert code == resume.EXIT_PREEMPTED, out + err
    assert "preempted: stopped by SIGTERM at step" in out and "1 run(s) preempted" in out
    assert "continue them with: python -m bench sweep" in out and "were preempted (their state is saved)" in err
    assert len(ResultsStore(tmp_path / "res").load_runs()) == 2
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.count("already recorded, skipped") == 2
    rows = ResultsStore(tmp_path / "res").load_leaderboard()
    assert len(rows) == 3 and set(rows["status"]) == {"ok"}
    resumed = rows[rows["resumed_from_step"].notna()]
    assert len(resumed) == 1 and resumed["resumed_from_step"].iloc[0] > 0 and resumed["restarts"].iloc[0] == 1


def test_requeue_continues_a_preempted_run_within_the_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    spec = str(plugin(monkeypatch, tmp_path, 6))
    study = write(tmp_path / "long.toml", SWEEP.replace("seed = [0, 1, 2]", "seed = [0]"))
    code = main(["sweep", str(study), "--plugin", spec, "--requeue", "--results-dir", str(tmp_path / "res")])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert "requeued" in out
    (run,) = ResultsStore(tmp_path / "res").load_runs()
    assert run["row"]["status"] == "ok" and run["row"]["resumed_from_step"] > 0


def _state_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
               ) -> tuple[list[str], Path]:
    """A preempted run's arguments and its checkpoint directory."""
    spec = str(plugin(monkeypatch, tmp_path, 8))
    args = [*RUN, "--checkpoint-every", "3", "--plugin", spec, "--results-dir", str(tmp_path / "res")]
    assert main(args) == resume.EXIT_PREEMPTED
    capsys.readouterr()
    (folder,) = (tmp_path / "res" / "checkpoints").iterdir()
    return args, folder


def test_a_resumed_run_says_which_phases_it_could_not_measure(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """--measure is no part of a run's identity: a run stopped while measuring flops only and rerun asking for
    memory too once resumed without it and recorded nothing, its config saying memory was asked for."""
    spec = str(plugin(monkeypatch, tmp_path, 8))
    only_flops = [a if a != "--measure" else "--measure=flops" for a in RUN]
    res = ["--checkpoint-every", "3", "--plugin", spec, "--results-dir", str(tmp_path / "res")]
    assert main([*only_flops, *res]) == resume.EXIT_PREEMPTED
    capsys.readouterr()
    assert main([*[a for a in only_flops if a != "--measure=flops"], "--measure", "flops", "memory", *res]) == 0
    (run,) = ResultsStore(tmp_path / "res").load_runs()
    step = run["row"]["resumed_from_step"]
    assert "per_step" in run["measurements"]["flops"]
    why = (f"not measured: this run resumed from step {step}, saved by a run measuring flops; rerun it with "
           "--no-resume to measure memory")
    assert run["measurements"]["memory"] == {"error": why}
    assert run_mod.measurement_failures(run) == {"memory": run["measurements"]["memory"]["error"]}


def test_a_damaged_newest_checkpoint_gives_way_to_the_one_before(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    args, folder = _state_dir(tmp_path, capsys, monkeypatch)
    newest, older = sorted(folder.glob("step-*.pt"), reverse=True)[:2]
    newest.write_bytes(newest.read_bytes()[:100])  # truncated, as by a full disk
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"warning: checkpoint {newest} is damaged" in err
    (run,) = ResultsStore(tmp_path / "res").load_runs()
    assert run["row"]["resumed_from_step"] == int(older.stem.split("-")[1])


def test_checkpoints_that_cannot_be_resumed_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    args, folder = _state_dir(tmp_path, capsys, monkeypatch)
    states = sorted(folder.glob("step-*.pt"))
    payload = torch.load(states[-1], weights_only=True)
    for path in states:
        path.unlink()
    foreign = folder / "step-000000100.pt"
    torch.save({**payload, "torch": "1.13.1"}, foreign)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "was written by torch 1.13.1" in err and "of another torch major version is not resumed" in err
    torch.save({**payload, "config_hash": "00000000"}, foreign)
    assert main(args) == 2
    assert "belongs to another configuration" in capsys.readouterr().err
    foreign.write_bytes(b"not a checkpoint")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "every checkpoint in" in err and "is damaged; delete the directory to start the run over" in err
    assert foreign.read_bytes() == b"not a checkpoint"  # nothing lost
    assert not (tmp_path / "res" / "leaderboard.csv").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--grad-accum", "0"], "--grad-accum must be an integer >= 1, got 0"),
    (["--batch-size", "8", "--global-batch-size", "20"], "--global-batch-size 20 is not a multiple of --batch-size 8"),
    (["--batch-size", "8", "--global-batch-size", "32", "--grad-accum", "2"], "asks for 4 micro-batches, but"),
    (["--checkpoint-every", "0"], "--checkpoint-every must be an integer >= 1, got 0"),
    (["--checkpoint-minutes", "-1"], "--checkpoint-minutes must be a finite number > 0, got -1.0"),
    (["--keep-checkpoints", "0"], "--keep-checkpoints must be an integer >= 1, got 0"),
    (["--target", "0.5", "--target-loss", "3.28"], "give --target (an accuracy) or --target-loss, not both"),
])  # fmt: skip
def test_bad_long_run_options(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
                              ) -> None:
    code = main(["run", "--variant", "resnet", "--depth", "8", *args, "--results-dir", str(tmp_path)])
    assert code == 2 and message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_an_unwritable_results_directory_is_refused_before_training(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "res").write_text("a file, not a directory")
    code = main(["run", "--variant", "resnet", "--depth", "8", "--checkpoint-every", "2", "--results-dir",
                 str(tmp_path / "res")])
    assert code == 2 and "is an existing file" in capsys.readouterr().err


def test_the_state_holds_every_random_stream() -> None:
    import numpy as np

    before = resume.rng_state()
    drawn = (torch.rand(3), np.random.rand(3), random.random())
    resume.set_rng_state(before)
    again = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(drawn[0], again[0]) and (drawn[1] == again[1]).all() and drawn[2] == again[2]
    assert RunConfig(variant="a", checkpoint_every=5, keep_checkpoints=3).run_id == RunConfig(variant="a").run_id
    payload = json.dumps({k: str(type(v)) for k, v in before.items()})
    assert "torch" in payload and "numpy" in payload and "python" in payload


@pytest.mark.slow  # four torchrun jobs of two processes: about 60 s
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="torchrun on loopback")
def test_a_torchrun_job_stopped_by_sigterm_resumes_on_every_rank_as_uninterrupted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One rank gets SIGTERM: every rank stops at the same step, rank 0 saves, every rank loads it on rerun, and
    the job ends as the same 2-process job uninterrupted."""
    from test_distributed import bench as launch

    spec = str(plugin(monkeypatch, tmp_path, 9))
    args = [*RUN, "--plugin", spec]
    cut = launch([*args, "--results-dir", str(tmp_path / "cut")], nproc=2)
    assert cut.returncode != 0 and "stopped by SIGTERM at step" in cut.stderr, cut.stderr
    assert not (tmp_path / "cut" / "leaderboard.csv").exists()
    again = launch([*args, "--results-dir", str(tmp_path / "cut")], nproc=2)
    assert again.returncode == 0, again.stderr
    (run,) = ResultsStore(tmp_path / "cut").load_runs()
    assert run["row"]["world_size"] == 2 and run["row"]["resumed_from_step"] > 0
    whole = launch([*args, "--results-dir", str(tmp_path / "whole")], nproc=2)
    assert whole.returncode == 0, whole.stderr
    assert_same(recorded(tmp_path / "cut"), recorded(tmp_path / "whole"))
