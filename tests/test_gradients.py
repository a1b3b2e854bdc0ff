"""Every shipped join, gate and block: its forward equals its formula, and its gradient is right.

One parametrised test per class. The instance is the first of its class in a small build of a variant that ships it
(float64, every parameter drawn from N(0, 0.5²), every BatchNorm's statistics random, eval mode), called on the inputs
the model's own forward handed it. The value: the module's output equals its formula, written here from the paper
(a join's in full, a unit's and a layer's over their parts, whose own formulas are other cases). The gradient:
``torch.autograd.gradcheck`` of the module as a function of its floating-point inputs and of all its parameters
(:func:`_nets.assert_gradients`), in full where that is small, else in fast mode (one random direction, Jacobian
against finite differences); a detached term, a missing chain-rule factor or a gradient cut by mistake fails it (the
Highway carry cut from its gate: :func:`test_a_carry_cut_from_the_gate_fails_the_gradient_check`). GPAS's
stop-gradient is its paper's: its gradient is compared with the formula's, stop-gradient included.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
import torch
import torch.nn.functional as F
from _nets import assert_gradients, randomize_bn, randomized, sample_input
from torch import nn
from torch.autograd.gradcheck import GradcheckError

import variants
from variants import blocks, combinators, lm_blocks, registry
from variants.dense import LN_EPS
from variants.ngpt import unit as on_sphere
from variants.updates import DELTA_K_EPS, DELTA_V_SCALE

LM = {"depth": 2, "d_model": 8, "n_heads": 2, "d_ff": 8, "vocab_size": 11, "max_len": 8}


@pytest.fixture(autouse=True)
def one_thread() -> Any:
    """Tiny modules: threads only contend (the test machine is shared)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
TOKENS = torch.tensor([[3, 1, 4, 1]])


def _lm(name: str, **kw: Any) -> tuple[nn.Module, torch.Tensor]:
    return variants.create(name, **{**LM, **kw}), TOKENS


def _net(name: str, **kw: Any) -> tuple[nn.Module, torch.Tensor]:
    return variants.create(name, **kw), sample_input(name, batch=1, **kw)


def _direct(unit: nn.Module, *shape: int) -> tuple[nn.Module, torch.Tensor]:
    return unit, torch.randn(*shape, generator=torch.Generator().manual_seed(1))


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + LN_EPS)


def _stack_last(*xs: torch.Tensor) -> torch.Tensor:
    return torch.stack(xs, dim=-2)


class Case(NamedTuple):
    build: Callable[[], tuple[nn.Module, torch.Tensor]]  # a model (or the module itself) and its input
    formula: Callable[..., Any]  # (module, *its inputs) -> its output, by the formula
    inputs: Callable[[tuple[Any, ...]], tuple[Any, ...]] = lambda args: args  # of the call the model made
    stop_gradient: bool = False  # the formula holds a stop-gradient by design: gradients compared with its own


def _hyper(m: nn.Module, h: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
    """Hyper-Connections' join (Eqs. 4-5), ``Ĥ = Bᵀ·F + A_rᵀ·H``, with the join's weights of H."""
    _, a_r, b = m.weights(h)
    return b[..., None] * fx[..., None, :] + a_r.transpose(-1, -2) @ h


def _manifold(m: nn.Module, h: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
    """mHC's join (Eq. 3), ``H_res·x + H_postᵀ·F``, with the join's H_res and H_post of x."""
    _, res, post = m.weights(h)
    return res @ h + post[..., None] * fx[..., None, :]


def _grn(m: nn.Module, history: tuple[torch.Tensor, ...], fx: torch.Tensor) -> torch.Tensor:
    """DCA's GRN-v3: ``x̄ᶜ = Σⱼ (bᶜⱼ + ReLU(wᶜᵀ·RMSNorm(xⱼ)·g)) ⊙ xⱼ``, one row per way c."""
    xs = [*history, fx]
    return torch.stack([sum((m.b[c, j] + F.relu((_rms(x) * m.gain) @ m.w.weight[c])[..., None]) * x
                             for j, x in enumerate(xs)) for c in range(m.b.shape[0])], dim=-2)


def _mudd(m: nn.Module, history: tuple[torch.Tensor, ...], fx: torch.Tensor) -> torch.Tensor:
    """MUDDFormer's connection: ``X̄ᶜ = Σⱼ (aᶜⱼ + [W₂·GELU(W₁·RMSNorm(Xᵢ))]ᶜⱼ)·Xⱼ``."""
    xs = [*history, fx]
    w = m.static + m.w2(F.gelu(m.w1(_rms(fx)))).unflatten(-1, (m.ways, m.n_inputs))
    return torch.stack([sum(w[..., c, j, None] * x for j, x in enumerate(xs)) for c in range(m.ways)], dim=-2)


def _depth_attention(m: nn.Module, earlier: tuple[torch.Tensor, ...], fx: torch.Tensor, scales: Any = None) -> Any:
    """Attention Residuals: ``Σᵢ softmaxᵢ(wᵀ·RMSNorm(vᵢ))·vᵢ``."""
    sources = [*earlier, fx]
    weights = torch.softmax(torch.stack([(_rms(v) * m.gain) @ m.query for v in sources], dim=-1), dim=-1)
    return sum(weights[..., i, None] * v for i, v in enumerate(sources))


def _delta(m: nn.Module, x: torch.Tensor, fx: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Deep Delta Learning: ``x + β·k·(v − kᵀx)``, ``k = F/‖F‖``, ``β = 2σ(w_βᵀh + b)``, ``v = 4σ(w_vᵀx + b)``."""
    k = fx / torch.sqrt(fx.pow(2).sum(-1, keepdim=True) + DELTA_K_EPS ** 2)
    beta, v = 2 * torch.sigmoid(m.beta(h)), DELTA_V_SCALE * torch.sigmoid(m.value(x))
    return x + beta * k * (v - (k * x).sum(-1, keepdim=True))


def _attn_res_unit(u: nn.Module, h: torch.Tensor, past: Any) -> torch.Tensor:
    """Attention over (v₀, the completed blocks' sums, this block's sum so far + F(norm(h))), each read from the Past
    (a sublayer's scales are its sources' own: the formula recomputes them)."""
    x0, *earlier = [v for s, v in zip(u.combine.reads, past.read(u.combine.reads), strict=True)
                    if not s.what.startswith("rms")]  # the sources, without their scales
    closed, rest = earlier[:u.n_closed], earlier[u.n_closed:]
    v = u.body(u.norm_in(h))
    return _depth_attention(u.combine, (x0, *closed), rest[0] + v if rest else v)


def _speedrun_layer(layer: nn.Module, state: Any, past: Any) -> Any:
    if layer.skip_lambda is not None:
        x0, skip = past.read(layer.reads)
        gate = torch.sigmoid(layer.skip_lambda) * 2 * torch.sigmoid(layer.skip_gate(x0[..., :layer.skip_gate
                                                                                       .in_features]))
        state = state._replace(x=state.x + gate * skip)
    return layer.ffn(layer.attn(state, past), past)


def _gpas_layer(b: nn.Module, x: torch.Tensor, past: Any = None) -> torch.Tensor:
    """Two Pre-LN sublayers, each add followed by GPAS with the layer's one α: ``s − SiLU(α)·sg(s)``."""
    alpha = b.attn.combine.alpha

    def join(x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        return (x + fx) - F.silu(alpha) * (x + fx).detach()

    h = join(x, b.attn.body(b.attn.norm_in(x)))
    return join(h, b.ffn.body(b.ffn.norm_in(h)))


def _with_residual(ways: torch.Tensor) -> torch.Tensor:
    return torch.cat((ways, ways[..., :1, :]), dim=-2) if ways.shape[-2] == 3 else ways[..., 0, :]


def _dca_layer(layer: nn.Module, x: torch.Tensor, past: Any) -> Any:
    """x̄ of the next layer: a GRN over x₀ and every update so far (read from the Past) and this layer's a + f."""
    if layer.read_in is not None:
        x = _with_residual(layer.read_in((), *past.read(layer.read_in.reads)))
    update = layer.ffn(layer.attn(x)) - x[..., 3, :]
    return _with_residual(layer.connect(past.read(layer.connect.reads), update))


def _mudd_layer(b: nn.Module, x: torch.Tensor, past: Any) -> torch.Tensor:
    """X̄ of the next layer: the dense connection over X₀ .. Xᵢ (read from the Past) and X_{i+1} = FFN(Attn(X̄ᵢ))."""
    ways = b.connect(past.read(b.connect.reads), b.ffn(b.attn(x)))
    return ways[..., 0, :] if ways.shape[-2] == 1 else ways


def _ordering() -> tuple[nn.Module, torch.Tensor]:
    return _net("preact", depth=8, width=4, order="original")


def _fused() -> tuple[nn.Module, torch.Tensor]:
    model, x = _net("repvgg_cifar", depth=8, width=4)
    return variants.repvgg.fuse(model.eval()), x


def _mixed_layer() -> tuple[nn.Module, torch.Tensor]:
    return variants.build_transformer(variants.Design("pre then post", lambda d: [("pre", "post")] * d), **LM), TOKENS


def _pre(u: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return u.combine(x, u.body(u.norm_in(x)))


def _shortcut_join(u: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return u.combine(u.shortcut(x), u.body(x))


def _post_activation(u: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return u.act(u.combine(u.shortcut(x), u.body(x)))


def _preact(u: nn.Module, x: torch.Tensor) -> torch.Tensor:
    h = u.preact(x)
    return u.combine(u.shortcut(h if u.shares_preact else x), u.body(h))


# Every shipped join, gate and block: where it is found, and its formula.
CASES: dict[str, Case] = {
    # joins
    "variants.combinators.Add": Case(lambda: _lm("preln"), lambda m, x, fx: x + fx),
    "variants.combinators.NoShortcut": Case(lambda: _net("plain_mlp", depth=3, width=6), lambda m, x, fx: fx),
    "variants.combinators.Concat": Case(lambda: _net("densenet", depth=10, growth_rate=2),
                                        lambda m, x, fx: torch.cat([x, fx], dim=1)),
    "variants.combinators.Gate": Case(
        lambda: _net("highway_mlp", depth=3, width=6),
        lambda m, x, fx: torch.sigmoid(m.gate.proj(x)) * fx + (1 - torch.sigmoid(m.gate.proj(x))) * x),
    "variants.combinators.TransformGate": Case(lambda: _net("highway_mlp", depth=3, width=6),
                                               lambda m, x: torch.sigmoid(m.proj(x))),
    "variants.combinators.Scaled": Case(lambda: _lm("admin"), lambda m, x, fx: m.alpha * x + m.beta * fx),
    "variants.combinators.Laurel": Case(
        lambda: _lm("laurel"),
        lambda m, x, fx: 2 * torch.sigmoid(m.weights[0]) * fx + 2 * torch.sigmoid(m.weights[1]) * (
            x + x @ m.down.weight.T @ m.up.weight.T)),
    "variants.attn_res.DepthAttention": Case(lambda: _lm("attn_res"), _depth_attention),
    "variants.dense.GeneralizedResidual": Case(lambda: _lm("dca"), _grn),
    "variants.dense.MultiwayDenseConnection": Case(lambda: _lm("mudd", depth=3), _mudd),
    "variants.frac.FracConnection": Case(
        lambda: _lm("frac_connections", m=2),
        lambda m, h, fx: (m.weights(h)[2][..., None] * fx.unflatten(-1, (2, -1))
                          + m.weights(h)[1].transpose(-1, -2) @ h.unflatten(-1, (2, -1))).flatten(-2),
        inputs=lambda args: args[:2]),
    "variants.hyper.HyperConnection": Case(lambda: _lm("hyper_connections", n=2), _hyper, lambda args: args[:2]),
    "variants.hyper.ManifoldHyperConnection": Case(lambda: _lm("mhc", n=2), _manifold, lambda args: args[:2]),
    "variants.hyper.PermutationHyperConnection": Case(lambda: _lm("mhc_lite", n=3), _manifold,
                                                      lambda args: args[:2]),
    "variants.gomhc.OrthostochasticHyperConnection": Case(lambda: _lm("go_mhc", n=2), _manifold,
                                                          lambda args: args[:2]),
    "variants.hyperloop.LoopConnection": Case(lambda: _lm("hyperloop", n=2, depth=3), _manifold,
                                              lambda args: args[:2]),
    "variants.vwn.GeneralizedHyperConnection": Case(
        lambda: _lm("vwn_1_5x"),
        lambda m, h, fx: m.weights(h)[2] @ fx.unflatten(-1, (m.m, m.width)) + m.weights(h)[1].transpose(-1, -2) @ h,
        inputs=lambda args: args[:2]),
    "variants.gpas.GradientPreservingAdd": Case(
        lambda: _lm("gpas"), lambda m, x, fx: (x + fx) - F.silu(m.alpha) * (x + fx).detach(), stop_gradient=True),
    "variants.nfnet.SkipInitScaled": Case(lambda: _net("nfnet_cifar", depth=14, width=4),
                                          lambda m, x, fx: x + m.alpha * m.skipinit_gain * fx),
    "variants.ngpt.NLerp": Case(lambda: _lm("ngpt"),
                                lambda m, x, fx: on_sphere(x + m.alpha() * (on_sphere(fx) - x))),
    "variants.speedrun.SkipToEmbedding": Case(lambda: _lm("preln_x0"),
                                              lambda m, x, fx, x0: m.resid * x + m.post * fx + m.x0 * x0),
    "variants.updates.DeltaJoin": Case(lambda: _lm("deep_delta"), _delta),
    "variants.updates.Orthogonal": Case(
        lambda: _lm("ortho_preln"),
        lambda m, x, fx: x + fx - (fx * x).sum(-1, keepdim=True) / (x.pow(2).sum(-1, keepdim=True) + m.eps) * x),
    # units
    "variants.blocks.ResidualUnit": Case(lambda: _net("plain_mlp", depth=3, width=6), _shortcut_join),
    "variants.blocks.PostActivation": Case(lambda: _net("residual_mlp", depth=3, width=6), _post_activation),
    "variants.blocks.PostActBasic": Case(lambda: _net("resnet", depth=8, width=4), _post_activation),
    "variants.blocks.PostActBottleneck": Case(lambda: _net("resnet", depth=11, width=2, block="bottleneck"),
                                              _post_activation),
    "variants.blocks.PreActBasic": Case(lambda: _net("preact", depth=8, width=4), _preact),
    "variants.blocks.PreActBottleneck": Case(lambda: _net("preact", depth=11, width=2, block="bottleneck"), _preact),
    "variants.blocks.HighwayUnit": Case(lambda: _net("highway_mlp", depth=3, width=6), _shortcut_join),
    "variants.blocks.PreNorm": Case(lambda: _net("preact_mlp", depth=3, width=6), _pre),
    "variants.blocks.PostNorm": Case(
        lambda: _direct(blocks.PostNorm(nn.Linear(4, 4), combinators.Add(), lambda: nn.LayerNorm(4)), 2, 4),
        lambda u, x: u.norm_out(x + u.body(x))),
    "variants.blocks.SandwichNorm": Case(
        lambda: _direct(blocks.SandwichNorm(nn.Linear(4, 4), combinators.Add(), lambda: nn.LayerNorm(4)), 2, 4),
        lambda u, x: x + u.norm_branch(u.body(u.norm_in(x)))),
    "variants.airbench.AirbenchLayer": Case(lambda: _net("airbench94", width=4), _shortcut_join),
    "variants.convnext.ConvNeXtUnit": Case(lambda: _net("convnext_cifar", depth=11, width=4),
                                           lambda u, x: u.combine(u.down(x), u.body(u.down(x)))),
    "variants.nfnet.NFBlock": Case(
        lambda: _net("nfnet_cifar", depth=14, width=4),
        lambda u, x: u.combine(u.shortcut(u.act(x) * u.beta) if u.projects else x, u.body(u.act(x) * u.beta))),
    "variants.normfree.FixupUnit": Case(lambda: _net("fixup", depth=8, width=4),
                                        lambda u, x: u.act(_shortcut_join(u, u.shared(x)))),
    "variants.preact.OrderingUnit": Case(_ordering, lambda u, x: u.post(_shortcut_join(u, u.shared(x)))),
    "variants.repvgg.RepVGGUnit": Case(lambda: _net("repvgg_cifar", depth=8, width=4), _post_activation),
    "variants.repvgg.FusedRepVGG": Case(_fused, lambda u, x: u.act(u.body(x))),  # the shortcuts fused into W, b
    "variants.resnext.ResNeXtBottleneck": Case(
        lambda: _net("resnext", depth=11, width=4, cardinality=2, bottleneck_width=2), _post_activation),
    "variants.wrn.WideBasic": Case(lambda: _net("wrn", depth=10, width=4, widen_factor=1), _preact),
    "variants.ngpt.HypersphereUnit": Case(lambda: _lm("ngpt"), lambda u, h: u.combine(h, u.body(h))),
    "variants.attn_res.AttnResUnit": Case(lambda: _lm("attn_res", depth=3), _attn_res_unit),
    "variants.dense.MultiInputPreNorm": Case(
        lambda: _lm("dca"),
        lambda u, x: u.combine(x[..., 3, :], u.body(_stack_last(u.norm_q(x[..., 0, :]), u.norm_k(x[..., 1, :]),
                                                                u.norm_v(x[..., 2, :]))))),
    "variants.hyper.HyperUnit": Case(
        lambda: _lm("mhc", n=2),
        lambda u, h: u.combine(h, u.body(u.norm_in(u.combine.read(h))))),
    "variants.lm_blocks.Sublayer": Case(_mixed_layer, lambda u, x, past=None: _pre(u, x)),  # run by a Layer
    "variants.lm_norms.LayerNormScaling": Case(lambda: _lm("lns"),
                                               lambda u, x: u.combine(x, u.body(u.norm_in(x) / math.sqrt(u.layer)))),
    "variants.speedrun.StatePreNorm": Case(lambda: _lm("preln_unet", depth=4),
                                           lambda u, s, past=None: s._replace(x=_pre(u, s.x))),
    "variants.speedrun.SpeedrunUnit": Case(
        lambda: _lm("speedrun", depth=4),
        lambda u, s, past: s._replace(x=u.combine(s.x, u.body(u.norm_in(s.x)) if u.value_table is None else
                                                  u.body(u.norm_in(s.x), s.values[u.value_table]),
                                                  *past.read(u.combine.reads)))),
    "variants.lm_design.DualPostNorm": Case(
        lambda: _lm("resi_dual"),
        lambda u, s: (u.norm_out(s[0] + u.body(s[0])), s[1] + u.body(s[0]))),
    "variants.updates.DeltaPreNorm": Case(lambda: _lm("deep_delta"),
                                          lambda u, x: u.combine(x, u.body(u.norm_in(x)), u.norm_in(x))),
    # layers
    # the layer classes of designs with units of their own: x = ffn(attn(x)), Block's forward, over their units
    "variants.lm_design.DualLayer": Case(lambda: _lm("resi_dual"), lambda b, x, past=None: b.ffn(b.attn(x))),
    "variants.lm_norms.LnsLayer": Case(lambda: _lm("lns"), lambda b, x, past=None: b.ffn(b.attn(x))),
    "variants.updates.DeltaLayer": Case(lambda: _lm("deep_delta"), lambda b, x, past=None: b.ffn(b.attn(x))),
    "variants.hyper.HyperLayer": Case(lambda: _lm("mhc", n=2), lambda b, h, past=None: b.ffn(b.attn(h))),
    "variants.frac.FracLayer": Case(lambda: _lm("frac_connections", m=2), lambda b, h, past=None: b.ffn(b.attn(h))),
    "variants.vwn.VirtualWidthLayer": Case(lambda: _lm("vwn_1_5x"), lambda b, h, past=None: b.ffn(b.attn(h))),
    "variants.lm_norms.ScaledEmbeddingPreLN": Case(  # Pre-LN's layer (its stream scales the embeddings)
        lambda: _lm("dyt_llama"),
        lambda b, x, past=None: (h := x + b.attn.body(b.attn.norm_in(x))) + b.ffn.body(b.ffn.norm_in(h))),
    "variants.lm_blocks.Layer": Case(
        _mixed_layer,
        lambda b, x, past=None: b.ffn.norm_out(_pre(b.attn, x) + b.ffn.body(_pre(b.attn, x)))),
    "variants.lm_blocks.PreLN": Case(
        lambda: _lm("preln"),
        lambda b, x, past=None: (h := x + b.attn.body(b.attn.norm_in(x))) + b.ffn.body(b.ffn.norm_in(h))),
    "variants.lm_blocks.PostLN": Case(
        lambda: _lm("postln"),
        lambda b, x, past=None: b.ffn.norm_out((h := b.attn.norm_out(x + b.attn.body(x))) + b.ffn.body(h))),
    "variants.lm_blocks.PeriLN": Case(
        lambda: _lm("sandwich"),
        lambda b, x, past=None: (h := x + b.attn.norm_branch(b.attn.body(b.attn.norm_in(x))))
        + b.ffn.norm_branch(b.ffn.body(b.ffn.norm_in(h)))),
    "variants.lm_blocks.NoNorm": Case(lambda: _lm("t_fixup"), lambda b, x, past=None: (h := x + b.attn.body(x))
                                      + b.ffn.body(h)),
    "variants.lm_blocks.ReZero": Case(  # x + α·F(x), one α per layer
        lambda: _lm("rezero_lm"),
        lambda b, x, past=None: (h := x + b.attn.combine.beta * b.attn.body(x)) + b.attn.combine.beta * b.ffn.body(h)),
    "variants.lm_blocks.B2T": Case(
        lambda: _lm("b2t"),
        lambda b, x, past=None: b.ffn.norm_out((h := b.attn.norm_out(x + b.attn.body(x))) + b.ffn.body(h) + x)),
    "variants.lm_blocks.HybridNorm": Case(
        lambda: _lm("hybridnorm"),
        lambda b, x, past=None: (h := b.attn.norm_out(x + b.attn.body(x))) + b.ffn.body(h)),
    "variants.dense.MuddLayer": Case(lambda: _lm("mudd", depth=3), _mudd_layer),
    "variants.attn_res.AttnResLayer": Case(lambda: _lm("attn_res", depth=3, n_blocks=2),
                                        lambda b, x, past: b.ffn(b.attn(x, past), past)),
    "variants.attention.ValueResidualPreLN": Case(  # layer 0: its attention leaves V_1 in the Past
        lambda: _lm("value_residual"),
        lambda b, x, past: (h := x + b.attn.body(b.attn.norm_in(x), past)) + b.ffn.body(b.ffn.norm_in(h))),
    "variants.dense.DcaLayer": Case(lambda: _lm("dca"), _dca_layer),
    "variants.speedrun.SpeedrunLayer": Case(lambda: _lm("speedrun", depth=6), _speedrun_layer),
    "variants.speedrun.UnetSkipLayer": Case(lambda: _lm("preln_unet", depth=6), _speedrun_layer),
    "variants.speedrun.BackoutLayer": Case(lambda: _lm("preln_backout", depth=6), _speedrun_layer),
    "variants.gpas.GpasLayer": Case(lambda: _lm("gpas"), _gpas_layer, stop_gradient=True),  # its joins' sg
    "variants.ngpt.Layer": Case(lambda: _lm("ngpt"), lambda b, h: b.ffn(b.attn(h))),
    "variants.densenet.DenseLayer": Case(
        lambda: _net("densenet", depth=10, growth_rate=2),
        lambda d, stream, features: (torch.cat([stream, new := d.rest(d.conv(d.act(d.norm(stream))))], dim=1), new)),
}


def _subclasses(base: type) -> set[type]:
    out, todo = set(), [base]
    while todo:
        cls = todo.pop()
        out.add(cls)
        todo += cls.__subclasses__()
    return {c for c in out if c.__module__.split(".")[0] == "variants"}


# forward not written, or no shipped design builds the class itself (Block: the base of every layer class)
ABSTRACT = {combinators.Combinator, variants.hyper.HyperJoin, variants.hyper.ManifoldJoin, lm_blocks.Block}
SHIPPED = sorted({*_subclasses(combinators.Combinator), combinators.TransformGate, *_subclasses(blocks.ResidualUnit),
                  *_subclasses(lm_blocks.Block), variants.ngpt.Layer, variants.densenet.DenseLayer} - ABSTRACT,
                 key=registry.qualified_name)


def test_every_shipped_join_gate_and_block_has_a_case() -> None:
    assert sorted(CASES) == [registry.qualified_name(c) for c in SHIPPED]


def first_call(model: nn.Module, x: torch.Tensor, cls: type) -> tuple[nn.Module, tuple[Any, ...], dict[str, Any], Any]:
    """The first module of class ``cls`` (exactly) in ``model``, with the inputs and output of its call in one forward
    of ``x``."""
    calls: list[tuple[nn.Module, tuple[Any, ...], dict[str, Any], Any]] = []
    hooks = [m.register_forward_hook(lambda m, a, k, out: calls.append((m, a, k, out)) if not calls else None,
                                     with_kwargs=True) for m in model.modules() if type(m) is cls]
    assert hooks, f"no {cls.__qualname__} in the model"
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return calls[0]


@pytest.mark.parametrize("name", list(CASES))
def test_value_and_gradient(name: str) -> None:
    case = CASES[name]
    torch.manual_seed(0)
    model, x = case.build()
    model = randomize_bn(randomized(model))
    module, args, kwargs, _ = first_call(model, x.double() if x.is_floating_point() else x, _resolve(name))
    args = case.inputs(args)
    with torch.no_grad():
        torch.testing.assert_close(module(*args, **kwargs), case.formula(module, *args, **kwargs))
    assert_gradients(module, *args, like=case.formula if case.stop_gradient else None, **kwargs)


def _resolve(qualified: str) -> type:
    module, _, name = qualified.rpartition(".")
    return getattr(__import__(module, fromlist=[name]), name)


def test_a_carry_cut_from_the_gate_fails_the_gradient_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Highway's carry written ``(1 - t.detach())·x``: the same forward, the gate's gradient through the carry cut.
    The value check passes; the gradient check does not."""

    def cut(self: combinators.Gate, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        t = self.gate(x)
        return t * fx + (1.0 - t.detach()) * x

    monkeypatch.setattr(combinators.Gate, "forward", cut)
    case = CASES["variants.combinators.Gate"]
    torch.manual_seed(0)
    model, x = case.build()
    module, args, _, _ = first_call(randomized(model), x.double(), combinators.Gate)
    with torch.no_grad():
        torch.testing.assert_close(module(*args), case.formula(module, *args))
    with pytest.raises(GradcheckError, match="Jacobian mismatch"):
        assert_gradients(module, *args)
