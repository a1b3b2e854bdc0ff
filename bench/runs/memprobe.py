"""Child process of the CPU peak-memory phase: ``python -m bench.runs.memprobe < probe.json``
(``{"config": <RunConfig as a dict>, "plugins": [<plugin specs>]}``).

Loads the plugins, builds the run's task and model, records the resident set, runs training steps, and prints one
JSON line with the high-water mark of the resident set minus that baseline. See
:func:`bench.runs.measure.cpu_peak_memory_subprocess` for why this runs in its own process.
"""

from __future__ import annotations

import json
import sys

from bench.runs import plugins
from bench.runs.config import config_from_dict
from bench.runs.measure import max_rss_mb, reset_peak_rss, rss_mb
from bench.runs.train import StepRunner, batch_generator, setup

STEPS = 3


def main() -> None:
    request = json.loads(sys.stdin.read())
    plugins.load_plugins(request["plugins"])
    cfg = config_from_dict(request["config"])
    s = setup(cfg)
    runner = StepRunner(cfg, s, s.model, batch_generator(s, 3))
    baseline = rss_mb()
    reset = reset_peak_rss()
    hwm_before = max_rss_mb()
    for _ in range(STEPS):
        runner()
    peak = max_rss_mb()
    print(json.dumps({
        "peak_mb": max(peak - baseline, 0.0), "process_peak_mb": peak, "baseline_mb": baseline,
        # False when the mark could not be reset and setup (imports, data loading) had already set
        # a higher one than the steps reached: then peak_mb is an upper bound, not the exact figure.
        "exact": reset or peak > hwm_before,
        "hwm_reset": reset,
        "steps": STEPS, "method": "cpu_rss_peak_minus_baseline_subprocess",
    }))  # fmt: skip


if __name__ == "__main__":
    main()
