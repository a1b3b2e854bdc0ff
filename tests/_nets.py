"""Helpers shared by the variant tests: one norm randomiser and one input per family."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_unflatten

import variants

M = TypeVar("M", bound=nn.Module)


def randomize_bn(model: nn.Module, seed: int = 0) -> nn.Module:
    """Non-trivial running statistics and affine parameters for every BatchNorm (1d/2d), so a formula test
    that misplaces a norm fails (a fresh BN in eval mode is the identity)."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            c = m.num_features
            with torch.no_grad():
                m.running_mean.copy_(torch.rand(c, generator=g) - 0.5)
                m.running_var.copy_(torch.rand(c, generator=g) + 0.5)
                for affine, shift in ((m.weight, 0.5), (m.bias, -0.5)):
                    if affine is not None:  # airbench's norms keep a bias only
                        affine.copy_(torch.rand(c, generator=g) + shift)
    return model


def randomized(model: M, seed: int = 0) -> M:
    """``model`` in float64 and eval mode with every parameter (gains, gates, residual scales, mixing weights)
    drawn from N(0, 0.5²): nothing sits at its init, so a formula test bites on every term."""
    g = torch.Generator().manual_seed(seed)
    model = model.double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5)
    return model



def assert_gradients(module: nn.Module, *args: Any, like: Callable[..., Any] | None = None, **kwargs: Any) -> None:
    """``torch.autograd.gradcheck`` of ``module(*args, **kwargs)`` (float64) as a function of every floating-point
    tensor in ``args`` and ``kwargs`` (in tuples, lists and named tuples too) and of every parameter of ``module``, in
    ``fast_mode``: ``vᵀ·J·u`` for random directions u and v, autograd's against finite differences (two forwards per
    input, one backward: cheap at any size, and a wrong gradient fails it but with probability zero). A join of one's
    own is checked the same way, on its ``(x, fx, *sources)``.

    ``like``: the formula ``like(module, *args, **kwargs)``, holding a stop-gradient by design (GPAS's), whose
    gradient (autograd's, along a random output direction) the module's must equal instead."""
    leaves, spec = tree_flatten((args, kwargs))
    at = [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor) and v.is_floating_point()]
    named = dict(module.named_parameters())
    inputs = tuple(t.detach().clone().requires_grad_() for t in [*(leaves[i] for i in at), *named.values()])

    def outputs(formula: Callable[..., Any] | None, *flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        filled = list(leaves)
        for i, value in zip(at, flat, strict=False):
            filled[i] = value
        a, k = tree_unflatten(filled, spec)
        params = dict(zip(named, flat[len(at):], strict=True))
        if formula is None:
            out = torch.func.functional_call(module, params, a, k)
        else:
            with torch.nn.utils.stateless._reparametrize_module(module, params):
                out = formula(module, *a, **k)
        return tuple(t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.is_floating_point())

    if like is None:
        torch.autograd.gradcheck(lambda *flat: outputs(None, *flat), inputs, fast_mode=True)
        return
    g = torch.Generator().manual_seed(0)
    grads = []
    for formula in (None, like):
        outs = outputs(formula, *inputs)
        total = sum((o * torch.randn(o.shape, generator=g, dtype=o.dtype)).sum() for o in outs)
        grads.append(torch.autograd.grad(total, inputs, allow_unused=True))
        g.manual_seed(0)
    for ours, theirs in zip(*grads, strict=True):
        assert (ours is None) == (theirs is None)
        if ours is not None:
            torch.testing.assert_close(ours, theirs)


# A Transformer at test size: depth 3, width 16, 2 heads, a vocabulary of 11 (the hand-computed tests' sizes).
TINY_LM = {"depth": 3, "d_model": 16, "n_heads": 2, "d_ff": 24, "vocab_size": 11, "max_len": 8}


def tiny_lm(name: str, **kw: object) -> nn.Module:
    """``name`` built at :data:`TINY_LM`'s sizes (``kw`` overrides them), checked to be a TransformerLM."""
    from variants.transformer import TransformerLM

    model = variants.create(name, **{**TINY_LM, **kw})
    assert isinstance(model, TransformerLM)
    return model


def assert_causal(model: nn.Module, idx: torch.Tensor, vocab_size: int, at: int = 5) -> None:
    """Changing token ``at`` of ``idx`` leaves every earlier position's logits exactly as they were and changes
    the later ones."""
    changed = idx.clone()
    changed[:, at] = (changed[:, at] + 1) % vocab_size
    a, b = model(idx), model(changed)
    torch.testing.assert_close(a[:, :at], b[:, :at], rtol=0, atol=0)
    assert not torch.allclose(a[:, at:], b[:, at:])


def layer_norm_by_hand(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``norm`` (a LayerNorm with a bias) applied by its formula: (x − μ)/√(σ² + ε)·γ + β."""
    assert isinstance(norm, nn.LayerNorm) and norm.bias is not None
    mu = x.mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + norm.eps) * norm.weight + norm.bias


def write(path: Path, text: str) -> Path:
    """``text`` (dedented) into ``path``, creating its folders: a plugin or a study file of a test."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def sample_input(name: str, batch: int = 2, **overrides: object) -> torch.Tensor:
    """A batch the variant ``name`` (built with ``overrides``) accepts: token ids or small images."""
    kw = {**variants.describe(name)["defaults"], **overrides}
    family = variants.describe(name)["family"]
    if family == "transformer":
        return torch.randint(0, int(kw["vocab_size"]), (batch, 8))
    if family == "mlp":
        return torch.randn(batch, int(kw["in_chans"]), int(kw["image_size"]), int(kw["image_size"]))
    # Five stride-2 steps (the ImageNet nets: 1000 classes) or airbench's 2x2 whitening and three poolings need more
    # than 8 pixels.
    size = 32 if family in ("resnet_imagenet", "airbench") or kw.get("num_classes") == 1000 else 8
    return torch.randn(batch, int(kw["in_chans"]), size, size)


# Keyword arguments that set a model's size and nothing else: registrations of one builder that build the same
# classes and differ only in these are one code path (resnet20 ... resnet1202, densenet40_k12 and densenet100_k12).
SHAPE_KEYS = frozenset({"depth", "depths", "dims", "width", "widen_factor", "growth_rate", "cardinality",
                        "bottleneck_width", "multipliers", "d_model", "n_heads", "d_ff", "vocab_size", "max_len",
                        "num_classes", "in_chans", "image_size"})


def code_path(name: str) -> tuple[object, ...]:
    """What a registration builds apart from its size: its builder, the classes of its residual stream (ImageNet
    ResNets change block with depth) and every keyword argument that is not a size (init, block, shortcut ...)."""
    spec = variants.registry._REGISTRY[name]
    rest = {k: repr(v) for k, v in variants.describe(name)["defaults"].items() if k not in SHAPE_KEYS}
    return spec.builder, variants.registry.anatomy(name), tuple(sorted(rest.items()))


def code_paths(names: list[str] | None = None) -> list[str]:
    """One name per distinct :func:`code_path` of ``names`` (default: every registered variant), the one with the
    fewest parameters standing for the others; sorted. Per-name tests parametrise over these: an alias at another
    size runs no code its smallest sibling does not (its size is pinned on the meta device by the count tests)."""
    chosen: dict[tuple[object, ...], str] = {}
    for name in variants.list_variants() if names is None else names:
        key = code_path(name)
        if key not in chosen or variants.describe(name)["params"] < variants.describe(chosen[key])["params"]:
            chosen[key] = name
    return sorted(chosen.values())


# A complete plugin: a ResNet whose shortcut is scaled by a fixed factor, built from the public pieces.
TOY = '''
import torch
from torch import nn

import variants


class HalfShortcut(variants.Combinator):
    axis = "half"

    def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        return 0.5 * x + fx


@variants.register("{name}", family="toy", paper="a test", spec=variants.CifarSpec(depth=8, init="{init}"))
def build(spec: variants.CifarSpec) -> nn.Module:
    def unit(s: variants.Slot) -> nn.Module:
        return variants.PostActBasic(s.cin, s.width, s.stride, combine=lambda c: HalfShortcut())

    return variants.build_cifar(spec, unit, what="toy net")
'''


def toy(name: str = "toy_half", init: str = "kaiming") -> str:
    return TOY.format(name=name, init=init)


class PluginJoin(nn.Module):
    """A plugin's join that subclasses nothing of ours: ``y = x + g·F(x)``, declared by ``variants.roles``."""

    residual_role = "join"

    def __init__(self, g: float) -> None:
        super().__init__()
        self.g = nn.Parameter(torch.tensor(g))

    def residual_scalars(self) -> dict[str, torch.Tensor]:
        return {"beta": self.g}

    def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        return x + self.g * fx


class PluginGate(nn.Module):
    """A plugin's gate ``T(x) = sigmoid(Wx + b)`` with W = 0, b = ``bias``: T = sigmoid(bias) everywhere."""

    residual_role = "gate"

    def __init__(self, d: int, bias: float) -> None:
        super().__init__()
        self.proj = nn.Linear(d, d)
        nn.init.zeros_(self.proj.weight)
        nn.init.constant_(self.proj.bias, bias)

    def residual_scalars(self) -> dict[str, torch.Tensor]:
        return {"bias": self.proj.bias}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.proj(x))


class PluginUnit(nn.Module):
    """``y = x + g·T(x)·F(x)``, F = Linear-ReLU: a plugin's gated unit built from the two above."""

    def __init__(self, d: int, g: float, bias: float) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, d), nn.ReLU())
        self.gate = PluginGate(d, bias)
        self.join = PluginJoin(g)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.join(x, self.gate(x) * self.body(x))


def plugin_net(d: int = 4) -> nn.Module:
    """Two :class:`PluginUnit` (g 0.25 and 0.5, gate bias -2 and -1) after a Linear stem, then a Linear head."""
    return nn.Sequential(nn.Linear(d, d), PluginUnit(d, 0.25, -2.0), PluginUnit(d, 0.5, -1.0), nn.Linear(d, 3))
