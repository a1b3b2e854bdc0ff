"""Carrying out one parsed command: load the plugins it needs, call its function, turn bad input into one
``error:`` line (exit status 2), and unload what it loaded (:func:`bench.cli.main` imports this module by name)."""

from __future__ import annotations

import argparse
import errno
import importlib
import importlib.metadata
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType

from bench.analysis.studyfile import PLUGIN_ORIGIN, one_note_per_study, study_plugins
from bench.runs.config import PLUGIN_ENTRY_POINTS, PLUGINS_ENV_VAR
from bench.runs.stops import EXIT_PREEMPTED, Preempted, RunsPreempted, RunsRefused

EXIT_USAGE = 2
PLUGINS_MODULE = "bench.runs.plugins"  # it loads torch and the registry: imported only when there is one to load
_BENCH = Path(__file__).resolve().parent.parent
_OWN = (_BENCH.parent / "variants", _BENCH)  # variants/ (beside bench/: not imported by a command that only reads)


def dispatch(ns: argparse.Namespace) -> int:
    """Run the command ``ns`` names: its plugins loaded, bad input an ``error:`` line and exit 2, and a note about a
    stored study's plugins printed once."""
    with one_note_per_study():
        return _dispatch(ns)


def _dispatch(ns: argparse.Namespace) -> int:
    module, _, name = str(ns.handler).partition(":")
    handler = getattr(importlib.import_module(f"bench.cli.{module}"), name)
    before = _loaded_plugins()
    try:
        specs = list(getattr(ns, "plugins", None) or [])
        if specs or os.environ.get(PLUGINS_ENV_VAR) or importlib.metadata.entry_points(group=PLUGIN_ENTRY_POINTS):
            _plugins().load_all(specs)
        if study_specs := study_plugins_of(ns):
            _plugins().load_plugins(study_specs, PLUGIN_ORIGIN)
        return int(handler(ns))
    except RunsRefused as exc:  # some runs were recorded, others refused as bad input: not "nothing written"
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (Preempted, RunsPreempted) as exc:  # not done: the state is saved, the same command continues
        again = f"; rerun the same command to continue from step {exc.step}" if isinstance(exc, Preempted) else ""
        print(f"preempted: {exc}{again}", file=sys.stderr)
        return EXIT_PREEMPTED
    except ValueError as exc:
        if not is_bad_input(exc):
            raise  # a ValueError from inside a library is a bug of ours: its traceback says where
        print(f"error: {exc}{_plugin_hint(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except PermissionError as exc:  # a folder it may not write (checked up front where it can be; this is the rest)
        print(f"error: cannot write {exc.filename}: {exc.strerror}; pass a folder you may write", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        # every write is atomic (a temporary file, then a rename): what was recorded before is whole
        where = exc.filename or getattr(ns, "results_dir", None) or "the results"
        print(f"error: cannot write {where}: {exc.strerror}; nothing recorded before was "
              "lost: free some space and rerun the same command to continue", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: nothing half-written was left (writes are atomic)", file=sys.stderr)
        return 130
    finally:  # what this command loaded goes with it (main called twice in one process starts afresh)
        for plugin in _loaded_plugins():
            if plugin not in before:
                _plugins().unload(plugin)


def _plugins() -> ModuleType:
    """:mod:`bench.runs.plugins`, imported on first need: a command that reads results and loads no plugin never
    imports torch or the variant modules (the figures read the registry's static index,
    :mod:`bench.analysis.registry_index`)."""
    return importlib.import_module(PLUGINS_MODULE)


def _loaded_plugins() -> list:
    """The plugins loaded in this process (none while :mod:`bench.runs.plugins` was never imported)."""
    module = sys.modules.get(PLUGINS_MODULE)
    return module.loaded() if module is not None else []


# What a command reads (bench.analysis.studyfile.study_plugins): recorded runs only, each holding its variant's axes
# and family; or, for the report, the models too where the study has an analysis step. Any other: the models.
READS = {"tables:cmd_leaderboard": "runs", "tables:cmd_compare": "runs", "figures:cmd_plot": "runs",
         "figures:cmd_site": "runs", "figures:cmd_report": "report"}


def study_plugins_of(ns: argparse.Namespace) -> list[str]:
    """The plugins named by the study file a command reads: ``sweep FILE``, ``reproduce NAME`` (a shipped study:
    none), or ``--study S`` (the copy a sweep stored in the results directory: its plugins only with
    ``--trust-plugins``, :func:`bench.analysis.studyfile.study_plugins`)."""
    trust, own = bool(getattr(ns, "trust_plugins", False)), bool(getattr(ns, "plugins", None))
    reads = READS.get(ns.handler, "models")
    if ns.handler.startswith("sweeps:"):  # what runs is a file or a shipped study, never a results folder's copy
        ref = getattr(ns, "file", None) or getattr(ns, "name", None)
        return study_plugins(ref, None, trust, own) if ref else []
    ref = getattr(ns, "study", None)
    return study_plugins(ref, getattr(ns, "results_dir", None), trust, own, reads) if ref else []


def is_bad_input(exc: BaseException) -> bool:
    """Whether a ValueError is resbench's (or a plugin's) message about bad input: raised by code of resbench's own
    packages or of a loaded plugin. One raised inside a library (numpy, pandas, torch) is a bug and keeps its
    traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return True
    raised_in = Path(frames[-1].filename).resolve()
    plugin_files = {Path(p.file).resolve() for p in _loaded_plugins()}
    return raised_in in plugin_files or any(raised_in.is_relative_to(root) for root in _OWN)


def _plugin_hint(exc: ValueError) -> str:
    """For an unknown variant: which plugins are loaded, and how to load the one that registers it."""
    if not str(exc).startswith("unknown variant"):
        return ""
    loaded = ", ".join(p.spec for p in _loaded_plugins()) or "none"
    return (f" (plugins loaded: {loaded}; a variant of your own is registered by its plugin: give --plugin FILE.py, "
            f"set {PLUGINS_ENV_VAR}, or name it in the study file's plugins = [...]; a study stored in a results "
            "folder has its plugins imported only with --trust-plugins)")
