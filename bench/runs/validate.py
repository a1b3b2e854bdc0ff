"""What a results folder's rows and run JSONs may hold: the one check every reader calls (docs/security.md).

A results folder travels between machines and people, so what it holds is checked as it is read, as strictly as it
was checked when it was written:

- :func:`row_problem`, the hard rule of a leaderboard line: its ``run_id`` names the file of its run JSON and its
  ``study``, ``variant`` and ``family`` are names (:func:`name_problem`), so that no name in a row becomes a path or
  an option anywhere it is used; its ``config_hash``, when it has one, is the hash its run id was made with (runs are
  pooled by it: a cell that contradicts the id would split a configuration or merge two). A line failing it is
  damaged (refused naming the line).
- :func:`value_problem`, the soft rule: a status resbench writes, finite numbers, accuracies in [0, 1], no negative
  count, time or loss, and the configuration's columns in their ranges (:data:`bench.runs.constraints.CONSTRAINTS`).
  A row failing it is left out of statistics with a warning naming its line and field: it is a number nobody can
  trust, not a reason to refuse the whole folder.
- :func:`run_problem`, the whole run JSON: each part of its type, the run id its file's name (and its row's), the
  names in its row checked, its config present (every run resbench records has one: without it the run's
  configuration is unknown) with its names checked and its values in their ranges, every curve point a step and
  numbers, every probe a step, a layer, a metric and a number.

Each returns what is wrong, in words naming the field; None when nothing is. This module imports nothing but the
standard library and the modules of the schema, the config (the run id's pattern), the names and the constraints.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from bench.runs.config import RUN_ID_PATTERN
from bench.runs.constraints import CONSTRAINTS
from bench.runs.names import problem
from bench.runs.schema import INTEGER_COLUMNS, NUMBER_COLUMNS, STATUSES

NAME_COLUMNS = ("run_id", "study", "variant", "family")  # the names a row carries that name files and runs
FRACTION_COLUMNS = ("final_train_acc", "final_val_acc", "best_val_acc", "target_acc", "input_bound_fraction")
# The leaderboard columns that are configuration fields: checked against the constraint each field has.
CONFIG_COLUMNS = ("depth", "seed", "steps", "batch_size", "grad_accum", "lr", "warmup_steps", "world_size", "threads",
                  "epochs")
# Of those, the ones a row holds as what the run *made*: a run that failed before its first step (out of memory
# at step 1, killed while measuring) made 0, and its row records the failure.
MADE_COLUMNS = ("steps", "epochs")

# The type of each part of a run JSON that readers index into (older runs may lack some; none may hold another type).
RUN_PARTS: dict[str, type | tuple[type, ...]] = {
    "row": dict, "config": dict, "model_kwargs": dict, "env": dict, "task": dict, "measurements": dict,
    "placement": dict, "axes": dict, "own_init": dict, "curves": dict, "probes": list, "plugins": list,
    "residual_scalars": list,
    "cost_source": str, "checkpoint": str, "init": (str, type(None)), "warmup_ended_at": (int, type(None)),
    "made_with": dict,
}  # fmt: skip


def name_problem(name: object) -> str | None:
    """Why ``name`` (a variant's, as a row carries it) is not a name: one that is a safe file name
    (:mod:`bench.runs.names`) once its ``:`` and ``/`` are ``_``, as in the run id it makes (``timm:vit_base``,
    ``timm:org/model``); None when it is."""
    return problem(name.replace(":", "_").replace("/", "_") if isinstance(name, str) else name)


def row_problem(row: Mapping[str, Any]) -> str | None:
    """What makes ``row`` (text cells, or values as a run records them) unusable as a leaderboard line: a run id that
    cannot name its file, a study, variant or family that is not a name, a config hash that is not the one its run
    id names. None when nothing does."""
    for column in NAME_COLUMNS:
        value = row.get(column)
        if column != "run_id" and value in (None, ""):
            continue
        why = (problem if column in ("run_id", "study") else name_problem)(value)
        if why is not None:
            return f"{column} {value!r} {why}"
    return _hash_problem(row)


def _hash_problem(row: Mapping[str, Any]) -> str | None:
    """Why ``row``'s ``config_hash`` contradicts its run id (``<variant>-d<depth>-<task>-<hash>-s<seed>``,
    :meth:`bench.runs.config.RunConfig.run_id`); None when it agrees, is empty, or the id names no hash."""
    cell = row.get("config_hash")
    named = RUN_ID_PATTERN.search(str(row.get("run_id")))
    if cell in (None, "") or named is None or str(cell) == named.group(1):
        return None
    return f"config_hash {cell!r} is not the hash {named.group(1)!r} its run_id {row['run_id']!r} was made with"


def value_problem(row: Mapping[str, str]) -> str | None:
    """What in the text cells of a leaderboard row is out of what resbench writes (module docstring); None when
    nothing is. The cells of number columns already parse (the damaged-line check)."""
    status = row.get("status", "")
    if status not in STATUSES:
        return f"status {status!r} is not one of {', '.join(STATUSES)}"
    for column in (*INTEGER_COLUMNS, *NUMBER_COLUMNS):
        cell = row.get(column) or ""
        if not cell:
            continue
        value = int(cell) if column in INTEGER_COLUMNS else float(cell)
        if not math.isfinite(value):
            return f"{column} is {cell}, not a finite number"
        if value < 0:
            return f"{column} is {cell}, below 0"
        if column in FRACTION_COLUMNS and value > 1:
            return f"{column} is {cell}, above 1"
        if column in MADE_COLUMNS and value == 0 and status != "ok":
            continue
        if column in CONFIG_COLUMNS and not CONSTRAINTS[column].accepts(value):
            return f"{column} is {cell}; it must be {CONSTRAINTS[column].describe()}"
    return None


def run_problem(run: Mapping[str, Any], stem: str | None = None) -> str | None:
    """What in the run JSON ``run`` (read from ``<stem>.json``, when given) is not as resbench writes it (module
    docstring), naming the field; None when nothing is."""
    why = problem(run.get("run_id"))
    if why is not None:
        return f"its run_id {run.get('run_id')!r} {why}"
    if stem is not None and run["run_id"] != stem:
        return f"its run_id {run['run_id']!r} is not its file's name {stem!r}"
    for key, kind in RUN_PARTS.items():
        if key in run and not isinstance(run[key], kind):
            return f'"{key}" is a {type(run[key]).__name__}'
    return _row_and_config(run) or _curves(run.get("curves", {})) or _entries(run)


def _row_and_config(run: Mapping[str, Any]) -> str | None:
    row = run.get("row", {})
    why = row_problem(row | {"run_id": row.get("run_id", run["run_id"])})
    if why is not None:
        return f'"row": {why}'
    if row.get("run_id", run["run_id"]) != run["run_id"]:
        return f'"row"."run_id" {row["run_id"]!r} is not its run_id {run["run_id"]!r}'
    if "config" not in run:
        return 'it has no "config" (the configuration the run trained; every run resbench records has one)'
    config = run["config"]
    for key in ("study", "preset"):
        if config.get(key) is not None and problem(config[key]) is not None:
            return f'"config"."{key}" {config[key]!r} {problem(config[key])}'
    if config.get("variant") is not None and name_problem(config["variant"]) is not None:
        return f'"config"."variant" {config["variant"]!r} {name_problem(config["variant"])}'
    for key, value in config.items():
        c = CONSTRAINTS.get(key)
        if c is None or c.kind == "pairs":
            continue
        held = tuple(value) if isinstance(value, list) else value
        if not c.accepts(held):
            return f'"config"."{key}" is {value!r}; it must be {c.describe()}'
    return None


def _number(value: object) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _curves(curves: Mapping[str, Any]) -> str | None:
    for split in ("train", "eval"):
        points = curves.get(split, [])
        if not isinstance(points, list):
            return f'"curves"."{split}" is not a list of points'
        for i, point in enumerate(points):
            if not isinstance(point, dict):
                return f'"curves"."{split}"[{i}] is not a point (an object)'
            step = point.get("step")
            if isinstance(step, bool) or not isinstance(step, int) or step < 0:
                return f'"curves"."{split}"[{i}]."step" is {step!r}, not a step (an integer >= 0)'
            bad = next((k for k, v in point.items() if not _number(v)), None)
            if bad is not None:
                return f'"curves"."{split}"[{i}]."{bad}" is {point[bad]!r}, not a number'
    return None


def _entries(run: Mapping[str, Any]) -> str | None:
    for key in ("probes", "plugins"):
        if not all(isinstance(p, dict) for p in run.get(key, [])):
            return f'"{key}" holds an entry that is not an object'
    for i, probe in enumerate(run.get("probes", [])):
        for field, ok in (("step", lambda v: isinstance(v, int) and not isinstance(v, bool)),
                          ("layer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
                          ("metric", lambda v: isinstance(v, str)), ("value", _number)):
            if field not in probe:
                return f'"probes"[{i}] has no "{field}"'
            if not ok(probe[field]):
                return f'"probes"[{i}]."{field}" is {probe[field]!r}'
    return None
