"""The command line: ``python -m bench COMMAND`` (list, show-variant, run, leaderboard, compare, show, upgrade, probe,
diff, plot, report, site, merge, sweep, reproduce, track, data, perf, lesion, gradcorr, landscape, cost, recipes).

Bad input (unknown variant, task or option, invalid depth, missing or corrupt dataset, a plugin that fails to load
or whose model fails a forward on the task) prints one line starting with ``error:`` and exits with status 2,
having written nothing. A sweep some of whose runs were refused after others were recorded says so and exits with
status 1; any other exception is a bug and shows its traceback.

Every command takes ``--plugin FILE.py|MODULE`` (repeatable) and also loads ``$RESBENCH_PLUGINS``, the installed
``resbench.variants`` entry points and the plugins its study file names (:mod:`bench.runs.plugins`); what a command
loaded is unloaded when it returns.

The parser (:mod:`bench.cli.parser`) is light; the module that carries out a command (``bench.cli.<module>``) is
imported when that command runs, so ``--help`` and usage errors answer without loading torch.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

from bench.cli.parser import build_parser, config_from_args

__all__ = ["build_parser", "config_from_args", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    try:
        # Loaded by name now that a command is to run: it imports torch and the registry (start-up, not a cycle).
        return int(importlib.import_module("bench.cli.dispatch").dispatch(ns))
    except BrokenPipeError:  # `bench list | head`: the reader is gone; say nothing more, as a Unix tool does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a command killed by it
