"""Hyper-Connections (Zhu et al. 2025), mHC (Xie et al. 2025), mHC-lite (Yang & Gao 2026) and Frac-Connections' width
connection: Pre-LN at init, the papers' forwards by hand, Sinkhorn-Knopp, mHC-lite's exactly doubly stochastic H_res and
its parameter count, causality, depth, errors, probes, and parity with the ``hyper-connections`` package."""

from __future__ import annotations

import itertools
import math
from typing import cast

import pytest
import torch
import torch.nn.functional as F
from _nets import assert_causal, randomized
from torch import nn

import variants
from bench.runs.probes import probe
from variants.frac import FracConnection
from variants.hyper import (
    MHC_INIT_GAP,
    SINKHORN_ITERS,
    HyperConnection,
    HyperUnit,
    ManifoldHyperConnection,
    PermutationHyperConnection,
    mhc_lite_join_params,
    permutation_matrices,
    sinkhorn_knopp,
)
from variants.transformer import LN_EPS, FeedForward, TransformerLM

TINY = {"depth": 2, "d_model": 16, "n_heads": 2, "d_ff": 24, "vocab_size": 11, "max_len": 8}
IDX = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]])
# (variant, extra keyword arguments): DHC, SHC, one stream, mHC at the paper's n and at n = 2.
CASES = [("hyper_connections", {}), ("hyper_connections", {"dynamic": False}), ("hyper_connections", {"n": 1}),
         ("mhc", {}), ("mhc", {"n": 2})]


def tiny(name: str, **kw: object) -> TransformerLM:
    model = variants.create(name, **{**TINY, **kw})
    assert isinstance(model, TransformerLM)
    return model






def ln(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    assert isinstance(norm, nn.LayerNorm)
    mu = x.mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + norm.eps) * norm.weight + norm.bias


def units(model: TransformerLM) -> list[HyperUnit]:
    out: list[HyperUnit] = []
    for blk in model.blocks:
        for unit in (blk.attn, blk.ffn):
            assert isinstance(unit, HyperUnit)
            out.append(unit)
    return out


def layer_norm(module: nn.Module) -> nn.LayerNorm:
    assert isinstance(module, nn.LayerNorm)
    return module


def test_registered_with_the_family_defaults_and_axes() -> None:
    base = variants.describe("preln")["defaults"]
    extra = {"hyper_connections": ({"n": 4, "dynamic": True}, "hyper"),
             "mhc": ({"n": 4, "sinkhorn_iters": 20}, "mhc"), "mhc_lite": ({"n": 4}, "mhc_lite")}
    for name, (own, combinator) in extra.items():
        d = variants.describe(name)
        assert d["family"] == "transformer" and d["defaults"] == {**base, **own}
        assert d["axes"] == {"combinator": combinator, "placement": "pre", "body": "attention+ffn", "norm": "layernorm"}
    assert "2601.05732" in variants.describe("mhc_lite")["paper"]


@pytest.mark.parametrize(("name", "kw"), CASES)
def test_equals_preln_with_the_same_trunk_at_init(name: str, kw: dict[str, object]) -> None:
    """HC §2.3: the streams stay equal copies of Pre-LN's stream. Two norms see a multiple of Pre-LN's input —
    the final norm the sum n·h of the streams, and (mHC) each sublayer's norm c·h, c = Σσ(b_pre) — and
    ``LN_ε(s·h) = LN_{ε/s²}(h)`` exactly; so with those norms' ε multiplied by s² the logits are Pre-LN's to
    rounding (without, they differ only as ε/var(h) does)."""
    pre = randomized(tiny("preln"), seed=1)
    model = tiny(name, **kw).double().eval()
    missing, unexpected = model.load_state_dict(pre.state_dict(), strict=False)
    assert not unexpected and missing and all(".combine." in k for k in missing)  # only the joins are new
    n = kw.get("n", 4)
    assert isinstance(n, int)
    layer_norm(model.norm).eps = LN_EPS * n**2
    for unit in units(model):
        join = unit.combine
        if isinstance(join, ManifoldHyperConnection):
            c = torch.sigmoid(join.b_pre).sum().item()
            assert c == pytest.approx(torch.sigmoid(torch.tensor(MHC_INIT_GAP)).item()
                                      + (n - 1) * torch.sigmoid(torch.tensor(-MHC_INIT_GAP)).item())
            layer_norm(unit.norm_in).eps = LN_EPS * c**2
    torch.testing.assert_close(model(IDX), pre(IDX), rtol=1e-10, atol=1e-10)


def test_hc_static_init_is_eq14_per_sublayer() -> None:
    """B = 1, A_r = I, A_m = e_{k mod n} with k counting sublayers (attention 2i, feed-forward 2i + 1: the paper's
    "layer" is one of them, Fig. 7); W = 0 and s_α = s_β = 0.01 (Algorithm 2)."""
    model = tiny("hyper_connections", depth=3, n=4)
    for k, unit in enumerate(units(model)):
        hc = unit.combine
        assert isinstance(hc, HyperConnection)
        assert torch.equal(hc.b, torch.ones(4)) and torch.equal(hc.a_r, torch.eye(4))
        assert torch.equal(hc.a_m, F.one_hot(torch.tensor(k % 4), 4).float())
        assert not hc.w_beta.any() and not hc.w_m.any() and not hc.w_r.any()
        assert hc.s_alpha.item() == hc.s_beta.item() == pytest.approx(0.01)


def hc_by_hand(model: TransformerLM, idx: torch.Tensor, n: int) -> torch.Tensor:
    """Zhu et al. 2025 as printed: H⁰ = n copies (§2.1); per sublayer Eqs. 10–13 (DHC) and 3–5 with the matrices'
    transposes; the rows summed, the final norm, the tied head (Algorithm 1)."""
    x = model.tok_emb.weight[idx] + model.pos_emb.weight[: idx.shape[1]]
    h = torch.stack([x] * n, dim=-2)  # (B, T, n, d): H per token
    for unit in units(model):
        hc = unit.combine
        assert isinstance(hc, HyperConnection)
        a_m, a_r, b = hc.a_m.unsqueeze(-1), hc.a_r * 1, hc.b.unsqueeze(0)  # n×1, n×n, 1×n
        if hc.norm is not None:
            h_bar = ln(hc.norm, h)  # Eq. 10
            b = hc.s_beta * torch.tanh(h_bar @ hc.w_beta.unsqueeze(-1)).transpose(-1, -2) + b  # Eq. 11
            a_m = hc.s_alpha * torch.tanh(h_bar @ hc.w_m.unsqueeze(-1)) + a_m  # Eq. 12
            a_r = hc.s_alpha * torch.tanh(h_bar @ hc.w_r) + a_r  # Eq. 13
        h0 = (a_m.transpose(-1, -2) @ h).squeeze(-2)  # Eq. 3
        out = unit.body(ln(unit.norm_in, h0))  # T = F ∘ LN (§G.1)
        h = b.transpose(-1, -2) @ out.unsqueeze(-2) + a_r.transpose(-1, -2) @ h  # Eqs. 4–5
    return ln(model.norm, h.sum(-2)) @ model.tok_emb.weight.T


@pytest.mark.parametrize("dynamic", [True, False])
def test_hc_forward_equals_the_papers_equations(dynamic: bool) -> None:
    model = randomized(tiny("hyper_connections", n=3, dynamic=dynamic))
    torch.testing.assert_close(model(IDX), hc_by_hand(model, IDX, 3))


def mhc_by_hand(model: TransformerLM, idx: torch.Tensor, n: int) -> torch.Tensor:
    """Xie et al. 2025 as printed: x' = RMSNorm(vec(x_l)) (no weight, §4.3.1); Eq. 7; Eq. 8 with Eq. 9 run on exp
    directly (column then row normalisation, t_max times); x_{l+1} = H_res x_l + H_postᵀ F(H_pre x_l) (Eq. 3)."""
    x = model.tok_emb.weight[idx] + model.pos_emb.weight[: idx.shape[1]]
    h = torch.stack([x] * n, dim=-2)
    for unit in units(model):
        m = unit.combine
        assert isinstance(m, ManifoldHyperConnection)
        v = h.flatten(-2)
        v = v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + LN_EPS)
        h_pre = torch.sigmoid(m.alpha_pre * (v @ m.phi_pre) + m.b_pre).unsqueeze(-2)  # 1×n
        h_post = 2 * torch.sigmoid(m.alpha_post * (v @ m.phi_post) + m.b_post).unsqueeze(-2)  # 1×n
        mat = torch.exp(m.alpha_res * (v @ m.phi_res).reshape(*v.shape[:-1], n, n) + m.b_res)
        for _ in range(m.sinkhorn_iters):
            mat = mat / mat.sum(-2, keepdim=True)  # T_c
            mat = mat / mat.sum(-1, keepdim=True)  # T_r
        out = unit.body(ln(unit.norm_in, (h_pre @ h).squeeze(-2)))
        h = mat @ h + h_post.transpose(-1, -2) @ out.unsqueeze(-2)
    return ln(model.norm, h.sum(-2)) @ model.tok_emb.weight.T


def test_mhc_forward_equals_the_papers_equations() -> None:
    model = randomized(tiny("mhc", n=3, sinkhorn_iters=7))
    torch.testing.assert_close(model(IDX), mhc_by_hand(model, IDX, 3))


@pytest.mark.parametrize("n", [2, 4, 8])
def test_sinkhorn_is_doubly_stochastic_within_its_convergence_bound(n: int) -> None:
    """Logits in [-a, a]: M⁽⁰⁾'s cross-ratios are at most e^{4a}, so its Birkhoff contraction ratio is κ ≤ tanh(a)
    and after the first iteration the column sums c lie within Hilbert distance 4a of 1; each further iteration
    contracts that distance by κ² (Franklin & Lorenz 1989). Rows sum to 1 (T_r is last), so min c ≤ 1 ≤ max c
    and |c_j - 1| ≤ exp(4a·κ^{2(t-1)}) - 1: 1.3e-4 at a = 1, t = 20."""
    a, t = 1.0, SINKHORN_ITERS
    logits = (torch.rand(200, n, n, generator=torch.Generator().manual_seed(n), dtype=torch.float64) * 2 - 1) * a
    m = sinkhorn_knopp(logits, t)
    assert (m > 0).all()
    torch.testing.assert_close(m.sum(-1), torch.ones(200, n, dtype=torch.float64), rtol=0, atol=1e-12)
    bound = math.expm1(4 * a * math.tanh(a) ** (2 * (t - 1)))
    assert (m.sum(-2) - 1).abs().max().item() <= bound
    # the log-space iterates are Eq. 9's on exp(logits)
    direct = logits.exp()
    for _ in range(t):
        direct = direct / direct.sum(-2, keepdim=True)
        direct = direct / direct.sum(-1, keepdim=True)
    torch.testing.assert_close(m, direct, rtol=1e-12, atol=1e-14)


def test_mhc_mappings_at_init() -> None:
    """φ = 0: for any input H_pre = σ(±g) (g on stream k mod n), H_post = 2σ(0) = 1 and H_res = Sinkhorn(g·I),
    which is (e^g I + J - I)/(e^g + n - 1): exp(g·I) already has equal row and column sums."""
    n, g = 4, MHC_INIT_GAP
    for k, unit in enumerate(units(tiny("mhc", depth=3, n=n))):
        join = unit.combine
        assert isinstance(join, ManifoldHyperConnection)
        pre, res, post = join.weights(torch.randn(2, 5, n, TINY["d_model"]))
        want_pre = torch.full((n,), torch.sigmoid(torch.tensor(-g)).item())
        want_pre[k % n] = torch.sigmoid(torch.tensor(g)).item()
        torch.testing.assert_close(pre, want_pre.expand(2, 5, n))
        assert torch.equal(post, torch.ones(2, 5, n))
        want_res = (math.exp(g) * torch.eye(n) + torch.ones(n, n) - torch.eye(n)) / (math.exp(g) + n - 1)
        torch.testing.assert_close(res, want_res.expand(2, 5, n, n))


def lite_joins(model: TransformerLM) -> list[PermutationHyperConnection]:
    joins = [unit.combine for unit in units(model)]
    assert all(isinstance(j, PermutationHyperConnection) for j in joins)
    return cast(list[PermutationHyperConnection], joins)


def test_permutation_matrices_are_all_n_factorial_identity_first() -> None:
    perms = permutation_matrices(3)
    assert perms.shape == (6, 3, 3) and torch.equal(perms[0], torch.eye(3))
    assert len({tuple(p.flatten().tolist()) for p in perms}) == 6  # all distinct
    for p, sigma in zip(perms, itertools.permutations(range(3)), strict=True):
        assert torch.equal(p @ torch.arange(3.0), torch.tensor(sigma, dtype=torch.float32))  # (P x)_i = x_σ(i)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mhc_lite_h_res_is_exactly_doubly_stochastic(dtype: torch.dtype) -> None:
    """Every weight random (logits of size ~3 and more): rows and columns of H_res sum to 1 to the dtype's rounding,
    no entry is negative, and H_res is Σ_k softmax(α_res·x'φ_res + b_res)_k P_k computed from the definition."""
    n, d = 4, 8
    join = PermutationHyperConnection(n, d, index=1).to(dtype)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in join.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=dtype) * 3)
    h = torch.randn(50, n, d, generator=g, dtype=dtype)
    _, res, _ = join.weights(h)
    tol = 4 * torch.finfo(dtype).eps
    ones = torch.ones(50, n, dtype=dtype)
    torch.testing.assert_close(res.sum(-1), ones, rtol=0, atol=tol)
    torch.testing.assert_close(res.sum(-2), ones, rtol=0, atol=tol)
    assert (res >= 0).all()
    x = h.flatten(-2) / torch.sqrt(h.flatten(-2).pow(2).mean(-1, keepdim=True) + LN_EPS)
    a = torch.softmax(join.alpha_res * (x @ join.phi_res) + join.b_res, -1)
    want = torch.zeros(50, n, n, dtype=dtype)
    for k, sigma in enumerate(itertools.permutations(range(n))):
        for i in range(n):
            want[:, i, sigma[i]] += a[:, k]
    torch.testing.assert_close(res, want)


def test_mhc_lite_conserves_the_stream_sum_where_mhc_does_not() -> None:
    """Columns summing to 1 exactly: ``1ᵀ(H_res h + H_postᵀ fx) = 1ᵀh + (1ᵀH_post)·fx`` for any weights. mHC's
    Sinkhorn ends on a row normalisation, so its columns (hence the sum) are off by the iteration's error."""
    n, d = 4, 8
    g = torch.Generator().manual_seed(1)
    h = torch.randn(6, n, d, generator=g, dtype=torch.float64)
    fx = torch.randn(6, d, generator=g, dtype=torch.float64)
    gaps = []
    for join in (PermutationHyperConnection(n, d, 0), ManifoldHyperConnection(n, d, 0, sinkhorn_iters=2)):
        join = join.double()
        with torch.no_grad():
            for p in join.parameters():
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 2)
        _, _, post = join.weights(h)
        gaps.append((join(h, fx).sum(-2) - h.sum(-2) - post.sum(-1, keepdim=True) * fx).abs().max().item())
    assert gaps[0] < 1e-12 and gaps[1] > 1e-3


def test_mhc_lite_mappings_at_init() -> None:
    """The authors' init, for any input (φ = 0): H_pre = σ(±1), H_post = 2σ(±1) (+1 on stream k mod n), and
    a = (1, e⁻⁸, …)/Z, Z = 1 + (n! − 1)e⁻⁸, so H_res[i, j] counts the permutations taking i to j: (n − 1)! of them for
    i ≠ j, the identity and (n − 1)! − 1 others on the diagonal."""
    n, e = 4, math.exp(-8)
    z = 1 + (math.factorial(n) - 1) * e
    want_res = torch.full((n, n), math.factorial(n - 1) * e / z)
    want_res.fill_diagonal_((1 + (math.factorial(n - 1) - 1) * e) / z)
    s = torch.sigmoid(torch.tensor([1.0, -1.0]))
    for k, join in enumerate(lite_joins(tiny("mhc_lite", depth=2, n=n))):
        pre, res, post = join.weights(torch.randn(2, 5, n, TINY["d_model"]))
        one_hot = F.one_hot(torch.tensor(k % n), n).bool()
        want_pre = torch.where(one_hot, s[0], s[1])
        torch.testing.assert_close(pre, want_pre.expand(2, 5, n))
        torch.testing.assert_close(post, (2 * want_pre).expand(2, 5, n))
        torch.testing.assert_close(res, want_res.expand(2, 5, n, n))
    assert torch.diagonal(want_res).min().item() == pytest.approx(0.994, abs=1e-3)


def mhc_lite_by_hand(model: TransformerLM, idx: torch.Tensor, n: int) -> torch.Tensor:
    """mHC's Eq. 3 with mHC-lite's H_res: x' = RMSNorm(vec(x_l)); H_pre = σ(α_pre x'φ_pre + b_pre), H_post =
    2σ(α_post x'φ_post + b_post), H_res = Σ_k softmax(α_res x'φ_res + b_res)_k P_k over itertools' permutations."""
    perms = torch.stack([torch.eye(n, dtype=torch.float64)[list(sigma)] for sigma in itertools.permutations(range(n))])
    x = model.tok_emb.weight[idx] + model.pos_emb.weight[: idx.shape[1]]
    h = torch.stack([x] * n, dim=-2)
    for unit, m in zip(units(model), lite_joins(model), strict=True):
        v = h.flatten(-2)
        v = v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + LN_EPS)
        h_pre = torch.sigmoid(m.alpha_pre * (v @ m.phi_pre) + m.b_pre).unsqueeze(-2)  # 1×n
        h_post = 2 * torch.sigmoid(m.alpha_post * (v @ m.phi_post) + m.b_post).unsqueeze(-2)  # 1×n
        a = torch.softmax(m.alpha_res * (v @ m.phi_res) + m.b_res, dim=-1)
        h_res = (a[..., None, None] * perms).sum(-3)
        out = unit.body(ln(unit.norm_in, (h_pre @ h).squeeze(-2)))
        h = h_res @ h + h_post.transpose(-1, -2) @ out.unsqueeze(-2)
    return ln(model.norm, h.sum(-2)) @ model.tok_emb.weight.T


def test_mhc_lite_forward_equals_its_equations() -> None:
    model = randomized(tiny("mhc_lite", n=3))
    torch.testing.assert_close(model(IDX), mhc_lite_by_hand(model, IDX, 3))


def test_mhc_lite_is_preln_when_h_post_is_the_same_on_every_stream() -> None:
    """φ = 0 and b_post = 0 (H_post = 1): the streams stay equal copies for any b_res (H_res's rows sum to 1) and any
    b_pre, and the model is Pre-LN with the sublayers' norms' ε times c² (c = Σσ(b_pre)) and the final's times n²."""
    n = 3
    pre = randomized(tiny("preln"), seed=1)
    model = tiny("mhc_lite", n=n).double().eval()
    missing, unexpected = model.load_state_dict(pre.state_dict(), strict=False)
    assert not unexpected and all(".combine." in k for k in missing)
    layer_norm(model.norm).eps = LN_EPS * n**2
    g = torch.Generator().manual_seed(2)
    for unit, join in zip(units(model), lite_joins(model), strict=True):
        with torch.no_grad():
            join.b_post.zero_()
            join.b_res.copy_(torch.randn(join.b_res.shape, generator=g, dtype=torch.float64) * 3)
            join.b_pre.copy_(torch.randn(n, generator=g, dtype=torch.float64))
        layer_norm(unit.norm_in).eps = LN_EPS * torch.sigmoid(join.b_pre).sum().item() ** 2
    torch.testing.assert_close(model(IDX), pre(IDX), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(("n", "per_join"), [(2, 32 * (4 + 2) + 3 + 4 + 2), (3, 48 * (6 + 6) + 3 + 6 + 6),
                                              (4, 64 * (8 + 24) + 3 + 8 + 24)])
def test_mhc_lite_parameter_count(n: int, per_join: int) -> None:
    """Per sublayer n·d·(2n + n!) weights of φ, three gates, 2n + n! biases (d = 16 here); nothing else is new."""
    assert mhc_lite_join_params(n, TINY["d_model"]) == per_join
    model, pre = tiny("mhc_lite", n=n), tiny("preln")
    count = sum(p.numel() for p in model.parameters())
    assert count == sum(p.numel() for p in pre.parameters()) + 2 * TINY["depth"] * per_join
    assert variants.describe("mhc_lite")["params"] == variants.describe("preln")["params"] + 12 * mhc_lite_join_params(
        4, 128)


@pytest.mark.parametrize(("name", "kw"), [*CASES, ("mhc_lite", {})])
def test_causal(name: str, kw: dict[str, object]) -> None:
    model = randomized(tiny(name, **kw))
    assert_causal(model, IDX, TINY["vocab_size"])


@pytest.mark.parametrize("depth", [2, 6, 24])
@pytest.mark.parametrize("name", ["hyper_connections", "mhc", "mhc_lite"])
def test_builds_and_trains_at_depth(name: str, depth: int) -> None:
    torch.manual_seed(0)
    model = tiny(name, depth=depth)
    assert len(model.blocks) == depth and len(units(model)) == 2 * depth
    logits = model(IDX)
    loss = F.cross_entropy(logits.flatten(0, 1), IDX.roll(-1, 1).flatten())
    assert math.isclose(loss.item(), math.log(TINY["vocab_size"]), rel_tol=0.1)  # a fresh LM predicts ~uniformly
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    for unit in units(model)[1::2]:  # every FFN gets a gradient
        assert isinstance(unit.body, FeedForward) and unit.body.fc2.weight.grad is not None
        assert unit.body.fc2.weight.grad.abs().sum() > 0


@pytest.mark.parametrize(("name", "kw", "message"), [
    ("hyper_connections", {"n": 0}, r"n \(the expansion rate.*positive integer, got 0"),
    ("hyper_connections", {"n": -2}, r"n \(the expansion rate.*got -2"),
    ("hyper_connections", {"n": 2.5}, r"n \(the expansion rate.*got 2.5"),
    ("hyper_connections", {"n": True}, r"n \(the expansion rate.*got True"),
    ("hyper_connections", {"dynamic": "yes"}, r"dynamic must be True .* or False .*got 'yes'"),
    ("hyper_connections", {"d_model": 15}, r"d_model \(15\) must be divisible by n_heads \(2\)"),
    ("mhc", {"n": 0}, r"n \(the expansion rate.*got 0"),
    ("mhc", {"sinkhorn_iters": 0}, r"sinkhorn_iters \(Sinkhorn-Knopp iterations.*got 0"),
    ("mhc", {"dynamic": False}, r"takes no keyword argument\(s\) \['dynamic'\]"),
    ("mhc_lite", {"n": 0}, r"n \(the expansion rate.*got 0"),
    ("mhc_lite", {"n": 7}, r"all n! permutation matrices: n must be at most 6 \(720 permutations\), got 7 \(5040\)"),
    ("mhc_lite", {"sinkhorn_iters": 20}, r"takes no keyword argument\(s\) \['sinkhorn_iters'\]"),
])
def test_bad_arguments_raise_naming_them(name: str, kw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tiny(name, **kw)


@pytest.mark.parametrize("name", ["hyper_connections", "mhc", "mhc_lite"])
def test_probes_see_every_sublayer_and_only_its_body_weights(name: str) -> None:
    model = randomized(tiny(name, depth=3)).float()
    rows = probe(model, IDX, IDX, lambda out, y: F.cross_entropy(out.flatten(0, 1), y.flatten()), step=0)
    kinds = {r["layer"]: r["kind"] for r in rows}
    assert kinds == {i: ("attn", "ffn")[i % 2] for i in range(6)}
    F.cross_entropy(model(IDX).flatten(0, 1), IDX.flatten()).backward()  # Xiong's quantity: the body's matrices
    for layer, unit in enumerate(units(model)):
        weights = [m.weight.grad for m in unit.body.modules() if isinstance(m, nn.Linear)]
        want = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in weights])).item()
        got = next(r["value"] for r in rows if r["layer"] == layer and r["metric"] == "weight_grad_norm")
        assert got == pytest.approx(want, rel=1e-5)


def _streams_to_batch(h: torch.Tensor) -> torch.Tensor:
    """(B, T, n, d) -> the package's layout, streams folded into the batch as '(b s) t d'."""
    return h.permute(0, 2, 1, 3).flatten(0, 1)


def test_parity_with_the_hyper_connections_package() -> None:
    """lucidrains' ``hyper-connections`` (PyPI), ``HyperConnections``: the same DHC (Algorithm 2's layout: A_m and
    A_r fused into one n×(n+1) matrix, W_m and W_r into d×(n+1)), but its H̄ norm is its own RMSNorm,
    ``x/‖x‖·√d·(γ+1)`` — ours with ``norm=lambda: nn.RMSNorm(d)`` and weight γ + 1. Its branch gets ``h_0``
    directly; ours too (the Pre-LN norm is the unit's, outside the join). All weights random: outputs equal.

    Its ``ManifoldConstrainedHyperConnections`` is not the mHC paper's parameterisation: its coefficients come per
    stream from RMSNorm(h_s) with a d×(n+1) map (HC's layout), not from the flattened token by n·d×(n²+2n) φ, and
    its Sinkhorn ends on the other normalisation. So only the static limit compares — φ = 0 in ours, its dynamic
    maps 0 — with random biases (``static_alpha`` = [b_pre | b_resᵀ]: its res acts as Σ_s a[s, t]·h_s), and both
    Sinkhorns run to convergence (the limit D₁ exp(b) D₂ is unique). It computes in float32: tolerance 1e-5."""
    pkg = pytest.importorskip("hyper_connections", reason="optional parity check: pip install -e '.[parity]'")
    g = torch.Generator().manual_seed(0)
    n, d, k = 4, 16, 5
    branch = nn.Sequential(nn.Linear(d, 32), nn.GELU(), nn.Linear(32, d)).double()
    ours = HyperConnection(n, d, k, norm=lambda: nn.RMSNorm(d)).double()
    theirs = pkg.HyperConnections(n, dim=d, branch=branch, layer_index=k).double()
    assert torch.equal(theirs.static_alpha, torch.cat([ours.a_m[:, None], ours.a_r], 1).double())  # Eq. 14 alike
    with torch.no_grad():
        for p in ours.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5)
        theirs.static_alpha.copy_(torch.cat([ours.a_m[:, None], ours.a_r], 1))
        theirs.dynamic_alpha_fn.copy_(torch.cat([ours.w_m[:, None], ours.w_r], 1))
        theirs.dynamic_alpha_scale.copy_(ours.s_alpha)
        theirs.static_beta.copy_(ours.b)
        theirs.dynamic_beta_fn.copy_(ours.w_beta)
        theirs.dynamic_beta_scale.copy_(ours.s_beta)
        assert isinstance(ours.norm, nn.RMSNorm) and ours.norm.weight is not None
        theirs.norm.gamma.copy_(ours.norm.weight - 1)
    h = torch.randn(2, 5, n, d, generator=g, dtype=torch.float64)
    torch.testing.assert_close(_streams_to_batch(ours(h, branch(ours.read(h)))), theirs(_streams_to_batch(h)))

    mine = ManifoldHyperConnection(n, d, k, sinkhorn_iters=300).double()
    other = pkg.ManifoldConstrainedHyperConnections(n, dim=d, branch=branch, layer_index=k, sinkhorn_iters=300).double()
    with torch.no_grad():
        for b in (mine.b_pre, mine.b_post, mine.b_res):
            b.copy_(torch.randn(b.shape, generator=g, dtype=b.dtype))
        other.static_alpha.copy_(torch.cat([mine.b_pre[:, None], mine.b_res.T], 1))
        other.static_beta.copy_(mine.b_post)
    torch.testing.assert_close(_streams_to_batch(mine(h, branch(mine.read(h)))), other(_streams_to_batch(h)),
                               rtol=1e-5, atol=1e-5)


def test_frac_width_connection_matches_the_package() -> None:
    """Frac-Connections (Zhu et al. 2025) against the package's ``HyperConnections(1, num_fracs=m)``: its width
    connection (the layer's input, and the fractions carried forward) is the paper's Γ and A with HC's dynamic terms,
    on copied weights. Its ``static_alpha`` (m × 2m) is read per column as (input fraction c // 2, c % 2 = 0 the layer
    input, 1 the carried fraction), and its H̄ norm is its RMSNorm (γ + 1): ours with ``nn.RMSNorm`` of width d/m.

    Its depth connection is another formula: every output fraction is added into every carried fraction with a full
    m × m β (``einsum('... f1 d, ... f1 s f2 -> ... f2 s d')``) where the paper's FC matrix has one β per fraction; and
    its static init is not the identity (it reads fractions (0, 0, 0, 2) into the layer and carries (0, 0, 1, 3)).
    Ours is checked against the paper's formulas by hand in tests/test_variants_crosslayer.py."""
    pkg = pytest.importorskip("hyper_connections", reason="optional parity check: pip install -e '.[parity]'")
    g = torch.Generator().manual_seed(0)
    m, d = 4, 16
    ours = FracConnection(m, d, norm=lambda width: nn.RMSNorm(width)).double()
    theirs = pkg.HyperConnections(1, dim=d, layer_index=0, num_fracs=m).double()
    h = torch.randn(2, 5, d, generator=g, dtype=torch.float64)
    frac = h.unflatten(-1, (m, -1))
    branch_in, carried, _ = theirs.width_connection(h)  # the package's init, before any weight is copied
    torch.testing.assert_close(branch_in.unflatten(-1, (m, -1)), frac[..., [0, 0, 0, 2], :])
    torch.testing.assert_close(carried.unflatten(-1, (m, -1)), frac[..., [0, 0, 1, 3], :])
    with torch.no_grad():
        for p in ours.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5)
        static = torch.stack([ours.gamma, ours.a_r], dim=-1).flatten(-2)  # column 2j: Γ[:, j], 2j + 1: A[:, j]
        theirs.static_alpha.copy_(static)
        theirs.dynamic_alpha_fn.copy_(torch.stack([ours.w_gamma, ours.w_r], dim=-1).flatten(-2))
        theirs.dynamic_alpha_scale.copy_(ours.s_alpha)
        assert isinstance(ours.norm, nn.RMSNorm) and ours.norm.weight is not None
        theirs.norm.gamma.copy_(ours.norm.weight - 1)
    w = ours.weights(h)
    branch_in, carried, _ = theirs.width_connection(h)
    torch.testing.assert_close(ours.read(h, w), branch_in)
    torch.testing.assert_close(torch.einsum("...ij,...id->...jd", w[1], frac).flatten(-2), carried)
    out = torch.randn(2, 5, d, generator=g, dtype=torch.float64)
    with torch.no_grad():
        theirs.static_beta.copy_(ours.b)
        theirs.dynamic_beta_fn.zero_()
        ours.w_beta.zero_()
    _, add_residual = theirs(h)
    assert not torch.allclose(ours(h, out), add_residual(out))  # their β sums every output fraction into each
