"""The variant registry: names -> model constructors, with presets and strict keyword checking.

The harness (``bench``) only ever goes through :func:`create`, :func:`list_variants` and
:func:`describe`; it never imports a family module.
"""

from __future__ import annotations

import difflib
import fnmatch
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import nn

Builder = Callable[..., nn.Module]

TIMM_PREFIX = "timm:"


@dataclass(frozen=True)
class VariantSpec:
    """One registered name: a builder plus the keyword arguments a preset pins."""

    name: str
    family: str
    builder: Builder
    paper: str
    axes: Mapping[str, str] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    base: str | None = None  # the registration a preset extends (None: this is one)

    def defaults(self) -> dict[str, Any]:
        """Every keyword the builder takes, with the value this name uses unless overridden."""
        params = inspect.signature(self.builder).parameters
        out = {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}
        out.update(self.fixed)
        return out


_REGISTRY: dict[str, VariantSpec] = {}


def register(
    name: str, *, family: str, paper: str, axes: Mapping[str, str] | None = None, **fixed: Any
) -> Callable[[Builder], Builder]:
    """Decorator: register ``builder`` under ``name``; ``fixed`` pins keyword arguments (a preset)."""

    def deco(builder: Builder) -> Builder:
        _add(VariantSpec(name, family, builder, paper, dict(axes or {}), dict(fixed)))
        return builder

    return deco


def register_preset(name: str, base: str, *, paper: str | None = None, **fixed: Any) -> None:
    """Register ``name`` as ``base`` with some keyword arguments pinned (e.g. ``resnet56`` = resnet, depth 56)."""
    spec = _REGISTRY[base]
    _check_kwargs(spec, fixed, name)
    merged = {**spec.fixed, **fixed}
    root = spec.base or base
    _add(VariantSpec(name, spec.family, spec.builder, paper or spec.paper, spec.axes, merged, root))


class DuplicateVariantError(ValueError):
    """A name registered twice; ``owner`` is the module whose builder holds the name already."""

    def __init__(self, name: str, owner: str) -> None:
        super().__init__(f"variant {name!r} is already registered (by module {owner})")
        self.name, self.owner = name, owner


def _add(spec: VariantSpec) -> None:
    if spec.name in _REGISTRY:
        raise DuplicateVariantError(spec.name, _REGISTRY[spec.name].builder.__module__)
    if spec.name.startswith(TIMM_PREFIX):
        raise ValueError(f"names starting with {TIMM_PREFIX!r} are reserved for timm models")
    _check_kwargs(spec, spec.fixed, spec.name)
    _REGISTRY[spec.name] = spec


def unregister(name: str) -> None:
    """Remove ``name`` (and every preset registered on it), e.g. to unload a plugin; unknown names raise."""
    _lookup(name)
    for other in [n for n, spec in _REGISTRY.items() if n == name or spec.base == name]:
        del _REGISTRY[other]


def _check_kwargs(spec: VariantSpec, kwargs: Mapping[str, Any], name: str) -> None:
    params = inspect.signature(spec.builder).parameters
    unknown = sorted(set(kwargs) - set(params))
    if unknown:
        allowed = ", ".join(sorted(params))
        raise ValueError(f"variant {name!r} takes no keyword argument(s) {unknown}; it accepts: {allowed}")


def _lookup(name: str) -> VariantSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(_REGISTRY), n=5, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else "; run `python -m bench list` to see all"
        raise ValueError(f"unknown variant {name!r}{hint}") from None


def list_variants(pattern: str = "*", family: str | None = None) -> list[str]:
    """Registered names matching the fnmatch ``pattern`` (and of ``family``, when given), sorted."""
    return sorted(
        n for n, spec in _REGISTRY.items()
        if fnmatch.fnmatchcase(n, pattern) and (family is None or spec.family == family)
    )


def create(name: str, **overrides: Any) -> nn.Module:
    """Build variant ``name``; ``overrides`` may change any default but never a preset's pinned value."""
    if name.startswith(TIMM_PREFIX):
        return _create_timm(name[len(TIMM_PREFIX):], overrides)
    spec = _lookup(name)
    _check_kwargs(spec, overrides, name)
    conflicts = {k: (spec.fixed[k], v) for k, v in overrides.items() if k in spec.fixed and spec.fixed[k] != v}
    if conflicts:
        detail = ", ".join(f"{k}={new!r} (preset fixes {k}={old!r})" for k, (old, new) in conflicts.items())
        root = _REGISTRY[spec.base] if spec.base else spec
        if set(conflicts) & set(root.fixed):  # e.g. Fixup's init: the variant is defined by it
            hint = f"variant {root.name!r} itself fixes {', '.join(sorted(set(conflicts) & set(root.fixed)))}"
        else:
            hint = f"use the base variant {root.name!r} instead"
        raise ValueError(f"conflicting argument(s) for preset {name!r}: {detail}; {hint}")
    return spec.builder(**{**spec.fixed, **overrides})


def describe(name: str) -> dict[str, Any]:
    """Family, axes, paper and default keyword arguments of ``name``.

    ``init`` is the initialisation scheme ``name`` builds with unless overridden (None where the builder
    takes no ``init``, e.g. timm models); ``init_pinned`` is True where the variant fixes it (a paper that
    *is* an initialisation, such as Fixup or DeepNet), so ``create(name, init=other)`` raises. ``module`` is
    the module that defines the builder (a shipped family's, or a plugin's).
    """
    if name.startswith(TIMM_PREFIX):
        return {"name": name, "family": "timm", "paper": "timm (PyTorch Image Models)", "axes": {}, "defaults": {},
                "fixed": {}, "init": None, "init_pinned": False, "module": "timm"}
    spec = _lookup(name)
    defaults = spec.defaults()
    return {
        "name": spec.name,
        "family": spec.family,
        "paper": spec.paper,
        "axes": dict(spec.axes),
        "defaults": defaults,
        "fixed": dict(spec.fixed),
        "init": defaults.get("init"),
        "init_pinned": "init" in spec.fixed,
        "module": spec.builder.__module__,
    }


def _create_timm(model_name: str, kwargs: Mapping[str, Any]) -> nn.Module:
    import timm  # imported lazily: timm is heavy and only needed for timm: names

    if model_name not in timm.list_models():
        close = difflib.get_close_matches(model_name, timm.list_models(), n=5, cutoff=0.6)
        hint = f"; did you mean {', '.join(TIMM_PREFIX + c for c in close)}?" if close else ""
        raise ValueError(f"unknown timm model {model_name!r}{hint}")
    kw = dict(kwargs)
    kw.pop("depth", None) if kw.get("depth") is None else None
    if "depth" in kw:
        raise ValueError("timm models have a fixed depth; pick another timm model name instead of depth=")
    return timm.create_model(model_name, pretrained=False, **kw)
