"""A study's budgets, checked before its first run: each design's steps under a FLOP budget, and a budget that buys
none refused.

At equal FLOPs (``budget_flops`` in a study's base or grid) designs differ in steps by construction: a design whose
step costs more trains fewer. The confound guard (:mod:`bench.sweeps.fairness`) therefore compares a budgeted grid's
designs at one budget, never at one step count, and this module says what each gets (:func:`budget_steps`), so a
budget smaller than some design's one step fails the whole study before anything runs or is written.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from bench.runs import budget
from bench.runs.config import RunConfig
from bench.runs.tasks import get as get_task
from bench.runs.train import model_kwargs, task_options


def _model_key(cfg: RunConfig) -> tuple[object, ...]:
    """What one training step's FLOPs depend on: the model, the task's shapes and the batch."""
    return (cfg.variant, cfg.depth, cfg.model_args, cfg.task, cfg.seq_len, cfg.image_size, cfg.num_classes,
            cfg.vocab_size, cfg.batch_size, cfg.grad_accum, cfg.data_path)


def budget_steps(configs: Sequence[RunConfig], study: str = "study") -> dict[str, int]:
    """Per run id of ``configs`` with a budget, the steps it buys (a FLOP budget's: its step counted once per model
    configuration on the meta device). ValueError naming the study, the field and the design whose one step the
    budget does not cover."""
    steps, counted = {}, {}
    for cfg in configs:
        if cfg.budget_flops is None and cfg.budget_samples is None:
            continue
        per_step = None
        if cfg.budget_flops is not None:
            key = _model_key(cfg)
            if key not in counted:
                task = get_task(cfg.task, device=torch.device("cpu"), seed=cfg.seed, options=task_options(cfg))
                counted[key] = budget.step_flops(cfg, task, model_kwargs(cfg, task))
            per_step = counted[key]
        try:
            steps[cfg.run_id] = budget.budget_steps(cfg, per_step)
        except ValueError as exc:
            raise ValueError(f"study {study!r}{f' (preset {cfg.preset})' if cfg.preset else ''}: {exc}") from None
    return steps
