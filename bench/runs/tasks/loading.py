"""Data that stays where it is: the batch order, per-rank shares and DataLoader of the tasks that read from disk.

The ``imagefolder`` and ``tokens`` tasks keep their data on disk (image files, WebDataset tars, memory-mapped token
shards) and feed the device through a :class:`torch.utils.data.DataLoader` with worker processes, pinned memory and
prefetch. What they share lives here:

- **The order of an epoch** is a keyed pseudorandom permutation of its ``n`` items (:func:`permute`: a small Feistel
  network over the next power of four, cycle-walked into ``[0, n)``). It needs O(1) memory however large ``n`` is
  (a 10-billion-token corpus has ten million windows: no ``randperm`` of them is ever held), and any position of any
  epoch is computed directly. Each epoch's key is drawn from the run's seeded generator, so the order is the seed's.
- **The global batch** of step ``t`` is positions ``[tB, (t+1)B)`` of the epoch order, as for a one-process run;
  under torchrun rank ``r`` of ``W`` takes the contiguous share ``[tB + rB/W, tB + (r+1)B/W)`` and reads only those
  items (:class:`EpochBatches`). The ranks' shares are disjoint and together the one-process batch.
- **Augmentation** draws from a generator seeded per sample by the epoch key and the position
  (:func:`sample_seeds`), not from a worker's stream: the same seed gives the same crops and flips whatever the number
  of workers or processes, which is why ``workers`` is not part of a run's identity.
"""

from __future__ import annotations

import math
import os
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from bench.runs.tasks.base import TaskError

FEISTEL_ROUNDS = 4  # Luby and Rackoff (1988): four Feistel rounds make a strong pseudorandom permutation
_GOLDEN = 0x9E3779B97F4A7C15  # 2^64 / golden ratio: spreads the round keys of one key apart
_U64 = np.uint64


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser (Steele, Lea and Flood, 2014), a bijection of 64-bit words, element-wise (uint64)."""
    x = np.asarray(x, dtype=_U64)
    with np.errstate(over="ignore"):  # multiplication modulo 2^64 is the point
        x = (x ^ (x >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> _U64(27))) * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


def permute(positions: np.ndarray, key: int, n: int) -> np.ndarray:
    """The items at ``positions`` (in ``[0, n)``) of the permutation of ``range(n)`` keyed by ``key``.

    A balanced Feistel network permutes ``[0, 4^h)`` (``4^h`` the first power of four >= ``n``); values that land
    at or beyond ``n`` are permuted again until they fall inside ("cycle walking"), which keeps it a bijection of
    ``[0, n)``. Fewer than four rounds of walking are needed on average, since ``4^h < 4n``.
    """
    if n < 1:
        raise ValueError(f"cannot permute an empty range (n = {n})")
    half = max(1, math.ceil(max(n - 1, 1).bit_length() / 2))
    mask = _U64((1 << half) - 1)
    with np.errstate(over="ignore"):
        round_keys = mix64(np.array([key], dtype=_U64) + _U64(_GOLDEN) * np.arange(1, FEISTEL_ROUNDS + 1, dtype=_U64))

    def once(x: np.ndarray) -> np.ndarray:
        left, right = x >> _U64(half), x & mask
        for k in round_keys:
            left, right = right, left ^ (mix64(right ^ k) & mask)
        return (left << _U64(half)) | right

    out = once(np.asarray(positions, dtype=_U64))
    outside = out >= _U64(n)
    while outside.any():
        out[outside] = once(out[outside])
        outside = out >= _U64(n)
    return out.astype(np.int64)


def sample_seeds(key: int, positions: np.ndarray) -> np.ndarray:
    """A seed per sample for its augmentation, from the epoch key and the sample's position in the epoch."""
    with np.errstate(over="ignore"):
        mixed = mix64(mix64(np.asarray(positions, dtype=_U64)) ^ _U64(key))
    return (mixed >> _U64(1)).astype(np.int64)  # 63 bits: torch.Generator.manual_seed takes them as they are


def draw_key(generator: torch.Generator) -> int:
    """An epoch key from the run's generator (on whatever device it lives)."""
    return int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device).item())


class EpochBatches:
    """Endless keys of this rank's share of each global batch: ``(items, seeds)`` arrays, ``B / world`` long.

    Epochs of ``n`` items, each in the order of :func:`permute` under a key drawn from ``generator`` when the epoch
    starts; ``n // B`` global batches per epoch (the last partial one is dropped, so every step has the same shape).
    The keys start at global batch ``start``: the keys of the epochs before are drawn (the generator stands where an
    uninterrupted stream leaves it) and no item before is read.
    """

    def __init__(self, n: int, batch_size: int, generator: torch.Generator, rank: int = 0, world: int = 1,
                 start: int = 0) -> None:
        if batch_size < 1 or batch_size % world:
            raise TaskError(f"batch size {batch_size} must be a positive multiple of the {world} processes")
        if n < batch_size:
            raise TaskError(f"batch size {batch_size} exceeds the {n} training items; use a smaller --batch-size")
        self.n, self.batch, self.generator = n, batch_size, generator
        self.share = batch_size // world
        self.offset = rank * self.share
        self.start = start

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        per_epoch = self.n // self.batch
        epochs, first = divmod(self.start, per_epoch)
        for _ in range(epochs):
            draw_key(self.generator)
        while True:
            key = draw_key(self.generator)
            for b in range(first, per_epoch):
                start = b * self.batch + self.offset
                positions = np.arange(start, start + self.share, dtype=np.int64)
                yield permute(positions, key, self.n), sample_seeds(key, positions)
            first = 0


def fixed_subset(n: int, count: int) -> np.ndarray:
    """``count`` of ``n`` items spread evenly (item ``floor(i n / count)``): a fixed, seed-independent subset."""
    count = min(count, n)
    return (np.arange(count, dtype=np.int64) * n) // max(count, 1)


def chunks(items: np.ndarray, size: int) -> list[np.ndarray]:
    """``items`` cut into consecutive pieces of ``size`` (the last may be shorter): the keys of a fixed pass."""
    return [items[i : i + size] for i in range(0, len(items), size)]


def default_workers(preferred: int) -> int:
    """``preferred`` worker processes, at most the CPUs this process may use, less one for the training loop."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS has no affinity masks
        cpus = os.cpu_count() or 1
    return max(0, min(preferred, cpus - 1))


def own_generator() -> torch.Generator:
    """The generator a DataLoader draws its workers' base seed from when it starts an iterator. Without one it
    draws from torch's global generator, the one dropout draws from: a resumed run, whose loaders start at another
    step, would then drop out other units than the uninterrupted run. (Augmentation is seeded per sample.)"""
    return torch.Generator().manual_seed(0)


def make_loader(dataset: Dataset[Any], keys: Iterable[Any], *, workers: int, prefetch: int, device: torch.device,
                persistent: bool = False) -> DataLoader[Any]:
    """A DataLoader whose every key (from ``keys``, iterated in this process) is one whole batch: the workers decode
    batches in parallel, pinned for a non-blocking copy when the device is a GPU."""
    return DataLoader(
        dataset, batch_size=None, sampler=keys, num_workers=workers, pin_memory=device.type == "cuda",
        prefetch_factor=prefetch if workers else None, persistent_workers=persistent and workers > 0,
        generator=own_generator(),
    )  # fmt: skip


class Workers:
    """The worker processes of a task's loaders, stopped together when the run is over (:meth:`stop`).

    Every pass over a loader goes through :meth:`batches`, which remembers the loader's iterator, the owner of its
    worker processes. Left to themselves, those processes end when the iterator is garbage: at once for a pass whose
    last reference goes, but a persistent evaluation loader, or a pass abandoned after one batch, that a reference
    cycle keeps (a run's nested functions) lasts until Python's cycle collector runs, which finalises the
    iterator's queues before the iterator: each worker then waits out its 5-second poll before it sees the end
    (a notebook's next ``bench.run`` stalled 5 s a loader). :meth:`stop` ends them all while nothing is finalised.
    """

    def __init__(self) -> None:
        self._live: weakref.WeakSet[Any] = weakref.WeakSet()

    def batches(self, loader: Iterable[Any]) -> Iterator[Any]:
        """The items of one pass over ``loader``, its iterator remembered."""
        iterator = iter(loader)
        self._live.add(iterator)
        yield from iterator

    def stop(self) -> None:
        """End the worker processes of every loader iterator still alive; a loader is not iterated afterwards.
        torch offers no public call for it: this is what deleting the iterator runs (``_shutdown_workers``, there
        since torch 1.x, a no-op on an iterator without workers or already stopped)."""
        for iterator in list(self._live):
            shutdown = getattr(iterator, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
        self._live.clear()


def to_device(batch: tuple[torch.Tensor, torch.Tensor], device: torch.device,
              transform: Callable[[torch.Tensor], torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x, y)`` on ``device`` (non-blocking from pinned memory), ``x`` passed through ``transform`` there."""
    x, y = (t.to(device, non_blocking=True) for t in batch)
    return (transform(x) if transform is not None else x), y
