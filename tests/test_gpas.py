"""GPAS (Chen et al. 2025): the join's forward and backward by hand, Pre-LN at init (forward and gradients), the
whole model by hand with random weights, one α per layer, and the exact parameter count."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _nets import TINY_LM, layer_norm_by_hand, randomized, tiny_lm

import variants
from variants.gpas import GradientPreservingAdd
from variants.transformer import TransformerLM

TINY = TINY_LM
IDX = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]])


def tiny(name: str, **kw: object) -> TransformerLM:
    model = tiny_lm(name, **{**TINY, **kw})
    assert isinstance(model, TransformerLM)
    return model


ln = layer_norm_by_hand


def test_join_scales_the_value_and_passes_the_gradient_through() -> None:
    """α = 0.7: y = (1 − SiLU(0.7))·(x + fx) = (1 − 0.7·σ(0.7))·(x + fx); ∂L/∂x = ∂L/∂fx = ∂L/∂y (the stop-gradient),
    and ∂L/∂α = −SiLU'(α)·⟨x + fx, ∂L/∂y⟩."""
    join = GradientPreservingAdd().double()
    with torch.no_grad():
        join.alpha.fill_(0.7)
    x = torch.tensor([[1.0, -2.0, 0.5]], dtype=torch.float64, requires_grad=True)
    fx = torch.tensor([[0.25, 1.0, -1.5]], dtype=torch.float64, requires_grad=True)
    g = torch.tensor([[2.0, -1.0, 3.0]], dtype=torch.float64)
    y = join(x, fx)
    scale = 1 - 0.7 * (1 / (1 + torch.exp(torch.tensor(-0.7, dtype=torch.float64))))
    torch.testing.assert_close(y, scale * torch.tensor([[1.25, -1.0, -1.0]], dtype=torch.float64))
    (y * g).sum().backward()
    assert x.grad is not None and fx.grad is not None and join.alpha.grad is not None
    torch.testing.assert_close(x.grad, g, rtol=0, atol=0)
    torch.testing.assert_close(fx.grad, g, rtol=0, atol=0)
    s = torch.sigmoid(torch.tensor(0.7, dtype=torch.float64))
    d_silu = s * (1 + 0.7 * (1 - s))
    torch.testing.assert_close(join.alpha.grad, -d_silu * (2.5 + 1.0 - 3.0))


def test_one_alpha_per_layer_shared_by_its_two_joins() -> None:
    model = tiny("gpas")
    for blk in model.blocks:
        assert isinstance(blk.attn.combine, GradientPreservingAdd)
        assert blk.attn.combine.alpha is blk.ffn.combine.alpha and blk.attn.combine.alpha.item() == 0.0
    assert len({id(b.attn.combine.alpha) for b in model.blocks}) == TINY["depth"]


def test_is_preln_at_init_forward_and_backward() -> None:
    """SiLU(0) = 0: Pre-LN's logits and every trunk gradient on Pre-LN's weights, exactly."""
    pre = randomized(tiny("preln"), seed=1)
    model = tiny("gpas").double().eval()
    missing, unexpected = model.load_state_dict(pre.state_dict(), strict=False)
    assert not unexpected and all(k.endswith(".combine.alpha") for k in missing)
    out, want = model(IDX), pre(IDX)
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    target = IDX.roll(-1, 1).flatten()
    F.cross_entropy(out.flatten(0, 1), target).backward()
    F.cross_entropy(want.flatten(0, 1), target).backward()
    grads = dict(pre.named_parameters())
    for name, p in model.named_parameters():
        if name in grads:
            torch.testing.assert_close(p.grad, grads[name].grad, rtol=0, atol=0)


def test_whole_model_by_hand() -> None:
    """``x ← (1 − SiLU(α_l))·(x + F(LN(x)))`` after each sublayer of layer l, then the final LN and the tied head."""
    model = randomized(tiny("gpas"))
    x = model.tok_emb.weight[IDX] + model.pos_emb.weight[:8]
    for blk in model.blocks:
        for unit in (blk.attn, blk.ffn):
            x = (1 - F.silu(unit.combine.alpha)) * (x + unit.body(ln(unit.norm_in, x)))
    torch.testing.assert_close(model(IDX), ln(model.norm, x) @ model.tok_emb.weight.T)


@pytest.mark.parametrize("depth", [1, 3])
def test_parameter_count_is_preln_plus_one_per_layer(depth: int) -> None:
    count = sum(p.numel() for p in tiny("gpas", depth=depth).parameters())
    assert count == sum(p.numel() for p in tiny("preln", depth=depth).parameters()) + depth
    d = variants.describe("gpas")
    assert d["params"] == variants.describe("preln")["params"] + 6 and "2506.22049" in d["paper"]
    assert d["axes"] == {**variants.describe("preln")["axes"], "combinator": "gpas"}
