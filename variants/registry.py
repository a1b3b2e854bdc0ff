"""The variant registry: names -> model constructors, with presets and strict keyword checking.

The harness (``bench``) only ever goes through :func:`create`, :func:`list_variants` and
:func:`describe`; it never imports a family module.

A builder either takes its keyword arguments directly (``def mlp(*, depth=10, width=71, ...)``) or, when
registered with ``spec=SomeSpec(...)`` (a frozen dataclass such as :class:`variants.layers.CifarSpec`), takes
one spec as its positional argument plus keyword arguments of its own: the spec's fields are then keyword
arguments of the variant too, and the registered instance holds their defaults.

A variant's ``axes`` (combinator, placement, body) are read from the model its defaults build (on the meta
device, once): the ``placement`` of its residual units (``variants.blocks``), the ``axis`` of its
combinators and what its branches compute. Nothing is typed by hand, so no label can disagree with the code.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import nn

from . import axes, draws, init_marks
from .combinators import Combinator

Builder = Callable[..., nn.Module]

TIMM_PREFIX = "timm:"


def is_timm(name: str) -> bool:
    """Whether ``name`` names a timm model (``timm:<model>``): no registration of ours, no axes, a fixed depth."""
    return name.startswith(TIMM_PREFIX)


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
    spec: Any = None  # a dataclass instance: the builder's positional argument (its fields are keywords)

    def builder_parameters(self) -> dict[str, Any]:
        """Every keyword argument the builder (and its spec) takes -> its default (``inspect.Parameter.empty`` if
        none)."""
        params = {k: p.default for k, p in inspect.signature(self.builder).parameters.items()}
        if self.spec is None:
            return params
        del params[next(iter(params))]  # the spec itself
        return {**{f.name: getattr(self.spec, f.name) for f in dataclasses.fields(self.spec)}, **params}

    def takes_init(self) -> bool:
        """Whether the builder draws the model under an ``init`` keyword of its own (every shipped one does)."""
        return "init" in self.builder_parameters()

    def parameters(self) -> dict[str, Any]:
        """Every keyword argument of the variant -> its default (``inspect.Parameter.empty`` if none): the builder's,
        and ``init`` where the builder takes none but its family has a scheme (:func:`family_init`): the registry
        then draws the model under it (:func:`create`), so no signature leaves a model out of the run's init."""
        params = self.builder_parameters()
        if "init" not in params and (scheme := family_init(self.family)) is not None:
            params["init"] = scheme
        return params

    def defaults(self) -> dict[str, Any]:
        """Every keyword the builder takes, with the value this name uses unless overridden."""
        out = {k: v for k, v in self.parameters().items() if v is not inspect.Parameter.empty}
        out.update(self.fixed)
        return out

    def build(self, kwargs: Mapping[str, Any]) -> nn.Module:
        if not self.takes_init():  # the registry's own keyword (parameters): create applies it
            kwargs = {k: v for k, v in kwargs.items() if k != "init"}
        if self.spec is None:
            return self.builder(**kwargs)
        names = {f.name for f in dataclasses.fields(self.spec)}
        spec = dataclasses.replace(self.spec, **{k: v for k, v in kwargs.items() if k in names})
        return self.builder(spec, **{k: v for k, v in kwargs.items() if k not in names})


_REGISTRY: dict[str, VariantSpec] = {}


def family_init(family: str) -> str | None:
    """The scheme a family's models start from: the ``init`` default its registrations share (``kaiming`` for the
    CNN and MLP families, ``xavier`` for the Transformers; presets and variants that pin their init aside), None
    for a family none of whose builders takes an ``init`` (or whose builders disagree)."""
    found = {params["init"] for s in _REGISTRY.values()
             if s.family == family and s.base is None and "init" not in s.fixed
             and isinstance((params := s.builder_parameters()).get("init"), str)}
    return found.pop() if len(found) == 1 else None


def register(
    name: str, *, family: str, paper: str, axes: Mapping[str, str] | None = None, spec: Any = None, **fixed: Any
) -> Callable[[Builder], Builder]:
    """Decorator: register ``builder`` under ``name``; ``fixed`` pins keyword arguments (a preset).

    ``spec``: a dataclass instance (e.g. ``CifarSpec(depth=110)``) the builder takes as its positional
    argument; its fields become keyword arguments of the variant, defaulting to this instance's values.
    ``axes``: what the variant's axes are meant to be. Each is checked against the axes derived from the model
    the defaults build (:func:`derive_axes`) when the variant is first described: a declared axis the derivation
    also reports must agree with it, else ``ValueError`` naming the axis and both values; an axis the
    derivation cannot see (a model without a :class:`~variants.combinators.Combinator`) is reported as declared.
    """
    if spec is not None and not (dataclasses.is_dataclass(spec) and not isinstance(spec, type)):
        raise TypeError(f"spec must be a dataclass instance (e.g. CifarSpec(depth=56)), got {spec!r}")

    def deco(builder: Builder) -> Builder:
        _add(VariantSpec(name, family, builder, paper, dict(axes or {}), dict(fixed), spec=spec))
        return builder

    return deco


def register_preset(name: str, base: str, *, paper: str | None = None, **fixed: Any) -> None:
    """Register ``name`` as ``base`` with some keyword arguments pinned (e.g. ``resnet56`` = resnet, depth 56)."""
    spec = _REGISTRY[base]
    _check_kwargs(spec, fixed, name)
    merged = {**spec.fixed, **fixed}
    root = spec.base or base
    _add(VariantSpec(name, spec.family, spec.builder, paper or spec.paper, spec.axes, merged, root, spec.spec))


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
        _BUILT.pop(other, None)


def _check_kwargs(spec: VariantSpec, kwargs: Mapping[str, Any], name: str) -> None:
    params = spec.parameters()
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


DERIVED_AXES = ("combinator", "body", "norm", "placement")  # what :func:`derive_axes` reads from any model


def axis_names() -> set[str]:
    """Every axis a registered variant can have: those :func:`derive_axes` derives and those any variant declares
    (``stream``, ``attention`` ...). Nothing is built."""
    return {*DERIVED_AXES, *(a for spec in _REGISTRY.values() for a in spec.axes)}


def create(name: str, *, seed: int | None = None, **overrides: Any) -> nn.Module:
    """Build variant ``name``; ``overrides`` may change any default but never a preset's pinned value.

    With ``seed``, every parameter and buffer is drawn from the stream of (``seed``, its qualified name)
    (:mod:`variants.draws`: common random numbers, the global random state left as it was); without, from torch's
    global stream, as constructors always draw."""
    if seed is not None:
        return draws.build(lambda: create(name, **overrides), seed, f"variant {name!r}")
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
    kwargs = {**spec.fixed, **overrides}
    init = {**spec.defaults(), **kwargs}.get("init")
    if not spec.takes_init() and init is not None and init != "kaiming":
        raise ValueError(
            f"variant {name!r} is drawn under init={init!r}, but its builder takes no `init` keyword: the registry "
            "can draw a model it did not build only under 'kaiming' (He's draw for every convolution and hidden "
            "linear layer); add `init` to the builder (or register it with spec=) so its layers get the run's scheme")
    model = spec.build(kwargs)
    if init == "kaiming":  # every convolution, a plugin's too, whatever the builder's signature (init_marks)
        return init_marks.kaiming_(model)
    return init_marks.apply_marks_(model)


class Anatomy(NamedTuple):
    """The classes a built model's residual stream is made of, each in order of first appearance: one per axis a
    forward computes (the placement is the unit's; the initialisation has no forward)."""

    units: tuple[type[nn.Module], ...]  # whose ``forward`` is a residual unit: the module that holds a combinator
    layers: tuple[type[nn.Module], ...]  # what composes several units into one layer (a Transformer ``Block``)
    combinators: tuple[type[nn.Module], ...]  # how shortcut and branch join
    norms: tuple[type[nn.Module], ...] = ()  # the norm type's modules (DyT, LayerNorm, BatchNorm2d ...)
    bodies: tuple[type[nn.Module], ...] = ()  # the branches the units wrap, where one is a class of its own


class Built(NamedTuple):
    """What one meta-device build of a variant's defaults says about it."""

    axes: dict[str, str]
    params: int
    anatomy: Anatomy


# name -> what the model its defaults build is, from one meta-device build per process.
_BUILT: dict[str, Built] = {}


def _join(values: list[str]) -> str:
    """Distinct values in order of first appearance: ``"post, pre"`` for Mix-LN's layers."""
    return ", ".join(dict.fromkeys(values))


# What derive_axes reports: no plugin may register a norm under one of these names.
axes.ship("norm", [name for _, name in axes.NORM_TYPES] + ["none"])


def _combinator_axis(combinator: nn.Module) -> str:
    named = getattr(type(combinator), "axis", None)
    if isinstance(named, str):
        return named
    registered = [n for n, cls in axes.registered("combinator").items() if cls is type(combinator)]
    return registered[0] if registered else type(combinator).__name__


def derive_axes(model: nn.Module) -> dict[str, str]:
    """The axes a built model has: its combinators' ``axis``, its residual units' ``placement``, the type of its
    norms (``layernorm``, ``rmsnorm``, ``batchnorm``...; ``none``), each in order of appearance and joined by
    ", " where they differ, and what its branches compute (``conv``, ``mlp``, ``attention+ffn``,
    ``attention+swiglu``). Empty for a model without any :class:`~variants.combinators.Combinator`."""
    combinators = [m for m in model.modules() if isinstance(m, Combinator)]
    if not combinators:
        return {}
    placements = [p for m in model.modules() if isinstance(p := getattr(m, "placement", None), str)]
    kinds = {type(m).__name__ for m in model.modules()}
    ffns = [n for m in model.modules() if isinstance(n := m.__dict__.get("ffn_axis"), str)]  # a registered body
    if any("Attention" in k for k in kinds):
        body = "attention+swiglu" if any("SwiGLU" in k for k in kinds) else "attention+ffn"
        body = f"attention+{_join(ffns)}" if ffns else body
    elif any(isinstance(m, nn.modules.conv._ConvNd) for m in model.modules()):
        body = "conv"
    else:
        body = "mlp"
    norms = [n for m in model.modules() if (n := axes.norm_type(m)) is not None]
    out = {"combinator": _join([_combinator_axis(c) for c in combinators]), "body": body,
           "norm": _join(norms) or "none"}
    if placements:
        out["placement"] = _join(placements)
    return out


_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


def derive_anatomy(model: nn.Module) -> Anatomy:
    """The unit, layer and combinator classes of a built model (:class:`Anatomy`).

    A *unit* is the module that holds a :class:`~variants.combinators.Combinator` (through containers such as
    ``nn.Sequential`` if need be): its ``forward`` is the residual formula. A *layer* is a unit's direct parent
    where that is neither a container nor the model itself, i.e. a class that composes units (a Transformer
    ``Block``: attention unit, then feed-forward unit); a CNN's units sit in plain ``nn.Sequential`` stages, so
    it has none."""
    parents: dict[int, nn.Module] = {}
    for parent in model.modules():
        for child in parent.children():
            parents.setdefault(id(child), parent)
    units: dict[type[nn.Module], None] = {}
    layers: dict[type[nn.Module], None] = {}
    combinators: dict[type[nn.Module], None] = {}
    bodies: dict[type[nn.Module], None] = {}
    for module in model.modules():
        if not isinstance(module, Combinator):
            continue
        combinators[type(module)] = None
        unit = parents.get(id(module))
        while unit is not None and isinstance(unit, _CONTAINERS):
            unit = parents.get(id(unit))
        if unit is None:
            continue
        units[type(unit)] = None
        body = getattr(unit, "body", None)
        if isinstance(body, nn.Module) and not isinstance(body, _CONTAINERS):  # a CNN's branch: its ops in order
            bodies[type(body)] = None
        layer = parents.get(id(unit))
        if layer is not None and layer is not model and not isinstance(layer, _CONTAINERS):
            layers[type(layer)] = None
    norms = dict.fromkeys(type(m) for m in model.modules() if axes.norm_type(m) is not None)
    return Anatomy(tuple(units), tuple(layers), tuple(combinators), tuple(norms), tuple(bodies))


def qualified_name(cls: type) -> str:
    """``module.QualName`` of a class: ``variants.blocks.PreNorm``."""
    return f"{cls.__module__}.{cls.__qualname__}"


def _built(spec: VariantSpec) -> Built:
    if spec.name not in _BUILT:
        with torch.device("meta"):  # shapes only: no memory, no random draws
            model = spec.build(dict(spec.fixed))
        derived = derive_axes(model)
        for axis, declared in spec.axes.items():
            if axis in derived and derived[axis] != declared:
                raise ValueError(f"variant {spec.name!r} declares {axis}={declared!r}, but the model its defaults "
                                 f"build has {axis}={derived[axis]!r} (derived from its modules); declare "
                                 f"{derived[axis]!r} or leave the axis out")
        _BUILT[spec.name] = Built({**spec.axes, **derived}, sum(p.numel() for p in model.parameters()),
                                  derive_anatomy(model))
    return _BUILT[spec.name]


def anatomy(name: str) -> Anatomy:
    """The :class:`Anatomy` of the model ``name``'s defaults build (empty for a timm model)."""
    if name.startswith(TIMM_PREFIX):
        return Anatomy((), (), ())
    return _built(_lookup(name)).anatomy


def _names(classes: tuple[type, ...]) -> str | None:
    return ", ".join(qualified_name(c) for c in classes) or None


def describe(name: str) -> dict[str, Any]:
    """Family, axes, paper and default keyword arguments of ``name``.

    ``init`` is the initialisation scheme ``name`` builds with unless overridden (None where the builder
    takes no ``init``, e.g. timm models); ``init_pinned`` is True where the variant fixes it (a paper that
    *is* an initialisation, such as Fixup or DeepNet), so ``create(name, init=other)`` raises. ``module`` is
    the module that defines the builder (a shipped family's, or a plugin's). ``axes`` are derived from the
    model the defaults build (:func:`derive_axes`), ``params`` is its parameter count; ``unit`` is the qualified
    name of the class whose ``forward`` is its residual unit and ``layer`` that of the class composing several
    units into a layer, None where there is none (:func:`derive_anatomy`; names joined by ", " where a model
    mixes classes). All come from one build on the meta device per name and process; see
    :func:`variants.formula` for the formulas themselves.
    """
    if name.startswith(TIMM_PREFIX):
        return {"name": name, "family": "timm", "paper": "timm (PyTorch Image Models)", "axes": {}, "defaults": {},
                "fixed": {}, "init": None, "init_pinned": False, "module": "timm", "params": None, "unit": None,
                "layer": None}
    spec = _lookup(name)
    defaults = spec.defaults()
    built = _built(spec)
    return {
        "name": spec.name,
        "family": spec.family,
        "paper": spec.paper,
        "axes": dict(built.axes),
        "params": built.params,
        "unit": _names(built.anatomy.units),
        "layer": _names(built.anatomy.layers),
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
