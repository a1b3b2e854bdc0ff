"""Run one config end to end and record it: the function behind `bench run` and every sweep.

:func:`run_config` does the work and writes nothing: it returns the run JSON (whose ``row`` is the leaderboard
row), so a sweep's worker process can hand it to the driver, the one writer of the results directory
(:func:`record`). :func:`execute` is both, for `bench run`. A run whose process dies before it can return gets
its row from :func:`unfinished_run` instead, built from the last thing the run reported.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

import variants
from bench.runs import budget, chance, checkpoints, constraints, distributed, execution, plugins, probes, resume
from bench.runs.config import RunConfig
from bench.runs.env import cpu_sample, environment, git_sha, machine_fingerprint, machine_id, machine_load
from bench.runs.results import ResultsStore, new_row
from bench.runs.threads import run_threads
from bench.runs.train import Diverged, Record, measure_phases, resolve_device, resolved_kwargs, setup, train

# CPU allocators report exhaustion as a plain RuntimeError; these phrases identify it.
_CPU_OOM_PHRASES = ("can't allocate memory", "not enough memory", "out of memory")

# What a run reports while it runs (``report(kind, data)``): "setup" once the task and model are built (data: the
# row as it would read now), "measured" once the cost figures are known (data: measurements and row). A worker
# passes them to the sweep's driver, which reuses the figures and builds the row of a run that dies later.
Report = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class Reuse:
    """Cost figures another run of the same model configuration measured (:func:`bench.runs.measure.cost_key`)."""

    source: str  # the run_id whose measurement phases produced them
    measurements: dict[str, Any]  # its run JSON's "measurements"
    machine: str | None = None  # where they were measured (bench.runs.env.machine_id); None: unknown, any machine


def classify_failure(exc: BaseException) -> str:
    """The row status of an exception raised during measuring or training."""
    if isinstance(exc, Diverged):
        return "diverged"
    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)):
        return "oom"
    if isinstance(exc, RuntimeError) and any(p in str(exc).lower() for p in _CPU_OOM_PHRASES):
        return "oom"
    return "error"


def one_line(text: str, limit: int = 500) -> str:
    """``text`` as one CSV-friendly line of at most ``limit`` characters."""
    return " ".join(text.split())[:limit]


def execute(cfg: RunConfig, results_dir: str | Path, progress: bool = False, force: bool = False) -> dict[str, Any]:
    """Set up (bad input raises ValueError, nothing written), measure, train, write one row; return the run JSON
    as stored (under torchrun, every rank returns its run JSON and rank 0 alone writes it). A run already recorded
    in ``runs/<run_id>.json`` is returned as recorded, saying so, and trained again only with ``force``."""
    store = ResultsStore(results_dir)
    store.preflight()  # an unusable results dir or a damaged leaderboard is bad input too: refuse before training
    if not force and store.run_path(cfg.run_id).exists():  # a recorded run is data: never retrained over silently
        recorded = store.load_run(cfg.run_id)
        print(f"{cfg.run_id} is already recorded in {store.run_path(cfg.run_id)} (status "
              f"{recorded['row'].get('status')}): not trained again; give --force to train it again and replace it",
              file=sys.stderr, flush=True)
        return recorded
    world = distributed.current()
    if world is None:
        return record(store, run_config(cfg, progress=progress, results_dir=store.root))
    # One run over the ranks of a torchrun job (bench.runs.distributed): every rank trains, rank 0 writes the row.
    cfg = dataclasses.replace(cfg, world_size=world.size)
    with distributed.session(world, distributed.device_for(world, resolve_device(cfg.device))):
        run_json = run_config(cfg, progress=progress and world.main, results_dir=store.root)
        return record(store, run_json) if world.main else run_json


def record(store: ResultsStore, run_json: Mapping[str, Any]) -> dict[str, Any]:
    """Write the run's checkpoint (if it kept one), ``run_json`` and its leaderboard row (non-finite floats stored
    as null); return the run JSON as stored."""
    run_json = dict(run_json)
    kept = run_json.pop(checkpoints.KEY, None)
    if kept is not None:  # before the row: a row never names a checkpoint that is not on disk yet
        path = checkpoints.save(store.root, run_json["run_id"], kept)
        run_json["checkpoint"] = path.relative_to(store.root).as_posix()
    stored = _finite(run_json)
    store.append(stored["row"], stored)  # one sanitised copy: the CSV cell and the JSON say the same (missing)
    resume.discard(store.root, run_json["run_id"])  # the run is recorded: its mid-run states are not needed
    return stored


def run_config(cfg: RunConfig, progress: bool = False, reuse: Reuse | None = None, report: Report | None = None,
               placement: Mapping[str, Any] | None = None, results_dir: str | Path | None = None) -> dict[str, Any]:
    """:func:`_run_config` on the CPU threads the run gets (:func:`bench.runs.threads.run_threads`: ``--threads``, else
    the cores free now), recorded in its row."""
    with run_threads(cfg):
        return _run_config(cfg, progress, reuse, report, placement, results_dir)


def _run_config(cfg: RunConfig, progress: bool = False, reuse: Reuse | None = None, report: Report | None = None,
                placement: Mapping[str, Any] | None = None, results_dir: str | Path | None = None) -> dict[str, Any]:
    """Set up, measure (or take ``reuse``'s figures), train; return the run JSON. Writes no row.

    Bad input (unknown variant, missing dataset, a plugin's model that does not fit the task, a checkpoint of
    another configuration) raises ValueError before anything runs; every failure after setup is in the returned
    row's ``status`` and ``error``. ``placement`` is where an executor put the run (threads, GPUs): stored in the
    run JSON, and its GPUs name the row's ``device``. With ``results_dir`` the run saves its training state into
    ``checkpoints/<run_id>/`` there as ``--checkpoint-every``/``--checkpoint-minutes`` or a preemption signal ask,
    and continues from the newest one it finds (:mod:`bench.runs.resume`); a preempted run raises
    :class:`~bench.runs.resume.Preempted` (its state saved, no row).
    """
    with plugins.blame(cfg.variant):
        s = setup(cfg)
    plugins.check_forward(cfg.variant, s.model, s.task)  # a plugin's model that does not fit the task: bad input
    env = environment(s.device)
    device = _placed_device(s.device, placement)
    rec = Record()
    started = time.perf_counter()
    probe_fn: Callable[..., list[dict[str, Any]]] | None = probes.probe if cfg.probe_every else None
    folder = resume.directory(results_dir, cfg.run_id) if results_dir is not None else None
    checkpointer = resume.Checkpointer(folder, cfg, cfg.checkpoint_every, cfg.checkpoint_minutes,
                                       cfg.keep_checkpoints)
    state = checkpointer.latest()  # a state of another configuration or torch: bad input, refused here
    cost_source = ""
    if state is not None:  # a rerun continues: the figures measured before training, the time spent so far
        rec.measurements, cost_source = state["measurements"], state["cost_source"]
        rec.resumed_from_step, rec.restarts, rec.wall_before_s = int(state["step"]), int(state["restarts"]) + 1, \
            float(state["wall_s"])
        not_measured(cfg, rec)
    checkpointer.extra = lambda: {"measurements": rec.measurements, "cost_source": cost_source,
                                  "restarts": rec.restarts, "wall_s": rec.wall_before_s + time.perf_counter() - started}
    if report is not None:
        report("setup", {"row": build_row(cfg, s, rec, env, rec.wall_before_s, device=device)})
    if reuse is not None and reuse.machine is not None and reuse.machine != machine_id(env):
        reuse = None  # measured on another machine (a cluster's other node): this run measures its own
    try:
        if state is not None:
            pass  # measured before the run was interrupted
        elif reuse is None:
            before = cpu_sample()
            measure_phases(s, rec)
            if cfg.measure:  # what else ran on the machine while these figures were measured
                rec.measurements["load"] = machine_load(before)
            cost_source = cfg.run_id if cfg.measure else ""
        else:  # the figures of the first run of this model configuration (the training below is unaffected)
            rec.measurements, cost_source = copy.deepcopy(reuse.measurements), reuse.source
        if report is not None:
            row = build_row(cfg, s, rec, env, rec.wall_before_s + time.perf_counter() - started, cost_source, device)
            report("measured", {"measurements": rec.measurements, "row": row, "machine": machine_id(env)})
        train(s, rec, progress, probe_fn, checkpointer, state)
    except (KeyboardInterrupt, resume.Preempted):
        raise
    except Exception as exc:  # every failure becomes a recorded row
        rec.status = classify_failure(exc)
        rec.error = one_line(str(exc) if rec.status == "diverged" else f"{type(exc).__name__}: {exc}")
    finally:
        s.task.close()  # its loaders' worker processes end with the run, not when the garbage is collected
    wall = rec.wall_before_s + time.perf_counter() - started  # every segment's time, none spent waiting
    row = build_row(cfg, s, rec, env, wall, cost_source, device)
    row = chance.judge(row, cfg.chance_band)  # a run that ended at chance learned nothing: failed_to_learn
    kept = {checkpoints.KEY: checkpoints.snapshot(cfg, s.model, s.model_kwargs)} \
        if cfg.save_checkpoint and rec.status == "ok" else {}
    return {
        "run_id": cfg.run_id,
        "row": row,
        "config": cfg.to_dict(),
        "model_kwargs": s.model_kwargs,
        "init": row["init"],
        # The variant's family and axes as built for this run (a --model-arg norm=... included): what claims filter
        # on, read from here rather than from the registry at report time (which may lack a plugin, or hold an
        # edited variant).
        "axes": variant_axes(cfg.variant, s.model),
        # The layers that keep an init of their own, or start at zero, whatever the run's scheme (variants.init_marks)
        "own_init": variants.marked_layers(s.model),
        "warmup_ended_at": rec.warmup_ended_at,
        "env": env,
        "task": s.task.info,
        "measurements": rec.measurements,
        "cost_source": cost_source,  # the run that measured them: this one, or the first of its configuration
        "placement": dict(placement or {}),
        # how the step ran: the optimiser's kernels (fused on CUDA) and torch.compile's mode (bench.runs.execution)
        "execution": {"optimizer_impl": execution.optimizer_impl(cfg.optimizer, s.device),
                      "compile_mode": cfg.compile_mode if cfg.compile else None,
                      "joins": variants.implementation(s.model, "compiled" if cfg.compile else "eager")},
        "curves": {"train": rec.train_curve, "eval": rec.eval_curve},
        "probes": rec.probes,
        "residual_scalars": rec.residual_scalars,  # learned residual scalars at every evaluation (bench.runs.scalars)
        # Which code outside resbench was loaded, and exactly which version of it (bench.runs.plugins).
        "plugins": [p.record() for p in plugins.loaded()],
        **kept,  # the trained weights, serialised: record() writes them to checkpoints/ and drops them from here
    }


def not_measured(cfg: RunConfig, rec: Record) -> None:
    """Record as failed every phase of ``cfg.measure`` a resumed run's saved state holds no figures of (its run was
    started with another ``--measure``, which is no part of the run's identity): the measuring happens before
    training, so a resumed run cannot make it up, and it must not look as if it had been asked for and done."""
    saved = sorted(k for k in rec.measurements if k in constraints.PHASES)
    for phase in (p for p in cfg.measure if p in constraints.PHASES and p not in rec.measurements):
        rec.measurements[phase] = {
            "error": f"not measured: this run resumed from step {rec.resumed_from_step}, saved by a run measuring "
                     f"{' '.join(saved) or 'nothing'}; rerun it with --no-resume to measure {phase}"}


def measurement_failures(run_json: Mapping[str, Any]) -> dict[str, str]:
    """Phase -> why it was not measured, for every measurement phase of the run's config that failed."""
    measurements = run_json.get("measurements") or {}
    phases = (run_json.get("config") or {}).get("measure") or ()
    return {p: str(measurements[p]["error"]) for p in phases
            if isinstance(measurements.get(p), dict) and "error" in measurements[p]}


def unfinished_run(cfg: RunConfig, status: str, error: str, wall_s: float, last: Mapping[str, Any] | None = None,
                   placement: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The run JSON of a run whose process ended without returning one (killed, out of memory, crashed).

    ``last`` is what the run reported last (:data:`Report`): its row (and measurements) fill what is known,
    so a run killed while training still has its parameters, device and cost figures; without it the row
    holds what the config says.
    """
    last = last or {}
    row = {**(dict(last["row"]) if "row" in last else _bare_row(cfg)), "status": status, "error": one_line(error),
           "wall_time_s": wall_s, "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    return {
        "run_id": cfg.run_id, "row": row, "config": cfg.to_dict(), "init": row.get("init"),
        "measurements": dict(last.get("measurements") or {}), "cost_source": row.get("cost_source") or "",
        "placement": dict(placement or {}), "curves": {"train": [], "eval": []}, "probes": [], "residual_scalars": [],
        "plugins": [p.record() for p in plugins.loaded()],
    }  # fmt: skip


def variant_axes(variant: str, model: torch.nn.Module) -> dict[str, Any]:
    """``family`` and the axes of ``model``, the variant as this run built it (:func:`variants.derive_axes`, over
    what the registry says of the variant's defaults)."""
    desc = variants.describe(variant)
    return {"family": desc["family"], **desc["axes"], **variants.derive_axes(model)}


def _config_columns(cfg: RunConfig, model_kwargs: Mapping[str, Any], axes: Mapping[str, Any]) -> dict[str, Any]:
    """The row's columns that the config, the model's resolved keywords and its axes decide."""
    try:
        desc = variants.describe(cfg.variant)
    except ValueError:  # not describable here (a timm model, say): what the config says is all there is
        desc = {"family": None, "defaults": {}}
    return {
        "run_id": cfg.run_id, "config_hash": cfg.config_hash(), "variant": cfg.variant, "family": desc["family"],
        "depth": cfg.depth if cfg.depth is not None else desc["defaults"].get("depth"),
        "init": init_scheme(cfg, model_kwargs) if desc["family"] is not None else "default",
        "norm": axes.get("norm"), "task": cfg.task,
        "seed": cfg.seed,
        "batch_size": cfg.batch_size, "grad_accum": cfg.grad_accum, "optimizer": cfg.optimizer, "lr": cfg.peak_lr,
        "schedule": cfg.schedule,
        "warmup_steps": cfg.warmup_steps, "world_size": cfg.world_size, "precision": cfg.precision,
        "target_acc": cfg.target, "target_loss": cfg.target_loss, "study": cfg.study,
        "budget_flops": cfg.budget_flops, "budget_samples": cfg.budget_samples,
    }  # fmt: skip


def _bare_row(cfg: RunConfig) -> dict[str, Any]:
    """A row from the config alone, for a run that died before it had built its model."""
    try:
        axes = variants.describe(cfg.variant)["axes"]
    except ValueError:
        axes = {}
    return new_row(**_config_columns(cfg, cfg.model_overrides(), axes), device=cfg.device,
                   torch_version=torch.__version__, git_sha=git_sha())


def _placed_device(device: torch.device, placement: Mapping[str, Any] | None) -> str:
    """The row's ``device``: ``cuda:<ids>`` naming the physical GPUs an executor gave the run, else torch's name."""
    gpus = (placement or {}).get("gpus")
    if device.type == "cuda" and gpus:
        return f"cuda:{','.join(map(str, gpus))}"
    return str(device)


def build_row(cfg: RunConfig, s: Any, rec: Record, env: dict[str, Any], wall_s: float, cost_source: str = "",
              device: str | None = None) -> dict[str, Any]:
    """The leaderboard row of a run as recorded in ``rec``, from its parts: what the config says
    (:func:`_config_columns`), what the run learned (:func:`outcome_columns`), what a step cost
    (:func:`cost_columns`, measured by ``cost_source``) and where and when it ran (:func:`provenance_columns`)."""
    return new_row(
        **{**_config_columns(cfg, s.model_kwargs, variant_axes(cfg.variant, s.model)),
           "warmup_steps": s.warmup_steps},  # --warmup-epochs made steps on this run's task
        params=sum(p.numel() for p in s.model.parameters()),
        **outcome_columns(cfg, s, rec), **cost_columns(cfg, s, rec, cost_source),
        **provenance_columns(env, device or str(s.device), wall_s, rec),
        train_flops=spent_flops(cfg, s, rec),
    )


def spent_flops(cfg: RunConfig, s: Any, rec: Record) -> float | None:
    """The training FLOPs the run spent: its steps times one optimiser step's FLOPs (counted for its budget, else
    measured by the flops phase); None where neither counted them."""
    per_step = getattr(s, "step_flops", None)
    if per_step is None:
        per_step = (rec.measurements.get("flops") or {}).get("per_step")
    return budget.spent(rec.steps_done, per_step)


def outcome_columns(cfg: RunConfig, s: Any, rec: Record) -> dict[str, Any]:
    """What the run learned: its length, status, final and best metrics, when it reached its target."""
    last = rec.eval_curve[-1] if rec.eval_curve and rec.status == "ok" else {}
    val_accs = [p["val_acc"] for p in rec.eval_curve if p["val_acc"] is not None and math.isfinite(p["val_acc"])]
    return {
        "epochs": rec.steps_done * cfg.global_batch / s.task.num_train if s.task.num_train else None,
        "steps": rec.steps_done, "status": rec.status, "error": rec.error, "chance_loss": s.task.chance_loss,
        "final_train_loss": last.get("train_loss"), "final_train_acc": last.get("train_acc"),
        "final_val_loss": last.get("val_loss"), "final_val_acc": last.get("val_acc"),
        "final_val_perplexity": last.get("perplexity"), "best_val_acc": max(val_accs) if val_accs else None,
        "steps_to_target": rec.steps_to_target, "time_to_target_s": rec.time_to_target_s,
        "eval_time_s": rec.eval_time_s if rec.eval_curve else None,
    }  # fmt: skip


def cost_columns(cfg: RunConfig, s: Any, rec: Record, cost_source: str) -> dict[str, Any]:
    """What a step cost: throughput (and where it came from), memory, FLOPs and MFU, from the measurement phases
    (a phase that failed holds only ``{"error": ...}`` and counts as not measured)."""
    m = rec.measurements
    thr, mem, flops = (m.get(k, {}) if "error" not in m.get(k, {}) else {} for k in ("throughput", "memory", "flops"))
    samples_per_s, step_ms, method = throughput_figures(cfg, rec, thr)
    achieved = mfu = None
    if flops and step_ms and method == "timed":  # a training loop's own time holds evaluation gaps, autotuning ...
        achieved = flops["per_step"] / (step_ms / 1e3)  # the whole step's FLOPs: every process's share of the batch
        if m.get("peak_flops"):
            mfu = achieved / (m["peak_flops"] * cfg.world_size)  # ... against the peak of every device that ran it
        achieved /= 1e12
    tokens = samples_per_s * s.task.units_per_sample if samples_per_s and s.task.unit == "tokens" else None
    return {
        "train_samples_per_s": samples_per_s, "train_tokens_per_s": tokens, "step_time_ms": step_ms,
        "throughput_method": method, "peak_mem_mb": mem.get("peak_mb"), "mem_method": mem.get("method"),
        # a loader task's model step apart from its loader (bench.runs.train.model_apart)
        "model_samples_per_s": thr.get("model_samples_per_s"), "input_bound_fraction": thr.get("input_bound_fraction"),
        "loader_workers": s.task.loader_workers, "threads": torch.get_num_threads(),
        "fwd_flops_per_sample": flops.get("fwd_per_sample"), "train_flops_per_sample": flops.get("train_per_sample"),
        "achieved_tflops": achieved, "mfu": mfu, "cost_source": cost_source,
    }  # fmt: skip


def provenance_columns(env: Mapping[str, Any], device: str, wall_s: float, rec: Record) -> dict[str, Any]:
    """Where and when the run ran: the device and machine, torch and resbench's commit, its wall time and restarts."""
    return {
        "device": device, "device_name": env["device_name"], "machine": machine_fingerprint(env),
        "wall_time_s": wall_s, "resumed_from_step": rec.resumed_from_step, "restarts": rec.restarts,
        "torch_version": env["torch"], "git_sha": env["git_sha"],
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }  # fmt: skip


def throughput_figures(cfg: RunConfig, rec: Record, timed: Mapping[str, Any]) -> tuple[float | None, float | None, str]:
    """(samples/s, step ms, method) of a run: the timing phase's median (method ``timed``); without one, the training
    loop's own average (``training_loop``: its first steps, cuDNN's autotuning or a compile included, so a lower
    bound, never a figure to compare); (None, None, "") where neither ran."""
    if timed:
        return timed["samples_per_s"], timed["median_step_ms"], "timed"
    if rec.steps_done and rec.train_time_s > 0:
        step_ms = rec.train_time_s * 1e3 / rec.steps_done
        return cfg.global_batch / (step_ms / 1e3), step_ms, "training_loop"
    return None, None, ""


def init_scheme(cfg: RunConfig, model_kwargs: Mapping[str, Any]) -> str:
    """The initialisation in force: the variant's ``init`` keyword as resolved for this run, else "default".

    Read from the registry's defaults (a preset's pinned values included) under the run's own keywords,
    so no variant is special-cased; timm models and builders without an ``init`` keyword get "default".
    """
    init = resolved_kwargs(cfg.variant, model_kwargs).get("init")
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
