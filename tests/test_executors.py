"""Executors and the sweep driver (bench.sweeps.executors, bench.sweeps.driver.run_sweep): isolated, parallel,
resumable sweeps.

Real processes throughout: a run that kills itself with SIGKILL (a plugin variant whose forward does it on one
seed), a driver stopped with SIGINT and another killed with SIGKILL from outside, then resumed. Also: cost
figures measured once per model configuration and reused (named in ``cost_source``), or measured in every run
on request; bad executor options; how the machine is split between jobs.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _nets import write

from bench.cli import main
from bench.runs import plugins, results, schema
from bench.runs.config import RunConfig
from bench.runs.measure import cost_key
from bench.runs.results import COLUMNS, ResultsStore
from bench.sweeps.executors import Placement, plan_placements, visible_gpus
from bench.sweeps.study import load_study

REPO = Path(__file__).resolve().parents[1]

# A toy net whose process kills itself (SIGKILL, as the OOM killer would) in its first training step, when built
# for seed {seed} while a marker file exists; the marker is removed first, so the rerun of that run succeeds.
SUICIDAL = '''
import os
import signal
from pathlib import Path

import torch
from torch import nn

import variants

MARKER = Path({marker!r})


@variants.register("suicidal", family="toy", paper="a test", spec=variants.CifarSpec(depth=8))
def build(spec: variants.CifarSpec) -> nn.Module:
    def unit(s: variants.Slot) -> nn.Module:
        return variants.PostActBasic(s.cin, s.width, s.stride)

    model = variants.build_cifar(spec, unit, what="suicidal net")
    seed = torch.initial_seed()  # the run's seed: the harness seeds torch with it just before building the model

    def hook(module: nn.Module, args: tuple) -> None:
        real = args[0].device.type != "meta"  # not the set-up's shape-only forward (the memory estimate)
        if module.training and real and seed == {seed} and MARKER.exists():
            MARKER.unlink()
            os.kill(os.getpid(), signal.SIGKILL)

    model.register_forward_pre_hook(hook)
    return model
'''

# ResNet-8 whose training steps sleep: a run lasts seconds however fast the machine, without using a core, so a
# signal sent after the first run ends still finds the sweep running (on a loaded machine too).
SLOW = '''
import time

from torch import nn

import variants


@variants.register("slow", family="toy", paper="a test", spec=variants.CifarSpec(depth=8))
def build(spec: variants.CifarSpec) -> nn.Module:
    def unit(s: variants.Slot) -> nn.Module:
        return variants.PostActBasic(s.cin, s.width, s.stride)

    model = variants.build_cifar(spec, unit, what="slow net")
    model.register_forward_pre_hook(lambda module, args: time.sleep({pause}) if module.training else None)
    return model
'''


pytestmark = pytest.mark.usefixtures("clean_plugins")  # tests/conftest.py


def study(tmp_path: Path, variant: str = "resnet", seeds: int = 3, steps: int = 2, measure: str = "[]",
          extra: str = "") -> Path:
    return write(tmp_path / f"{variant}.toml", f"""
        name = "exec"
        [base]
        task = "digits"
        steps = {steps}
        batch_size = 16
        eval_every = {steps}
        eval_batches = 2  # about the executors, not the evaluation: two batches of each split, not all of them
        measure = {measure}
        timing_warmup = 0
        timing_repeats = 1
        timing_steps = 1
        chance_band = 0.0  # about the executors, not learning: a 2-step run ends at chance
        {extra}
        [grid]
        variant = ["{variant}"]
        depth = [8]
        seed = {list(range(seeds))}
        """)


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def board(res: Path) -> list[dict[str, str]]:
    with (res / "leaderboard.csv").open(newline="") as f:
        return list(csv.DictReader(f))


# -- a run killed from outside its code -----------------------------------------------------------------------


def test_a_killed_run_becomes_a_row_the_others_finish_and_a_rerun_runs_only_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "kill-seed-1"
    marker.touch()
    plugin = write(tmp_path / "suicidal.py", SUICIDAL.format(marker=str(marker), seed=1))
    res = tmp_path / "res"
    args = ["sweep", str(study(tmp_path, "suicidal")), "--plugin", str(plugin), "--jobs", "2",
            "--results-dir", str(res)]
    code, out, err = cli(args, capsys)
    assert code == 0, err
    assert not marker.exists()  # the run did kill itself
    rows = {int(r["seed"]): r for r in board(res)}
    assert {s: r["status"] for s, r in rows.items()} == {0: "ok", 1: "killed", 2: "ok"}
    killed = rows[1]
    assert killed["error"].startswith("the run's process was killed by SIGKILL while training, after ")
    assert int(killed["params"]) > 0 and killed["device"] == "cpu"  # from what the run reported before it died
    assert (res / "runs" / f"{killed['run_id']}.json").exists()
    # Plain progress lines: the run, its status, and the sweep's counts with an ETA.
    assert re.search(rf"\[2/3\] {killed['run_id']}: killed: the run's process was killed by SIGKILL .*"
                     r"\| done \d, running \d, failed 1, remaining \d, ETA ", out)
    assert re.search(r"\[\d/3\] suicidal-d8-\S+: started \(pid \d+, 1 thread\) \| done \d, running [12]", out)
    assert "sweep done in " in out and ": 2 of 3 runs ok, 1 failed, 0 not run" in out
    summary = out.split("failed runs:\n", 1)[1]
    assert summary.startswith(f"  [2/3] {killed['run_id']}: killed: the run's process was killed by SIGKILL")
    rerun = re.search(r"rerun just these \(runs with an ok row are skipped\): (.*)", summary)
    assert rerun is not None
    argv = shlex.split(rerun.group(1))
    assert argv[:3] == ["python", "-m", "bench"] and argv[3:] == [*args[:2], "--jobs", "2", "--plugin", str(plugin),
                                                                     "--results-dir", str(res)]

    code, out, err = cli(argv[3:], capsys)  # the printed command, as printed
    assert code == 0, err
    assert out.count("already recorded, skipped") == 2 and out.count(": started (pid") == 1
    assert f"[2/3] {killed['run_id']}: started" in out and f"[2/3] {killed['run_id']}: ok" in out
    after = board(res)
    assert sorted((int(r["seed"]), r["status"]) for r in after) == [(0, "ok"), (1, "ok"), (2, "ok")]
    assert {r["run_id"]: r["created_at"] for r in after if r["seed"] != "1"} == \
           {r["run_id"]: r["created_at"] for s, r in rows.items() if s != 1}  # untouched

    code, out, _ = cli([*args, "--no-resume"], capsys)  # --no-resume: every run again, still one row each
    assert code == 0 and "skipped" not in out and out.count(": started (pid") == 3
    assert len(board(res)) == 3

    # A --no-resume rerun killed again: the run's ok row and run JSON stay, the killed attempt is kept beside them.
    before = {r["run_id"]: r for r in board(res)}
    ok_json = (res / "runs" / f"{killed['run_id']}.json").read_bytes()
    assert before[killed["run_id"]]["status"] == "ok"
    marker.touch()
    code, out, err = cli([*args, "--no-resume"], capsys)
    assert code == 0 and f"[2/3] {killed['run_id']}: killed: " in out
    assert {r["run_id"]: r for r in board(res)}[killed["run_id"]] == before[killed["run_id"]]
    assert (res / "runs" / f"{killed['run_id']}.json").read_bytes() == ok_json
    (attempt,) = (res / "runs" / "failed").glob(f"{killed['run_id']}-*.json")
    assert json.loads(attempt.read_text())["row"]["status"] == "killed"
    assert f"warning: run {killed['run_id']} ended killed this time; its earlier ok run is kept as it was " \
           f"({res / 'leaderboard.csv'}, {res / 'runs' / (killed['run_id'] + '.json')}) and this attempt's run JSON " \
           f"is in {attempt}\n" in err


# -- the driver stopped (SIGINT) and killed (SIGKILL) mid-sweep, then resumed ---------------------------------


class Driver:
    """``python -m bench sweep ...`` in a subprocess, its output read as it comes."""

    def __init__(self, args: list[str]) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
        # SIGINT back to its default in the child: a shell's background job (`cmd &`, as CI may be started)
        # ignores it, Python then installs no KeyboardInterrupt handler, and a Ctrl-C would never arrive.
        self.proc = subprocess.Popen([sys.executable, "-m", "bench", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_for(self, pattern: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(re.search(pattern, line) for line in self.lines):
                return
            assert self.proc.poll() is None, "".join(self.lines)
            time.sleep(0.05)
        raise AssertionError(f"no line matching {pattern!r} in {timeout} s:\n{''.join(self.lines)}")

    def pids(self) -> list[int]:
        return [int(m.group(1)) for line in self.lines for m in [re.search(r": started \(pid (\d+)", line)] if m]

    def end(self, sig: int) -> tuple[int, str]:
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=60)
        self.reader.join(timeout=10)
        return code, "".join(self.lines)


def gone(pid: int, timeout: float = 20) -> bool:
    """Whether process ``pid`` has ended (a zombie nobody reaped counts as ended) within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow  # two drivers started from scratch (interpreter, imports, fork server): about 30 s
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to see the workers end")
def test_driver_interrupted_then_killed_mid_sweep_resumes_with_one_row_per_config(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res = tmp_path / "res"
    path = study(tmp_path, "slow", seeds=6, steps=20)
    plugin = write(tmp_path / "slow.py", SLOW.format(pause=0.1))  # 20 steps: 2 s of sleep per run
    args = ["sweep", str(path), "--plugin", str(plugin), "--jobs", "2", "--results-dir", str(res)]
    plugins.load_all([str(plugin)])  # to list the study's run ids here (the fixture unloads it)
    ids = {c.run_id for c in load_study(path).configs()}

    first = Driver(args)
    first.wait_for(r": ok, val acc")
    code, out = first.end(signal.SIGINT)  # Ctrl-C: workers stopped, how to resume said
    assert code == 130, out
    assert re.search(r"interrupted: (stopped [12] running run\(s\) \(slow-d8-[^)]+\), nothing of them written|"
                     r"no run was in flight); [1-5] of 6 runs have an ok row", out), out
    assert f"resume with: python -m bench sweep {path} --jobs 2 --plugin {plugin} --results-dir {res}" in out
    assert all(gone(pid, timeout=10) for pid in first.pids()), out
    recorded = len(board(res))
    assert 1 <= recorded < 6

    second = Driver(args)
    second.wait_for(r"already recorded, skipped")
    second.wait_for(r": ok, val acc")
    before_kill = len(board(res))
    code, out = second.end(signal.SIGKILL)  # no chance to clean up: its workers must end by themselves
    assert code == -signal.SIGKILL
    started = second.pids()
    assert started and all(gone(pid) for pid in started), out
    assert before_kill < 6, "the sweep ended before the driver was killed: nothing was tested"
    # What a driver killed while writing can leave: a temporary file and a run JSON whose row it never wrote.
    pending = sorted(ids - {r["run_id"] for r in board(res)})
    (res / "runs" / f".{pending[0]}.json.abc123.tmp").write_text('{"half": ')
    no_row = '{"run_id": "' + pending[0] + '", "config": {}}'  # no row to rebuild from
    (res / "runs" / f"{pending[0]}.json").write_text(no_row)

    code, out, err = cli(args, capsys)
    assert code == 0, err
    assert out.count("already recorded, skipped") == len(ids) - len(pending)
    rows = board(res)
    assert sorted(r["run_id"] for r in rows) == sorted(ids)  # exactly one row per config
    assert {r["status"] for r in rows} == {"ok"}
    assert not list((res / "runs").glob(".*.tmp"))
    assert sorted(p.stem for p in (res / "runs").glob("*.json")) == sorted(ids)
    assert ResultsStore(res).load_run(pending[0])["run_id"] == pending[0]


# -- cost measured once per configuration ---------------------------------------------------------------------


@pytest.mark.slow  # three sweeps with their measurement subprocesses: about 30 s
def test_cost_is_measured_once_per_configuration_and_in_every_run_on_request(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    once, every = tmp_path / "once", tmp_path / "every"
    phases = '["flops", "throughput", "memory"]'
    code, _, err = cli(["sweep", str(study(tmp_path, seeds=2, measure=phases)), "--results-dir", str(once)], capsys)
    assert code == 0, err
    first, second = board(once)
    assert (first["seed"], second["seed"]) == ("0", "1")
    assert first["cost_source"] == first["run_id"] and second["cost_source"] == first["run_id"]
    for column in ("train_samples_per_s", "step_time_ms", "peak_mem_mb", "mem_method", "fwd_flops_per_sample",
                   "train_flops_per_sample", "achieved_tflops", "mfu"):
        assert second[column] == first[column] != "", column
    store = ResultsStore(once)
    a, b = store.load_run(first["run_id"]), store.load_run(second["run_id"])
    assert b["measurements"] == a["measurements"] and b["cost_source"] == first["run_id"]
    assert a["measurements"]["memory"]["method"] == "cpu_rss_peak_minus_baseline_subprocess"

    # Resumed with a third seed: the recorded figures are reused, read back from the first run's JSON.
    code, _, err = cli(["sweep", str(study(tmp_path, seeds=3, measure=phases)), "--results-dir", str(once)], capsys)
    assert code == 0, err
    third = board(once)[2]
    assert third["seed"] == "2" and third["cost_source"] == first["run_id"]
    assert third["step_time_ms"] == first["step_time_ms"] and third["peak_mem_mb"] == first["peak_mem_mb"]

    phases = '["flops", "throughput"]'  # no CPU memory probe (a fresh interpreter each): same runs, quicker
    code, _, err = cli(["sweep", str(study(tmp_path, seeds=2, measure=phases)), "--measure-every-run",
                          "--results-dir", str(every)], capsys)
    assert code == 0, err
    e_first, e_second = board(every)
    assert e_first["cost_source"] == e_first["run_id"] and e_second["cost_source"] == e_second["run_id"]
    assert e_second["run_id"] == second["run_id"]  # the measurement settings are not part of a run's identity
    e_a, e_b = ResultsStore(every).load_run(e_first["run_id"]), ResultsStore(every).load_run(e_second["run_id"])
    assert e_b["measurements"]["throughput"]["step_times_ms"] != e_a["measurements"]["throughput"]["step_times_ms"]
    # Reusing figures changes nothing of the training: the second seed learns the same either way.
    assert e_second["final_train_loss"] == second["final_train_loss"]


def test_cost_key_ignores_what_only_changes_learning() -> None:
    base = RunConfig(variant="resnet", depth=8, batch_size=16)
    same = [dict(seed=3), dict(lr=0.01, schedule="step", warmup_steps=5), dict(steps=100, eval_every=7, target=0.5),
            dict(study="s", preset="quick", probe_every=2)]
    for change in same:
        assert cost_key(RunConfig(**{**base.to_dict(), **change})) == cost_key(base), change
    differ = [dict(depth=14), dict(batch_size=32), dict(precision="bf16"), dict(optimizer="adam"),
              dict(model_args=(("shortcut", "B"),)), dict(task="synthetic"), dict(device="cpu"),
              dict(channels_last=True), dict(measure=("flops",)), dict(timing_repeats=2)]
    for change in differ:
        assert cost_key(RunConfig(**{**base.to_dict(), **change})) != cost_key(base), change


# -- bad input and the machine's split -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--jobs", "0"], "error: --jobs must be >= 1, got 0"),
        (["--executor", "slurm"], "error: unknown executor 'slurm'; choose one of: local, ray"),
        (["--gpus-per-run", "-1"], "error: --gpus-per-run must be >= 0, got -1"),
    ],
)
def test_bad_executor_options_exit_2_with_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          option: list[str], message: str) -> None:
    for command in (["sweep", str(study(tmp_path))], ["reproduce", "degradation"]):
        code, out, err = cli([*command, *option, "--results-dir", str(tmp_path / "res")], capsys)
        assert code == 2 and err == message + "\n" and out == ""
    assert not (tmp_path / "res").exists()


def test_placements_split_the_cores_and_deal_out_gpus() -> None:
    assert plan_placements(1, cores=8) == [Placement(8)]  # one job: the whole machine, as a plain `bench run`
    assert plan_placements(2, cores=2) == [Placement(1), Placement(1)]
    assert plan_placements(3, cores=8) == [Placement(2)] * 3
    assert plan_placements(4, cores=2) == [Placement(1)] * 4  # at least one thread each
    assert plan_placements(2, cores=16, thread_cap=4) == [Placement(4)] * 2  # the driver's own threads cap it
    gpus = ["0", "1", "2", "3"]
    assert plan_placements(8, 1, cores=16, gpus=gpus) == [Placement(4, (g,)) for g in gpus]  # one run per GPU
    assert plan_placements(2, 2, cores=16, gpus=gpus) == [Placement(8, ("0", "1")), Placement(8, ("2", "3"))]
    assert plan_placements(3, 0, cores=6, gpus=gpus) == [Placement(2)] * 3  # 0: every run sees every GPU
    assert Placement(2, ("1", "3")).environ() == {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2",
                                                  "CUDA_VISIBLE_DEVICES": "1,3"}
    assert Placement(1).environ() == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    with pytest.raises(ValueError, match=r"--gpus-per-run 3 needs 3 GPUs, but 2 are visible \(0, 1\)"):
        plan_placements(1, 3, gpus=["0", "1"])
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2, 5,"}) == ["2", "5"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []


def test_a_leaderboard_without_cost_source_loads_and_is_rewritten_with_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(results, "_noticed", set())
    added = ("cost_source", "world_size", "norm", "grad_accum", "target_loss", "resumed_from_step", "restarts",
             *schema.DATA_COLUMNS, "chance_loss", "machine")
    old = [c for c in schema.COLUMNS_V9 if c not in added]  # before any of them was a column
    assert tuple(old) == schema.COLUMNS_V2
    with (tmp_path / "leaderboard.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, old, lineterminator="\n")
        w.writeheader()
        w.writerow({c: "" for c in old} | {"run_id": "a", "status": "ok", "step_time_ms": "3.5"})
    store = ResultsStore(tmp_path)
    df = store.load_leaderboard()
    assert list(df.columns) == list(COLUMNS) and df["cost_source"].isna().all() and df["step_time_ms"][0] == 3.5
    assert (df["world_size"] == 1).all()  # every run was one process then
    assert ("(cost_source left empty, world_size 1, norm left empty; grad_accum 1, restarts 0; final_val_perplexity"
            in capsys.readouterr().err)
    store.append({"run_id": "b", "status": "killed", "cost_source": "a"}, {})
    rows = board(tmp_path)
    assert tuple(rows[0]) == COLUMNS and [(r["run_id"], r["cost_source"]) for r in rows] == [("a", ""), ("b", "a")]


def _fork_servers(driver_pid: int) -> list[int]:
    """The multiprocessing fork servers the driver started (its children whose command line names one)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == driver_pid and b"forkserver" in cmdline:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.slow  # a driver started from scratch, its fork server started three times: about 40 s
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find the fork server")
def test_a_sweep_survives_its_fork_server_killed_while_runs_launch_and_run(tmp_path: Path) -> None:
    """The process that starts runs (a large one, with torch imported: the one an OOM killer picks) killed again
    and again — before a launch, during one, and under runs it started — costs at most the run being launched,
    never the sweep: no traceback, one row per run."""
    plugin = write(tmp_path / "slow.py", SLOW.format(pause=0.05))
    res = tmp_path / "res"
    driver = Driver(["sweep", str(study(tmp_path, "slow", seeds=4, steps=20)), "--plugin", str(plugin),
                     "--results-dir", str(res)])
    killed: set[int] = set()
    while driver.proc.poll() is None:
        for pid in _fork_servers(driver.proc.pid):
            if pid not in killed and len(killed) < 3:  # each new server as soon as it appears, three times
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        time.sleep(0.01)
    driver.reader.join(timeout=10)
    out = "".join(driver.lines)
    assert len(killed) == 3, out
    assert driver.proc.returncode == 0 and "Traceback" not in out, out
    rows = board(res)
    assert sorted(int(r["seed"]) for r in rows) == [0, 1, 2, 3], out
    assert {r["status"] for r in rows} <= {"ok", "killed"} and any(r["status"] == "ok" for r in rows), out
    assert "sweep done in" in out
