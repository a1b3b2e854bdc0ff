"""Long runs survive: the training state saved during a run, found again by a rerun, and preemption.

A run checkpoints its whole training state into ``RESULTS/checkpoints/<run_id>/step-<step>.pt`` every
``--checkpoint-every`` steps and/or ``--checkpoint-minutes`` minutes, and always when it is asked to stop
(``SIGTERM``, or ``SIGUSR1`` as Slurm's ``--signal`` sends it) at the next step boundary. Rerunning the same command
(the same run id) continues from the newest valid checkpoint: bit-exactly, since the state is everything the rest
of the run depends on — the model, the optimiser, the learning-rate schedule (with a warm-up that ended early), the
AMP grad scaler, every random state (torch's CPU and CUDA generators, numpy's, Python's), the position in the data
stream (the batches already drawn are drawn again and dropped: the task's own generator then stands where it
stood), the step, the curves and probes recorded so far and the cost figures measured before training.

Files are written atomically (a temporary file renamed into place) under new names, the last ``--keep-checkpoints``
kept: a write that fails never touches an existing checkpoint. They are read with ``torch.load(weights_only=True)``
(tensors and plain containers only). A checkpoint of another configuration or another torch major version is
refused; a damaged newest one (a truncated file) gives way to the one before it, with a warning. A run whose row is
written no longer needs them: :func:`discard` removes its directory.
"""

from __future__ import annotations

import contextlib
import io
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.runs.config import RunConfig
from bench.runs.results import atomic_write_bytes
from bench.runs.stops import EXIT_PREEMPTED, Preempted  # noqa: F401  (raised here; importers read them here too)

FORMAT = "resbench-training-state/1"
PREEMPT_SIGNALS = ("SIGTERM", "SIGUSR1")


def directory(results_dir: str | Path, run_id: str) -> Path:
    """Where a run's mid-run checkpoints live."""
    return Path(results_dir) / "checkpoints" / run_id


def discard(results_dir: str | Path, run_id: str) -> None:
    """Remove a finished run's mid-run checkpoints (its row is written: they are no longer needed)."""
    folder = directory(results_dir, run_id)
    if folder.is_dir():
        for path in folder.glob("*.pt"):
            path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            folder.rmdir()


def rng_state() -> dict[str, Any]:
    """Every random state a run draws from, as plain data."""
    np_state = np.random.get_state()
    py_state = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": [np_state[0], torch.from_numpy(np.asarray(np_state[1], dtype=np.int64)), *np_state[2:]],  # type: ignore[index]
        "python": [py_state[0], list(py_state[1]), py_state[2]],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), *rest))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


@dataclass
class Checkpointer:
    """When a run saves its state, where, and how many it keeps; ``folder`` None saves nothing (no results
    directory: a dry run, a timing phase)."""

    folder: Path | None
    cfg: RunConfig
    every_steps: int | None = None
    every_minutes: float | None = None
    keep: int = 2
    last_save: float = field(default_factory=time.monotonic)
    extra: Callable[[], dict[str, Any]] = dict  # what the run adds to each state: its cost figures, time so far

    def due(self, step: int) -> bool:
        """Whether the schedule asks for a checkpoint at ``step`` (preemption aside)."""
        if self.folder is None:
            return False
        by_steps = self.every_steps is not None and step % self.every_steps == 0
        by_time = self.every_minutes is not None and time.monotonic() - self.last_save >= 60 * self.every_minutes
        return by_steps or by_time

    def save(self, step: int, state: dict[str, Any]) -> Path | None:
        """Write ``state`` (the run's training state at ``step``) atomically; keep the newest ``keep``."""
        if self.folder is None:
            return None
        payload = {"format": FORMAT, "run_id": self.cfg.run_id, "config_hash": self.cfg.config_hash(),
                   "torch": str(torch.__version__), "step": step, **self.extra(), **state}
        buffer = _serialise(payload)
        path = self.folder / f"step-{step:09d}.pt"
        atomic_write_bytes(path, buffer)  # a new name: an older checkpoint is never overwritten
        for old in sorted(self.folder.glob("step-*.pt"))[: -self.keep]:
            old.unlink(missing_ok=True)
        self.last_save = time.monotonic()
        return path

    def latest(self) -> dict[str, Any] | None:
        """The newest valid checkpoint of this run, or None; a damaged newest one gives way to the one before it
        (with a warning); one of another configuration or torch major version is refused (ValueError)."""
        if self.folder is None or not self.folder.is_dir():
            return None
        paths = sorted(self.folder.glob("step-*.pt"), reverse=True)
        for path in paths:
            try:
                payload = torch.load(path, map_location="cpu", weights_only=True)
            except Exception as exc:  # a truncated or garbled file: any reader error
                print(f"warning: checkpoint {path} is damaged ({type(exc).__name__}); trying the one before it",
                      file=sys.stderr, flush=True)
                continue
            self._check(payload, path)
            return payload  # type: ignore[no-any-return]
        if paths:
            raise ValueError(f"every checkpoint in {self.folder} is damaged; delete the directory to start the run "
                             "over (or restore a copy of it)")
        return None

    def _check(self, payload: Any, path: Path) -> None:
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            raise ValueError(f"{path} is not a resbench training state ({FORMAT}); move it out of {path.parent}")
        if payload.get("config_hash") != self.cfg.config_hash() or payload.get("run_id") != self.cfg.run_id:
            raise ValueError(f"{path} belongs to another configuration (run {payload.get('run_id')}, config hash "
                             f"{payload.get('config_hash')}); this run is {self.cfg.run_id}: delete {path.parent} to "
                             "start it over")
        theirs, ours = str(payload.get("torch", "")).split(".")[0], torch.__version__.split(".")[0]
        if theirs != ours:
            raise ValueError(f"{path} was written by torch {payload.get('torch')}, this is torch {torch.__version__}: "
                             "a state of another torch major version is not resumed; delete "
                             f"{path.parent} to start the run over with this torch")


def _serialise(payload: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return buffer.getvalue()


@dataclass
class StopRequest:
    """Set by a preemption signal; read by the training loop at its next step boundary."""

    signal_name: str | None = None


@contextlib.contextmanager
def preemption() -> Iterator[StopRequest]:
    """While training: ``SIGTERM`` and ``SIGUSR1`` ask the run to stop at the next step boundary (after saving its
    state) instead of killing it. Main thread only (signal handlers live there); elsewhere a no-op."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def ask(signum: int, frame: Any) -> None:
        request.signal_name = signal.Signals(signum).name

    previous = {}
    for name in PREEMPT_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is not None:
            previous[sig] = signal.signal(sig, ask)
    try:
        yield request
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
