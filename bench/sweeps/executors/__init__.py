"""Executors: where the runs of a sweep execute. The sweep's driver (:mod:`bench.sweeps.driver`) hands them jobs
and reads back events; it alone writes the results directory.

One interface, :class:`~bench.sweeps.executors.base.Executor`: ``submit`` a :class:`Job` (one RunConfig, and the
cost figures it may reuse), ``wait`` for :class:`Event` s, ``stop`` whatever is in flight (the events are listed in
:mod:`bench.sweeps.executors.base`). Each executor is a module of this package with ``make(configs, options)`` and
``check(options)``, named in :data:`EXECUTORS`:

- ``local`` (:mod:`bench.sweeps.executors.local`): each run in a process of its own on this machine, ``--jobs`` at
  a time;
- ``ray`` (:mod:`bench.sweeps.executors.ray`): each run a task on a Ray cluster (an optional extra).

Adding an executor is a module and one entry here; the command line's ``--executor`` and the Python API take
every name of :data:`EXECUTORS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType

from bench.runs.config import RunConfig
from bench.sweeps.executors import local, ray
from bench.sweeps.executors.base import Event, Executor, Job, uses_cuda
from bench.sweeps.executors.local import LocalExecutor, Placement, plan_placements, visible_gpus
from bench.sweeps.options import SweepOptions

__all__ = ["EXECUTORS", "Event", "Executor", "Job", "LocalExecutor", "Placement", "check_options", "make_executor",
           "plan_placements", "prestart", "uses_cuda", "visible_gpus"]  # fmt: skip

# --executor NAME -> the module that makes it: make(configs, options) -> Executor, check(options) before anything.
EXECUTORS: dict[str, ModuleType] = {"local": local, "ray": ray}


def check_options(options: SweepOptions) -> None:
    """Refuse (ValueError) an unknown executor, or one that cannot run here (``ray`` without the ray package):
    before a study is even built. The counts were checked when ``options`` was made."""
    if options.executor not in EXECUTORS:
        raise ValueError(f"unknown executor {options.executor!r}; choose one of: {', '.join(EXECUTORS)}")
    check: Callable[[SweepOptions], None] | None = getattr(EXECUTORS[options.executor], "check", None)
    if check is not None:
        check(options)


def prestart(options: SweepOptions) -> None:
    """Start what the executor needs in the background (the local executor's fork server, importing torch and
    resbench), so that it gets ready while the driver builds and checks the study's models."""
    start = getattr(EXECUTORS[options.executor], "prestart", None)
    if start is not None:
        start()


def make_executor(configs: Sequence[RunConfig], options: SweepOptions) -> Executor:
    """The executor ``options.executor`` names, sized for ``configs``; bad input raises ValueError, starting
    nothing (Ray connects at the first run)."""
    check_options(options)
    executor: Executor = EXECUTORS[options.executor].make(configs, options)
    return executor
