"""resbench's model registry: residual designs as points in (combinator × norm placement × body).

Public API (DESIGN.md): :func:`register`, :func:`list_variants`, :func:`create`, :func:`describe`.
Importing this package registers every family below.
"""

from . import cifar, densenet, imagenet, mlp, normfree, preact, transformer  # noqa: F401  (registers families)
from .combinators import COMBINATORS, Combinator, TransformGate
from .placements import Residual
from .registry import create, describe, list_variants, register, register_preset

__all__ = [
    "COMBINATORS",
    "Combinator",
    "Residual",
    "TransformGate",
    "create",
    "describe",
    "list_variants",
    "register",
    "register_preset",
]
