"""The commands that reproduce a results folder's runs, as its report prints them.

A study's runs: ``reproduce NAME`` (a shipped study) or ``sweep FILE`` (the copy its sweep left), once per preset the
runs were made under, with the plugins they loaded, and with the options that changed what the sweep made: its
``--add-variant`` and ``--set`` options, which each run records (``made_with`` in its run JSON). Runs made with
different such options (folders of several machines merged, one of them swept with ``--set seed=3 --set
depth=12``) get one command each. Runs outside a study: a seed loop of ``bench run`` per configuration, from the
whole config each recorded.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from bench.analysis.studyfile import (
    PLUGIN_ORIGIN,
    NoStudy,
    find_study,
    named_plugins,
    read_study_file,
    shipped_studies,
    stored_in,
)
from bench.runs.config import RunConfig, config_from_dict
from bench.runs.reading import read_runs


def study_presets(runs: Sequence[Mapping[str, Any]]) -> dict[str, list[str | None]]:
    """The presets each study's runs were made under (recorded in the run JSONs' configs), None (the study's full
    grid) first, then by name: a study may hold the runs of several, e.g. frontier's two inits."""
    presets: dict[str, dict[str | None, None]] = {}
    for run in runs:
        cfg = run.get("config") or {}
        if cfg.get("study"):
            presets.setdefault(cfg["study"], {})[cfg.get("preset")] = None
    return {study: sorted(p, key=lambda name: (name is not None, name or "")) for study, p in presets.items()}


def plugin_flags(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """``--plugin SPEC`` for every plugin the runs recorded (as the user gave it), in order of first use; not the
    ones a study file named (its command loads them again)."""
    specs = dict.fromkeys(str(p["spec"]) for r in runs for p in r.get("plugins") or ()
                          if p.get("spec") and p.get("origin") != PLUGIN_ORIGIN)
    return [a for spec in specs for a in ("--plugin", spec)]


def run_plugin_flags(run: Mapping[str, Any], root: Path) -> list[str]:
    """``--plugin SPEC`` for one run rerun alone with ``bench run`` (no study file loads anything for it): the
    plugins the user gave, as recorded, and those its study file named, from the study copy stored in ``root``
    (``root/studies/abmix.py``: the copy whose content hash the sweep recorded, where the report's ``sweep`` line
    loads them from with ``--trust-plugins``); a module by its name. A study file that is no longer there: the
    recorded spec."""
    flags = plugin_flags([run])
    recorded = [str(p["spec"]) for p in run.get("plugins") or () if p.get("spec") and p.get("origin") == PLUGIN_ORIGIN]
    study = (run.get("config") or {}).get("study")
    if not recorded or not study:
        return flags
    try:
        path = find_study(str(study), root)
        stored = [(path.parent / s).as_posix() if s.endswith(".py") or "/" in s else s
                  for s in named_plugins(read_study_file(path))]
    except ValueError:
        stored = []
    return [*flags, *(a for spec in dict.fromkeys(stored or recorded) for a in ("--plugin", spec))]


def options(runs: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """Per distinct way the runs were made: the ``--add-variant`` and ``--set`` options their sweep was given (each
    run's ``made_with``; none for a run recorded before runs kept them); ``[[]]`` where there are none."""
    made: dict[tuple[str, ...], None] = {}
    for run in runs:
        how = run.get("made_with") or {}
        made[tuple([*(a for v in how.get("add_variants", ()) for a in ("--add-variant", str(v))),
                    *(a for item in how.get("set", ()) for a in ("--set", str(item)))])] = None
    return [list(argv) for argv in sorted(made, key=lambda argv: (len(argv), argv))] or [[]]


def study_commands(name: str, preset: str | None, root: Path, runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The commands that rerun a study's runs made under ``preset`` (module docstring), ``runs`` being the study's
    (any preset's)."""
    try:
        path: Path | None = find_study(name, root)
    except NoStudy:
        path = None
    shipped = name in shipped_studies()
    head = ["reproduce", name] if shipped else ["sweep", (path or root / "studies" / f"{name}.toml").as_posix()]
    mine = [r for r in runs if (r.get("config") or {}).get("preset") == preset] or list(runs)
    # a stored study's plugins are imported only when asked for: the command asks, where the reader sees it
    trust = ["--trust-plugins"] if path and not shipped and stored_in(path, root) and \
        read_study_file(path).get("plugins") else []
    plugins = [*plugin_flags(mine), *trust]  # the user's --plugin too where a shipped study's grid gained a variant
    return [shlex.join(["python", "-m", "bench", *head, *(["--preset", preset] if preset else []), *argv, *plugins,
                        "--results-dir", str(root)]) for argv in options(mine)]


def run_commands(board: pd.DataFrame, results_dir: Path) -> list[str]:
    """Shell lines that reproduce the runs of ``board``: the commands of each study and preset, and a seed loop per
    configuration of the runs outside a study, from the whole config each run recorded (so a non-default lr,
    length or model argument is in its command, and a run without a depth is listed like any other)."""
    runs = read_runs(results_dir, set(board["run_id"]))
    presets = study_presets(runs)
    lines = []
    for st in sorted(board["study"].dropna().unique()):
        of_study = [r for r in runs if (r.get("config") or {}).get("study") == st]
        lines += [c for p in presets.get(st, [None]) for c in study_commands(st, p, results_dir, of_study)]
    solo: dict[str, list[RunConfig]] = {}
    for run in runs:
        if not (run.get("config") or {}).get("study"):
            fields = run.get("row") or {}
            if not run.get("config") and not {"variant", "task", "seed"} <= fields.keys():
                continue  # neither its config nor the row's: nothing to rerun it from
            cfg = config_from_dict(run["config"]) if run.get("config") else RunConfig(  # a JSON without its config
                variant=str(fields.get("variant")), depth=fields.get("depth"), task=str(fields.get("task")),
                seed=fields["seed"])
            solo.setdefault(fields.get("config_hash") or cfg.config_hash(), []).append(cfg)
    for key in sorted(solo, key=lambda k: (solo[k][0].run_id, k)):
        cfgs = solo[key]
        seeds = " ".join(str(s) for s in sorted({c.seed for c in cfgs}))
        argv = cfgs[0].to_argv(skip=("study", "preset", "world_size", "seed"))
        plugins = plugin_flags([r for r in runs if r["run_id"] in {c.run_id for c in cfgs}])
        world = cfgs[0].world_size
        head = f"torchrun --nproc-per-node {world} -m bench run" if world > 1 else "python -m bench run"
        command = f"{head} {shlex.join([*argv, *plugins, '--results-dir', str(results_dir)])}"
        lines.append(f"for seed in {seeds}; do {command} --seed $seed; done")
    return lines
