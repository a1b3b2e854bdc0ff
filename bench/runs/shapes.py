"""The reference shapes ``bench cost`` measures designs at, and the designs built and counted there.

A shape (:data:`SHAPES`: GPT-2 small and medium at 1,024 tokens, ResNet-50 at 224x224, the CIFAR ResNet-110, the quick
presets' Transformer, the digits task's nets) fixes the model arguments every design is built with, one sample's input,
the family's baseline and the batch a step is timed at; ``--depth`` rebuilds it at another depth (:func:`at_depth`).
:func:`check_designs` refuses, naming the field, a design that is not registered or does not build at the shape, and
:func:`count` gives a design's parameters and the exact training FLOPs of one sample (``torch.utils.flop_counter`` on
the meta device: no memory, no compute). What a step takes to run is :mod:`bench.runs.side_by_side`'s.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import variants
from bench.runs import measure


@dataclass(frozen=True)
class Shape:
    """A reference shape: the model arguments every design is built with, one sample's input, the family's baseline
    and the families whose designs it admits."""

    name: str
    what: str  # the model and where its sizes come from
    baseline: str
    families: tuple[str, ...]
    model_args: dict[str, Any]
    sample: tuple[int, ...]  # one input's shape (tokens: (seq_len,); images: (C, H, W))
    classes: int  # the vocabulary or the classes
    batch: int = 1  # timed on a CPU
    at_any_depth: str = ""  # ``what`` less its depth: the description of the shape built at another ``--depth``
    own_depth: int | None = None  # the shape's own depth where :func:`at_depth` rebuilt it at another

    @property
    def tokens(self) -> bool:
        return len(self.sample) == 1

    def inputs(self, batch: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(0)
        if self.tokens:
            x = torch.randint(0, self.classes, (batch, *self.sample), generator=g)
            y = torch.randint(0, self.classes, (batch, *self.sample), generator=g)
        else:
            x = torch.randn(batch, *self.sample, generator=g)
            y = torch.randint(0, self.classes, (batch,), generator=g)
        return x.to(device), y.to(device)

    def loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.flatten(0, -2).float(), y.flatten())


_GPT2 = {"vocab_size": 50257, "max_len": 1024}
_CONV_FAMILIES = ("resnet", "plain", "highway", "preact", "normfree", "densenet", "wrn", "resnext", "convnext",
                  "repvgg", "nfnet")
SHAPES: dict[str, Shape] = {s.name: s for s in (
    Shape("gpt2_small", "GPT-2 small (Radford et al. 2019, 124M): 12 layers x 768, 12 heads, d_ff 3,072, vocabulary "
          "50,257, one sequence of 1,024 tokens", "preln", ("transformer",),
          {"depth": 12, "d_model": 768, "n_heads": 12, "d_ff": 3072, **_GPT2}, (1024,), 50257,
          at_any_depth="GPT-2 small's width (768, 12 heads, d_ff 3,072, vocabulary 50,257), one sequence of 1,024 "
          "tokens"),
    Shape("gpt2_medium", "GPT-2 medium (Radford et al. 2019, 350M): 24 layers x 1,024, 16 heads, d_ff 4,096, "
          "vocabulary 50,257, one sequence of 1,024 tokens", "preln", ("transformer",),
          {"depth": 24, "d_model": 1024, "n_heads": 16, "d_ff": 4096, **_GPT2}, (1024,), 50257,
          at_any_depth="GPT-2 medium's width (1,024, 16 heads, d_ff 4,096, vocabulary 50,257), one sequence of 1,024 "
          "tokens"),
    Shape("resnet50_224", "ResNet-50 (He et al. 2015, Table 1) on one 224x224 ImageNet image, 1,000 classes",
          "resnet50", ("resnet_imagenet",), {"num_classes": 1000}, (3, 224, 224), 1000,
          at_any_depth="ImageNet ResNets (He et al. 2015, Table 1) on one 224x224 image, 1,000 classes"),
    Shape("study_quick", "the Transformer the frontier and crosslayer studies' quick presets train (6 layers x 64, 4 "
          "heads, d_ff 256, GPT-2's init, bytes: vocabulary 256), on 16 sequences of 32 tokens: the width their "
          "committed runs were made at, where a design's joins weigh more than at GPT-2's", "preln", ("transformer",),
          {"depth": 6, "d_model": 64, "n_heads": 4, "d_ff": 256, "init": "gpt2", "vocab_size": 256, "max_len": 32},
          (32,), 256, batch=16, at_any_depth="the quick presets' Transformer width (64, 4 heads, d_ff 256, GPT-2's "
          "init, bytes: vocabulary 256) on 16 sequences of 32 tokens"),
    Shape("cifar_resnet110", "the CIFAR ResNet-110 (He et al. 2015, §4.2: 6n+2 layers, n = 18) on 32x32 images, "
          "10 classes, timed at 8 images", "resnet", _CONV_FAMILIES, {"depth": 110, "num_classes": 10},
          (3, 32, 32), 10, batch=8, at_any_depth="CIFAR nets (He et al. 2015, §4.2) on 32x32 images, 10 classes, "
          "timed at 8 images"),
    Shape("digits", "CIFAR nets (He et al. 2015, §4.2) of depth 20 on the bundled digits task's 8x8 one-channel "
          "images, 10 classes, timed at 128 images, the batch of the degradation study", "resnet", _CONV_FAMILIES,
          {"depth": 20, "num_classes": 10, "in_chans": 1}, (1, 8, 8), 10, batch=128,
          at_any_depth="CIFAR nets (He et al. 2015, §4.2) on the bundled digits task's 8x8 one-channel images, 10 "
          "classes, timed at 128 images, the batch of the degradation study"),
)}  # fmt: skip


MODES = ("eager", "compiled")  # how a step runs: as written, or under torch.compile
PRECISIONS = ("fp32", "bf16")  # the step's arithmetic: fp32, or bf16 autocast (weights and optimiser state fp32)


def shape_of(name: str) -> Shape:
    if name not in SHAPES:
        raise ValueError(f"shape: unknown shape {name!r}; shapes: {', '.join(SHAPES)}")
    return SHAPES[name]


def designs_for(shape: Shape) -> list[str]:
    """The registered variants of a shape's families (any other registered variant that builds at the shape is
    admitted too: :func:`check_designs`)."""
    return sorted(n for family in shape.families for n in variants.list_variants(family=family))


MAX_DEPTH = 2000  # deeper than any published CIFAR/ImageNet net (ResNet-1202) or Transformer stack we ship


def check_depth(depth: Any) -> None:
    """ValueError naming ``depth`` and its range where it is no model depth ``--depth`` takes."""
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
        raise ValueError(f"depth must be an integer in 1..{MAX_DEPTH}, got {depth!r}")


def at_depth(shape: Shape, depth: int | None) -> Shape:
    """``shape`` with its model's depth replaced (``--depth``); ValueError naming ``depth`` and its range."""
    if depth is None:
        return shape
    check_depth(depth)
    return dataclasses.replace(shape, name=f"{shape.name} at depth {depth}", own_depth=shape.model_args.get("depth"),
                               what=f"{shape.at_any_depth or shape.what}, every model at depth {depth}",
                               model_args={**shape.model_args, "depth": depth})


def check_designs(shape: Shape, designs: Sequence[str], modes: Sequence[str] = ("eager",), precision: str = "fp32",
                  baseline: str | None = None, role: str = "designs") -> None:
    """ValueError naming the field for an unregistered design or ``baseline`` (with the closest names), one that does
    not build at ``shape`` (of another kind of model: ``role``, the caller's name for ``designs``, or ``baseline``; at
    a ``--depth`` its rule refuses where it builds at the shape's own: ``depth``, naming the role, with the builder's
    own message, which says the depths it takes), an unknown mode or an unknown precision. A design of any family, a
    plugin's included, is admitted where it builds."""
    own = dataclasses.replace(shape, model_args={**shape.model_args, "depth": shape.own_depth})
    for field_, names in (("baseline", [baseline] if baseline is not None else []), (role, designs)):
        for name in names:
            check_builds(name, field_, functools.partial(build, name, shape),
                         f"at shape {shape.name!r} ({shape.what}; model arguments {shape.model_args})",
                         shape.model_args.get("depth"),
                         functools.partial(build, name, own) if shape.own_depth is not None else None)
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise ValueError(f"unknown mode(s) {', '.join(map(repr, bad))}; modes: {', '.join(MODES)}")
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; precisions: {', '.join(PRECISIONS)}")


def check_builds(name: str, field_: str, make: Callable[[], object], at: str, depth: int | None = None,
                 at_own_depth: Callable[[], object] | None = None) -> None:
    """ValueError naming the field where ``name`` is not registered (``field_``, with the closest names) or where
    ``make`` (building it) is refused on the meta device: ``depth``, naming ``field_``, where only ``depth`` is refused
    (``at_own_depth``, the same build at its own depth, succeeds), with the builder's own message, which says the
    depths it takes; else ``field_``, ``at`` saying with what it does not build. Shared by ``bench cost``'s designs
    (:func:`check_designs`) and ``bench diff``'s two without a shape."""
    try:
        variants.describe(name)
    except ValueError as e:
        raise ValueError(f"{field_}: {e}") from None
    refused = _refusal(make)
    if refused is None:
        return
    if at_own_depth is not None and _refusal(at_own_depth) is None:
        raise ValueError(f"depth: {name!r} ({field_}) does not build at depth {depth}: {refused}")
    raise ValueError(f"{field_}: {name!r} does not build {at}: {refused}")


def _refusal(make: Callable[[], object]) -> Exception | None:
    """The ValueError or TypeError a builder raises when ``make`` builds on the meta device (no memory, no compute);
    None where it builds."""
    try:
        with torch.device("meta"):
            make()
    except (ValueError, TypeError) as e:
        return e
    return None


def build_args(design: str, shape: Shape) -> dict[str, Any]:
    """The keyword arguments ``design`` is built with at ``shape``: the shape's model arguments, less those the design
    fixes (``bench diff --shape`` builds with the same); a timm model fixes its depth by its name."""
    fixed = variants.describe(design).get("fixed", {})
    timm = variants.registry.is_timm(design)
    return {k: v for k, v in shape.model_args.items() if k not in fixed and not (timm and k == "depth")}


def build(design: str, shape: Shape) -> nn.Module:
    """``design`` at ``shape`` (:func:`build_args`)."""
    return variants.create(design, **build_args(design, shape))


@dataclass(frozen=True)
class Counted:
    """What the meta device says of a design at a shape: parameters and one sample's training FLOPs."""

    params: int
    flops: measure.StepFlops


def count(design: str, shape: Shape) -> Counted:
    with torch.device("meta"):
        params = sum(p.numel() for p in build(design, shape).parameters())
    x, y = shape.inputs(1, "meta")
    return Counted(params, measure.meta_step_flops(lambda: build(design, shape), x, y, shape.loss))
