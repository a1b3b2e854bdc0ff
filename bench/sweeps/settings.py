"""What a built model is set to that neither its keyword arguments nor its structure show: head counts and rates.

A builder may fix these inside: a plugin's ``preln_h8`` that calls ``variants.create("preln", ..., n_heads=8)`` behind
a builder taking no ``n_heads``, or one that fixes ``dropout=0.3``. No keyword argument of both builders names them,
and the structure (:mod:`bench.sweeps.structure`) leaves them out: a head count changes no parameter's shape, a
dropout is the identity at evaluation. :func:`read` reads them off the modules themselves (on any device, the meta
device included: no forward), by what the modules hold, never by the variant's name:

- ``n_heads``: every attention module's head count: ``nn.MultiheadAttention``'s ``num_heads``, and any module's
  integer ``n_heads`` or ``num_heads`` (the family's attention, timm's);
- ``dropout``: every dropout layer's rate (``nn.Dropout`` and its kin: ``p``) and the attention-weight dropout an
  attention applies inside its own call (``nn.MultiheadAttention``'s ``dropout``, a float ``attn_dropout``);
- ``drop_path_rate``: every stochastic-depth layer's rate (timm's ``DropPath``: ``drop_prob``).

Each is the sorted distinct values found. A rate of 0 is the identity and is left out, so a model with no dropout
layer and one whose dropout layers are at 0 read alike (``0``). ``n_heads`` is absent from a model with no attention:
the head counts of two models are compared only where both attend.
"""

from __future__ import annotations

from typing import Any

from torch import nn

RATES = ("dropout", "drop_path_rate")
_HEADS = ("n_heads", "num_heads")


def _number(module: nn.Module, name: str, kind: type | tuple[type, ...]) -> Any:
    """``module.name`` where it is a number of ``kind`` (a bool is no count), else None."""
    value = getattr(module, name, None)
    return value if isinstance(value, kind) and not isinstance(value, bool) else None


def _rates(module: nn.Module) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {"dropout": [], "drop_path_rate": []}
    if isinstance(module, nn.modules.dropout._DropoutNd):
        found["dropout"].append(float(module.p))
    if isinstance(module, nn.MultiheadAttention):
        found["dropout"].append(float(module.dropout))
    attn = _number(module, "attn_dropout", (int, float))
    if attn is not None:
        found["dropout"].append(float(attn))
    drop_path = _number(module, "drop_prob", (int, float))
    if drop_path is not None:
        found["drop_path_rate"].append(float(drop_path))
    return found


def read(model: nn.Module) -> dict[str, Any]:
    """``{"n_heads": ..., "dropout": ..., "drop_path_rate": ...}`` of a built model (module docstring); each value is
    one number where the model has one, a tuple of the sorted distinct values where it has several."""
    heads: set[int] = set()
    rates: dict[str, set[float]] = {key: set() for key in RATES}
    for module in model.modules():
        heads.update(n for name in _HEADS if (n := _number(module, name, int)) is not None)
        for key, values in _rates(module).items():
            rates[key].update(round(v, 9) for v in values if v != 0)
    out = {key: _value(values, 0.0) for key, values in rates.items()}
    return {"n_heads": _value(heads, 0), **out} if heads else out


def _value(values: set[Any], none: Any) -> Any:
    ordered = sorted(values)
    return none if not ordered else ordered[0] if len(ordered) == 1 else tuple(ordered)
