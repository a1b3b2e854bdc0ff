"""resbench's model registry: residual designs as points in (combinator × norm placement × body).

Importing this package registers every family (``cifar``, ``preact``, ``normfree``, ``wrn``, ``resnext``,
``densenet``, ``imagenet``, ``mlp``, ``transformer``: one file per family; ``ngpt``, a Transformer too, has a file
of its own). Every unit's formula is in ``blocks.py`` (or, for He 2016's ablation of orderings and the DenseNet
layer, in the family's file).

The public API — what a plugin (``python -m bench ... --plugin FILE.py``, see ``bench.plugins``) may use; it
stays stable across releases:

- the registry: :func:`register` (a decorator; ``spec=`` gives the builder a validated spec), :func:`register_preset`,
  :func:`list_variants`, :func:`create`, :func:`describe`, :func:`unregister` and :class:`DuplicateVariantError`;
- where the formulas are: :func:`formula` (``formula(name) -> dict``: the layer, unit and combinator classes of a
  variant, each with the first paragraph of its docstring, its formula, and the file and line of its ``forward``)
  and :func:`catalogue` (``catalogue(names=None) -> str``: every registered variant as one Markdown page, grouped
  by family, deterministic: what ``docs/variants.md`` holds);
- joins: :class:`Combinator` (subclass it: ``forward(x, fx)`` joins the shortcut ``x`` and the branch output
  ``fx``; a class attribute ``axis`` names it), the shipped ones in :data:`COMBINATORS`, :class:`TransformGate`;
- units (``variants.blocks``): :class:`ResidualUnit` (``combine(shortcut(x), F(x))``; subclass it to place
  norms and activations, and set ``placement``), :class:`PostActivation`, :class:`PostActBasic`,
  :class:`PostActBottleneck`, :class:`PreActBasic`, :class:`PreActBottleneck` (each takes ``combine=`` a
  factory of your join, given the unit's output channels), :data:`POSTACT` / :data:`PREACT` (by block),
  :class:`HighwayUnit`, and the norm placements around a sublayer :class:`PostNorm`, :class:`PreNorm`,
  :class:`SandwichNorm`;
- nets: :class:`CifarSpec` (depth, width, classes, input channels, block, shortcut, stochastic depth,
  init; validated) and :func:`build_cifar` (He 2015's CIFAR stem, three stages, head around a unit factory
  given a :class:`Slot`), :func:`make_shortcut` (He 2015's options A/B/C), :func:`conv_branch`;
- the training hook: a model may define ``after_optimizer_step()``; the harness calls it under ``torch.no_grad()``
  after every optimiser step (nGPT puts its matrices back on the unit sphere there).

A variant's axes are derived from the units and combinators it builds (see :func:`describe`).
"""

from . import cifar, densenet, hyper, imagenet, mlp, ngpt, normfree, preact, resnext, transformer, wrn  # noqa: F401  (families)
from .blocks import (
    POSTACT,
    PREACT,
    HighwayUnit,
    PostActBasic,
    PostActBottleneck,
    PostActivation,
    PostNorm,
    PreActBasic,
    PreActBottleneck,
    PreNorm,
    ResidualUnit,
    SandwichNorm,
)
from .combinators import COMBINATORS, Combinator, TransformGate
from .formulas import catalogue, formula
from .layers import CifarSpec, Slot, build_cifar, conv_branch, make_shortcut
from .registry import DuplicateVariantError, create, describe, list_variants, register, register_preset, unregister

__all__ = [
    "COMBINATORS",
    "POSTACT",
    "PREACT",
    "CifarSpec",
    "Combinator",
    "DuplicateVariantError",
    "HighwayUnit",
    "PostActBasic",
    "PostActBottleneck",
    "PostActivation",
    "PostNorm",
    "PreActBasic",
    "PreActBottleneck",
    "PreNorm",
    "ResidualUnit",
    "SandwichNorm",
    "Slot",
    "TransformGate",
    "build_cifar",
    "catalogue",
    "conv_branch",
    "create",
    "describe",
    "formula",
    "list_variants",
    "make_shortcut",
    "register",
    "register_preset",
    "unregister",
]
