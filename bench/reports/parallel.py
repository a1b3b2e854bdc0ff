"""Drawing a set of figures in parallel where the machine has cores to spare (``bench plot --jobs``, ``bench report
--jobs``; the default is the cores free now, :func:`bench.runs.cores.free_cores`, as ``--threads`` picks).

A figure is drawn and saved by the same code whichever process draws it, so its PNG is the same file; the workers
are forked (they start with the data already in memory: nothing is pickled or read again), each drawing every
``workers``-th figure. Where the platform cannot fork (Windows), or one worker is asked for, they are drawn in turn.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from matplotlib.figure import Figure

from bench.reports.drawing import measured_once

Job = tuple[Path, Callable[[], Figure]]  # where a figure goes, and what draws it


def save(path: Path, make: Callable[[], Figure]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = make()
    measured_once(fig)  # the same pixels, measured once less
    fig.savefig(path, dpi=120, bbox_inches="tight")  # whatever the layout left outside the figure


def draw_all(jobs: Sequence[Job], workers: int = 1) -> None:
    """Draw and save every figure of ``jobs``, with up to ``workers`` processes; a figure that fails to draw raises
    here (RuntimeError from a worker, its traceback printed) once the others are done."""
    workers = max(1, min(workers, len(jobs)))
    if workers == 1 or not hasattr(os, "fork"):
        for path, make in jobs:
            save(path, make)
        return
    sys.stdout.flush()
    sys.stderr.flush()
    children = []
    for w in range(1, workers):
        pid = os.fork()
        if pid == 0:  # a worker: draw its share, never return into the caller's code
            code = 0
            try:
                for path, make in jobs[w::workers]:
                    save(path, make)
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        children.append(pid)
    try:
        for path, make in jobs[0::workers]:
            save(path, make)
    finally:
        failed = [pid for pid in children if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0]
    if failed:
        raise RuntimeError(f"{len(failed)} of {workers} figure-drawing processes failed (their tracebacks above)")
