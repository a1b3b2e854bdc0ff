"""Where each variant's formula is written: the classes its residual stream is made of, read from the code.

Every unit, layer and combinator class states its formula in the first line of its docstring, and its
``forward`` computes it. :func:`formula` gathers, for one registered variant, those classes (found by
:func:`variants.registry.derive_anatomy` in the model its defaults build, never typed by hand), the first
paragraph of each docstring and the file and line of each ``forward``. :func:`catalogue` renders every
registered variant that way as one Markdown page (``docs/variants.md``).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from torch import nn

from . import registry
from .links import reads

# The checkout (or install prefix) that holds the ``variants`` package: source files are given relative to it.
ROOT = Path(__file__).resolve().parent.parent


def source_path(file: str, module: str = "") -> str:
    """``file`` relative to :data:`ROOT` in POSIX form (``variants/blocks.py``); a file of another installed package
    (``module``'s: torch's norms) relative to the folder that holds that package (``torch/nn/modules/
    normalization.py``); any other file (a plugin's) by its name alone, so nothing returned holds an absolute path."""
    path = Path(file).resolve()
    for base in (_package_parent(module), ROOT):  # the other package's first: it may sit under ROOT (a .tox venv)
        if base is not None and path.is_relative_to(base):
            return path.relative_to(base).as_posix()
    return path.name


# The project's own top-level packages: never "another installed package", wherever they are installed (a
# non-editable install puts them in site-packages beside torch).
OURS = ("variants", "bench")


def _package_parent(module: str) -> Path | None:
    """The folder holding the top-level package of ``module``, for a package other than this project's."""
    top = module.split(".")[0]
    package = sys.modules.get(top) if module and top not in OURS else None
    file = getattr(package, "__file__", None)
    if not file or Path(file).name != "__init__.py":  # a plugin's single-file module: named by its file alone
        return None
    return Path(file).resolve().parent.parent


def first_paragraph(cls: type) -> str:
    """The first paragraph of ``cls``'s own docstring (not a base class's), on one line; "" without one."""
    doc = inspect.cleandoc(cls.__dict__.get("__doc__") or "")
    return " ".join(doc.split("\n\n")[0].split())


def _where(obj: Any, module: str) -> tuple[str, int]:
    file = inspect.getsourcefile(obj) or inspect.getfile(obj)
    return source_path(file, module), inspect.getsourcelines(obj)[1]


def entry(cls: type) -> dict[str, Any]:
    """``class`` (qualified name), ``formula`` (:func:`first_paragraph`), ``package`` (the installed package it comes
    from where that is not this checkout's, None otherwise: torch's norms), and ``file``/``line`` of the class that
    states it: its ``forward`` where it defines one; where it inherits its ``forward`` (HighwayUnit's is
    ResidualUnit's: the join it passes in computes the formula), the class itself, with ``forward`` naming the
    inherited one and its file and line."""
    owner = next(c for c in cls.__mro__ if "forward" in c.__dict__)
    forward = inspect.unwrap(owner.__dict__["forward"])
    out = {"class": registry.qualified_name(cls), "formula": first_paragraph(cls),
           "package": cls.__module__.split(".")[0] if _package_parent(cls.__module__) else None}
    if owner is cls:
        file, line = _where(forward, cls.__module__)
        return {**out, "file": file, "line": line, "forward": None}
    file, line = _where(cls, cls.__module__)
    inherited_file, inherited_line = _where(forward, owner.__module__)
    return {**out, "file": file, "line": line,
            "forward": f"{registry.qualified_name(owner)} ({inherited_file}:{inherited_line})"}


def readers(model: nn.Module) -> list[dict[str, Any]]:
    """Where ``model`` reads earlier values of its forward (:mod:`variants.links`): one dict per class of its modules
    that declares ``reads``, in module order: ``class``, ``method`` (its ``forward``, or a stream's ``end``), and the
    ``file``/``line`` of that method (where a class inherits it, the class that defines it: ``owner``)."""
    out: dict[type, dict[str, Any]] = {}
    for module in model.modules():
        cls = type(module)
        if cls in out or not reads(module):
            continue
        found = next(((m, c) for m in ("forward", "end") for c in cls.__mro__
                      if m in c.__dict__ and not c.__module__.startswith("torch.")), None)
        if found is None:
            continue
        method, owner = found
        file, line = _where(inspect.unwrap(owner.__dict__[method]), owner.__module__)
        out[cls] = {"class": registry.qualified_name(cls), "method": method, "file": file, "line": line,
                    "owner": None if owner is cls else registry.qualified_name(owner)}
    return list(out.values())


# What each role of formula() is, outermost first; the placement is the unit's, the body what the unit wraps.
ROLES = ("layer", "unit", "combinator", "body", "norm")


def formula(name: str) -> dict[str, Any]:
    """The formula of variant ``name``, read from the classes of the model its defaults build.

    Returns ``{"name", "layer", "unit", "combinator", "body", "norm"}``; each of the last five is a list of
    :func:`entry` dicts (``class``, ``formula``, ``file``, ``line``, ``forward``), outermost first, in order of first
    appearance: one class each for most variants, two where a model mixes them (Mix-LN's Post-LN and Pre-LN units),
    an empty ``layer`` list where units are not composed into layers (CNNs), an empty ``body`` list where the
    branch is a sequence of ops rather than a class of its own (a CNN's convolutions), and all empty for a timm
    model. For ``preln`` the first three read ``x = ffn(attn(x))`` (``Block``), ``y = combine(x, F(norm(x)))``
    (``PreNorm``) and ``y = x + F(x)`` (``Add``): the whole residual stream; ``body`` names the attention and
    feed-forward classes and ``norm`` the norm type's class (``torch.nn.LayerNorm``; ``variants.norms.DyT`` for
    ``dyt``).
    """
    parts = registry.anatomy(name)
    return {"name": name, "layer": [entry(c) for c in parts.layers], "unit": [entry(c) for c in parts.units],
            "combinator": [entry(c) for c in parts.combinators], "body": [entry(c) for c in parts.bodies],
            "norm": [entry(c) for c in parts.norms]}


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|")


def _short(entries: list[dict[str, Any]]) -> str:
    return ", ".join(f"`{e['class'].rsplit('.', 1)[-1]}`" for e in entries) or "–"


def catalogue(names: Iterable[str] | None = None) -> str:
    """A Markdown page of the variants ``names`` (default: every registered one), grouped by family.

    Per family, a table of its variants (paper, parameter count under the defaults, derived axes, layer, unit and
    combinator classes), then the formula of each class the family uses with the file and line of its
    ``forward`` (linked relative to ``docs/``). Deterministic: sorted, no memory addresses, no absolute paths, so
    a committed copy can be checked against a fresh one.
    """
    chosen = sorted(registry.list_variants() if names is None else names)
    by_family: dict[str, list[str]] = {}
    for name in chosen:
        by_family.setdefault(registry.describe(name)["family"], []).append(name)
    out = [
        "# Variant catalogue",
        "",
        "Generated by `variants.catalogue()` (`python -m bench list --catalogue`); do not edit by hand. Every",
        "registered variant, grouped by family: its paper, its parameter count under its defaults, its axes (derived",
        "from the model it builds), and where each axis's formula is written: the layer class that composes residual",
        "units (where there is one), the unit class whose `forward` is the residual formula (its norm placement), the",
        "combinator class that joins shortcut and branch, the branch's own class (attention, feed-forward) and the",
        "norm type's class, each with the first paragraph of its docstring and the file and line of its `forward`",
        "(of the class itself, where it inherits its `forward`, which is then named). `python -m bench show-variant",
        "NAME` prints the same for one variant.",
    ]
    for family in sorted(by_family):
        out += ["", f"## {family}", "", "| variant | parameters | axes | layer | unit | combinator | paper |",
                "|---|---:|---|---|---|---|---|"]
        classes: dict[str, tuple[str, dict[str, Any]]] = {}
        for name in by_family[family]:
            d, f = registry.describe(name), formula(name)
            axes = "; ".join(f"{k}: {v}" for k, v in sorted(d["axes"].items())) or "–"
            params = "–" if d["params"] is None else f"{d['params']:,}"
            out.append(f"| `{name}` | {params} | {_cell(axes)} | {_short(f['layer'])} | {_short(f['unit'])} | "
                       f"{_short(f['combinator'])} | {_cell(d['paper'])} |")
            for role in ROLES:
                for e in f[role]:
                    classes.setdefault(e["class"], (role, e))
        if classes:
            out += ["", "Formulas:", ""]
        for cls, (role, e) in classes.items():
            if e["package"] is None:  # a path in the repository (or a plugin's file), not a link off the site
                where = f"`{e['file']}:{e['line']}`"
                where += f"; forward inherited from `{e['forward']}`" if e["forward"] else ""
            else:  # another package's class (torch's norms): its lines change with its releases
                where = f"from {e['package']}"
            out.append(f"- {role} `{cls}` ({where}): {e['formula'] or '(no docstring)'}")
    return "\n".join(out) + "\n"
