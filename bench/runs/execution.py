"""How a training step runs as efficient code: ``torch.compile`` in one of Inductor's modes, and the optimisers'
fused kernels on CUDA. Shared by the training loop, ``bench perf overhead`` and ``bench cost``, so that the three
time one step the same way.

- **Compile modes** (:data:`bench.runs.config.COMPILE_MODES`): ``default``; ``reduce-overhead``, which replays the
  step's kernels as CUDA graphs (one launch for the whole step: for launch-bound nets, small models at small
  batches); ``max-autotune-no-cudagraphs``, which times Triton's and cuBLAS's kernels for each matmul and picks the
  fastest (a longer compile); ``max-autotune``, both. Off CUDA the CUDA-graph part is skipped by torch itself.
- **Fused optimisers**: on CUDA, SGD, Adam and AdamW update every parameter of a group in one fused kernel
  (``fused=True``) instead of a loop of ``foreach`` kernels; elsewhere torch's default implementation. The run JSON
  records which one a run used (``optimizer_impl``); the numbers they compute agree to rounding.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam,
                                                       "adamw": torch.optim.AdamW}


def optimizer_impl(kind: str, device: torch.device) -> str:
    """``fused`` where ``kind``'s torch class has fused kernels for ``device`` (CUDA), else ``default`` (torch's
    choice: ``foreach`` on accelerators, a loop over tensors on the CPU)."""
    accepts = "fused" in inspect.signature(OPTIMIZERS[kind]).parameters
    return "fused" if device.type == "cuda" and accepts else "default"


def make_optimizer(kind: str, params: Iterable[nn.Parameter], device: torch.device, **hyper: Any
                   ) -> torch.optim.Optimizer:
    """Optimiser ``kind`` (sgd, adam, adamw) over ``params`` with ``hyper`` (lr, momentum, betas ...), its kernels
    those of :func:`optimizer_impl`."""
    if optimizer_impl(kind, device) == "fused":
        hyper = {**hyper, "fused": True}
    return OPTIMIZERS[kind](params, **hyper)


def compiled(module: nn.Module, mode: str = "default") -> Callable[..., Any]:
    """``module`` under ``torch.compile`` in Inductor's ``mode`` (``default`` is torch's own default)."""
    return torch.compile(module, mode=None if mode == "default" else mode)


def mark_step() -> None:
    """Tell ``torch.compile``'s CUDA graphs that a new training step begins, so that a replay may reuse the memory of
    the previous step's outputs (``reduce-overhead``); nothing for eager or CPU steps."""
    mark = getattr(torch.compiler, "cudagraph_mark_step_begin", None)
    if mark is not None:
        mark()
