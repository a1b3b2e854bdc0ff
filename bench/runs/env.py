"""The environment a run happened in: versions, device, git revision."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from bench.runs.measure import cpu_name, device_name

REPO_ROOT = Path(__file__).resolve().parent.parent


def git_sha(root: Path = REPO_ROOT) -> str:
    """The repository's HEAD commit, with ``-dirty`` when tracked files outside ``results/`` differ from it;
    ``unknown`` outside git.

    ``results/`` is left out because a sweep into the repository's own results directory changes its tracked
    leaderboard with the first run: the code that produced the later runs is still the commit's.
    """
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results"], cwd=root,
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{sha}-dirty" if dirty else sha


def _cuda_driver() -> int | None:
    """The CUDA version the installed driver supports (``cuDriverGetVersion``: 12040 for 12.4), None without one."""
    try:
        return int(torch._C._cuda_getDriverVersion()) if torch.cuda.is_available() else None  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):
        return None


def environment(device: torch.device) -> dict[str, Any]:
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": torch.version.hip,  # ROCm's build of torch; None elsewhere
        "cuda_driver": _cuda_driver(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": str(device),
        "device_name": device_name(device),
        "device_count": torch.cuda.device_count() if device.type == "cuda" else 1,
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "hostname": socket.gethostname(),
        "git_sha": git_sha(),
    }


# What a cost figure depends on besides the model: the device and how many there are, the driver and CUDA/ROCm
# versions, the CPU (a CPU run's device; the input pipeline's host), torch and Python. Not the host name (two nodes
# of one kind are one machine) nor the commit (the row's git_sha, with its -dirty mark, records that).
MACHINE_FIELDS = ("device_name", "device_count", "cpu", "cuda_driver", "cuda", "hip", "torch", "python")


def machine_fingerprint(env: Mapping[str, Any]) -> str:
    """The row's ``machine``: 8 hex digits of SHA-256 over :data:`MACHINE_FIELDS` of an :func:`environment`. A field
    the environment lacks (a run recorded before it was) counts as null, so older runs of one machine share one
    fingerprint with each other, not with newer ones."""
    fields = {k: env.get(k) for k in MACHINE_FIELDS}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:8]


def machine_id(env: dict[str, Any]) -> str:
    """``host/device name`` of an :func:`environment`: cost figures measured on one machine describe that machine
    only (a sweep spread over a cluster must not copy one node's throughput into another node's row)."""
    return f"{env.get('hostname')}/{env.get('device_name')}"


def changed_since(sha: str, path: Path, root: Path = REPO_ROOT) -> bool | None:
    """Whether ``path`` (a file of this repository) changed in a commit after ``sha`` (its ``-dirty`` mark
    ignored), as git tells; None where git cannot (outside a checkout, an unknown commit)."""
    sha = sha.split("-")[0]
    if not sha or sha == "unknown":
        return None
    try:
        done = subprocess.run(["git", "log", "-1", "--format=%H", f"{sha}..HEAD", "--", str(path)], cwd=root,
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return bool(done.stdout.strip()) if done.returncode == 0 else None


def cpu_sample() -> tuple[float, float, float] | None:
    """``(busy, total, own)`` CPU seconds so far: all CPUs' busy and total time (Linux ``/proc/stat``) and this
    process's with the children it waited for; None where the kernel does not tell (not Linux)."""
    try:
        fields = [float(v) for v in Path("/proc/stat").read_text(encoding="ascii").split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle and waiting for I/O
    t = os.times()
    return (sum(fields[:8]) - idle) / tick, sum(fields[:8]) / tick, t.user + t.system + t.children_user + \
        t.children_system


def machine_load(before: tuple[float, float, float] | None) -> dict[str, Any]:
    """How busy the machine was while a figure was measured, since the :func:`cpu_sample` ``before``: the 1-minute
    load average at the end (``load_1m``), the CPUs (``cpus``) and the share of all CPUs' time that other processes
    used meanwhile (``other_cpu``, 0-1; None without ``/proc/stat``). A throughput measured beside other work is
    lower than the machine's: a figure records this beside it."""
    after = cpu_sample()
    other = None
    if before is not None and after is not None and after[1] > before[1]:
        other = max(0.0, (after[0] - before[0]) - (after[2] - before[2])) / (after[1] - before[1])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"load_1m": load, "cpus": os.cpu_count(), "other_cpu": None if other is None else min(other, 1.0)}
