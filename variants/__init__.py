"""resbench's model registry: residual designs as points in (combinator × norm placement × body).

Public API (DESIGN.md): :func:`register`, :func:`register_preset`, :func:`list_variants`, :func:`create`,
:func:`describe`, and :func:`unregister` (used to unload a plugin). Importing this package registers every
family below.

Your own variant (a plugin: ``python -m bench ... --plugin FILE.py``, see ``bench.plugins``) registers
through the same API and builds from the same pieces the shipped families use:

- :class:`Combinator` (``forward(x, fx)``: how the shortcut joins the branch) and the shipped ones in
  :data:`COMBINATORS`; :class:`TransformGate` (Highway's gate); :class:`Residual` (a norm placement around
  a combinator, for Transformer- and MLP-style units);
- the CIFAR macro-architecture of He et al. 2015: :func:`build_cifar` (stem, three stages, head) around a
  unit factory, :class:`Unit` (``post(combine(shortcut(x), body(x)))``), :func:`conv_branch` (the
  convolutions of a basic or bottleneck branch with BN/ReLU placed around them) and :func:`make_shortcut`
  (He 2015's shortcut options A/B/C).
"""

from . import cifar, densenet, imagenet, mlp, normfree, preact, transformer  # noqa: F401  (registers families)
from .combinators import COMBINATORS, Combinator, TransformGate
from .layers import Unit, build_cifar, conv_branch, make_shortcut
from .placements import Residual
from .registry import DuplicateVariantError, create, describe, list_variants, register, register_preset, unregister

__all__ = [
    "COMBINATORS",
    "Combinator",
    "DuplicateVariantError",
    "Residual",
    "TransformGate",
    "Unit",
    "build_cifar",
    "conv_branch",
    "create",
    "describe",
    "list_variants",
    "make_shortcut",
    "register",
    "register_preset",
    "unregister",
]
