"""``bench merge``: the results folders of several machines as one.

Rows are keyed by run id. A run found in several folders with the same row and the same run JSON is one run (the
copies are dropped); the same id with a different row or run JSON is two runs that cannot share an id, and the
merge refuses before writing anything, with one line per such run naming both files and the fields that differ (a
row whose run JSON is missing is refused the same way). Run JSONs (with their curves and probes) and everything
sweeps leave in ``studies/`` are copied: the study files, the content hashes of their plugins, the plugin files they
name (at the same relative paths, so the copy of a study finds its plugins as the original did) and the looks of a
study run ``--until-decided``; every name there a safe file name. A row recorded before rows carried a ``machine``
fingerprint gets the one of its run JSON's environment (:func:`bench.runs.env.machine_fingerprint`), so cost figures
of two machines' older runs are not pooled either. Merging into a folder that already holds runs keeps them: a second
merge of the same folders changes nothing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.runs.env import machine_fingerprint
from bench.runs.names import LOOKS_SUFFIX, PLUGIN_HASHES_SUFFIX, file_name, versioned
from bench.runs.results import ResultsStore, read_run_json


@dataclass(frozen=True)
class Merged:
    """What :func:`merge` did: rows added to the target, identical copies dropped, rows now there, study files."""

    added: int
    duplicates: int
    total: int
    studies: int
    beside: tuple[str, ...] = ()  # the names of the other files sweeps left beside the study files (plugins, ...)

    def kinds(self) -> list[str]:
        """What :attr:`beside` holds, each kind with its count: ``["1 plugin file", "1 record of plugin hashes"]``;
        only the kinds there are."""
        kinds = [_kind(name) for name in self.beside]
        return [f"{kinds.count(k)} {k if kinds.count(k) == 1 else plural}" for k, plural in _KINDS if k in kinds]


_KINDS = (("plugin file", "plugin files"), ("record of plugin hashes", "records of plugin hashes"),
          ("looks file", "looks files"))


def _kind(name: str) -> str:
    """The kind of a file under ``studies/`` that is not a study file, by its name's ending
    (:data:`bench.runs.names.PLUGIN_HASHES_SUFFIX`, :data:`bench.runs.names.LOOKS_SUFFIX`; any other is a plugin's)."""
    return ("record of plugin hashes" if name.endswith(PLUGIN_HASHES_SUFFIX) else
            "looks file" if name.endswith(LOOKS_SUFFIX) else "plugin file")


def _with_machine(row: dict[str, str], run: Mapping[str, Any] | None) -> dict[str, str]:
    if row.get("machine") or not run or not isinstance(run.get("env"), Mapping):
        return row
    return row | {"machine": machine_fingerprint(run["env"])}


def _filled(a: dict[str, Any], b: dict[str, Any], run_a: Any, run_b: Any) -> dict[str, Any] | None:
    """One row of two that differ only where one of them is empty, whose run JSONs are the same run (a leaderboard
    written by an older schema reads empty cells where a newer one recorded values): the cells of both; None where
    they differ otherwise, or the JSONs do."""
    if run_a is None or run_a != run_b:
        return None
    keys = list(dict.fromkeys([*a, *b]))
    if any(a.get(k) not in ("", None) and b.get(k) not in ("", None) and a[k] != b[k] for k in keys):
        return None
    return {k: a[k] if a.get(k) not in ("", None) else b.get(k, "") for k in keys}


def _differs(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """The fields in which ``a`` and ``b`` differ, each with both values where they are short (a curve is named,
    not printed)."""
    keys = [k for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]
    return ", ".join(f"{k} ({a.get(k)!r} vs {b.get(k)!r})" if len(repr(a.get(k))) + len(repr(b.get(k))) <= 60
                     else k for k in keys)


def merge(sources: Sequence[str | Path], out: str | Path) -> Merged:
    """Merge the results folders ``sources`` into ``out`` (module docstring); ValueError before anything is written
    when a folder is missing, a row has no run JSON, or two folders record different runs under one id (one line
    per run, naming the fields that differ) or different study files under one name. An output folder the merge
    created is removed again when it fails."""
    created = not Path(out).exists()
    try:
        return _merge(sources, out)
    except BaseException:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise


def _merge(sources: Sequence[str | Path], out: str | Path) -> Merged:
    target = ResultsStore(out)
    target.preflight()
    rows: dict[str, dict[str, str]] = {}
    runs: dict[str, dict[str, Any]] = {}
    where: dict[str, Path] = {}  # run id -> the leaderboard it was first found in
    studies: dict[str, tuple[bytes, Path]] = {}  # path under studies/ -> (bytes, where first found)
    conflicts: list[str] = []  # one line per run recorded differently, or without its run JSON
    duplicates = 0
    for folder in [Path(out), *map(Path, sources)]:
        store = ResultsStore(folder)
        if folder != Path(out) and not store.leaderboard.is_file():
            raise ValueError(f"{folder} holds no results (no {store.leaderboard.name}); pass results folders")
        _collect_studies(folder / "studies", studies)
        for row in store.rows():
            run_id = row["run_id"]
            json_path = store.run_path(run_id)
            run = read_run_json(json_path) if json_path.exists() else None
            if run is None and folder != Path(out):
                conflicts.append(f"run {run_id}: its row in {store.leaderboard} has no run JSON ({json_path})")
                continue
            row = _with_machine(row, run)
            if run_id not in rows:
                rows[run_id], where[run_id] = row, store.leaderboard
                if run is not None:
                    runs[run_id] = run
                continue
            first = where[run_id]
            if rows[run_id] != row and (filled := _filled(rows[run_id], row, runs.get(run_id), run)) is not None:
                rows[run_id] = filled  # one run, its row written by an older schema in one of the folders
            elif rows[run_id] != row:
                conflicts.append(f"run {run_id}: rows of {first} and {store.leaderboard} differ in "
                                 f"{_differs(rows[run_id], row)}")
            elif run is not None and run_id in runs and runs[run_id] != run:
                conflicts.append(f"run {run_id}: run JSONs {first.parent / 'runs' / f'{run_id}.json'} and "
                                 f"{json_path} differ in {_differs(runs[run_id], run)}")
            if run is not None:
                runs.setdefault(run_id, run)
            duplicates += folder != Path(out)
    if conflicts:
        raise ValueError(f"{len(conflicts)} run(s) cannot be merged (two runs cannot share an id, and a row needs "
                         "its run JSON); nothing was written. Move one copy of each away, or restore the missing "
                         "JSON:\n  " + "\n  ".join(conflicts))
    before = {r["run_id"]: r for r in target.rows()}
    new_runs = {k: v for k, v in runs.items() if k not in before or not (target.runs_dir / f"{k}.json").exists()}
    if list(before.values()) != list(rows.values()) or new_runs:
        target.write_all(list(rows.values()), new_runs)
    for name, (text, _) in studies.items():
        path = Path(out) / "studies" / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(text)
    return Merged(len(set(rows) - set(before)), duplicates, len(rows), sum(n.endswith(".toml") for n in studies),
                  tuple(sorted(n for n in studies if not n.endswith(".toml"))))


def _collect_studies(folder: Path, studies: dict[str, tuple[bytes, Path]]) -> None:
    """Every regular file under a results folder's ``studies/`` (by its path there) into ``studies``; ValueError where
    a file differs from the one of that path found before (two versions of a study or its plugin), and where
    ``studies/`` or anything in it is a symbolic link: a link could lead out of the folder (to a key, a home folder),
    and the merge would copy what it leads to as a regular file."""
    if folder.is_symlink():
        raise _link(folder)
    if not folder.is_dir():
        return
    found: list[Path] = []
    for top, dirs, files in os.walk(folder):  # never into a linked folder: os.walk does not follow links by default
        for entry in sorted([*dirs, *files]):
            path = Path(top) / entry
            if path.is_symlink():
                raise _link(path)
            if entry in files and path.is_file():
                found.append(path)
    # the earlier versions a sweep kept (studies/previous/) first: they say which of two versions of a study is older
    for path in sorted(found, key=lambda p: (p.parent.name != "previous", p)):
        name = path.relative_to(folder).as_posix()
        if name.startswith(".") or "/." in name or "__pycache__" in name:
            continue
        for part in name.split("/"):  # copied under the same path into the merged folder
            file_name(part, "stored study file")
        text = path.read_bytes()
        if name in studies and studies[name][0] != text and (older := _older(name, studies, text)) is not None:
            if older == studies[name][0]:  # this folder's is the newer version: it is the study file now
                studies[name] = (text, path)
            continue
        if name in studies and studies[name][0] != text:
            what = "study file" if name.endswith(".toml") else "file"
            raise ValueError(f"{what} studies/{name} differs between {studies[name][1]} and {path}; merge the folders "
                             "of one study's version only")
        studies.setdefault(name, (text, path))


def _older(name: str, studies: Mapping[str, tuple[bytes, Path]], text: bytes) -> bytes | None:
    """Of the study file ``name`` collected so far and ``text``, two versions of one study, the one a sweep kept as an
    earlier version (``studies/previous/<stem>-<sha12>.toml``, :func:`bench.api.keep_previous_study`) in a folder
    merged; None where neither is kept so (then they are two studies under one name)."""
    if "/" in name or not name.endswith(".toml"):
        return None
    for version in (studies[name][0], text):
        if f"previous/{versioned(name[:-5], version, '.toml')}" in studies:
            return version
    return None


def _link(path: Path) -> ValueError:
    return ValueError(f"{path} is a symbolic link: a merge copies only the regular files of a results folder (a link "
                      "could lead out of it); nothing was written. Replace the link with the file itself, or remove it")


def describe(merged: Merged, out: str | Path) -> str:
    return (f"{out}: {merged.total} runs ({merged.added} added, {merged.duplicates} identical copies dropped); "
            f"{merged.studies} study file(s)" + (f" and beside them {', '.join(merged.kinds())}"
                                                 if merged.beside else ""))

