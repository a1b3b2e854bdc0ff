"""What a built model is made of, unit by unit: the structural description ``bench diff`` and the study guard share.

Axes and keyword arguments say what a model *should* be; two models that agree on all of them can still be built
differently (SkipInit's branch is ReLU-conv-ReLU-conv, ReZero's conv-ReLU-conv: De & Smith 2020 §4 vs Bachlechner
et al. 2020 §3, both ``y = x + α·F(x)``). :func:`describe` reads the structure off the model itself:

- a *unit* is the nearest module above a join (a module declaring ``residual_role = "join"``,
  :mod:`variants.roles`) that is not a container (``nn.Sequential``, ``nn.ModuleList``, ``nn.ModuleDict``), the
  rule of :func:`variants.registry.derive_anatomy`; units nested in a unit belong to the outer one;
- an *op* is a module the forward calls that computes something of its own: a leaf module, a module with
  parameters of its own, or a join or gate. It is written as its class (a convolution with its kernel, stride
  and groups: ``Conv2d 3x3/2``) and its parameters with their shapes, each learned or ``fixed`` (a parameter
  that does not require grad, a residual scalar that is a constant). The identity and the regularisers that are
  the identity at evaluation (dropout, drop-path) are left out: their rates are compared as keyword arguments;
- ops come in the order the forward calls them: one forward in eval mode under ``torch.no_grad()`` on a single
  zero input shaped for the first layer (a token sequence for an embedding, a 32×32 image for a convolution,
  a vector for a linear layer), hooked on every module; a model on the meta device computes nothing. Registration
  order can mislead (a pre-activation unit registers its branch before the ``preact`` it runs first), so it is
  used only when that forward fails, and the description says so (``order``);
- a *part* is a maximal run of ops of one unit, or of ops outside every unit (a stem, a head), named by their
  module path; two structures are equal when their parts have equal ops in the same order (names and
  unit classes aside: a plugin may call its branch otherwise);
- an op's *links* are what it reads besides its own inputs: the earlier values a module declares in ``reads``
  (:mod:`variants.links`: the embeddings, another sublayer's branch output ``F(blocks.0.attn)`` or output
  ``out(blocks.0.ffn)``), and, for a join, the streams its shortcut input holds where that has one dimension more
  than its branch output (mHC's four: ``x (4 streams)``). They are part of the op, so two models whose sublayers
  read other values differ in structure; :func:`links` lists them part by part (``bench diff``'s ``reads`` rows).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from timm.layers import DropPath
from torch import nn

from variants.links import reads
from variants.roles import is_join, learnable, residual_role, residual_scalars

_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
_NO_OPS = (nn.Identity, nn.modules.dropout._DropoutNd, DropPath)
IMAGE_SIZE = 32
SEQ_LEN = 8


@dataclass(frozen=True)
class Param:
    """One parameter (or declared residual scalar) of an op: its name, shape, and whether training changes it."""

    name: str
    shape: tuple[int, ...]
    learnable: bool

    def __str__(self) -> str:
        return f"{self.name}[{','.join(map(str, self.shape))}]" + ("" if self.learnable else " fixed")


@dataclass(frozen=True)
class Op:
    """One module call: ``kind`` (class, with a convolution's kernel/stride/groups), its parameters and its links
    (``reads``: what it reads besides its own inputs, module docstring)."""

    kind: str
    params: tuple[Param, ...]
    where: str = field(default="", compare=False)  # its module path in the model (not compared)
    reads: tuple[str, ...] = ()

    def __str__(self) -> str:
        return " ".join([self.kind, *map(str, self.params)]) + (f" <- {', '.join(self.reads)}" if self.reads else "")


@dataclass(frozen=True)
class Part:
    """A run of ops of one unit (``unit``: its class) or outside every unit (``unit`` None), named by module path."""

    name: str
    unit: str | None
    ops: tuple[Op, ...]

    def same(self, other: Part | None) -> bool:
        return other is not None and (self.unit is None) == (other.unit is None) and self.ops == other.ops

    def __str__(self) -> str:
        if self.unit is None:
            return f"{self.name or 'the model'} (outside the units)"
        return f"unit {self.name or 'the model'} ({self.unit.rsplit('.', 1)[-1]})"


@dataclass(frozen=True)
class Structure:
    """A model's parts in the order its forward runs them; ``order`` is ``"execution"`` or ``"registration"``."""

    parts: tuple[Part, ...]
    order: str

    @property
    def units(self) -> tuple[Part, ...]:
        return tuple(p for p in self.parts if p.unit is not None)

    def summary(self) -> str:
        names = {p.name for p in self.units}
        return f"{len(names)} units, {sum(len(p.ops) for p in self.parts)} ops ({self.order} order)"


def _kind(module: nn.Module) -> str:
    name = type(module).__name__
    if isinstance(module, nn.modules.conv._ConvNd):
        kind = f"{name} {'x'.join(map(str, module.kernel_size))}"
        if any(s != 1 for s in module.stride):
            kind += "/" + "x".join(map(str, module.stride)) if len(set(module.stride)) > 1 else f"/{module.stride[0]}"
        return kind + (f" g{module.groups}" if module.groups != 1 else "")
    return name


op_kind = _kind  # public: `show-variant` names a shortcut's parts as the structure names its ops


def _op(module: nn.Module, where: str, streams: int | None = None) -> Op:
    params = [Param(n, tuple(p.shape), p.requires_grad) for n, p in module.named_parameters(recurse=False)]
    with torch.enable_grad():  # a scalar computed from a parameter (LAuReL's 2σ(a)) requires grad only here
        declared = residual_scalars(module)
    params += [Param(n, tuple(v.shape), learnable(v)) for n, v in declared.items()
               if not any(v is p for p in module.parameters())]  # a declared parameter is listed where it lives
    links = ([f"x ({streams} streams)"] if streams else []) + [str(source) for source in reads(module)]
    return Op(_kind(module), tuple(params), where, tuple(links))


def _streams(module: nn.Module, args: Any) -> int | None:
    """The streams a join's shortcut input holds: its next-to-last size where it has one dimension more than the
    branch output (mHC's (..., n, d) against (..., d)), else None."""
    if not is_join(module) or len(args) < 2:
        return None
    x, fx = args[0], args[1]
    if isinstance(x, torch.Tensor) and isinstance(fx, torch.Tensor) and x.dim() == fx.dim() + 1:
        return int(x.shape[-2])
    return None


def _is_op(module: nn.Module) -> bool:
    if isinstance(module, _NO_OPS):
        return False
    has_children = next(module.children(), None) is not None
    return (not has_children or residual_role(module) is not None
            or next(module.parameters(recurse=False), None) is not None)


def unit_names(model: nn.Module) -> list[str]:
    """Module paths of the model's units (outermost only), in ``named_modules()`` order."""
    parents: dict[str, str] = {}
    for name, _ in model.named_modules():
        if name:
            parents[name] = name.rsplit(".", 1)[0] if "." in name else ""
    modules = dict(model.named_modules())
    found: dict[str, None] = {}
    for name, module in modules.items():
        if not is_join(module) or not name:
            continue
        unit = parents[name]
        while unit and isinstance(modules[unit], _CONTAINERS):
            unit = parents[unit]
        found[unit] = None
    units = list(found)
    return [u for u in units if not any(_inside(u, v) for v in units if v != u)]


def _inside(name: str, unit: str) -> bool:
    return unit == "" or name == unit or name.startswith(f"{unit}.")


def example_input(model: nn.Module) -> torch.Tensor | None:
    """A single zero input shaped for the model's first layer (module docstring), on its device; None if unknown."""
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if isinstance(module, nn.Embedding):
            return torch.zeros(1, SEQ_LEN, dtype=torch.long, device=module.weight.device)
        if isinstance(module, nn.modules.conv._ConvNd) and isinstance(weight, torch.Tensor):
            dims = len(module.kernel_size)
            return torch.zeros(1, module.in_channels, *[IMAGE_SIZE] * dims, device=weight.device)
        if isinstance(module, nn.Linear):
            return torch.zeros(1, module.in_features, device=module.weight.device)
    return None


@contextmanager
def _evaluating(model: nn.Module) -> Iterator[None]:
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, mode in modes:
            m.training = mode


def _called(model: nn.Module) -> list[tuple[str, nn.Module, int | None]] | None:
    """The op modules in the order one forward calls them (module docstring), each with the streams of a join's
    shortcut input (:func:`_streams`), or None where the forward cannot run."""
    x = example_input(model)
    if x is None:
        return None
    calls: list[tuple[str, nn.Module, int | None]] = []
    with ExitStack() as stack, torch.no_grad(), _evaluating(model):
        for name, module in model.named_modules():
            if _is_op(module):
                def hook(m: nn.Module, args: Any, out: Any, name: str = name) -> None:
                    calls.append((name, m, _streams(m, args)))

                stack.callback(module.register_forward_hook(hook).remove)
        try:
            model(x)
        except Exception:  # any model may refuse a guessed input: registration order then
            return None
    return calls


def describe(model: nn.Module) -> Structure:
    """The :class:`Structure` of a built model (module docstring)."""
    calls = _called(model)
    order = "execution"
    if calls is None:
        calls, order = [(n, m, None) for n, m in model.named_modules() if _is_op(m)], "registration"
    units = unit_names(model)
    modules = dict(model.named_modules())
    parts: list[Part] = []
    run: list[Op] = []
    owner: str | None = None
    for name, module, streams in calls:
        unit = next((u for u in units if _inside(name, u)), None)
        if run and unit != owner:
            parts.append(_part(owner, run, modules))
            run = []
        owner = unit
        run.append(_op(module, name, streams))
    if run:
        parts.append(_part(owner, run, modules))
    return Structure(tuple(parts), order)


def _part(unit: str | None, ops: Sequence[Op], modules: dict[str, nn.Module]) -> Part:
    if unit is not None:
        cls = type(modules[unit])
        return Part(unit, f"{cls.__module__}.{cls.__qualname__}", tuple(ops))
    paths = [op.where.split(".") for op in ops]
    common = []
    for pieces in zip(*paths, strict=False):
        if len(set(pieces)) != 1:
            break
        common.append(pieces[0])
    return Part(".".join(common), None, tuple(ops))


def first_difference(a: Structure, b: Structure) -> int | None:
    """Index of the first part in which ``a`` and ``b`` differ (one may have run out of parts), or None."""
    for i in range(max(len(a.parts), len(b.parts))):
        pa = a.parts[i] if i < len(a.parts) else None
        pb = b.parts[i] if i < len(b.parts) else None
        if pa is None or not pa.same(pb):
            return i
    return None


def part_at(s: Structure, index: int) -> Part | None:
    return s.parts[index] if index < len(s.parts) else None


def sequences(name_a: str, part_a: Part | None, name_b: str, part_b: Part | None) -> str:
    """Both parts' ops side by side, one op a line, aligned where they agree (``difflib``: an op only one model
    has faces ``-``), the lines that differ marked."""
    ops_a = part_a.ops if part_a is not None else ()
    ops_b = part_b.ops if part_b is not None else ()
    pairs: list[tuple[str, str, bool]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, ops_a, ops_b, autojunk=False).get_opcodes():
        left, right = [str(o) for o in ops_a[i1:i2]], [str(o) for o in ops_b[j1:j2]]
        for k in range(max(len(left), len(right))):
            pairs.append((left[k] if k < len(left) else "-", right[k] if k < len(right) else "-", tag == "equal"))
    head_a = f"{name_a}: {part_a if part_a is not None else '(no such part)'}"
    head_b = f"{name_b}: {part_b if part_b is not None else '(no such part)'}"
    width = max([len(la) for la, _, _ in pairs] + [len(head_a)])
    lines = [f"  {head_a:<{width}}  {head_b}"]
    lines += [f"  {la:<{width}}  {rb}{'' if same else '   <- differs'}" for la, rb, same in pairs]
    return "\n".join(lines)


def links(s: Structure) -> dict[str, str]:
    """What each unit and each op outside the units reads, by module path: a unit its input ``x`` (with its streams
    where it holds several) and the links of its ops; an op outside every unit (DenseFormer's averages) its links,
    where it has any."""
    out: dict[str, list[str]] = {}
    for part in s.parts:
        if part.unit is None:
            for op in part.ops:
                if op.reads:
                    out.setdefault(op.where, []).extend(op.reads)
            continue
        found = [link for op in part.ops for link in op.reads]
        found = found if any(link.startswith("x (") for link in found) else ["x", *found]
        out.setdefault(part.name, []).extend(found)
    return {name: ", ".join(dict.fromkeys(found)) for name, found in out.items()}


def inline(part: Part | None) -> str:
    """A part's ops on one line: ``ReLU > Conv2d 3x3 weight[16,16,3,3] bias[16] > ...``."""
    return "(none)" if part is None else " > ".join(map(str, part.ops))
