"""A run's length as a budget: training FLOPs (``--budget-flops``) or samples seen (``--budget-samples``).

A comparison at equal compute gives every design the same FLOPs, so a design whose step costs more trains fewer
steps, by construction (the fairness guard compares the budget, never the steps it makes). The steps are the
budget over one optimiser step's training FLOPs (forward + backward of ``grad_accum`` micro-batches of
``batch_size`` samples), counted exactly on the meta device by ``torch.utils.flop_counter``
(:func:`bench.runs.measure.meta_step_flops`: shapes only, no memory, no compute), rounded down: a run never spends
more than its budget, and less by under one step. A samples budget is the same over the global batch.

The compute a run actually spent is its steps times that step's FLOPs (the leaderboard's ``train_flops``, beside
its ``budget_flops``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

import variants
from bench.runs import measure
from bench.runs.config import RunConfig


def step_flops(cfg: RunConfig, task: Any, model_kwargs: Mapping[str, Any]) -> float:
    """Training FLOPs of one optimiser step of ``cfg``'s model on ``task`` (its batch's shapes, ``grad_accum``
    micro-batches), counted on the meta device."""
    x, y = next(task.train_batches(1, torch.Generator(device=task_device(task)).manual_seed(0)))
    b = cfg.batch_size
    counted = measure.meta_step_flops(lambda: variants.create(cfg.variant, **model_kwargs),
                                      x.expand(b, *x.shape[1:]), y.expand(b, *y.shape[1:]), task.loss)
    return float(counted.train * cfg.grad_accum)


def task_device(task: Any) -> torch.device:
    """The device a task's batches are drawn on (its own where it keeps one; else the CPU)."""
    return torch.device(getattr(task, "device", "cpu"))


def budget_steps(cfg: RunConfig, flops_per_step: float | None = None) -> int:
    """The optimiser steps ``cfg``'s budget buys: ``budget_flops // flops_per_step`` or ``budget_samples //
    global_batch``. ValueError naming the field where the budget is less than one step."""
    if cfg.budget_samples is not None:
        steps = cfg.budget_samples // cfg.global_batch
        if steps < 1:  # RunConfig refuses it first; kept for a config made around the constructor
            raise ValueError(f"--budget-samples {cfg.budget_samples} is less than one optimiser step "
                             f"({cfg.global_batch} samples)")
        return steps
    if cfg.budget_flops is None or flops_per_step is None:
        raise ValueError("budget_steps: the run has no budget (or its step's FLOPs were not counted)")
    if not flops_per_step > 0:
        raise ValueError(f"--budget-flops: {cfg.variant}'s training step counts {flops_per_step} FLOPs, so a FLOP "
                         "budget cannot set its length; give --steps")
    steps = math.floor(cfg.budget_flops / flops_per_step)
    if steps < 1:
        raise ValueError(f"--budget-flops {cfg.budget_flops:.4g} is less than one training step of {cfg.variant} "
                         f"(depth {cfg.depth}) at its global batch of {cfg.global_batch}: one step takes "
                         f"{flops_per_step:.4g} FLOPs; give at least that")
    return steps


def spent(steps: int, flops_per_step: float | None) -> float | None:
    """Training FLOPs of ``steps`` optimiser steps (None where the step's FLOPs are not known)."""
    return None if flops_per_step is None else float(steps * flops_per_step)
