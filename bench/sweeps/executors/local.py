"""The ``local`` executor (``--executor local --jobs N``): each run in a process of its own on this machine.

A segfault, a ``SIGKILL`` or the kernel's OOM killer costs that run only. The processes are forked from a server
process (multiprocessing's ``forkserver``) that has imported torch, resbench and the variants once: a run starts in
milliseconds instead of the seconds a fresh interpreter needs, and still shares no state with the driver or other
runs. If that server dies (the OOM killer picks it: it is a large process), the next launch starts another, and
the runs already started go on: a run's end is read from its own pipe, never from the server. Concurrent jobs
split the CPU cores free when the sweep starts (``torch.set_num_threads`` and ``OMP_NUM_THREADS`` = free cores //
jobs, at least 1, at most the driver's own torch threads; :mod:`bench.runs.threads`); on CUDA each job gets its
own GPUs through ``CUDA_VISIBLE_DEVICES`` (``--gpus-per-run``). A job's process leads its own process group (its
CPU memory probe included), so the driver stops it whole, and it kills itself when the driver's end of its pipe
closes: a driver killed with ``SIGKILL`` leaves nothing running.
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from multiprocessing import forkserver
from typing import Any

import torch

from bench.runs.config import RunConfig
from bench.runs.threads import free_cores, usable_cores
from bench.sweeps.executors.base import Event, Job, execute_job, uses_cuda
from bench.sweeps.options import SweepOptions

# After SIGTERM, how long a stopped job may take to exit before it is killed: a run in training saves its state at
# the next step boundary first (bench.runs.resume), so that a rerun continues it.
STOP_GRACE_S = 60.0
LAUNCH_TRIES = 3  # a launch that fails because the fork server died is tried again, with a new server
# Imported once by the server that forks the local executor's processes, so each run starts without importing.
PRELOAD = ["torch", "variants", "bench.runs.runner", "bench.runs.probes", "bench.runs.tasks", "sklearn.datasets",
            "sklearn.model_selection", "bench.sweeps.executors.local"]  # fmt: skip


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


def visible_gpus(environ: Mapping[str, str] | None = None) -> list[str]:
    """The GPUs this process may use: the entries of ``CUDA_VISIBLE_DEVICES``, else every device torch counts."""
    environ = os.environ if environ is None else environ
    if "CUDA_VISIBLE_DEVICES" in environ:
        return [d.strip() for d in environ["CUDA_VISIBLE_DEVICES"].split(",") if d.strip() and d.strip() != "-1"]
    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def plan_placements(jobs: int, gpus_per_run: int = 1, cores: int | None = None, gpus: Sequence[str] | None = None,
                    thread_cap: int | None = None) -> list[Placement]:
    """One placement per slot: ``jobs`` of them, fewer where the GPUs run out.

    ``gpus`` (None: the runs use no GPU) are dealt out ``gpus_per_run`` at a time (0: every job sees all of
    them). The cores are split evenly between the slots, at least one thread each, and no more than
    ``thread_cap`` (the driver's own torch threads). ValueError names the fix when no slot fits.
    """
    if jobs < 1 or gpus_per_run < 0:
        raise ValueError(f"--jobs must be >= 1 and --gpus-per-run >= 0, got {jobs} and {gpus_per_run}")
    groups: list[tuple[str, ...]] = [()] * jobs
    if gpus is not None and gpus_per_run > 0:
        slots = len(gpus) // gpus_per_run
        if slots == 0:
            raise ValueError(f"--gpus-per-run {gpus_per_run} needs {gpus_per_run} GPUs, but {len(gpus)} are visible "
                             f"({', '.join(gpus) or 'none'}); pass a smaller --gpus-per-run, or --device cpu")
        groups = [tuple(gpus[i * gpus_per_run:(i + 1) * gpus_per_run]) for i in range(min(jobs, slots))]
    threads = max(1, (cores or usable_cores()) // len(groups))
    if thread_cap is not None:
        threads = max(1, min(threads, thread_cap))
    return [Placement(threads, g) for g in groups]


def _thread_cap() -> int:
    """The threads this process's torch uses (``OMP_NUM_THREADS``, ``torch.set_num_threads``, else torch's default):
    no job gets more, so ``--jobs 1`` trains exactly as a run in this process would."""
    return torch.get_num_threads()


def prestart() -> None:
    """Start the fork server in the background (it imports torch and resbench), so that it gets ready while the
    driver builds and checks the study's models."""
    _process_context()


def _process_context() -> Any:
    """The multiprocessing context of local jobs: a fork server with resbench imported (spawn where there is none)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    forkserver.ensure_running()  # returns at once; the server imports PRELOAD while this process goes on
    return ctx


def make(configs: Sequence[RunConfig], options: SweepOptions) -> LocalExecutor:
    """The executor ``--executor local`` names, sized for ``configs``; bad input raises ValueError, starting nothing."""
    gpus = visible_gpus() if uses_cuda(configs) else None
    return LocalExecutor(plan_placements(options.jobs, options.gpus_per_run, cores=free_cores(), gpus=gpus,
                                         thread_cap=_thread_cap()))


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
        self._unlaunched: list[Event] = []  # jobs whose process could not be started: failed, reported by wait()
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
        error = ""
        for _ in range(LAUNCH_TRIES):
            results_r, results_w = ctx.Pipe(duplex=False)
            alive_r, alive_w = ctx.Pipe(duplex=False)
            process = ctx.Process(target=_work, args=(job, placement, dict(os.environ), results_w, alive_r),
                                  name=f"resbench-{job.config.run_id}", daemon=False)
            try:
                process.start()
            except (EOFError, OSError) as exc:  # the fork server died under this launch: the next try starts one
                error = f"{type(exc).__name__}: {exc}"
                for conn in (results_r, results_w, alive_r, alive_w):
                    conn.close()
                continue
            results_w.close()  # only the job writes there: its end closing is how a dead job shows
            alive_r.close()
            self._workers.append(_Worker(job, process, results_r, alive_w, placement, time.perf_counter(),
                                         _oom_kills()))
            return f"pid {process.pid}, {placement.describe()}"
        self._free.append(placement)
        self._unlaunched.append(Event(job, "failed", {
            "status": "killed", "placement": placement.record(),
            "error": f"the run's process could not be started: the process that starts runs (multiprocessing's fork "
                     f"server) died {LAUNCH_TRIES} times while launching it ({error or 'no reason given'}); was it "
                     "killed, e.g. by the OOM killer?"}))  # fmt: skip
        return "not started (see its row)"

    def in_flight(self) -> list[Job]:
        return [w.job for w in self._workers] + [e.job for e in self._unlaunched]

    def wait(self, timeout: float | None = None) -> list[Event]:
        if self._unlaunched:
            unlaunched, self._unlaunched = self._unlaunched, []
            return unlaunched
        if not self._workers:
            return []
        # A job has ended when its end of the results pipe closes (it sent its result, or it died): never read from
        # the fork server, which may have died while the jobs it started go on.
        multiprocessing.connection.wait([w.results for w in self._workers], timeout)
        events: list[Event] = []
        for w in list(self._workers):
            events += self._drain(w)
            if w.ended is None and w.eof:
                w.process.join(timeout=STOP_GRACE_S)  # it has closed its pipe: it is exiting
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
    torch.set_num_threads(placement.threads)

    def send(kind: str, data: dict[str, Any]) -> None:
        try:
            results.send((kind, data))
        except (BrokenPipeError, EOFError, OSError):
            os._exit(1)  # nobody to report to: the driver is gone

    execute_job(job, placement.record(), send)
    results.close()


def _die_with_driver(alive: Any) -> None:
    """Block on the pipe only the driver writes to; when it closes (the driver exited or was killed), end the job."""
    with contextlib.suppress(EOFError, OSError):
        alive.recv()
    with contextlib.suppress(OSError):
        os.killpg(os.getpgid(0), signal.SIGKILL)
    os._exit(1)
