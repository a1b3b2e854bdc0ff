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
- ``preln`` with ``norm="dyt"`` (Zhu et al. 2025, DyT) — ``use_dynamic_tanh=True``; with ``norm="derf"`` (Chen et
  al. 2025) — ``use_derf=True``, also in Post-LN (``pre_norm=False``). Their DyT refuses Post-LN (``assert pre_norm,
  'dynamic tanh norm only tested for pre-norm'``, the x-transformers issue 313 the ``normfree`` study answers): Post-LN
  with DyT is checked by hand in tests/test_variants_norms.py. Their DyT and Derf always hold β; ours, bias-free, hold
  none: their β is copied as 0.
- the orthogonal residual update (Oh et al. 2025) — ``orthog_residual=True``. Their projection (``orthog_project``)
  flattens each *sequence* into one vector (``pack([x], 'b *')``): the branch loses its component along the whole
  sequence's stream, not along each token's. That is our :class:`~variants.updates.Orthogonal` over ``dims=(-2, -1)``
  with ε = 0 (theirs has none): logits equal. It is not causal (a later token changes the projection of every earlier
  one: :func:`test_their_orthogonal_update_is_not_causal`); ``ortho_preln`` projects per token, as the paper's ViT.
- not compared, because their formulation is another: ``attn_aggregated_residuals`` (their ``AttentionResidual``,
  citing Attention Residuals) forms its query from the newest hidden state through a low-rank map and an RMSNorm and
  scales the logits by d^-½, where the paper's query is a learned vector independent of the input, zero at init
  (:func:`test_their_attention_residual_query_reads_the_input`); ``attn_res`` is checked against the paper's
  formula by hand in tests/test_variants_crosslayer.py.
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
from variants.attn_res import DepthAttention
from variants.dense import GeneralizedResidual
from variants.norms import Derf, DyT
from variants.transformer import Design, ScaleNorm, TransformerLM, build_transformer
from variants.updates import Orthogonal

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
    "preln-dyt": ("preln", {"norm": "dyt"}, {"use_dynamic_tanh": True}),
    "preln-derf": ("preln", {"norm": "derf"}, {"use_derf": True}),
    "postln-derf": ("postln", {"norm": "derf"}, {"pre_norm": False, "use_derf": True}),
    "orthogonal-per-sequence": ("ortho_sequence", {}, {"orthog_residual": True}),
}


def ortho_sequence(**kw: object) -> TransformerLM:
    """Pre-LN joined by the orthogonal update over each whole sequence (x-transformers' projection), ε = 0."""
    design = Design("orthogonal update per sequence", lambda depth: ["pre"] * depth,
                    lambda depth, d: Orthogonal((-2, -1), eps=0.0))
    return build_transformer(design, **kw)


def ours(name: str, **kw: object) -> TransformerLM:
    """Our model, bias-free, float64, every parameter moved from its init by N(0, 0.5²) (norm gains, ReZero's α
    included: formulas bite)."""
    torch.manual_seed(0)  # the init draws from the global generator
    kwargs = {**TINY, "bias": False, **kw}
    model = ortho_sequence(**kwargs) if name == "ortho_sequence" else variants.create(name, **kwargs)
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


def gain(norm: nn.Module) -> dict[str, torch.Tensor]:
    """A norm's parameters under their x-transformers names (ScaleNorm: adjustment 5; DyT and Derf: their β is 0)."""
    if isinstance(norm, ScaleNorm):
        return {"g": norm.g.reshape(1) / math.sqrt(D)}
    if isinstance(norm, DyT):
        assert norm.bias is None
        return {"pre_tanh_scale": norm.alpha, "gamma": norm.weight, "beta": torch.zeros_like(norm.weight)}
    if isinstance(norm, Derf):
        assert norm.bias is None
        return {"alpha": norm.alpha, "s": norm.shift, "gamma": norm.weight, "beta": torch.zeros_like(norm.weight)}
    assert isinstance(norm, nn.LayerNorm) and norm.bias is None
    return {"gamma": norm.weight}


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
                    for name, value in gain(getattr(unit, attr)).items():
                        state[f"{at}0.{slot}.{name}"] = value
    if not isinstance(our.norm, nn.Identity):
        for name, value in gain(our.norm).items():
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


def test_their_dyt_refuses_post_ln() -> None:
    """x-transformers issue 313's state of affairs, in code: their DyT is "only tested for pre-norm"."""
    with pytest.raises(AssertionError, match="only tested for pre-norm"):
        theirs({"pre_norm": False, "use_dynamic_tanh": True})


def test_their_orthogonal_update_is_not_causal() -> None:
    """Their projection spans the whole sequence, so a later token moves the logits of earlier ones; ours per token
    (``ortho_preln``) does not."""
    _, their = matched("orthogonal-per-sequence")
    ours_per_token = variants.create("ortho_preln", **{**TINY, "bias": False}).double().eval()
    changed = tokens().clone()
    changed[:, -1] = (changed[:, -1] + 1) % VOCAB
    with torch.no_grad():
        assert not torch.allclose(their(tokens())[:, :-1], their(changed)[:, :-1], rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(ours_per_token(tokens())[:, :-1], ours_per_token(changed)[:, :-1], rtol=0, atol=0)


def test_their_attention_residual_query_reads_the_input() -> None:
    """Their ``AttentionResidual`` weighs the earlier layers by a query read from the newest hidden state, so even at
    init its output is no fixed average of its sources; the paper's query (ours, :class:`~variants.attn_res.
    DepthAttention`) is a learned vector, 0 at init: the uniform average."""
    g = torch.Generator().manual_seed(3)
    hiddens = [torch.randn(1, 4, D, generator=g) for _ in range(3)]
    mean = torch.stack(hiddens).mean(0)
    with torch.no_grad():
        assert not torch.allclose(xt.x_transformers.AttentionResidual(D, lora_rank=4)(hiddens), mean, atol=1e-3)
        torch.testing.assert_close(DepthAttention(D)(torch.stack(hiddens[:2], -2), hiddens[2]), mean)


def test_dca_grn_matches_deep_cross_attention() -> None:
    """The ``deep-cross-attention`` package's ``GRN`` (lucidrains; its GRN-v3, ``num_outputs`` ways) on copied
    weights: our :class:`~variants.dense.GeneralizedResidual`'s b, w and RMSNorm gain are its ``bias``,
    ``to_aggregate`` linear and RMSNorm weight; its RMSNorm's ε (PyTorch's default, the dtype's eps) set to ours.
    Every weight random, float64: equal outputs. (Its ``DCAGPT`` is not compared whole: rotary positions, and only
    the first and last k layers kept.)"""
    dca = pytest.importorskip("deep_cross_attention.dca_gpt",
                              reason="optional parity check: pip install -e '.[parity]'")

    g = torch.Generator().manual_seed(0)
    n, ways = 4, 3
    ours = GeneralizedResidual(D, n, ways).double()
    their = dca.GRN(D, num_layers=n, num_outputs=ways).double()
    with torch.no_grad():
        for p in ours.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))
        norm, linear = their.to_aggregate[0], their.to_aggregate[1]
        norm.weight.copy_(ours.gain)
        norm.eps = 1e-5
        linear.weight.copy_(ours.w.weight)
        their.bias.copy_(ours.b)
    outputs = torch.randn(n, 2, 5, D, generator=g, dtype=torch.float64)  # their layout: (layers, b, n, d)
    ours_out = ours(outputs[:-1].permute(1, 2, 0, 3), outputs[-1])  # ours: (b, n, layers, d) and the newest
    torch.testing.assert_close(ours_out, their(outputs).permute(1, 2, 0, 3), rtol=1e-12, atol=1e-12)
