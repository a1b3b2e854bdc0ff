"""The speedrun's residual tricks one at a time on Pre-LN (``preln_x0``, ``preln_unet``, ``preln_backout``) and
exclusive self attention (``preln_xsa``): each formula by hand in float64, what each is at init against Pre-LN on the
same weights, and the exact parameter counts. Causality, depth, norm types, probes: tests/test_variants_crosslayer.py.
"""

from __future__ import annotations

import math

import pytest
import torch
from _nets import TINY_LM, layer_norm_by_hand, randomized, tiny_lm

import variants
from variants.speedrun import (
    BACKOUT_LAMBDA,
    SKIP_LAMBDA,
    Backout,
    ExclusiveSelfAttention,
    SkipToEmbedding,
    SpeedrunLayer,
    positions,
)
from variants.transformer import CausalSelfAttention, TransformerLM

TINY = {**TINY_LM, "depth": 6}
IDX = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]])
TRICKS = ["preln_x0", "preln_unet", "preln_backout", "preln_xsa"]


def tiny(name: str, **kw: object) -> TransformerLM:
    model = tiny_lm(name, **{**TINY, **kw})
    assert isinstance(model, TransformerLM)
    return model


ln = layer_norm_by_hand


def embed(model: TransformerLM, idx: torch.Tensor) -> torch.Tensor:
    return model.tok_emb.weight[idx] + model.pos_emb.weight[: idx.shape[1]]


def head(model: TransformerLM, x: torch.Tensor) -> torch.Tensor:
    return ln(model.norm, x) @ model.tok_emb.weight.T


def with_preln_weights(name: str, seed: int = 1) -> tuple[TransformerLM, TransformerLM]:
    """(Pre-LN with random weights, ``name`` with the same trunk): only the trick's own parameters are new."""
    pre = randomized(tiny("preln"), seed=seed)
    model = tiny(name).double().eval()
    missing, unexpected = model.load_state_dict(pre.state_dict(), strict=False)
    assert not unexpected, unexpected
    new = {"preln_x0": ".combine.", "preln_unet": "skip_", "preln_backout": "stream.backout", "preln_xsa": "-"}[name]
    assert all(new in k for k in missing), missing
    return pre, model


def test_registered_on_preln_with_the_axis_each_changes() -> None:
    base = variants.describe("preln")
    own = {"preln_x0": ("combinator", "speedrun"), "preln_unet": ("stream", "unet"),
           "preln_backout": ("stream", "backout"), "preln_xsa": ("attention", "xsa")}
    for name, (axis, value) in own.items():
        d = variants.describe(name)
        assert d["family"] == "transformer" and d["defaults"] == base["defaults"], name
        assert d["axes"] == {**base["axes"], axis: value}, name
    assert all("modded-nanogpt" in variants.describe(n)["paper"] for n in TRICKS[:3])
    assert "2603.09078" in variants.describe("preln_xsa")["paper"]


def test_x0_forward_is_the_records_join() -> None:
    """``x ← λ_res·x + λ_post·F(LN(x)) + λ₀·x₀`` in every sublayer, x₀ the embeddings; the final norm and tied head."""
    model = randomized(tiny("preln_x0"))
    x = x0 = embed(model, IDX)
    for blk in model.blocks:
        for unit in (blk.attn, blk.ffn):
            j = unit.combine
            assert isinstance(j, SkipToEmbedding)
            x = j.resid * x + j.post * unit.body(ln(unit.norm_in, x)) + j.x0 * x0
    torch.testing.assert_close(model(IDX), head(model, x))


def test_x0_is_preln_at_init() -> None:
    """λ_res = λ_post = 1 and λ₀ = 0: Pre-LN's logits on Pre-LN's weights, to rounding."""
    pre, model = with_preln_weights("preln_x0")
    joins = [u.combine for b in model.blocks for u in (b.attn, b.ffn)]
    assert all(j.resid.item() == j.post.item() == 1.0 and j.x0.item() == 0.0 for j in joins)
    torch.testing.assert_close(model(IDX), pre(IDX), rtol=1e-12, atol=1e-12)


def preln_by_hand(model: TransformerLM, idx: torch.Tensor) -> list[torch.Tensor]:
    """The Pre-LN stream x_0 (the embeddings), x_1 .. x_L after each layer, the U-net skip added where the model has
    one: ``x ← x + σ(λ_skip)·2σ(W_s·x₀[:12])·x_skip`` before the layer it lands at."""
    xs = [embed(model, idx)]
    x, skip = xs[0], None
    for blk in model.blocks:
        assert isinstance(blk, SpeedrunLayer)
        if blk.skip_lambda is not None:
            assert skip is not None
            w = blk.skip_gate.weight  # (1, 12)
            x = x + torch.sigmoid(blk.skip_lambda) * 2 * torch.sigmoid(xs[0][..., :12] @ w.T) * skip
        for unit in (blk.attn, blk.ffn):
            x = x + unit.body(ln(unit.norm_in, x))
        if blk.skip_in:
            skip = x
        xs.append(x)
    return xs


def test_unet_skip_goes_from_layer_2_to_layer_3_of_6_as_the_record_scales() -> None:
    model = randomized(tiny("preln_unet"))
    at = positions(6)
    assert [b.skip_in for b in model.blocks] == [i == at["skip_in"] for i in range(6)] == [i == 2 for i in range(6)]
    assert [b.skip_lambda is not None for b in model.blocks] == [i == 3 for i in range(6)]
    assert not any(b.backout for b in model.blocks)
    torch.testing.assert_close(model(IDX), head(model, preln_by_hand(model, IDX)[-1]))


def test_unet_at_init_adds_the_records_fixed_share_of_the_skip() -> None:
    """W_s = 0 and λ_skip = −1.5: every token gets σ(−1.5)·2σ(0) = 0.1824 of the stream after layer 2 added before
    layer 3; the rest is Pre-LN on Pre-LN's weights."""
    pre, model = with_preln_weights("preln_unet")
    blk = model.blocks[3]
    assert blk.skip_lambda.item() == SKIP_LAMBDA and not blk.skip_gate.weight.any()
    x, saved = embed(model, IDX), torch.zeros(())
    for i, layer in enumerate(pre.blocks):
        if i == 3:
            x = x + torch.sigmoid(torch.tensor(SKIP_LAMBDA, dtype=torch.float64)) * saved
        x = layer(x)
        saved = x if i == 2 else saved
    assert torch.sigmoid(torch.tensor(SKIP_LAMBDA)).item() == pytest.approx(0.18243, abs=1e-5)
    torch.testing.assert_close(model(IDX), head(pre, x), rtol=1e-12, atol=1e-12)


def test_backout_subtracts_the_stream_after_layer_4_of_6() -> None:
    """``y = x_L − λ_b·x_k`` before the final norm, k = ⌊2L/3⌋ (layer index 4 of 0..5, its output: x_5)."""
    model = randomized(tiny("preln_backout"))
    assert [b.backout for b in model.blocks] == [i == 4 for i in range(6)]
    assert isinstance(model.stream, Backout)
    xs = preln_by_hand(model, IDX)
    torch.testing.assert_close(model(IDX), head(model, xs[-1] - model.stream.backout * xs[5]))


def test_backout_at_init_and_at_zero() -> None:
    """λ_b = 0.5 at init (the record's): half the stream after layer 4 removed; λ_b = 0 is Pre-LN exactly."""
    pre, model = with_preln_weights("preln_backout")
    assert model.stream.backout.item() == BACKOUT_LAMBDA == 0.5
    x, saved = embed(pre, IDX), None
    for i, layer in enumerate(pre.blocks):
        x = layer(x)
        saved = x if i == 4 else saved
    assert saved is not None
    torch.testing.assert_close(model(IDX), head(pre, x - 0.5 * saved), rtol=1e-12, atol=1e-12)
    with torch.no_grad():
        model.stream.backout.zero_()
    torch.testing.assert_close(model(IDX), pre(IDX), rtol=1e-12, atol=1e-12)


def xsa_by_hand(attn: ExclusiveSelfAttention, x: torch.Tensor, alpha: float) -> torch.Tensor:
    """Per head: y_i = Σ_{j≤i} softmax(q_i·k_j/√d_h) v_j, z_i = y_i − α·(y_i·v_i)/‖v_i‖²·v_i; heads concatenated,
    then the output projection."""
    _, t, c = x.shape
    d_h = c // attn.n_heads
    q, k, v = attn.qkv(x).split(c, dim=-1)
    mask = torch.ones(t, t, dtype=torch.bool).triu(1)
    out = []
    for h in range(attn.n_heads):
        cols = slice(h * d_h, (h + 1) * d_h)
        qh, kh, vh = q[..., cols], k[..., cols], v[..., cols]
        y = torch.softmax((qh @ kh.transpose(1, 2) / math.sqrt(d_h)).masked_fill(mask, -math.inf), -1) @ vh
        z = y - alpha * (y * vh).sum(-1, keepdim=True) / (vh * vh).sum(-1, keepdim=True) * vh
        out.append(z)
    return attn.proj(torch.cat(out, -1))


def test_xsa_attention_by_hand() -> None:
    torch.manual_seed(0)
    attn = ExclusiveSelfAttention(d_model=8, n_heads=2, dropout=0.0, bias=True).double().eval()
    with torch.no_grad():
        attn.proj.bias.normal_()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    assert attn.alpha == 1.0
    got = attn(x)
    torch.testing.assert_close(got, xsa_by_hand(attn, x, 1.0))
    # The first token attends to itself only: y_0 = v_0, so z_0 = 0 and its output is the projection's bias.
    torch.testing.assert_close(got[:, 0], attn.proj.bias.expand(2, 8), rtol=0, atol=1e-12)
    plain = CausalSelfAttention(8, 2, 0.0, True).double()
    plain.load_state_dict(attn.state_dict())
    attn.alpha = 0.0
    torch.testing.assert_close(attn(x), plain(x), rtol=0, atol=0)


def test_xsa_model_is_preln_with_alpha_zero_and_not_at_the_papers_alpha() -> None:
    pre, model = with_preln_weights("preln_xsa")
    assert not torch.allclose(model(IDX), pre(IDX))
    for blk in model.blocks:
        assert isinstance(blk.attn.body, ExclusiveSelfAttention)
        blk.attn.body.alpha = 0.0
    torch.testing.assert_close(model(IDX), pre(IDX), rtol=0, atol=0)


@pytest.mark.parametrize(("name", "depth", "extra"), [
    ("preln_x0", 6, 3 * 2 * 6),  # λ_res, λ_post, λ₀ per sublayer
    ("preln_unet", 6, 1 + 12),  # λ_skip and W_s (1 × 12) at the one layer the skip lands at
    ("preln_unet", 2, 0),  # round(6/11) = round(12/11) = 1: the skip would not go forward, so there is none
    ("preln_backout", 6, 1),  # λ_b
    ("preln_xsa", 6, 0),  # XSA is a projection: no weights
])
def test_parameter_counts(name: str, depth: int, extra: int) -> None:
    count = sum(p.numel() for p in tiny(name, depth=depth).parameters())
    assert count == sum(p.numel() for p in tiny("preln", depth=depth).parameters()) + extra
    assert variants.describe(name)["params"] == variants.describe("preln")["params"] + (extra if depth == 6 else 13)


def test_the_tricks_take_no_speedrun_arguments() -> None:
    with pytest.raises(ValueError, match=r"'preln_x0' takes no keyword argument\(s\) \['n_value_embeds'\]"):
        tiny("preln_x0", n_value_embeds=1)
