"""Run one config end to end and record it: the function behind `bench run` and every sweep."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

import variants

from . import plugins
from .config import RunConfig
from .env import environment
from .fairness import resolved_kwargs
from .results import ResultsStore
from .train import Diverged, Record, measure_phases, setup, train

# CPU allocators report exhaustion as a plain RuntimeError; these phrases identify it.
_CPU_OOM_PHRASES = ("can't allocate memory", "not enough memory", "out of memory")


def classify_failure(exc: BaseException) -> str:
    """The row status of an exception raised during measuring or training."""
    if isinstance(exc, Diverged):
        return "diverged"
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return "oom"
    if isinstance(exc, RuntimeError) and any(p in str(exc).lower() for p in _CPU_OOM_PHRASES):
        return "oom"
    return "error"


def execute(cfg: RunConfig, results_dir: str | Path, progress: bool = False) -> dict[str, Any]:
    """Set up (bad input raises ValueError, nothing written), measure, train, write one row; return the run JSON."""
    store = ResultsStore(results_dir)
    store.preflight()  # an unusable results dir or a damaged leaderboard is bad input too: refuse before training
    with plugins.blame(cfg.variant):
        s = setup(cfg)
    plugins.check_forward(cfg.variant, s.model, s.task)  # a plugin's model that does not fit the task: bad input
    env = environment(s.device)
    rec = Record()
    started = time.perf_counter()
    probe_fn: Callable[..., list[dict[str, Any]]] | None = None
    if cfg.probe_every:
        from .probes import probe

        probe_fn = probe
    try:
        measure_phases(s, rec)
        train(s, rec, progress, probe_fn)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # every failure becomes a recorded row
        rec.status = classify_failure(exc)
        rec.error = str(exc) if rec.status == "diverged" else f"{type(exc).__name__}: {exc}"
        rec.error = " ".join(rec.error.split())[:500]  # one line in the CSV
    wall = time.perf_counter() - started
    row = build_row(cfg, s, rec, env, wall)
    run_json = {
        "run_id": cfg.run_id,
        "row": row,
        "config": cfg.to_dict(),
        "model_kwargs": s.model_kwargs,
        "init": row["init"],
        "warmup_ended_at": rec.warmup_ended_at,
        "env": env,
        "task": s.task.info,
        "measurements": rec.measurements,
        "curves": {"train": rec.train_curve, "eval": rec.eval_curve},
        "probes": rec.probes,
        # Which code outside resbench was loaded, and exactly which version of it (bench.plugins).
        "plugins": [p.record() for p in plugins.loaded()],
    }
    store.append(row, _finite(run_json))
    return run_json


def build_row(cfg: RunConfig, s: Any, rec: Record, env: dict[str, Any], wall_s: float) -> dict[str, Any]:
    m = rec.measurements
    # A phase that failed holds only {"error": ...}: treat it as not measured.
    thr, mem, flops = (m.get(k, {}) if "error" not in m.get(k, {}) else {} for k in ("throughput", "memory", "flops"))
    if thr:
        samples_per_s, step_ms = thr["samples_per_s"], thr["median_step_ms"]
    elif rec.steps_done and rec.train_time_s > 0:  # no timing phase: fall back to the training loop's own time
        step_ms = rec.train_time_s * 1e3 / rec.steps_done
        samples_per_s = cfg.batch_size / (step_ms / 1e3)
    else:
        samples_per_s = step_ms = None
    achieved = mfu = None
    if flops and step_ms:
        achieved = flops["per_step"] / (step_ms / 1e3)
        if m.get("peak_flops"):
            mfu = achieved / m["peak_flops"]
        achieved /= 1e12
    last = rec.eval_curve[-1] if rec.eval_curve and rec.status == "ok" else {}
    val_accs = [p["val_acc"] for p in rec.eval_curve if p["val_acc"] is not None and math.isfinite(p["val_acc"])]
    desc = variants.describe(cfg.variant)
    depth = cfg.depth if cfg.depth is not None else desc["defaults"].get("depth")
    return {
        "run_id": cfg.run_id, "config_hash": cfg.config_hash(), "variant": cfg.variant, "family": desc["family"],
        "depth": depth, "params": sum(p.numel() for p in s.model.parameters()), "init": init_scheme(cfg, s),
        "task": cfg.task, "seed": cfg.seed,
        "epochs": rec.steps_done * cfg.batch_size / s.task.num_train if s.task.num_train else None,
        "steps": rec.steps_done, "batch_size": cfg.batch_size, "optimizer": cfg.optimizer, "lr": cfg.lr,
        "schedule": cfg.schedule, "warmup_steps": cfg.warmup_steps, "device": str(s.device),
        "device_name": env["device_name"], "precision": cfg.precision, "status": rec.status, "error": rec.error,
        "final_train_loss": last.get("train_loss"), "final_train_acc": last.get("train_acc"),
        "final_val_loss": last.get("val_loss"), "final_val_acc": last.get("val_acc"),
        "best_val_acc": max(val_accs) if val_accs else None, "target_acc": cfg.target,
        "steps_to_target": rec.steps_to_target, "time_to_target_s": rec.time_to_target_s,
        "train_samples_per_s": samples_per_s,
        "train_tokens_per_s": samples_per_s * s.task.units_per_sample
        if samples_per_s and s.task.unit == "tokens" else None,
        "step_time_ms": step_ms, "peak_mem_mb": mem.get("peak_mb"), "mem_method": mem.get("method"),
        "fwd_flops_per_sample": flops.get("fwd_per_sample"), "train_flops_per_sample": flops.get("train_per_sample"),
        "achieved_tflops": achieved, "mfu": mfu,
        "wall_time_s": wall_s, "study": cfg.study, "torch_version": env["torch"], "git_sha": env["git_sha"],
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }  # fmt: skip


def init_scheme(cfg: RunConfig, s: Any) -> str:
    """The initialisation in force: the variant's ``init`` keyword as resolved for this run, else "default".

    Read from the registry's defaults (a preset's pinned values included) under the run's own keywords,
    so no variant is special-cased; timm models and builders without an ``init`` keyword get "default".
    """
    init = resolved_kwargs(cfg.variant, s.model_kwargs).get("init")
    return "default" if init is None else str(init)


def _finite(obj: Any) -> Any:
    """JSON has no NaN/Infinity: store non-finite floats as null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj
