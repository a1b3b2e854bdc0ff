"""Commands that run a study: ``sweep FILE`` and ``reproduce NAME`` (a shipped study, then its figures and report)."""

from __future__ import annotations

import argparse
import shlex

from bench import api
from bench.analysis.studyfile import shipped_study
from bench.cli.parser import options_from_args


def _resume_command(ns: argparse.Namespace, study: str) -> str:
    """The command line that resumes this sweep (and reruns its failed runs): this one, without --no-resume."""
    options = options_from_args(ns)
    args = ["python", "-m", "bench", ns.command, study, *options.to_argv()]
    args = [a for a in args if a != "--no-resume"]
    for spec in ns.plugins or []:
        args += ["--plugin", spec]
    args += ["--trust-plugins"] if ns.trust_plugins else []
    return shlex.join([*args, "--results-dir", str(ns.results_dir)])


def cmd_sweep(ns: argparse.Namespace) -> int:
    api.sweep(ns.file, results_dir=ns.results_dir, options=options_from_args(ns),
              command=_resume_command(ns, ns.file), verb="study", trust_plugins=ns.trust_plugins)
    return 0


def cmd_reproduce(ns: argparse.Namespace) -> int:
    # then its figures and REPORT.md
    api.sweep(shipped_study(ns.name), results_dir=ns.results_dir, options=options_from_args(ns), report=True,
              command=_resume_command(ns, ns.name), verb="reproducing", trust_plugins=ns.trust_plugins)
    return 0
