"""Every keyword argument of every registered variant: a value of the wrong type is refused with a ValueError that
names the argument and the value (never a bare ``int()``/``float()`` error or a TypeError from deep inside torch).

Parametrised over the registry, so a family added later is covered without a line here.
"""

from __future__ import annotations

import inspect

import pytest
import torch

import variants
from variants.registry import _REGISTRY

# A registration, not a preset (presets share their base's builder), with the arguments it leaves free.
ROOTS = [n for n in variants.list_variants() if _REGISTRY[n].base is None]


def _bad_values(default: object) -> list[object]:
    """Values of the wrong kind for an argument whose default is ``default``, the most telling first: a bool where a
    number is wanted (``int(True)`` is 1: a check by conversion lets it through), an int where a flag is."""
    if isinstance(default, bool):
        return [2, "abc", None]
    if isinstance(default, int):
        return [True, "abc", 2.5, None]
    if isinstance(default, float):
        return [True, "abc", None]
    if isinstance(default, str):
        return [3, ["x"], None]
    if default is None:
        return ["abc"]
    return []


# Every (builder, keyword) with the most telling bad value; every bad value for the builders of the two specs most
# families share (TransformerSpec: preln; CifarSpec: resnet), whose checkers the others call.
EVERY_VALUE = ("preln", "resnet")
CASES = [
    pytest.param(name, key, bad, id=f"{name}-{key}-{bad!r}")
    for name in ROOTS
    for key, default in sorted(variants.describe(name)["defaults"].items())
    if key not in variants.describe(name)["fixed"] and default is not inspect.Parameter.empty
    for bad in _bad_values(default)[: None if name in EVERY_VALUE else 1]
]


def test_cases_cover_the_families() -> None:
    families = {variants.describe(name)["family"] for name, _, _ in (c.values for c in CASES)}
    assert families == {variants.describe(n)["family"] for n in ROOTS}
    values = [c.values for c in CASES]
    assert ("preln", "d_model", "abc") in values and ("preln", "d_model", True) in values
    assert ("mudd", "d_model", True) in values and ("mudd", "d_model", "abc") not in values


@pytest.mark.parametrize(("name", "key", "bad"), CASES)
def test_wrong_type_names_the_argument(name: str, key: str, bad: object) -> None:
    with torch.device("meta"), pytest.raises(ValueError) as info:  # nothing to allocate should a check be missing
        variants.create(name, **{key: bad})
    message = str(info.value)
    assert key in message and repr(bad) in message, message
    assert "invalid literal" not in message and "could not convert" not in message


def test_d_model_message() -> None:
    with pytest.raises(ValueError, match=r"^d_model must be a positive integer, got 'abc'$"):
        variants.create("preln", d_model="abc")


@pytest.mark.parametrize(("name", "key", "good"), [
    ("preln", "dropout", 0), ("resnet", "gate_bias", -6), ("wrn", "dropout", 0), ("densenet", "drop_rate", 0),
    ("layerscale", "init_scale", 1), ("rezero", "alpha_init", 0),
])
def test_an_int_is_a_real_number(name: str, key: str, good: int) -> None:
    with torch.device("meta"):
        variants.create(name, **{key: good})
