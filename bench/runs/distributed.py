"""One run across processes (and GPUs): ``torchrun --nproc-per-node N -m bench run ...`` trains with
:class:`~torch.nn.parallel.DistributedDataParallel`.

torchrun starts N copies of ``bench run`` and tells each its ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` (and where
rank 0 listens); :func:`current` reads them. Each rank then

- joins the process group: NCCL on CUDA (rank r on GPU ``LOCAL_RANK``), gloo on the CPU;
- builds the same model from the same seed (DDP also broadcasts rank 0's weights when it wraps the model);
- draws the same *global* batch of ``--batch-size`` samples from the same generator and keeps its own
  contiguous shard, ``batch_size / WORLD_SIZE`` samples (:func:`shard`), so augmentation and sampling are those of
  a one-process run with that batch;
- computes the mean loss of its shard; DDP averages the gradients across ranks — with equal shards, the gradient
  of the global batch's mean loss, so one process and N processes follow the same curve up to floating-point
  reassociation (tested with gloo, 2 processes);
- logs the global mean loss (each recorded loss is averaged across ranks, :func:`mean_across`), evaluates and
  probes on its full copy of the model (identical on every rank).

Rank 0 alone writes the run's row: ``world_size`` = N, ``batch_size`` the global batch, and a throughput measured
on the distributed step (global batch ÷ step time: the aggregate of all ranks). The run id hashes the world size
(:attr:`bench.runs.config.RunConfig.world_size`), so a 2-process run never replaces the 1-process run of its config.
BatchNorm statistics stay per rank (as DDP does by default): a BN model is not step-for-step equal to one process.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    """This process's place in a torchrun job."""

    rank: int
    size: int
    local_rank: int

    @property
    def main(self) -> bool:
        """Rank 0: the one that reports progress and writes the row."""
        return self.rank == 0


def current() -> World | None:
    """The torchrun job this process belongs to, from its environment; None outside torchrun (or with one process)."""
    size = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if size <= 1:
        return None
    return World(int(os.environ.get("RANK", "0")), size, int(os.environ.get("LOCAL_RANK", "0")))


def world_size() -> int:
    """``WORLD_SIZE`` as torchrun set it (1 outside torchrun): what a run's config records."""
    world = current()
    return world.size if world else 1


def device_for(world: World, device: torch.device) -> torch.device:
    """The device a rank trains on: its own GPU (``cuda:LOCAL_RANK``) on CUDA, else the one resolved."""
    return torch.device("cuda", world.local_rank) if device.type == "cuda" else device


@contextlib.contextmanager
def session(world: World, device: torch.device) -> Iterator[None]:
    """The process group for the run: NCCL on CUDA, gloo otherwise; destroyed when the run ends."""
    started = not dist.is_initialized()
    if started:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=world.rank, world_size=world.size)
    try:
        yield
    finally:
        if started and dist.is_initialized():
            dist.destroy_process_group()


def shard(x: torch.Tensor, y: torch.Tensor, world: World) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's contiguous share of a global batch (its size divisible by the world size: checked in setup)."""
    n = len(x) // world.size
    part = slice(world.rank * n, (world.rank + 1) * n)
    return x[part], y[part]


def mean_across(t: torch.Tensor) -> torch.Tensor:
    """The mean of ``t`` over the ranks (a copy; every rank gets it)."""
    out = t.detach().clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out / dist.get_world_size()


def sum_across(t: torch.Tensor) -> torch.Tensor:
    """The sum of ``t`` over the ranks (a copy)."""
    out = t.detach().clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out


def any_across(flag: bool, world: World | None) -> bool:
    """Whether ``flag`` is set on any rank (every rank must call it at the same point); ``flag`` itself outside a
    torchrun job."""
    if world is None:
        return flag
    on = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    t = torch.tensor([1.0 if flag else 0.0], device=on)  # NCCL reduces CUDA tensors only
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)
