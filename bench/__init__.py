"""resbench harness: `python -m bench`, and from Python the functions of :mod:`bench.api` (``bench.run``,
``bench.sweep``, ``bench.load``, ``bench.compare``; documented there and in the README)."""

from .api import Results, Run, compare, config, load, run, sweep

__all__ = ["Results", "Run", "compare", "config", "load", "run", "sweep"]
