"""`bench perf loader` times a loader in steady state: after the workers' start and the batches they queued meanwhile,
over whole rounds of the workers, so that a burst of batches made together is never timed as the pipeline's rate."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset

from bench.runs import perf
from bench.runs.tasks import TaskOptions, loading

DELAY_S = 0.05  # one worker makes one batch in this time: W workers make W / DELAY_S batches per second
BATCH = 4


class SlowBatches(Dataset[Any]):
    """Each key is a whole batch that takes DELAY_S to make (sleeping: the machine's load does not change it)."""

    def __getitem__(self, key: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(DELAY_S)
        return torch.full((BATCH, 3), float(key)), torch.zeros(BATCH, dtype=torch.long)

    def __len__(self) -> int:
        return 10**6


class SlowTask:
    """A loader task of :class:`SlowBatches` read by the harness's real DataLoader (worker processes, prefetch)."""

    unit, units_per_sample, info = "samples", 1, {"name": "slow"}

    def __init__(self, prefetch: int) -> None:
        self.loader_workers, self.prefetch = 0, prefetch

    def set_workers(self, workers: int) -> None:
        self.loader_workers = workers

    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[Any]:
        yield from loading.make_loader(SlowBatches(), iter(range(10**6)), workers=self.loader_workers,
                                       prefetch=self.prefetch, device=torch.device("cpu"))


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_the_loader_is_timed_in_steady_state_over_whole_rounds_of_its_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(perf, "get_task", lambda *a, **k: SlowTask(prefetch=2))
    # Two timed batches asked for: the old window (the 2 batches after the queue) timed one burst of 3 workers' batches
    # made together and read several times the rate the workers can make.
    res = perf.loader("slow", TaskOptions(prefetch=2), [0, 3], batch_size=BATCH, batches=2)
    alone, three = res["rows"]
    assert (alone["timed_batches"], three["timed_batches"]) == (3, 9)  # at least 3 whole rounds
    for row, workers in ((alone, 1), (three, 3)):
        made = workers / DELAY_S * BATCH  # samples per second the workers can make: no window can read more
        assert made * 0.5 < row["samples_per_s"] < made * 1.2, (row, made)
        assert row["first_batch_s"] >= DELAY_S and row["queue_s"] >= 0
    assert three["queue_s"] > 0  # 3 workers x prefetch 2 queued while the first batch was made: drained, not timed


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="--batches must be >= 1"):
        perf.loader("imagefolder", TaskOptions(), [0], batch_size=4, batches=0)
