"""What the commands that read results need of the variant registry — each shipped variant's family, paper, axes and
series (the name its runs are drawn under, :func:`bench.reports.plotdata.variant_key`) — as a static file, so that
``leaderboard``, ``compare``, ``report``, ``plot`` and ``site`` never import torch or the variant modules.

The file (``registry_index.json`` beside this module) is written by ``python scripts/pin_variants.py --index`` from
the registry itself, and a test checks it is current (``tests/test_read_path.py``). Where the registry is imported
in the process (a command that builds models, or one that loaded a plugin) it is asked instead, so a plugin's
variants are known exactly as before; a name neither knows is its own series, with no axes.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

INDEX = Path(__file__).with_name("registry_index.json")
FORMAT = "resbench-registry-index/1"
REGISTRY = "variants"  # the registry's package: asked only once something else imported it


def loaded_registry() -> ModuleType | None:
    """The variant registry where this process imported it (and plugins may have added to it), else None."""
    return sys.modules.get(REGISTRY)


@functools.cache
def _index() -> Mapping[str, Mapping[str, Any]]:
    data = json.loads(INDEX.read_text(encoding="utf-8"))
    if data.get("format") != FORMAT:
        raise RuntimeError(f"{INDEX} is not a {FORMAT} file: rewrite it with python scripts/pin_variants.py --index")
    return data["variants"]


def entry(name: str) -> Mapping[str, Any] | None:
    """The index's entry of a shipped variant (``family``, ``paper``, ``axes``, ``series``, ``fixes``), None for
    another name."""
    return _index().get(name)


def fixes(name: str) -> frozenset[str] | None:
    """The configuration fields the variant ``name`` holds at values of its own (its registration's ``fixed``: a
    paper's init, an alias's depth), asked of the imported registry where it knows the name, else of the index; None
    for a name neither knows (a plugin's variant read without the plugin)."""
    registry = loaded_registry()
    if registry is not None and name in registry.list_variants():
        return frozenset(registry.describe(name)["fixed"])
    known = entry(name)
    return frozenset(known["fixes"]) if known is not None else None


def render(entries: Mapping[str, Mapping[str, Any]]) -> str:
    """The index file's text for ``entries`` (name -> entry): sorted, one stable spelling, so a check compares text."""
    return json.dumps({"format": FORMAT, "variants": entries}, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
