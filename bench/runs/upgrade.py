"""``bench upgrade``: bring a results directory recorded by an earlier resbench up to this one's rules.

Runs recorded before tasks declared a chance level have no ``chance_loss``: each is filled from the run's task,
rebuilt from the configuration in its JSON (the bundled datasets need nothing; a task whose data is not on this
machine is left as recorded, and said so), and the run is judged by :func:`bench.runs.chance.judge` as a new run
would be — ``failed_to_learn`` where it ended at chance, its numbers kept. The row and the run JSON change
together, in one locked rewrite; a second upgrade changes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.runs import chance, tasks
from bench.runs.config import config_from_dict
from bench.runs.results import ResultsStore
from bench.runs.train import task_options


@dataclass(frozen=True)
class Change:
    """What the upgrade did to one run (or could not do: ``note``)."""

    run_id: str
    chance_loss: float | None
    status_before: str
    status_after: str
    note: str = ""


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


def upgrade(results_dir: str | Path, *, dry_run: bool = False) -> list[Change]:
    """Fill every run's missing ``chance_loss`` and judge the ``ok`` ones by it (module docstring); returns one
    :class:`Change` per run that lacked a chance level. With ``dry_run`` nothing is written."""
    store = ResultsStore(results_dir)
    store.preflight()
    board = store.load_leaderboard()
    cache: dict[tuple[Any, ...], float | None] = {}
    changes: list[Change] = []
    updates: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for run_id, level in zip(board["run_id"], board["chance_loss"], strict=True):
        if not _missing(level):
            continue
        run = store.load_run(str(run_id))
        row = dict(run["row"])
        if "config" not in run:
            changes.append(Change(run_id, None, row["status"], row["status"], "no configuration in its run JSON"))
            continue
        try:
            level = _chance_of(run["config"], cache)
        except (ValueError, OSError) as exc:  # a dataset not on this machine, a config of another version
            changes.append(Change(run_id, None, row["status"], row["status"], f"task not rebuilt here: {exc}"))
            continue
        judged = chance.judge({**row, "chance_loss": level}, float(run["config"].get("chance_band",
                                                                                    chance.CHANCE_BAND)))
        changes.append(Change(run_id, level, row["status"], judged["status"]))
        updates[run_id] = (judged, {**run, "row": judged})
    if updates and not dry_run:
        store.replace(updates)
    return changes
