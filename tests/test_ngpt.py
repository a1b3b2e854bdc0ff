"""nGPT (Loshchilov et al. 2024): the forward against the paper's equations, the sphere, the harness hook, errors."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from _nets import randomized
from torch import nn

import variants
from bench.runs import train as train_mod
from bench.runs.config import RunConfig
from bench.runs.probes import probe
from variants.ngpt import NGPT, ngpt
from variants.transformer import TrunkSpec, swiglu_hidden

TINY = {"depth": 2, "d_model": 16, "n_heads": 2, "d_ff": 24, "vocab_size": 11, "max_len": 8}
IDX = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]])


def tiny(**kw: object) -> NGPT:
    model = variants.create("ngpt", **{**TINY, **kw})
    assert isinstance(model, NGPT)
    return model




def norm(x: torch.Tensor) -> torch.Tensor:
    return x / x.pow(2).sum(-1, keepdim=True).sqrt()


def rope(x: torch.Tensor) -> torch.Tensor:
    """RoFormer on one head's (T, d_k) vectors, written with complex numbers: pair (x_2i, x_2i+1) times e^(i·t·θ_i)."""
    t, dk = x.shape
    theta = 10000.0 ** (-torch.arange(0, dk, 2, dtype=torch.float64) / dk)
    angle = torch.arange(t, dtype=torch.float64)[:, None] * theta
    z = torch.complex(x[:, 0::2], x[:, 1::2]) * torch.polar(torch.ones_like(angle), angle)
    return torch.stack((z.real, z.imag), dim=-1).reshape(t, dk)


def paper_forward(model: NGPT, idx: torch.Tensor) -> torch.Tensor:
    """The paper's equations, one sequence and one head at a time, with §2.6's constants typed in by hand."""
    d, heads, dk, hidden = 16, 2, 8, swiglu_hidden(24)
    root_d = math.sqrt(d)
    out = []
    for seq in idx:
        t = len(seq)
        h = model.tok_emb.weight[seq]  # h₀ = E_input[token]
        for layer in model.blocks:
            attn, mlp = layer.attn.body, layer.ffn.body
            w_q, w_k, w_v = attn.qkv.weight.split(d)
            s_qk = attn.s_qk.stored.reshape(heads, dk) * (1.0 * root_d)  # init 1, scale 1/√d_model
            outs = []
            for i in range(heads):
                rows = slice(i * dk, (i + 1) * dk)
                q = norm(rope(h @ w_q[rows].T)) * s_qk[i]  # eq. 15
                k = norm(rope(h @ w_k[rows].T)) * s_qk[i]  # eq. 16
                v = h @ w_v[rows].T
                scores = (q @ k.T) * math.sqrt(dk)  # softmax scale √d_k
                scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), -math.inf)
                outs.append(scores.softmax(-1) @ v)
            h_a = norm(torch.cat(outs, dim=-1) @ attn.proj.weight.T)
            alpha_a = layer.attn.combine.alpha.stored * (0.05 * root_d)  # α_init 0.05, α_scale 1/√d_model
            h = norm(h + alpha_a * (h_a - h))  # eq. 10
            w_u, w_nu = mlp.fc1.weight.split(hidden)
            u = (h @ w_u.T) * mlp.s_u.stored  # eq. 20 (init 1, scale 1)
            nu = (h @ w_nu.T) * mlp.s_v.stored * root_d  # eq. 21
            h_m = norm((u * nu * torch.sigmoid(nu)) @ mlp.fc2.weight.T)
            alpha_m = layer.ffn.combine.alpha.stored * (0.05 * root_d)
            h = norm(h + alpha_m * (h_m - h))  # eq. 11
        out.append((h @ model.head.weight.T) * model.s_z.stored * (1.0 * root_d))  # eq. 3, s_z scale 1/√d_model
    return torch.stack(out)


def test_forward_equals_the_papers_equations() -> None:
    model = randomized(tiny())
    torch.testing.assert_close(model(IDX), paper_forward(model, IDX))
    torch.testing.assert_close(model(IDX[:, :5]), paper_forward(model, IDX[:, :5]))  # positions from 0 again


def test_the_head_is_its_own_matrix() -> None:
    """§2.1: E_input and E_output are two matrices (the rest of the family ties them)."""
    model = tiny()
    assert model.head.weight is not model.tok_emb.weight
    assert not torch.equal(model.head.weight, model.tok_emb.weight)


@pytest.mark.parametrize("random", [False, True])
def test_hidden_states_stay_on_the_sphere(random: bool) -> None:
    model = randomized(tiny(depth=3)) if random else tiny(depth=3).double()
    seen: list[torch.Tensor] = []
    hooks = [m.register_forward_hook(lambda m, a, out: seen.append(out))
             for layer in model.blocks for m in (layer.attn, layer.ffn, layer)]
    model(IDX)
    for hook in hooks:
        hook.remove()
    assert len(seen) == 3 * 3  # after the attention update, the MLP update and the layer, per layer
    for h in seen:
        torch.testing.assert_close(torch.linalg.vector_norm(h, dim=-1), torch.ones(IDX.shape, dtype=h.dtype))
    if not random:  # h₀ too: E_input's rows start on the sphere
        emb = model.tok_emb(IDX)
        torch.testing.assert_close(torch.linalg.vector_norm(emb, dim=-1), torch.ones(IDX.shape, dtype=emb.dtype))


def test_causal() -> None:
    model = randomized(tiny(), seed=1)
    base = model(IDX[:1])
    for t in (2, 5, 7):
        changed = IDX[:1].clone()
        changed[0, t] = (changed[0, t] + 1) % TINY["vocab_size"]
        out = model(changed)
        torch.testing.assert_close(out[:, :t], base[:, :t], rtol=0, atol=1e-12)
        assert not torch.allclose(out[:, t], base[:, t])


def _assert_on_sphere(model: NGPT) -> None:
    names = {name for name, _, _ in model.sphere_weights()}
    # §2.6 item 2: E_input, E_output and every layer's W_q|W_k|W_v, W_o, W_u|W_ν, W_o(MLP).
    assert names == {"tok_emb.weight", "head.weight"} | {
        f"blocks.{i}.{m}.weight" for i in range(len(model.blocks))
        for m in ("attn.body.qkv", "attn.body.proj", "ffn.body.fc1", "ffn.body.fc2")}
    d = model.tok_emb.weight.shape[1]
    for name, w, dim in model.sphere_weights():
        assert w.shape[dim] == d, name  # normalised along the embedding dimension
        norms = torch.linalg.vector_norm(w, dim=dim)
        torch.testing.assert_close(norms, torch.ones_like(norms), msg=name)


def test_matrices_start_on_the_sphere_and_the_hook_puts_them_back() -> None:
    model = tiny()
    _assert_on_sphere(model)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0).add_(0.1)
    model.after_optimizer_step()
    _assert_on_sphere(model)


def test_the_harness_calls_the_hook_after_every_optimizer_step() -> None:
    c = RunConfig(variant="ngpt", task="copy", depth=2, optimizer="adam", lr=1e-2, weight_decay=0.0, seq_len=16,
                  train_size=64, val_size=32, batch_size=8, steps=2, measure=(),
                  model_args=(("d_model", 16), ("n_heads", 2), ("d_ff", 24)))
    s = train_mod.setup(c)
    model = s.model
    assert isinstance(model, NGPT)
    calls: list[bool] = []
    renormalise = model.after_optimizer_step

    def recorded() -> None:
        calls.append(torch.is_grad_enabled())
        renormalise()

    model.after_optimizer_step = recorded  # type: ignore[method-assign]
    runner = train_mod.StepRunner(c, s, model, train_mod.batch_generator(s))
    before = [w.detach().clone() for _, w, _ in model.sphere_weights()]
    runner()
    runner()
    assert calls == [False, False]  # once per step, under torch.no_grad()
    assert all(not torch.equal(a, w) for a, (_, w, _) in zip(before, model.sphere_weights(), strict=True))
    _assert_on_sphere(model)
    assert train_mod.after_step_hook(variants.create("preln", depth=1)) is None  # no hook: nothing is called


def test_scale_factors_start_at_their_init_values() -> None:
    """§2.5–2.6: each stored parameter starts at s_scale; its effective value, param · s_init / s_scale, at s_init."""
    d = 128
    model = variants.create("ngpt")
    assert isinstance(model, NGPT)
    expected = {  # name: (s_init, s_scale)
        "combine.alpha": (0.05, d ** -0.5),  # α_A, α_M (item 3)
        "s_qk": (1.0, d ** -0.5),  # item 5
        "s_u": (1.0, 1.0), "s_v": (1.0, 1.0),  # item 6
        "s_z": (1.0, d ** -0.5),  # item 7
    }
    found = dict.fromkeys(expected, 0)
    for name, module in model.named_modules():
        key = next((k for k in expected if name.endswith(k)), None)
        if key is None:
            continue
        s_init, s_scale = expected[key]
        found[key] += 1
        torch.testing.assert_close(module.stored, torch.full_like(module.stored, s_scale))
        torch.testing.assert_close(module(), torch.full_like(module.stored, s_init))
    assert found == {"combine.alpha": 12, "s_qk": 6, "s_u": 6, "s_v": 6, "s_z": 1}
    layer = model.blocks[0]
    assert layer.attn.combine.alpha.stored.shape == layer.ffn.combine.alpha.stored.shape == (d,)  # α ∈ R^d_model
    assert layer.attn.body.s_qk.stored.numel() == d  # one vector of width d_k per head
    assert model.s_z.stored.shape == (256,)  # s_z ∈ R^V


@pytest.mark.parametrize("depth", [2, 6, 24])
def test_builds_and_trains_at_depth(depth: int) -> None:
    torch.manual_seed(0)
    model = variants.create("ngpt", depth=depth).train()
    assert len(model.blocks) == depth
    idx = torch.randint(0, 256, (2, 8))
    logits = model(idx)
    assert logits.shape == (2, 8, 256) and torch.isfinite(logits).all()
    F.cross_entropy(logits.flatten(0, 1), idx.flatten()).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert all(p.grad.abs().sum() > 0 for p in model.parameters() if p.grad is not None)


def test_registry_entry_and_axes() -> None:
    d = variants.describe("ngpt")
    assert d["family"] == "transformer" and "2410.01131" in d["paper"]
    assert "no weight decay" in d["paper"] and "warm-up" in d["paper"]  # the paper's recipe, said where runs read it
    assert d["axes"] == {"combinator": "nlerp", "placement": "hypersphere", "body": "attention+swiglu", "norm": "l2"}
    assert d["init"] == "ngpt" and d["init_pinned"] and d["fixed"] == {"init": "ngpt", "bias": False}
    assert {k: d["defaults"][k] for k in ("depth", "d_model", "n_heads", "d_ff", "vocab_size", "max_len")} == {
        "depth": 6, "d_model": 128, "n_heads": 4, "d_ff": 512, "vocab_size": 256, "max_len": 256}
    assert not any(isinstance(m, (nn.LayerNorm, nn.RMSNorm)) for m in tiny().modules())  # §2.6 item 1
    assert not any(isinstance(m, nn.Linear) and m.bias is not None for m in tiny().modules())


def test_probes_see_every_update() -> None:
    model = tiny()
    rows = probe(model, IDX[:, :-1], IDX[:, 1:], lambda y, t: F.cross_entropy(y.flatten(0, 1), t.flatten()), 0)
    units = {r["block"]: r["kind"] for r in rows}
    assert units == {"blocks.0.attn.combine": "attn", "blocks.0.ffn.combine": "ffn",
                     "blocks.1.attn.combine": "attn", "blocks.1.ffn.combine": "ffn"}
    metrics = {(r["block"], r["metric"]): r["value"] for r in rows}
    for unit in units:
        assert metrics[(unit, "out_rms")] == pytest.approx(TINY["d_model"] ** -0.5)  # unit-norm output
        assert metrics[(unit, "grad_norm")] > 0 and metrics[(unit, "weight_grad_norm")] > 0
        assert metrics[(unit, "branch_ratio")] > 0


BAD = [
    {"depth": 0},
    {"d_model": 30},  # not divisible by n_heads=4
    {"n_heads": 0},
    {"d_ff": 2.5},
    {"vocab_size": -1},
    {"max_len": 0},
    {"dropout": 1.0},
]


@pytest.mark.parametrize("kwargs", BAD)
def test_bad_arguments_raise_the_familys_messages(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError) as family:
        variants.create("preln", **kwargs)
    with pytest.raises(ValueError) as ours:
        variants.create("ngpt", **kwargs)
    assert str(ours.value) == str(family.value)


def test_errors_of_ngpt_itself() -> None:
    with pytest.raises(ValueError, match=r"head width d_model / n_heads \(3\) must be even"):
        variants.create("ngpt", d_model=12, n_heads=4)
    with pytest.raises(ValueError, match="preset fixes init='ngpt'"):
        variants.create("ngpt", init="xavier")
    with pytest.raises(ValueError, match="preset fixes bias=False"):
        variants.create("ngpt", bias=True)
    with pytest.raises(ValueError, match="unknown init 'xavier'; choose one of: ngpt"):
        ngpt(TrunkSpec(bias=False), init="xavier")  # the builder itself, past the registry's pin
    with pytest.raises(ValueError, match="nGPT has no biases"):
        ngpt(TrunkSpec(bias=True))
    model = tiny()
    with pytest.raises(ValueError, match=r"expected token ids of shape \(batch, seq_len\), got shape \(8,\)"):
        model(IDX[0])
    with pytest.raises(ValueError, match="sequence length 9 exceeds max_len 8; build the model with max_len >= 9"):
        model(torch.zeros(1, 9, dtype=torch.long))
