"""What every executor shares: the :class:`Job` the sweep's driver hands it, the :class:`Event` s it hands back,
the :class:`Executor` protocol, and :func:`execute_job`, the body of a job wherever it runs.

The events of a job are

- ``setup`` and ``measured`` (data: the row as it would read then, and the measurements): what the run got to,
  so that the driver can reuse its cost figures in other runs and build the row of a run that dies later;
- then exactly one of ``finished`` (data: ``run_json``), ``refused`` (bad input, e.g. a dataset not on this
  machine; data: ``error``; no row), ``preempted`` (a preemption signal stopped it after it saved its training
  state; data: ``step``, ``error``; no row: a rerun continues it) or ``failed`` (the run ended without a run
  JSON; data: ``status`` -- ``killed``, ``oom`` or ``error`` -- ``error``, the reason, and ``placement``; the
  driver writes its row).
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from bench.runs import plugins
from bench.runs.config import RunConfig
from bench.runs.resume import Preempted
from bench.runs.runner import Reuse, classify_failure, one_line, run_config


@dataclass(frozen=True)
class Job:
    """One run handed to an executor."""

    index: int  # its position in the sweep's grid, 1-based: the i of the driver's "[i/N]" lines
    config: RunConfig
    reuse: Reuse | None = None  # cost figures of the first run of its model configuration, or measure its own
    progress: bool = False  # may draw a progress bar (one job at a time, on a terminal)
    # (spec, origin) of each plugin loaded in the driver's process: loaded again in the run's, as it was there
    plugins: tuple[tuple[str, str], ...] = ()
    results_dir: str | None = None  # where the run saves (and finds) its mid-run training state


@dataclass(frozen=True)
class Event:
    """Something a job did; see the module docstring for the kinds and their data."""

    job: Job
    kind: str
    data: dict[str, Any]


class Executor(Protocol):
    """What the sweep's driver needs of an executor."""

    name: str
    slots: int  # how many jobs may be in flight at once

    def submit(self, job: Job) -> str:
        """Start ``job``; returns where it runs, in words (``pid 123, 1 thread, GPU 3``)."""
        ...

    def wait(self, timeout: float | None = None) -> list[Event]:
        """Block until at least one event (or ``timeout`` seconds); the events since the last call."""
        ...

    def in_flight(self) -> list[Job]:
        """The jobs submitted and not yet ended (no finished/refused/failed event returned)."""
        ...

    def stop(self) -> list[Job]:
        """End every job in flight (they yield no event) and release the executor; returns those jobs."""
        ...


def uses_cuda(configs: Sequence[RunConfig]) -> bool:
    """Whether any run will train on CUDA (``auto`` picks CUDA first where there is one)."""
    return any(c.device in ("cuda", "auto") for c in configs) and torch.cuda.is_available()


def execute_job(job: Job, placement: Mapping[str, Any], report: Callable[[str, dict[str, Any]], None]) -> None:
    """Run ``job`` in this process and ``report`` its events, the last one ``finished``, ``refused`` or ``failed``:
    the plugins the driver loaded are loaded first, bad input for this run alone is a refusal, and an exception
    outside the recorded phases (out of memory building the model, say) a failure with its place in the code."""
    try:
        for spec, origin in job.plugins:
            plugins.load_plugins([spec], origin)
        run_json = run_config(job.config, progress=job.progress, reuse=job.reuse, report=report,
                              placement=placement, results_dir=job.results_dir)
    except Preempted as exc:  # asked to stop: its state is saved, and a rerun (or --requeue) continues it
        report("preempted", {"step": exc.step, "error": str(exc)})
    except ValueError as exc:  # bad input for this run only (e.g. a dataset not on this machine)
        report("refused", {"error": str(exc)})
    except Exception as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1:]
        at = f" ({where[0].filename.rsplit(os.sep, 1)[-1]}:{where[0].lineno})" if where else ""
        report("failed", {"status": classify_failure(exc), "error": one_line(f"{type(exc).__name__}: {exc}{at}"),
                          "placement": dict(placement)})
    else:
        report("finished", {"run_json": run_json})
