"""The ``ray`` executor: each run of a sweep as a task on the user's existing Ray cluster.

``bench sweep|reproduce ... --executor ray --address ADDR`` connects to a running cluster (``ray start --head`` on a
machine of yours, KubeRay, Anyscale; resbench starts no cluster — without ``--address`` Ray starts a local one on
this machine) and submits every run as a task asking for ``--cpus-per-run`` CPUs and ``--gpus-per-run`` GPUs; the
cluster's scheduler places it. ``--jobs`` runs are in flight at a time. The task runs
:func:`bench.sweeps.executors.base.execute_job` in a Ray worker process (torch limited to the CPUs it asked for; the
plugins the driver loaded loaded again there) and returns its events — the run's ``setup`` and ``measured`` reports,
then ``finished`` with the run JSON, or ``refused`` for bad input — to the driver, which alone writes the results
directory, as with the local executor.

A worker process or node that dies under a run (``SIGKILL``, the OOM killer, a lost node) yields a ``failed``
event, so the run gets a ``killed`` (or ``oom``) row with Ray's reason, and the sweep goes on. Nothing is retried
silently: ``--retries K`` lets Ray rerun a task whose worker died up to K times (a Python exception inside a run
is not retried: it is already in the run's row). Ray is an extra: ``pip install 'resbench[ray]'``.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from bench.runs.config import RunConfig
from bench.sweeps.executors.base import Event, Job, execute_job, uses_cuda
from bench.sweeps.options import SweepOptions


def _import_ray() -> Any:
    """The ray package, imported only when this executor is asked for (an optional extra)."""
    try:
        import ray  # the ray extra: imported only when this executor is asked for
    except ImportError:
        raise ValueError("--executor ray needs the ray package: pip install 'resbench[ray]'") from None
    return ray


def _task(job: Job, threads: int) -> list[tuple[str, dict[str, Any]]]:
    """Body of a run's Ray task (in a Ray worker process): the run's events, in order."""
    os.environ.update({"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)})
    torch.set_num_threads(threads)
    events: list[tuple[str, dict[str, Any]]] = []
    placement = {"threads": threads, "gpus": [str(g) for g in _gpu_ids()], "ray_node": _node_id()}
    execute_job(job, placement, lambda kind, data: events.append((kind, data)))
    return events


def _gpu_ids() -> list[Any]:
    return list(_import_ray().get_gpu_ids())


def _node_id() -> str:
    return str(_import_ray().get_runtime_context().get_node_id())


def _reachable(address: str | None) -> None:
    """A ``host:port`` cluster address must answer within seconds (Ray itself keeps retrying for minutes)."""
    if not address or address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=5):
            pass
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot connect to the Ray cluster at {address}: {exc} (is `ray start --head` running "
                         "there? --address takes host:port, ray://host:port or auto)") from None


@dataclass
class _Running:
    job: Job
    ref: Any  # the task's ObjectRef


class RayExecutor:
    """Runs as Ray tasks on a cluster (see the module docstring); ``slots`` of them in flight at a time."""

    name = "ray"

    def __init__(self, slots: int, address: str | None = None, cpus_per_run: int = 1, gpus_per_run: float = 0,
                 retries: int = 0) -> None:
        if slots < 1 or cpus_per_run < 1 or gpus_per_run < 0 or retries < 0:
            raise ValueError("--jobs and --cpus-per-run must be >= 1, --gpus-per-run and --retries >= 0")
        self.ray = _import_ray()
        self.slots, self.address, self.cpus, self.gpus, self.retries = slots, address, cpus_per_run, gpus_per_run, \
            retries
        self._remote: Any = None
        self._running: list[_Running] = []

    def _connect(self) -> Any:
        if self._remote is None:
            ray = self.ray
            if not ray.is_initialized():
                _reachable(self.address)
                try:
                    ray.init(address=self.address, log_to_driver=False, include_dashboard=False,
                             configure_logging=False)
                except (ConnectionError, RuntimeError, ValueError) as exc:
                    raise ValueError(f"cannot connect to the Ray cluster at {self.address or 'a new local one'}: "
                                     f"{' '.join(str(exc).split())[:300]}") from None
            self._remote = ray.remote(_task).options(num_cpus=self.cpus, num_gpus=self.gpus,
                                                     max_retries=self.retries, retry_exceptions=False)
        return self._remote

    def submit(self, job: Job) -> str:
        if len(self._running) >= self.slots:
            raise RuntimeError("no free slot: wait for a job to end before submitting another")
        ref = self._connect().remote(job, self.cpus)
        self._running.append(_Running(job, ref))
        gpus = f", {self.gpus:g} GPU" if self.gpus else ""
        return f"ray task {ref.task_id().hex()[:12]}, {self.cpus} CPU{gpus}"

    def in_flight(self) -> list[Job]:
        return [r.job for r in self._running]

    def wait(self, timeout: float | None = None) -> list[Event]:
        if not self._running:
            return []
        ready, _ = self.ray.wait([r.ref for r in self._running], num_returns=1, timeout=timeout)
        events: list[Event] = []
        for running in [r for r in self._running if r.ref in ready]:
            self._running.remove(running)
            events += self._events(running)
        return events

    def _events(self, running: _Running) -> list[Event]:
        ray, job = self.ray, running.job
        try:
            return [Event(job, kind, data) for kind, data in ray.get(running.ref)]
        except ray.exceptions.OutOfMemoryError as exc:
            return [Event(job, "failed", self._failure("oom", exc))]
        except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError, ray.exceptions.ActorDiedError,
                ray.exceptions.TaskCancelledError, ray.exceptions.ObjectLostError) as exc:
            return [Event(job, "failed", self._failure("killed", exc))]
        except ray.exceptions.RayError as exc:  # anything else Ray reports about the task
            return [Event(job, "failed", self._failure("error", exc))]

    def _failure(self, status: str, exc: BaseException) -> dict[str, Any]:
        retried = f" (after {self.retries} retr{'y' if self.retries == 1 else 'ies'})" if self.retries else ""
        reason = " ".join(str(exc).split())[:300]
        return {"status": status, "error": f"ray: {type(exc).__name__}{retried}: {reason}",
                "placement": {"threads": self.cpus, "gpus": []}}

    def stop(self) -> list[Job]:
        stopped = [r.job for r in self._running]
        for r in self._running:
            with contextlib.suppress(Exception):  # already ended, or the cluster is gone: nothing left to stop
                self.ray.cancel(r.ref, force=True)
        self._running.clear()
        if self.ray.is_initialized():
            self.ray.shutdown()
        return stopped


def check(options: SweepOptions) -> None:
    """``--executor ray`` needs the ray package: refused before the study is built."""
    _import_ray()


def make(configs: Sequence[RunConfig], options: SweepOptions) -> RayExecutor:
    """The executor ``--executor ray`` names. GPUs are asked for by runs that will use CUDA: ``--device cuda``, or
    ``auto`` where the driver sees one (a cluster whose driver has none: give ``--device cuda``)."""
    cuda = any(c.device == "cuda" for c in configs) or uses_cuda(configs)
    return RayExecutor(options.jobs, options.address, options.cpus_per_run, options.gpus_per_run if cuda else 0,
                       options.retries)
