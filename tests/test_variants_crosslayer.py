"""Cross-layer residuals (Frac-Connections, MUDDFormer, DeepCrossAttention, Attention Residuals) and the speedrun's
residual stream: each forward against a float64 computation by hand from the papers' formulas, the designs that start
as Pre-LN equal to it exactly, causality, every depth, probes, and the argument checks."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from _nets import TINY_LM, assert_causal, layer_norm_by_hand, randomized, tiny_lm
from torch import nn

import variants
from bench.runs.probes import _norm, probe
from variants.attn_res import AttnResUnit, DepthAttention, block_ends
from variants.dense import DcaLayer, GeneralizedResidual, MuddLayer, MultiwayDenseConnection
from variants.frac import FracConnection
from variants.hyper import HyperUnit
from variants.speedrun import SpeedrunLayer, SpeedrunUnit, positions
from variants.transformer import TransformerLM

TINY = TINY_LM
IDX = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]])
DESIGNS = ["frac_connections", "mudd", "dca", "attn_res", "attn_res_block", "speedrun", "preln_x0", "preln_unet",
           "preln_backout", "preln_xsa"]


def tiny(name: str, **kw: object) -> TransformerLM:
    model = tiny_lm(name, **{**TINY, **kw})
    assert isinstance(model, TransformerLM)
    return model


ln = layer_norm_by_hand


def rms(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def embed(model: TransformerLM, idx: torch.Tensor) -> torch.Tensor:
    return model.tok_emb.weight[idx] + model.pos_emb.weight[: idx.shape[1]]


def head(model: TransformerLM, x: torch.Tensor) -> torch.Tensor:
    return ln(model.norm, x) @ model.tok_emb.weight.T


def preln_weights(model: TransformerLM, pre: TransformerLM) -> None:
    """Pre-LN's trunk into ``model`` (every Pre-LN tensor has its place; the attention norms of a multi-input unit
    each take Pre-LN's one), the joins left at their init."""
    state = dict(pre.state_dict())
    for key, value in list(state.items()):
        if ".attn.norm_in." in key:
            for way in ("norm_q", "norm_k", "norm_v"):
                state[key.replace("norm_in", way)] = value
    missing, _ = model.load_state_dict(state, strict=False)
    assert not [k for k in missing if "combine" not in k and "connect" not in k and "read_in" not in k], missing


@pytest.mark.parametrize(("name", "kw"), [("frac_connections", {}), ("frac_connections", {"dynamic": False}),
                                          ("frac_connections", {"m": 2}), ("mudd", {}), ("dca", {})])
def test_starts_as_preln(name: str, kw: dict[str, object]) -> None:
    """Frac-Connections (Γ = A = I, β = 1, W = 0) and MUDDFormer (a one-hot on the newest output, W₂ = 0) are Pre-LN
    at init for any trunk weights; DCA is when its GRNs' w are 0 (b = 1: the sum of every update is the stream)."""
    pre = randomized(tiny("preln"), seed=1)
    torch.manual_seed(0)
    model = tiny(name, **kw).double().eval()
    preln_weights(model, pre)
    if name == "dca":
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, GeneralizedResidual):
                    m.w.weight.zero_()
    torch.testing.assert_close(model(IDX), pre(IDX), rtol=1e-10, atol=1e-10)


def units(model: TransformerLM) -> list[nn.Module]:
    return [u for blk in model.blocks for u in (blk.attn, blk.ffn)]


def frac_by_hand(model: TransformerLM, idx: torch.Tensor, m: int) -> torch.Tensor:
    """Frac-Connections as printed (§3): H = Reshape(h, (m, d/m)); Γ(H), A(H), β(H) from H̄ = LN(H) per fraction
    (DFC, as HC's Eqs. 10–13); input fraction j = Σᵢ Γᵢⱼ Hᵢ; H'ⱼ = βⱼ T(·)ⱼ + Σᵢ Aᵢⱼ Hᵢ."""
    h = embed(model, idx)
    for unit in units(model):
        assert isinstance(unit, HyperUnit)
        fc = unit.combine
        assert isinstance(fc, FracConnection) and fc.norm is not None
        frac = h.unflatten(-1, (m, -1))
        h_bar = ln(fc.norm, frac)
        gamma = fc.s_alpha * torch.tanh(h_bar @ fc.w_gamma) + fc.gamma
        a = fc.s_alpha * torch.tanh(h_bar @ fc.w_r) + fc.a_r
        beta = fc.s_beta * torch.tanh(h_bar @ fc.w_beta) + fc.b
        inp = (gamma.transpose(-1, -2) @ frac).flatten(-2)
        out = unit.body(ln(unit.norm_in, inp)).unflatten(-1, (m, -1))
        h = (beta.unsqueeze(-1) * out + a.transpose(-1, -2) @ frac).flatten(-2)
    return head(model, h)


def test_frac_forward_equals_the_papers_equations() -> None:
    model = randomized(tiny("frac_connections", m=4))
    torch.testing.assert_close(model(IDX), frac_by_hand(model, IDX, 4))


def mudd_by_hand(model: TransformerLM, idx: torch.Tensor) -> torch.Tensor:
    """MUDDFormer (§2.2–2.3): X̄ᶜ = Σⱼ (aᶜⱼ + [W₂ GELU(W₁ RMSNorm(Xᵢ))]ᶜⱼ) Xⱼ; layer i + 1 attends with queries,
    keys and values from X̄^Q, X̄^K, X̄^V (each its own LN) and adds to X̄^R; layer 0 reads X₀."""
    xs = [embed(model, idx)]
    q = k = v = r = xs[0]
    for i, blk in enumerate(model.blocks):
        assert isinstance(blk, MuddLayer)
        att, ffn = blk.attn, blk.ffn
        norms = (att.norm_in,) * 3 if i == 0 else (att.norm_q, att.norm_k, att.norm_v)
        body = att.body
        w, c = body.qkv.weight, q.shape[-1]
        qh, kh, vh = (F.linear(ln(nrm, x), w[j * c:(j + 1) * c], body.qkv.bias[j * c:(j + 1) * c]).unflatten(
            -1, (body.n_heads, -1)).transpose(1, 2) for j, (nrm, x) in enumerate(zip(norms, (q, k, v), strict=True)))
        scores = qh @ kh.transpose(-1, -2) / math.sqrt(c // body.n_heads)
        scores = scores.masked_fill(torch.ones(8, 8, dtype=torch.bool).triu(1), float("-inf"))
        y = (scores.softmax(-1) @ vh).transpose(1, 2).flatten(-2)
        hmid = r + body.proj(y)
        x = hmid + ffn.body(ln(ffn.norm_in, hmid))
        xs.append(x)
        con = blk.connect
        dw = con.static + con.w2(F.gelu(con.w1(rms(x)))).unflatten(-1, (con.ways, con.n_inputs))
        ways = [sum(dw[..., cw, j, None] * xs[j] for j in range(len(xs))) for cw in range(con.ways)]
        q, k, v, r = ways if len(ways) == 4 else (ways[0],) * 4
    return head(model, r)


def test_mudd_forward_equals_the_papers_equations() -> None:
    model = randomized(tiny("mudd"))
    torch.testing.assert_close(model(IDX), mudd_by_hand(model, IDX))


def grn(con: GeneralizedResidual, outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """GRN-v3: x̄ᶜ = Σⱼ (bᶜⱼ + ReLU(wᶜᵀ RMSNorm(xⱼ))) ⊙ xⱼ."""
    out = []
    for c in range(con.b.shape[0]):
        out.append(sum((con.b[c, j] + F.relu(rms(x) * con.gain @ con.w.weight[c])[..., None]) * x
                       for j, x in enumerate(outputs)))
    return out


def dca_by_hand(model: TransformerLM, idx: torch.Tensor) -> torch.Tensor:
    """DCA (§3): before every layer a GRN per attention input (Q, K, V) over the embeddings and every earlier update;
    the query input is the layer's residual; the update a + f joins the history; a GRN over all of it at the end."""
    outputs = [embed(model, idx)]
    for blk in model.blocks:
        assert isinstance(blk, DcaLayer)
        if blk.read_in is not None:
            q, k, v = grn(blk.read_in, outputs)
        att, ffn, body = blk.attn, blk.ffn, blk.attn.body
        c = q.shape[-1]
        w = body.qkv.weight
        qh, kh, vh = (F.linear(ln(nrm, x), w[j * c:(j + 1) * c], body.qkv.bias[j * c:(j + 1) * c]).unflatten(
            -1, (body.n_heads, -1)).transpose(1, 2)
            for j, (nrm, x) in enumerate(zip((att.norm_q, att.norm_k, att.norm_v), (q, k, v), strict=True)))
        scores = qh @ kh.transpose(-1, -2) / math.sqrt(c // body.n_heads)
        scores = scores.masked_fill(torch.ones(8, 8, dtype=torch.bool).triu(1), float("-inf"))
        a = body.proj((scores.softmax(-1) @ vh).transpose(1, 2).flatten(-2))
        f = ffn.body(ln(ffn.norm_in, q + a))
        outputs.append(a + f)
        ways = grn(blk.connect, outputs)
        if len(ways) == 3:
            q, k, v = ways
    return head(model, ways[0])


def test_dca_forward_equals_the_papers_equations() -> None:
    model = randomized(tiny("dca"))
    torch.testing.assert_close(model(IDX), dca_by_hand(model, IDX))


def attn_res_by_hand(model: TransformerLM, idx: torch.Tensor, size: int) -> torch.Tensor:
    """Attention Residuals (§3): sublayer l reads hₗ = Σᵢ softmaxᵢ(wₗᵀ RMSNorm(vᵢ)) vᵢ over the sources; the sources
    are v₀ and every output (Full), or v₀, the sums of completed blocks of ``size`` sublayers and the open block's
    partial sum (Block)."""
    blocks, partial, h = [embed(model, idx)], None, embed(model, idx)
    for k, unit in enumerate(units(model)):
        assert isinstance(unit, AttnResUnit)
        v = unit.body(ln(unit.norm_in, h))
        partial = v if partial is None else partial + v
        sources = [*blocks, partial]
        if (k + 1) % size == 0 or k == 2 * len(model.blocks) - 1:
            blocks, partial = sources, None
        att = unit.combine
        assert isinstance(att, DepthAttention)
        logits = torch.stack([(rms(s) * att.gain) @ att.query for s in sources], -1)
        h = sum(wi[..., None] * s for wi, s in zip(logits.softmax(-1).unbind(-1), sources, strict=True))
    return head(model, h)


@pytest.mark.parametrize(("name", "size"), [("attn_res", 1), ("attn_res_block", 1)])
def test_attn_res_forward_equals_the_papers_equations(name: str, size: int) -> None:
    model = randomized(tiny(name, depth=6))
    size = 1 if name == "attn_res" else math.ceil(12 / 8)  # Block: 8 blocks of ⌈2·depth/8⌉ sublayers
    torch.testing.assert_close(model(IDX), attn_res_by_hand(model, IDX, size))


def test_block_partition() -> None:
    assert block_ends(4, None) == [True] * 4
    assert block_ends(12, 8) == [False, True] * 6  # ⌈12/8⌉ = 2 sublayers a block
    assert block_ends(48, 8) == [(k + 1) % 6 == 0 for k in range(48)]
    assert block_ends(5, 2) == [False, False, True, False, True]  # the last block takes what is left


def test_attn_res_starts_as_a_uniform_average() -> None:
    """w = 0: every source weighs 1/n, whatever the sources (not Pre-LN's sum)."""
    att = DepthAttention(4)
    sources = torch.randn(3, 5, 4)
    torch.testing.assert_close(att.weights(sources), torch.full((3, 5), 0.2))
    torch.testing.assert_close(att(sources[:, :4], sources[:, 4]), sources.mean(1))


def test_attn_res_reads_a_sequence_of_sources_as_their_stack() -> None:
    """The model passes its earlier sources as a tuple (no stack per sublayer); the stack gives the same read, the
    formula's softmax over ``(vᵢ·(g ⊙ w))·inv_rms(vᵢ)``, and the probes' ‖x‖ of the tuple is the stack's norm."""
    torch.manual_seed(0)
    att = DepthAttention(4)
    with torch.no_grad():
        att.query.normal_()
        att.gain.uniform_(0.5, 1.5)
    v = torch.randn(2, 3, 5, 4, dtype=torch.float64)
    att = att.double()
    w = torch.softmax(((v / v.pow(2).mean(-1, keepdim=True).add(1e-5).sqrt()) * att.gain) @ att.query, dim=-1)
    expected = (w.unsqueeze(-1) * v).sum(-2)
    torch.testing.assert_close(att(tuple(v[..., :4, :].unbind(-2)), v[..., 4, :]), expected)
    torch.testing.assert_close(att(v[..., :4, :], v[..., 4, :]), expected)
    assert float(_norm(tuple(v[..., :4, :].unbind(-2)))) == pytest.approx(float(v[..., :4, :].norm()))


def test_more_blocks_than_sublayers_is_full_attn_res() -> None:
    full, block = tiny("attn_res", depth=2), tiny("attn_res", depth=2, n_blocks=4)
    block.load_state_dict(full.state_dict())
    torch.testing.assert_close(block(IDX), full(IDX), rtol=0, atol=0)


def test_speedrun_positions() -> None:
    """The record's 11 layers: skip 3 -> 6, backout at the 2/3 point; scaled to other depths."""
    assert positions(11) == {"skip_in": 3, "skip_out": 6, "backout": 7}
    assert positions(6) == {"skip_in": 2, "skip_out": 3, "backout": 4}
    assert positions(24) == {"skip_in": 7, "skip_out": 13, "backout": 16}
    assert positions(1)["backout"] == 0


def speedrun_by_hand(model: TransformerLM, idx: torch.Tensor) -> torch.Tensor:
    """x ← λ_res x + λ_post F(LN(x)) + λ₀ x₀ per sublayer; v ← v + (W_g x[:12]) ve in the value-embedding layers;
    x ← x + σ(λ_skip) 2σ(W_s x₀[:12]) x_skip before the skip's layer; x − λ_b x_k before the final norm."""
    x = x0 = embed(model, idx)
    tables = [t.weight[idx] for t in model.value_embeds]
    skip = back = None
    for blk in model.blocks:
        assert isinstance(blk, SpeedrunLayer)
        if blk.skip_lambda is not None and skip is not None:
            x = x + torch.sigmoid(blk.skip_lambda) * 2 * torch.sigmoid(blk.skip_gate(x0[..., :12])) * skip
        for unit in (blk.attn, blk.ffn):
            assert isinstance(unit, SpeedrunUnit)
            h = ln(unit.norm_in, x)
            if unit.value_table is None:
                fx = unit.body(h)
            else:
                body = unit.body
                b, t, c = h.shape
                q, k, v = body.qkv(h).view(b, t, 3, body.n_heads, -1).permute(2, 0, 3, 1, 4)
                g = (h[..., :12] @ body.gate.T).transpose(1, 2).unsqueeze(-1)
                v = v + g * tables[unit.value_table].view(b, t, body.n_heads, -1).transpose(1, 2)
                scores = (q @ k.transpose(-1, -2) / math.sqrt(c // body.n_heads)).masked_fill(
                    torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
                fx = body.proj((scores.softmax(-1) @ v).transpose(1, 2).flatten(-2))
            j = unit.combine
            x = j.resid * x + j.post * fx + j.x0 * x0
        if blk.skip_in:
            skip = x
        if blk.backout:
            back = x
    assert back is not None
    return head(model, x - model.stream.backout * back)


def test_speedrun_forward_equals_the_records_stream() -> None:
    model = randomized(tiny("speedrun", depth=6, d_model=24, n_value_embeds=2))
    assert len(model.value_embeds) == 2
    torch.testing.assert_close(model(IDX), speedrun_by_hand(model, IDX))


def test_speedrun_gates_at_init() -> None:
    """λ₀ = 0 and the value-embedding gates 0: only the skip (0.18 of the saved stream) and backout (0.5) differ
    from Pre-LN's stream at init, as in the record."""
    model = tiny("speedrun", depth=6, d_model=24)
    joins = [u.combine for u in units(model)]
    assert all(j.resid.item() == j.post.item() == 1.0 and j.x0.item() == 0.0 for j in joins)
    gates = [u.body.gate for u in units(model)[::2] if u.value_table is not None]
    assert len(gates) == 6 and all(not g.any() for g in gates)  # 3 tables, each used by two layers
    skips = [b for b in model.blocks if b.skip_lambda is not None]
    assert len(skips) == 1 and torch.sigmoid(skips[0].skip_lambda).item() == pytest.approx(0.1824, abs=1e-4)
    assert model.stream.backout.item() == 0.5


@pytest.mark.parametrize("init", ["gpt2", "xavier", "normal"])
def test_speedrun_init_schemes_draw_its_attention_as_the_family_does(init: str) -> None:
    """The init schemes draw a body's linear layers with the last as the projection into the stream: the value
    gate is no linear layer, so the attention's projection gets GPT-2's 1/√(2N) as Pre-LN's does."""
    torch.manual_seed(0)
    ours = tiny("speedrun", depth=6, d_model=24, init=init)
    torch.manual_seed(0)
    pre = tiny("preln", depth=6, d_model=24, init=init)
    for a, b in zip(units(ours)[::2], units(pre)[::2], strict=True):
        assert a.body.proj.weight.std().item() == pytest.approx(b.body.proj.weight.std().item(), rel=0.3)
        assert not a.body.gate.any()


@pytest.mark.parametrize("name", DESIGNS)
def test_causal(name: str) -> None:
    model = randomized(tiny(name))
    assert_causal(model, IDX, TINY["vocab_size"])


@pytest.mark.parametrize("depth", [1, 2, 6, 24])
@pytest.mark.parametrize("name", DESIGNS)
def test_builds_and_trains_at_depth(name: str, depth: int) -> None:
    torch.manual_seed(0)
    model = tiny(name, depth=depth)
    assert len(model.blocks) == depth
    loss = F.cross_entropy(model(IDX).flatten(0, 1), IDX.roll(-1, 1).flatten())
    assert math.isfinite(loss.item())
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    for blk in model.blocks:  # every feed-forward body gets a gradient
        assert blk.ffn.body.fc2.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("name", DESIGNS)
def test_every_norm_type(name: str) -> None:
    for norm in ("rmsnorm", "dyt", "derf", "seednorm"):
        model = tiny(name, depth=2, norm=norm)
        assert variants.derive_axes(model)["norm"] == norm
        assert torch.isfinite(model(IDX)).all()


@pytest.mark.parametrize("name", DESIGNS)
def test_probes_see_every_join(name: str) -> None:
    model = randomized(tiny(name)).float()
    rows = probe(model, IDX, IDX, lambda out, y: F.cross_entropy(out.flatten(0, 1), y.flatten()), step=0)
    metrics = {(r["layer"], r["metric"]) for r in rows}
    joins = [m for m in model.modules() if isinstance(m, variants.Combinator)]
    for layer in range(len(joins)):
        assert {(layer, "out_rms"), (layer, "branch_ratio")} <= metrics, layer
    assert all(math.isfinite(r["value"]) for r in rows if r["metric"] != "branch_ratio")


def test_connection_weights_are_what_the_plot_reads() -> None:
    """``weights`` of each connection is the formula's coefficient table (the layer-weights figure reads it)."""
    mudd = MultiwayDenseConnection(8, 3, 4)
    x = torch.randn(2, 5, 8)
    assert mudd.weights(x).shape == (2, 5, 4, 3)
    torch.testing.assert_close(mudd.weights(x), mudd.static.expand(2, 5, 4, 3))  # W₂ = 0: the static one-hot
    dca = GeneralizedResidual(8, 3, 3)
    assert dca.weights(torch.randn(2, 5, 3, 8)).shape == (2, 5, 3, 3, 8)


@pytest.mark.parametrize(("name", "kw", "message"), [
    ("frac_connections", {"m": 3}, r"d_model \(16\) must be divisible by the number of fractions m \(3\)"),
    ("frac_connections", {"m": 0}, r"m \(the number of fractions.*got 0"),
    ("attn_res", {"n_blocks": 0}, r"n_blocks \(Block AttnRes.*got 0"),
    ("speedrun", {"n_value_embeds": -1}, r"n_value_embeds must be a non-negative integer, got -1"),
    ("mudd", {"depth": 0}, r"depth must be a positive integer, got 0"),
    ("dca", {"d_model": 15}, r"d_model \(15\) must be divisible by n_heads \(2\)"),
])
def test_bad_arguments_raise_naming_them(name: str, kw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tiny(name, **kw)


def test_registered_with_their_papers() -> None:
    for name, arxiv in [("frac_connections", "2503.14125"), ("mudd", "2502.12170"), ("dca", "2502.06785"),
                        ("attn_res", "2603.15031"), ("attn_res_block", "2603.15031"), ("speedrun", "modded-nanogpt")]:
        d = variants.describe(name)
        assert arxiv in d["paper"] and d["family"] == "transformer", name
    assert variants.describe("attn_res_block")["fixed"] == {"n_blocks": 8}
    assert variants.describe("mudd")["axes"]["combinator"] == "add, mudd"
    assert variants.describe("frac_connections")["axes"]["combinator"] == "frac"
