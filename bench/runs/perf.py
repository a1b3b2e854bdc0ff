"""``bench perf overhead``: does the harness slow the model down? ``bench perf loader``: how fast is the input
pipeline of a task that reads from disk, alone, for each number of workers?

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
from collections.abc import Sequence
from typing import Any

import torch

from bench.runs import execution
from bench.runs.config import RunConfig
from bench.runs.measure import synchronize
from bench.runs.tasks import TaskOptions
from bench.runs.tasks import get as get_task
from bench.runs.train import (
    Record,
    after_step_hook,
    autocast,
    batch_generator,
    make_optimizer,
    resolve_device,
    setup,
    train,
)


def overhead(cfg: RunConfig, steps: int = 30, repeats: int = 7) -> dict[str, Any]:
    if steps < 1 or repeats < 1:
        raise ValueError("--timed-steps and --repeats must be >= 1")
    cfg = dataclasses.replace(cfg, steps=steps, epochs=None, budget_flops=None, budget_samples=None, measure=(),
                              probe_every=None, schedule="constant")
    s = setup(cfg)
    s.eval_every = steps  # one evaluation, after the timed steps (train() excludes it from train_time_s)
    reference = copy.deepcopy(s.model)
    opt = make_optimizer(cfg, reference)
    x, y = next(s.task.train_batches(cfg.batch_size, batch_generator(s, 7)))
    if cfg.channels_last and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    forward = execution.compiled(reference, cfg.compile_mode) if cfg.compile else reference  # the harness's settings
    after_step = after_step_hook(reference)  # part of the model's step (nGPT's renormalisation), not overhead

    def minimal_ms() -> float:
        synchronize(s.device)
        t0 = time.perf_counter()
        for _ in range(steps):
            if cfg.compile:
                execution.mark_step()
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


# Whole rounds of the workers timed by `bench perf loader`, at least: W workers that start together deliver their
# batches in bursts of W, so a window of fewer batches than a round times a burst, not the pipeline.
MIN_ROUNDS = 3


def loader(task_name: str, options: TaskOptions, workers: Sequence[int], *, batch_size: int, batches: int = 50,
           device: str = "cpu", seed: int = 0) -> dict[str, Any]:
    """Steady-state throughput of a loader task's training batches on ``device`` (decoded, augmented, copied and
    normalised there), with no model, for each worker count.

    The first batch (the workers' start) and the ``workers x prefetch`` batches the workers hold by then (the queue
    a model drains first) are not timed: their time is reported apart (``first_batch_s``, ``queue_s``). The timed
    window starts once the queue is drained, so every batch in it was made while the window ran, and spans whole
    rounds of the workers (``W`` workers started together deliver their batches in bursts of ``W``): at least
    ``batches`` batches and :data:`MIN_ROUNDS` rounds.
    """
    if batches < 1 or not workers or min(workers) < 0:
        raise ValueError("--batches must be >= 1 and --workers a list of counts >= 0")
    dev = resolve_device(device)
    task = get_task(task_name, device=dev, seed=seed, options=options)
    if task.loader_workers is None:
        raise ValueError(f"task {task_name!r} holds its data on the device: there is no loader to measure "
                         "(bench perf loader measures imagefolder and tokens)")
    rows = []
    for count in workers:
        task.set_workers(count)  # type: ignore[attr-defined]
        per_round = max(count, 1)
        timed = per_round * max(-(-batches // per_round), MIN_ROUNDS)
        queue = count * options.prefetch
        generator = torch.Generator(device=dev).manual_seed(seed)
        started = time.perf_counter()
        stream = task.train_batches(batch_size, generator)
        arrivals = []
        for _ in range(1 + queue + timed):
            next(stream)
            synchronize(dev)
            arrivals.append(time.perf_counter())
        del stream  # its workers end here
        elapsed = arrivals[-1] - arrivals[queue]  # the batches after the drained queue, whole rounds of them
        rows.append({"workers": count, f"{task.unit}_per_s": timed * batch_size * task.units_per_sample / elapsed,
                     "ms_per_batch": elapsed * 1e3 / timed, "timed_batches": timed,
                     "first_batch_s": arrivals[0] - started, "queue_s": arrivals[queue] - arrivals[0]})
    return {"device": str(dev), "unit": task.unit, "rows": rows, "task": task.info, "prefetch": options.prefetch}
