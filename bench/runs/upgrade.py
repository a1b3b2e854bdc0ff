"""``bench upgrade``: bring a results directory recorded by an earlier resbench up to this one's rules.

Runs recorded before tasks declared a chance level have no ``chance_loss``: each is filled from the run's task,
rebuilt from the configuration in its JSON (the bundled datasets need nothing; a task whose data is not on this
machine is left as recorded, and said so), and the run is judged by :func:`bench.runs.chance.judge` as a new run
would be — ``failed_to_learn`` where it ended at chance, its numbers kept. The row and the run JSON change
together, in one locked rewrite; a leaderboard in an earlier schema is rewritten in the current one (its rows
otherwise as they were); a second upgrade changes nothing.

Runs recorded under a preset since renamed (:data:`RENAMED_PRESETS`) are given its name (:func:`rename_presets`): a
preset is not part of a run's identity, so their ids stay, and the study's reports name a preset it still has.

Runs recorded before a configuration named its init stream get the one they drew from, ``global``
(:func:`record_init_streams`); their ids stay, and runs drawn by common random numbers never pool with them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.runs import chance, tasks
from bench.runs.config import LEGACY, config_from_dict
from bench.runs.env import machine_fingerprint
from bench.runs.results import COLUMNS, ResultsStore
from bench.runs.train import task_options

# Presets of the shipped studies renamed by what they hold: study -> {old name: name}. crosslayer's second and third
# presets were first named for the order they were made in.
RENAMED_PRESETS: dict[str, dict[str, str]] = {
    "crosslayer": {"round2": "since_mhc", "round3": "width_and_loops"},
}


def rename_presets(results_dir: str | Path, *, dry_run: bool = False) -> dict[str, tuple[str, str]]:
    """Give every run recorded under a renamed preset (:data:`RENAMED_PRESETS`) its preset's name; returns run id ->
    (old name, name). The run JSONs change, their rows and ids do not."""
    store = ResultsStore(results_dir)
    renamed: dict[str, tuple[str, str]] = {}
    updates: dict[str, tuple[dict[str, str], dict[str, Any]]] = {}
    for row in store.rows():
        run = store.load_run(row["run_id"])
        cfg = run.get("config") or {}
        name = RENAMED_PRESETS.get(str(cfg.get("study")), {}).get(str(cfg.get("preset")))
        if name is not None:
            renamed[row["run_id"]] = (str(cfg["preset"]), name)
            updates[row["run_id"]] = (row, {**run, "config": {**cfg, "preset": name}})  # the row as it is
    if updates and not dry_run:
        store.replace(updates)
    return renamed


def record_init_streams(results_dir: str | Path, *, dry_run: bool = False) -> list[str]:
    """Write the init stream into every run JSON whose configuration predates the field: ``global`` (:data:`LEGACY`),
    the one stream every run drew from before common random numbers; returns the run ids. Ids and rows stay (a
    configuration that reads ``global`` hashes as it did without the field)."""
    store = ResultsStore(results_dir)
    updates: dict[str, tuple[dict[str, str], dict[str, Any]]] = {}
    for row in store.rows():
        run = store.load_run(row["run_id"])
        cfg = run.get("config")
        if isinstance(cfg, dict) and cfg and "init_stream" not in cfg:  # an empty one records nothing to add to
            updates[row["run_id"]] = (row, {**run, "config": {**cfg, "init_stream": LEGACY["init_stream"]}})
    if updates and not dry_run:
        store.replace(updates)
    return sorted(updates)


@dataclass(frozen=True)
class Change:
    """What the upgrade did to one run (or could not do: ``note``): its chance level where it had none (None where it
    had one, or where it could not be rebuilt), its status before and after, its machine fingerprint where it had
    none (else "")."""

    run_id: str
    chance_loss: float | None
    status_before: str
    status_after: str
    note: str = ""
    machine: str = ""


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value == ""


def _chance_of(config: Mapping[str, Any], cache: dict[tuple[Any, ...], float | None]) -> float | None:
    """The chance level of the task ``config`` trains on (rebuilt on the CPU, once per distinct data option)."""
    cfg = config_from_dict(config)
    options = task_options(cfg)
    key = (cfg.task, options)
    if key not in cache:
        cache[key] = tasks.get(cfg.task, device="cpu", seed=cfg.seed, options=options).chance_loss
    return cache[key]


def _machine_of(row: Mapping[str, Any], run: Mapping[str, Any]) -> str:
    """The fingerprint a row without one gets from its run JSON's environment ("" where it has one or no env)."""
    env = run.get("env")
    return machine_fingerprint(env) if _missing(row.get("machine")) and isinstance(env, Mapping) else ""


def upgrade(results_dir: str | Path, *, dry_run: bool = False) -> list[Change]:
    """Fill every run's missing ``chance_loss`` and judge the ``ok`` ones by it, and every row's missing ``machine``
    (module docstring); returns one :class:`Change` per run that lacked either. With ``dry_run`` nothing is written."""
    store = ResultsStore(results_dir)
    store.preflight()
    if not dry_run:
        store.rebuild()  # the rows a lost leaderboard no longer holds, from their run JSONs (said on stderr)
    board = store.load_leaderboard()
    cache: dict[tuple[Any, ...], float | None] = {}
    changes: list[Change] = []
    updates: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for run_id, level, machine in zip(board["run_id"], board["chance_loss"], board["machine"], strict=True):
        if not _missing(level) and not _missing(machine):
            continue
        run = store.load_run(str(run_id))
        row = dict(run["row"])
        fingerprint = _machine_of(row, run)
        if fingerprint:
            row["machine"] = fingerprint
        status = row["status"]
        if not _missing(level):
            level, note = None, ""
        elif not run["config"]:  # an empty one: read_run_json refuses a run JSON without it
            level, note = None, "no configuration in its run JSON"
        else:
            try:
                level, note = _chance_of(run["config"], cache), ""
            except (ValueError, OSError) as exc:  # a dataset not on this machine, a config of another version
                level, note = None, f"task not rebuilt here: {exc}"
            else:
                row = chance.judge({**row, "chance_loss": level},
                                   float(run["config"].get("chance_band", chance.CHANCE_BAND)))
        if level is None and not note and not fingerprint:
            continue  # only the machine was missing, and the run JSON records no environment to take it from
        changes.append(Change(str(run_id), level, status, row["status"], note, fingerprint))
        if level is not None or fingerprint:
            updates[str(run_id)] = (row, {**run, "row": row})
    if updates and not dry_run:
        store.replace(updates)
    elif not dry_run and _earlier_schema(store):  # every row as it was, in this resbench's columns
        store.write_all(store.rows(), {})
    return changes


def _earlier_schema(store: ResultsStore) -> bool:
    """Whether the leaderboard's header is an earlier schema's (its rows read mapped onto the current one)."""
    if not store.leaderboard.is_file():
        return False
    with store.leaderboard.open(encoding="utf-8") as f:
        return tuple(f.readline().rstrip("\r\n").split(",")) != COLUMNS
