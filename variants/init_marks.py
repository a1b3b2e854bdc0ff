"""Every layer under the run's init: He's draw for every convolution, a plugin's included, and the public marker of
a layer that keeps an init of its own.

Under ``init="kaiming"`` (the CNN families' default, He et al. 2015, "Delving Deep into Rectifiers": normal, fan-out,
ReLU gain, bias 0) the shipped units draw their convolutions as they build them and say so (:func:`drawn`); what no
scheme drew, such as a plugin's plain ``nn.Conv2d`` still at torch's default draw (a uniform 2.5 times narrower for a
1×1 conv of 16 channels), is drawn He's way by :func:`kaiming_` once the model is built, so the run's ``kaiming`` is
true of every convolution. Linear layers follow the shipped designs by role: a hidden linear layer (one a rectifier
follows, as in the MLP family's units) gets He's fan-in normal, bias 0 (:func:`he_fan_in_`; He 2015 derive their
draw for a layer followed by a ReLU, fan-in or fan-out alike), and the classifier, the model's last ``nn.Linear``
in module order, keeps torch's default (uniform within ±1/√fan_in, weight and bias), which every shipped head has:
He 2015 give no draw for the layer that feeds the softmax, and their Torch ResNet code and torchvision keep the
default there. So a plugin's linear layers start as the shipped ones of the same role do; a layer this rule reads
wrongly (a classifier that is not the last linear layer) keeps its own with ``mark_init(layer, "own")``.

A layer that must keep what its constructor gave it, or that the design declares zero at init (a residual branch's
last norm, a projection that starts switched off), says so with :func:`mark_init` (or a class attribute
``init_mark``); a mark covers the module and everything in it, under every scheme. The marks are listed in each
run's JSON (``own_init``); a mark that is not one of :data:`INIT_MARKS` is refused when the model is built.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

import torch
from torch import nn

INIT_MARKS = {
    "own": "keeps the values its constructor drew: no scheme re-draws it",
    "zero": "starts at zero (every parameter in it), as the design declares",
}
ATTRIBUTE = "init_mark"  # where a module carries its mark (an instance or a class attribute)
_DRAWN = "_init_drawn"  # where a layer drawn by a scheme records which (the name of the draw)

ModuleT = TypeVar("ModuleT", bound=nn.Module)


def check_mark(mark: object, where: str) -> str:
    """``mark`` if it is one of :data:`INIT_MARKS`, else ``ValueError`` naming the layer and the marks."""
    if not isinstance(mark, str) or mark not in INIT_MARKS:
        raise ValueError(f"init_mark of layer {where} must be one of {', '.join(INIT_MARKS)}, got {mark!r}")
    return mark


def mark_init(module: ModuleT, mark: str = "own") -> ModuleT:
    """Mark ``module`` (and everything in it): ``"own"`` keeps its constructor's values under every scheme,
    ``"zero"`` starts every parameter in it at zero. Returns ``module``."""
    check_mark(mark, type(module).__name__)
    setattr(module, ATTRIBUTE, mark)
    return module


def drawn(module: ModuleT, how: str) -> ModuleT:
    """Record that a scheme drew ``module``'s weight (``how``: ``"he_fan_out"`` ...): :func:`kaiming_` leaves it."""
    module.__dict__[_DRAWN] = how
    return module


def is_drawn(module: nn.Module) -> bool:
    return _DRAWN in module.__dict__


def marks(model: nn.Module) -> Iterator[tuple[str, nn.Module, str | None]]:
    """Every module of ``model`` with its qualified name and the mark it falls under (its own, else the nearest
    marked ancestor's; None); a mark that is not one of :data:`INIT_MARKS` raises ``ValueError``."""

    def walk(name: str, module: nn.Module, inherited: str | None) -> Iterator[tuple[str, nn.Module, str | None]]:
        own = getattr(module, ATTRIBUTE, None)
        mark = check_mark(own, f"{name or '(the model)'!r} ({type(module).__name__})") if own is not None else inherited
        yield name, module, mark
        for child_name, child in module.named_children():
            yield from walk(f"{name}.{child_name}" if name else child_name, child, mark)

    return walk("", model, None)


def marked_layers(model: nn.Module) -> dict[str, str]:
    """The layers that carry a mark of their own -> the mark (what a run JSON lists as ``own_init``)."""
    return {name or "(the model)": str(getattr(m, ATTRIBUTE)) for name, m, _ in marks(model)
            if getattr(m, ATTRIBUTE, None) is not None}


def kept(model: nn.Module) -> set[int]:
    """``id`` of every module under a mark (what no scheme re-draws)."""
    return {id(m) for _, m, mark in marks(model) if mark is not None}


def he_fan_out_(conv: nn.modules.conv._ConvNd) -> None:
    """He-normal weight (fan-out, ReLU gain) and zero bias, recorded as drawn."""
    nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
    if conv.bias is not None:
        nn.init.zeros_(conv.bias)
    drawn(conv, "he_fan_out")


def he_fan_in_(linear: nn.Linear) -> None:
    """He-normal weight (fan-in, ReLU gain: std √(2 / fan_in)) and zero bias, recorded as drawn: a hidden linear layer
    under ``kaiming``, as the MLP family draws its ReLU layers."""
    nn.init.kaiming_normal_(linear.weight, mode="fan_in", nonlinearity="relu")
    if linear.bias is not None:
        nn.init.zeros_(linear.bias)
    drawn(linear, "he_fan_in")


def classifier(model: nn.Module) -> nn.Linear | None:
    """The model's classifier as the shipped nets build it: its last ``nn.Linear`` in module order (a net registers
    its head after its body); None for a model without one."""
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    return linears[-1] if linears else None


def apply_marks_(model: ModuleT) -> ModuleT:
    """Zero every parameter under a ``"zero"`` mark (validating every mark, also on the meta device)."""
    zero = [m for _, m, mark in marks(model) if mark == "zero"]
    with torch.no_grad():
        for module in zero:
            for p in module.parameters(recurse=False):
                if not p.is_meta:
                    p.zero_()
    return model


def kaiming_(model: ModuleT) -> ModuleT:
    """``kaiming`` for every convolution and hidden linear layer of ``model`` that no scheme drew and no mark keeps
    (module docstring: the classifier keeps torch's default), then the marks; nothing is drawn on the meta device."""
    keep, head = kept(model), classifier(model)
    with torch.no_grad():
        for module in model.modules():
            if id(module) in keep or is_drawn(module) or module is head:
                continue
            if isinstance(module, nn.modules.conv._ConvNd) and not module.weight.is_meta:
                he_fan_out_(module)
            elif isinstance(module, nn.Linear) and not module.weight.is_meta:
                he_fan_in_(module)
    return apply_marks_(model)
