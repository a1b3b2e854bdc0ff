"""Argument checks shared by every family.

A builder's keyword arguments arrive from a command line (``--model-arg d_model=abc``), a study file or a plugin,
so any of them may be of the wrong kind. Each check raises ``ValueError`` naming the argument, what it wants and
what it got (``d_model must be a positive integer, got 'abc'``), before anything is built: never a bare
``int()``/``float()`` error, never a TypeError from inside torch. A bool is no number here (``True`` is no
width), and a float is no integer (``d_model=128.0`` is refused rather than recorded as a float).
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def _label(name: str, what: str | None) -> str:
    return f"{name} ({what})" if what else name


def is_int(value: object) -> bool:
    """An ``int`` that is not a ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(name: str, value: object, what: str | None = None) -> int:
    """``value`` if it is an integer >= 1, else ``ValueError("<name> must be a positive integer, got <value!r>")``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{_label(name, what)} must be a positive integer, got {value!r}")
    return value


def check_positive(**values: object) -> None:
    """:func:`positive_int` of every keyword (``num_classes``, ``in_chans``, ``width``...)."""
    for name, value in values.items():
        positive_int(name, value)


def real(name: str, value: object, what: str | None = None) -> float:
    """``value`` as a float if it is a finite real number (an int will do), else ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{_label(name, what)} must be a real number, got {value!r}")
    return float(value)


def rate(name: str, value: object) -> float:
    """A probability in [0, 1) (dropout, stochastic depth), else ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")
    return float(value)


def flag(name: str, value: object, what: str | None = None) -> bool:
    """``value`` if it is ``True`` or ``False``; 1, 0 and strings are refused."""
    if not isinstance(value, bool):
        raise ValueError(f"{_label(name, what)} must be True or False, got {value!r}")
    return value


def choice(name: str, value: object, options: Iterable[str], source: str | None = None) -> str:
    """``value`` if it is one of ``options`` (strings), else ``ValueError`` listing them (and their ``source``)."""
    options = tuple(options)
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{name} must be one of {options}{f' ({source})' if source else ''}, got {value!r}")
    return value
