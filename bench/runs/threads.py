"""How many CPU threads a run's torch operators use: ``--threads``, else the cores free now.

torch starts one intra-op thread per core. On a machine others share (a workstation, a CI runner, a login node),
a run that takes every core competes with the other programs for them, and small CPU kernels then slow down by
far more than the share they lose (each thread waits on the slowest). So a run's default is the cores free now:
those this process may run on (its affinity mask, :func:`os.sched_getaffinity`), less the ones the 1-minute load
average says are busy, at least one, and never more than torch's own count (``OMP_NUM_THREADS``,
``torch.set_num_threads``, a sweep's share of the machine). A ``--deterministic`` run keeps torch's own count, so
that the load of the moment never changes its numbers. The count a run used is its row's ``threads``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from bench.runs.config import RunConfig
from bench.runs.cores import free_cores, usable_cores  # noqa: F401  (importers read them here too)


def threads_for(cfg: RunConfig) -> int:
    """The threads ``cfg`` runs with: its ``threads``, else torch's own count capped at the free cores (torch's own
    count alone for a deterministic run)."""
    if cfg.threads is not None:
        return cfg.threads
    own = torch.get_num_threads()
    return own if cfg.deterministic else min(own, free_cores())


@contextlib.contextmanager
def threads_set(n: int) -> Iterator[int]:
    """torch's intra-op threads set to ``n`` inside the block, and set back to the count before it on the way out,
    an exception included; yields ``n``."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield n
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def run_threads(cfg: RunConfig) -> Iterator[int]:
    """torch's intra-op threads set to :func:`threads_for` ``cfg`` while the run lasts, restored after it (a notebook
    that calls :func:`bench.run` keeps its own setting)."""
    with threads_set(threads_for(cfg)) as n:
        yield n
