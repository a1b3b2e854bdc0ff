"""Fair comparisons: a comparison varies one thing.

Two models that differ in more than the axis under study (initialisation, width, parameter count)
confound a ranking. This module finds such differences without knowing any variant by name:

- :func:`model_facts` — what the registry says of a model as it would be built: its axes
  (``variants.describe``), its resolved keyword arguments (``init``, ``width``, ``d_model``, ...) and,
  built on the meta device, its parameter count and its structure (:mod:`bench.sweeps.structure`: per
  residual unit, the ops in the order the forward runs them, with parameter shapes and what is learned).
- :func:`weight_profile` — what a built model *is*: per weight role (the parameter's qualified name
  with layer indices replaced by ``*``; a fused ``qkv`` weight split into q, k and v) the number of
  tensors and the standard deviation of their entries, the positions of its norm layers, and its
  residual scalars and gates.
- :func:`diff_models` (``bench diff A B``) — the two side by side, every row tagged with the axis it
  belongs to, so the summary says *what* differs (``placement``, ``init``, ``params`` ...) and what a study comparing
  the two must declare in ``vary`` (:func:`to_declare`, by the guard's own rule).
- :func:`check_grid` — the guard ``bench sweep`` / ``bench reproduce`` runs before the first run:
  within every group of a study's grid that shares all grid values but the variant, the variants may
  differ only along the axes the study declares in ``vary``, and in parameter count by at most
  ``param_tolerance`` (relative). Anything else is refused, naming the field and the two variants. A study
  that varies only values (:data:`VALUE_CONFOUNDS`: init, dropout, drop-path rate) must also compare models
  of one structure; the first differing unit is named with both op sequences. A grid at equal compute
  (``budget_flops``) groups its designs by the budget, which their configurations share: they differ in steps by
  construction (a costlier step, fewer of them, :mod:`bench.runs.budget`), and the steps are never compared.
  Head counts and dropout and drop-path rates are read off the built modules too (:mod:`bench.sweeps.settings`), so
  a builder that fixes one inside is seen. A field the study's ``zip`` steps with the variant gives each variant its
  own values, so no cell holds two variants: two that run different values of one are refused unless ``vary``
  declares it (:func:`_check_zipped`). A ``timm:`` model declares no axes: it is compared by what it builds (its
  parameter count, head count, rates and, in a study varying values only, its structure).

Joins, gates and residual scalars are found by what modules declare (:mod:`variants.roles`), never by class.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

import variants
from bench.runs import shapes
from bench.runs.config import RunConfig
from bench.runs.shapes import Shape
from bench.runs.train import TIMM_MODEL_KWARGS, resolved_kwargs
from bench.sweeps import settings, structure
from bench.sweeps.structure import Part, Structure
from variants import draws
from variants.registry import is_timm
from variants.roles import residual_scalars

# Two weight stds within this relative difference (or within 4 standard errors of a sample std, for small
# tensors) are the same scheme, not another init.
STD_TOLERANCE = 0.01
DEFAULT_PARAM_TOLERANCE = 0.01
# The keyword arguments the guard compares between variants (where both builders take them): the init, the
# width and the regularisation. Others (a gate's bias, a shortcut type, a unit ordering) are options of the
# variant's own combinator or body, which its axes already name; `bench diff` shows them all.
CONFOUNDS = ("init", "width", "d_model", "d_ff", "n_heads", "growth_rate", "bias", "dropout", "drop_path_rate")
# The confounds that change values, not what the model is made of: a study varying only these must compare models
# of one structure (bench.sweeps.structure).
VALUE_CONFOUNDS = ("init", "dropout", "drop_path_rate")
_WEIGHTED = (nn.Linear, nn.modules.conv._ConvNd, nn.Embedding)


@dataclass(frozen=True)
class Facts:
    """A model as the registry describes it (no weights needed)."""

    variant: str
    family: str
    axes: Mapping[str, str]
    kwargs: Mapping[str, Any]
    params: int
    structure: Structure | None = field(default=None, compare=False)  # None: not described (made-up facts)
    built: Mapping[str, Any] = field(default_factory=dict)  # read off the modules (bench.sweeps.settings): n_heads ...


BUILT = " (built)"  # the key of a row read off the built modules (Facts.built), after its axis: `n_heads (built)`

def _overrides(depth: int | None, model_args: Mapping[str, Any] | None) -> dict[str, Any]:
    return {**({"depth": depth} if depth is not None else {}), **dict(model_args or {})}


def model_facts(variant: str, depth: int | None = None, model_args: Mapping[str, Any] | None = None,
                model: nn.Module | None = None, described: bool = True) -> Facts:
    """Axes, resolved kwargs and parameter count of ``variant``: of ``model`` when given (built with these
    overrides), else of one built on the meta device (no memory, no data). ``described``: with its structure,
    which runs one forward (on the meta device, most of the cost); without, ``structure`` is None."""
    over = _overrides(depth, model_args)
    if model is None:
        with torch.device("meta"):
            model = variants.create(variant, **over)
    desc = variants.describe(variant)
    return Facts(variant, desc["family"], dict(desc["axes"]), resolved_kwargs(variant, over),
                 sum(p.numel() for p in model.parameters()), structure.describe(model) if described else None,
                 settings.read(model))


def _role(name: str) -> str:
    return re.sub(r"(^|\.)\d+(?=\.|$)", r"\1*", name)


def weight_profile(model: nn.Module) -> dict[str, Any]:
    """Weight roles (count and std), norm positions and types, residual scalars and gates of a built model."""
    pooled: dict[str, list[torch.Tensor]] = defaultdict(list)
    norms: dict[str, list[str]] = defaultdict(list)  # role -> the norm type of each layer in it
    scalars: dict[str, list[float]] = defaultdict(list)
    for name, module in model.named_modules():
        role = _role(name)
        kind = variants.norm_type(module)  # torch's norms and every registered one (a plugin's DyT)
        if kind is not None:
            norms[role].append(kind)
        elif isinstance(module, _WEIGHTED):
            w = module.weight.detach().float()
            if name.rsplit(".", 1)[-1] == "qkv" and w.shape[0] % 3 == 0:  # fused q|k|v rows: three roles
                for part, rows in zip("qkv", w.chunk(3), strict=True):
                    pooled[f"{role}[{part}]"].append(rows)
            else:
                pooled[role].append(w)
        for symbol, value in residual_scalars(module).items():  # declared, whatever the class (variants.roles)
            scalars[f"{role} {symbol}"].append(value.detach().float().mean().item())
    stds = {r: (len(ws), sum(w.numel() for w in ws), torch.cat([w.flatten() for w in ws]).std().item())
            for r, ws in pooled.items()}
    return {"weights": stds, "norms": dict(norms), "scalars": {k: sum(v) / len(v) for k, v in scalars.items()}}


@dataclass(frozen=True)
class DiffRow:
    """One compared quantity: the axis it belongs to, its name, both values, and whether they differ."""

    axis: str
    key: str
    a: Any
    b: Any
    differs: bool


def _rel(a: float, b: float) -> float:
    scale = max(abs(a), abs(b))
    return 0.0 if scale == 0 else abs(a - b) / scale


def _fact_rows(fa: Facts, fb: Facts, param_tolerance: float) -> list[DiffRow]:
    rows = [DiffRow("family", "family", fa.family, fb.family, fa.family != fb.family)]
    # A timm model declares no axes: its axes are unknown, not "-" (it is compared by what was built).
    for axis in sorted(set(fa.axes) | set(fb.axes)) if not (is_timm(fa.variant) or is_timm(fb.variant)) else ():
        va, vb = fa.axes.get(axis, "-"), fb.axes.get(axis, "-")
        rows.append(DiffRow(axis, f"axes.{axis}", va, vb, va != vb))
    for key in sorted(set(fa.kwargs) & set(fb.kwargs)):  # a kwarg only one builder takes belongs to its axis
        va, vb = fa.kwargs[key], fb.kwargs[key]
        rows.append(DiffRow(key, key, va, vb, va != vb))
    for key in sorted(set(fa.built) & set(fb.built)):  # what a builder fixes inside, whatever it takes
        va, vb = fa.built[key], fb.built[key]
        rows.append(DiffRow(key, f"{key}{BUILT}", va, vb, va != vb))
    rows.append(DiffRow("params", "parameters", fa.params, fb.params, _rel(fa.params, fb.params) > param_tolerance))
    return rows


def _std_noise(numel: int) -> float:
    """Four standard errors of a sample standard deviation over ``numel`` entries, relative: 4/√(2n)."""
    return 4.0 / math.sqrt(2.0 * max(numel, 1))


def _profile_rows(pa: Mapping[str, Any], pb: Mapping[str, Any]) -> list[DiffRow]:
    rows = []
    wa, wb = pa["weights"], pb["weights"]
    for role in sorted(set(wa) | set(wb)):
        (ca, na, sa), (cb, nb, sb) = wa.get(role, (0, 0, math.nan)), wb.get(role, (0, 0, math.nan))
        same = ca == cb and _rel(sa, sb) <= max(STD_TOLERANCE, _std_noise(min(na, nb)))
        # A role only one model has (a gate's projection) is a difference of layers, not of initialisation.
        rows.append(DiffRow("init" if ca == cb else "layers", f"std {role}", f"{sa:.4g} (x{ca})" if ca else "-",
                            f"{sb:.4g} (x{cb})" if cb else "-", not same))
    na, nb = pa["norms"], pb["norms"]
    for role in sorted(set(na) | set(nb)):
        ka, kb = na.get(role, []), nb.get(role, [])
        # Norm layers at other places is a placement; the same places with another norm type, or norms in one model
        # and none at all in the other (norm "none": Fixup against ResNet), is the norm axis.
        axis = "placement" if len(ka) != len(kb) and na and nb else "norm"
        rows.append(DiffRow(axis, f"norm {role}", _norms_cell(ka), _norms_cell(kb), ka != kb))
    sa, sb = pa["scalars"], pb["scalars"]
    for key in sorted(set(sa) | set(sb)):
        va, vb = sa.get(key), sb.get(key)
        same = va is not None and vb is not None and math.isclose(va, vb, rel_tol=1e-6)
        rows.append(DiffRow("scalars", key, "-" if va is None else f"{va:.4g}",
                            "-" if vb is None else f"{vb:.4g}", not same))
    return rows


def _norms_cell(kinds: Sequence[str]) -> str:
    return f"{', '.join(dict.fromkeys(kinds))} (x{len(kinds)})" if kinds else "-"


def structure_row(fa: Facts, fb: Facts) -> DiffRow | None:
    """The ``structure`` row of two described models (:mod:`bench.sweeps.structure`): their summaries where the
    structures are equal, else the first part in which they differ (a :class:`Part` each, or ``"(no such part)"``
    where one model has fewer); None where either is undescribed."""
    sa, sb = fa.structure, fb.structure
    if sa is None or sb is None:
        return None
    index = structure.first_difference(sa, sb)
    if index is None:
        return DiffRow("structure", "structure", sa.summary(), sb.summary(), False)
    pa, pb = (structure.part_at(s, index) or "(no such part)" for s in (sa, sb))
    return DiffRow("structure", "structure: first difference", pa, pb, True)


def link_rows(fa: Facts, fb: Facts) -> list[DiffRow]:
    """One ``links`` row per part that reads anything (:func:`bench.sweeps.structure.links`): what each sublayer of
    either model reads, its input ``x`` and the earlier values its join declares (``F(blocks.0.attn)``,
    ``embeddings`` ...); ``-`` where a model has no such part."""
    if fa.structure is None or fb.structure is None:
        return []
    la, lb = structure.links(fa.structure), structure.links(fb.structure)
    names = sorted({*la, *lb}, key=lambda name: [(0, int(p), "") if p.isdigit() else (1, 0, p)
                                                 for p in name.split(".")])  # blocks.2 before blocks.10
    return [DiffRow("links", f"reads {name}", la.get(name, "-"), lb.get(name, "-"), la.get(name) != lb.get(name))
            for name in names]


def initial_values(variant: str, depth: int | None = None, model_args: Mapping[str, Any] | None = None,
                   seed: int = 0) -> dict[str, torch.Tensor]:
    """Every floating-point parameter and buffer of ``variant`` as built by common random numbers at ``seed`` (on the
    CPU), by qualified name: a layer two designs share starts with the same values unless their inits differ."""
    return _values(variants.create(variant, seed=seed, **_overrides(depth, model_args)))


def _values(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: t.detach() for name, t in draws.named_tensors(model) if t.is_floating_point()}


def shared_init_rows(va: Mapping[str, torch.Tensor], vb: Mapping[str, torch.Tensor]) -> list[DiffRow]:
    """One ``init`` row per tensor both models have (same qualified name and shape; :func:`initial_values`) whose
    initial values differ, with both stds (and means, where the stds print alike)."""
    rows = []
    for name, ta in va.items():
        tb = vb.get(name)
        if tb is None or tb.shape != ta.shape or torch.equal(ta, tb):
            continue
        cells = [f"std {t.float().std().item():.4g}" if t.numel() > 1 else f"{t.item():.4g}" for t in (ta, tb)]
        if cells[0] == cells[1]:
            cells = [f"{c}, mean {t.float().mean().item():.4g}" for c, t in zip(cells, (ta, tb), strict=True)]
        rows.append(DiffRow("init", f"init {name}", cells[0], cells[1], True))
    return rows


def diff_models(a: str, b: str, depth: int | None = None, model_args: Mapping[str, Any] | None = None,
                seed: int = 0, param_tolerance: float = DEFAULT_PARAM_TOLERANCE,
                shape: Shape | None = None) -> list[DiffRow]:
    """Every compared quantity of variants ``a`` and ``b`` built with the same overrides and seed (on the CPU, by
    common random numbers): the facts, the structure (:func:`structure_row`), what each sublayer reads
    (:func:`link_rows`), the weight profile and every layer both share whose initial values differ
    (:func:`shared_init_rows`). With ``shape`` (a ``bench cost`` shape, :mod:`bench.runs.cost`), each is built with
    the shape's model arguments as ``bench cost`` builds it (its input channels, classes and depth), ``depth`` and
    ``model_args`` on top; without, with each variant's defaults."""
    facts: list[Facts] = []
    profiles = []
    values = []
    for name in (a, b):  # common random numbers: the layers both share start equal (variants.draws)
        args = {**(shapes.build_args(name, shape) if shape is not None else {}), **dict(model_args or {})}
        model = variants.create(name, seed=seed, **_overrides(depth, args))
        facts.append(model_facts(name, depth, args, model))
        profiles.append(weight_profile(model))
        values.append(_values(model))
    built = structure_row(*facts)
    return (_fact_rows(facts[0], facts[1], param_tolerance) + ([built] if built else []) + link_rows(*facts)
            + _profile_rows(*profiles) + shared_init_rows(*values))


def format_diff(a: str, b: str, rows: Sequence[DiffRow], show_all: bool = False) -> str:
    """A side-by-side table (only the differing rows unless ``show_all``, and the parameter counts wherever they are
    not equal, with the difference and its share) with the axis of every row, the first structural difference with
    both op sequences side by side, and a one-line summary (:func:`summary`): the guard's axes the models differ in,
    then the other axes of the differing rows, marked as information."""
    shown = [r for r in rows if r.differs or show_all or (r.axis == "params" and r.a != r.b)]
    cells = [(r, str(r.a), _b_cell(r)) for r in shown]
    width = max([len(r.key) for r in shown] + [len("quantity")])
    wa = max([len(ca) for _, ca, _ in cells] + [len(a)])
    wb = max([len(cb) for _, _, cb in cells] + [len(b)])
    lines = [f"{'quantity':<{width}}  {a:<{wa}}  {b:<{wb}}  axis"]
    lines += [f"{r.key:<{width}}  {ca:<{wa}}  {cb:<{wb}}  {r.axis}"
              f"{'   <- differs' if r.differs and show_all else ''}" for r, ca, cb in cells]
    for r in rows:
        if r.axis == "structure" and r.differs:
            parts = [p if isinstance(p, Part) else None for p in (r.a, r.b)]
            lines += ["first structural difference (ops in the order the forward runs them):",
                      structure.sequences(a, parts[0], b, parts[1])]
    lines.append(summary(a, b, rows))
    return "\n".join(lines)


def _b_cell(row: DiffRow) -> str:
    """The second model's cell of ``row``: its value, and for a parameter count that differs from the first
    model's, the difference and its share of the first's, e.g. ``283299 (+13,577, +5.0%)``; a difference the guard
    tolerates says so (the row is shown so the extra parameters are seen, yet it is not a difference)."""
    if row.axis != "params" or row.a == row.b or not isinstance(row.a, int) or not isinstance(row.b, int):
        return str(row.b)
    extra = row.b - row.a
    share = f", {100 * extra / row.a:+.1f}%" if row.a else ""
    tolerated = "" if row.differs else "; within the guard's tolerance"
    return f"{row.b} ({extra:+,}{share}{tolerated})"


def guard_axis(row: DiffRow) -> str | None:
    """The axis under which the study guard (:func:`check_grid`) checks ``row``, as a study's ``vary`` names it, or
    None for a row the guard does not check (the family, layers only one model has, residual scalars, links, weight
    stds and norms by role: each shows *how* the models differ, and the guarded axes say *whether* they may). Checked:
    a registry axis (``axes.*``), a keyword argument in :data:`CONFOUNDS` (taken by both builders, or read off both
    built models: ``n_heads (built)``), the parameter count, the structure (in a
    study varying values only) and the initial values of the layers both models have (``init``)."""
    if row.key.startswith("axes.") or row.axis == "params" or (
            row.key in (row.axis, f"{row.axis}{BUILT}") and row.axis in CONFOUNDS):
        return row.axis
    if row.axis == "structure":
        return "structure"
    if row.key.startswith("init "):  # shared_init_rows: what _check_shared_init refuses
        return "init"
    return None


def summary(a: str, b: str, rows: Sequence[DiffRow]) -> str:
    """The diff's last line in the guard's language: the guard axes (:func:`guard_axis`) along which ``a`` and ``b``
    differ, what a study comparing them must declare in ``vary`` (:func:`to_declare`), then what else differs, marked
    as information."""
    guarded = sorted({axis for r in rows if r.differs and (axis := guard_axis(r)) is not None})
    other = sorted({r.axis for r in rows if r.differs and guard_axis(r) is None} - set(guarded))
    if guarded:
        declare = to_declare(guarded)
        covered = (f" ({', '.join(declare)} covers structure: the guard compares structures only where `vary` names "
                   f"values only, {', '.join(VALUE_CONFOUNDS)})" if "structure" in set(guarded) - set(declare) else "")
        head = (f"{a} and {b} differ in: {', '.join(guarded)} (the guard's axes); a study comparing them declares "
                f"{', '.join(declare)} in `vary`{covered}")
    else:
        head = f"{a} and {b} differ in no guard axis (a study comparing them declares nothing in `vary`)"
    if not other:
        return head if guarded else f"{a} and {b} do not differ"
    return f"{head}; also, not guard axes (information only): {', '.join(other)}"


def to_declare(axes: Iterable[str]) -> list[str]:
    """The least a study's ``vary`` declares for :func:`check_grid` to pass two models that differ along the guard
    ``axes``: every axis but the structure, and the structure only where those change values only
    (:func:`_values_only`, the rule :func:`_check_structure` applies): any other declared axis covers it."""
    axes = set(axes)
    declare = sorted(axes - {"structure"})
    if "structure" in axes and _values_only(declare):
        declare.append("structure")
    return declare


# -- the study guard ------------------------------------------------------------------------------


def run_model_args(cfg: RunConfig) -> dict[str, Any]:
    """``cfg``'s model arguments, after those its task gives its model where a ``bench cost`` shape of the task's
    name states them without loading the data (:data:`bench.runs.shapes.SHAPES`: digits' one input channel and 10
    classes; less what the variant's builder does not take, a timm model's all but its classes and channels, and the
    shape's depth). Other tasks: ``cfg``'s own only (the builders' defaults for the rest: a timm model's 1000 classes).
    The guard then counts the parameters the runs will have."""
    shape = shapes.SHAPES.get(cfg.task)
    if shape is None:
        return dict(cfg.model_overrides())
    accepted = set(TIMM_MODEL_KWARGS if is_timm(cfg.variant) else variants.describe(cfg.variant)["defaults"])
    args = {k: v for k, v in shapes.build_args(cfg.variant, shape).items() if k in accepted and k != "depth"}
    return {**args, **cfg.model_overrides()}


def _group_key(cfg: RunConfig, without: Iterable[str] = ()) -> str:
    """Everything of a config except the variant, the seed and the fields ``without``: configs with one key are
    compared with each other."""
    d = cfg.to_dict()
    for name in ("variant", "seed", *without):
        d.pop(name)
    return json.dumps(d, sort_keys=True, default=str)


def check_grid(configs: Iterable[RunConfig], vary: Sequence[str], param_tolerance: float = DEFAULT_PARAM_TOLERANCE,
               study: str = "study", zipped: Sequence[str] = ()) -> None:
    """Refuse (ValueError) a grid whose variants differ in an undeclared way; see the module docstring.

    Compared: the axes, the keyword arguments in :data:`CONFOUNDS` that both builders take and the same read off
    the built modules (:mod:`bench.sweeps.settings`), the parameter count, and (where ``vary`` names values only)
    the structure. Other keyword arguments belong to a variant's own combinator or body. A timm model declares no
    axes: it is compared by what it builds. ``zipped``: the grid's fields a study's ``zip`` steps together with the
    variant (:func:`_check_zipped`).
    """
    configs = list(configs)
    described = _values_only(vary)  # else no forward is needed: a structural study compares structures
    cache: dict[str, Facts] = {}

    def facts_of(cfg: RunConfig) -> Facts:
        key = json.dumps([cfg.variant, cfg.depth, cfg.task, cfg.model_args], default=str)
        if key not in cache:
            cache[key] = model_facts(cfg.variant, cfg.depth, run_model_args(cfg), described=described)
        return cache[key]

    groups: dict[str, dict[str, RunConfig]] = defaultdict(dict)
    for cfg in configs:
        groups[_group_key(cfg)].setdefault(cfg.variant, cfg)
    facts = [[facts_of(cfg) for cfg in group.values()] for group in groups.values()]
    known = {"params", "structure", *zipped}
    for f in (f for group in facts for f in group):
        known |= set(f.axes) | set(f.kwargs) | set(f.built)
    # A study's `vary` covers all its presets: an axis only another preset's models have is declared, not a typo.
    unknown = sorted(set(vary) - known - variants.axis_names())
    if unknown:
        raise ValueError(f"study {study!r}: `vary` names {unknown}, which no model of the grid has and no registered "
                         f"variant declares; choose from {sorted(known)}")
    _check_zipped(configs, zipped, vary, study, lambda a, b: _check_pair(facts_of(a), facts_of(b), vary,
                                                                          param_tolerance, study))
    for first, *others in facts:
        for other in others:
            _check_pair(first, other, vary, param_tolerance, study)
    if "init" not in vary:
        _check_shared_init(configs, vary, study)


def _depth(f: Facts) -> str:
    return "" if f.kwargs.get("depth") is None else f" (depth {f.kwargs['depth']})"


def _check_pair(first: Facts, other: Facts, vary: Sequence[str], param_tolerance: float, study: str) -> None:
    """Refuse two models that differ in a guard axis (:func:`guard_axis`) ``vary`` does not name, or in structure in
    a study varying values only (:func:`_check_structure`)."""
    for row in _fact_rows(first, other, param_tolerance):
        if row.differs and guard_axis(row) is not None and row.axis not in vary:
            what = (f" (parameter counts differ by more than the tolerance: {param_tolerance:g})"
                    if row.axis == "params" else
                    " (read off the built modules, whatever their builders take)" if row.key.endswith(BUILT) else "")
            timm = [f.variant for f in (first, other) if is_timm(f.variant)]
            note = (f"; {timm[0]} is a timm model, which declares no axes: the guard compares only what it builds "
                    "(parameter count, head count, dropout and drop-path rates; the structure where `vary` names "
                    "values only)" if timm else "")
            raise ValueError(
                f"study {study!r} varies {list(vary) or 'nothing'}, but {first.variant} and "
                f"{other.variant}{_depth(first)} also differ in {row.axis!r}: {row.a!r} vs {row.b!r}{what}{note}; "
                f"declare it in the study's `vary` (or `param_tolerance`) or make the models match"
            )
    _check_structure(first, other, vary, study)


def _check_zipped(configs: Sequence[RunConfig], zipped: Sequence[str], vary: Sequence[str], study: str,
                  compare: Callable[[RunConfig, RunConfig], None]) -> None:
    """A study whose ``zip`` steps a field together with the variant gives each variant its own values of it, so its
    variants may share no cell of the grid, where the guard compares them. Refuse two variants that run different
    values of a zipped field (of a model argument, for ``model_args``) unless ``vary`` declares each; where it does,
    ``compare(a, b)`` checks everything else between one run of each (:func:`_check_pair`)."""
    if not zipped:
        return
    cells: dict[str, dict[str, list[RunConfig]]] = defaultdict(dict)
    for cfg in configs:
        cells[_group_key(cfg, zipped)].setdefault(cfg.variant, []).append(cfg)
    for cell in cells.values():
        (a, runs_a), *others = cell.items()
        for b, runs_b in others:
            if _rows(runs_a, zipped) == _rows(runs_b, zipped):
                continue  # each runs the other's values: the cells of the grid hold both
            found = _zipped_differences(runs_a, runs_b, zipped)
            if not found:  # the same values of each field, in other combinations
                raise ValueError(
                    f"study {study!r} zips {', '.join(map(repr, zipped))} with the variant (`zip`), so {a} and {b} run "
                    "their values in other combinations and never share a cell of the grid; take them out of `zip` "
                    "(every variant then runs every value)")
            undeclared = [(label, name, va, vb) for label, name, va, vb in found if name not in vary]
            if undeclared:
                listed = "; ".join(f"{label}: {va} vs {vb}" for label, _, va, vb in undeclared)
                names = ", ".join(map(repr, dict.fromkeys(name for _, name, _, _ in undeclared)))
                fields = ", ".join(map(repr, dict.fromkeys(label.split(" ")[0] for label, _, _, _ in undeclared)))
                raise ValueError(
                    f"study {study!r} zips {fields} with the variant (`zip`), so {a} and {b} run different values of "
                    f"it and never share a cell of the grid: {listed}; comparing them would compare those too: take "
                    f"{fields} out of `zip` (every variant then runs every value), or declare {names} in the study's "
                    "`vary`")
            compare(runs_a[0], runs_b[0])


def _rows(runs: Sequence[RunConfig], zipped: Sequence[str]) -> set[str]:
    """The distinct values of the ``zipped`` fields the runs of one variant run, each row as one string."""
    return {json.dumps([cfg.to_dict()[name] for name in zipped], sort_keys=True, default=str) for cfg in runs}


class _Default:
    def __repr__(self) -> str:
        return "(its default)"


_DEFAULT = _Default()  # a model argument a run does not give: its builder's default


def _zipped_differences(runs_a: Sequence[RunConfig], runs_b: Sequence[RunConfig],
                        zipped: Sequence[str]) -> list[tuple[str, str, str, str]]:
    """``(label, name to declare, values of a, values of b)`` for every zipped field whose values the runs of two
    variants differ in: a model argument of ``model_args`` by its own name (its builder's default where a run gives
    none), any other field by its name."""
    def values(runs: Sequence[RunConfig], get: Callable[[RunConfig], Any]) -> list[str]:
        return list(dict.fromkeys(repr(get(cfg)) for cfg in runs))  # in the grid's order

    def cell(seen: list[str]) -> str:
        return seen[0] if len(seen) == 1 else f"[{', '.join(seen)}]"

    found = []
    for name in zipped:
        getters = ({f"model_args {k}": (k, lambda cfg, k=k: cfg.model_overrides().get(k, _DEFAULT))
                    for k in sorted({k for cfg in (*runs_a, *runs_b) for k in cfg.model_overrides()})}
                   if name == "model_args" else {name: (name, lambda cfg, n=name: cfg.to_dict()[n])})
        for label, (declared, get) in getters.items():
            va, vb = values(runs_a, get), values(runs_b, get)
            if set(va) != set(vb):
                found.append((label, declared, cell(va), cell(vb)))
    return found


def _check_shared_init(configs: Iterable[RunConfig], vary: Sequence[str], study: str) -> None:
    """Refuse two variants of one group, drawn by common random numbers, whose shared layers (same qualified name and
    shape) start from different values: their inits differ (:func:`shared_init_rows`). Runs drawn from the global
    stream are not compared: there a design's extra draws shift its other layers' values whatever their init."""
    groups: dict[str, list[RunConfig]] = defaultdict(list)
    for cfg in configs:
        if cfg.init_stream == "crn" and not is_timm(cfg.variant):
            group = groups[_group_key(cfg)]
            if cfg.variant not in {c.variant for c in group}:
                group.append(cfg)
    for group in (g for g in groups.values() if len(g) > 1):
        first, *others = group
        base = initial_values(first.variant, first.depth, run_model_args(first))
        for other in others:
            rows = shared_init_rows(base, initial_values(other.variant, other.depth,
                                                         run_model_args(other)))
            if rows:
                listed = "; ".join(f"{r.key[len('init '):]}: {r.a} vs {r.b}" for r in rows[:3])
                more = f" (and {len(rows) - 3} more)" if len(rows) > 3 else ""
                raise ValueError(
                    f"study {study!r} varies {list(vary) or 'nothing'}, but {first.variant} and {other.variant} "
                    f"(depth {first.depth}) also differ in 'init' on layers both have: {listed}{more}; declare "
                    f"\"init\" in the study's `vary` or give both the same init (`python -m bench diff "
                    f"{first.variant} {other.variant}` lists them)")


def _values_only(vary: Sequence[str]) -> bool:
    """Whether a study varies values only (:data:`VALUE_CONFOUNDS`, or nothing): then structures must match."""
    return all(axis in VALUE_CONFOUNDS for axis in vary)


def _check_structure(first: Facts, other: Facts, vary: Sequence[str], study: str) -> None:
    """Refuse two models that differ in structure in a study that varies only values (:data:`VALUE_CONFOUNDS`:
    skipinit and rezero in a study of the init). A study that varies a structural axis (combinator, placement,
    norm, body, width ... or ``structure`` itself) compares structures by design."""
    if not _values_only(vary):
        return
    row = structure_row(first, other)
    if row is None or not row.differs:
        return
    parts = [p if isinstance(p, Part) else None for p in (row.a, row.b)]
    raise ValueError(
        f"study {study!r} varies {list(vary) or 'nothing'}, which changes values only, but {first.variant} and "
        f"{other.variant}{_depth(first)} also differ in structure: first at {row.a} vs "
        f"{row.b}; {first.variant}: {structure.inline(parts[0])}; {other.variant}: {structure.inline(parts[1])}; "
        f"declare \"structure\" in the study's `vary` to compare them anyway, or make the models match "
        f"(`python -m bench diff {first.variant} {other.variant}` shows both)"
    )
