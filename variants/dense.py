"""Dense cross-layer residuals: each layer's inputs are a learned, input-dependent combination of the outputs of
the layers before it (MUDDFormer, DeepCrossAttention).

Two designs of 2025 that replace the one residual stream by the whole history of layer outputs (DenseFormer,
``variants.lm_design``, is their static ancestor; Attention Residuals, ``variants.attn_res``, their softmax-over-
depth sibling, which shares this file's RMS helpers and fused sums). Every sublayer body is the family's (attention,
feed-forward), every norm the family's norm type; the joins are :class:`~variants.combinators.Combinator`
subclasses, so probes see them and ``describe()`` names them. The history is the forward's
:class:`~variants.links.Past`: each join declares the earlier values it reads (``reads``), its layer or unit reads
them from the Past and leaves its own there (``past.put``); the layers hand each other the stream (the next layer's
input or inputs) and nothing else.

- ``mudd``: Xiao, Zhang, Xiao, Gu & Li 2025, "MUDDFormer: Breaking Residual Bottlenecks in Transformers via
  Multiway Dynamic Dense Connections" (ICML 2025, arXiv 2502.12170). The history holds the embeddings X₀ and every
  layer's output Xⱼ (the full stream, not a delta). After layer i, four dynamic dense connections, one per *way*
  c ∈ (Q, K, V, R), build the next layer's four inputs ``X̄ᶜ = Σⱼ (aᶜⱼ + [W₂·GELU(W₁·RMSNorm(Xᵢ))]ᶜⱼ)·Xⱼ`` (the
  weights read the newest output only; RMSNorm without a gain, hidden width 4(i + 2)); the next layer is a Pre-LN
  layer whose attention takes its queries, keys and values from X̄^Q, X̄^K, X̄^V (each through its own norm, the
  authors' ``sepln``) and whose residual is X̄^R. Layer 0 reads X₀; the last connection has the R way only.
  Init: a = one-hot on the newest output, W₂ = 0 (W₁ PyTorch's default): every way starts as Xᵢ, the model as
  Pre-LN (tested exactly).
- ``dca``: Heddes, Javanmard, Axiotis, Fu, Bateni & Mirrokni 2025, "DeepCrossAttention: Supercharging Transformer
  Residual Connections" (ICML 2025, arXiv 2502.06785). The history holds the embeddings and every layer's *update*
  (its attention plus feed-forward output, so that their plain sum is the residual stream). Before each layer a
  generalized residual (GRN-v3) per input ``x̄ᶜ = Σⱼ (bᶜⱼ + ReLU(wᶜᵀ·RMSNorm(xⱼ))) ⊙ xⱼ`` builds the attention's
  query, key and value inputs; the query input is also the layer's residual; the model's output is one more GRN
  over the whole history. Init (the ``deep-cross-attention`` package's): b = 1, w ~ N(0, 0.01²) (at w = 0 the
  ReLU would pass no gradient to w): near the plain residual. Every earlier output is kept (the paper's k-DCA,
  which keeps only some, is not reproduced).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from . import axes, init_marks
from .blocks import NormFactory, PreNorm, ResidualUnit
from .combinators import Add, Combinator
from .links import EMBEDDINGS, Past, Source, SublayerSpec, needs_past, output, own
from .norms import LN_EPS
from .registry import register
from .transformer import Block, CausalSelfAttention, Design, TransformerLM, TransformerSpec, build_transformer

axes.ship("combinator", ["mudd", "dca"])
MUDD_PAPER = ("Xiao et al. 2025, MUDDFormer: Breaking Residual Bottlenecks in Transformers via Multiway Dynamic Dense "
              "Connections (ICML 2025, arXiv 2502.12170): Q/K/V/R dynamic dense connections, Pre-LN layers")
DCA_PAPER = ("Heddes et al. 2025, DeepCrossAttention: Supercharging Transformer Residual Connections (ICML 2025, "
             "arXiv 2502.06785): a generalized residual (GRN-v3) per attention input, every earlier output kept")
DCA_W_STD = 0.01  # GRN's w ~ N(0, 0.01²) (the deep-cross-attention package's init)
MUDD_WAYS = 4  # Q, K, V, R


def rms(x: torch.Tensor) -> torch.Tensor:
    """``x / √(mean(x²) + ε)`` over the last dimension: RMSNorm without a gain (MUDDFormer's RMSnormNoscale)."""
    return x * inv_rms(x)


def inv_rms(x: torch.Tensor) -> torch.Tensor:
    """``1 / √(mean(x²) + ε)`` over the last dimension, kept as a size-1 dimension: RMSNorm's scale of each vector."""
    return torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + LN_EPS)


# How DCA's and Attention Residuals' weighted sums over their sources run. Eagerly, one product with a contraction of
# one per source: the fastest eager form on a CPU, and one the FLOP counter (which counts products only) sees. Under
# torch.compile, the same sums as elementwise expressions: Inductor fuses each join into a kernel or two that read
# every source once, where the products stay one opaque matmul call per source (each reading it again, launched one
# by one): at GPT-2 small on a CPU, compiled, DCA 1.78x and Attention Residuals 1.54x Pre-LN's step as products.
# Equal to rounding (tests/test_fused_joins.py).
FUSED_SUM = {"eager": "one product per source", "compiled": "one fused elementwise sum"}


def compiling() -> bool:
    """Whether this forward is being traced by ``torch.compile`` (torch >= 2.3's name, else dynamo's)."""
    check = getattr(torch.compiler, "is_compiling", None) or torch._dynamo.is_compiling
    return bool(check())


def with_newest(x: torch.Tensor | Sequence[torch.Tensor], fx: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A cross-layer join's sources, oldest first: the earlier outputs ``x`` (a sequence of (..., d) tensors, or one
    (..., n, d) stack) and the newest ``fx``."""
    return (*(x.unbind(-2) if isinstance(x, torch.Tensor) else x), fx)


class CrossLayerAttention(CausalSelfAttention):
    """Causal self-attention whose queries, keys and values may read three inputs: ``x`` of shape (B, T, 3, d)
    holds (X_Q, X_K, X_V) and ``q = X_Q W_q``, ``k = X_K W_k``, ``v = X_V W_v`` (the fused q|k|v weight's rows
    0:d, d:2d, 2d:3d); a (B, T, d) input is the usual one-input attention."""

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if x.dim() == 3:
            return super().heads(x)
        b, t, _, c = x.shape
        bias = self.qkv.bias
        out = [F.linear(x[..., i, :], self.qkv.weight[i * c:(i + 1) * c],
                        None if bias is None else bias[i * c:(i + 1) * c]) for i in range(3)]
        q, k, v = (y.view(b, t, self.n_heads, c // self.n_heads).transpose(1, 2) for y in out)
        return q, k, v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.heads(x)
        b, _, t, _ = q.shape
        p = self.attn_dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        return self.resid_dropout(self.proj(y.transpose(1, 2).reshape(b, t, -1)))


class MultiInputPreNorm(ResidualUnit):
    """``y = combine(x_R, Attn(norm_Q(x_Q), norm_K(x_K), norm_V(x_V)))``: a Pre-LN attention sublayer whose queries,
    keys, values and residual read four streams, ``x`` of shape (..., 4, d) (MUDDFormer's ways; DCA's, x_R = x_Q)."""

    placement = "pre"

    def __init__(self, body: nn.Module, combine: Combinator, norm: NormFactory, *, drop_path: float = 0.0) -> None:
        super().__init__(body, combine, drop_path=drop_path)
        self.norm_q, self.norm_k, self.norm_v = norm(), norm(), norm()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_q, x_k, x_v, x_r = x.unbind(-2)
        qkv = torch.stack((self.norm_q(x_q), self.norm_k(x_k), self.norm_v(x_v)), dim=-2)
        return self.combine(x_r, self.drop_path(self.body(qkv)))


class MultiwayDenseConnection(Combinator):
    """``X̄ᶜ = Σⱼ (aᶜⱼ + [W₂·GELU(W₁·RMSNorm(Xᵢ))]ᶜⱼ)·Xⱼ``, one way c per next-layer input: MUDDFormer (§2.2–2.3).

    ``forward(x, fx)``: the outputs X₀..Xᵢ₋₁ (a sequence of (..., d) tensors, or one (..., i, d) stack) and the
    newest Xᵢ (..., d) -> (..., ways, d)."""

    axis = "mudd"

    def __init__(self, d_model: int, n_inputs: int, ways: int, reads: Sequence[Source] = ()) -> None:
        super().__init__()
        self.ways, self.n_inputs = ways, n_inputs
        self.reads = tuple(reads)  # the earlier outputs its layer hands it (variants.links)
        self.w1 = nn.Linear(d_model, ways * n_inputs, bias=False)
        self.w2 = nn.Linear(ways * n_inputs, ways * n_inputs, bias=False)
        nn.init.zeros_(self.w2.weight)
        # W₁ keeps torch's default draw (what this design has always started from) and W₂ starts at zero: the
        # Transformer stack's scheme re-draws neither
        init_marks.mark_init(self.w1, "own")
        init_marks.mark_init(self.w2, "zero")
        static = torch.zeros(ways, n_inputs)
        static[:, -1] = 1.0  # every way starts as the newest output: Pre-LN's stream
        self.static = nn.Parameter(static)  # a

    def weights(self, x: torch.Tensor) -> torch.Tensor:
        """aᶜⱼ + the dynamic term from the newest output x: (..., ways, n_inputs)."""
        return self.static + self.w2(F.gelu(self.w1(rms(x)))).unflatten(-1, (self.ways, self.n_inputs))

    def forward(self, x: torch.Tensor | Sequence[torch.Tensor], fx: torch.Tensor) -> torch.Tensor:
        w = self.weights(fx).unsqueeze(-1)  # (..., ways, n_inputs, 1): over the history, then the newest output
        # Source by source, each term a product with a contraction of one, (..., ways, 1) @ (..., 1, d): no stack of
        # the history per layer (O(L²) copies over the network, each kept by autograd), the same multiply-adds as
        # a broadcast multiply, and the FLOP counter (which counts products, not elementwise ops) sees the whole
        # sum over j, as it did when the outputs were one stack.
        sources = with_newest(x, fx)
        out = w[..., 0, :] @ sources[0].unsqueeze(-2)
        for j in range(1, len(sources)):
            out = out + w[..., j, :] @ sources[j].unsqueeze(-2)
        return out


class GeneralizedResidual(Combinator):
    """``x̄ᶜ = Σⱼ (bᶜⱼ + ReLU(wᶜᵀ·RMSNorm(xⱼ))) ⊙ xⱼ``: DeepCrossAttention's GRN-v3 (Heddes et al. 2025, §3), one
    output c per attention input (or one: the model's output); b per way, source and feature, w per way.

    ``forward(x, fx)``: the earlier outputs (a sequence of (..., d) tensors, or one (..., n - 1, d) stack) and the
    newest (..., d) -> (..., ways, d)."""

    axis = "dca"
    kernels = FUSED_SUM

    def __init__(self, d_model: int, n_inputs: int, ways: int, reads: Sequence[Source] = ()) -> None:
        super().__init__()
        self.reads = tuple(reads)  # the earlier values its layer hands it (variants.links)
        self.gain = nn.Parameter(torch.ones(d_model))  # RMSNorm's (part of the connection, not the norm-type axis)
        self.w = nn.Linear(d_model, ways, bias=False)
        nn.init.normal_(self.w.weight, std=DCA_W_STD)
        init_marks.mark_init(self.w, "own")  # GRN's draw, not the Transformer scheme's
        self.b = nn.Parameter(torch.ones(ways, n_inputs, d_model))

    def weights(self, outputs: torch.Tensor) -> torch.Tensor:
        """bᶜⱼ + ReLU(wᶜᵀ·RMSNorm(xⱼ)) of the outputs (..., n, d): (..., ways, n, d)."""
        dynamic = F.relu(self.w(rms(outputs) * self.gain))  # (..., n, ways)
        return self.b + dynamic.movedim(-1, -2).unsqueeze(-1)

    def forward(self, x: torch.Tensor | Sequence[torch.Tensor], fx: torch.Tensor) -> torch.Tensor:
        # Source by source, with the gain folded into w (wᶜᵀ·(g ⊙ RMSNorm(xⱼ)) = (xⱼ·(g ⊙ wᶜ))·inv_rms(xⱼ)): no stack of
        # the history, no (..., ways, n, d) weights, no normalised copy. A stack per layer is O(L²) copies over the
        # network, kept by autograd, and its einsums' permuted copies were a quarter of the step at GPT-2 small
        # (`bench cost --profile`); equal to the formula to rounding. Eagerly the static bᶜⱼ ⊙ xⱼ is a multiply-add
        # and the dynamic ReLU(·)·xⱼ a product the FLOP counter sees (the static half, a per-feature scale like a
        # norm's gain, is not counted); compiled, the whole sum is elementwise (:data:`FUSED_SUM`).
        w = self.w.weight * self.gain  # (ways, d)
        fused = compiling()
        out: torch.Tensor | None = None
        for j, v in enumerate(with_newest(x, fx)):
            if fused:
                dynamic = F.relu((v.unsqueeze(-2) * w).sum(-1) * inv_rms(v)).unsqueeze(-1)  # (..., ways, 1)
                term = (self.b[:, j] + dynamic) * v.unsqueeze(-2)
                out = term if out is None else out + term
                continue
            dynamic = F.relu(F.linear(v, w) * inv_rms(v)).unsqueeze(-1)  # (..., ways, 1)
            v = v.unsqueeze(-2)
            out = self.b[:, j] * v if out is None else torch.addcmul(out, self.b[:, j], v)
            out = out + dynamic @ v  # (..., ways, 1) @ (..., 1, d): a product the FLOP counter sees
        assert out is not None
        return out


class MuddLayer(Block):
    """``X_{i+1} = FFN(Attn(X̄ᵢ))``, then ``X̄_{i+1} = connect(X₀ .. X_{i+1})``: MUDDFormer (§2.2–2.3), layer i and its
    dense connections to the next::

        X_{i+1} = FFN(Attn(X̄ᵢ))                       (Pre-LN sublayers; X̄ᵢ the four ways, X₀ for layer 0)
        X̄_{i+1} = Σⱼ (aⱼ + [W₂·GELU(W₁·RMSNorm(X_{i+1}))]ⱼ)·Xⱼ   over X₀ .. X_{i+1}  (:class:`MultiwayDenseConnection`)

    X₀ .. Xᵢ are read from the forward's :class:`~variants.links.Past` (the connection's ``reads``), X_{i+1} is left
    there as ``out(blocks.i.ffn)``; the last layer's connection has the R way only, the stream the final norm reads."""

    def __init__(self, attn: ResidualUnit, ffn: ResidualUnit, connect: MultiwayDenseConnection, index: int) -> None:
        super().__init__(attn, ffn)
        self.connect = connect
        self.out = output(2 * index + 1)

    @classmethod
    def unit(cls, body: nn.Module, join: Combinator, norm: NormFactory, at: SublayerSpec,
             placement: str) -> ResidualUnit:
        """Pre-LN sublayers; every attention after layer 0's reads the four ways (:class:`MultiInputPreNorm`)."""
        return MultiInputPreNorm(body, join, norm) if at.kind == "attn" and at.index > 0 else PreNorm(body, join, norm)

    @classmethod
    def make(cls, attn: ResidualUnit, ffn: ResidualUnit, at: SublayerSpec) -> Block:
        """Layer ``at.layer`` with its connection over X₀ .. X_{i+1} (the R way only after the last layer)."""
        i = at.layer
        history = (EMBEDDINGS, *(output(2 * j + 1) for j in range(i)))  # X₀ .. Xᵢ; Xᵢ₊₁ is this layer's own
        ways = 1 if i == at.depth - 1 else MUDD_WAYS
        return cls(attn, ffn, MultiwayDenseConnection(at.d_model, i + 2, ways, history), i)

    def forward(self, x: torch.Tensor, past: Past | None = None) -> torch.Tensor:
        past = needs_past(self, past)
        x_next = self.ffn(self.attn(x))
        past.put(self.out, x_next)
        ways = self.connect(past.read(self.connect.reads), x_next)
        return ways[..., 0, :] if self.connect.ways == 1 else ways


class DcaLayer(Block):
    """``x_R + a + f``, ``a = Attn(x̄_Q, x̄_K, x̄_V)``, ``f = FFN(norm(x_R + a))``, ``x_R = x̄_Q``: DeepCrossAttention
    (§3), layer i, and the next layer's inputs::

        a = Attn(x̄_Q, x̄_K, x̄_V),  f = FFN(norm(x_R + a)),  x_R = x̄_Q       (the layer's update: a + f)
        x̄ᶜ = Σⱼ (bᶜⱼ + ReLU(wᶜᵀ·RMSNorm(xⱼ))) ⊙ xⱼ   over x₀ and every update so far  (:class:`GeneralizedResidual`)

    The embeddings and the earlier updates are read from the forward's :class:`~variants.links.Past` (the
    connection's ``reads``), this layer's update left there; layer 0 builds its inputs from the embeddings alone
    (``read_in``, a GRN over one source), the last layer's connection is the model's output."""

    def __init__(self, attn: ResidualUnit, ffn: ResidualUnit, connect: GeneralizedResidual, index: int,
                 read_in: GeneralizedResidual | None = None) -> None:
        super().__init__(attn, ffn)
        self.read_in = read_in
        self.connect = connect
        self.update = update_of(index)

    @classmethod
    def unit(cls, body: nn.Module, join: Combinator, norm: NormFactory, at: SublayerSpec,
             placement: str) -> ResidualUnit:
        """Pre-LN sublayers; every attention reads its Q, K, V inputs and its residual (the read-in builds layer
        0's)."""
        return MultiInputPreNorm(body, join, norm) if at.kind == "attn" else PreNorm(body, join, norm)

    @classmethod
    def make(cls, attn: ResidualUnit, ffn: ResidualUnit, at: SublayerSpec) -> Block:
        """Layer ``at.layer`` with its GRN over x₀ and the updates so far (one way after the last layer); layer 0 also
        with its read-in from the embeddings."""
        i, d = at.layer, at.d_model
        read_in = GeneralizedResidual(d, 1, 3, (EMBEDDINGS,)) if i == 0 else None
        updates = (EMBEDDINGS, *(update_of(j) for j in range(i)))  # x₀ and each earlier layer's update
        return cls(attn, ffn, GeneralizedResidual(d, i + 2, 1 if i == at.depth - 1 else 3, updates), i, read_in)

    def forward(self, x: torch.Tensor, past: Past | None = None) -> torch.Tensor:
        past = needs_past(self, past)
        if self.read_in is not None:
            x = with_residual(self.read_in((), *past.read(self.read_in.reads)))
        update = self.ffn(self.attn(x)) - x[..., 3, :]
        past.put(self.update, update)
        ways = self.connect(past.read(self.connect.reads), update)
        return with_residual(ways) if ways.shape[-2] == 3 else ways[..., 0, :]


def update_of(layer: int) -> Source:
    """DCA's update of ``layer`` (its attention plus feed-forward output), as the forward's Past keeps it."""
    return own("update", 2 * layer + 1)


def with_residual(ways: torch.Tensor) -> torch.Tensor:
    """DCA's three inputs (Q, K, V) and its residual, the query input: (..., 3, d) -> (..., 4, d)."""
    return torch.cat((ways, ways[..., :1, :]), dim=-2)


def _add(depth: int, d_model: int) -> Combinator:
    return Add()


MUDD = Design(MUDD_PAPER, lambda d: ["pre"] * d, _add, attention=CrossLayerAttention, block=MuddLayer)
DCA = Design(DCA_PAPER, lambda d: ["pre"] * d, _add, attention=CrossLayerAttention, block=DcaLayer)


@register("mudd", family="transformer", paper=MUDD_PAPER, spec=TransformerSpec())
def mudd(spec: TransformerSpec) -> TransformerLM:
    """MUDDFormer: Pre-LN layers joined by :class:`MultiwayDenseConnection` (Q, K, V, R ways) after every layer."""
    return build_transformer(MUDD, spec)


@register("dca", family="transformer", paper=DCA_PAPER, spec=TransformerSpec())
def dca(spec: TransformerSpec) -> TransformerLM:
    """DeepCrossAttention: a :class:`GeneralizedResidual` per attention input before every layer, one at the end."""
    return build_transformer(DCA, spec)
