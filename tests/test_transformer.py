"""The Transformer family: placement formulas, paper inits, GPT-2 size, causality, FLOPs, errors."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from _nets import randomized
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import variants
from variants.blocks import ResidualUnit
from variants.combinators import Combinator, Scaled
from variants.denseformer import DenseFormer
from variants.norms import Derf, DyT, SeeDNorm
from variants.transformer import (
    CausalSelfAttention,
    FeedForward,
    ScaleNorm,
    SwiGLU,
    TransformerLM,
    admin_profile,
    deepnorm_alpha_beta,
    mixln_post_layers,
    swiglu_hidden,
    t_fixup_scale,
    transformer_flops_per_token,
)

FAMILY = variants.list_variants(family="transformer")
SMALL = [n for n in FAMILY if n != "gpt2_small"]  # gpt2_small pins a 124M trunk; tested on its own below
TINY = {"depth": 2, "d_model": 16, "n_heads": 2, "d_ff": 24, "vocab_size": 11, "max_len": 8}


def tiny(name: str, **kw: object) -> TransformerLM:
    model = variants.create(name, **{**TINY, **kw})
    assert isinstance(model, TransformerLM)
    return model




def ln(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    if isinstance(norm, nn.RMSNorm):  # Zhang & Sennrich 2019: no mean, no bias
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + norm.eps) * norm.weight
    assert isinstance(norm, nn.LayerNorm)
    mu = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    return (x - mu) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def test_family_is_registered_with_papers() -> None:
    assert FAMILY == ["admin", "attn_res", "attn_res_block", "b2t", "dca", "deep_delta", "deepnorm", "denseformer",
                      "derf", "dyt", "dyt_llama", "frac_connections", "go_mhc", "gpas", "gpt2_small", "hybridnorm",
                      "hyper_connections", "hyperloop", "laurel", "llama_like", "lns", "mhc", "mhc_lite", "mixln",
                      "mudd", "ngpt", "ortho_preln", "postln", "preln", "preln_backout", "preln_unet", "preln_x0",
                      "preln_xsa", "resi_dual", "rezero_lm", "sandwich", "seednorm", "speedrun", "t_fixup",
                      "value_residual", "vwn", "vwn_1_5x"]
    for name in FAMILY:
        d = variants.describe(name)
        assert d["paper"] and "placement" in d["axes"] and d["defaults"]["vocab_size"] >= 1


def test_attention_body_by_hand() -> None:
    torch.manual_seed(0)
    attn = CausalSelfAttention(d_model=8, n_heads=2, dropout=0.0, bias=True).double().eval()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    q, k, v = attn.qkv(x).split(8, dim=-1)
    heads = [slice(0, 4), slice(4, 8)]
    mask = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)
    out = []
    for h in heads:
        scores = q[..., h] @ k[..., h].transpose(1, 2) / math.sqrt(4)
        out.append(torch.softmax(scores.masked_fill(mask, -math.inf), dim=-1) @ v[..., h])
    torch.testing.assert_close(attn(x), attn.proj(torch.cat(out, dim=-1)))


def test_feedforward_body_by_hand() -> None:
    torch.manual_seed(0)
    ffn = FeedForward(d_model=8, d_ff=12, dropout=0.0, bias=True).double()
    x = torch.randn(3, 8, dtype=torch.float64)
    h = x @ ffn.fc1.weight.T + ffn.fc1.bias
    gelu = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))  # GPT-2's GELU
    torch.testing.assert_close(ffn(x), gelu @ ffn.fc2.weight.T + ffn.fc2.bias)


def _sublayer(unit: ResidualUnit, x: torch.Tensor, rule: str) -> torch.Tensor:
    f = unit.body
    if rule == "post":
        return ln(unit.norm_out, x + f(x))
    if rule == "pre":
        return x + f(ln(unit.norm_in, x))
    if rule == "sandwich":
        return x + ln(unit.norm_branch, f(ln(unit.norm_in, x)))
    if rule == "deepnorm":
        return ln(unit.norm_out, deepnorm_alpha_beta(TINY["depth"])[0] * x + f(x))
    if rule == "none":
        return x + f(x)
    if rule == "laurel":  # Menghani et al. 2025, eq. 5: α·F(LN(x)) + β·(x + B·A·x), α = 2σ(a), β = 2σ(b)
        c = unit.combine
        alpha, beta = 2 * torch.sigmoid(c.weights)
        return alpha * f(ln(unit.norm_in, x)) + beta * (x + x @ c.down.weight.T @ c.up.weight.T)
    if rule == "admin":  # Liu et al. 2020: LN(ω ⊙ x + F(x)), ω per dimension
        return ln(unit.norm_out, unit.combine.alpha * x + f(x))
    assert rule == "rezero"
    assert isinstance(unit.combine, Scaled)
    return x + unit.combine.beta * f(x)


RULES = {
    "postln": ["post", "post"],
    "preln": ["pre", "pre"],
    "sandwich": ["sandwich", "sandwich"],
    "deepnorm": ["deepnorm", "deepnorm"],
    "rezero_lm": ["rezero", "rezero"],
    "mixln": ["pre", "pre"],  # depth 2: floor(2/4) = 0 Post-LN layers; depth 8 below
    "llama_like": ["pre", "pre"],  # with RMSNorm and a SwiGLU body
    "b2t": ["post", "b2t"],  # the FFN's norm also takes the layer's input
    # HybridNorm regrouped: N(x + Attn_QKVNorm(x)), then a + FFN(a) (the QKV norms are in the body: own test below)
    "hybridnorm": ["post", "none"],
    "t_fixup": ["none", "none"],
    "laurel": ["laurel", "laurel"],
    "admin": ["admin", "admin"],
}
FINAL_NORM = {"postln": False, "preln": True, "sandwich": True, "deepnorm": False, "rezero_lm": False, "mixln": True,
              "llama_like": True, "b2t": False, "hybridnorm": True, "t_fixup": False,
              "laurel": True, "admin": False}
# Variants whose whole-model formula is tested on its own (more than one stream, or an average across layers).
OWN_FORMULA_TEST = {"denseformer", "resi_dual", "hyper_connections", "mhc", "mhc_lite",  # these: tests/test_hyper.py
                    # the 2025-26 frontier: tests/test_variants_crosslayer.py (cross-layer designs, speedrun) and
                    # tests/test_variants_norms.py (norm types, their presets, LNS, orthogonal/deep-delta updates)
                    "attn_res", "attn_res_block", "dca", "deep_delta", "derf", "dyt", "dyt_llama", "frac_connections",
                    "lns", "mudd", "ortho_preln", "seednorm", "speedrun",
                    # the speedrun's tricks one at a time: tests/test_speedrun_tricks.py
                    "preln_backout", "preln_unet", "preln_x0", "preln_xsa",
                    "gpas",  # tests/test_gpas.py
                    "go_mhc",  # tests/test_go_mhc.py
                    "vwn", "vwn_1_5x", "hyperloop",  # tests/test_vwn.py, tests/test_hyperloop.py
                    "value_residual"}  # its attention reads layer 0's values from the forward's Past (own test below)


def test_every_variant_has_a_formula_test() -> None:
    lm = [n for n in SMALL if isinstance(variants.create(n, **TINY), TransformerLM)]
    assert sorted(lm) == sorted([*RULES, *sorted(OWN_FORMULA_TEST)])


@pytest.mark.parametrize("name", list(RULES))
def test_whole_model_equals_its_formula(name: str) -> None:
    model = randomized(tiny(name))
    idx = torch.tensor([[3, 1, 4, 1, 5, 9], [2, 6, 5, 3, 5, 8]])
    x = model.tok_emb.weight[idx] + model.pos_emb.weight[:6]
    for block in model.blocks:
        layer_input = x
        for unit, rule in zip((block.attn, block.ffn), RULES[name], strict=True):
            assert isinstance(unit, ResidualUnit) and isinstance(unit.combine, Combinator)
            # b2t (Takase et al. 2023): y = LN(h + FFN(h) + x), x the layer's input
            x = ln(unit.norm_out, x + unit.body(x) + layer_input) if rule == "b2t" else _sublayer(unit, x, rule)
    if FINAL_NORM[name]:
        x = ln(model.norm, x)
    else:
        assert isinstance(model.norm, nn.Identity)
    torch.testing.assert_close(model(idx), x @ model.tok_emb.weight.T)  # head tied to the token embedding


def test_mixln_layers_and_formula_at_depth_8() -> None:
    model = randomized(tiny("mixln", depth=8))
    assert [b.attn.placement for b in model.blocks] == ["post"] * 2 + ["pre"] * 6
    assert [b.ffn.placement for b in model.blocks] == ["post"] * 2 + ["pre"] * 6
    x = torch.randn(1, 4, 16, dtype=torch.float64)
    y = x
    for block, rule in zip(model.blocks, ["post"] * 2 + ["pre"] * 6, strict=True):
        y = _sublayer(block.ffn, _sublayer(block.attn, y, rule), rule)
        x = block(x)
    torch.testing.assert_close(x, y)


@pytest.mark.parametrize(("depth", "post"), [(1, 0), (3, 0), (4, 1), (7, 1), (8, 2), (12, 3), (33, 8)])
def test_mixln_rounds_down(depth: int, post: int) -> None:
    assert mixln_post_layers(depth) == post


@pytest.mark.parametrize("name", [*RULES, *sorted(OWN_FORMULA_TEST)])
def test_layernorm_count(name: str) -> None:
    n = TINY["depth"]
    expected = {
        "postln": 2 * n,
        "preln": 2 * n + 1,
        "sandwich": 4 * n + 1,
        "deepnorm": 2 * n,
        "rezero_lm": 0,
        "mixln": 2 * n + 1,
        "llama_like": 2 * n + 1,  # RMSNorms
        "b2t": 2 * n,
        "denseformer": 2 * n + 1,
        "resi_dual": 2 * n + 1,  # the Post-LN norms and the dual stream's
        "hybridnorm": n + 3 * n + 1,  # one per attention join, q/k/v per layer, final
        "value_residual": 2 * n + 1,
        "t_fixup": 0,
        "laurel": 2 * n + 1,
        "admin": 2 * n,
        "hyper_connections": 2 * n + 1 + 2 * n,  # Pre-LN's, and the dynamic form's norm(H) per sublayer (eq. 10)
        "mhc": 2 * n + 1,  # its RMSNorm of the flattened stream has no weight: a function, not a module
        "mhc_lite": 2 * n + 1,  # as mhc
        "go_mhc": 2 * n + 1,  # as mhc
        "vwn": 2 * n + 1 + 2 * n,  # as hyper_connections: the dynamic form's norm of each slot per sublayer
        "vwn_1_5x": 2 * n + 1 + 2 * n,
        "hyperloop": 2 + 1,  # depth 2 is a one-layer middle block looped twice: its two norms, the final one
        # the 2025-26 frontier: the norm types replace every norm, the final one included
        "dyt": 2 * n + 1,
        "derf": 2 * n + 1,
        "seednorm": 2 * n + 1,
        "dyt_llama": 2 * n + 1,
        "lns": 2 * n + 1,  # LayerNorm Scaling divides them by sqrt(layer): no norm of its own
        "ortho_preln": 2 * n + 1,
        "deep_delta": 2 * n + 1,
        "speedrun": 2 * n + 1,
        "preln_x0": 2 * n + 1,
        "preln_unet": 2 * n + 1,
        "preln_backout": 2 * n + 1,
        "preln_xsa": 2 * n + 1,
        "gpas": 2 * n + 1,
        "attn_res": 2 * n + 1,  # its keys' RMSNorm has no weight: a function
        "attn_res_block": 2 * n + 1,
        "frac_connections": 2 * n + 1 + 2 * n,  # as hyper_connections: the dynamic form's norm per sublayer
        "mudd": 2 * n + 1 + 2 * (n - 1),  # after the first layer, attention's Q, K, V inputs normed apart: 3 for 1
        "dca": 2 * n + 1 + 2 * n,  # every attention's Q, K, V inputs normed apart: 3 norms for 1
    }[name]
    kinds = (nn.LayerNorm, nn.RMSNorm, DyT, Derf, SeeDNorm)
    assert sum(isinstance(m, kinds) for m in tiny(name).modules()) == expected


@pytest.mark.parametrize(
    ("depth", "alpha", "beta"),
    [
        (1, 1.189207115002721, 0.5946035575013605),
        (6, 1.8612097182041991, 0.37991784282579627),
        (12, 2.213363839400643, 0.3194715521231362),
        (100, 3.7606030930863934, 0.1880301546543197),
        (1000, 6.68740304976422, 0.10573712634405641),
    ],
)
def test_deepnorm_constants(depth: int, alpha: float, beta: float) -> None:
    a, b = deepnorm_alpha_beta(depth)
    assert a == pytest.approx(alpha, rel=1e-12) and b == pytest.approx(beta, rel=1e-12)
    assert a**4 == pytest.approx(2 * depth) and b**-4 == pytest.approx(8 * depth)
    assert a * b == pytest.approx(2**-0.5)  # (2N/8N)^¼ for every depth


def test_deepnorm_model_uses_alpha_and_beta_init() -> None:
    torch.manual_seed(0)
    d, d_ff, depth = 64, 256, 12
    model = variants.create("deepnorm", depth=depth, d_model=d, n_heads=4, d_ff=d_ff)
    alpha, beta = deepnorm_alpha_beta(depth)
    combos = [b.attn.combine for b in model.blocks] + [b.ffn.combine for b in model.blocks]
    assert all(isinstance(c, Scaled) and c.alpha == alpha and float(c.beta) == 1.0 for c in combos)
    attn, ffn = model.bodies()[0]
    xavier = math.sqrt(2 / (d + d))
    for w, std in (
        (attn.qkv.weight[:d], xavier),
        (attn.qkv.weight[d : 2 * d], xavier),
        (attn.qkv.weight[2 * d :], beta * xavier),
        (attn.proj.weight, beta * xavier),
        (ffn.fc1.weight, beta * math.sqrt(2 / (d + d_ff))),
        (ffn.fc2.weight, beta * math.sqrt(2 / (d + d_ff))),
    ):
        assert w.std().item() == pytest.approx(std, rel=0.05)
    assert torch.count_nonzero(attn.qkv.bias) == 0


def test_gpt2_init() -> None:
    torch.manual_seed(0)
    depth = 8
    model = variants.create("preln", depth=depth, d_model=64, n_heads=4, d_ff=256, init="gpt2")
    attn, ffn = model.bodies()[-1]
    resid = 0.02 / math.sqrt(2 * depth)
    for w, std in (
        (attn.qkv.weight, 0.02),
        (attn.proj.weight, resid),
        (ffn.fc1.weight, 0.02),
        (ffn.fc2.weight, resid),
        (model.tok_emb.weight, 0.02),
        (model.pos_emb.weight, 0.01),
    ):
        assert w.std().item() == pytest.approx(std, rel=0.05)
    assert all(torch.count_nonzero(m.bias) == 0 for m in model.modules() if isinstance(m, nn.Linear))


PLACEMENTS = ["postln", "preln", "sandwich", "mixln", "rezero_lm"]


def test_placements_share_one_default_init() -> None:
    """A placement comparison must not also compare inits: same seed -> bit-identical branch weights."""
    assert {variants.describe(n)["defaults"]["init"] for n in PLACEMENTS} == {"xavier"}
    weights = {}
    for name in PLACEMENTS:
        torch.manual_seed(0)
        model = variants.create(name, depth=4, d_model=32, n_heads=2, d_ff=64)
        weights[name] = [lin.weight for a, f in model.bodies() for lin in (a.qkv, a.proj, f.fc1, f.fc2)]
    for name in PLACEMENTS[1:]:
        assert all(torch.equal(a, b) for a, b in zip(weights["postln"], weights[name], strict=True)), name
    # Xavier-uniform: std = sqrt(2 / (fan_in + fan_out)); fc1 is 32 -> 64.
    fc1 = weights["preln"][2]
    assert fc1.std().item() == pytest.approx(math.sqrt(2 / (32 + 64)), rel=0.05)


@pytest.mark.parametrize(("name", "init"), [("deepnorm", "deepnorm"), ("gpt2_small", "gpt2")])
def test_paper_inits_are_pinned(name: str, init: str) -> None:
    desc = variants.describe(name)
    assert desc["fixed"]["init"] == init
    with pytest.raises(ValueError, match="preset fixes init='" + init):
        variants.create(name, init="xavier")


def test_unknown_init_names_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown init 'kaiming'; choose one of: gpt2, normal, xavier, deepnorm"):
        tiny("preln", init="kaiming")


def test_rezero_is_identity_at_init() -> None:
    model = tiny("rezero_lm").eval()
    x = torch.randn(2, 5, TINY["d_model"])
    for block in model.blocks:
        assert block.attn.combine.beta.detach().item() == 0.0 and block.attn.combine.beta.requires_grad
        assert block.ffn.combine.beta is block.attn.combine.beta  # one α per layer (Bachlechner 2020)
        assert torch.equal(block(x), x)
    scalars = [p for p in model.parameters() if p.dim() == 0]
    assert len(scalars) == len(model.blocks)
    idx = torch.tensor([[1, 2, 3]])
    emb = model.tok_emb.weight[idx] + model.pos_emb.weight[:3]
    assert torch.equal(model(idx), F.linear(emb, model.tok_emb.weight))


def test_gpt2_small_parameter_count() -> None:
    with torch.device("meta"):
        model = variants.create("gpt2_small")
        assert sum(p.numel() for p in model.parameters()) == 124_439_808
        byte_level = variants.create("gpt2_small", vocab_size=256, max_len=128)
    assert sum(p.numel() for p in byte_level.parameters()) == 124_439_808 - (50257 - 256) * 768 - (1024 - 128) * 768
    with pytest.raises(ValueError, match="conflicting"):
        variants.create("gpt2_small", depth=6)


@pytest.mark.parametrize("name", SMALL)
def test_causal(name: str) -> None:
    model = randomized(variants.create(name, **TINY), seed=1)  # every LM of the family, TransformerLM or not
    idx = torch.tensor([[1, 7, 3, 0, 5, 2, 9, 4]])
    base = model(idx)
    for t in (2, 5, 7):
        changed = idx.clone()
        changed[0, t] = (changed[0, t] + 1) % TINY["vocab_size"]
        out = model(changed)
        torch.testing.assert_close(out[:, :t], base[:, :t], rtol=0, atol=1e-12)
        assert not torch.allclose(out[:, t], base[:, t])


def test_flop_formula_by_hand() -> None:
    # M = 1·(4·2² + 2·2·4) + 2·5 = 42 matmul weights; 6·42 + 12·1·3·2 = 324.
    assert transformer_flops_per_token(1, 2, 4, 3, 5) == 324
    assert transformer_flops_per_token(12, 768, 3072, 1024, 50257) == 854_438_400  # GPT-2 small


def test_flop_formula_matches_flop_counter() -> None:
    """Exact (tolerance 0): the formula counts exactly the ops FlopCounterMode counts — mm/addmm/bmm, bias
    adds excluded — and backward is exactly 2× forward because every matmul input needs a gradient
    (the embeddings train). The MATH SDPA backend is forced because the CPU flash kernel is not counted."""
    depth, d, d_ff, vocab, b, t = 2, 32, 48, 50, 3, 16
    model = variants.create("preln", depth=depth, d_model=d, n_heads=4, d_ff=d_ff, vocab_size=vocab, max_len=t)
    idx = torch.randint(0, vocab, (b, t))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        F.cross_entropy(model(idx).flatten(0, 1), idx.flatten()).backward()
    assert counter.get_total_flops() == b * t * transformer_flops_per_token(depth, d, d_ff, t, vocab)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"depth": 0}, "depth must be a positive integer"),
        ({"d_model": 18, "n_heads": 4}, "divisible by n_heads"),
        ({"n_heads": 0}, "n_heads must be a positive integer"),
        ({"vocab_size": 0}, "vocab_size must be"),
        ({"max_len": 0}, "max_len must be"),
        ({"d_ff": 0}, "d_ff must be"),
        ({"dropout": 1.0}, r"dropout must be in \[0, 1\)"),
        ({"depth": 2.5}, "depth must be a positive integer"),
        ({"heads": 2}, "takes no keyword argument"),
    ],
)
def test_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        variants.create("preln", **kwargs)


def test_deepnorm_constants_reject_bad_depth() -> None:
    with pytest.raises(ValueError, match="depth must be >= 1"):
        deepnorm_alpha_beta(0)


def test_forward_errors() -> None:
    model = tiny("preln")
    with pytest.raises(ValueError, match="exceeds max_len 8; build the model with max_len >= 9"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match=r"shape \(batch, seq_len\)"):
        model(torch.zeros(8, dtype=torch.long))


# -- norm type and feed-forward body (Zhang & Sennrich 2019; Nguyen & Salazar 2019; Shazeer 2020) ------------


def test_swiglu_formula_and_width() -> None:
    assert swiglu_hidden(24) == 16 and swiglu_hidden(512) == 341 and swiglu_hidden(1) == 1
    ffn = SwiGLU(4, 6, dropout=0.0, bias=True).double()
    x = torch.randn(3, 4, dtype=torch.float64)
    w, v = ffn.fc1.weight[:4], ffn.fc1.weight[4:]  # hidden 4: rows 0:4 gate W, 4:8 value V
    bw, bv = ffn.fc1.bias[:4], ffn.fc1.bias[4:]
    gate = x @ w.T + bw
    expected = (gate * torch.sigmoid(gate) * (x @ v.T + bv)) @ ffn.fc2.weight.T + ffn.fc2.bias
    assert torch.allclose(ffn(x), expected)


def test_scalenorm_formula() -> None:
    norm = ScaleNorm(4).double()
    assert norm.g.item() == pytest.approx(2.0)  # sqrt(d) at init
    x = torch.tensor([[3.0, 0.0, 4.0, 0.0]], dtype=torch.float64)
    assert torch.allclose(norm(x), 2.0 * x / 5.0)


@pytest.mark.parametrize("norm", ["rmsnorm", "scalenorm"])
@pytest.mark.parametrize("name", ["postln", "preln", "sandwich"])
def test_norm_type_is_an_axis_of_every_placement(name: str, norm: str) -> None:
    model = tiny(name, norm=norm)
    kind = nn.RMSNorm if norm == "rmsnorm" else ScaleNorm
    norms = [m for m in model.modules() if isinstance(m, (nn.LayerNorm, nn.RMSNorm, ScaleNorm))]
    assert norms and all(isinstance(m, kind) for m in norms)
    reference = tiny(name)  # the same positions as with LayerNorm
    assert [n for n, m in model.named_modules() if isinstance(m, kind)] == [
        n for n, m in reference.named_modules() if isinstance(m, nn.LayerNorm)]
    x = torch.randint(0, TINY["vocab_size"], (2, 5))
    assert torch.isfinite(model(x)).all()


def test_llama_like_is_pre_rmsnorm_swiglu_without_biases() -> None:
    d = variants.describe("llama_like")
    assert d["axes"] == {"combinator": "add", "placement": "pre", "norm": "rmsnorm", "body": "attention+swiglu"}
    model = tiny("llama_like")
    assert all(m.bias is None for m in model.modules() if isinstance(m, nn.Linear))
    assert all(isinstance(b.ffn.body, SwiGLU) and isinstance(b.ffn.norm_in, nn.RMSNorm) for b in model.blocks)
    assert isinstance(model.norm, nn.RMSNorm)
    # round(2/3 d_ff) keeps the feed-forward at the GELU one's size: within 1% of preln without biases overall
    assert d["params"] == pytest.approx(variants.describe("preln")["params"], rel=0.01)
    with pytest.raises(ValueError, match=r"preset fixes norm='rmsnorm'"):
        variants.create("llama_like", norm="layernorm")


def test_unknown_norm_or_ffn() -> None:
    with pytest.raises(ValueError, match="unknown norm 'batchnorm'; choose one of: layernorm, rmsnorm, scalenorm"):
        tiny("preln", norm="batchnorm")
    with pytest.raises(ValueError, match="unknown ffn 'relu'; choose one of: gelu, swiglu"):
        tiny("preln", ffn="relu")


def test_denseformer_equals_preln_at_init_and_averages_all_earlier_outputs() -> None:
    torch.manual_seed(0)
    dense = tiny("denseformer", depth=3).double().eval()
    pre = tiny("preln", depth=3).double().eval()
    own = {k: v for k, v in dense.state_dict().items() if not k.startswith("dwa.")}
    pre.load_state_dict(own)  # the same weights, the DWA aside
    assert [list(a.alpha.detach()) for a in dense.dwa] == [[0, 1], [0, 0, 1], [0, 0, 0, 1]]
    idx = torch.randint(0, TINY["vocab_size"], (2, 6))
    torch.testing.assert_close(dense(idx), pre(idx))  # identity averages: exactly Pre-LN
    with torch.no_grad():
        for a in dense.dwa:
            a.alpha.copy_(torch.randn(a.alpha.shape, dtype=torch.float64))
    x = dense.tok_emb.weight[idx] + dense.pos_emb.weight[:6]
    history = [x]
    for block, dwa in zip(dense.blocks, dense.dwa, strict=True):
        history.append(block(x))
        x = sum(a * h for a, h in zip(dwa.alpha, history, strict=True))
    torch.testing.assert_close(dense(idx), ln(dense.norm, x) @ dense.tok_emb.weight.T)


def test_denseformer_averages_after_the_layers_of_another_design() -> None:
    """What a plugin that passed ``Design(dense=True)`` is told to use: the averages after another design's layers,
    the identity at init (Peri-LN's output exactly)."""
    dense = DenseFormer(variants.Design("Peri-LN with depth-weighted averages", "sandwich"),
                        variants.TransformerSpec(**TINY)).double().eval()
    post = tiny("sandwich").double().eval()
    post.load_state_dict({k: v for k, v in dense.state_dict().items() if not k.startswith("dwa.")})
    assert [name for name, _ in dense.named_children()][-2:] == ["dwa", "norm"]  # in the order the forward runs them
    idx = torch.randint(0, TINY["vocab_size"], (2, 6))
    torch.testing.assert_close(dense(idx), post(idx))


def test_qkv_norm_attention_by_hand() -> None:
    """HybridNorm's attention: q, k and v each normalised per head (width d_head) before softmax(qkᵀ/√d_h)·v."""
    model = randomized(tiny("hybridnorm"))
    attn = model.blocks[0].attn.body
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    q, k, v = attn.qkv(x).split(16, dim=-1)
    mask = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)
    out = []
    for h in (slice(0, 8), slice(8, 16)):
        qh, kh, vh = ln(attn.q_norm, q[..., h]), ln(attn.k_norm, k[..., h]), ln(attn.v_norm, v[..., h])
        scores = qh @ kh.transpose(1, 2) / math.sqrt(8)
        out.append(torch.softmax(scores.masked_fill(mask, -math.inf), dim=-1) @ vh)
    torch.testing.assert_close(attn(x), attn.proj(torch.cat(out, dim=-1)))


def test_value_residual_mixes_the_first_layers_values() -> None:
    """ResFormer (Zhou et al. 2024, eq. 6, λ = ½): layer n ≥ 2 attends over ½(V_n + V_1), V_1 from the same pass."""
    model = randomized(tiny("value_residual", depth=3))
    idx = torch.tensor([[3, 1, 4, 1, 5, 9], [2, 6, 5, 3, 5, 8]])
    x = model.tok_emb.weight[idx] + model.pos_emb.weight[:6]
    mask = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)

    def attention(body: nn.Module, h: torch.Tensor, v1: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        q, k, v = body.qkv(h).split(16, dim=-1)
        mixed = v if v1 is None else 0.5 * (v + v1)
        out = []
        for s in (slice(0, 8), slice(8, 16)):
            scores = q[..., s] @ k[..., s].transpose(1, 2) / math.sqrt(8)
            out.append(torch.softmax(scores.masked_fill(mask, -math.inf), dim=-1) @ mixed[..., s])
        return body.proj(torch.cat(out, dim=-1)), v

    v1 = None
    for block in model.blocks:
        y, v = attention(block.attn.body, ln(block.attn.norm_in, x), v1)
        v1 = v if v1 is None else v1
        x = x + y
        x = x + block.ffn.body(ln(block.ffn.norm_in, x))
    torch.testing.assert_close(model(idx), ln(model.norm, x) @ model.tok_emb.weight.T)
    assert [b.attn.body.reads for b in model.blocks] == [(), (variants.links.values(0),), (variants.links.values(0),)]


def test_value_residual_survives_a_forward_that_raised_mid_way() -> None:
    """A forward interrupted after layer 1 has read layer 0's values (an out-of-memory in block 2, which the harness
    records and then trains on) leaves the next clean forward exact."""
    torch.manual_seed(0)
    model = tiny("value_residual", depth=5)
    idx = torch.randint(0, TINY["vocab_size"], (2, 6))
    expected = model(idx)

    def oom(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        raise torch.OutOfMemoryError("planted in block 2")

    hook = model.blocks[2].register_forward_pre_hook(oom)
    with pytest.raises(torch.OutOfMemoryError, match="planted"):
        model(idx)
    hook.remove()
    torch.testing.assert_close(model(idx), expected)


def test_value_residual_at_depth_1_is_preln() -> None:
    torch.manual_seed(0)
    vr, pre = tiny("value_residual", depth=1).double(), tiny("preln", depth=1).double()
    pre.load_state_dict(vr.state_dict())
    idx = torch.randint(0, TINY["vocab_size"], (2, 6))
    torch.testing.assert_close(vr(idx), pre(idx))


def test_resi_dual_two_streams_by_hand() -> None:
    """ResiDual (Xie et al. 2023, §3.2): x_a ← LN(x_a + F(x_a)), x_d ← x_d + F(x_a), both from the embeddings;
    output x_a + LN(x_d)."""
    model = randomized(tiny("resi_dual", depth=3))
    idx = torch.tensor([[3, 1, 4, 1, 5, 9], [2, 6, 5, 3, 5, 8]])
    x_a = x_d = model.tok_emb.weight[idx] + model.pos_emb.weight[:6]
    for block in model.blocks:
        for unit in (block.attn, block.ffn):
            f = unit.body(x_a)
            x_a, x_d = ln(unit.norm_out, x_a + f), x_d + f
    assert isinstance(model.norm, nn.Identity)
    out = x_a + ln(model.stream.norm_dual, x_d)
    torch.testing.assert_close(model(idx), out @ model.tok_emb.weight.T)


@pytest.mark.parametrize("depth", [1, 6, 24])
def test_t_fixup_init(depth: int) -> None:
    """T-Fixup (Huang et al. 2020, Algorithm 1, decoder): Xavier, embeddings N(0, d^-½); v, out, FFN and the
    embeddings scaled by (9N)^-¼; q and k unscaled; no LayerNorm anywhere."""
    torch.manual_seed(0)
    d, d_ff = 128, 512
    model = variants.create("t_fixup", depth=depth)
    scale = (9 * depth) ** -0.25
    assert variants.describe("t_fixup")["fixed"]["init"] == "t_fixup"

    def std(w: torch.Tensor) -> float:
        return float(w.detach().std())

    xavier = math.sqrt(2 / (d + d))  # uniform(±√(6/(fan_in + fan_out))) has std √(2/(fan_in + fan_out))
    xavier_qkv = math.sqrt(2 / (d + 3 * d))  # the fused q|k|v is one (3d × d) matrix, as nn.MultiheadAttention's
    assert std(model.tok_emb.weight) == pytest.approx(d ** -0.5 * scale, rel=0.03)
    for attn, ffn in model.bodies():
        assert std(attn.qkv.weight[: 2 * d]) == pytest.approx(xavier_qkv, rel=0.05)
        assert std(attn.qkv.weight[2 * d:]) == pytest.approx(xavier_qkv * scale, rel=0.05)
        assert std(attn.proj.weight) == pytest.approx(xavier * scale, rel=0.05)
        assert std(ffn.fc1.weight) == pytest.approx(math.sqrt(2 / (d + d_ff)) * scale, rel=0.05)
        assert std(ffn.fc2.weight) == pytest.approx(math.sqrt(2 / (d + d_ff)) * scale, rel=0.05)
    assert not [m for m in model.modules() if isinstance(m, (nn.LayerNorm, nn.RMSNorm))]


def test_t_fixup_scale_rejects_bad_depth() -> None:
    assert t_fixup_scale(4) == pytest.approx(36 ** -0.25)
    with pytest.raises(ValueError, match="depth must be >= 1"):
        t_fixup_scale(0)


@pytest.mark.parametrize("form", ["rw", "lr", "rw+lr"])
def test_laurel_is_preln_at_init(form: str) -> None:
    """α = β = 2σ(0) = 1 and B = 0: every LAuReL join starts as the plain residual, so the model is Pre-LN."""
    torch.manual_seed(0)
    lau = tiny("laurel", form=form, rank=3).double()
    pre = tiny("preln").double()
    pre.load_state_dict({k: v for k, v in lau.state_dict().items() if ".combine." not in k})
    idx = torch.randint(0, TINY["vocab_size"], (2, 6))
    torch.testing.assert_close(lau(idx), pre(idx))
    c = lau.blocks[0].attn.combine
    assert (c.weights is None) == (form == "lr") and (c.down is None) == (form == "rw")
    if c.down is not None:  # §3.3 footnote: A[i, j] = 1/√(r·d) where i mod r = j (A: d -> r), B = 0
        expected = torch.zeros(3, 16, dtype=torch.float64)
        expected[torch.arange(16) % 3, torch.arange(16)] = (3 * 16) ** -0.5
        torch.testing.assert_close(c.down.weight, expected)
        assert not c.up.weight.any()


def test_laurel_errors() -> None:
    with pytest.raises(ValueError, match=r"LAuReL form must be one of \('rw', 'lr', 'rw\+lr'\), got 'pa'"):
        tiny("laurel", form="pa")
    with pytest.raises(ValueError, match="LAuReL rank must be a positive integer, got 0"):
        tiny("laurel", rank=0)


@pytest.mark.parametrize("name", ["denseformer", "speedrun"])
def test_admins_init_on_a_design_without_its_joins_is_xavier(name: str) -> None:
    """No ω to profile: Xavier's weights, and no profiling forward, which ran before the subclass had finished
    building the model (AttributeError: 'DenseFormer' object has no attribute 'dwa')."""
    kw = {**TINY, "depth": 2}
    admin, xavier = (variants.create(name, seed=0, init=i, **kw) for i in ("admin", "xavier"))
    assert all(torch.equal(a, b) for a, b in zip(admin.state_dict().values(), xavier.state_dict().values(),
                                                  strict=True))


def test_admin_profile_by_hand() -> None:
    """Admin's ω (Liu et al. 2020, authors' profiling recurrence): ω_1 = 1, ω_{i+1} = √(Var[ω_i·x] + Var[F_i(x)])
    over the profiling batch, sublayer by sublayer; every ω a constant vector at init."""
    torch.manual_seed(0)
    model = tiny("admin", depth=3).double()
    idx = torch.randint(0, TINY["vocab_size"], (4, 8))
    admin_profile(model, idx)
    x = model.tok_emb.weight[idx] + model.pos_emb.weight[:8]
    running = 1.0
    with torch.no_grad():
        for block in model.blocks:
            for unit in (block.attn, block.ffn):
                omega = unit.combine.alpha
                torch.testing.assert_close(omega, torch.full_like(omega, running))
                fx = unit.body(x)
                running = math.sqrt(float((running * x).var()) + float(fx.var()))
                x = ln(unit.norm_out, omega * x + fx)
    assert variants.describe("admin")["fixed"] == {"init": "admin"}
    assert isinstance(model.blocks[0].attn.combine.alpha, nn.Parameter)  # learnable, per dimension
    assert model.blocks[0].attn.combine.alpha.shape == (16,)


@pytest.mark.parametrize("depth", [2, 6, 24])
@pytest.mark.parametrize("name", SMALL)
def test_every_variant_builds_and_trains_a_step_at_depth(name: str, depth: int) -> None:
    """The floor of the family: every Transformer of the registry builds at depths 2, 6 and 24 and passes a forward and
    a backward with finite values and a gradient on every parameter."""
    torch.manual_seed(0)
    model = variants.create(name, **{**TINY, "depth": depth})
    idx = torch.randint(0, TINY["vocab_size"], (2, TINY["max_len"]))
    logits = model(idx)
    assert logits.shape == (2, TINY["max_len"], TINY["vocab_size"]) and torch.isfinite(logits).all()
    F.cross_entropy(logits.flatten(0, 1), idx.flatten()).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not missing


@pytest.mark.parametrize(("placements", "final"), [
    ("pre", True), ("sandwich", True), ("peri", True), ("post", False), ("none", False),  # ReZero, T-Fixup: no norm
    (lambda d: [("post", "none")] * d, True),  # HybridNorm: its last sublayer adds after the last norm
    (lambda d: ["pre"] * (d - 1) + ["post"], False),  # ends with a Post-LN layer: normalised already
    (lambda d: ["post"] + ["none"] * (d - 1), True),  # one norm in the stack, none after the last add
])
def test_the_final_norm_follows_the_placements(placements: object, final: bool) -> None:
    design = variants.Design("placements", placements)  # type: ignore[arg-type]
    assert design.final_norm(3) is final
    model = variants.build_transformer(design, **{**TINY, "depth": 3})
    assert isinstance(model.norm, nn.LayerNorm if final else nn.Identity)


@pytest.mark.parametrize(("field", "value", "says"), [
    ("final_norm", False, r"the final norm follows the placements \(Design.final_norm\(depth\)\).*set model.norm "
                          r"on the built model"),
    ("unit", lambda *a: None, r"a design's units are its layer class's: subclass variants.Block, override its class "
                              r"method unit\(body, join, norm, at, placement\) and pass Design\(block=YourLayer\)"),
    ("stream", lambda norm: None, r"what the layers hand each other is their layer class's: .* class method "
                                  r"stream\(norm, spec, layers\) and pass Design\(block=YourLayer\)"),
    ("dense", True, r"DenseFormer's averages sit between layers, in its own model: "
                    r"variants.denseformer.DenseFormer\(design, spec\) builds them after every layer of the design "
                    r"\(each reads the layers' feed-forward join outputs\)"),
])
def test_a_removed_design_field_says_what_replaced_it(field: str, value: object, says: str) -> None:
    with pytest.raises(TypeError, match=rf"^Design has no field '{field}': {says}$"):
        variants.Design("a plugin's design", "pre", **{field: value})


def test_a_layer_class_builds_its_units_and_its_stream() -> None:
    """A plugin's layer class: its units (``unit``) and what its layers hand each other (``stream``), both class
    methods the model calls with the sublayer's spec and the model's spec."""
    calls: list[tuple[int, str]] = []

    class Doubled(variants.lm_blocks.Stream):
        def begin(self, x: torch.Tensor) -> torch.Tensor:
            return 2 * x

    class MyLayer(variants.lm_blocks.Block):
        @classmethod
        def unit(cls, body: nn.Module, join: Combinator, norm: object, at: variants.SublayerSpec,
                 placement: str) -> ResidualUnit:
            calls.append((at.index, placement))
            return variants.blocks.PreNorm(body, join, norm)

        @classmethod
        def stream(cls, norm: object, spec: object, layers: object) -> variants.lm_blocks.Stream:
            return Doubled()

    model = variants.build_transformer(variants.Design("mine", "pre", block=MyLayer), **TINY)
    assert calls == [(0, "pre"), (1, "pre"), (2, "pre"), (3, "pre")]
    assert all(type(b) is MyLayer and isinstance(b.attn, variants.blocks.PreNorm) for b in model.blocks)
    pre = variants.build_transformer("preln", **TINY)
    pre.load_state_dict(model.state_dict())  # the same parameters: Pre-LN's, on twice the embeddings
    idx = torch.randint(0, TINY["vocab_size"], (2, 6))
    x = 2 * (model.tok_emb(idx) + model.pos_emb.weight[:6])
    for block in pre.blocks:
        x = block(x)
    torch.testing.assert_close(model(idx), F.linear(pre.norm(x), pre.tok_emb.weight))


def test_a_design_pins_its_feed_forward_body() -> None:
    design = variants.Design("Pre-LN with SwiGLU as its paper's body", "pre", ffn="swiglu")
    model = variants.build_transformer(design, ffn="swiglu", **TINY)
    assert all(isinstance(block.ffn.body, SwiGLU) for block in model.blocks)
    with pytest.raises(ValueError, match=r"pins its feed-forward body: ffn must be 'swiglu', got 'gelu'$"):
        variants.build_transformer(design, **TINY)  # the spec's default body
