"""The initialisation schemes of the Transformer family, an axis of its own (``init``): each fills the linear weights
of every sublayer body (biases start at 0, norms at weight 1 / bias 0, embeddings the GPT-2 way: the model's), and
every other linear or convolution of the model, a plugin's join or stream included (:func:`others`), unless a mark
keeps it (:func:`variants.init_marks.mark_init`: the shipped joins whose paper gives their layers an init say so).

- ``xavier`` (the family default, :data:`DEFAULT_INIT`): Glorot & Bengio 2010, as Vaswani et al. 2017.
- ``gpt2``: N(0, 0.02), residual projections N(0, 0.02/√(2N)) — Radford et al. 2019, GPT-2 §2.3.
- ``normal``: N(0, 0.02) everywhere (LLaMA; the setup Mix-LN trains in).
- ``deepnorm``: β-scaled Xavier — Wang et al. 2022, "DeepNet", Fig. 2.
- ``t_fixup``: Huang et al. 2020, "Improving Transformer Optimization Through Better Initialization", Algorithm 1.
- ``admin``: Liu et al. 2020, "Understanding the Difficulty of Training Transformers", §4.3 (a profiling pass).

A plugin adds a draw ``(weight) -> None`` with ``variants.register_init`` or passes it directly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol, cast

import torch
from torch import nn

from . import axes, init_marks
from .combinators import Scaled

InitArg = Callable[[torch.Tensor], object]  # draw(weight): fills one weight in place


class Stack(Protocol):
    """What a scheme reads of a Transformer LM (:class:`~variants.transformer.TransformerLM`)."""

    blocks: nn.ModuleList
    tok_emb: nn.Embedding
    max_len: int

    def bodies(self) -> list[tuple[Any, nn.Module]]: ...

    def modules(self) -> Any: ...

    def __call__(self, idx: torch.Tensor) -> torch.Tensor: ...


def deepnorm_alpha_beta(depth: int) -> tuple[float, float]:
    """DeepNet's decoder-only constants (Wang 2022, Fig. 2): α = (2N)^¼ on the shortcut, β = (8N)^-¼ on the init."""
    if depth < 1:
        raise ValueError(f"depth must be >= 1 (number of Transformer layers), got {depth}")
    return (2 * depth) ** 0.25, (8 * depth) ** -0.25


def linears(body: nn.Module) -> list[nn.Linear]:
    """The ``nn.Linear`` layers of a sublayer body in module order: q|k|v then the output projection for the
    attention, fc1 then fc2 for the shipped feed-forward bodies (a registered one: whatever it holds). The last is
    the projection back into the residual stream."""
    return [m for m in body.modules() if isinstance(m, nn.Linear)]


def others(model: Stack) -> list[torch.Tensor]:
    """The weight of every ``nn.Linear`` and convolution of the model outside its sublayer bodies (a join's, a
    stream's: a plugin's own layers) in module order, but those a mark keeps (``own``, ``zero``) or a scheme drew."""
    in_bodies = {id(m) for pair in model.bodies() for body in pair for m in body.modules()}
    keep = init_marks.kept(cast(nn.Module, model))
    return [cast(torch.Tensor, m.weight) for m in model.modules()
            if isinstance(m, (nn.Linear, nn.modules.conv._ConvNd))
            and id(m) not in in_bodies and id(m) not in keep and not init_marks.is_drawn(m)]


def _init_gpt2(model: Stack) -> None:
    """GPT-2 / Megatron: N(0, 0.02); residual output projections N(0, 0.02/√(2N)) (GPT-2 §2.3, N layers); every other
    layer (:func:`others`) N(0, 0.02), as GPT-2 draws every weight that is not a residual projection."""
    resid_std = 0.02 / math.sqrt(2 * len(model.blocks))
    for attn, ffn in model.bodies():
        for lins in (linears(attn), linears(ffn)):
            for i, lin in enumerate(lins):
                nn.init.normal_(lin.weight, std=resid_std if i == len(lins) - 1 else 0.02)
    for weight in others(model):
        nn.init.normal_(weight, std=0.02)


def _init_draw(model: Stack, draw: Callable[[torch.Tensor], object]) -> None:
    """``draw`` on every linear weight of every sublayer body, attention then feed-forward, layer by layer, then on
    every other layer's (:func:`others`)."""
    for attn, ffn in model.bodies():
        for lin in (*linears(attn), *linears(ffn)):
            draw(lin.weight)
    for weight in others(model):
        draw(weight)


def _init_normal(model: Stack) -> None:
    """LLaMA-style N(0, 0.02) everywhere, no depth scaling (the setup Mix-LN trains in)."""
    _init_draw(model, lambda w: nn.init.normal_(w, std=0.02))


def _init_xavier(model: Stack) -> None:
    """Xavier-uniform (Glorot 2010), as tensor2tensor/PyTorch ``nn.Transformer`` (fused q|k|v like ``in_proj``)."""
    _init_draw(model, nn.init.xavier_uniform_)


def _init_deepnorm(model: Stack) -> None:
    """DeepNet Fig. 2: xavier_normal with gain β on ffn, v and out projections, gain 1 on q and k and on every other
    layer (:func:`others`: the paper scales only the sublayers' projections)."""
    _, beta = deepnorm_alpha_beta(len(model.blocks))
    for attn, ffn in model.bodies():
        d = attn.proj.weight.shape[0]
        with torch.no_grad():
            for rows, gain in ((slice(0, d), 1.0), (slice(d, 2 * d), 1.0), (slice(2 * d, 3 * d), beta)):
                nn.init.xavier_normal_(attn.qkv.weight[rows], gain=gain)  # q, k, v each a d×d matrix
        for lin in (attn.proj, *linears(ffn)):
            nn.init.xavier_normal_(lin.weight, gain=beta)
    for weight in others(model):
        nn.init.xavier_normal_(weight)


def t_fixup_scale(depth: int) -> float:
    """T-Fixup's decoder factor (Huang et al. 2020, Algorithm 1 step 2): (9N)^-¼ for N decoder layers."""
    if depth < 1:
        raise ValueError(f"depth must be >= 1 (number of Transformer layers), got {depth}")
    return (9 * depth) ** -0.25


def _init_t_fixup(model: Stack) -> None:
    """Huang et al. 2020, "Improving Transformer Optimization Through Better Initialization", Algorithm 1 (decoder):
    Xavier-uniform everywhere; token embeddings N(0, d^-½); then v, the attention output projection, both feed-
    forward matrices and the token embeddings scaled by (9N)^-¼ (q and k keep Xavier). The learned position
    table keeps the family's N(0, 0.01): the paper's positions are fixed sinusoids, outside Algorithm 1."""
    _init_xavier(model)
    scale = t_fixup_scale(len(model.blocks))
    d = model.tok_emb.weight.shape[1]
    with torch.no_grad():
        nn.init.normal_(model.tok_emb.weight, std=d ** -0.5)
        model.tok_emb.weight.mul_(scale)
        for attn, ffn in model.bodies():
            attn.qkv.weight[2 * d:].mul_(scale)  # v (rows 2d:3d of the fused q|k|v)
            for lin in (attn.proj, *linears(ffn)):
                lin.weight.mul_(scale)


def _init_admin(model: Stack) -> None:
    """Liu et al. 2020, "Understanding the Difficulty of Training Transformers" (Admin, §4.3): Post-LN with
    ``x_i = LN(ω_i ⊙ x_{i-1} + f_i(x_{i-1}))``, ω_i a learnable vector set by one profiling forward pass.

    Xavier weights first (the family default); then the recurrence of the authors' code (Transformer-Clinic,
    ``adaptive-profiling``), sublayer by sublayer in forward order: ``ω_1 = 1``,
    ``ω_{i+1} = √(Var[ω_i·x_{i-1}] + Var[f_i(x_{i-1})])`` (variances over the whole batch), i.e. the paper's
    ``ω_i² = Σ_{j<i} Var[f_j]`` plus the embeddings' variance. The authors profile on the first training
    batch; the registry builds a model before it sees data, so the profile here runs on 4 sequences of
    uniformly random tokens drawn from torch's generator (reproducible under the run's seed)."""
    _init_xavier(model)
    if model.tok_emb.weight.is_meta:  # a meta-device build (describe, the confound guard): shapes only
        return
    if not _admin_joins(model):  # no ω to set (a design without Admin's joins): Xavier, and no profiling pass,
        return  # which would run the forward of a model whose subclass has not finished building it
    vocab, device = model.tok_emb.num_embeddings, model.tok_emb.weight.device
    admin_profile(model, torch.randint(0, vocab, (4, min(model.max_len, 64)), device=device))


def _admin_joins(model: Stack) -> list[nn.Module]:
    """The learnable shortcut weights ω Admin's profile sets: every :class:`Scaled` join with a learnable alpha."""
    return [m for m in model.modules() if isinstance(m, Scaled) and isinstance(m.alpha, nn.Parameter)]


def admin_profile(model: Stack, idx: torch.Tensor) -> None:
    """Set every learnable shortcut weight ω (Admin's) by the profiling recurrence of :func:`_init_admin` on the
    token batch ``idx``, in one forward pass without gradients."""
    joins = _admin_joins(model)
    running = [1.0]

    def profile(module: nn.Module, args: tuple[torch.Tensor, torch.Tensor]) -> None:
        x, fx = args
        alpha = cast(nn.Parameter, cast(Scaled, module).alpha)
        alpha.data.fill_(running[0])
        running[0] = math.sqrt(float((alpha * x).var()) + float(fx.var()))

    hooks = [j.register_forward_pre_hook(profile) for j in joins]
    try:
        with torch.no_grad():
            model(idx)
    finally:
        for h in hooks:
            h.remove()


INITS: dict[str, Callable[[Stack], None]] = {
    "gpt2": _init_gpt2,
    "normal": _init_normal,
    "xavier": _init_xavier,
    "deepnorm": _init_deepnorm,
    "t_fixup": _init_t_fixup,
    "admin": _init_admin,
}
axes.ship("init", INITS)
# One default for every placement (Xiong et al. 2020 ran Post-LN and Pre-LN under Xavier): a comparison of
# placements must not also compare initialisations.
DEFAULT_INIT = "xavier"


def resolve_init(init: object) -> tuple[str, Callable[[Stack], None]]:
    """``(name, scheme)`` of an ``init`` argument: a name of :data:`INITS`, a registered init (``variants.
    register_init``) or a draw ``(weight) -> Any`` passed directly; either draw fills every sublayer's linear
    weights and every other layer's (:func:`_init_draw`)."""
    name, value = axes.lookup("init", init, INITS, message=lambda known: (
        f"unknown init {init!r}; choose one of: {', '.join(known)} (or pass a draw (weight) -> None)"))
    if isinstance(init, str) and init in INITS:
        return name, cast(Callable[[Stack], None], value)
    return name, partial(_init_draw, draw=cast(InitArg, value))
