"""Hyperloop Transformers (Zeitoun et al. 2026): the begin/middle/end split of the paper's models, the loop
connection's maps at init, the whole model by hand from §3, the exact parameter count, causality, probes, errors."""

from __future__ import annotations

import math
from typing import cast

import pytest
import torch
import torch.nn.functional as F
from _nets import TINY_LM, assert_causal, randomized, tiny_lm

import variants
from bench.runs.probes import probe
from variants.hyper import MHC_INIT_GAP
from variants.hyperloop import HyperloopLM, LoopConnection, loop_connection_params, loop_split
from variants.transformer import LN_EPS

IDX = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]])


def tiny(**kw: object) -> HyperloopLM:
    return cast(HyperloopLM, tiny_lm("hyperloop", **{"depth": 8, **kw}))


def test_registered_with_the_family_defaults_and_axes() -> None:
    d = variants.describe("hyperloop")
    assert d["defaults"] == {**variants.describe("preln")["defaults"], "n": 4, "loops": None, "middle": None}
    assert d["axes"] == {"combinator": "add, hyperloop", "placement": "pre", "body": "attention+ffn",
                         "norm": "layernorm"}
    assert "2604.21254" in d["paper"]


def test_the_split_is_the_papers_models() -> None:
    """Table 1: [2L -> 4L (x3) -> 2L] at 16, [3L -> 4L (x3) -> 3L] at 18, [4L -> 10L (x3) -> 4L] at 38."""
    assert [loop_split(d, 3) for d in (16, 18, 38)] == [(2, 4, 2), (3, 4, 3), (4, 10, 4)]
    assert loop_split(24, 3) == (3, 6, 3) and loop_split(6, 3) == (0, 2, 0) and loop_split(12, 3) == (2, 3, 1)
    assert loop_split(16, 4, 3) == (2, 3, 2)  # Table 3's [2L -> 3L (x4) -> 2L]
    with pytest.raises(ValueError, match=r"a middle block of 5 layers looped 3 times is 15 layers, more than depth 8"):
        loop_split(8, 3, 5)


def test_loop_maps_at_init() -> None:
    """W = 0: H_pre = σ(±g) (+g on stream l mod n), H_post = 2σ(0) = 1, H_res = diag(σ(0)) = I/2, e_l = 0."""
    model = tiny()
    y = torch.randn(2, 8, 4, TINY_LM["d_model"])
    for loop, join in enumerate(model.connections):
        assert isinstance(join, LoopConnection)
        pre, res, post = join.weights(y)
        want = torch.full((4,), torch.sigmoid(torch.tensor(-MHC_INIT_GAP)).item())
        want[loop % 4] = torch.sigmoid(torch.tensor(MHC_INIT_GAP))
        torch.testing.assert_close(pre, want.expand(2, 8, 4))
        torch.testing.assert_close(post, torch.ones(2, 8, 4))
        torch.testing.assert_close(res, torch.eye(4).expand(2, 8, 4, 4) / 2)
        assert not join.loop_emb.any()


def test_at_init_each_loop_halves_the_stream_and_adds_the_block_of_its_read() -> None:
    """The streams start equal and stay equal (b_post and b_res the same on every stream), so at init the model is
    the recurrence x ← x/2 + F(c·x), c = σ(g) + (n − 1)·σ(−g), on one stream, then the end block."""
    model = tiny().eval()
    c = torch.sigmoid(torch.tensor(MHC_INIT_GAP)) + 3 * torch.sigmoid(torch.tensor(-MHC_INIT_GAP))
    x = model.tok_emb.weight[IDX] + model.pos_emb.weight[: IDX.shape[1]]
    begin, middle, _ = model.split
    with torch.no_grad():
        for blk in model.blocks[:begin]:
            x = blk(x)
        for _ in range(3):
            h = c * x
            for blk in model.blocks[begin:begin + middle]:
                h = blk(h)
            x = x / 2 + h
        for blk in model.blocks[begin + middle:]:
            x = blk(x)
        torch.testing.assert_close(model(IDX), model.norm(x) @ model.tok_emb.weight.T)


def by_hand(model: HyperloopLM, idx: torch.Tensor, n: int) -> torch.Tensor:
    """§3 as printed: the begin block, Y⁽⁰⁾ = n copies, per loop z = RMSNorm(flatten(y)), the three maps (H_res
    diagonal), y ← H_res y + H_postᵀ(F(H_pre y) + e_l) with F the middle block, the mean of the streams, the end
    block, the final norm and the tied head."""
    x = model.tok_emb.weight[idx] + model.pos_emb.weight[: idx.shape[1]]
    begin, middle, _ = model.split
    for blk in model.blocks[:begin]:
        x = blk(x)
    y = torch.stack([x] * n, dim=-2)
    for join in model.connections:
        assert isinstance(join, LoopConnection)
        flat = y.flatten(-2)
        z = flat / torch.sqrt(flat.pow(2).mean(-1, keepdim=True) + LN_EPS)
        h_pre = torch.sigmoid(join.alpha_pre * (z @ join.phi_pre) + join.b_pre)  # (..., n): 1 × n
        h_post = 2 * torch.sigmoid(join.alpha_post * (z @ join.phi_post) + join.b_post)  # n × 1
        h_res = torch.diag_embed(torch.sigmoid(join.alpha_res * (z @ join.phi_res) + join.b_res))
        h = (h_pre.unsqueeze(-2) @ y).squeeze(-2)
        for blk in model.blocks[begin:begin + middle]:
            h = blk(h)
        y = h_res @ y + h_post.unsqueeze(-1) * (h + join.loop_emb).unsqueeze(-2)
    x = y.mean(-2)
    for blk in model.blocks[begin + middle:]:
        x = blk(x)
    return model.norm(x) @ model.tok_emb.weight.T


@pytest.mark.parametrize(("depth", "kw"), [(8, {}), (6, {"n": 3, "loops": 2})])
def test_forward_equals_the_papers_equations(depth: int, kw: dict[str, int]) -> None:
    model = randomized(tiny(depth=depth, **kw))
    torch.testing.assert_close(model(IDX), by_hand(model, IDX, kw.get("n", 4)))


def test_parameter_count_is_about_half_of_preln() -> None:
    """Depth 8 unrolls (1, 2, 1) as 1 + 2×3 + 1: four layers built once (Pre-LN at depth 4), three connections."""
    model = tiny()
    assert model.split == (1, 2, 1) and len(model.blocks) == 4
    pre = tiny_lm("preln", depth=4)
    want = sum(p.numel() for p in pre.parameters()) + 3 * loop_connection_params(4, TINY_LM["d_model"])
    assert sum(p.numel() for p in model.parameters()) == want
    assert loop_connection_params(4, 16) == 3 * 16 * 16 + 3 + 12 + 16


def test_causal() -> None:
    model = randomized(tiny())
    assert_causal(model, IDX, TINY_LM["vocab_size"])


def test_trains_and_probes_see_every_join() -> None:
    model = tiny()
    loss = F.cross_entropy(model(IDX).flatten(0, 1), IDX.roll(-1, 1).flatten())
    assert math.isclose(loss.item(), math.log(TINY_LM["vocab_size"]), rel_tol=0.15)
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    assert all(join.loop_emb.grad.abs().sum() > 0 for join in model.connections)  # every loop's e_l is used
    rows = probe(randomized(tiny()).float(), IDX, IDX, lambda out, y: F.cross_entropy(out.flatten(0, 1),
                                                                                        y.flatten()), step=0)
    joins = [m for m in model.modules() if isinstance(m, variants.Combinator)]
    assert len(joins) == 2 * 4 + 3  # the layers' sublayers, each once, and one connection per loop
    assert {r["layer"] for r in rows if r["metric"] == "out_rms"} == set(range(len(joins)))


@pytest.mark.parametrize(("kw", "message"), [
    ({"n": 0}, r"n \(the number of parallel streams\).*got 0"),
    ({"loops": 0}, r"loops \(how many times.*got 0"),
    ({"loops": 3, "depth": 2}, r"a middle block of 1 layers looped 3 times is 3 layers, more than depth 2"),
    ({"middle": 0}, r"middle \(the layers of the looped middle block\).*got 0"),
    ({"middle": 3}, r"a middle block of 3 layers looped 3 times is 9 layers, more than depth 8"),
])
def test_bad_arguments_raise_naming_them(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tiny(**kw)
