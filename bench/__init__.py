"""resbench harness: `python -m bench`, and from Python the functions of :mod:`bench.api` (``bench.run``,
``bench.sweep``, ``bench.load``, ``bench.compare``, ``bench.track``; documented there and in the README).

No submodule is named like one of them (``bench.runner``, ``bench.study``, ``bench.comparison``): importing a
submodule sets the package attribute of its name, which would shadow the function.
"""

from .api import Results, Run, compare, load, run, sweep, track

__all__ = ["Results", "Run", "compare", "load", "run", "sweep", "track"]
