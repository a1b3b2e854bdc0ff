"""``bench perf overhead``: does the harness slow the model down?

Times, side by side in one process, the harness's real training loop (:func:`bench.runs.train.train`,
with its batch sampling on the device, loss recording, lr schedule and divergence checks) and a
minimal hand-written PyTorch loop (one fixed batch, zero_grad / forward / backward / step) on the
same model, batch size and device. Repeats alternate between the two so drift in machine speed
hits both alike; the ratio of medians is reported.
"""

from __future__ import annotations

import copy
import dataclasses
import statistics
import time
from typing import Any

import torch

from bench.runs.config import RunConfig
from bench.runs.measure import synchronize
from bench.runs.train import Record, after_step_hook, autocast, batch_generator, make_optimizer, setup, train


def overhead(cfg: RunConfig, steps: int = 30, repeats: int = 7) -> dict[str, Any]:
    if steps < 1 or repeats < 1:
        raise ValueError("--timed-steps and --repeats must be >= 1")
    cfg = dataclasses.replace(cfg, steps=steps, epochs=None, measure=(), probe_every=None, schedule="constant")
    s = setup(cfg)
    s.eval_every = steps  # one evaluation, after the timed steps (train() excludes it from train_time_s)
    reference = copy.deepcopy(s.model)
    opt = make_optimizer(cfg, reference)
    x, y = next(s.task.train_batches(cfg.batch_size, batch_generator(s, 7)))
    if cfg.channels_last and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    forward = torch.compile(reference) if cfg.compile else reference  # the same settings as the harness
    after_step = after_step_hook(reference)  # part of the model's step (nGPT's renormalisation), not overhead

    def minimal_ms() -> float:
        synchronize(s.device)
        t0 = time.perf_counter()
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            with autocast(cfg, s.device):
                loss = s.task.loss(forward(x), y)
            loss.backward()
            opt.step()
            if after_step is not None:
                with torch.no_grad():
                    after_step()
        synchronize(s.device)
        return (time.perf_counter() - t0) * 1e3 / steps

    def harness_ms() -> float:
        rec = Record()
        train(s, rec, progress=False, probe=None)
        return rec.train_time_s * 1e3 / rec.steps_done

    harness_ms(), minimal_ms()  # warm-up: allocator, kernels, optimiser state
    h, m = [], []
    for _ in range(repeats):
        h.append(harness_ms())
        m.append(minimal_ms())
    ratios = [mi / hi for hi, mi in zip(h, m, strict=False)]
    return {
        "device": str(s.device), "harness_ms": statistics.median(h), "minimal_ms": statistics.median(m),
        "ratio": statistics.median(m) / statistics.median(h), "ratios": ratios,
        "threads": torch.get_num_threads(),
    }  # fmt: skip
