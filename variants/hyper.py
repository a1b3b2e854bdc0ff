"""Multi-stream residuals for the Transformer LM: the stream widened to n copies, mixed by learned matrices.

- ``hyper_connections``: Zhu et al. 2025, "Hyper-Connections" (ICLR 2025, arXiv 2409.19606). The residual stream
  becomes a hidden matrix H ∈ R^{n×d} (n copies of the embeddings, §2.1); every sublayer T (attention and
  feed-forward each have their own connection) reads ``h_0 = A_mᵀ H`` (width connection, Eq. 3) and writes
  ``Ĥ = Bᵀ T(h_0) + A_rᵀ H`` (depth connection and stream mixing, Eqs. 4–5; HC matrix [[0, B], [A_m, A_r]],
  Eq. 1); the model's output is the row sum of the last H, then the final norm (Algorithm 1). ``dynamic=True``
  (DHC, the paper's default) adds input-dependent terms from ``H̄ = norm(H)`` (Eqs. 10–13):
  ``B(H) = s_β·tanh(H̄ W_β)ᵀ + B``, ``A_m(H) = s_α·tanh(H̄ W_m) + A_m``, ``A_r(H) = s_α·tanh(H̄ W_r) + A_r``;
  ``dynamic=False`` is SHC. Init (§2.3, Eq. 14): W = 0, s_α = s_β = 0.01 (Algorithm 2), B = 1, A_r = I and
  A_m = e_{k mod n}, k the sublayer's index — the paper's "layer" T is one attention or one FFN (Fig. 7
  numbers them one by one). All n streams then stay equal, each ``h + T(h)``, and the model *is* its Pre-LN
  base: each sublayer's body is ``F(LN(h_0))`` (§G.1, ``T := T ∘ Norm``), and the final norm of the sum
  ``n·h`` equals ``LN(h)`` but for the norm's ε (``LN_ε(n·h) = LN_{ε/n²}(h)``).
- ``mhc``: Xie et al. 2025, "mHC: Manifold-Constrained Hyper-Connections" (DeepSeek-AI, arXiv 2512.24880).
  The same stream and sublayer, ``x_{l+1} = H_res x_l + H_postᵀ F(H_pre x_l)`` (Eq. 3), with the mappings
  projected onto manifolds (§4.1–4.2): from ``x' = RMSNorm(vec(x_l))`` (all n·d entries of a token at
  once; the norm's weight absorbed in φ, §4.3.1) the raw mappings are ``α·(x' φ) + b`` (Eq. 7), then
  ``H_pre = σ(·)``, ``H_post = 2σ(·)``, ``H_res = Sinkhorn-Knopp(·)`` (Eq. 8): exp, then t_max = 20
  alternating column/row normalisations (Eq. 9), a doubly stochastic matrix up to the iteration's error.
- ``mhc_lite``: Yang & Gao 2026, "mHC-lite: You Don't Need 20 Sinkhorn-Knopp Iterations" (arXiv 2601.05732). mHC's
  join and mappings with ``H_res = Σ_k a_k P_k``, ``a = softmax(α_res·x'φ_res + b_res)`` over all n! permutation
  matrices P_k: by the Birkhoff-von Neumann theorem a convex combination of permutations is doubly stochastic, and
  this one is exactly (rows and columns sum to 1 to rounding, every entry ≥ 0), with no iterations. The formula and
  the init are the authors' code's (github.com/FFTYYY/mhc-lite, ``hyper_conn/mhc_lite.py``; the paper's equation
  numbers are not cited here): φ = 0, the gates 0.01, ``b_pre = b_post = ±1`` (+1 on one stream), b_res 0 on the
  identity and −8 on the other permutations, so a starts at (1, e⁻⁸, …)/(1 + (n! − 1)·e⁻⁸), 0.992 on the identity
  at n = 4. These biases are not ``mhc``'s (ours, above): a comparison of the two changes the init with H_res. Not
  Pre-LN at init: H_post = 2σ(±1) writes the sublayer's output unequally into the streams. What holds for any
  weights is exact: H_res's columns sum to 1, so it conserves the sum of the streams, ``1ᵀx_{l+1} = 1ᵀx_l +
  (1ᵀH_post)·F``; and with φ = 0 and b_post equal on every stream the streams stay equal copies and the model is
  Pre-LN (as mHC, the norms' ε rescaled), whatever b_res and b_pre. Where ours differs from the authors' code: the
  favoured stream is k mod n (theirs draws one at random per sublayer when no layer index is given, as their GPT
  does); their RMSNorm of the flattened token has a learnable gain (n·d weights per sublayer), here absorbed in φ
  as in ``mhc``; they apply the mixing as ``H_resᵀ x`` (the same set of matrices: P_kᵀ is the permutation σ_k⁻¹);
  they norm each stream before summing them at the end. On copied weights (their coefficient of P_k as ours of
  P_k⁻¹, their gain at its init 1, ε = 0 as theirs) one join of ours computes what their ``MHCLite`` does to 7e-16
  in float64; that check needs their repository and einops, so it is not among the tests.

Where mHC differs from Hyper-Connections: one projection reads the whole flattened token (HC reads each
stream's own d-vector, so its coefficients are per stream); no tanh; three gates α (HC shares s_α between
A_m and A_r); H_pre, H_post non-negative and bounded; H_res doubly stochastic (rows sum to 1 exactly here,
columns to the Sinkhorn tolerance) where HC's A_r is free; H_res multiplies x_l where HC applies A_rᵀ. The
mHC paper gives only α = 0.01 and t_max = 20 (App. A.1); φ = 0 follows HC, and the biases are ours:
``b_post = 0`` (H_post = 1, HC's B exactly), ``b_pre = ±g`` (+g on stream k mod n, a sigmoid's stand-in
for HC's one-hot) and ``b_res = g·I`` (diagonally dominant: HC's identity would need infinite logits), with
g = ``MHC_INIT_GAP``; asymmetric, or the n streams could never become different. What mHC equals at init:
H_pre sums to c = σ(g) + (n-1)σ(-g) instead of 1, so each sublayer's norm sees c·h, and the final norm n·h;
otherwise the streams stay equal (H_res's rows sum to 1) and it computes Pre-LN exactly — i.e. it is
Pre-LN with the sublayers' norms' ε divided by c² and the final norm's by n².

Deviations: the stream is summed before the final norm in both (HC's Algorithm 1; the mHC paper does not
say); mHC's RMSNorm takes the family's ε (1e-5, every norm's here) for the paper's 1e-20; HC's √n rescale
of the output projections' init (§4 "Implementation") is not applied, because initialisation is an axis of
its own here (``init=``) held equal across placements; dropping weight decay on the static parts is the
optimiser's business, not the model's.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, cast

import torch
from torch import nn

from . import axes
from .blocks import NormFactory, ResidualUnit
from .checks import positive_int
from .combinators import Combinator
from .links import SublayerSpec
from .norms import resolve_norm
from .registry import register
from .transformer import LN_EPS, Block, Design, Stream, TransformerLM, TransformerSpec, build_transformer

GATE_INIT = 0.01  # s_α, s_β (HC Algorithm 2) and α^pre, α^post, α^res (mHC App. A.1)
SINKHORN_ITERS = 20  # mHC's t_max (§4.2, App. A.1)
axes.ship("combinator", ["hyper", "mhc", "mhc_lite"])
MHC_INIT_GAP = 3.0  # our bias scale for mHC's H_pre and H_res: σ(3) = 0.95; H_res's diagonal 0.87 at n = 4
# mHC-lite's biases, the authors' code's (github.com/FFTYYY/mhc-lite, hyper_conn/mhc_lite.py): ±1 on H_pre and H_post,
# the identity permutation's logit 0 and every other's −8.
LITE_INIT_GAP, LITE_RES_OFF = 1.0, -8.0
LITE_MAX_STREAMS = 6  # n! permutations: 720 at n = 6, 40320 at n = 8 (φ_res alone n·d·n! weights per sublayer)

Weights = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # (read-in, stream mixing, write-out) of one sublayer


class HyperStream(Stream):
    """HC §2.1: the embeddings copied into n streams, ``H⁰ = (h⁰ … h⁰)ᵀ`` of shape (..., n, d); at the end the
    rows are summed (Algorithm 1) before the final norm and the head."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def begin(self, x: torch.Tensor) -> torch.Tensor:
        return x.unsqueeze(-2).expand(*x.shape[:-1], self.n, x.shape[-1])

    def end(self, state: torch.Tensor) -> torch.Tensor:
        return state.sum(-2)


class HyperJoin(Combinator):
    """``H ← join(H, fx)``: a multi-stream join writes the branch output fx (..., d) into the streams H (..., n, d).

    :meth:`read` is the other half, the branch's input. Both take the sublayer's :meth:`weights` of h (computed
    once by :class:`HyperUnit`; from h again when not given)."""

    n: int  # the streams it joins

    def weights(self, h: torch.Tensor) -> Weights:  # pragma: no cover - abstract
        raise NotImplementedError

    def read(self, h: torch.Tensor, w: Weights | None = None) -> torch.Tensor:
        pre = (w if w is not None else self.weights(h))[0]
        return torch.einsum("...i,...id->...d", pre, h)  # HC Eq. 3, h_0ᵀ = A_mᵀH; mHC's H_pre x_l


class HyperConnection(HyperJoin):
    """``Ĥ = Bᵀ·T(h_0) + A_rᵀ·H`` with ``h_0 = A_mᵀ·H``: Zhu et al. 2025, Hyper-Connections (Eqs. 3–5).

    One per sublayer, the k-th (``index``): static parameters B, A_m, A_r (Eq. 1) initialised by Eq. 14; with
    ``norm`` (DHC) the dynamic terms of Eqs. 10–13 from ``H̄ = norm(H)``."""

    axis = "hyper"

    def __init__(self, n: int, d_model: int, index: int, norm: NormFactory | None = None) -> None:
        super().__init__()
        self.n = n  # the streams it joins
        self.b = nn.Parameter(torch.ones(n))  # B, 1×n: weights of the layer output (depth connection)
        a_m = torch.zeros(n)
        a_m[index % n] = 1.0
        self.a_m = nn.Parameter(a_m)  # A_m, n×1: weights of the layer input (width connection)
        self.a_r = nn.Parameter(torch.eye(n))  # A_r, n×n: stream to stream
        self.norm: nn.Module | None = None
        if norm is not None:  # DHC: W = 0, so the dynamic terms start at 0 (§2.3)
            self.norm = norm()
            self.w_beta = nn.Parameter(torch.zeros(d_model))
            self.w_m = nn.Parameter(torch.zeros(d_model))
            self.w_r = nn.Parameter(torch.zeros(d_model, n))
            self.s_alpha = nn.Parameter(torch.tensor(GATE_INIT))
            self.s_beta = nn.Parameter(torch.tensor(GATE_INIT))

    def weights(self, h: torch.Tensor) -> Weights:
        """(A_m, A_r, B): the parameters (SHC), or per token (DHC, Eqs. 10–13: row i from stream i)."""
        if self.norm is None:
            return self.a_m, self.a_r, self.b
        h_bar = self.norm(h)  # Eq. 10
        a_m = self.s_alpha * torch.tanh(h_bar @ self.w_m) + self.a_m  # Eq. 12, (..., n)
        a_r = self.s_alpha * torch.tanh(h_bar @ self.w_r) + self.a_r  # Eq. 13, (..., n, n)
        b = self.s_beta * torch.tanh(h_bar @ self.w_beta) + self.b  # Eq. 11, (..., n)
        return a_m, a_r, b

    def forward(self, h: torch.Tensor, fx: torch.Tensor, w: Weights | None = None) -> torch.Tensor:
        _, a_r, b = w if w is not None else self.weights(h)
        # Eq. 5: Ĥ = Bᵀ T(h_0)ᵀ + H', H' = A_rᵀ H (Eq. 4)
        return b.unsqueeze(-1) * fx.unsqueeze(-2) + torch.einsum("...ij,...id->...jd", a_r, h)


def sinkhorn_knopp(logits: torch.Tensor, iters: int = SINKHORN_ITERS) -> torch.Tensor:
    """mHC Eq. 9 over the last two dimensions: ``M⁽⁰⁾ = exp(logits)``, ``M⁽ᵗ⁾ = T_r(T_c(M⁽ᵗ⁻¹⁾))`` for t ≤ iters.

    Computed on log M (the same iterates, without exp overflowing): rows end summing to 1 to rounding, columns
    to within Sinkhorn's linear convergence after ``iters`` steps; every entry positive."""
    log_m = logits
    for _ in range(iters):
        log_m = log_m - torch.logsumexp(log_m, dim=-2, keepdim=True)  # T_c: each column sums to 1
        log_m = log_m - torch.logsumexp(log_m, dim=-1, keepdim=True)  # T_r: each row sums to 1
    return log_m.exp()


class ManifoldJoin(HyperJoin):
    """``x_{l+1} = H_res·x_l + H_postᵀ·F(H_pre·x_l)``: mHC's join (Xie et al. 2025, Eq. 3), whatever places H_res
    on the Birkhoff polytope (:meth:`mix`: Sinkhorn-Knopp in :class:`ManifoldHyperConnection`, a convex combination
    of permutations in :class:`PermutationHyperConnection`).

    ``φ`` (n·d × n, n, ``res_width``), zero at init, and the gates ``α`` (0.01) project the RMS-normalised flattened
    token (Eq. 7); the biases are the subclass's. H_pre = σ(·), H_post = 2σ(·) (Eq. 8)."""

    def __init__(self, n: int, d_model: int, b_pre: torch.Tensor, b_post: torch.Tensor, b_res: torch.Tensor) -> None:
        super().__init__()
        self.n = n
        self.phi_pre = nn.Parameter(torch.zeros(n * d_model, n))
        self.phi_post = nn.Parameter(torch.zeros(n * d_model, n))
        self.phi_res = nn.Parameter(torch.zeros(n * d_model, b_res.numel()))
        self.alpha_pre = nn.Parameter(torch.tensor(GATE_INIT))
        self.alpha_post = nn.Parameter(torch.tensor(GATE_INIT))
        self.alpha_res = nn.Parameter(torch.tensor(GATE_INIT))
        self.b_pre = nn.Parameter(b_pre)
        self.b_post = nn.Parameter(b_post)
        self.b_res = nn.Parameter(b_res)

    def mix(self, x_res: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        """H_res (..., n, n) from ``x'φ_res`` (..., ``res_width``), the normalised token's projection."""
        raise NotImplementedError

    def weights(self, h: torch.Tensor) -> Weights:
        """(H_pre, H_res, H_post) per token, Eqs. 7–8.

        The three projections of the RMS-normalised token are one product, ``x'φ = (x·φ)/RMS(x)`` with
        φ = [φ_pre | φ_post | φ_res]: one pass over the n·d-wide token instead of a normalised copy and three
        skinny products (time the FLOP count does not show: ``bench cost --profile``); equal to rounding."""
        x = h.flatten(-2)  # vec(x_l), (..., n·d)
        phi = torch.cat((self.phi_pre, self.phi_post, self.phi_res), dim=-1)
        proj = (x @ phi) * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + LN_EPS)  # RMSNorm's weight absorbed in φ
        x_pre, x_post, x_res = proj.split((self.n, self.n, self.phi_res.shape[-1]), dim=-1)
        pre = torch.sigmoid(self.alpha_pre * x_pre + self.b_pre)
        post = 2 * torch.sigmoid(self.alpha_post * x_post + self.b_post)
        return pre, self.mix(x_res), post

    def forward(self, h: torch.Tensor, fx: torch.Tensor, w: Weights | None = None) -> torch.Tensor:
        _, res, post = w if w is not None else self.weights(h)
        return res @ h + post.unsqueeze(-1) * fx.unsqueeze(-2)  # Eq. 3: H_res x_l + H_postᵀ F(H_pre x_l)


def one_hot_bias(n: int, index: int, gap: float) -> torch.Tensor:
    """+gap on stream ``index mod n``, −gap elsewhere: a sigmoid's stand-in for HC's one-hot A_m (Eq. 14)."""
    b = torch.full((n,), -gap)
    b[index % n] = gap
    return b


class ManifoldHyperConnection(ManifoldJoin):
    """``H_res = Sinkhorn-Knopp(α_res·mat(x'φ_res) + b_res)``: Xie et al. 2025, mHC (Eqs. 7–9), in the join
    ``x_{l+1} = H_res·x_l + H_postᵀ·F(H_pre·x_l)`` (Eq. 3).

    One per sublayer, the k-th (``index``): ``φ_res`` is n·d × n²; t_max = ``sinkhorn_iters`` column/row
    normalisations place H_res on the polytope up to the iteration's error. Init: φ = 0, α = 0.01, biases as in the
    module docstring."""

    axis = "mhc"

    def __init__(self, n: int, d_model: int, index: int, sinkhorn_iters: int = SINKHORN_ITERS) -> None:
        super().__init__(n, d_model, one_hot_bias(n, index, MHC_INIT_GAP), torch.zeros(n),  # 2σ(0) = 1: HC's B
                         MHC_INIT_GAP * torch.eye(n))
        self.sinkhorn_iters = sinkhorn_iters

    def mix(self, x_res: torch.Tensor) -> torch.Tensor:
        res = self.alpha_res * x_res.unflatten(-1, (self.n, self.n)) + self.b_res  # mat(·), row-major
        return sinkhorn_knopp(res, self.sinkhorn_iters)


def permutation_matrices(n: int) -> torch.Tensor:
    """All n! permutation matrices (n!, n, n) in ``itertools.permutations`` order (the identity first):
    ``P_k[i, σ_k(i)] = 1``, so ``(P_k x)_i = x_{σ_k(i)}``."""
    return torch.eye(n)[torch.tensor(list(itertools.permutations(range(n))), dtype=torch.long)]


class PermutationHyperConnection(ManifoldJoin):
    """``H_res = Σ_k a_k·P_k``, ``a = softmax(α_res·x'φ_res + b_res)``: Yang & Gao 2026, mHC-lite, in mHC's join
    ``x_{l+1} = H_res·x_l + H_postᵀ·F(H_pre·x_l)``.

    One per sublayer, the k-th (``index``): the P_k are all n! permutation matrices (:func:`permutation_matrices`),
    ``φ_res`` is n·d × n!; a convex combination of permutations is doubly stochastic exactly (Birkhoff-von Neumann),
    with no iterations. Init (the authors' code): φ = 0, α = 0.01, ``b_pre = b_post = ±1`` (+1 on stream k mod n),
    ``b_res`` 0 on the identity and −8 on every other permutation."""

    axis = "mhc_lite"

    def __init__(self, n: int, d_model: int, index: int) -> None:
        perms = permutation_matrices(n)
        b_res = torch.full((len(perms),), LITE_RES_OFF)
        b_res[0] = 0.0  # the identity permutation
        super().__init__(n, d_model, one_hot_bias(n, index, LITE_INIT_GAP), one_hot_bias(n, index, LITE_INIT_GAP),
                         b_res)
        self.register_buffer("perms", perms, persistent=False)  # constants: no state-dict entry, no parameter

    def mix(self, x_res: torch.Tensor) -> torch.Tensor:
        a = torch.softmax(self.alpha_res * x_res + self.b_res, dim=-1)  # (..., n!)
        return torch.einsum("...k,kij->...ij", a, self.perms)


class HyperUnit(ResidualUnit):
    """A Pre-LN sublayer on n streams: ``H ← join(H, F(LN(read(H))))`` — HC Algorithm 3 (the width connection,
    then the block's own norm), mHC's order too (its Table 3 keeps H_pre x_l, then RMSNorm(H_pre x_l)).
    ``body`` is F; the join holds every connection weight, so probes count F's weights as the branch's."""

    placement = "pre"

    def __init__(self, body: nn.Module, combine: HyperJoin, norm: NormFactory, *, drop_path: float = 0.0) -> None:
        super().__init__(body, combine, drop_path=drop_path)
        self.norm_in = norm()  # the name PreNorm uses: a Pre-LN state dict loads into the trunk as it is

    @property
    def join(self) -> HyperJoin:
        return cast(HyperJoin, self.combine)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        w = self.join.weights(h)
        return self.combine(h, self.drop_path(self.body(self.norm_in(self.join.read(h, w)))), w)


class HyperLayer(Block):
    """``H ← ffn(attn(H))``: a layer of two :class:`HyperUnit` on the n streams of :class:`HyperStream` (HC
    Algorithm 1: the embeddings copied into n streams, summed at the end)."""

    @classmethod
    def unit(cls, body: nn.Module, join: Combinator, norm: NormFactory, at: SublayerSpec,
             placement: str) -> ResidualUnit:
        return HyperUnit(body, cast(HyperJoin, join), norm)

    @classmethod
    def stream(cls, norm: NormFactory, spec: Any, layers: Sequence[Block]) -> Stream:
        return HyperStream(cast(HyperJoin, layers[0].attn.combine).n)


def _lm(paper: str, n: int, join: Callable[[int, NormFactory], HyperJoin], spec: TransformerSpec) -> TransformerLM:
    """The family's LM (its defaults and validation) around n streams and Pre-LN sublayers joined by ``join(index,
    norm)`` — index 2i is layer i's attention, 2i + 1 its feed-forward."""
    make_norm = partial(resolve_norm(spec.norm, spec.bias)[1], spec.d_model)  # the norm type of the stack's norms
    design = Design(paper, lambda depth: ["pre"] * depth, lambda at: join(at.index, make_norm), block=HyperLayer)
    return build_transformer(design, spec)


HC_PAPER = ("Zhu et al. 2025, Hyper-Connections (ICLR 2025, arXiv 2409.19606): n streams, static/dynamic HC "
            "(§2.1-2.3, Eqs. 1-14), Pre-LN base")
MHC_PAPER = ("Xie et al. 2025, mHC: Manifold-Constrained Hyper-Connections (DeepSeek-AI, arXiv 2512.24880): H_res "
             "doubly stochastic by Sinkhorn-Knopp (§4.1-4.2, Eqs. 3, 7-9), Pre-LN base")


LITE_PAPER = ("Yang & Gao 2026, mHC-lite: You Don't Need 20 Sinkhorn-Knopp Iterations (arXiv 2601.05732): H_res "
              "a convex combination of the n! permutation matrices, exactly doubly stochastic; mHC's join, Pre-LN base")


@register("hyper_connections", family="transformer", paper=HC_PAPER, spec=TransformerSpec())
def hyper_connections(spec: TransformerSpec, *, n: int = 4, dynamic: bool = True) -> TransformerLM:
    """Hyper-Connections with expansion rate ``n`` (the paper's default 4); ``dynamic``: DHC (True) or SHC."""
    positive_int("n", n, "the expansion rate, the number of residual streams")
    if not isinstance(dynamic, bool):
        raise ValueError(f"dynamic must be True (dynamic hyper-connections) or False (static), got {dynamic!r}")
    return _lm(HC_PAPER, n, lambda index, make_norm: HyperConnection(n, spec.d_model, index,
                                                                     make_norm if dynamic else None), spec)


@register("mhc", family="transformer", paper=MHC_PAPER, spec=TransformerSpec())
def mhc(spec: TransformerSpec, *, n: int = 4, sinkhorn_iters: int = SINKHORN_ITERS) -> TransformerLM:
    """mHC with expansion rate ``n`` (the paper's 4) and ``sinkhorn_iters`` Sinkhorn-Knopp steps (its t_max, 20)."""
    positive_int("n", n, "the expansion rate, the number of residual streams")
    positive_int("sinkhorn_iters", sinkhorn_iters, "Sinkhorn-Knopp iterations, the paper's t_max")
    return _lm(MHC_PAPER, n, lambda index, make_norm: ManifoldHyperConnection(n, spec.d_model, index, sinkhorn_iters),
               spec)


def mhc_lite_join_params(n: int, d_model: int) -> int:
    """Parameters of one mHC-lite join: φ_pre, φ_post (n·d × n each) and φ_res (n·d × n!), three gates α, the biases
    b_pre, b_post (n each) and b_res (n!)."""
    return n * d_model * (2 * n + math.factorial(n)) + 3 + 2 * n + math.factorial(n)


@register("mhc_lite", family="transformer", paper=LITE_PAPER, spec=TransformerSpec())
def mhc_lite(spec: TransformerSpec, *, n: int = 4) -> TransformerLM:
    """mHC-lite with expansion rate ``n`` (the paper's 4), at most 6: every sublayer holds all n! permutations."""
    positive_int("n", n, "the expansion rate, the number of residual streams")
    if n > LITE_MAX_STREAMS:
        raise ValueError(f"mhc_lite mixes the streams by all n! permutation matrices: n must be at most "
                         f"{LITE_MAX_STREAMS} ({math.factorial(LITE_MAX_STREAMS)} permutations), got {n} "
                         f"({math.factorial(n)})")
    return _lm(LITE_PAPER, n, lambda index, make_norm: PermutationHyperConnection(n, spec.d_model, index), spec)
