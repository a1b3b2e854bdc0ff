"""How many CPU cores are free now: what a run's torch threads (:mod:`bench.runs.threads`), a sweep's local workers
and the processes that draw a report's figures (``--jobs``) default to. No torch here: the commands that only read
results import this too.
"""

from __future__ import annotations

import math
import os


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def free_cores(cores: int | None = None, load: float | None = None) -> int:
    """``cores`` (default: :func:`usable_cores`) less those the 1-minute ``load`` average (default: the system's,
    none where the platform has no load average) keeps busy; at least 1."""
    cores = usable_cores() if cores is None else cores
    if load is None:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return max(1, cores - math.floor(load))
