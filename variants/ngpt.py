"""nGPT, the normalised Transformer: every hidden state and every matrix row on the unit hypersphere.

Loshchilov, Hsieh, Sun & Ginsburg 2024, "nGPT: Normalized Transformer with Representation Learning on the
Hypersphere" (arXiv 2410.01131, ICLR 2025). Section and equation numbers below are the paper's; ``Norm(x)`` is
``x / ‖x‖₂`` over the last dimension. The model has no LayerNorm or RMSNorm anywhere (§2.6, item 1):

- Embeddings and logits (§2.1): ``h₀ = E_input[token]``; ``z = (E_output · h) ⊙ s_z`` (eq. 3). The paper's input
  and output embeddings are two matrices, so unlike the rest of the family the head is **not** tied to the token
  embedding here.
- Layers (§2.2.2, eqs. 10–11): ``h ← Norm(h + α_A ⊙ (h_A − h))`` with ``h_A = Norm(ATTN(h))``, then
  ``h ← Norm(h + α_M ⊙ (h_M − h))`` with ``h_M = Norm(MLP(h))``: a step of per-dimension size α (the *eigen
  learning rates*, vectors of width d_model) from h towards the branch's point on the sphere, normalised back onto
  it. :class:`NLerp` is that join, so probes see both sublayers of every layer as residual units.
- Attention (§2.3.2, eqs. 15–16): ``q ← Norm(q) ⊙ s_qk``, ``k ← Norm(k) ⊙ s_qk`` per head (after the rotary
  position encoding), softmax scale √d_k instead of 1/√d_k; v is not normalised.
- MLP (§2.4.2, eqs. 20–21): SwiGLU ``W_o(u ⊙ SiLU(ν))`` with ``u ← u ⊙ s_u`` and ``ν ← ν ⊙ s_ν · √d_model``.
- Stored scales (§2.5): each trainable vector s is held as a parameter that starts at ``s_scale`` and is used as
  ``s = param · s_init / s_scale``, so s starts at ``s_init`` while Adam moves it at a rate set by ``s_scale``.
  Constants (§2.6, items 3, 5–7): α_init = 0.05 ("in the order of 1/n_layers"), α_scale = 1/√d_model;
  s_qk: init 1, scale 1/√d_model; s_u, s_ν: init 1, scale 1; s_z: init 1, scale 1/√d_model.
- After every optimiser step (§2.6, item 2) E_input, E_output, W_q, W_k, W_v, W_o and the MLP's W_u, W_ν, W_o are
  normalised along their embedding (d_model) dimension: :meth:`NGPT.after_optimizer_step`, which the harness calls
  after each step (``bench.train.StepRunner``). The initialisation is the same normalisation applied to Gaussian
  draws (rows uniform on the sphere), so ``init`` is pinned to ``"ngpt"``: no other scheme survives it.
- The paper trains with Adam without weight decay and without learning-rate warm-up (§2.6, item 8); that recipe
  is the run's (``--optimizer adam --weight-decay 0 --warmup-steps 0``), not the model's.

Where this departs from the paper, for the family's sake: positions are the paper's rotary encoding (Su et al.
2021, RoFormer, §3.2.2; the other variants learn an additive position table, which has no place on the sphere);
the SwiGLU width is the family's ``swiglu_hidden(d_ff)`` (⅔·d_ff, parameter parity with a GELU MLP of width
d_ff); α is used with its sign, as eqs. 10–11 write it (the authors' code takes ``|α|``); ``dropout`` (0 in the
paper) acts on the attention probabilities and on each branch's output before its ``Norm``.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from . import axes
from .blocks import ResidualUnit
from .combinators import Combinator
from .registry import register
from .transformer import TrunkSpec, check_token_ids, swiglu_hidden

ALPHA_INIT = 0.05  # §2.6 item 3: α_A,init = α_M,init = 0.05
ROPE_BASE = 10000.0  # RoFormer §3.2.2: θ_i = 10000^(-2(i-1)/d)
axes.ship("init", ["ngpt"])
axes.ship("combinator", ["nlerp"])


def unit(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``Norm(x) = x / ‖x‖₂`` along ``dim`` (the paper's normalisation, with no epsilon and no gain)."""
    return x / torch.linalg.vector_norm(x, dim=dim, keepdim=True)


class UnitNorm(nn.Module):
    """``Norm(x) = x / ‖x‖₂`` as a module (nGPT, §2.1), so the registry's ``norm`` axis reads ``l2`` rather than
    ``none``."""

    norm_axis = "l2"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return unit(x)


class ScaleFactor(nn.Module):
    """A trainable vector stored as §2.5 prescribes: the parameter starts at ``scale``; ``self()`` returns
    ``param · init / scale``, which starts at ``init``. A smaller ``scale`` makes Adam's fixed-size steps on the
    parameter larger steps of the value."""

    def __init__(self, shape: tuple[int, ...], init: float, scale: float) -> None:
        super().__init__()
        self.init, self.scale = float(init), float(scale)
        self.stored = nn.Parameter(torch.full(shape, self.scale))

    def forward(self) -> torch.Tensor:
        return self.stored * (self.init / self.scale)


def rotary(x: torch.Tensor) -> torch.Tensor:
    """Su et al. 2021 (RoFormer) §3.2.2 on ``(..., seq, d_head)``: each pair (x_2i, x_2i+1) at position t is
    rotated by the angle t·θ_i, θ_i = 10000^(-2i/d_head)."""
    t, d = x.shape[-2], x.shape[-1]
    dtype = torch.promote_types(x.dtype, torch.float32)  # angles in float32 at least (float64 for a float64 model)
    theta = ROPE_BASE ** (-torch.arange(0, d, 2, device=x.device, dtype=dtype) / d)
    angle = torch.arange(t, device=x.device, dtype=dtype)[:, None] * theta
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


class NormalizedAttention(nn.Module):
    """§2.3.2: causal multi-head attention over ``Norm(q) ⊙ s_qk`` and ``Norm(k) ⊙ s_qk`` (eqs. 15–16), softmax
    scale √d_k; fused q|k|v rows (0:d q, d:2d k, 2d:3d v), no biases."""

    probe_kind = "attn"
    # Which axis of each child's weight runs along d_model, the axis §2.6 item 2 normalises: W_q|W_k|W_v map
    # from d_model (their rows are the vectors), W_o maps into it (its columns are).
    embedding_dims: ClassVar[dict[str, int]] = {"qkv": 1, "proj": 0}

    def __init__(self, d_model: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        # §2.6 item 5: s_qk,init = 1, s_qk,scale = 1/√d_model; one vector of width d_k per head.
        self.s_qk = ScaleFactor((n_heads, 1, self.d_head), 1.0, d_model ** -0.5)
        self.attn_dropout = dropout
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b, t, c = h.shape
        q, k, v = self.qkv(h).view(b, t, 3, self.n_heads, self.d_head).permute(2, 0, 3, 1, 4)
        s_qk = self.s_qk()
        q, k = unit(rotary(q)) * s_qk, unit(rotary(k)) * s_qk  # eqs. 15–16
        p = self.attn_dropout if self.training else 0.0
        # §2.3.2: q·k is a cosine times s_qk², so the softmax scale is √d_k (not 1/√d_k).
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True, scale=math.sqrt(self.d_head))
        return self.resid_dropout(self.proj(y.transpose(1, 2).reshape(b, t, c)))


class NormalizedSwiGLU(nn.Module):
    """§2.4.2: ``W_o(u ⊙ SiLU(ν))`` with ``u = W_u·h ⊙ s_u`` (eq. 20) and ``ν = W_ν·h ⊙ s_ν · √d_model``
    (eq. 21; the √d_model puts ν, a cosine, where SiLU is not linear); W_u and W_ν fused in ``fc1``."""

    probe_kind = "ffn"
    embedding_dims: ClassVar[dict[str, int]] = {"fc1": 1, "fc2": 0}

    def __init__(self, d_model: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        hidden = swiglu_hidden(d_ff)
        self.fc1 = nn.Linear(d_model, 2 * hidden, bias=False)
        self.fc2 = nn.Linear(hidden, d_model, bias=False)
        # §2.6 item 6: s_u and s_ν start at 1 with scale 1.
        self.s_u = ScaleFactor((hidden,), 1.0, 1.0)
        self.s_v = ScaleFactor((hidden,), 1.0, 1.0)
        self.sqrt_d = math.sqrt(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        u, v = self.fc1(h).chunk(2, dim=-1)
        u, v = u * self.s_u(), v * (self.s_v() * self.sqrt_d)  # eqs. 20–21
        return self.dropout(self.fc2(u * F.silu(v)))


class NLerp(Combinator):
    """§2.2.2, eqs. 10–11: ``h ← Norm(h + α ⊙ (Norm(F(h)) − h))``, a normalised linear interpolation (the paper's
    stand-in for the spherical one, SLERP) from h towards the branch's point on the sphere, per dimension by the
    eigen learning rates α (§2.6 item 3: α_init = 0.05, α_scale = 1/√d_model)."""

    axis = "nlerp"

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.alpha = ScaleFactor((d_model,), ALPHA_INIT, d_model ** -0.5)
        self.norm = UnitNorm()

    def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.alpha() * (self.norm(fx) - x))


class HypersphereUnit(ResidualUnit):
    """``h ← combine(h, F(h))``: the branch reads the (unit-norm) stream as it is, with no norm before it; the
    normalisation lives in the join (:class:`NLerp`), which keeps h on the sphere."""

    placement = "hypersphere"


class Layer(nn.Module):
    """``h = ffn(attn(h))``: one nGPT layer, the attention update (eq. 10) then the MLP update (eq. 11)."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.attn = HypersphereUnit(NormalizedAttention(d_model, n_heads, dropout), NLerp(d_model))
        self.ffn = HypersphereUnit(NormalizedSwiGLU(d_model, d_ff, dropout), NLerp(d_model))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.ffn(self.attn(h))


class NGPT(nn.Module):
    """Decoder-only nGPT: ``(B, T)`` token ids -> ``(B, T, vocab_size)`` logits ``(E_output · h) ⊙ s_z``."""

    embedding_dims: ClassVar[dict[str, int]] = {"tok_emb": 1, "head": 1}  # E_input, E_output: (vocab, d_model)

    def __init__(self, spec: TrunkSpec) -> None:
        super().__init__()
        d_model, n_heads = spec.d_model, spec.n_heads
        if (d_model // n_heads) % 2:
            raise ValueError(f"the head width d_model / n_heads ({d_model // n_heads}) must be even: the rotary "
                             "position encoding turns pairs of dimensions")
        self.max_len = spec.max_len  # rotary positions need no table; the bound is the family's contract
        self.tok_emb = nn.Embedding(spec.vocab_size, d_model)  # E_input
        self.blocks = nn.ModuleList(Layer(d_model, n_heads, spec.d_ff, spec.dropout) for _ in range(spec.depth))
        self.head = nn.Linear(d_model, spec.vocab_size, bias=False)  # E_output, its own matrix (§2.1)
        self.s_z = ScaleFactor((spec.vocab_size,), 1.0, d_model ** -0.5)  # §2.6 item 7: init 1, scale 1/√d_model
        for _, weight, _ in self.sphere_weights():
            nn.init.normal_(weight)  # any isotropic draw: the normalisation below leaves only its direction
        self.after_optimizer_step()

    def sphere_weights(self) -> list[tuple[str, nn.Parameter, int]]:
        """(name, weight, dim) of every matrix §2.6 item 2 keeps on the sphere: ``Norm`` along ``dim``."""
        out = []
        for prefix, module in self.named_modules():
            for child, dim in getattr(module, "embedding_dims", {}).items():
                name = f"{prefix}.{child}" if prefix else child
                out.append((f"{name}.weight", getattr(module, child).weight, dim))
        return out

    @torch.no_grad()
    def after_optimizer_step(self) -> None:
        """§2.6 item 2: after every optimiser step, every matrix back to unit norm along its embedding dimension."""
        for _, weight, dim in self.sphere_weights():
            weight.copy_(unit(weight, dim))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        check_token_ids(idx, self.max_len)
        h = self.tok_emb(idx)  # on the sphere: E_input's rows are unit vectors
        for layer in self.blocks:
            h = layer(h)
        return self.head(h) * self.s_z()  # eq. 3


PAPER = ("Loshchilov et al. 2024, nGPT: Normalized Transformer with Representation Learning on the Hypersphere "
         "(arXiv 2410.01131): unit-norm embeddings, hidden states and matrix rows, eigen learning rates; trained "
         "there with Adam, no weight decay and no learning-rate warm-up (§2.6)")


# ``init`` and ``bias`` are pinned: §2.6's normalisation is the initialisation (it erases any other scheme) and the
# paper's matrices carry no biases (a bias is no vector on the sphere).
@register("ngpt", family="transformer", paper=PAPER, spec=TrunkSpec(bias=False), init="ngpt", bias=False)
def ngpt(spec: TrunkSpec, *, init: str = "ngpt") -> NGPT:
    """nGPT on ``spec``'s sizes: the family's trunk, without its norm, feed-forward or init choices (§2.6 fixes all
    three)."""
    if init != "ngpt":
        raise ValueError(f"unknown init {init!r}; choose one of: ngpt (nGPT's normalisation defines its init)")
    if spec.bias:
        raise ValueError("nGPT has no biases (bias=False)")
    return NGPT(spec)
