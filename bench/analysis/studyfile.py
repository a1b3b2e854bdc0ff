"""Where study files are and how one is read: the one lookup of every command that takes a study.

A study is a TOML file (``bench/studies/<name>.toml`` ships with resbench; any other path is a study of your own).
A sweep stores the file it ran in ``<results>/studies/<name>.toml``, so a results directory carries the claims
its runs were checked against, with the plugin files it names beside it and their content hashes in
``<name>.plugins.json`` (:func:`record_plugins`). :func:`find_study` reads that stored copy when it is given a
results directory; a shipped study's name always means the shipped study when anything is run.

A results folder is data, never code: the plugins a stored study names are imported only when the user asks for it
(``--trust-plugins``), and then only if each file (or installed module) still has the content hash the sweep
recorded (:func:`study_plugins`); a stored copy of a shipped study that names plugins is refused. A study file of
your own, named by its path outside a results folder, is trusted as a script is: its plugins are imported.

Its keys (grid, presets, claims, analysis, plugins ...) are validated by :func:`bench.sweeps.study.load_study`;
this module only finds and parses the file (and the plugins it names, which must be loaded before its variants can
be checked), so the claims and the reports can read it without the sweep's code.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.runs.names import PLUGIN_HASHES_SUFFIX, file_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

STUDIES_DIR = Path(__file__).resolve().parent.parent / "studies"
PLUGIN_ORIGIN = "study file"  # the origin of the plugins a study file names, as bench.runs.plugins records it
_NOTED: list[set[str]] = []  # inside one_note_per_study(): the stored studies whose untrusted-plugins note was printed


def shipped_studies() -> list[str]:
    """The names of the studies resbench ships, sorted."""
    return sorted(p.stem for p in STUDIES_DIR.glob("*.toml"))


def is_shipped(path: Path) -> bool:
    """Whether ``path`` is one of the studies resbench ships."""
    return path.resolve().parent == STUDIES_DIR.resolve()


class NoStudy(ValueError):
    """No study file by that name or path: neither stored in the results folder nor shipped. Where a study's file
    only adds to what its runs show (its claims in a report), this means there is nothing to add; any other
    ValueError of a study file (one that cannot be read, a stored copy refused) is an error wherever it is met."""


def shipped_study(name: str) -> Path:
    """The file of the shipped study ``name``; :class:`NoStudy` naming the shipped studies."""
    path = STUDIES_DIR / f"{name}.toml"
    if not path.is_file():
        raise NoStudy(f"no shipped study {name!r}; shipped studies: {', '.join(shipped_studies()) or 'none'} "
                         "(a study file of your own runs with `python -m bench sweep FILE.toml`)")
    return path


class StandIn(ValueError):
    """A results folder's study file refused wherever it is looked up: a copy of a shipped study that names plugins,
    or a symbolic link (the study file or its ``studies/`` folder, :func:`link_in`)."""


def link_in(path: Path, levels: int = 2) -> Path | None:
    """The first symbolic link among ``path`` and its ``levels - 1`` parents (a stored study file and its
    ``studies/`` folder), as written (never resolved); None when there is none. A link inside a results folder could
    lead anywhere (a plugin elsewhere, a file of the user's): resbench follows none."""
    for part in [path, *path.parents][:levels]:
        if part.is_symlink():
            return part
    return None


def _refuse_link(path: Path) -> None:
    link = link_in(path)
    if link is not None:
        raise StandIn(f"{link} is a symbolic link inside a results folder: resbench follows no link there (it could "
                      "lead to code or files outside the folder); replace it with the file itself")


def find_study(ref: str | Path, results_dir: str | Path | None = None) -> Path:
    """The study file ``ref`` names: a path to a ``.toml`` file (or any existing file), else a study name looked
    up in ``<results_dir>/studies/`` (the copy a sweep stored there, when ``results_dir`` is given) and then among
    the shipped studies. :class:`NoStudy` names what was looked for and the shipped studies; ValueError refuses a
    stored copy of a shipped study that names plugins (code would stand in for the shipped study's) or one that
    cannot be read."""
    path = Path(ref)
    if path.suffix == ".toml" or path.is_file():
        if results_folder_of(path) is not None:
            _refuse_link(path)
        if not path.is_file():
            raise NoStudy(f"study file {path} does not exist")
        return path
    name = file_name(str(ref), "study")  # a name from a row or a command line: never a path out of the folder
    stored = Path(results_dir) / "studies" / f"{name}.toml" if results_dir is not None else None
    if stored is not None:
        _refuse_link(stored)
    if stored is None or not stored.is_file():
        return shipped_study(name)
    if name in shipped_studies() and named_plugins(read_study_file(stored)):
        raise StandIn(f"{stored} names plugins, but {name!r} is a shipped study, which names none: a results "
                         "folder's copy never stands in for a shipped study with code of its own; name the copy by "
                         "its path to use it (its plugins then need --trust-plugins)")
    return stored


def results_folder_of(path: Path) -> Path | None:
    """The results folder a study file named by its path is stored in, or None: a study file of your own, or a
    shipped one. A file ``<folder>/studies/<name>.toml`` is stored when ``<folder>`` holds a leaderboard or run JSONs
    or a sweep recorded its plugins beside it, judged both where the path says it is and where its links lead: a link
    never turns a stored study into one of your own. (A study found by its name in a results folder is stored
    whatever else the folder holds: :func:`stored_in`.)"""
    if is_shipped(path):
        return None
    for where in (Path(os.path.abspath(path)), path.resolve()):
        folder = where.parent.parent
        if where.parent.name == "studies" and any(os.path.lexists(p) for p in (
                folder / "leaderboard.csv", folder / "runs", manifest_path(where))):
            return folder
    return None


def stored_in(path: Path, results_dir: str | Path | None) -> Path | None:
    """The results folder the study file ``path`` (as :func:`find_study` found it) is stored in: ``results_dir`` when
    it was found there by name, always, else :func:`results_folder_of`; None for a shipped study or one of yours."""
    if results_dir is not None and path.parent == Path(results_dir) / "studies" and not is_shipped(path):
        return Path(results_dir)
    return results_folder_of(path)


def read_study_file(path: str | Path) -> dict[str, Any]:
    """A study file's TOML as a dict; a missing or malformed file is bad input (ValueError)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"study file {path} does not exist")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"study file {path} is not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"study file {path} is not UTF-8 text ({exc.reason})") from None
    except RecursionError:  # arrays or tables nested thousands deep: no study needs more than a few levels
        raise ValueError(f"study file {path} nests its arrays or tables too deep to read; a study needs a few "
                         "levels") from None


def named_plugins(data: Mapping[str, Any]) -> list[str]:
    """The plugin specs a study file's ``plugins`` list names (``data``: the file read), as written."""
    specs = data.get("plugins", [])
    return [s for s in specs if isinstance(s, str) and s.strip()] if isinstance(specs, list) else []


def study_plugins(ref: str | Path, results_dir: str | Path | None = None, trust: bool = False,
                  own: bool = False, reads: str = "models") -> list[str]:
    """The plugin specs to load for the study ``ref`` (file paths resolved against the study file), read before the
    study itself is validated: its variants exist only once they are loaded. [] when there is no such study (the
    command then says so itself).

    A study stored in a results folder (:func:`stored_in`) gives its plugins only with ``trust``, each
    checked against the content hash its sweep recorded (ValueError when one is missing or differs); without it a
    note on stderr says what was not imported and how to import it, unless the user gave plugins of their own
    (``own``: ``--plugin``), which then stand in for them, or unless importing them would change nothing. ``reads``
    says what the command reads: ``"models"`` (it builds them: the note), ``"runs"`` (``compare``, ``leaderboard``:
    the runs hold what it reads, no note) or ``"report"`` (the runs, and the models where the study has an analysis
    step, which the report runs: the note only then)."""
    try:
        path = find_study(ref, results_dir)
        specs = named_plugins(read_study_file(path))
    except StandIn:
        raise
    except ValueError:
        return []
    folder = stored_in(path, results_dir)
    if folder is None or not specs:
        return [plugin_spec(s, path) for s in specs]
    if not trust:
        if own:  # the user's --plugin gives the variants: nothing to say
            return []
        if reads == "runs" or (reads == "report" and not read_study_file(path).get("analysis")):
            return []  # the runs hold what it reads: the plugins would change nothing
        if not _NOTED or str(path) not in _NOTED[-1]:
            print(f"note: the study file {path} is stored in the results folder {folder} and names plugins "
                  f"({', '.join(specs)}) that were not imported: a results folder is data, not code. Pass "
                  "--trust-plugins to import them (each checked against the content hash its sweep recorded), or "
                  "--plugin FILE to use your own copy", file=sys.stderr)
        if _NOTED:
            _NOTED[-1].add(str(path))
        return []
    recorded = _recorded_hashes(path)
    return [_verified(spec, path, recorded) for spec in specs]


@contextlib.contextmanager
def one_note_per_study() -> Iterator[None]:
    """Within it (one command), :func:`study_plugins` notes a stored study's plugins that were not imported once,
    however often the study is read: the command line reads it to load plugins, then the API it calls reads it
    again. Outside it, every call notes."""
    _NOTED.append(set())
    try:
        yield
    finally:
        _NOTED.pop()


def manifest_path(study: Path) -> Path:
    """Where the content hashes of a stored study's plugins are: ``<name>.plugins.json`` beside it."""
    return study.with_name(study.stem + PLUGIN_HASHES_SUFFIX)


def source_sha256(spec: str) -> tuple[str, str]:
    """``(key, sha256)`` of a resolved plugin spec: a file's path (or a module's name) and its source's hash; a
    module that cannot be found hashes as ``""``."""
    if spec.endswith(".py") or "/" in spec:
        return spec, hashlib.sha256(Path(spec).read_bytes()).hexdigest()
    name = spec.partition(":")[0]
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        found = None
    origin = Path(found.origin) if found is not None and found.origin else None
    return name, hashlib.sha256(origin.read_bytes()).hexdigest() if origin and origin.is_file() else ""


def record_plugins(files: Mapping[str, Path], modules: Sequence[str]) -> dict[str, dict[str, str]]:
    """The manifest of a stored study (:func:`manifest_path`): the sha256 of each plugin file it stores, by its path
    relative to the stored study's folder (``files``: that path -> the file), and of each module's source, by name."""
    return {"files": {rel: hashlib.sha256(src.read_bytes()).hexdigest() for rel, src in files.items()},
            "modules": dict(source_sha256(m) for m in modules)}


def _recorded_hashes(study: Path) -> dict[str, dict[str, str]]:
    path = manifest_path(study)
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ValueError(f"{study} names plugins, but their content hashes are not recorded ({path} is missing or "
                         "unreadable), so --trust-plugins cannot check them: load the plugins you trust with "
                         "--plugin FILE instead") from None
    if not isinstance(manifest, dict) or not all(isinstance(manifest.get(k, {}), dict) for k in ("files", "modules")):
        raise ValueError(f"{path} is not a record of plugin hashes; load the plugins you trust with --plugin FILE")
    return {k: dict(manifest.get(k, {})) for k in ("files", "modules")}


def _verified(spec: str, study: Path, recorded: Mapping[str, Mapping[str, str]]) -> str:
    """The resolved ``spec`` of a stored study when its source has the recorded hash; ValueError otherwise."""
    resolved = plugin_spec(spec, study)
    if (spec.endswith(".py") or "/" in spec) and link_in(study.parent / spec, levels=1) is not None:
        raise ValueError(f"{study}: plugin {spec!r} is a symbolic link inside a results folder: --trust-plugins "
                         "imports only the regular files a sweep stored; load the code you trust with --plugin FILE")
    if resolved.endswith(".py") or "/" in resolved:
        try:
            key = Path(resolved).resolve().relative_to(study.resolve().parent).as_posix()
        except ValueError:
            key = None  # outside the stored study's folder: never recorded
        expected = recorded["files"].get(key) if key is not None else None
        actual = source_sha256(resolved)[1] if key is not None and Path(resolved).is_file() else None
    else:
        key = spec.partition(":")[0]
        expected, actual = recorded["modules"].get(key), source_sha256(resolved)[1]
    if expected is None:
        raise ValueError(f"{study}: plugin {spec!r} has no recorded content hash (in {manifest_path(study).name}); "
                         "--trust-plugins imports only what the sweep recorded: load it with --plugin FILE instead")
    if actual != expected:
        raise ValueError(f"{study}: plugin {spec!r} is not the code the sweep recorded (sha256 {expected[:12]}, now "
                         f"{(actual or 'missing')[:12]}); load the version you trust with --plugin FILE instead")
    return resolved


def plugin_spec(spec: str, study: Path) -> str:
    """A plugin spec of a study file: a file path is read relative to the study file; a module name as it is."""
    if spec.endswith(".py") or "/" in spec:
        return str((study.parent / spec).resolve())
    return spec
