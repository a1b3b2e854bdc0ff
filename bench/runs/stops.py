"""How a command stops short of done, as exceptions the command line turns into exit statuses: a run stopped by a
preemption signal (:class:`Preempted`, exit :data:`EXIT_PREEMPTED`), a sweep some of whose runs were refused or
preempted (:class:`RunsRefused`, :class:`RunsPreempted`).

They live apart from the code that raises them (:mod:`bench.runs.resume`, :mod:`bench.sweeps.driver`, which load
torch) so that :mod:`bench.cli.dispatch` can catch them without loading torch for a command that only reads.
"""

from __future__ import annotations

from pathlib import Path

EXIT_PREEMPTED = 75  # EX_TEMPFAIL: the run is not done; rerunning the same command continues it


class Preempted(Exception):
    """The run was asked to stop (a preemption signal) and saved its state at step ``step``."""

    def __init__(self, step: int, path: Path | None, signal_name: str) -> None:
        where = f"its state is in {path}" if path is not None else "no checkpoint directory: nothing was saved"
        super().__init__(f"stopped by {signal_name} at step {step}; {where}")
        self.step, self.path, self.signal_name = step, path, signal_name


class RunsRefused(Exception):
    """Some runs of a sweep were refused as bad input (a dataset not on this machine), after the others were
    recorded: not "nothing written", so not the ValueError of bad input."""


class RunsPreempted(Exception):
    """Some runs of a sweep were stopped by a preemption signal after saving their state: rerunning the sweep
    continues them."""
