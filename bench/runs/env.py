"""The environment a run happened in: versions, device, git revision."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any

import torch

from bench.runs.measure import device_name

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


def environment(device: torch.device) -> dict[str, Any]:
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": str(device),
        "device_name": device_name(device),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "hostname": socket.gethostname(),
        "git_sha": git_sha(),
    }


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
