"""One run across processes (bench/runs/distributed.py): torchrun + DistributedDataParallel on gloo, against one
process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.runs import distributed
from bench.runs.config import RunConfig
from bench.runs.results import ResultsStore
from bench.runs.train import setup

REPO = Path(__file__).resolve().parents[1]
# A Transformer (LayerNorm: no per-rank batch statistics) on a generated task, a few steps, throughput measured.
RUN = ["--variant", "preln", "--depth", "2", "--task", "copy", "--seq-len", "16", "--batch-size", "8", "--steps", "6",
       "--optimizer", "adam", "--lr", "1e-3", "--measure", "throughput", "--timing-warmup", "1", "--timing-repeats",
       "2", "--timing-steps", "2", "--eval-every", "3", "--probe-every", "3", "--quiet"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bench(args: list[str], nproc: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    launch = [] if nproc is None else ["-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
                                       "--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    cmd = [sys.executable, *launch, "-m", "bench", *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def only_run(results: Path) -> dict:
    (path,) = (results / "runs").glob("*.json")
    return json.loads(path.read_text())


@pytest.mark.slow  # a torchrun job of two processes: about 30 s
def test_two_processes_follow_the_one_process_curve(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    done = bench(["run", *RUN, "--results-dir", str(one)])
    assert done.returncode == 0, done.stderr
    done = bench(["run", *RUN, "--results-dir", str(two)], nproc=2)
    assert done.returncode == 0, done.stderr
    a, b = only_run(one), only_run(two)
    board = ResultsStore(two).load_leaderboard()
    assert len(board) == 1  # rank 0 alone wrote
    row = board.iloc[0]
    assert row["world_size"] == 2 and row["batch_size"] == 8 and row["train_samples_per_s"] > 0
    assert a["row"]["world_size"] == 1 and a["run_id"] != b["run_id"]  # the world size is part of the run id
    assert b["config"]["world_size"] == 2
    # Same global batch and seed: the same loss at every step, up to floating-point reassociation.
    la = [p["loss"] for p in a["curves"]["train"]]
    lb = [p["loss"] for p in b["curves"]["train"]]
    assert len(la) == len(lb) == 6 and la == pytest.approx(lb, rel=1e-5)
    for key in ("train_loss", "val_loss", "val_acc"):
        assert [e[key] for e in a["curves"]["eval"]] == pytest.approx([e[key] for e in b["curves"]["eval"]], rel=1e-5)
    assert len(b["probes"]) == len(a["probes"]) > 0


def test_world_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert distributed.current() is None and distributed.world_size() == 1
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert distributed.current() is None  # torchrun with one process: a plain run
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    world = distributed.current()
    assert world == distributed.World(3, 4, 1) and not world.main and distributed.world_size() == 4
    assert distributed.device_for(world, torch.device("cuda")) == torch.device("cuda", 1)
    assert distributed.device_for(world, torch.device("cpu")) == torch.device("cpu")


def test_each_rank_keeps_its_contiguous_shard() -> None:
    x, y = torch.arange(12).view(6, 2), torch.arange(6)
    parts = [distributed.shard(x, y, distributed.World(r, 3, r)) for r in range(3)]
    assert [p[1].tolist() for p in parts] == [[0, 1], [2, 3], [4, 5]]
    assert torch.equal(torch.cat([p[0] for p in parts]), x)


def test_a_distributed_config_outside_torchrun_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match=r"world_size 2 needs a torchrun job of that many processes .* in none"):
        setup(RunConfig(variant="preln", depth=2, task="copy", world_size=2))
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="--batch-size 7 is the global batch: it must divide evenly over the 2"):
        setup(RunConfig(variant="preln", depth=2, task="copy", world_size=2, batch_size=7))
    with pytest.raises(ValueError, match=r"world_size 3 needs .* in one of 2"):
        setup(RunConfig(variant="preln", depth=2, task="copy", world_size=3))
    assert RunConfig(variant="a").run_id == RunConfig(variant="a", world_size=1).run_id  # old run ids stay valid
    with pytest.raises(ValueError, match="--world-size must be an integer >= 1, got 0"):
        RunConfig(variant="a", world_size=0)


def test_to_argv_rebuilds_the_config() -> None:
    from bench.cli import build_parser, config_from_args

    cfg = RunConfig(variant="resnet", depth=8, steps=3, betas=(0.8, 0.9), milestones=(0.3, 0.6), augment=False,
                    model_args=(("shortcut", "B"), ("width", 8)), measure=("throughput",), target=0.5)
    ns = build_parser().parse_args(["run", *cfg.to_argv()])
    assert config_from_args(ns) == cfg
    assert RunConfig(variant="plain").to_argv() == ["--variant", "plain"]


@pytest.mark.slow  # torchrun jobs at 1 and 2 processes: minutes
def test_scaling_reports_throughput_and_efficiency(tmp_path: Path) -> None:
    done = bench(["perf", "scaling", *RUN[:10], "--nproc", "2", "--timing-warmup", "1", "--timing-repeats", "2",
                  "--timing-steps", "2", "--keep", str(tmp_path)])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].split() == ["nproc", "threads_per_proc", "device", "samples_per_s", "step_time_ms", "speedup",
                                "efficiency"]
    one, two = (line.split() for line in lines[2:4])
    assert one[:3] == ["1", str(os.cpu_count() or 1), "cpu"] and one[5:] == ["1.000", "1.000"]
    assert two[:3] == ["2", str(max(1, (os.cpu_count() or 1) // 2)), "cpu"]
    # the table's numbers are the rows the two runs wrote: efficiency = throughput(2) / (2 x throughput(1))
    rows = {n: ResultsStore(tmp_path / f"n{n}").load_leaderboard().iloc[0] for n in (1, 2)}
    assert rows[2]["world_size"] == 2 and rows[1]["world_size"] == 1
    thr = {n: rows[n]["train_samples_per_s"] for n in (1, 2)}
    assert float(two[6]) == pytest.approx(thr[2] / (2 * thr[1]), abs=1e-3)
    bad = bench(["perf", "scaling", *RUN[:10], "--nproc", "3"])
    assert bad.returncode == 2 and "error: --batch-size 8 (the global batch) does not divide over [3] processes" in \
        bad.stderr
