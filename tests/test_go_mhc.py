"""go-mHC (Dandachi & Diggs-Galligan 2026): the generalised orthostochastic map by hand, exact double stochasticity,
H_res = I at init, Pre-LN under mHC-lite's conditions, the whole model by hand, the exact parameter count, errors."""

from __future__ import annotations

import math
from typing import cast

import pytest
import torch
import torch.nn.functional as F
from _nets import TINY_LM, assert_causal, layer_norm_by_hand, randomized, tiny_lm
from torch import nn

import variants
from variants.gomhc import OrthostochasticHyperConnection, generalized_orthostochastic, go_mhc_join_params
from variants.hyper import MHC_INIT_GAP, HyperUnit
from variants.transformer import LN_EPS, TransformerLM

IDX = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]])
ln = layer_norm_by_hand


def tiny(**kw: object) -> TransformerLM:
    return cast(TransformerLM, tiny_lm("go_mhc", **kw))


def units(model: TransformerLM) -> list[HyperUnit]:
    out = [unit for blk in model.blocks for unit in (blk.attn, blk.ffn)]
    assert all(isinstance(u, HyperUnit) and isinstance(u.combine, OrthostochasticHyperConnection) for u in out)
    return cast(list[HyperUnit], out)


def go_by_hand(theta: torch.Tensor, n: int, s: int) -> torch.Tensor:
    """The authors' three steps as written: A = Θ − Θᵀ, Q = (I − A)(I + A)⁻¹, B_ij = (1/s)·Σ_{k,l} Q[(i,k),(j,l)]²."""
    a = theta - theta.transpose(-1, -2)
    eye = torch.eye(n * s, dtype=theta.dtype)
    q = (eye - a) @ torch.linalg.inv(eye + a)
    b = torch.zeros(*theta.shape[:-2], n, n, dtype=theta.dtype)
    for i in range(n):
        for j in range(n):
            for k in range(s):
                for m in range(s):
                    b[..., i, j] += q[..., i * s + k, j * s + m] ** 2 / s
    return b


def test_registered_with_the_family_defaults_and_axes() -> None:
    d = variants.describe("go_mhc")
    assert d["family"] == "transformer" and d["defaults"] == {**variants.describe("preln")["defaults"], "n": 4, "s": 2}
    assert d["axes"] == {"combinator": "go_mhc", "placement": "pre", "body": "attention+ffn", "norm": "layernorm"}
    assert "2604.02309" in d["paper"]


def test_the_map_by_hand() -> None:
    """n = 2, s = 1, Θ = [[0, t], [0, 0]]: Q = [[1 − t², −2t], [2t, 1 − t²]]/(1 + t²), so H_res = [[c, 1 − c],
    [1 − c, c]] with c = ((1 − t²)/(1 + t²))²: 0.36 at t = 1/2, and the swap at t = 1. Then s = 2 on random Θ against
    the steps."""
    for t, c in ((0.5, 0.36), (1.0, 0.0)):
        theta = torch.tensor([[0.0, t], [0.0, 0.0]], dtype=torch.float64)
        want = torch.tensor([[c, 1 - c], [1 - c, c]], dtype=torch.float64)
        torch.testing.assert_close(generalized_orthostochastic(theta, 2, 1), want, rtol=0, atol=1e-15)
    theta = torch.randn(5, 6, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    torch.testing.assert_close(generalized_orthostochastic(theta, 3, 2), go_by_hand(theta, 3, 2))


@pytest.mark.parametrize(("n", "s", "dtype"), [(4, 2, torch.float32), (4, 2, torch.float64), (3, 1, torch.float64),
                                               (2, 3, torch.float64)])
def test_h_res_is_exactly_doubly_stochastic(n: int, s: int, dtype: torch.dtype) -> None:
    """Every weight of a join random (logits of size ~50): H_res's rows and columns sum to 1 up to the linear solve's
    rounding, bounded by κ(I + A)·ε per token (κ up to ~15 here), no entry is negative, the streams' sum is
    conserved, and H_res is the authors' three steps on Θ = mat(α_res·x'φ_res + b_res)."""
    d = 8
    join = OrthostochasticHyperConnection(n, d, index=1, s=s).to(dtype)
    g = torch.Generator().manual_seed(n * 10 + s)
    with torch.no_grad():
        for p in join.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=dtype) * 3)
    h = torch.randn(200, n, d, generator=g, dtype=dtype)
    _, res, post = join.weights(h)
    x = h.flatten(-2) / torch.sqrt(h.flatten(-2).pow(2).mean(-1, keepdim=True) + LN_EPS)
    theta = (join.alpha_res * (x @ join.phi_res) + join.b_res).reshape(200, n * s, n * s)
    torch.testing.assert_close(res, go_by_hand(theta, n, s))
    kappa = torch.linalg.cond(torch.eye(n * s, dtype=dtype) + theta - theta.transpose(-1, -2))
    err = torch.maximum((res.sum(-1) - 1).abs().amax(-1), (res.sum(-2) - 1).abs().amax(-1))
    assert (err <= 4 * kappa * torch.finfo(dtype).eps).all() and kappa.max() > 10  # draws far from I + 0 included
    assert (res >= 0).all() and res.std() > 0.05  # far from the identity: the check bites
    fx = torch.randn(200, d, generator=g, dtype=dtype)
    gap = join(h, fx).sum(-2) - h.sum(-2) - post.sum(-1, keepdim=True) * fx
    assert (gap.abs().amax(-1) <= 8 * kappa * torch.finfo(dtype).eps * h.abs().amax((-2, -1)) * n).all()


def test_identity_logits_are_a_stationary_point() -> None:
    """Θ = 0 gives H_res = I, but H_res is quadratic in Θ there (Q = I − 2A + O(A²), squared): every gradient to Θ is
    exactly 0, so b_res cannot start at 0. At a U[0, 1) draw, as the init, it is not."""
    zero, draw = torch.zeros(8, 8, dtype=torch.float64), torch.rand(8, 8, dtype=torch.float64)
    for theta, moves in ((zero, False), (draw, True)):
        theta.requires_grad_(True)
        res = generalized_orthostochastic(theta, 4, 2)
        torch.trace(res).backward()  # not additive in rows and columns: those sums are constant
        assert theta.grad is not None and bool(theta.grad.abs().max() > 1e-3) is moves
        if not moves:
            assert torch.equal(res, torch.eye(4, dtype=torch.float64)) and not theta.grad.any()


def test_mappings_at_init() -> None:
    """φ = 0: for any input H_pre = σ(±g) (g on stream k mod n) and H_post = 2σ(0) = 1, mHC's; H_res the map of
    b_res ~ U[0, 1) alone, the same for every token, a different draw per sublayer."""
    n, s = 4, 2
    seen = []
    for k, unit in enumerate(units(tiny(depth=2, n=n, s=s))):
        join = cast(OrthostochasticHyperConnection, unit.join)
        pre, res, post = join.weights(torch.randn(2, 5, n, TINY_LM["d_model"]))
        assert ((join.b_res >= 0) & (join.b_res < 1)).all() and not join.phi_res.any()
        torch.testing.assert_close(res, generalized_orthostochastic(join.b_res.reshape(8, 8), n, s).expand(2, 5, n, n))
        want_pre = torch.full((n,), torch.sigmoid(torch.tensor(-MHC_INIT_GAP)).item())
        want_pre[k % n] = torch.sigmoid(torch.tensor(MHC_INIT_GAP)).item()
        torch.testing.assert_close(pre, want_pre.expand(2, 5, n))
        assert torch.equal(post, torch.ones(2, 5, n))
        seen.append(join.b_res)
    assert not torch.equal(seen[0], seen[1])


def test_is_preln_with_equal_write_out_whatever_b_res_and_b_pre() -> None:
    """The init (φ = 0, b_post = 0 on every stream), and mHC-lite's conditions beyond it: b_res and b_pre random.
    H_res's rows sum to 1, so equal streams stay equal; each sublayer's norm sees c·h (c = Σσ(b_pre)), the final
    norm n·h, and ``LN_ε(c·h) = LN_{ε/c²}(h)``: with those ε multiplied back, Pre-LN's logits to rounding."""
    n = 3
    pre = randomized(tiny_lm("preln"), seed=1)
    model = tiny(n=n).double().eval()
    missing, unexpected = model.load_state_dict(pre.state_dict(), strict=False)
    assert not unexpected and missing and all(".combine." in k for k in missing)  # only the joins are new
    assert isinstance(model.norm, nn.LayerNorm)
    model.norm.eps = LN_EPS * n**2
    g = torch.Generator().manual_seed(2)
    for unit in units(model):
        join = unit.join
        assert isinstance(join, OrthostochasticHyperConnection) and isinstance(unit.norm_in, nn.LayerNorm)
        with torch.no_grad():
            join.b_res.copy_(torch.randn(join.b_res.shape, generator=g, dtype=torch.float64) * 3)
            join.b_pre.copy_(torch.randn(n, generator=g, dtype=torch.float64))
        unit.norm_in.eps = LN_EPS * torch.sigmoid(join.b_pre).sum().item() ** 2
    torch.testing.assert_close(model(IDX), pre(IDX), rtol=1e-10, atol=1e-10)


def test_whole_model_by_hand() -> None:
    """x' = RMSNorm(vec(x_l)); H_pre = σ(α_pre x'φ_pre + b_pre), H_post = 2σ(α_post x'φ_post + b_post), H_res the
    authors' three steps on Θ = mat(α_res x'φ_res + b_res); x_{l+1} = H_res x_l + H_postᵀ F(LN(H_pre x_l)); the
    streams summed, the final norm, the tied head."""
    n, s = 3, 2
    model = randomized(tiny(n=n, s=s))
    x = model.tok_emb.weight[IDX] + model.pos_emb.weight[:8]
    h = torch.stack([x] * n, dim=-2)
    for unit in units(model):
        m = cast(OrthostochasticHyperConnection, unit.join)
        v = h.flatten(-2)
        v = v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + LN_EPS)
        h_pre = torch.sigmoid(m.alpha_pre * (v @ m.phi_pre) + m.b_pre).unsqueeze(-2)  # 1×n
        h_post = 2 * torch.sigmoid(m.alpha_post * (v @ m.phi_post) + m.b_post).unsqueeze(-2)  # 1×n
        theta = (m.alpha_res * (v @ m.phi_res) + m.b_res).reshape(*v.shape[:-1], n * s, n * s)
        out = unit.body(ln(unit.norm_in, (h_pre @ h).squeeze(-2)))
        h = go_by_hand(theta, n, s) @ h + h_post.transpose(-1, -2) @ out.unsqueeze(-2)
    torch.testing.assert_close(model(IDX), ln(model.norm, h.sum(-2)) @ model.tok_emb.weight.T)


@pytest.mark.parametrize(("n", "s", "per_join"), [(2, 1, 32 * (4 + 4) + 3 + 4 + 4), (4, 2, 64 * (8 + 64) + 3 + 8 + 64),
                                                  (3, 3, 48 * (6 + 81) + 3 + 6 + 81)])
def test_parameter_count(n: int, s: int, per_join: int) -> None:
    """Per sublayer n·d·(2n + (ns)²) weights of φ, three gates, 2n + (ns)² biases (d = 16 here); nothing else is new."""
    assert go_mhc_join_params(n, TINY_LM["d_model"], s) == per_join
    count = sum(p.numel() for p in tiny(n=n, s=s).parameters())
    assert count == sum(p.numel() for p in tiny_lm("preln").parameters()) + 2 * TINY_LM["depth"] * per_join
    assert variants.describe("go_mhc")["params"] == variants.describe("preln")["params"] + 12 * go_mhc_join_params(
        4, 128, 2)


def test_causal_and_trains() -> None:
    model = randomized(tiny())
    assert_causal(model, IDX, TINY_LM["vocab_size"])
    torch.manual_seed(0)
    fresh = tiny(depth=6)
    loss = F.cross_entropy(fresh(IDX).flatten(0, 1), IDX.roll(-1, 1).flatten())
    assert math.isclose(loss.item(), math.log(TINY_LM["vocab_size"]), rel_tol=0.1)  # a fresh LM predicts ~uniformly
    loss.backward()
    joins = [u.join for u in units(fresh)]
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in fresh.parameters())
    assert all(cast(OrthostochasticHyperConnection, j).phi_res.grad.abs().sum() > 0 for j in joins)  # type: ignore[union-attr]


@pytest.mark.parametrize(("kw", "message"), [
    ({"n": 0}, r"n \(the expansion rate.*positive integer, got 0"),
    ({"s": 0}, r"s \(go-mHC's block size.*positive integer, got 0"),
    ({"s": 2.5}, r"s \(go-mHC's block size.*got 2.5"),
    ({"s": True}, r"s \(go-mHC's block size.*got True"),
    ({"sinkhorn_iters": 20}, r"takes no keyword argument\(s\) \['sinkhorn_iters'\]"),
])
def test_bad_arguments_raise_naming_them(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tiny(**kw)
