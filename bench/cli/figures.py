"""Commands that draw and write from a results directory: ``plot``, ``report``, ``site`` (none imports torch or the
variant modules: :mod:`bench.runs.registry_index`)."""

from __future__ import annotations

import argparse

from bench.reports.plots import make_all, make_every
from bench.reports.report import write_report
from bench.reports.site import build_site  # plotly, the site extra, is imported by build_site alone
from bench.runs import reading
from bench.runs.cores import free_cores


def cmd_plot(ns: argparse.Namespace) -> int:
    with reading.once():  # each run JSON parsed once, whatever reads it
        if ns.study:
            paths = make_all(ns.results_dir, ns.study, _workers(ns), ns.cached)
        else:  # each study's figures as its report draws them; no pooled cross-study figure
            paths = make_every(ns.results_dir, _workers(ns), ns.cached)
    if not paths:
        print(f"nothing to plot in {ns.results_dir} (no runs yet)")
    for p in paths:
        print(p)
    return 0


def cmd_report(ns: argparse.Namespace) -> int:
    with reading.once():
        print(write_report(ns.results_dir, ns.study, _workers(ns), ns.cached))
    return 0


def cmd_site(ns: argparse.Namespace) -> int:
    with reading.once():
        site = build_site(ns.results_dir, ns.out)
    print(f"{site.root / 'index.html'}: {site.pages} pages, {site.bytes / 1e6:.1f} MB")
    return 0


def _workers(ns: argparse.Namespace) -> int:
    """``--jobs``, else the cores free now."""
    return int(ns.jobs) if ns.jobs else free_cores()
