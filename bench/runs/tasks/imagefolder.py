"""``imagefolder``: ImageNet-format image trees, read from disk through a DataLoader with worker processes.

The layout is torchvision's ``ImageFolder``: ``ROOT/train/<class>/<image>`` and ``ROOT/val/<class>/<image>``, classes
being the sorted folder names, the same in both splits (ImageNet-1k after its validation images are moved into class
folders, Imagenette, Tiny-ImageNet after the same, any tree of one's own). Where ``ROOT/train/`` is absent and
``ROOT/train-*.tar`` WebDataset shards are present, those are read instead (:mod:`bench.runs.tasks.webdata`).
Transforms and the task itself: :mod:`bench.runs.tasks.diskimages`.

Every image's first and last bytes are checked before training (:func:`~bench.runs.tasks.diskimages.check_image`),
so a truncated download or a file that is not an image is refused, named, before anything runs; with
``--skip-bad-images`` such files are left out instead and counted in the run JSON's task info. An image that passes
the check but fails to decode later, in a worker, ends the run naming it (or, with ``--skip-bad-images``, is
replaced in its batch by another of that batch, and counted).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from torchvision.datasets.folder import IMG_EXTENSIONS

from bench.runs.tasks import diskimages, loading, webdata
from bench.runs.tasks.base import Task, TaskError, TaskOptions

SCAN_THREADS = 16  # the file check waits on the disk: threads overlap the waits


@dataclass(frozen=True)
class FileIndex:
    """The images of one split: paths relative to ``root`` packed in one byte array (a list of 1.28 M Python strings
    would be copied page by page into every forked worker as their reference counts change), and labels."""

    root: Path
    blob: np.ndarray  # uint8: every relative path's UTF-8 bytes, concatenated
    offsets: np.ndarray  # int64, n + 1: path i is blob[offsets[i]:offsets[i + 1]]
    labels: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.labels)

    def relative(self, i: int) -> str:
        return self.blob[self.offsets[i] : self.offsets[i + 1]].tobytes().decode()

    def path(self, i: int) -> str:
        return os.path.join(self.root, self.relative(i))

    @staticmethod
    def build(root: Path, files: list[tuple[str, int]]) -> FileIndex:
        encoded = [name.encode() for name, _ in files]
        offsets = np.zeros(len(files) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(e) for e in encoded])
        blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        return FileIndex(root, blob, offsets, np.array([label for _, label in files], dtype=np.int64))

    def without(self, bad: set[int]) -> FileIndex:
        return FileIndex.build(self.root, [(self.relative(i), int(self.labels[i])) for i in range(len(self))
                                           if i not in bad])


def _is_image_name(name: str) -> bool:
    return name.lower().endswith(IMG_EXTENSIONS)


def class_folders(split: Path) -> list[str]:
    """The class folders of a split directory, sorted (hidden ones skipped)."""
    return sorted(e.name for e in os.scandir(split) if e.is_dir() and not e.name.startswith("."))


def _images_under(folder: Path) -> list[str]:
    """Image files under ``folder`` (recursively, links followed, as ImageFolder does), relative to it, sorted."""
    found = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        rel = os.path.relpath(dirpath, folder)
        found += [os.path.normpath(os.path.join(rel, f)) for f in filenames if _is_image_name(f)]
    return sorted(found)


def scan_split(root: Path, name: str, classes: list[str] | None, per_class: int | None) -> tuple[FileIndex, list[str]]:
    """The images of split ``name`` labelled by ``classes`` (the split's own folders when None), at most
    ``per_class`` of each class (the first in sorted order); TaskError says what is wrong with the tree."""
    split = root / name
    if not split.is_dir():
        raise TaskError(f"{split} is missing: the imagefolder task reads {root}/train/<class>/* and "
                        f"{root}/val/<class>/* (docs/data.md shows how to lay out ImageNet, Imagenette or your own)")
    found = class_folders(split)
    if not found:
        loose = sum(1 for e in os.scandir(split) if e.is_file() and _is_image_name(e.name))
        if loose and name == "val":
            raise TaskError(f"{split} holds {loose} images but no class folders: ImageNet's validation images come in "
                            "one folder and must be moved into one folder per class first (docs/data.md, 'ImageNet')")
        what = f"{loose} images directly in it" if loose else "it is empty"
        raise TaskError(f"{split} has no class folders ({what}); put each class's images in {split}/<class>/")
    if classes is not None and found != classes:
        only_train, only_here = sorted(set(classes) - set(found))[:5], sorted(set(found) - set(classes))[:5]
        raise TaskError(f"the class folders of {root / 'train'} and {split} differ (only in train: "
                        f"{only_train or 'none'}; only in {name}: {only_here or 'none'}); both splits need the same "
                        "classes")
    files: list[tuple[str, int]] = []
    for label, cls in enumerate(found):
        images = _images_under(split / cls)
        if not images:
            raise TaskError(f"{split / cls} holds no images (extensions {', '.join(IMG_EXTENSIONS)}); remove this "
                            "class folder from both splits, or add its images")
        files += [(os.path.join(name, cls, f), label) for f in images[:per_class]]
    return FileIndex.build(root, files), found


def check_files(index: FileIndex, skip_bad: bool, threads: int = SCAN_THREADS) -> tuple[FileIndex, list[list[str]]]:
    """``index`` without its bad files if ``skip_bad`` (else TaskError naming the first), and [path, reason] of each."""
    with ThreadPoolExecutor(max_workers=threads) as pool:
        reasons = list(pool.map(diskimages.check_image, (index.path(i) for i in range(len(index))), chunksize=64))
    bad = {i: r for i, r in enumerate(reasons) if r is not None}
    if bad and not skip_bad:
        i, reason = next(iter(bad.items()))
        more = f" ({len(bad) - 1} more bad files in this split)" if len(bad) > 1 else ""
        raise TaskError(f"image {index.path(i)} {reason}{more}; delete or replace it (re-extract or re-download the "
                        "dataset), or pass --skip-bad-images to leave such files out")
    return (index.without(set(bad)) if bad else index), [[index.path(i), r] for i, r in bad.items()]


class FolderImages(Dataset[Any]):
    """Map-style dataset whose key is a whole batch: ``(items, seeds)`` arrays (``seeds`` None: no augmentation)."""

    def __init__(self, index: FileIndex, transform: Any) -> None:
        self.index, self.transform = index, transform

    def __getitem__(self, key: tuple[np.ndarray, np.ndarray | None]) -> tuple[Any, ...]:
        items, seeds = key
        images: list[torch.Tensor | None] = []
        bad: list[list[str]] = []
        for j, i in enumerate(items):
            path = self.index.path(int(i))
            try:
                img = diskimages.decode(path)
                images.append(diskimages.transformed(img, self.transform, None if seeds is None else int(seeds[j])))
            except Exception as exc:  # a corrupt body behind a good header: the training process decides
                images.append(None)
                bad.append([path, f"cannot be decoded ({type(exc).__name__}: {exc})"])
        return diskimages.assemble(images, [int(self.index.labels[i]) for i in items], bad)


@dataclass(kw_only=True)
class FolderReader(diskimages.DiskReader):
    """The loaders of an image tree: endless shuffled training batches (this rank's share), fixed evaluation passes."""

    train_index: FileIndex
    val_index: FileIndex

    def train(self, batch_size: int, generator: torch.Generator, start: int = 0) -> DataLoader[Any]:
        keys = loading.EpochBatches(len(self.train_index), batch_size, generator, self.options.rank,
                                    self.options.world_size, start)
        dataset = FolderImages(self.train_index, diskimages.train_transform(self.options.image_size))
        return loading.make_loader(dataset, keys, workers=self.workers, prefetch=self.options.prefetch,
                                   device=self.device)

    def sizes(self) -> tuple[int, int]:
        return len(self.val_index), len(self.train_index)

    def eval_loader(self, which: str, n: int, batch_size: int) -> DataLoader[Any]:
        """``n`` fixed images spread evenly over the sorted files (every class alike)."""
        index = self.val_index if which == "val" else self.train_index
        self.info[f"{which}_eval_size"] = n
        keys = [(c, None) for c in loading.chunks(loading.fixed_subset(len(index), n), batch_size)]
        dataset = FolderImages(index, diskimages.eval_transform(self.options.image_size))
        return loading.make_loader(dataset, keys, workers=min(self.workers, len(keys)), prefetch=self.options.prefetch,
                                   device=self.device, persistent=True)


def imagefolder(device: torch.device, seed: int, options: TaskOptions) -> Task:
    """``imagefolder``: ``--data-path ROOT`` holding ``train/`` and ``val/`` class folders (or WebDataset shards)."""
    root = _root(options)
    if not (root / "train").exists() and webdata.shards(root, "train"):
        return webdata.shard_task(root, device, options)
    started = time.perf_counter()
    train, classes = scan_split(root, "train", None, options.subset_per_class)
    val, _ = scan_split(root, "val", classes, options.subset_per_class)
    (train, bad_train), (val, bad_val) = (check_files(split, options.skip_bad_images) for split in (train, val))
    for split, what in ((train, "train"), (val, "val")):
        if not len(split):
            raise TaskError(f"{root / what} has no readable images left; fix or replace its files")
    bad, shown = bad_train + bad_val, diskimages.SHOWN
    info = diskimages.scan_info(
        root, "folders", len(classes), (len(train), len(val)), started, class_names=classes[:shown],
        subset_per_class=options.subset_per_class, bad_images_left_out={"count": len(bad), "first": bad[:shown]})
    reader = FolderReader(train_index=train, val_index=val, options=options, workers=diskimages.workers_for(options),
                          device=device, info=info)
    return reader.task(len(classes), train.labels)


def _root(options: TaskOptions) -> Path:
    if not options.data_path:
        raise TaskError("task imagefolder needs --data-path ROOT: a directory with train/ and val/ class folders "
                        "(or train-*.tar and val-*.tar WebDataset shards); see docs/data.md")
    root = Path(options.data_path).expanduser()
    if not root.is_dir():
        raise TaskError(f"--data-path {options.data_path!r} is not a directory; pass the root holding train/ and val/")
    return root
