"""Where the CPU time of a dry run goes: the bill's parts timed in CPU seconds (this process and the children it
waited for), then the dry run's own output. The parts nest: ``plan`` holds ``_setup`` and ``meta_step_flops``,
``_setup`` holds ``_meta_footprint`` and ``setup.build_model``.

    python scripts/dry_run_parts.py degradation --preset quick
"""

from __future__ import annotations

import collections
import functools
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any


def cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


T0 = cpu()
import bench.runs.measure as measure  # noqa: E402  (the imports are the first part timed)
import bench.runs.train as train  # noqa: E402
import bench.sweeps.bill as bill  # noqa: E402
import bench.sweeps.config_costs as config_costs  # noqa: E402
import bench.sweeps.study as study  # noqa: E402
from bench.cli import main  # noqa: E402

IMPORTS = cpu() - T0
spent: collections.Counter[str] = collections.Counter()
calls: collections.Counter[str] = collections.Counter()


def timed(owner: Any, name: str, label: str | None = None) -> None:
    f: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = cpu()
        try:
            return f(*args, **kwargs)
        finally:
            spent[label or name] += cpu() - t
            calls[label or name] += 1

    setattr(owner, name, wrapper)


USAGE = "usage: dry_run_parts.py STUDY [bench reproduce options, e.g. --preset quick]"

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(f"{USAGE}\n\n{__doc__}", file=sys.stdout if len(sys.argv) > 1 else sys.stderr)
        sys.exit(0 if len(sys.argv) > 1 else 2)
    for owner, name, label in [(bill, "plan", None), (config_costs, "_setup", None), (train, "_meta_footprint", None),
                               (train, "build_model", "setup.build_model"), (measure, "meta_step_flops", None),
                               (measure, "device_rates", None), (bill, "process_start", None),
                               (bill, "timed_seconds", None), (study.Study, "configs", "the study's checks")]:
        timed(owner, name, label)
    with tempfile.TemporaryDirectory() as scratch:
        t = cpu()
        code = main(["reproduce", *sys.argv[1:], "--dry-run", "--results-dir", f"{scratch}/results"])
    print(f"\nCPU seconds: imports {IMPORTS:.2f}, the dry run {cpu() - t:.2f}, in all {cpu() - T0:.2f}")
    for label, seconds in spent.most_common():
        print(f"  {label:<24} {seconds:7.2f} s  ({calls[label]} calls)")
    sys.exit(code)
