"""resbench's model registry: residual designs as points in (combinator × norm placement × body).

Importing this package registers every family (``cifar``, ``preact``, ``normfree``, ``wrn``, ``resnext``,
``densenet``, ``imagenet``, ``mlp``, ``transformer``: one file per family; ``ngpt``, a Transformer too, has a file
of its own). Every unit's formula is in ``blocks.py`` (or, for He 2016's ablation of orderings and the DenseNet
layer, in the family's file).

The public API — what a plugin (``python -m bench ... --plugin FILE.py``, see ``bench.plugins``) may use; it
stays stable across releases:

- the registry: :func:`register` (a decorator; ``spec=`` gives the builder a validated spec; ``axes=`` declares
  axes, checked against the derived ones when the variant is first described), :func:`register_preset`,
  :func:`list_variants`, :func:`create`, :func:`describe` (family, paper, axes, parameter count, defaults, and
  ``unit``/``layer``: the classes whose ``forward`` is the residual formula), :func:`unregister` and
  :class:`DuplicateVariantError`;
- where the formulas are: :func:`formula` (``formula(name) -> dict``: the layer, unit, combinator, body and norm
  classes of a variant (:data:`FORMULA_ROLES`), each with the first paragraph of its docstring, its formula, and the
  file and line of its ``forward``, or of the class where it inherits its ``forward``)
  and :func:`catalogue` (``catalogue(names=None) -> str``: every registered variant as one Markdown page, grouped
  by family, deterministic: what ``docs/variants.md`` holds);
- the named axes' extension points (``variants.axes``): :func:`register_norm` (``factory(d)`` or
  ``factory(d, bias=...)``, e.g. a class ``DyT(d)``), :func:`register_ffn` (``factory(d_model, d_ff, dropout,
  bias)``), :func:`register_init` (``draw(weight)``, in place) and :func:`register_combinator` (a
  :class:`Combinator` subclass), each ``register_x(name, value)`` or a decorator ``@register_x(name)``; a
  registered name is accepted by every family taking that axis (``--model-arg norm=dyt`` in every Transformer
  placement and the MLP) and reported under that name by :func:`describe`; ``norm=``/``ffn=``/``init=`` also take
  the factory or draw itself. :func:`registered_axis_values` (``(axis, name)`` pairs, of one ``module=`` if given)
  and :func:`unregister_axis_value` unload what a plugin registered; a duplicate name raises;
- builders of the families, so a variant is built from a family's defaults instead of copies of them:
  :func:`build_transformer` (``build_transformer(design, spec=None, /, **overrides)``: a :class:`Design`, a
  name of the Transformer designs such as ``"preln"``, or a placement ``"pre"``/``"post"``/``"sandwich"``, on a
  :class:`TransformerSpec` — the sizes of a :class:`TrunkSpec` (depth, d_model, n_heads, d_ff, vocab_size, max_len,
  dropout, bias) and init, norm, ffn; every Transformer builder of the family takes one),
- a Transformer design of one's own (``docs/plugins.md`` works one through): :class:`Design` (``Design(paper,
  placements, join_factory)``), whose join factory is called once per sublayer with a :class:`SublayerSpec`
  (``index`` in forward order, ``kind`` ``"attn"``/``"ffn"``, ``depth``, ``d_model``); a join that reads earlier
  values declares them in ``reads``, a tuple of :class:`Source` (:data:`EMBEDDINGS`, :func:`branch` ``F_j``,
  :func:`output`), and receives them after ``x`` and ``F(x)``: ``forward(x, fx, *sources)``, handed over by the
  :class:`Past` the layers pass along (:mod:`variants.links`); the layers as their papers write them,
  :class:`PreLN`, :class:`PostLN`, :class:`PeriLN`, :class:`NoNorm`, :class:`B2T`, :class:`HybridNorm`, of
  :class:`Sublayer` parts (:mod:`variants.lm_blocks`), and a layer class of one's own, ``Design(block=...)``: a
  :class:`Block` subclass whose class methods build its units (``unit``), the layer where it sits (``make``) and
  the :class:`Stream` its layers hand each other (``stream``),
  :func:`build_mlp` on an :class:`MlpSpec` (depth, width, classes, input channels, image size, activation, norm,
  stochastic depth, init) around a unit factory given its drop-path rate, and :func:`build_cifar` below;
- joins: :class:`Combinator` (subclass it: ``forward(x, fx)`` joins the shortcut ``x`` and the branch output
  ``fx``; a class attribute ``axis`` names it), the shipped ones in :data:`COMBINATORS`, :class:`TransformGate`;
- the residual interface (:mod:`variants.roles`), what the harness recognises joins, gates and residual scalars
  by, whatever their class: ``residual_role = "join"`` or ``"gate"`` (a class attribute) and
  ``residual_scalars()`` (``{symbol: tensor}``; a parameter where learned), recorded at every evaluation;
- units (``variants.blocks``): :class:`ResidualUnit` (``combine(shortcut(x), F(x))``; subclass it to place
  norms and activations, and set ``placement``), :class:`PostActivation`, :class:`PostActBasic`,
  :class:`PostActBottleneck`, :class:`PreActBasic`, :class:`PreActBottleneck` (each takes ``combine=`` a
  factory of your join, given the unit's output channels), :data:`POSTACT` / :data:`PREACT` (by block),
  :class:`HighwayUnit`, and the norm placements around a sublayer :class:`PostNorm`, :class:`PreNorm`,
  :class:`SandwichNorm`;
- nets: :class:`CifarSpec` (depth, width, classes, input channels, block, shortcut, stochastic depth,
  init; validated) and :func:`build_cifar` (He 2015's CIFAR stem, three stages, head around a unit factory
  given a :class:`Slot`), :func:`make_shortcut` (He 2015's options A/B/C), :func:`conv_branch`;
  :func:`preact_stem` (a lone 3×3 convolution) and :func:`preact_head` (BN-ReLU before pooling), what a full
  pre-activation net (He 2016, ``preact``) puts around its units in ``build_cifar(spec, unit, stem=preact_stem,
  head_pre=preact_head)``;
- initialisation: ``create(name, seed=S)`` draws every parameter and buffer from the stream of (``S``, its
  qualified name) (:mod:`variants.draws`: common random numbers); under ``init="kaiming"`` every convolution no
  scheme drew is drawn He's way, and :func:`mark_init` (``"own"``, ``"zero"``; :data:`INIT_MARKS`) exempts a layer,
  :func:`marked_layers` lists the marked ones (:mod:`variants.init_marks`);
- the training hook: a model may define ``after_optimizer_step()``; the harness calls it under ``torch.no_grad()``
  after every optimiser step (nGPT puts its matrices back on the unit sphere there).

A variant's axes are derived from the units and combinators it builds (see :func:`describe`; :func:`derive_axes`
reads them off any built model, e.g. one built with ``norm=`` another norm).
"""

from . import (  # noqa: F401  (families)
    airbench,
    attn_res,
    cifar,
    convnext,
    dense,
    denseformer,
    densenet,
    frac,
    gomhc,
    gpas,
    hyper,
    hyperloop,
    imagenet,
    lm_norms,
    mlp,
    nfnet,
    ngpt,
    normfree,
    preact,
    repvgg,
    resnext,
    speedrun,
    transformer,
    updates,
    vwn,
    wrn,
)
from .axes import (
    norm_type,
    register_combinator,
    register_ffn,
    register_init,
    register_norm,
    registered_axis_values,
    unregister_axis_value,
)
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
from .combinators import COMBINATORS, Combinator, TransformGate, implementation
from .formulas import ROLES as FORMULA_ROLES
from .formulas import catalogue, formula
from .init_marks import INIT_MARKS, mark_init, marked_layers
from .layers import CifarSpec, Slot, build_cifar, conv_branch, make_shortcut
from .links import EMBEDDINGS, Past, Source, SublayerSpec, branch, output
from .lm_blocks import B2T, Block, HybridNorm, Layer, NoNorm, PeriLN, PostLN, PreLN, Stream, Sublayer
from .mlp import MlpSpec, build_mlp
from .preact import preact_head, preact_stem
from .registry import (
    DuplicateVariantError,
    axis_names,
    create,
    derive_axes,
    describe,
    list_variants,
    register,
    register_preset,
    unregister,
)
from .transformer import Design, TransformerSpec, TrunkSpec, build_transformer

__all__ = [
    "B2T",
    "COMBINATORS",
    "EMBEDDINGS",
    "FORMULA_ROLES",
    "INIT_MARKS",
    "POSTACT",
    "PREACT",
    "Block",
    "CifarSpec",
    "Combinator",
    "Design",
    "DuplicateVariantError",
    "HighwayUnit",
    "HybridNorm",
    "Layer",
    "MlpSpec",
    "NoNorm",
    "Past",
    "PeriLN",
    "PostActBasic",
    "PostActBottleneck",
    "PostActivation",
    "PostLN",
    "PostNorm",
    "PreActBasic",
    "PreActBottleneck",
    "PreLN",
    "PreNorm",
    "ResidualUnit",
    "SandwichNorm",
    "Slot",
    "Source",
    "Stream",
    "Sublayer",
    "SublayerSpec",
    "TransformGate",
    "TransformerSpec",
    "TrunkSpec",
    "axis_names",
    "branch",
    "build_cifar",
    "build_mlp",
    "build_transformer",
    "catalogue",
    "conv_branch",
    "create",
    "derive_axes",
    "describe",
    "formula",
    "implementation",
    "list_variants",
    "make_shortcut",
    "mark_init",
    "marked_layers",
    "norm_type",
    "output",
    "preact_head",
    "preact_stem",
    "register",
    "register_combinator",
    "register_ffn",
    "register_init",
    "register_norm",
    "register_preset",
    "registered_axis_values",
    "unregister",
    "unregister_axis_value",
]
