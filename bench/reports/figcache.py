"""A figure is drawn again only when what it shows could have changed.

Each figure's key is a hash of the drawing function's name, every argument it receives (a data frame by its values,
index, columns and dtypes; a string, number or container of them by its ``repr``), the variant registry's state
(:func:`registry_state`: a plugin changes what a figure calls a variant) and the drawing code's version
(:func:`code_version`: the source of the ``bench`` package and the versions of the libraries that draw). The keys of
a plots folder are kept beside its figures, in ``.figures.json``, with the SHA-256 of each PNG as written. A figure
is skipped only when its key is unchanged and its PNG on disk still has that SHA-256; a missing, damaged or stale
key file, an edited or missing PNG, or an argument that cannot be hashed means the figure is drawn. ``--no-cache``
draws every figure.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from bench.runs import registry_index
from bench.runs.results import atomic_write_text

KEY_FILE = ".figures.json"
_FORMAT = 1  # the key file's layout; another value is read as no keys
_LIBRARIES = ("matplotlib", "seaborn", "pandas", "numpy", "pillow")


@cache
def code_version() -> str:
    """SHA-256 of every Python source and JSON file of the ``bench`` package and the drawing libraries' versions:
    any change to the code that computes or draws a figure gives every figure a new key."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".json") and "__pycache__" not in p.parts):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    for lib in _LIBRARIES:
        try:
            h.update(f"{lib}={metadata.version(lib)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{lib}=none".encode())
    return h.hexdigest()


def registry_state() -> str:
    """What the figures read of the variant registry: the static index (part of :func:`code_version`) where the
    registry is not imported, else every registered variant's description (plugins' included)."""
    registry = registry_index.loaded_registry()
    if registry is None:
        return "index"
    described = [(name, registry.describe(name)) for name in registry.list_variants()]
    return hashlib.sha256(json.dumps(described, sort_keys=True, default=repr).encode()).hexdigest()


def _frame_digest(df: pd.DataFrame) -> str:
    h = hashlib.sha256(repr((list(df.columns), [str(t) for t in df.dtypes], df.shape)).encode())
    h.update(pd.util.hash_pandas_object(df, index=True).to_numpy().tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class Drawing:
    """One figure: its file name and the call that draws it, ``draw(*args, **kwargs)``."""

    name: str
    draw: Callable[..., Figure]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self) -> Figure:
        return self.draw(*self.args, **self.kwargs)


class Keys:
    """The keys of one command's figures: each data frame hashed once, however many figures receive it."""

    def __init__(self) -> None:
        self._frames: dict[int, tuple[pd.DataFrame, str]] = {}
        self._registry = registry_state()

    def _part(self, value: Any) -> str:
        if isinstance(value, pd.DataFrame):
            known = self._frames.get(id(value))
            if known is None or known[0] is not value:
                known = (value, _frame_digest(value))
                self._frames[id(value)] = known  # the frame is kept, so its id is not reused by another
            return known[1]
        if isinstance(value, Mapping):
            return repr(sorted((self._part(k), self._part(v)) for k, v in value.items()))
        if isinstance(value, (tuple, list)):
            return repr([self._part(v) for v in value])
        if value is None or isinstance(value, (str, int, float, np.number)):
            return repr(value)
        raise TypeError(f"no stable key for a {type(value).__name__}")  # its repr may hold an address

    def key(self, drawing: Drawing) -> str | None:
        """The figure's key, or None where an argument cannot be hashed (then it is always drawn)."""
        try:
            parts = [code_version(), self._registry, f"{drawing.draw.__module__}.{drawing.draw.__qualname__}",
                     *(self._part(a) for a in drawing.args),
                     *(f"{k}={self._part(v)}" for k, v in sorted(drawing.kwargs.items()))]
        except (TypeError, ValueError):
            return None
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def png_digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def read_keys(folder: Path) -> dict[str, dict[str, str]]:
    """``{png name: {"key": ..., "png": sha256}}`` of ``folder``'s key file; {} where it is missing or damaged."""
    try:
        data = json.loads((folder / KEY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != _FORMAT or not isinstance(data.get("figures"), dict):
        return {}
    return {name: entry for name, entry in data["figures"].items()
            if isinstance(entry, dict) and isinstance(entry.get("key"), str) and isinstance(entry.get("png"), str)}


def up_to_date(path: Path, key: str | None, keys: Mapping[str, Mapping[str, str]]) -> bool:
    """Whether ``path`` is the PNG written for ``key``: the key file says so and the file's bytes agree."""
    entry = keys.get(path.name)
    return key is not None and entry is not None and entry["key"] == key and png_digest(path) == entry["png"]


def write_keys(folder: Path, written: Mapping[str, str | None], keys: Mapping[str, Mapping[str, str]]) -> None:
    """Record the key of each PNG in ``written`` (name -> key; None: not cacheable) beside the others kept."""
    figures = {name: dict(entry) for name, entry in keys.items() if name not in written}
    for name, key in written.items():
        digest = png_digest(folder / name)
        if key is not None and digest is not None:
            figures[name] = {"key": key, "png": digest}
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / KEY_FILE, json.dumps({"format": _FORMAT, "figures": figures}, indent=1, sort_keys=True))


Job = tuple[Path, Drawing]  # where a figure goes, and what draws it


def stale(jobs: Sequence[Job], cached: bool) -> tuple[list[Job], dict[Path, str | None]]:
    """The jobs whose figure must be drawn (all of them unless ``cached``), and every job's key."""
    hasher = Keys()
    keys = {path: hasher.key(d) for path, d in jobs}
    if not cached:
        return list(jobs), keys
    known: dict[Path, dict[str, dict[str, str]]] = {}
    todo = []
    for path, d in jobs:
        folder = known.setdefault(path.parent, read_keys(path.parent))
        if not up_to_date(path, keys[path], folder):
            todo.append((path, d))
    return todo, keys


def record(jobs: Sequence[Job], keys: Mapping[Path, str | None]) -> None:
    """Write the key file of each folder ``jobs`` drew into."""
    folders: dict[Path, dict[str, str | None]] = {}
    for path, _ in jobs:
        folders.setdefault(path.parent, {})[path.name] = keys[path]
    for folder, written in folders.items():
        write_keys(folder, written, read_keys(folder))
