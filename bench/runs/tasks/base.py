"""The task interface: data already on the device, a batch sampler, a loss and a metric.

A task is everything the training loop needs besides the model. Small datasets live on the
device as tensors and are batched by indexing; augmentation runs on the device too, so the
loop never waits on a host-side data loader. Large ones (``imagefolder``, ``tokens``) stay on disk
and arrive through a DataLoader with workers (:mod:`bench.runs.tasks.loading`); their
``loader_workers`` says so, and the throughput phase then times the model apart from the loader.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F


def prior_entropy(targets: torch.Tensor | Any, ignore: int | None = None) -> float:
    """The entropy (nats) of the empirical distribution of ``targets`` (non-negative integer labels or token ids,
    any shape; ``ignore`` left out): the cross-entropy of always predicting their frequencies."""
    t = torch.as_tensor(targets).reshape(-1).to("cpu", torch.long)
    if ignore is not None:
        t = t[t != ignore]
    counts = torch.bincount(t).double()
    p = counts[counts > 0] / counts.sum()
    return float(-(p * p.log()).sum())


class TaskError(ValueError):
    """Bad task input (unknown task, missing or corrupt dataset): the CLI prints it and exits 2."""


def available_memory() -> int | None:
    """Bytes this process may still allocate: the memory the machine has free (``/proc/meminfo``'s MemAvailable,
    else free pages), or the address-space limit (``ulimit -v``) if lower; None where neither can be read."""
    found: list[int] = []
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            found += [int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        with contextlib.suppress(ValueError, OSError, AttributeError):
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    try:
        import resource  # POSIX only

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            found.append(soft)
    except (ImportError, OSError, ValueError):
        pass
    return min(found) if found else None


def check_fits(nbytes: int, what: str) -> None:
    """TaskError before anything is allocated when ``nbytes`` (what a task is about to generate, described by
    ``what``) is more than this process may allocate (:func:`available_memory`): an exit with the estimate, not an
    allocator's traceback or a run recorded as out of memory."""
    free = available_memory()
    if free is not None and nbytes > free:
        raise TaskError(f"{what} needs about {nbytes / 2**30:.3g} GiB of memory, more than the {free / 2**30:.3g} GiB "
                        "this process may allocate; make it smaller")


Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class TaskOptions:
    """Options a task may read; each task ignores those that do not concern it."""

    data_dir: str | None = None  # where cifar10/cifar100 archives live (else $RESBENCH_DATA or ~/.cache/resbench)
    data_path: str | None = None  # the UTF-8 file of the `text` task
    seq_len: int = 128  # tokens per training window (sequence tasks)
    image_size: int = 32  # side of `synthetic` images
    num_classes: int = 10  # classes of `synthetic`
    random_labels: bool = False  # `synthetic`: labels independent of the inputs (fit-random-labels study)
    train_size: int = 4096  # samples in generated train splits (`synthetic`, copy/reverse/recall)
    val_size: int = 1024  # samples in generated validation splits
    contour_length: int = 9  # pathfinder: dashes per contour
    distractors: int = 1  # pathfinder: contours besides the two that may carry the markers
    channels: int = 1  # pathfinder: image channels (the grey image in each)
    augment: bool = True  # image tasks: pad-and-crop + horizontal flip on the device (He 2015's CIFAR augmentation)
    # Tasks that read from disk (imagefolder, tokens): the loader, the evaluation caps, this process's place.
    workers: int | None = None  # DataLoader worker processes (None: the task's default)
    prefetch: int = 2  # batches each worker prepares ahead
    subset_per_class: int | None = None  # imagefolder: the first K images of each class in each split
    skip_bad_images: bool = False  # imagefolder: leave unreadable images out (counted) instead of refusing
    vocab_size: int = 50257  # tokens: the model's vocabulary; every token id must be below it
    eval_batches: int | None = None  # at most this many batches per evaluation pass
    eval_tokens: int | None = None  # tokens, text: tokens per evaluation pass
    train_tokens: int | None = None  # sequence tasks read from text or shards: the first N training tokens only
    rank: int = 0  # this process's rank in a torchrun job: a loader task reads only its share of each batch
    world_size: int = 1


@dataclass
class Task:
    """Base class. Subclasses implement :meth:`train_batches`, :meth:`val_batches`, :meth:`train_eval_batches`.

    ``model_kwargs`` are what ``variants.create`` needs to fit the model to the data
    (``num_classes``/``in_chans`` for images, ``vocab_size``/``max_len`` for sequences).
    ``unit`` names what throughput counts (``"samples"`` or ``"tokens"``); ``units_per_sample``
    converts (1 for images, the sequence length for language modelling).
    """

    name: str
    kind: str  # "image" or "sequence"
    model_kwargs: dict[str, Any]
    device: torch.device
    unit: str = "samples"
    units_per_sample: int = 1
    info: dict[str, Any] = field(default_factory=dict)  # sizes, split, checksums: recorded in the run JSON
    num_train: int = 0  # samples (sequences/windows) in one epoch of the training split
    default_steps: int | None = None  # run length when neither --epochs nor --steps is given (else 30 epochs)
    loader_workers: int | None = None  # worker processes of the task's DataLoader; None: the data is on the device
    # True: train_batches already yields this rank's share of each global batch (it read only that share), so the
    # training step must not shard it again (bench.runs.distributed.shard).
    per_rank_batches: bool = False
    # The task's chance level, in nats: the loss of a model that predicts the training targets' frequencies and
    # nothing else (the label prior's entropy, ln C for C balanced classes; a language's unigram entropy). A run
    # that ends there learned nothing (bench.runs.chance). None: not declared.
    chance_loss: float | None = None

    def close(self) -> None:
        """Release what the task holds beyond memory (a loader's worker processes) once the run is over; the task is
        not iterated afterwards. Nothing here: the data of most tasks is on the device."""

    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[Batch]:
        """Endless training batches (augmented where the task augments), drawn with ``generator``."""
        raise NotImplementedError

    def train_batches_from(self, batch_size: int, generator: torch.Generator, start: int) -> Iterator[Batch]:
        """The training batches from the ``start``-th on: exactly those the uninterrupted stream gives from there (a
        resumed run's data). Here the batches before are drawn and dropped; a task that reads from disk skips them
        without reading them."""
        batches = self.train_batches(batch_size, generator)
        for _ in range(start):
            next(batches)
        return batches

    def val_batches(self, batch_size: int) -> Iterator[Batch]:
        """One pass over the fixed validation split, no augmentation."""
        raise NotImplementedError

    def train_eval_batches(self, batch_size: int) -> Iterator[Batch]:
        """One pass over a fixed subset of the training split without augmentation (training error)."""
        raise NotImplementedError

    def loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy; sequence logits (B, T, V) are flattened over tokens."""
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))

    def correct(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Number of correct predictions (per token for sequences), as a 0-dim tensor (no host sync)."""
        return (logits.argmax(-1) == target).sum()

    def count(self, target: torch.Tensor) -> int:
        """How many predictions ``correct`` counted over (samples, or tokens)."""
        return target.numel()

    def extra_metrics(self, val_loss: float) -> dict[str, float]:
        """Task-specific metrics derived from the validation loss (bits per character, perplexity)."""
        return {}
