"""go-mHC: mHC's join with H_res a generalised orthostochastic matrix, exactly doubly stochastic, O(n³) to build.

Dandachi & Diggs-Galligan 2026, "go-mHC: Direct Parameterization of Manifold-Constrained Hyper-Connections via
Generalized Orthostochastic Matrices" (arXiv 2604.02309). The join is mHC's (Xie et al. 2025, Eq. 3; see
:mod:`variants.hyper`), ``x_{l+1} = H_res x_l + H_postᵀ F(H_pre x_l)``, with H_pre = σ(·), H_post = 2σ(·) from the
RMS-normalised flattened token x' (mHC Eqs. 7-8). Only H_res changes; from logits Θ ∈ R^{ns×ns}, s ≥ 1 the paper's
one hyperparameter:

1. ``A = Θ − Θᵀ``                                  (skew-symmetric)
2. ``Q = (I − A)(I + A)⁻¹``                          (Cayley transform: Q is orthogonal; I + A is always invertible)
3. ``H_res[i, j] = (1/s)·Σ_{k,l ≤ s} Q[(i,k), (j,l)]²``  (the s×s blocks' squared Frobenius norms, over s)

Q's rows and columns are unit vectors, so the s rows (columns) of one block row (column) of Q∘Q sum to s, and
H_res's rows and columns sum to 1 exactly (to the rounding of one linear solve), every entry ≥ 0: a point of the
Birkhoff polytope with no iteration (mHC's Sinkhorn is approximate) and (ns)² logits (mHC-lite's n!). s = 1 gives
the orthostochastic matrices (a boundary of the polytope); larger s fills more of it. Θ = ``mat(α_res·x'φ_res +
b_res)``, mHC's Eq. 7 map with (ns)² outputs where mHC has n², so φ_res is n·d × (ns)².

Sources, and what could not be pinned: the three steps and the block layout ``Q[(i,k), (j,l)]`` (row-major, i over
blocks) are the authors' (github.com/itstorque/go-mHC, ``README.md`` "Mathematical Procedure", and the class
``GeneralizedUnistochastic`` of ``toy_models/dynamics.ipynb``, which computes the same map on a static Θ as
``solve(I − A, I + A)``, an orthogonal matrix too). The module their language model imports for the go-mHC layer
(``hyper_conn``) is not in that repository, and the stored copy of the paper holds only its abstract and
introduction: the paper's equation numbers, how its LM derives Θ from the token, and its initialisation are not
cited here. Ours, then: Θ from mHC's Eq. 7 projection (as ``mhc_lite`` derives its logits), s = 2 by default (the
README's recommendation, and ``hyper_conn_s = 2`` in their ``config/with_go_mhc.py``; n = 4 there), ``mhc``'s
init of H_pre and H_post (φ = 0, α = 0.01, ``b_pre = ±g``, ``b_post = 0``), and ``b_res`` drawn from U[0, 1), the
draw of the authors' toy model (``init=torch.rand``), the only initialisation they publish. Not 0: Θ = 0 gives
Q = I and H_res = I, but Q's entries are 1 + O(A²) on the diagonal and O(A) off it, so H_res is quadratic in Θ there
and not a single gradient reaches φ_res or b_res — the identity is a stationary point the mixing would never leave.
What holds at init whatever b_res: the streams start equal, H_res's rows sum to 1 and b_post is equal on every
stream, so they stay equal and the model is mHC's at init, Pre-LN with the sublayers' norms' ε divided by c² (c =
Σσ(b_pre)) and the final norm's by n² — more generally, with φ = 0 and b_post equal on every stream it is Pre-LN
(ε rescaled) whatever b_res and b_pre, mHC-lite's condition. For any weights, H_res's columns summing to 1 conserve
the streams' sum, ``1ᵀx_{l+1} = 1ᵀx_l + (1ᵀH_post)·F``. H_res's rows and columns sum to 1 up to the solve's
rounding, at most about κ(I + A)·ε_machine (measured: 1.3·κ·ε over 12,000 draws).

Multi-Gate Residuals (Zheng et al. 2026, arXiv 2605.23259: per-stream sigmoid gates and attention pooling over the
streams) is not shipped: the stored copy of its paper holds its abstract and introduction only, no code by its
authors could be found, and the descriptions found elsewhere are third parties' readings, so no formula could be
pinned to it. Virtual Width Networks and Hyperloop Transformers, once in that state, are :mod:`variants.vwn` and
:mod:`variants.hyperloop`.
"""

from __future__ import annotations

import torch

from . import axes
from .checks import positive_int
from .hyper import MHC_INIT_GAP, ManifoldJoin, _lm, one_hot_bias
from .registry import register
from .transformer import TransformerLM, TransformerSpec

axes.ship("combinator", ["go_mhc"])
GO_S = 2  # the authors' recommended s (README) and their LM config's hyper_conn_s

GO_PAPER = ("Dandachi & Diggs-Galligan 2026, go-mHC: Direct Parameterization of Manifold-Constrained Hyper-Connections "
            "via Generalized Orthostochastic Matrices (arXiv 2604.02309): H_res the s×s block averages of a Cayley "
            "orthogonal Q², exactly doubly stochastic; mHC's join, Pre-LN base")


def generalized_orthostochastic(theta: torch.Tensor, n: int, s: int) -> torch.Tensor:
    """Θ (..., ns, ns) -> H_res (..., n, n): ``A = Θ − Θᵀ``, ``Q = (I − A)(I + A)⁻¹``, ``H_res[i, j] = (1/s)·Σ_{k,l}
    Q[i·s + k, j·s + l]²``. Rows and columns sum to 1 up to the solve's rounding; every entry is ≥ 0."""
    a = theta - theta.transpose(-1, -2)
    eye = torch.eye(n * s, dtype=theta.dtype, device=theta.device)
    q = torch.linalg.solve(eye + a, eye - a)  # (I + A)⁻¹(I − A) = (I − A)(I + A)⁻¹: the two factors commute
    return q.square().unflatten(-1, (n, s)).unflatten(-3, (n, s)).sum(dim=(-3, -1)) / s


class OrthostochasticHyperConnection(ManifoldJoin):
    """``H_res = GO_s(mat(α_res·x'φ_res + b_res))`` (:func:`generalized_orthostochastic`): go-mHC (Dandachi &
    Diggs-Galligan 2026) in mHC's join ``x_{l+1} = H_res·x_l + H_postᵀ·F(H_pre·x_l)``.

    One per sublayer, the k-th (``index``): ``φ_res`` is n·d × (ns)², ``b_res`` (ns)². Init: H_pre and H_post as
    ``mhc`` (φ = 0, α = 0.01, b_pre = ±g on stream k mod n, b_post = 0), ``b_res`` ~ U[0, 1) (the authors' toy
    model's draw; 0 would be a stationary point, see the module docstring)."""

    axis = "go_mhc"

    def __init__(self, n: int, d_model: int, index: int, s: int = GO_S) -> None:
        super().__init__(n, d_model, one_hot_bias(n, index, MHC_INIT_GAP), torch.zeros(n), torch.rand((n * s) ** 2))
        self.s = s

    def mix(self, x_res: torch.Tensor) -> torch.Tensor:
        ns = self.n * self.s
        theta = (self.alpha_res * x_res + self.b_res).unflatten(-1, (ns, ns))  # mat(·), row-major
        return generalized_orthostochastic(theta, self.n, self.s)


def go_mhc_join_params(n: int, d_model: int, s: int) -> int:
    """Parameters of one go-mHC join: φ_pre, φ_post (n·d × n each) and φ_res (n·d × (ns)²), three gates α, the biases
    b_pre, b_post (n each) and b_res ((ns)²)."""
    return n * d_model * (2 * n + (n * s) ** 2) + 3 + 2 * n + (n * s) ** 2


@register("go_mhc", family="transformer", paper=GO_PAPER, spec=TransformerSpec())
def go_mhc(spec: TransformerSpec, *, n: int = 4, s: int = GO_S) -> TransformerLM:
    """go-mHC with expansion rate ``n`` (the authors' LM: 4) and block size ``s`` (their recommended 2; 1 is the
    orthostochastic boundary)."""
    positive_int("n", n, "the expansion rate, the number of residual streams")
    positive_int("s", s, "go-mHC's block size: H_res averages s×s blocks of an ns×ns orthogonal matrix")
    return _lm(GO_PAPER, n, lambda index, make_norm: OrthostochasticHyperConnection(n, spec.d_model, index, s), spec)
