"""Where study files are and how one is read: the one lookup of every command that takes a study.

A study is a TOML file (``bench/studies/<name>.toml`` ships with resbench; any other path is a study of your own).
A sweep copies the file it ran into ``<results>/studies/<name>.toml``, so a results directory carries the claims
its runs were checked against; :func:`find_study` looks there first when it is given a results directory.

Its keys (grid, presets, claims, analysis, plugins ...) are validated by :func:`bench.sweeps.study.load_study`;
this module only finds and parses the file (and the plugins it names, which must be loaded before its variants can
be checked), so the claims and the reports can read it without the sweep's code.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

STUDIES_DIR = Path(__file__).resolve().parent.parent / "studies"
PLUGIN_ORIGIN = "study file"  # the origin of the plugins a study file names, as bench.runs.plugins records it


def shipped_studies() -> list[str]:
    """The names of the studies resbench ships, sorted."""
    return sorted(p.stem for p in STUDIES_DIR.glob("*.toml"))


def is_shipped(path: Path) -> bool:
    """Whether ``path`` is one of the studies resbench ships."""
    return path.resolve().parent == STUDIES_DIR.resolve()


def shipped_study(name: str) -> Path:
    """The file of the shipped study ``name``; ValueError naming the shipped studies."""
    path = STUDIES_DIR / f"{name}.toml"
    if not path.is_file():
        raise ValueError(f"no shipped study {name!r}; shipped studies: {', '.join(shipped_studies()) or 'none'} "
                         "(a study file of your own runs with `python -m bench sweep FILE.toml`)")
    return path


def find_study(ref: str | Path, results_dir: str | Path | None = None) -> Path:
    """The study file ``ref`` names: a path to a ``.toml`` file (or any existing file), else a study name looked
    up in ``<results_dir>/studies/`` (the copy a sweep left there, when ``results_dir`` is given) and then among
    the shipped studies. ValueError names what was looked for and the shipped studies."""
    path = Path(ref)
    if path.suffix == ".toml" or path.is_file():
        if not path.is_file():
            raise ValueError(f"study file {path} does not exist")
        return path
    name = str(ref)
    if results_dir is not None and (Path(results_dir) / "studies" / f"{name}.toml").is_file():
        return Path(results_dir) / "studies" / f"{name}.toml"
    return shipped_study(name)


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


def study_plugins(ref: str | Path, results_dir: str | Path | None = None) -> list[str]:
    """The plugin specs the study ``ref`` names (file paths resolved against the study file), read before the study
    itself is validated: its variants exist only once they are loaded. [] when there is no such study (the command
    then says so itself)."""
    try:
        path = find_study(ref, results_dir)
        specs = read_study_file(path).get("plugins", [])
    except ValueError:
        return []
    return [plugin_spec(s, path) for s in specs if isinstance(s, str) and s.strip()] if isinstance(specs, list) else []


def plugin_spec(spec: str, study: Path) -> str:
    """A plugin spec of a study file: a file path is read relative to the study file; a module name as it is."""
    if spec.endswith(".py") or "/" in spec:
        return str((study.parent / spec).resolve())
    return spec
