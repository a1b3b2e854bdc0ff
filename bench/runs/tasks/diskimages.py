"""What the image tasks that read from disk share: the file check, decoding, the ImageNet transforms, the reader's
evaluation passes (:class:`DiskReader`), the task info, and the task.

The transforms are the ImageNet recipe of torchvision's reference training scripts: Inception-style
``RandomResizedCrop`` (Szegedy et al. 2015, "Going Deeper with Convolutions": 8%-100% of the area, aspect ratio
3/4-4/3) to ``--image-size`` plus a horizontal flip for training; the shorter side resized to ``size * 256 / 224``
and a centre crop of ``size`` for evaluation. Workers hand over uint8 pixels (a quarter of float32's bytes through
shared memory and over PCIe); the ImageNet mean and std are applied on the device.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from torch.utils.data import DataLoader
from torchvision import transforms

from bench.runs.tasks import loading
from bench.runs.tasks.base import Batch, Task, TaskError, TaskOptions, prior_entropy

IMAGENET_MEAN = (0.485, 0.456, 0.406)  # torchvision's ImageNet statistics (RGB, pixels in [0, 1])
IMAGENET_STD = (0.229, 0.224, 0.225)
RESIZE_RATIO = 256 / 224  # evaluation: resize the shorter side to size * 256/224, then centre-crop size
TRAIN_EVAL_CAP = 10_000  # training-error pass: a fixed subset, so its cost stays bounded on ImageNet
DEFAULT_WORKERS = 8
SHOWN = 20  # bad files named in the task info (all are counted)
_TAIL = 4096  # bytes at the end of a file searched for the format's end marker

# Leading bytes of the formats PIL decodes that ImageFolder's extensions name; a file's content decides, not its
# name (one ImageNet training "JPEG" is a PNG).
MAGIC: tuple[tuple[bytes, int, str], ...] = (
    (b"\xff\xd8\xff", 0, "JPEG"), (b"\x89PNG\r\n\x1a\n", 0, "PNG"), (b"BM", 0, "BMP"), (b"WEBP", 8, "WEBP"),
    (b"II*\x00", 0, "TIFF"), (b"MM\x00*", 0, "TIFF"), (b"GIF8", 0, "GIF"),
    *((f"P{i}".encode(), 0, "PPM") for i in range(1, 8)),
)  # fmt: skip
END_MARKERS = {"JPEG": b"\xff\xd9", "PNG": b"IEND"}  # a file without its marker near the end was cut short


def check_image(path: str) -> str | None:
    """Why ``path`` is not a readable, complete image (None if it looks fine): its first bytes must be an image
    format's and, for JPEG and PNG, its last 4 KiB must hold the format's end marker. Reads two small pieces."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
            if not head:
                return "is empty"
            fmt = next((name for magic, at, name in MAGIC if head[at : at + len(magic)] == magic), None)
            if fmt is None:
                return f"is not an image (first bytes {head[:8].hex()})"
            if fmt in END_MARKERS:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(0, size - _TAIL))
                if END_MARKERS[fmt] not in f.read():
                    return f"is truncated (the {fmt} end marker is missing)"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return None


def train_transform(size: int) -> transforms.Compose:
    return transforms.Compose([transforms.RandomResizedCrop(size, antialias=True), transforms.RandomHorizontalFlip(),
                               transforms.PILToTensor()])


def eval_transform(size: int) -> transforms.Compose:
    return transforms.Compose([transforms.Resize(eval_resize(size), antialias=True), transforms.CenterCrop(size),
                               transforms.PILToTensor()])


def eval_resize(size: int) -> int:
    return round(size * RESIZE_RATIO)


def decode(source: Any) -> Image.Image:
    """An image file (a path or a file object) as RGB: greyscale, palette and CMYK images are converted."""
    with Image.open(source) as img:
        return img.convert("RGB")


def transformed(img: Image.Image, transform: Any, seed: int | None) -> torch.Tensor:
    """``transform(img)``; a random transform draws from torch's generator seeded with ``seed``, and the caller's
    random stream is left as it was (with no workers, the loader runs in the training process)."""
    if seed is None:
        return transform(img)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        return transform(img)


def assemble(images: list[torch.Tensor | None], labels: list[int], bad: list[list[str]]) -> tuple[Any, ...]:
    """A batch ``(x, y, bad)`` from per-sample results (None where an image failed, its ``[name, reason]`` in
    ``bad``): a failed sample is replaced by the batch's first good one, so every batch keeps its shape; the task
    decides whether to accept that (``--skip-bad-images``)."""
    good = next((i for i, x in enumerate(images) if x is not None), None)
    if good is None:
        return torch.zeros(0, dtype=torch.uint8), torch.zeros(0, dtype=torch.long), bad
    xs = [x if x is not None else images[good] for x in images]
    ys = [y if x is not None else labels[good] for x, y in zip(images, labels, strict=True)]
    return torch.stack(xs), torch.tensor(ys, dtype=torch.long), bad  # type: ignore[arg-type]


def eval_sizes(options: TaskOptions, n_val: int, n_train: int, batch_size: int) -> tuple[int, int]:
    """Images in the validation and training-error passes: all of val and up to 10,000 of train, each at most
    ``--eval-batches`` batches of ``batch_size`` (the pass's batch, the run's)."""
    val, train = n_val, min(n_train, TRAIN_EVAL_CAP)
    if options.eval_batches is not None:
        val, train = min(val, options.eval_batches * batch_size), min(train, options.eval_batches * batch_size)
    return val, train


@dataclass(kw_only=True)
class DiskReader:
    """What the readers of an image set on disk share (:class:`bench.runs.tasks.imagefolder.FolderReader`,
    :class:`bench.runs.tasks.webdata.ShardReader`): the run's task options, its worker count, device and task info,
    and the evaluation passes, each a loader kept from one evaluation to the next (its workers persist).

    A reader says how many images each split holds (:meth:`sizes`) and makes one evaluation pass over ``n`` of them
    (:meth:`eval_loader`, which records in ``info`` what the pass reads), and its endless training batches
    (``train(batch_size, generator, start)``)."""

    options: TaskOptions
    workers: int
    device: torch.device
    info: dict[str, Any]
    _eval_loaders: dict[tuple[str, int], DataLoader[Any]] = field(default_factory=dict)

    def train(self, batch_size: int, generator: torch.Generator, start: int = 0) -> DataLoader[Any]:  # pragma: no cover
        """Endless training batches of ``batch_size`` (this rank's share), the first ``start`` skipped."""
        raise NotImplementedError

    def sizes(self) -> tuple[int, int]:  # pragma: no cover - each reader's
        """Images in the validation and the training split."""
        raise NotImplementedError

    def eval_loader(self, which: str, n: int, batch_size: int) -> DataLoader[Any]:  # pragma: no cover - each reader's
        """One pass over ``n`` images of split ``which`` (``"val"`` or ``"train"``) in batches of ``batch_size``."""
        raise NotImplementedError

    def evaluation(self, which: str, batch_size: int) -> DataLoader[Any]:
        """The pass of :func:`eval_sizes` over split ``which``: all of val, up to 10,000 of train, ``--eval-batches``
        batches at most; made once per split and batch size."""
        if (which, batch_size) not in self._eval_loaders:
            n_val, n_train = eval_sizes(self.options, *self.sizes(), batch_size)
            self._eval_loaders[which, batch_size] = self.eval_loader(which, n_val if which == "val" else n_train,
                                                                     batch_size)
        return self._eval_loaders[which, batch_size]

    def task(self, classes: int, train_labels: Any) -> LoaderImageTask:
        """The ``imagefolder`` task over this reader (:func:`image_task`); the reader records into the task's info
        from then on (the evaluation sizes, as they become known)."""
        task = image_task(self, self.device, self.info, classes, train_labels, self.options, self.workers)
        self.info = task.info
        return task


def scan_info(root: Path, layout: str, classes: int, sizes: tuple[int, int], started: float,
              **more: Any) -> dict[str, Any]:
    """The task info every layout records: its root, layout, classes, split sizes, ``more`` and the scan's time."""
    return {"root": str(root), "layout": layout, "classes": classes, **more, "train_size": sizes[0],
            "val_size": sizes[1], "scan_s": round(time.perf_counter() - started, 3)}


@dataclass(kw_only=True, repr=False, eq=False)
class LoaderImageTask(Task):
    """Images read from disk by DataLoader workers; batches arrive as uint8 and are normalised on the device.

    ``reader`` (a :class:`DiskReader`) makes the loaders: ``train(batch_size, generator, start)`` and
    ``evaluation(which, batch_size)`` (``which`` is ``"val"`` or ``"train"``) return iterables of ``(x, y, bad)``.
    """

    reader: DiskReader
    mean: torch.Tensor  # (1, 3, 1, 1) in pixel units (0-255)
    std: torch.Tensor
    skip_bad: bool = False
    bad_seen: list[list[str]] = field(default_factory=list)
    _workers: loading.Workers = field(default_factory=loading.Workers)

    def close(self) -> None:
        self._workers.stop()
        self.reader._eval_loaders.clear()

    def _normalise(self, x: torch.Tensor) -> torch.Tensor:
        return (x.float() - self.mean) / self.std

    def _batches(self, loader: Any) -> Iterator[Batch]:
        for x, y, bad in self._workers.batches(loader):
            if bad:
                self._bad(bad)
            if len(y):
                yield loading.to_device((x, y), self.device, self._normalise)

    def _bad(self, bad: list[list[str]]) -> None:
        if not self.skip_bad:
            name, reason = bad[0]
            raise TaskError(f"image {name} {reason}; delete or replace it, or pass --skip-bad-images to replace such "
                            "images by another of their batch")
        self.bad_seen += bad
        self.info["bad_images_in_training"] = {"count": len(self.bad_seen), "first": self.bad_seen[:SHOWN]}

    def set_workers(self, workers: int) -> None:
        """Load with ``workers`` worker processes from now on (``bench perf loader`` compares counts)."""
        self.loader_workers = self.reader.workers = self.info["workers"] = workers

    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[Batch]:
        return self.train_batches_from(batch_size, generator, 0)

    def train_batches_from(self, batch_size: int, generator: torch.Generator, start: int) -> Iterator[Batch]:
        return self._batches(self.reader.train(batch_size, generator, start))

    def val_batches(self, batch_size: int) -> Iterator[Batch]:
        return self._batches(self.reader.evaluation("val", batch_size))

    def train_eval_batches(self, batch_size: int) -> Iterator[Batch]:
        return self._batches(self.reader.evaluation("train", batch_size))


def image_task(reader: DiskReader, device: torch.device, info: dict[str, Any], classes: int, train_labels: Any,
               options: TaskOptions, workers: int) -> LoaderImageTask:
    """The ``imagefolder`` task over ``reader``, its model fitted to ``classes`` RGB classes of ``--image-size``;
    ``train_labels`` are the training split's labels, whose frequencies set the chance level."""
    size = options.image_size
    info = {**info, "image_size": size, "train_transform": f"RandomResizedCrop({size}) + horizontal flip",
            "val_transform": f"Resize({eval_resize(size)}) + CenterCrop({size})", "mean": list(IMAGENET_MEAN),
            "std": list(IMAGENET_STD), "workers": workers, "prefetch": options.prefetch,
            "eval_batches": options.eval_batches}
    return LoaderImageTask(
        name="imagefolder", kind="image", device=device, info=info, num_train=len(train_labels),
        chance_loss=prior_entropy(torch.as_tensor(train_labels)),
        model_kwargs={"num_classes": classes, "in_chans": 3, "image_size": size},
        reader=reader, loader_workers=workers, per_rank_batches=True, skip_bad=options.skip_bad_images,
        mean=(torch.tensor(IMAGENET_MEAN) * 255).view(1, 3, 1, 1).to(device),
        std=(torch.tensor(IMAGENET_STD) * 255).view(1, 3, 1, 1).to(device),
    )  # fmt: skip


def workers_for(options: TaskOptions) -> int:
    return options.workers if options.workers is not None else loading.default_workers(DEFAULT_WORKERS)
