"""Reading a results folder's run JSONs as fast as the data allows, every file still read through
:func:`bench.runs.results.read_run_json` (the one place a run JSON is parsed and checked).

- :func:`once`: within it (a command that reads results: ``leaderboard``, ``compare``, ``plot``, ``report``,
  ``site``), each run JSON is parsed once, however many figures and tables read it; a file rewritten meanwhile (its
  size or modification time changed) is parsed again. The runs handed out are shared: read them, never change
  them. Outside it, every read parses afresh, as before.
- :func:`read_heads`: every run JSON without its curves and probes (nine tenths of its bytes), what the tables
  read and how :func:`read_runs` finds the files of some runs without parsing the others, from a cache in the
  results folder (``.cache/run-heads.json``). The cache is keyed by each run JSON's name,
  size and modification time and is never trusted over them: a run JSON added, removed or changed since is read
  again, and a cache that cannot be read (damaged, truncated, another format) is rebuilt from the run JSONs, never
  read. A folder that cannot be written is read without one.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bench.runs.results import ResultsStore, atomic_write_text, read_run_json
from bench.runs.validate import run_problem

HEADS_CACHE = Path(".cache") / "run-heads.json"  # under the results folder
HEADS_FORMAT = "resbench-run-heads/1"
BODY = ("curves", "probes")  # what a head leaves out

Stamp = tuple[int, int]  # a file's size and modification time (ns): what a cached parse is keyed by
T = TypeVar("T")


@dataclass
class _Command:
    """What one command has read and made: each run JSON parsed (by path, with its stamp), and what it computed
    from them more than once (:func:`remembered`)."""

    parsed: dict[Path, tuple[Stamp, dict[str, Any]]] = field(default_factory=dict)
    made: dict[tuple[Any, ...], Any] = field(default_factory=dict)


_COMMAND: contextvars.ContextVar[_Command | None] = contextvars.ContextVar("reading_command", default=None)


@contextlib.contextmanager
def once() -> Iterator[None]:
    """Parse each run JSON once within this block (see the module's docstring)."""
    token = _COMMAND.set(_COMMAND.get() or _Command())
    try:
        yield
    finally:
        _COMMAND.reset(token)


def remembered(key: tuple[Any, ...], make: Callable[[], T]) -> T:
    """``make()``, once per ``key`` within :func:`once` (what a command computes from the runs it read and needs
    in several places: a study's frames, its claims' verdicts); afresh each time outside it. Shared like the runs:
    read it, never change it."""
    command = _COMMAND.get()
    if command is None:
        return make()
    if key not in command.made:
        command.made[key] = make()
    return command.made[key]


def _stamp(path: Path) -> Stamp:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def _run_files(results_dir: str | Path) -> list[Path]:
    return ResultsStore(results_dir).run_files()


def read_run(path: Path) -> dict[str, Any]:
    """The run JSON at ``path`` (:func:`read_run_json`), parsed once within :func:`once`."""
    command = _COMMAND.get()
    if command is None:
        return read_run_json(path)
    memo = command.parsed
    stamp = _stamp(path)
    hit = memo.get(path)
    if hit is None or hit[0] != stamp:
        hit = memo[path] = (stamp, read_run_json(path))
    return hit[1]


def read_runs(results_dir: str | Path, run_ids: Collection[str] | None = None) -> list[dict[str, Any]]:
    """Every run JSON of ``results_dir`` sorted by file name (as :meth:`ResultsStore.load_runs`), or only those whose
    ``run_id`` is in ``run_ids`` (found by their heads, :func:`read_heads`: the others are not parsed); a damaged
    one raises ValueError naming its file."""
    files = _run_files(results_dir)
    if run_ids is not None:
        wanted = {name for name, h in _heads(Path(results_dir), files).items() if h.get("run_id") in run_ids}
        files = [p for p in files if p.name in wanted]
    return [read_run(p) for p in files]


def head(run: dict[str, Any]) -> dict[str, Any]:
    """A run JSON without its curves and probes."""
    return {k: v for k, v in run.items() if k not in BODY}


def read_heads(results_dir: str | Path) -> list[dict[str, Any]]:
    """Every run JSON of ``results_dir`` without its curves and probes (:func:`head`), sorted by file name, through
    the folder's cache (see the module's docstring); a damaged run JSON raises ValueError naming its file."""
    root = Path(results_dir)
    files = _run_files(root)
    heads = _heads(root, files)
    return [heads[p.name] for p in files]


def _heads(root: Path, files: Sequence[Path]) -> dict[str, dict[str, Any]]:
    """File name -> head of each of ``files`` (run JSONs of ``root``), through the cache, which is brought up to
    date."""
    cached = _cached_heads(root / HEADS_CACHE)
    entries: dict[str, list[Any]] = {}
    for path in files:
        stamp = list(_stamp(path))
        hit = cached.get(path.name)
        entries[path.name] = hit if hit is not None and hit[:2] == stamp else [*stamp, head(read_run(path))]
    if entries != cached and not (root / HEADS_CACHE.parent).is_symlink():  # never written through a link
        with contextlib.suppress(OSError):  # a folder one may only read is read without a cache
            atomic_write_text(root / HEADS_CACHE, json.dumps({"format": HEADS_FORMAT, "files": entries}))
    return {name: entry[2] for name, entry in entries.items()}


def _cached_heads(path: Path) -> dict[str, list[Any]]:
    """The cache's entries (file name -> [size, mtime_ns, head]), {} where there is none or it cannot be trusted to
    be one (then it is rebuilt)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) and data.get("format") == HEADS_FORMAT else None
    if not isinstance(files, dict):
        return {}
    # each head checked as its run JSON was (bench.runs.validate): a cache that came with a folder is data too
    good = all(isinstance(e, list) and len(e) == 3 and all(isinstance(x, int) for x in e[:2])
               and isinstance(e[2], dict) and run_problem(e[2], Path(name).stem) is None
               for name, e in files.items())
    return files if good else {}
