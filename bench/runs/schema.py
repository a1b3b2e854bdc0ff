"""The leaderboard's row schema: its columns in their fixed order, the earlier headers that still load, the run
statuses, and :func:`new_row`, the one place a row is made. ``results/README.md`` documents every column.

This module imports nothing but the standard library and :mod:`bench.runs.config`: the command line's parser reads
it without loading pandas.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.runs.config import RUN_ID_PATTERN

# The fixed column order of leaderboard.csv; results/README.md documents each column.
COLUMNS: tuple[str, ...] = (
    "run_id", "config_hash", "variant", "family", "depth", "params", "init", "norm", "task", "seed", "epochs",
    "steps", "batch_size", "grad_accum", "optimizer", "lr", "schedule", "warmup_steps", "device", "device_name",
    "machine", "world_size", "precision", "status", "error", "chance_loss",
    "final_train_loss", "final_train_acc", "final_val_loss", "final_val_acc", "final_val_perplexity", "best_val_acc",
    "target_acc", "target_loss", "steps_to_target", "time_to_target_s", "eval_time_s",
    "train_samples_per_s", "train_tokens_per_s", "step_time_ms", "throughput_method", "model_samples_per_s",
    "input_bound_fraction", "loader_workers", "threads", "peak_mem_mb", "mem_method",
    "fwd_flops_per_sample", "train_flops_per_sample", "achieved_tflops", "mfu", "cost_source", "wall_time_s",
    "resumed_from_step", "restarts", "budget_flops", "budget_samples", "train_flops", "study", "torch_version",
    "git_sha", "created_at",
)  # fmt: skip

# The header before budget_flops, budget_samples (a run's length given as a compute or data budget,
# bench.runs.budget) and train_flops (the training FLOPs a run spent) were columns: every run counted steps or
# epochs; train_flops is left empty (steps x batch_size x grad_accum x train_flops_per_sample says it).
BUDGET_COLUMNS: tuple[str, ...] = ("budget_flops", "budget_samples", "train_flops")
COLUMNS_V10: tuple[str, ...] = tuple(c for c in COLUMNS if c not in BUDGET_COLUMNS)
V10_MAPPING = "budget_flops, budget_samples and train_flops left empty"

# The header before throughput_method (where a row's throughput came from: the timing phase, or the training loop's
# own average when no timing phase ran) and threads (the CPU threads of torch's operators in the run) were columns:
# both are left empty, which says nothing of where such a row's throughput (and mfu) came from.
COLUMNS_V9: tuple[str, ...] = tuple(c for c in COLUMNS_V10 if c not in ("throughput_method", "threads"))
V9_MAPPING = f"throughput_method and threads left empty; {V10_MAPPING}"

# The header before machine (the fingerprint of the hardware and software a run's cost figures were measured on,
# bench.runs.env.machine_fingerprint) was a column: it is left empty (`bench merge` fills it from each run JSON's
# environment), and such rows' cost figures pool with each other only.
COLUMNS_V8: tuple[str, ...] = tuple(c for c in COLUMNS_V9 if c != "machine")
V8_MAPPING = f"machine left empty; {V9_MAPPING}"

# The header before chance_loss (the task's chance level, bench.runs.chance) was a column: it is left empty, and the
# rows keep the status they were recorded with (`bench upgrade` fills the level and judges each run by it).
COLUMNS_V7: tuple[str, ...] = tuple(c for c in COLUMNS_V8 if c != "chance_loss")
V7_MAPPING = f"chance_loss left empty; {V8_MAPPING}"

# The header before data read from disk (the loader tasks) and evaluation cost had columns: final_val_perplexity,
# eval_time_s, model_samples_per_s, input_bound_fraction and loader_workers are left empty.
DATA_COLUMNS: tuple[str, ...] = ("final_val_perplexity", "eval_time_s", "model_samples_per_s", "input_bound_fraction",
                                 "loader_workers")
COLUMNS_V6: tuple[str, ...] = tuple(c for c in COLUMNS_V7 if c not in DATA_COLUMNS)
V6_MAPPING = ("final_val_perplexity, eval_time_s, model_samples_per_s, input_bound_fraction, loader_workers left "
              f"empty; {V7_MAPPING}")

# The header before grad_accum (micro-batches per optimiser step), target_loss (a validation-loss target),
# resumed_from_step and restarts (a run continued from a mid-run checkpoint) were columns: every run stepped on whole
# batches, had an accuracy target if any, and ran in one go.
COLUMNS_V5: tuple[str, ...] = tuple(c for c in COLUMNS_V6 if c not in ("grad_accum", "target_loss",
                                                                        "resumed_from_step", "restarts"))
V5_MAPPING = f"grad_accum 1, restarts 0; {V6_MAPPING}"

# The header before norm (the norm type the run's model was built with: a registered name, e.g. a plugin's dyt)
# was a column: the column is left empty (the run JSON's axes, or the variant's defaults, say which it was).
COLUMNS_V4: tuple[str, ...] = tuple(c for c in COLUMNS_V5 if c != "norm")
V4_MAPPING = f"norm left empty; {V5_MAPPING}"

# The header before world_size (the processes of a torchrun job that trained the run) was a column: every run
# was one process.
COLUMNS_V3: tuple[str, ...] = tuple(c for c in COLUMNS_V4 if c != "world_size")
V3_MAPPING = f"world_size 1, norm left empty; {V5_MAPPING}"

# The header before cost_source (the run whose measurement phases produced a row's throughput, memory and FLOPs)
# was a column: every such row measured its own, or nothing when no phase ran; the column is left empty.
COLUMNS_V2: tuple[str, ...] = tuple(c for c in COLUMNS_V3 if c != "cost_source")
V2_MAPPING = f"cost_source left empty, world_size 1, norm left empty; {V5_MAPPING}"

# The header before forward/train FLOPs, init and config_hash were columns. Such leaderboards still load:
# each row is mapped onto COLUMNS on read, and the next append rewrites the file in the current schema.
COLUMNS_V1: tuple[str, ...] = (
    "run_id", "variant", "family", "depth", "params", "task", "seed", "epochs", "steps", "batch_size",
    "optimizer", "lr", "schedule", "warmup_steps", "device", "device_name", "precision",
    "status", "error",
    "final_train_loss", "final_train_acc", "final_val_loss", "final_val_acc", "best_val_acc",
    "target_acc", "steps_to_target", "time_to_target_s",
    "train_samples_per_s", "train_tokens_per_s", "step_time_ms", "peak_mem_mb", "mem_method",
    "flops_per_sample", "achieved_tflops", "mfu", "wall_time_s",
    "study", "torch_version", "git_sha", "created_at",
)  # fmt: skip
V1_MAPPING = ("flops_per_sample -> train_flops_per_sample; fwd_flops_per_sample and init left empty; "
              f"config_hash taken from run_id; world_size 1; norm left empty; {V5_MAPPING}")


def _from_v1(row: dict[str, str]) -> dict[str, str]:
    new = _from_v2(row)
    new["train_flops_per_sample"] = row["flops_per_sample"]
    m = RUN_ID_PATTERN.search(row["run_id"])
    new["config_hash"] = m.group(1) if m else ""
    return new


def _from_v2(row: dict[str, str]) -> dict[str, str]:
    return _from_v5(row) | {"world_size": "1"}  # every run was one process then


def _from_v5(row: dict[str, str]) -> dict[str, str]:
    return _from_v6(row) | {"grad_accum": "1", "restarts": "0"}


def _from_v6(row: dict[str, str]) -> dict[str, str]:
    return {c: row.get(c, "") for c in COLUMNS}


# Earlier headers that still load: header -> (what the mapping does, the row mapping).
LEGACY_SCHEMAS: dict[tuple[str, ...], tuple[str, Callable[[dict[str, str]], dict[str, str]]]] = {
    COLUMNS_V1: (V1_MAPPING, _from_v1),
    COLUMNS_V2: (V2_MAPPING, _from_v2),
    COLUMNS_V3: (V3_MAPPING, _from_v2),
    COLUMNS_V4: (V4_MAPPING, _from_v5),
    COLUMNS_V5: (V5_MAPPING, _from_v5),
    COLUMNS_V6: (V6_MAPPING, _from_v6),
    COLUMNS_V7: (V7_MAPPING, _from_v6),
    COLUMNS_V8: (V8_MAPPING, _from_v6),
    COLUMNS_V9: (V9_MAPPING, _from_v6),
    COLUMNS_V10: (V10_MAPPING, _from_v6),
}
# "killed": the run's process was ended by a signal (a user's kill, a scheduler's) before it could return its row.
# "failed_to_learn": it trained to the end, at the task's chance level (bench.runs.chance); its numbers are kept.
STATUSES = ("ok", "diverged", "oom", "error", "killed", "failed_to_learn")
# Of those, the runs that did not train to their end: no result of their configuration (a recorded ok run keeps its
# record over such a rerun, bench.runs.results.ResultsStore.append).
UNFINISHED: tuple[str, ...] = ("killed", "oom", "error")


def new_row(**values: Any) -> dict[str, Any]:
    """A leaderboard row: ``values`` in the schema's column order, every other column None; a name that is not a
    column raises (the one place a row is made)."""
    unknown = sorted(set(values) - set(COLUMNS))
    if unknown:
        raise ValueError(f"row has columns outside the leaderboard schema: {unknown}")
    return {c: values.get(c) for c in COLUMNS}

# Columns filled from the run's measurement phases (throughput, memory, FLOPs; bench.runs.measure). A sweep
# measures them once per model configuration and copies them into the rows of its other seeds (the row's
# ``cost_source`` names the run that measured): the copies are one measurement, not several. They describe the
# machine that measured them (the row's ``machine``): tables and claims never pool them across machines.
COST_COLUMNS: tuple[str, ...] = (
    "train_samples_per_s", "train_tokens_per_s", "step_time_ms", "peak_mem_mb", "fwd_flops_per_sample",
    "train_flops_per_sample", "achieved_tflops", "mfu", "model_samples_per_s", "input_bound_fraction",
)  # fmt: skip
# Columns each run reads off the wall clock while it trains (seconds: to its target, evaluating, in all). Every run
# has its own, none is copied, but like a timed cost figure each was taken at the run's own moments, so it moves with
# the load on the machine then: a difference between two designs' figures is confounded with that load
# (bench.analysis.timed).
WALL_CLOCK_COLUMNS: tuple[str, ...] = ("time_to_target_s", "eval_time_s", "wall_time_s")
# What `bench leaderboard` shows by default (the full set is in REPORT.md and the CSV itself).
HEADLINE_METRICS: tuple[str, ...] = ("final_train_acc", "final_val_acc", "best_val_acc", "train_samples_per_s",
                                     "peak_mem_mb")
# Columns whose cells, where not empty, are integers, and numbers: a leaderboard with other text there is damaged
# (read with the line and column named, never half-read).
INTEGER_COLUMNS: tuple[str, ...] = (
    "depth", "params", "seed", "steps", "batch_size", "grad_accum", "warmup_steps", "world_size", "steps_to_target",
    "loader_workers", "resumed_from_step", "restarts", "threads", "budget_samples",
)  # fmt: skip
NUMBER_COLUMNS: tuple[str, ...] = (
    "epochs", "lr", "chance_loss", "final_train_loss", "final_train_acc", "final_val_loss", "final_val_acc",
    "final_val_perplexity", "best_val_acc", "target_acc", "target_loss", "time_to_target_s", "eval_time_s",
    "train_samples_per_s", "train_tokens_per_s", "step_time_ms", "model_samples_per_s", "input_bound_fraction",
    "peak_mem_mb", "fwd_flops_per_sample", "train_flops_per_sample", "achieved_tflops", "mfu", "wall_time_s",
    "budget_flops", "train_flops",
)  # fmt: skip
