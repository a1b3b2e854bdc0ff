"""Tasks by name: ``get(name, device=..., seed=..., options=TaskOptions(...)) -> Task``."""

from __future__ import annotations

from collections.abc import Callable

import torch

from bench.runs.tasks import imagefolder, images, pathfinder, sequences, tokens
from bench.runs.tasks.base import Batch, Task, TaskError, TaskOptions

TaskBuilder = Callable[[torch.device, int, TaskOptions], Task]

TASKS: dict[str, TaskBuilder] = {
    "digits": images.digits,
    "synthetic": images.synthetic,
    "cifar10": images.cifar10,
    "cifar100": images.cifar100,
    "pathfinder": pathfinder.pathfinder,
    "imagefolder": imagefolder.imagefolder,
    "text": sequences.text_file,
    "tinytext": sequences.bundled_text,
    "copy": sequences.copy_task,
    "reverse": sequences.reverse_task,
    "recall": sequences.recall_task,
    "tokens": tokens.tokens,
}


def names() -> list[str]:
    return sorted(TASKS)


def get(name: str, *, device: torch.device | str = "cpu", seed: int = 0, options: TaskOptions | None = None) -> Task:
    """Build task ``name`` with its data on ``device``; raises :class:`TaskError` on bad input."""
    if name not in TASKS:
        raise TaskError(f"unknown task {name!r}; choose one of: {', '.join(names())}")
    return TASKS[name](torch.device(device), seed, options or TaskOptions())


__all__ = ["TASKS", "Batch", "Task", "TaskError", "TaskOptions", "get", "names"]
