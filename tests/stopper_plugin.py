"""A plugin for checking preemption and resume, shared by the tests and the GPU check (``--plugin`` this file).

``stopper`` is a ReZero Transformer (learned residual scalars, recorded at every evaluation) with dropout, whose
training forward sends its own process a signal at a chosen forward while a marker file exists, and removes the file:
a preemption at a step the caller chooses, in a run that otherwise trains as the shipped variant does. Dropout and a
warm-up make the random stream and the schedule part of what must resume. The caller chooses by environment, which
the run's subprocesses, a sweep's workers and a torchrun job's ranks inherit:

- ``RESBENCH_STOP_MARKER``: the marker file (no stop where it is unset or the file is missing);
- ``RESBENCH_STOP_AT``: the training forward, counted from 1 in each process, that sends the signal;
- ``RESBENCH_STOP_SIGNAL``: its name (default ``SIGTERM``).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import variants

COUNT = [0]


@variants.register("stopper", family="toy", paper="a test of preemption and resume")
def build(*, depth: int = 2, vocab_size: int = 256, max_len: int = 256):  # type: ignore[no-untyped-def]
    model = variants.create("rezero_lm", depth=depth, d_model=16, n_heads=2, d_ff=32, vocab_size=vocab_size,
                            max_len=max_len, dropout=0.1)

    def hook(module, args):  # type: ignore[no-untyped-def]
        marker = os.environ.get("RESBENCH_STOP_MARKER")
        if not module.training or not marker:
            return
        COUNT[0] += 1
        if COUNT[0] == int(os.environ["RESBENCH_STOP_AT"]):
            try:
                Path(marker).unlink()  # one process (of a torchrun job's ranks) takes it
            except FileNotFoundError:
                return
            os.kill(os.getpid(), getattr(signal, os.environ.get("RESBENCH_STOP_SIGNAL", "SIGTERM")))

    model.register_forward_pre_hook(hook)
    return model
