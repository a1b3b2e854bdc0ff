"""The ``imagefolder`` task on WebDataset tar shards: ``ROOT/train-*.tar`` and ``ROOT/val-*.tar``, each sample an image
member (``KEY.jpg``, ``.jpeg``, ``.png`` or ``.webp``) and its class index (``KEY.cls``, decimal text) side by side,
the format ImageNet is streamed from at scale. Reading uses the ``webdataset`` package (an optional extra:
``pip install 'resbench[data]'``).

Before training every shard's member list is read (tar headers: no image is decoded), so a shard that is not a tar,
a sample without its image or class, or a class that is not an integer is refused naming the shard and the sample.
The classes are ``0 .. max(cls)`` over both splits.

Shards are split over processes, then over each process's workers: in epoch ``e`` the shards are taken in the order
of a permutation keyed by the run's seed and ``e`` (:func:`bench.runs.tasks.loading.permute`), rank ``r`` of ``W``
reads every ``W``-th from ``r``, and its worker ``w`` of ``K`` every ``K``-th of those; samples pass through a
shuffle buffer of :data:`SHUFFLE_BUFFER`. So each sample is read once per epoch by one worker of one process. Unlike
the image tree, the batch order depends on the number of workers and processes (the buffer mixes what one worker
reads), though the augmentation of each sample does not. The evaluation passes read the shards in order: all of val
(or the first ``ceil(cap / shards)`` samples of each shard under ``--eval-batches``), and as many of train for the
training error, at most 10,000.
"""

from __future__ import annotations

import io
import math
import random
import tarfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from bench.runs.tasks import diskimages, loading
from bench.runs.tasks.base import Task, TaskError, TaskOptions

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")
SHUFFLE_BUFFER = 1000  # samples (encoded bytes, ~110 KB each for ImageNet) held per worker to mix shards' orders


def shards(root: Path, split: str) -> list[Path]:
    """The WebDataset shards of ``split`` under ``root`` (``<split>-*.tar``), sorted."""
    return sorted(root.glob(f"{split}-*.tar"))


def _key(name: str) -> tuple[str, str] | None:
    """WebDataset's sample key and extension of a member name: the key ends at the first dot of the base name."""
    base = name.rsplit("/", 1)[-1]
    if "." not in base or base.startswith("__"):
        return None
    stem, ext = base.split(".", 1)
    return name[: len(name) - len(base)] + stem, ext.lower()


def scan_shard(path: Path) -> list[int]:
    """The class index of every sample of one shard, in order; TaskError names a shard or sample that is wrong."""
    samples: dict[str, dict[str, Any]] = {}
    try:
        with tarfile.open(path, "r:") as tar:
            for member in tar:
                split = _key(member.name) if member.isfile() else None
                if split is None:
                    continue
                key, ext = split
                entry = samples.setdefault(key, {})
                if ext == "cls":
                    entry["cls"] = tar.extractfile(member).read()  # type: ignore[union-attr]
                elif ext in IMAGE_EXTENSIONS:
                    entry["image"] = ext
    except (tarfile.TarError, OSError) as exc:
        raise TaskError(f"WebDataset shard {path} is not a readable tar file ({exc}); re-create or re-download "
                        "it") from None
    labels = []
    for key, entry in samples.items():
        if "image" not in entry or "cls" not in entry:
            missing = f"image member ({', '.join('.' + e for e in IMAGE_EXTENSIONS)})" if "image" not in entry \
                else ".cls member (its class index)"
            raise TaskError(f"WebDataset shard {path}: sample {key!r} has no {missing}; every sample needs both")
        try:
            label = int(entry["cls"].decode().strip())
        except (UnicodeDecodeError, ValueError):
            label = -1
        if label < 0:
            raise TaskError(f"WebDataset shard {path}: sample {key!r} has class {entry['cls'][:20]!r}; a .cls member "
                            "holds a class index, a non-negative integer in decimal text")
        labels.append(label)
    return labels


def _sample(raw: dict[str, Any], transform: Any, seed: int | None) -> tuple[Any, int, list[str] | None]:
    """One decoded, transformed sample ``(x, label, None)``, or ``(None, label, [name, reason])`` when it fails."""
    label = int(raw["cls"].decode().strip())
    name = f"{raw.get('__url__')}:{raw['__key__']}"
    ext = next((e for e in IMAGE_EXTENSIONS if e in raw), None)
    try:
        if ext is None:
            raise ValueError("no image member")
        img = diskimages.decode(io.BytesIO(raw[ext]))
        return diskimages.transformed(img, transform, seed), label, None
    except Exception as exc:  # a corrupt image: the training process decides (--skip-bad-images)
        return None, label, [name, f"cannot be decoded ({type(exc).__name__}: {exc})"]


def collate(samples: list[tuple[Any, int, list[str] | None]]) -> tuple[Any, ...]:
    return diskimages.assemble([s[0] for s in samples], [s[1] for s in samples], [s[2] for s in samples if s[2]])


def _read(urls: list[str]) -> Iterator[dict[str, Any]]:
    import webdataset  # optional extra (resbench[data]): only the WebDataset layout needs it

    return webdataset.tariterators.tarfile_samples(iter([{"url": u} for u in urls]))


class TrainShards(IterableDataset[Any]):
    """Endless training samples of this rank's worker: epoch after epoch of its shards, through a shuffle buffer.

    ``start`` global batches of ``share`` samples each are skipped (a resumed run): a DataLoader takes batch ``i``
    from worker ``i % workers``, so the worker that serves the first batch after the skip plays the part of worker
    ``start % workers`` of the uninterrupted stream, and every worker passes over the samples its part had served
    (read from the tar and drawn from the buffer as before, not decoded)."""

    def __init__(self, urls: list[str], key: int, rank: int, world: int, transform: Any, start: int = 0,
                 share: int = 0) -> None:
        self.urls, self.key, self.rank, self.world, self.transform = urls, key, rank, world, transform
        self.start, self.share = start, share

    def __iter__(self) -> Iterator[tuple[Any, int, list[str] | None]]:
        info = get_worker_info()
        real, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        worker = (real + self.start) % workers
        served = self.start // workers + (worker < self.start % workers)
        skip = served * self.share
        n = len(self.urls)
        for epoch in range(2**62):
            epoch_key = int(loading.mix64(np.array([self.key ^ epoch], dtype=np.uint64))[0])
            order = loading.permute(np.arange(n), epoch_key, n)
            mine = [self.urls[i] for i in order[self.rank :: self.world][worker::workers]]
            stream_key = int(loading.mix64(np.array([epoch_key ^ (self.rank * 65537 + worker + 1)],
                                                    dtype=np.uint64))[0])
            rng = random.Random(stream_key)
            for count, raw in enumerate(self._shuffled(_read(mine), rng)):
                if skip:  # served before the resume: drawn as then, not decoded
                    skip -= 1
                    continue
                seed = int(loading.sample_seeds(stream_key, np.array([count]))[0])
                yield _sample(raw, self.transform, seed)

    @staticmethod
    def _shuffled(stream: Iterable[dict[str, Any]], rng: random.Random) -> Iterator[dict[str, Any]]:
        """``stream`` through a shuffle buffer: once it holds :data:`SHUFFLE_BUFFER` samples, one drawn at random
        per sample read; at the end of the stream, the rest drawn until it is empty."""
        buffer: list[dict[str, Any]] = []
        for raw in stream:
            buffer.append(raw)
            if len(buffer) >= SHUFFLE_BUFFER:
                yield TrainShards._pick(buffer, rng)
        while buffer:
            yield TrainShards._pick(buffer, rng)

    @staticmethod
    def _pick(buffer: list[dict[str, Any]], rng: random.Random) -> dict[str, Any]:
        i = rng.randrange(len(buffer))
        buffer[i], buffer[-1] = buffer[-1], buffer[i]
        return buffer.pop()


class EvalShards(IterableDataset[Any]):
    """The first ``per_shard`` samples (None: all) of each shard, in order, split over the workers by shard."""

    def __init__(self, urls: list[str], per_shard: int | None, transform: Any) -> None:
        self.urls, self.per_shard, self.transform = urls, per_shard, transform

    def __iter__(self) -> Iterator[tuple[Any, int, list[str] | None]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for url in self.urls[worker::workers]:
            for i, raw in enumerate(_read([url])):
                if self.per_shard is not None and i >= self.per_shard:
                    break
                yield _sample(raw, self.transform, None)


@dataclass(kw_only=True)
class ShardReader(diskimages.DiskReader):
    """The loaders of a shard set: endless training batches of this rank's shards, fixed evaluation passes."""

    train_urls: list[str]
    val_urls: list[str]
    counts: dict[str, int]  # samples per split

    def train(self, batch_size: int, generator: torch.Generator, start: int = 0) -> DataLoader[Any]:
        world = self.options.world_size
        dataset = TrainShards(self.train_urls, loading.draw_key(generator), self.options.rank, world,
                              diskimages.train_transform(self.options.image_size), start, batch_size // world)
        workers = min(self.workers, len(self.train_urls) // world)  # a worker without a shard would idle
        return DataLoader(dataset, batch_size=batch_size // world, num_workers=workers, collate_fn=collate,
                          pin_memory=self.device.type == "cuda", prefetch_factor=self.options.prefetch if workers
                          else None, generator=loading.own_generator())  # fmt: skip

    def sizes(self) -> tuple[int, int]:
        return self.counts["val"], self.counts["train"]

    def eval_loader(self, which: str, n: int, batch_size: int) -> DataLoader[Any]:
        """All of a split, or the first ``ceil(n / shards)`` samples of each of its shards."""
        urls, full = (self.val_urls, self.counts["val"]) if which == "val" else (self.train_urls, self.counts["train"])
        per_shard = None if n >= full else math.ceil(n / len(urls))
        self.info[f"{which}_eval_size"] = n if per_shard is None else f"first {per_shard} of each shard"
        dataset = EvalShards(urls, per_shard, diskimages.eval_transform(self.options.image_size))
        workers = min(self.workers, len(urls))
        return DataLoader(dataset, batch_size=batch_size, num_workers=workers, collate_fn=collate,
                          pin_memory=self.device.type == "cuda", prefetch_factor=self.options.prefetch if workers
                          else None, persistent_workers=workers > 0, generator=loading.own_generator())


def shard_task(root: Path, device: torch.device, options: TaskOptions) -> Task:
    """``imagefolder`` over ``root``'s ``train-*.tar`` and ``val-*.tar``."""
    try:
        import webdataset  # noqa: F401  optional extra (resbench[data]): checked before anything is read
    except ImportError:
        raise TaskError(f"{root} holds WebDataset shards; reading them needs the webdataset package: "
                        "pip install 'resbench[data]' (or pip install webdataset)") from None
    if options.subset_per_class is not None:
        raise TaskError("--subset-per-class applies to image folders; for WebDataset shards pass a directory holding "
                        "fewer shards")
    started = time.perf_counter()
    found = {split: shards(root, split) for split in ("train", "val")}
    if not found["val"]:
        raise TaskError(f"{root} has train-*.tar shards but no val-*.tar shards; the validation split is needed too")
    if len(found["train"]) < options.world_size:
        raise TaskError(f"{root} has {len(found['train'])} training shards for {options.world_size} processes; each "
                        "process needs a shard of its own: write more, smaller shards")
    labels = {split: [lab for path in paths for lab in scan_shard(path)] for split, paths in found.items()}
    for split, got in labels.items():
        if not got:
            raise TaskError(f"the {split}-*.tar shards of {root} hold no samples; re-create them")
    classes = 1 + max(max(got) for got in labels.values())
    info = diskimages.scan_info(root, "webdataset", classes, (len(labels["train"]), len(labels["val"])), started,
                                train_shards=len(found["train"]), val_shards=len(found["val"]),
                                shuffle_buffer=SHUFFLE_BUFFER)
    reader = ShardReader(train_urls=[str(p) for p in found["train"]], val_urls=[str(p) for p in found["val"]],
                         counts={s: len(v) for s, v in labels.items()}, options=options,
                         workers=diskimages.workers_for(options), device=device, info=info)
    return reader.task(classes, labels["train"])
