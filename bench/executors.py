"""Executors: where the runs of a sweep execute. The sweep's driver (:mod:`bench.study`) hands them jobs and
reads back events; it alone writes the results directory.

One interface, :class:`Executor`: ``submit`` a :class:`Job` (one RunConfig, and the cost figures it may reuse),
``wait`` for :class:`Event` s, ``stop`` whatever is in flight. The events of a job are

- ``setup`` and ``measured`` (data: the row as it would read then, and the measurements): what the run got to,
  so that the driver can reuse its cost figures in other runs and build the row of a run that dies later;
- then exactly one of ``finished`` (data: ``run_json``), ``refused`` (bad input, e.g. a dataset not on this
  machine; data: ``error``; no row) or ``failed`` (the run ended without a run JSON; data: ``status`` --
  ``killed``, ``oom`` or ``error`` -- ``error``, the reason, and ``placement``; the driver writes its row).

:class:`LocalExecutor` (``--executor local --jobs N``) runs each job in a process of its own, so a segfault, a
``SIGKILL`` or the kernel's OOM killer costs that run only. The processes are forked from a server process
(multiprocessing's ``forkserver``) that has imported torch, resbench and the variants once: a run starts in
milliseconds instead of the seconds a fresh interpreter needs, and still shares no state with the driver or
other runs. Concurrent jobs split the CPU cores (``torch.set_num_threads`` and ``OMP_NUM_THREADS`` = cores //
jobs, at least 1, at most the driver's own torch threads); on CUDA each job gets its own GPUs through
``CUDA_VISIBLE_DEVICES`` (``--gpus-per-run``). A job's process leads its own process group (its CPU memory
probe included), so the driver stops it whole, and it kills itself when the driver's end of its pipe closes: a
driver killed with ``SIGKILL`` leaves nothing
running. :class:`bench.ray_executor.RayExecutor` (``--executor ray``) offers the same four methods on a Ray cluster.
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .config import RunConfig
from .runner import Reuse

EXECUTORS = ("local", "ray")  # the names --executor takes; each is one class offering the Executor protocol
STOP_GRACE_S = 5.0  # after SIGTERM, how long a stopped job may take to exit before it is killed
# Imported once by the server that forks the local executor's processes, so each run starts without importing.
_PRELOAD = ["torch", "variants", "bench.runner", "bench.probes", "bench.tasks", "sklearn.datasets",
            "sklearn.model_selection", "bench.executors"]  # fmt: skip


@dataclass(frozen=True)
class Job:
    """One run handed to an executor."""

    index: int  # its position in the sweep's grid, 1-based: the i of the driver's "[i/N]" lines
    config: RunConfig
    reuse: Reuse | None = None  # cost figures of the first run of its model configuration, or measure its own
    progress: bool = False  # may draw a progress bar (one job at a time, on a terminal)
    plugins: tuple[str, ...] = ()  # specs that load, in the run's process, the plugins loaded in the driver's


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


# -- placement: threads and GPUs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """The share of the machine one job gets."""

    threads: int  # torch intra-op threads (and OMP_NUM_THREADS / MKL_NUM_THREADS of its subprocesses)
    gpus: tuple[str, ...] = ()  # CUDA_VISIBLE_DEVICES entries; empty: the job sees what the driver sees

    def environ(self) -> dict[str, str]:
        n = str(self.threads)
        return {"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n,
                **({"CUDA_VISIBLE_DEVICES": ",".join(self.gpus)} if self.gpus else {})}

    def record(self) -> dict[str, Any]:
        """What the run JSON stores (``placement``); its ``gpus`` name the row's device."""
        return {"threads": self.threads, "gpus": list(self.gpus)}

    def describe(self) -> str:
        gpus = f", GPU{'s' if len(self.gpus) > 1 else ''} {','.join(self.gpus)}" if self.gpus else ""
        return f"{self.threads} thread{'s' if self.threads > 1 else ''}{gpus}"


def cpu_cores() -> int:
    """The cores this process may run on (its affinity mask where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def visible_gpus(environ: Mapping[str, str] | None = None) -> list[str]:
    """The GPUs this process may use: the entries of ``CUDA_VISIBLE_DEVICES``, else every device torch counts."""
    environ = os.environ if environ is None else environ
    if "CUDA_VISIBLE_DEVICES" in environ:
        return [d.strip() for d in environ["CUDA_VISIBLE_DEVICES"].split(",") if d.strip() and d.strip() != "-1"]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def plan_placements(jobs: int, gpus_per_run: int = 1, cores: int | None = None, gpus: Sequence[str] | None = None,
                    thread_cap: int | None = None) -> list[Placement]:
    """One placement per slot: ``jobs`` of them, fewer where the GPUs run out.

    ``gpus`` (None: the runs use no GPU) are dealt out ``gpus_per_run`` at a time (0: every job sees all of
    them). The cores are split evenly between the slots, at least one thread each, and no more than
    ``thread_cap`` (the driver's own torch threads). ValueError names the fix when no slot fits.
    """
    check_options("local", jobs, gpus_per_run)
    groups: list[tuple[str, ...]] = [()] * jobs
    if gpus is not None and gpus_per_run > 0:
        slots = len(gpus) // gpus_per_run
        if slots == 0:
            raise ValueError(f"--gpus-per-run {gpus_per_run} needs {gpus_per_run} GPUs, but {len(gpus)} are visible "
                             f"({', '.join(gpus) or 'none'}); pass a smaller --gpus-per-run, or --device cpu")
        groups = [tuple(gpus[i * gpus_per_run:(i + 1) * gpus_per_run]) for i in range(min(jobs, slots))]
    threads = max(1, (cores or cpu_cores()) // len(groups))
    if thread_cap is not None:
        threads = max(1, min(threads, thread_cap))
    return [Placement(threads, g) for g in groups]


def _thread_cap() -> int:
    """The threads this process's torch uses (``OMP_NUM_THREADS``, ``torch.set_num_threads``, else torch's default):
    no job gets more, so ``--jobs 1`` trains exactly as a run in this process would."""
    import torch

    return torch.get_num_threads()


def _uses_cuda(configs: Sequence[RunConfig]) -> bool:
    """Whether any run will train on CUDA (``auto`` picks CUDA first where there is one)."""
    if not any(c.device in ("cuda", "auto") for c in configs):
        return False
    import torch

    return torch.cuda.is_available()


def check_options(name: str, jobs: int = 1, gpus_per_run: int = 1, address: str | None = None,
                  cpus_per_run: int = 1, retries: int = 0) -> None:
    """Refuse (ValueError) an unknown executor, a count out of range, or an option of another executor: before a
    study is even built. ``--executor ray`` without the ray package is refused here too."""
    if name not in EXECUTORS:
        raise ValueError(f"unknown executor {name!r}; choose one of: {', '.join(EXECUTORS)}")
    if jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {jobs}")
    if gpus_per_run < 0:
        raise ValueError(f"--gpus-per-run must be >= 0, got {gpus_per_run}")
    if cpus_per_run < 1 or retries < 0:
        raise ValueError(f"--cpus-per-run must be >= 1 and --retries >= 0, got {cpus_per_run} and {retries}")
    if name != "ray" and (address is not None or cpus_per_run != 1 or retries):
        raise ValueError("--address, --cpus-per-run and --retries are options of --executor ray")
    if name == "ray":
        from .ray_executor import _import_ray

        _import_ray()


def prestart(name: str) -> None:
    """Start what executor ``name`` needs in the background (the local executor's fork server, importing torch
    and resbench), so that it gets ready while the driver builds and checks the study's models."""
    if name == "local":
        _process_context()


def _process_context() -> Any:
    """The multiprocessing context of local jobs: a fork server with resbench imported (spawn where there is none)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    from multiprocessing import forkserver

    forkserver.ensure_running()  # returns at once; the server imports _PRELOAD while this process goes on
    return ctx


def make_executor(name: str, configs: Sequence[RunConfig], jobs: int = 1, gpus_per_run: int = 1,
                  address: str | None = None, cpus_per_run: int = 1, retries: int = 0) -> Executor:
    """The executor ``--executor NAME`` names, sized for ``configs``; bad input raises ValueError, starting nothing."""
    check_options(name, jobs, gpus_per_run, address, cpus_per_run, retries)
    if name == "ray":
        from .ray_executor import make

        return make(configs, jobs, gpus_per_run, address, cpus_per_run, retries)
    gpus = visible_gpus() if _uses_cuda(configs) else None
    return LocalExecutor(plan_placements(jobs, gpus_per_run, gpus=gpus, thread_cap=_thread_cap()))


# -- the local executor ---------------------------------------------------------------------------------------


@dataclass
class _Worker:
    job: Job
    process: Any  # multiprocessing's Process of the forkserver context
    results: multiprocessing.connection.Connection  # the job's events arrive here
    alive: multiprocessing.connection.Connection  # held open while the driver lives; closing it ends the job
    placement: Placement
    started: float
    oom_kills: int | None  # the kernel's OOM-kill count when the job started
    last: dict[str, Any] = dataclasses.field(default_factory=dict)  # data of its latest setup/measured event
    ended: Event | None = None
    eof: bool = False  # its end of the results pipe is closed: the process has exited or is exiting


class LocalExecutor:
    """Each job in a process of its own on this machine, ``len(placements)`` at a time (see the module docstring)."""

    name = "local"

    def __init__(self, placements: Sequence[Placement]) -> None:
        if not placements:
            raise ValueError("an executor needs at least one slot")
        self.placements = list(placements)
        self.slots = len(self.placements)
        self._free = list(self.placements)
        self._workers: list[_Worker] = []
        self._ctx: Any = None

    def _context(self) -> Any:
        if self._ctx is None:
            self._ctx = _process_context()
        return self._ctx

    def submit(self, job: Job) -> str:
        if not self._free:
            raise RuntimeError("no free slot: wait for a job to end before submitting another")
        ctx = self._context()
        placement = self._free.pop(0)
        results_r, results_w = ctx.Pipe(duplex=False)
        alive_r, alive_w = ctx.Pipe(duplex=False)
        process = ctx.Process(target=_work, args=(job, placement, dict(os.environ), results_w, alive_r),
                              name=f"resbench-{job.config.run_id}", daemon=False)
        process.start()
        results_w.close()  # only the job writes there: its end closing is how a dead job shows
        alive_r.close()
        self._workers.append(_Worker(job, process, results_r, alive_w, placement, time.perf_counter(), _oom_kills()))
        return f"pid {process.pid}, {placement.describe()}"

    def in_flight(self) -> list[Job]:
        return [w.job for w in self._workers]

    def wait(self, timeout: float | None = None) -> list[Event]:
        if not self._workers:
            return []
        handles = [h for w in self._workers for h in (w.results, w.process.sentinel)]
        multiprocessing.connection.wait(handles, timeout)
        events: list[Event] = []
        for w in list(self._workers):
            events += self._drain(w)
            if w.ended is None and (w.eof or not w.process.is_alive()):
                w.process.join()  # its pipe closes only as it exits
                events += self._drain(w)  # what it sent just before it exited
                if w.ended is None:
                    w.ended = self._death(w)
                    events.append(w.ended)
            if w.ended is not None:
                self._release(w)
        return events

    def _drain(self, w: _Worker) -> list[Event]:
        out: list[Event] = []
        while w.ended is None:
            try:
                if not w.results.poll():
                    break
                kind, data = w.results.recv()
            except (EOFError, OSError):
                w.eof = True  # the job's end is closed: it has exited (or is exiting); its exit code says how
                break
            event = Event(w.job, kind, data)
            out.append(event)
            if kind in ("setup", "measured"):
                w.last = data
            else:
                w.ended = event
        return out

    def _death(self, w: _Worker) -> Event:
        """The event of a job whose process ended without sending its result."""
        w.process.join()
        code, wall = w.process.exitcode, time.perf_counter() - w.started
        phase = "while training" if "measurements" in w.last else "while measuring" if w.last else "while setting up"
        if code is not None and code < 0:
            try:
                sig = signal.Signals(-code).name
            except ValueError:
                sig = f"signal {-code}"
            oom = code == -signal.SIGKILL and w.oom_kills is not None and (_oom_kills() or 0) > w.oom_kills
            status = "oom" if oom else "killed"
            cause = ("; the kernel's OOM killer fired meanwhile (oom_kill in /proc/vmstat rose)" if oom else
                     "; a SIGKILL nobody sent by hand is often the kernel's OOM killer (see dmesg)"
                     if code == -signal.SIGKILL else "")
            error = f"the run's process was killed by {sig} {phase}, after {wall:.1f} s{cause}"
        else:
            status, error = "error", f"the run's process exited with status {code} {phase}, after {wall:.1f} s, " \
                                     "without a result (its stderr is above)"
        return Event(w.job, "failed", {"status": status, "error": error, "placement": w.placement.record()})

    def _release(self, w: _Worker) -> None:
        self._workers.remove(w)
        with contextlib.suppress(Exception):
            w.process.join(timeout=STOP_GRACE_S)
        for conn in (w.results, w.alive):
            conn.close()
        self._free.append(w.placement)

    def stop(self) -> list[Job]:
        stopped = [w.job for w in self._workers]
        for w in self._workers:
            _signal_group(w.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for w in self._workers:
            w.process.join(timeout=max(0.0, deadline - time.monotonic()))
            if w.process.is_alive():
                _signal_group(w.process.pid, signal.SIGKILL)
                w.process.join()
        for w in list(self._workers):
            self._release(w)
        return stopped


def _signal_group(pid: int | None, sig: int) -> None:
    """Send ``sig`` to the process group a job's process leads (the job and its memory probe)."""
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            os.kill(pid, sig)  # it had not yet made its own group


def _oom_kills() -> int | None:
    """The kernel's count of OOM kills since boot (Linux >= 4.13), or None where not available."""
    try:
        with open("/proc/vmstat", encoding="ascii") as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


# -- the job's process ----------------------------------------------------------------------------------------


def _work(job: Job, placement: Placement, environ: dict[str, str], results: Any, alive: Any) -> None:
    """Body of a job's process: take the driver's environment and this job's share of the machine, run, report."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)  # a group of its own: stopped whole by the driver, and not by the terminal's Ctrl-C
    threading.Thread(target=_die_with_driver, args=(alive,), daemon=True).start()
    faulthandler.enable()  # a segfault prints the Python stack to stderr before the driver records the death
    os.environ.clear()  # the driver's environment as of this job's start (not the fork server's, older)
    os.environ.update(environ)
    os.environ.update(placement.environ())
    import torch

    from . import plugins
    from .runner import classify_failure, one_line, run_config

    torch.set_num_threads(placement.threads)

    def send(kind: str, data: dict[str, Any]) -> None:
        try:
            results.send((kind, data))
        except (BrokenPipeError, EOFError, OSError):
            os._exit(1)  # nobody to report to: the driver is gone

    try:
        plugins.load_plugins(list(job.plugins))
        run_json = run_config(job.config, progress=job.progress, reuse=job.reuse, report=send,
                              placement=placement.record())
    except ValueError as exc:  # bad input for this run only (e.g. a dataset not on this machine)
        send("refused", {"error": str(exc)})
    except Exception as exc:  # raised outside the recorded phases (e.g. out of memory building the model)
        status = classify_failure(exc)
        where = traceback.extract_tb(exc.__traceback__)[-1:]
        at = f" ({where[0].filename.rsplit(os.sep, 1)[-1]}:{where[0].lineno})" if where else ""
        send("failed", {"status": status, "error": one_line(f"{type(exc).__name__}: {exc}{at}"),
                        "placement": placement.record()})
    else:
        send("finished", {"run_json": run_json})
    results.close()


def _die_with_driver(alive: Any) -> None:
    """Block on the pipe only the driver writes to; when it closes (the driver exited or was killed), end the job."""
    with contextlib.suppress(EOFError, OSError):
        alive.recv()
    with contextlib.suppress(OSError):
        os.killpg(os.getpgid(0), signal.SIGKILL)
    os._exit(1)
