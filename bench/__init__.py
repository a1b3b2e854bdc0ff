"""resbench harness: `python -m bench`, and from Python the functions of :mod:`bench.api` (``bench.run``,
``bench.sweep``, ``bench.load``, ``bench.compare``, ``bench.scaling_fit``, ``bench.track``, ``bench.cost``;
documented there and in the README).

The harness is layered, imports pointing only down (``docs/architecture.md``): ``bench.cli`` and ``bench.api`` (the
interface) -> ``bench.sweeps`` and ``bench.reports`` -> ``bench.analysis`` -> ``bench.runs`` (one run) -> the
``variants`` registry. No subpackage is named like a function of the API (``bench.runs``, not ``bench.run``):
importing a subpackage sets the package attribute of its name, which would shadow the function.

The API's names are looked up in :mod:`bench.api` on first use: ``python -m bench --help`` imports this package,
and must not load torch to answer.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Results", "Run", "compare", "cost", "load", "run", "scaling_fit", "sweep", "track"]


def __getattr__(name: str) -> Any:
    if name == "api":
        return importlib.import_module("bench.api")
    if name in __all__:
        return getattr(importlib.import_module("bench.api"), name)
    raise AttributeError(f"module 'bench' has no attribute {name!r}")
