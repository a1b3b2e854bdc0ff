"""Parity with an independent implementation: x-transformers (Phil Wang / lucidrains, PyPI ``x-transformers``).

Optional: skipped when ``x_transformers`` is not importable. Each test builds one of our Transformer LMs (tiny,
float64, every parameter random), builds the same network from x-transformers' ``TransformerWrapper`` and
``Decoder``, copies our weights into it and compares the logits of a full-length batch. Nothing of either side's
code is patched: every difference between the two libraries' defaults is closed by an option or by how weights are
copied (listed below), and ReZero needs one structural edit of their model; what is left to differ is a formula.

What is compared (whole model: embeddings, every layer, final norm, tied head):

- ``preln``: ``x + F(LN(x))``, final LN — their default ``pre_norm=True``.
- ``postln``: ``LN(x + F(x))``, no final LN — ``pre_norm=False``.
- ``sandwich``: ``x + LN(F(LN(x)))``, final LN — ``sandwich_norm=True``.
- ``preln`` with ``norm="scalenorm"`` (Nguyen & Salazar 2019) — ``use_scalenorm=True``.
- ``value_residual`` (ResFormer, λ = ½), depth 3 so that two layers read layer 0's values —
  ``add_value_residual=True, learned_value_residual_mix=False`` (their fixed mix ``v ← lerp(v₁, v, ½) = ½(v + v₁)``).
- ``rezero_lm``: x-transformers (2.31) has no ReZero option any more (earlier releases had ``use_rezero``, whose
  norms were ``nn.Identity``). It is rebuilt from their parts: ``use_layerscale=True`` multiplies each branch by a
  learnable per-dimension γ (LayerScale, Touvron et al. 2021), which with every entry equal to our layer's α is
  ReZero's ``x + α·F(x)``; ``pre_norm=False`` puts a norm after each residual add, and those norms are replaced by
  ``nn.Identity()`` after construction (the one structural edit in this file: x-transformers cannot be configured
  without norms). Our one α per layer, shared by both sublayers, becomes the two sublayers' γ vectors.

Adjustments, and why each is needed (each is a Decoder/TransformerWrapper option or a weight mapping):

1. Biases: x-transformers' attention projections are always bias-free (``LinearNoBias``) and its LayerNorm has a gain
   only (``nn.LayerNorm(elementwise_affine=False)·γ``). Ours is built with ``bias=False`` (every Linear and LayerNorm
   bias-free), theirs with ``ff_no_bias=True`` (their FFN has biases by default).
2. GELU: their FeedForward defaults to the exact (erf) GELU, ours is GPT-2's tanh approximation. Theirs is given
   ``ff_custom_activation=nn.GELU(approximate="tanh")`` rather than ours the exact one, so that our model is
   compared as shipped.
3. Softmax precision: their attention always takes its softmax in float32 (``F.softmax(..., dtype=torch.float32)``,
   a mixed-precision guard), which alone puts ~5e-7 between the float64 logits. ``attn_custom_attn_fn`` is the same
   softmax in the input's dtype (their masking and 1/√d_head scaling stay theirs).
4. Norm gains: ``norm_add_unit_offset=False``; their default stores γ − 1 and adds 1 in the forward. γ then copies
   as is.
5. ScaleNorm: theirs is ``normalize(x)·√d·g`` with g starting at 1, ours ``g·x/‖x‖`` with g starting at √d, so
   ``g_theirs = g_ours/√d``. Their F.normalize clamps ‖x‖ at 1e-12, ours at 1e-5: equal for ‖x‖ ≥ 1e-5 (always here).
6. Position table: their ``AbsolutePositionalEmbedding`` multiplies its table by d^-½, so the table copied in is
   ours·√d (exact: d = 16 is a power of two).
7. Tied head: ``tie_embedding=True`` scales the logits by d^-½ by default; ``tie_embedding_scale=1.0`` gives our
   plain ``x·Eᵀ``.
8. Widths: ``attn_dim_head = d_model/n_heads`` (their default is 64 whatever ``dim``); ``d_ff = 4·d_model`` to match
   their ``ff_mult=4``. Their head split (``b n (h d) -> b h n d``) is ours, so their q, k, v are our fused q|k|v's
   rows 0:d, d:2d, 2d:3d.

Equal already, nothing to adjust: LayerNorm ε (1e-5 both), the causal mask, the 1/√d_head attention scale, token
embeddings without scaling or l2-norm (``l2norm_embed=False``), no norm after the embeddings, dropout (eval mode).
:func:`test_their_defaults_break_the_match` shows adjustments 2–4 are needed: the comparison fails without each.
"""

from __future__ import annotations

import math
import warnings
from functools import partial

import pytest
import torch
from torch import nn

import variants
from variants.transformer import ScaleNorm, TransformerLM

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)  # their attend.py calls torch.jit.script, deprecated in recent torch
    xt = pytest.importorskip(
        "x_transformers", reason="x-transformers not importable (optional: parity with an independent implementation)"
    )

D, HEADS, VOCAB, MAX_LEN, DEPTH = 16, 2, 11, 8, 3
TINY = {"depth": DEPTH, "d_model": D, "n_heads": HEADS, "d_ff": 4 * D, "vocab_size": VOCAB, "max_len": MAX_LEN}
# float64; the two libraries order their sums differently. Over 40 seeds the worst mismatch used 4% of this tolerance
# (rezero_lm: no norm bounds its logits), and 1e-6 noise on any one parameter tensor exceeded it 88-fold at least (a
# ScaleNorm's g). Their float32 softmax alone (adjustment 3) puts ~5e-7 between the logits.
TOL = {"rtol": 1e-10, "atol": 1e-10}

# Our variant (and its kwargs) -> the Decoder options that make x-transformers build the same network.
CASES: dict[str, tuple[str, dict[str, object], dict[str, object]]] = {
    "preln": ("preln", {}, {}),
    "postln": ("postln", {}, {"pre_norm": False}),
    "sandwich": ("sandwich", {}, {"sandwich_norm": True}),
    "preln-scalenorm": ("preln", {"norm": "scalenorm"}, {"use_scalenorm": True}),
    "value_residual": ("value_residual", {}, {"add_value_residual": True, "learned_value_residual_mix": False}),
    "rezero_lm": ("rezero_lm", {}, {"pre_norm": False, "use_layerscale": True}),
}


def ours(name: str, **kw: object) -> TransformerLM:
    """Our model, bias-free, float64, every parameter moved from its init by N(0, 0.5²) (norm gains, ReZero's α
    included: formulas bite)."""
    torch.manual_seed(0)  # the init draws from the global generator
    model = variants.create(name, **{**TINY, "bias": False, **kw})
    assert isinstance(model, TransformerLM)
    g = torch.Generator().manual_seed(0)
    model = model.double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5)
    return model


# The Decoder options every case shares: x-transformers configured like our stack (module docstring, adjustments).
SHARED: dict[str, object] = {
    "dim": D, "depth": DEPTH, "heads": HEADS, "attn_dim_head": D // HEADS, "ff_mult": 4,  # 8
    "ff_no_bias": True,  # 1
    "ff_custom_activation": nn.GELU(approximate="tanh"),  # 2
    "attn_custom_attn_fn": partial(torch.softmax, dim=-1),  # 3
    "norm_add_unit_offset": False,  # 4
}


def theirs(options: dict[str, object]) -> nn.Module:
    """x-transformers' decoder-only LM: :data:`SHARED` and ``options`` (which win)."""
    model = xt.TransformerWrapper(
        num_tokens=VOCAB, max_seq_len=MAX_LEN, tie_embedding=True, tie_embedding_scale=1.0,  # 7
        attn_layers=xt.Decoder(**{**SHARED, **options}),
    )
    if options.get("use_layerscale"):  # ReZero has no norm: drop the post-add norms that pre_norm=False placed
        for norms, _, _ in model.attn_layers.layers:
            norms[2] = nn.Identity()
    return model.double().eval()


def gain(norm: nn.Module) -> tuple[str, torch.Tensor]:
    """A norm's gain under its x-transformers parameter name (ScaleNorm: adjustment 5)."""
    if isinstance(norm, ScaleNorm):
        return "g", norm.g.reshape(1) / math.sqrt(D)
    assert isinstance(norm, nn.LayerNorm) and norm.bias is None
    return "gamma", norm.weight


def load(their: nn.Module, our: TransformerLM) -> None:
    """Our weights into their model, by their parameter names; strict: every tensor of theirs is written."""
    state = {"token_emb.emb.weight": our.tok_emb.weight, "pos_emb.emb.weight": our.pos_emb.weight * math.sqrt(D)}  # 6
    keys = set(their.state_dict())
    for i, block in enumerate(our.blocks):
        for j, unit in enumerate((block.attn, block.ffn)):
            at = f"attn_layers.layers.{2 * i + j}."  # their layers alternate attention, feed-forward
            layerscale = at + "1.gamma" in keys
            body = at + ("1.fn." if layerscale else "1.")
            if layerscale:  # ReZero's α, the same in every dimension
                state[at + "1.gamma"] = unit.combine.beta.expand(D)
            if j == 0:
                q, k, v = unit.body.qkv.weight.chunk(3, dim=0)
                state |= {body + "to_q.weight": q, body + "to_k.weight": k, body + "to_v.weight": v,
                          body + "to_out.weight": unit.body.proj.weight}
            else:
                state |= {body + "ff.0.0.weight": unit.body.fc1.weight, body + "ff.2.weight": unit.body.fc2.weight}
            # their norm slots: 0 before the branch, 1 after it (sandwich), 2 after the residual add (post)
            for slot, attr in enumerate(("norm_in", "norm_branch", "norm_out")):
                if hasattr(unit, attr):
                    name, value = gain(getattr(unit, attr))
                    state[f"{at}0.{slot}.{name}"] = value
    if not isinstance(our.norm, nn.Identity):
        name, value = gain(our.norm)
        state["attn_layers.final_norm." + name] = value
    their.load_state_dict({k: v.detach().clone() for k, v in state.items()}, strict=True)


def tokens() -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, MAX_LEN), generator=torch.Generator().manual_seed(1))


def matched(case: str) -> tuple[TransformerLM, nn.Module]:
    name, our_kw, options = CASES[case]
    our = ours(name, **our_kw)
    their = theirs(options)
    load(their, our)
    return our, their


@pytest.mark.parametrize("case", list(CASES))
def test_logits_match_x_transformers(case: str) -> None:
    our, their = matched(case)
    idx = tokens()
    with torch.no_grad():
        expected = their(idx)
        torch.testing.assert_close(our(idx), expected, **TOL)
    assert expected.abs().max() > 1.0  # logits of a size where a formula error shows


@pytest.mark.parametrize("case", list(CASES))
def test_perturbing_any_weight_breaks_the_match(case: str) -> None:
    """Every parameter tensor of ours enters the comparison: noise of size 1e-6 on any one of them is seen."""
    our, their = matched(case)
    idx = tokens()
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        expected = their(idx)
        for name, p in our.named_parameters():
            kept = p.clone()
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 1e-6)
            assert not torch.allclose(our(idx), expected, **TOL), name
            p.copy_(kept)


@pytest.mark.parametrize(
    "default", [{"ff_custom_activation": None}, {"attn_custom_attn_fn": None}, {"norm_add_unit_offset": True}],
    ids=["exact-gelu", "float32-softmax", "unit-offset-gains"],
)
def test_their_defaults_break_the_match(default: dict[str, object]) -> None:
    """Adjustments 2–4 are needed, and the comparison sees what each hides: with their default instead (the erf
    GELU, a float32 softmax, gains stored as γ − 1) the logits differ beyond the tolerance."""
    our, _ = matched("preln")
    their = theirs(default)
    load(their, our)
    idx = tokens()
    with torch.no_grad():
        assert not torch.allclose(our(idx), their(idx), **TOL)
