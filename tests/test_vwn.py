"""Virtual Width Networks (Seed 2025): the GHC matrices at init (Eqs. 15-16), the backbone equal to Pre-LN's at init,
the whole model by hand from Algorithm 1 and Eqs. 10-14, the exact parameter count, causality, probes, errors."""

from __future__ import annotations

import math
from typing import cast

import pytest
import torch
import torch.nn.functional as F
from _nets import TINY_LM, assert_causal, layer_norm_by_hand, randomized, tiny_lm
from torch import nn

import variants
from bench.runs.probes import probe
from variants.hyper import HyperUnit
from variants.transformer import LN_EPS, TransformerLM
from variants.vwn import GeneralizedHyperConnection, VirtualWidthStream, ghc_init, ghc_params, vwn_params

IDX = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]])
ln = layer_norm_by_hand


def tiny(name: str = "vwn", **kw: object) -> TransformerLM:
    return cast(TransformerLM, tiny_lm(name, **{"m": 2, "n": 6, **kw} if name == "vwn" else kw))


def units(model: TransformerLM) -> list[HyperUnit]:
    out = [unit for blk in model.blocks for unit in (blk.attn, blk.ffn)]
    assert all(isinstance(u, HyperUnit) and isinstance(u.combine, GeneralizedHyperConnection) for u in out)
    return cast(list[HyperUnit], out)


def test_registered_with_the_family_defaults_and_axes() -> None:
    d = variants.describe("vwn")
    assert d["defaults"] == {**variants.describe("preln")["defaults"], "m": 8, "n": 64, "dynamic": True}
    assert d["axes"] == {"combinator": "ghc", "placement": "pre", "body": "attention+ffn", "norm": "layernorm"}
    assert "2511.11238" in d["paper"]
    lite = variants.describe("vwn_1_5x")
    assert lite["defaults"]["m"] == 2 and lite["defaults"]["n"] == 3 and "§5.1" in lite["paper"]


def test_static_matrices_are_eqs_15_and_16() -> None:
    """(m, n) = (2, 5): A = [[I₂, I₂, 0], [0, 0, I₃]] (n × (m + n)), B[i, j] = 1 where i = j mod m."""
    a, b = ghc_init(2, 5)
    i2, i3 = torch.eye(2), torch.eye(3)
    assert torch.equal(a, torch.cat((torch.cat((i2, i2, torch.zeros(2, 3)), 1),
                                     torch.cat((torch.zeros(3, 4), i3), 1)), 0))
    assert torch.equal(b, torch.tensor([[1.0, 0, 1, 0, 1], [0, 1, 0, 1, 0]]))
    join = units(tiny())[0].combine
    assert not join.w_alpha.any() and not join.w_beta.any() and torch.equal(join.s_alpha, torch.ones(6, 8))
    assert join.tau == pytest.approx(math.sqrt(TINY_LM["d_model"] / 2))


@pytest.mark.parametrize(("m", "n"), [(2, 6), (2, 3)])
def test_the_backbone_computes_preln_at_init(m: int, n: int) -> None:
    """Å = [I; 0], Â = I, W = 0: every sublayer reads the first D features, which receive every sublayer's output and
    nothing else, so each sublayer's input is Pre-LN's exactly (same trunk weights); the head sees a mix of all."""
    pre = randomized(tiny("preln"), seed=1)
    model = tiny(m=m, n=n).double().eval()
    missing, unexpected = model.load_state_dict(pre.state_dict(), strict=False)
    assert not unexpected and all(".combine." in k or k.startswith(("stream.", "wide_emb.")) for k in missing)
    seen: dict[str, list[torch.Tensor]] = {"pre": [], "vwn": []}
    hooks = [unit.body.register_forward_hook(lambda mod, a, o, key=key: seen[key].append(a[0]))
             for key, net in (("pre", pre), ("vwn", model)) for blk in net.blocks for unit in (blk.attn, blk.ffn)]
    model(IDX), pre(IDX)
    for h in hooks:
        h.remove()
    assert len(seen["vwn"]) == 2 * TINY_LM["depth"]
    for a, b in zip(seen["vwn"], seen["pre"], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    assert not torch.allclose(model(IDX), pre(IDX))


def vwn_by_hand(model: TransformerLM, idx: torch.Tensor, m: int, n: int) -> torch.Tensor:
    """Algorithm 1 as printed, slots as columns: H'⁰ = Reshape(e, (n, D'/n))ᵀ (d_b × n); per sublayer X = Åᵀ-mixed
    slots, z = T(X), H' = Zᴮ + H'Â (Eq. 10, with the DGHC terms of Eqs. 12-14 per slot); h = Linear(GroupNorm(H'));
    the final norm and the tied head."""
    d = model.tok_emb.weight.shape[1]
    width = d // m
    x = model.tok_emb.weight[idx] + model.pos_emb.weight[: idx.shape[1]]
    e = torch.cat((x, model.wide_emb.weight[idx]), -1)
    hp = e.unflatten(-1, (n, width)).transpose(-1, -2)  # (B, T, d_b, n): H' of Algorithm 1
    for unit in units(model):
        g = unit.combine
        a, b = g.a * 1, g.b * 1  # A (n × (m + n)), B (m × n)
        if g.norm is not None:
            h_bar = ln(g.norm, hp.transpose(-1, -2))  # (B, T, n, d_b): norm of each slot
            a = g.s_alpha * torch.tanh(h_bar @ g.w_alpha / math.sqrt(width)) + a  # Eq. 14
            b = g.s_beta * torch.tanh(h_bar @ g.w_beta / math.sqrt(width)).transpose(-1, -2) + b  # Eq. 13
        a_in, a_carry = a[..., :, :m], a[..., :, m:]
        xl = hp @ a_in  # (d_b × n)(n × m): Xˡ = Åᵀ H' with slots as columns
        z = unit.body(ln(unit.norm_in, xl.transpose(-1, -2).flatten(-2)))  # T = F ∘ LN, input Reshape(X, (D,))
        zl = z.unflatten(-1, (m, width)).transpose(-1, -2)  # Zˡ (d_b × m)
        hp = zl @ b + hp @ a_carry  # H'ˡ = Bᵀ Z + Âᵀ H' (columns)
    h = hp.transpose(-1, -2).flatten(-2)  # back to the wide vector
    stream = model.stream
    assert isinstance(stream, VirtualWidthStream)
    if stream.groups:
        grouped = h.unflatten(-1, (stream.groups, d))
        mu, var = grouped.mean(-1, keepdim=True), grouped.var(-1, unbiased=False, keepdim=True)
        h = ((grouped - mu) / torch.sqrt(var + LN_EPS)).flatten(-2) * stream.gn_weight + stream.gn_bias
    return ln(model.norm, stream.reduce(h)) @ model.tok_emb.weight.T


@pytest.mark.parametrize(("m", "n", "dynamic"), [(2, 6, True), (2, 6, False), (2, 3, True)])
def test_forward_equals_the_papers_equations(m: int, n: int, dynamic: bool) -> None:
    model = randomized(tiny(m=m, n=n, dynamic=dynamic))
    torch.testing.assert_close(model(IDX), vwn_by_hand(model, IDX, m, n))


@pytest.mark.parametrize(("m", "n"), [(2, 6), (2, 3)])
def test_parameter_count(m: int, n: int) -> None:
    model, pre = tiny(m=m, n=n), tiny("preln")
    base = sum(p.numel() for p in pre.parameters())
    norm = 2 * TINY_LM["d_model"] // m  # a LayerNorm of width d_b: weight and bias
    assert sum(p.numel() for p in model.parameters()) == vwn_params(
        variants.TransformerSpec(**TINY_LM), m, n, base, norm)
    assert ghc_params(2, 6, 16, 16) == 2 * 6 * 8 + 2 * 12 + 8 * 10 + 16
    spec = variants.TransformerSpec()  # the registry's default sizes, the paper's (8, 64)
    assert variants.describe("vwn")["params"] == vwn_params(spec, 8, 64, variants.describe("preln")["params"],
                                                            2 * spec.d_model // 8)


def test_causal() -> None:
    model = randomized(tiny())
    assert_causal(model, IDX, TINY_LM["vocab_size"])


def test_trains_and_probes_see_every_sublayer() -> None:
    model = tiny(depth=2)
    loss = F.cross_entropy(model(IDX).flatten(0, 1), IDX.roll(-1, 1).flatten())
    assert math.isclose(loss.item(), math.log(TINY_LM["vocab_size"]), rel_tol=0.15)
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    assert model.wide_emb.weight.grad.abs().sum() > 0  # the over-width features reach the loss through W_reduce
    rows = probe(randomized(tiny(depth=2)).float(), IDX, IDX,
                 lambda out, y: F.cross_entropy(out.flatten(0, 1), y.flatten()), step=0)
    assert {r["layer"]: r["kind"] for r in rows} == {i: ("attn", "ffn")[i % 2] for i in range(4)}
    assert all(isinstance(u.body, nn.Module) for u in units(model))


@pytest.mark.parametrize(("kw", "message"), [
    ({"m": 0}, r"m \(the pieces .*positive integer, got 0"),
    ({"n": 2}, r"n \(2\) must exceed m \(2\): the stream is n/m times the backbone's width"),
    ({"m": 3, "n": 6}, r"d_model \(16\) must be divisible by m \(3\)"),
    ({"dynamic": "yes"}, r"dynamic"),
])
def test_bad_arguments_raise_naming_them(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tiny(**kw)
