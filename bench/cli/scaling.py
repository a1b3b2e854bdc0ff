"""``bench scaling-fit``: each design's loss against compute and its compute multiplier, from a results folder."""

from __future__ import annotations

import argparse

from bench import api
from bench.reports.scaling import render_scaling


def cmd_scaling_fit(ns: argparse.Namespace) -> int:
    where = {}
    for cond in ns.where or []:
        key, sep, value = cond.partition("=")
        if not sep:
            raise ValueError(f"--where wants COLUMN=VALUE with a leaderboard column, got {cond!r}")
        where[key] = value
    api.check_metric(ns.metric)  # before anything is read: a metric that is not a loss
    results = api.load(ns.results_dir, ns.study)
    fit = api.scaling_fit(results, ns.baseline, ns.metric, fix_floor=not ns.free_floor, draws=ns.draws, where=where)
    print(render_scaling(fit, ns.format), end="")
    return 0
