"""Extension points of the named axes: a plugin adds a norm type, a feed-forward body, an initialisation or a
combinator, and every family that takes that axis by name accepts it.

Four axes take values by name (DESIGN.md: norm type, body, initialisation, combinator). Each family keeps its own
shipped values (the Transformer's ``layernorm``/``rmsnorm``/``scalenorm`` norms and ``gelu``/``swiglu`` bodies,
its ``gpt2``/``xavier``/... schemes; the MLP's ``none``/``batch``/``layer`` norms; the CNN and MLP ``kaiming``/
``xavier``/``normal`` schemes); what is registered here is added to all of them:

=============  =========================================================================  =========================
axis           a value is                                                                 taken by
=============  =========================================================================  =========================
``norm``       a factory of a norm over the last dimension of width ``d``: called as      Transformer (every
               ``factory(d)``, or ``factory(d, bias=bias)`` where it has a ``bias``       placement, HC/mHC,
               parameter; a class such as ``DyT(d)`` or ``nn.LayerNorm`` will do          LAuReL), MLP
``ffn``        a factory ``(d_model, d_ff, dropout, bias) -> nn.Module`` of the           Transformer
               feed-forward sublayer (its ``nn.Linear`` layers are what the init
               schemes draw, the last one as the projection back into the stream)
``init``       a draw ``(weight) -> Any`` that fills one weight tensor in place (like     every family with an
               ``nn.init.orthogonal_``); applied to every weight the family's schemes     ``init`` argument
               draw (Transformer: each sublayer's linear layers; CNN/MLP: every conv and
               linear layer, classifier included)
``combinator`` a :class:`~variants.combinators.Combinator` subclass                       plugins building units
                                                                                          (:func:`lookup`)
=============  =========================================================================  =========================

``register_norm("dyt", DyT)`` (also a decorator: ``@register_norm("dyt")``) then makes ``--model-arg norm=dyt``
work in every placement of the Transformer family and in the MLP, and :func:`variants.registry.derive_axes`
(hence ``describe()``, and whatever records a model's axes) reports the axis as ``dyt``. A name a family already
uses, or registered before, raises. Where a family takes ``norm=``/``ffn=``/``init=``, a factory may also be
passed directly (``create("preln", norm=DyT)``); the axis then reads the name it is registered under, else the
factory's ``<axis>_axis`` attribute (``ScaleNorm.norm_axis``), else the name of the torch norm class it builds
(``norm=nn.RMSNorm``: ``rmsnorm``), else its qualified name.

Unloading a plugin: :func:`registered_axis_values` lists ``(axis, name)`` of everything registered here, or of
what one module registered (``module="my_plugin"``: the module whose code called ``register_*``), and
:func:`unregister_axis_value` removes one; or diff ``registered_axis_values()`` before and after loading it.
Unregister the plugin's variants first: one built on a value no longer registered cannot be created.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from torch import nn

AXES = ("norm", "ffn", "init", "combinator")
V = TypeVar("V", bound=Callable[..., Any])
S = TypeVar("S")  # a family's own value of an axis (the CNN's "kaiming" draw is None: nothing to redraw)


@dataclass(frozen=True)
class AxisValue:
    """One registered value: ``axis``, ``name``, the factory/draw/class, and the module that registered it."""

    axis: str
    name: str
    value: Callable[..., Any]
    module: str


_VALUES: dict[str, dict[str, AxisValue]] = {axis: {} for axis in AXES}
# Names the shipped families give each axis themselves (filled by the family modules as they are imported).
_SHIPPED: dict[str, set[str]] = {axis: set() for axis in AXES}
# The class an axis's values must subclass, where its family asks for one (combinators: Combinator).
_BASES: dict[str, type] = {}


def _check_axis(axis: str) -> None:
    if axis not in AXES:
        raise ValueError(f"unknown axis {axis!r}; the named axes are: {', '.join(AXES)}")


def ship(axis: str, names: Iterable[str], *, base: type | None = None) -> None:
    """Declare ``names`` as values a shipped family gives ``axis`` (so no plugin can register them); with ``base``,
    a registered value of the axis must be a subclass of it."""
    _check_axis(axis)
    _SHIPPED[axis].update(names)
    if base is not None:
        _BASES[axis] = base


def _caller_module() -> str:
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back  # type: ignore[assignment]
    return str(frame.f_globals.get("__name__", "?")) if frame is not None else "?"


def register_axis_value(axis: str, name: str, value: V) -> V:
    """Register ``value`` under ``name`` on ``axis`` (one of :data:`AXES`); returns ``value``.

    Raises ValueError for an unknown axis, a name that is not an identifier-like string, a value that is not
    callable (not a subclass of the base its family declared, ``Combinator`` for ``combinator``), or a name the
    axis already has (shipped by a family or registered before)."""
    _check_axis(axis)
    if not isinstance(name, str) or not name or not name.replace("-", "_").replace("+", "_").isidentifier():
        raise ValueError(f"a {axis} name must be a non-empty word (letters, digits, _ - +), got {name!r}")
    if not callable(value):
        raise ValueError(f"{axis} {name!r}: the value must be callable (a factory, a draw or a class), got {value!r}")
    base = _BASES.get(axis)
    if base is not None:
        if not (isinstance(value, type) and issubclass(value, base)):
            raise ValueError(f"{axis} {name!r} must be a subclass of variants.{base.__name__}, got {value!r}")
        declared = value.__dict__.get("axis")
        if declared is not None and declared != name:
            raise ValueError(f"{axis} {name!r}: its class says axis = {declared!r}; register it under that name")
    if name in _SHIPPED[axis] or name in _VALUES[axis]:
        owner = "a shipped family" if name in _SHIPPED[axis] else f"module {_VALUES[axis][name].module}"
        raise ValueError(f"{axis} {name!r} is already registered (by {owner}); pick another name")
    _VALUES[axis][name] = AxisValue(axis, name, value, _caller_module())
    return value


def _decorator(axis: str, name: str, value: V | None) -> Any:
    if value is not None:
        return register_axis_value(axis, name, value)
    return lambda v: register_axis_value(axis, name, v)


def register_norm(name: str, factory: V | None = None) -> Any:
    """Register a norm type: ``factory(d)`` or ``factory(d, bias=...)`` makes a norm over the last dimension of
    width ``d`` (a class such as ``DyT`` will do). Without ``factory``, a decorator. See the module docstring."""
    return _decorator("norm", name, factory)


def register_ffn(name: str, factory: V | None = None) -> Any:
    """Register a feed-forward body: ``factory(d_model, d_ff, dropout, bias) -> nn.Module``. Without ``factory``,
    a decorator. The init schemes draw its ``nn.Linear`` weights in module order; the last is the projection back
    into the residual stream (GPT-2's depth-scaled one)."""
    return _decorator("ffn", name, factory)


def register_init(name: str, draw: V | None = None) -> Any:
    """Register an initialisation scheme: ``draw(weight)`` fills one weight tensor in place (``nn.init.*_``
    style). Every family with an ``init`` argument accepts it. Without ``draw``, a decorator."""
    return _decorator("init", name, draw)


def register_combinator(name: str, cls: V | None = None) -> Any:
    """Register a :class:`~variants.combinators.Combinator` subclass under ``name`` (its ``axis`` attribute, where
    it has one, must be ``name``): :func:`lookup` finds it and a model built with it reports ``combinator: name``.
    Without ``cls``, a class decorator."""
    return _decorator("combinator", name, cls)


def unregister_axis_value(axis: str, name: str) -> None:
    """Remove what :func:`register_axis_value` (``register_norm`` ...) registered; a shipped or unknown name raises."""
    _check_axis(axis)
    if name not in _VALUES[axis]:
        what = "shipped with a family" if name in _SHIPPED[axis] else "not registered"
        raise ValueError(f"{axis} {name!r} is {what}; registered {axis} values: {sorted(_VALUES[axis]) or 'none'}")
    del _VALUES[axis][name]


def registered_axis_values(module: str | None = None) -> list[tuple[str, str]]:
    """``(axis, name)`` of every registered value (shipped ones are not), or of those ``module`` registered; sorted."""
    return sorted((v.axis, v.name) for values in _VALUES.values() for v in values.values()
                  if module is None or v.module == module)


def registered(axis: str) -> dict[str, Callable[..., Any]]:
    """Name -> value of what plugins registered on ``axis``, in registration order."""
    _check_axis(axis)
    return {name: v.value for name, v in _VALUES[axis].items()}


def name_of(axis: str, value: object) -> str:
    """The name ``value`` (a factory, draw or class) goes by on ``axis``: its registered name, else its
    ``<axis>_axis`` attribute, else its qualified name."""
    for name, v in _VALUES[axis].items():
        if v.value is value:
            return name
    named = getattr(value, f"{axis}_axis", None)
    if isinstance(named, str):
        return named
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    return f"{module}.{qualname}" if module and qualname else repr(value)


def lookup(axis: str, value: object, shipped: Mapping[str, S], *, message: Callable[[list[str]], str]) -> tuple[str, S]:
    """``(name, value)`` for an argument of ``axis``: a name of ``shipped`` (the family's own values), a registered
    name, or a callable passed directly. Anything else raises ``ValueError(message(known names))``."""
    if isinstance(value, str):
        if value in shipped:
            return value, shipped[value]
        if value in _VALUES[axis]:
            return value, _VALUES[axis][value].value  # type: ignore[return-value]
    elif callable(value) and not isinstance(value, nn.Module):  # a module is an instance, not a factory
        shipped_name = next((k for k, v in shipped.items() if v is value), None)
        return shipped_name or name_of(axis, value), value  # type: ignore[return-value]
    raise ValueError(message([*shipped, *_VALUES[axis]]))


# The names derive_axes gives torch's norm classes (a registered norm cannot take one of them).
NORM_TYPES: tuple[tuple[type[nn.Module], str], ...] = (
    (nn.LayerNorm, "layernorm"), (nn.RMSNorm, "rmsnorm"), (nn.modules.batchnorm._BatchNorm, "batchnorm"),
    (nn.GroupNorm, "groupnorm"),
)


def norm_type(module: nn.Module) -> str | None:
    """The norm axis of one module: the name it is tagged with (:func:`tagged`) or its class names itself by
    (``ScaleNorm.norm_axis``), else the name of one of torch's norm classes (:data:`NORM_TYPES`), else None."""
    named = getattr(module, "norm_axis", None)
    if isinstance(named, str):
        return named
    return next((name for cls, name in NORM_TYPES if isinstance(module, cls)), None)


def tagged(module: nn.Module, axis: str, name: str) -> nn.Module:
    """``module`` with ``<axis>_axis = name`` set on the instance, the name :func:`variants.registry.derive_axes`
    reports for it (nothing enters the state dict). A norm passed as an unregistered factory whose module
    :func:`norm_type` already names (``norm=nn.RMSNorm``: ``rmsnorm``) keeps that name instead of ``name``."""
    if axis == "norm" and name not in _VALUES["norm"] and norm_type(module) is not None:
        return module
    setattr(module, f"{axis}_axis", name)
    return module


def make_norm(factory: Callable[..., nn.Module], d: int, bias: bool) -> nn.Module:
    """``factory(d, bias=bias)`` where the factory takes ``bias``, else ``factory(d)`` (``DyT(d)``, ``nn.RMSNorm``)."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin without a signature: the plain call
        params = {}  # type: ignore[assignment]
    takes_bias = "bias" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    return factory(d, bias=bias) if takes_bias else factory(d)
