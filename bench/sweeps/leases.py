"""Claims on run ids, so that two sweeps started on one results folder train each run once.

Before a sweep's driver starts a run it takes the run's claim, ``RESULTS/.claims/<run_id>.lock``, and it keeps it
until the run's row is written (or the run is refused or stopped). Another driver that reaches the same run finds
the claim held and leaves the run to its holder, saying so. A claim is a lock the operating system holds for the
process (:mod:`filelock`, ``flock`` on POSIX): a driver killed with ``SIGKILL`` leaves no stale claim behind, and
the lock files themselves (empty) stay, so no claim is ever taken on a file another driver is about to remove.
"""

from __future__ import annotations

from pathlib import Path

from filelock import FileLock, Timeout

from bench.runs.names import file_name

FOLDER = ".claims"


class Leases:
    """The claims one driver holds on the runs of one results folder."""

    def __init__(self, root: str | Path) -> None:
        self.folder = Path(root) / FOLDER
        self._held: dict[str, FileLock] = {}

    def take(self, run_id: str) -> bool:
        """Claim ``run_id``; False when another process holds its claim (it is running that run)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.folder / f"{file_name(run_id, 'run id')}.lock"), timeout=0)
        try:
            lock.acquire()
        except Timeout:
            return False
        self._held[run_id] = lock
        return True

    def release(self, run_id: str) -> None:
        lock = self._held.pop(run_id, None)
        if lock is not None:
            lock.release()

    def release_all(self) -> None:
        for run_id in list(self._held):
            self.release(run_id)
