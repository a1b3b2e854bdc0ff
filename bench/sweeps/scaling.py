"""``bench perf scaling``: training throughput of one run on 1, 2, ... processes (torchrun + DDP), side by side.

For each N of ``--nproc`` it runs the configuration as ``torchrun --nproc-per-node N -m bench run ...`` (N = 1: a
plain ``bench run``) with the throughput phase only, in a fresh results directory, and reads the row back:
throughput(N) is the whole job's (global batch ÷ median step time, :mod:`bench.runs.distributed`), and the scaling
efficiency is throughput(N) / (N · throughput(1)). On the CPU the cores are split evenly between the N processes
(``OMP_NUM_THREADS``), so N = 1 uses them all; on CUDA each process has its own GPU. Timings are the harness's own
(warm-up steps, device synchronised, median of repeats); compare them as the ratios they are, on one machine.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from bench.runs import chance, plugins
from bench.runs.config import RunConfig
from bench.runs.results import ResultsStore


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _one(cfg: RunConfig, nproc: int, threads: int, root: Path) -> dict[str, Any]:
    out = root / f"n{nproc}"
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = str(threads)
    launch = [] if nproc == 1 else ["-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
                                    "--master-addr", "127.0.0.1", "--master-port", str(_free_port())]
    plugin_flags = [a for p in plugins.loaded() for a in ("--plugin", p.reload)]  # a plugin's variant builds there too
    cmd = [sys.executable, *launch, "-m", "bench", "run", *cfg.to_argv(skip=("study", "preset", "world_size")),
           *plugin_flags, "--results-dir", str(out), "--quiet"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = " ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise RuntimeError(f"the {nproc}-process run failed (exit {done.returncode}): {tail}")
    row = ResultsStore(out).load_leaderboard().iloc[0]
    if row["status"] not in ("ok", chance.STATUS) or pd.isna(row["train_samples_per_s"]):  # a cost: learnt or not
        raise RuntimeError(f"the {nproc}-process run recorded no throughput: {row['status']} {row['error']}")
    return {"nproc": nproc, "threads_per_proc": threads, "device": row["device"],
            "samples_per_s": float(row["train_samples_per_s"]), "step_time_ms": float(row["step_time_ms"])}


def scaling(cfg: RunConfig, nprocs: Sequence[int], keep: str | Path | None = None) -> pd.DataFrame:
    """Throughput and scaling efficiency of ``cfg`` on each process count of ``nprocs`` (1 is always measured)."""
    if any(n < 1 for n in nprocs):
        raise ValueError(f"--nproc takes process counts >= 1, got {list(nprocs)}")
    counts = sorted({1, *nprocs})
    bad = [n for n in counts if cfg.batch_size % n]
    if bad:
        raise ValueError(f"--batch-size {cfg.batch_size} (the global batch) does not divide over {bad} processes")
    cfg = dataclasses.replace(cfg, steps=1, epochs=None, budget_flops=None, budget_samples=None,
                              measure=("throughput",), probe_every=None, eval_every=None)
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="resbench-scaling-") as tmp:
        root = Path(keep) if keep else Path(tmp)
        rows = [_one(cfg, n, max(1, cores // n), root) for n in counts]
    df = pd.DataFrame(rows)
    base = float(df.loc[df["nproc"] == 1, "samples_per_s"].iloc[0])
    df["speedup"] = df["samples_per_s"] / base
    df["efficiency"] = df["samples_per_s"] / (df["nproc"] * base)
    return df
