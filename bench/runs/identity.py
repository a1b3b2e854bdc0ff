"""Run ids that moved: a run's id is its configuration (:meth:`bench.runs.config.RunConfig.run_id`), and runs
recorded when the id also held the preset that asked for them get their configuration's id here.

:func:`migrate` (part of ``bench upgrade``) renames every recorded run whose id is not its configuration's: its
leaderboard row (``run_id``, ``config_hash``), its run JSON (file name, ``run_id``, ``row``), every ``cost_source``
that names it, the ``run_id`` column of the analysis tables under ``analysis/`` and its checkpoints. Where several
recorded runs share one configuration and seed (a preset that repeated another's configuration trained it again),
the one recorded first is kept and the others are dropped. Every old id is written to ``aliases.json`` (old id ->
id), which :meth:`bench.runs.results.ResultsStore.load_run` follows: an id quoted anywhere keeps resolving.
A second migration changes nothing.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.runs.config import RUN_ID_PATTERN, config_from_dict
from bench.runs.results import ALIASES, ResultsStore, atomic_write_text, read_aliases


@dataclass(frozen=True)
class Moved:
    """One recorded run whose id changed: ``kept`` False where it repeated a run recorded before it (dropped)."""

    old: str
    new: str
    kept: bool


def _new_id(run: dict[str, Any] | None, old: str) -> str:
    """The id the run's recorded configuration has now (its old id where it records no configuration)."""
    if not run or not isinstance(run.get("config"), dict):
        return old
    try:
        return config_from_dict(run["config"]).run_id
    except (TypeError, ValueError):  # a configuration of another version: left as recorded
        return old


def plan(store: ResultsStore) -> list[Moved]:
    """What :func:`migrate` would do, nothing written."""
    rows = store.rows()
    runs = {r["run_id"]: _load(store, r["run_id"]) for r in rows}
    target = {old: _new_id(run, old) for old, run in runs.items()}
    by_new: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        by_new.setdefault(target[row["run_id"]], []).append(row)
    moved = []
    for new, group in by_new.items():
        # the run already at the id, else the one recorded first, stays
        first = min(group, key=lambda r: (r["run_id"] != new, r.get("created_at") or "", r["run_id"]))
        moved += [Moved(r["run_id"], new, r is first) for r in group if r["run_id"] != new or r is not first]
    return sorted(moved, key=lambda m: (m.new, not m.kept, m.old))


def _load(store: ResultsStore, run_id: str) -> dict[str, Any] | None:
    path = store.runs_dir / f"{run_id}.json"
    return store.load_run(run_id) if path.is_file() else None


def migrate(results_dir: str | Path, *, dry_run: bool = False) -> list[Moved]:
    """Give every recorded run its configuration's id (module docstring); returns the runs moved."""
    store = ResultsStore(results_dir)
    moved = plan(store)
    if dry_run or not moved:
        return moved
    alias = {m.old: m.new for m in moved}
    dropped = {m.old for m in moved if not m.kept}

    def renamed(row: dict[str, Any]) -> dict[str, Any]:
        new = alias.get(row["run_id"], row["run_id"])
        match = RUN_ID_PATTERN.search(new)
        source = row.get("cost_source") or ""
        return {**row, "run_id": new, "config_hash": match.group(1) if match else row.get("config_hash"),
                "cost_source": alias.get(source, source)}

    rows, jsons = [], {}
    for row in store.rows():
        if row["run_id"] in dropped:
            continue
        new = renamed(row)
        rows.append(new)
        run = _load(store, row["run_id"])
        if run is not None and (new != row or (run.get("cost_source") or "") in alias):
            source = run.get("cost_source") or ""
            jsons[new["run_id"]] = {**run, "run_id": new["run_id"], "cost_source": alias.get(source, source),
                                    "row": renamed(dict(run.get("row") or row))}
    store.write_all(rows, jsons)
    atomic_write_text(store.root / ALIASES, json.dumps({**read_aliases(store.root), **alias}, indent=1,
                                                       sort_keys=True) + "\n")
    for old in alias:
        (store.runs_dir / f"{old}.json").unlink(missing_ok=True)
        _move_checkpoints(store.root / "checkpoints", old, alias[old])
    _rename_in_tables(store.root / "analysis", alias)
    return moved


def _move_checkpoints(folder: Path, old: str, new: str) -> None:
    """A run's kept weights (``<id>.pt``) and mid-run states (``<id>/``) follow it; a copy already at the new id
    (the run kept of several) wins."""
    for source, target in ((folder / f"{old}.pt", folder / f"{new}.pt"), (folder / old, folder / new)):
        if source.exists() and not target.exists():
            source.rename(target)


def _rename_in_tables(folder: Path, alias: dict[str, str]) -> None:
    """The ``run_id`` column of every analysis table (CSV) under ``folder``, other cells kept as their text."""
    for path in sorted(folder.rglob("*.csv")) if folder.is_dir() else []:
        lines = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))
        if not lines or "run_id" not in lines[0]:
            continue
        col = lines[0].index("run_id")
        fixed = [lines[0], *([*r[:col], alias.get(r[col], r[col]), *r[col + 1:]] for r in lines[1:])]
        if fixed != lines:
            buf = io.StringIO()
            csv.writer(buf, lineterminator="\n").writerows(fixed)
            atomic_write_text(path, buf.getvalue())
