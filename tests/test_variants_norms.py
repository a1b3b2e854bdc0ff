"""The 2025 norm types (DyT, Derf, SeeDNorm) as an axis of every Transformer placement, their papers' presets
(``dyt``, ``derf``, ``seednorm``, ``dyt_llama``) and LayerNorm Scaling (``lns``): formulas on float64 tensors by hand,
the sites and α₀ each preset sets, and errors."""

from __future__ import annotations

import math

import pytest
import torch
from _nets import randomized
from torch import nn

import variants
from variants import axes
from variants.lm_norms import EmbeddingScale, LayerNormScaling, set_alpha
from variants.norms import NORMS, Derf, DyT, SeeDNorm
from variants.transformer import TransformerLM

TINY = {"depth": 3, "d_model": 16, "n_heads": 2, "d_ff": 24, "vocab_size": 11, "max_len": 8}
IDX = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]])
X = torch.randn(2, 5, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3


def tiny(name: str, **kw: object) -> TransformerLM:
    model = variants.create(name, **{**TINY, **kw})
    assert isinstance(model, TransformerLM)
    return model


def test_dyt_is_gamma_tanh_alpha_x_plus_beta() -> None:
    norm = randomized(DyT(6))
    want = norm.weight * torch.tanh(norm.alpha * X) + norm.bias
    torch.testing.assert_close(norm(X), want)
    assert DyT(6).alpha.item() == 0.5 and DyT(6, bias=False).bias is None  # α₀ = 0.5 (Zhu et al. 2025, §4)


def test_derf_is_gamma_erf_alpha_x_plus_s_plus_beta() -> None:
    norm = randomized(Derf(6))
    torch.testing.assert_close(norm(X), norm.weight * torch.special.erf(norm.alpha * X + norm.shift) + norm.bias)
    assert (Derf(6).alpha.item(), Derf(6).shift.item()) == (0.5, 0.0)


def test_seednorm_is_its_eq1() -> None:
    """[tanh(x·βᵀ)·α + γ] ⊙ x/RMS(x), x·βᵀ one scalar per token."""
    norm = randomized(SeeDNorm(6))
    rms = torch.sqrt(X.pow(2).mean(-1, keepdim=True) + norm.eps)
    scale = torch.tanh((X * norm.beta).sum(-1, keepdim=True)) * norm.alpha + norm.weight
    torch.testing.assert_close(norm(X), scale * X / rms)


def test_seednorm_starts_as_rmsnorm() -> None:
    torch.testing.assert_close(SeeDNorm(6).double()(X), nn.RMSNorm(6, eps=1e-5).double()(X))


def test_norm_types_are_shipped_names() -> None:
    assert {"dyt", "derf", "seednorm"} <= set(NORMS)
    for name in ("dyt", "derf", "seednorm"):
        with pytest.raises(ValueError, match=f"norm '{name}' is already registered \\(by a shipped family\\)"):
            variants.register_norm(name, nn.LayerNorm)


# Every Transformer with norms whose type is free (ReZero and T-Fixup have none; gpt2_small fixes its size).
TAKES_NORM = sorted(n for n in variants.list_variants(family="transformer")
                    if "norm" in (d := variants.describe(n))["defaults"] and not {"norm", "depth"} & set(d["fixed"])
                    and d["axes"]["norm"] != "none")


@pytest.mark.parametrize("name", TAKES_NORM)
@pytest.mark.parametrize("norm", ["dyt", "derf", "seednorm"])
def test_every_placement_takes_every_norm_type(name: str, norm: str) -> None:
    """``--model-arg norm=dyt`` in every Transformer placement: each norm of the stack is of that type (HybridNorm's
    per-head QKV norms too), the axis says so, and a step trains."""
    torch.manual_seed(0)
    model = tiny(name, depth=2, norm=norm)
    assert variants.derive_axes(model)["norm"] == norm
    assert any(axes.norm_type(m) == norm for m in model.modules())
    loss = model(IDX).logsumexp(-1).mean()
    loss.backward()
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())


def test_placements_cover_the_family() -> None:
    assert {"preln", "postln", "sandwich", "hybridnorm", "hyper_connections", "mhc", "laurel", "lns", "mudd",
            "dca", "attn_res", "frac_connections", "speedrun", "deep_delta", "ortho_preln"} <= set(TAKES_NORM)


def dyt_norms(model: TransformerLM) -> list[nn.Module]:
    return [m for m in model.modules() if isinstance(m, DyT)]


def test_dyt_preset_is_preln_with_dyt_everywhere() -> None:
    d = variants.describe("dyt")
    assert d["fixed"] == {"norm": "dyt"} and d["axes"]["placement"] == "pre" and "2503.10622" in d["paper"]
    model = tiny("dyt")
    assert len(dyt_norms(model)) == 2 * 3 + 1 and all(n.alpha.item() == 0.5 for n in dyt_norms(model))
    assert isinstance(model.norm, DyT)
    pre = tiny("preln", norm="dyt")
    pre.load_state_dict(model.state_dict())
    torch.testing.assert_close(pre(IDX), model(IDX), rtol=0, atol=0)


def test_dyt_alpha_and_final_norm() -> None:
    model = tiny("dyt", alpha_init=2.0, final_norm="layernorm")
    assert isinstance(model.norm, nn.LayerNorm) and len(dyt_norms(model)) == 6
    assert all(n.alpha.item() == 2.0 for n in dyt_norms(model))
    assert variants.derive_axes(model)["norm"] == "dyt, layernorm"
    assert all(n.alpha.item() == 1.5 for n in tiny("derf", alpha_init=1.5).modules() if isinstance(n, Derf))
    with pytest.raises(ValueError, match=r"conflicting argument\(s\) for preset 'dyt': norm='layernorm'"):
        tiny("dyt", norm="layernorm")
    with pytest.raises(ValueError, match=r"final_norm must be one of .*'layernorm'.*got 'batchnorm'"):
        tiny("dyt", final_norm="batchnorm")


def test_dyt_llama_sets_the_papers_sites() -> None:
    """Table 12's 7B values: α₀ 0.8 before attention, 0.2 before the FFN and in the final norm; LLaMA's block
    (SwiGLU, no biases: DyT keeps γ only); the embeddings times a learnable √d."""
    model = tiny("dyt_llama")
    for blk in model.blocks:
        assert blk.attn.norm_in.alpha.item() == pytest.approx(0.8)
        assert blk.ffn.norm_in.alpha.item() == pytest.approx(0.2)
    assert model.norm.alpha.item() == pytest.approx(0.2)
    assert all(n.bias is None for n in dyt_norms(model))
    assert variants.describe("dyt_llama")["axes"]["body"] == "attention+swiglu"
    assert isinstance(model.stream, EmbeddingScale) and model.stream.scale.item() == pytest.approx(math.sqrt(16))
    model = randomized(model)
    x = model.tok_emb.weight[IDX] + model.pos_emb.weight[:8]
    first = model.blocks[0].attn
    torch.testing.assert_close(first.norm_in(model.stream.begin(x)), first.norm_in(model.stream.scale * x))


def test_set_alpha_needs_a_scalar_alpha() -> None:
    with pytest.raises(ValueError, match=r"alpha_init needs a norm with a scalar α \(dyt, derf\), got SeeDNorm"):
        set_alpha(SeeDNorm(4), 1.0)


def ln(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    assert isinstance(norm, nn.LayerNorm)
    mu = x.mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + norm.eps) * norm.weight + norm.bias


def test_lns_forward_is_x_plus_f_of_ln_over_sqrt_l() -> None:
    """Sun et al. 2025, §4: both sublayers of layer ℓ (1-based) read LN(x)/√ℓ; the final norm is not scaled."""
    model = randomized(tiny("lns", depth=4))
    x = model.tok_emb.weight[IDX] + model.pos_emb.weight[:8]
    for ell, blk in enumerate(model.blocks, start=1):
        for unit in (blk.attn, blk.ffn):
            assert isinstance(unit, LayerNormScaling) and unit.layer == ell
            x = x + unit.body(ln(unit.norm_in, x) / math.sqrt(ell))
    torch.testing.assert_close(model(IDX), ln(model.norm, x) @ model.tok_emb.weight.T)


def test_lns_layer_one_is_preln() -> None:
    pre, lns = randomized(tiny("preln", depth=1)), randomized(tiny("lns", depth=1))
    lns.load_state_dict(pre.state_dict())
    torch.testing.assert_close(lns(IDX), pre(IDX), rtol=0, atol=0)
    assert variants.describe("lns")["axes"]["placement"] == "pre-lns"
    with pytest.raises(ValueError, match="LayerNorm Scaling counts layers from 1, got layer 0"):
        LayerNormScaling(nn.Identity(), variants.COMBINATORS["add"](), nn.Identity, 0)
