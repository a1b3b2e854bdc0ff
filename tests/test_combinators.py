"""Exact formulas of every combinator and every norm placement (variants.blocks) on fixed tensors."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from variants.blocks import PLACEMENTS, sublayer
from variants.combinators import COMBINATORS, Add, Concat, Gate, NoShortcut, Scaled, TransformGate
from variants.layers import drop_path_rates

X = torch.tensor([[1.0, -2.0, 3.0, 0.5]])
FX = torch.tensor([[0.5, 4.0, -1.0, 2.0]])


def test_lookup_table_names() -> None:
    assert set(COMBINATORS) == {"none", "add", "gate", "concat", "scaled", "laurel"}


def test_scaled_with_a_learnable_alpha_per_channel() -> None:
    """Admin's ω (Liu et al. 2020): ``y = ω ⊙ x + F(x)``, ω a learnable vector on the channel dimension."""
    c = Scaled(alpha=2.0, alpha_shape=(4,), channel_dim=-1)
    assert isinstance(c.alpha, torch.nn.Parameter) and c.alpha.tolist() == [2.0] * 4
    with torch.no_grad():
        c.alpha.copy_(torch.tensor([1.0, 0.0, -1.0, 2.0]))
    torch.testing.assert_close(c(X, FX), torch.tensor([[1.0, 0.0, -3.0, 1.0]]) + FX)


def test_none_add_concat() -> None:
    assert torch.equal(NoShortcut()(X, FX), FX)
    assert torch.equal(Add()(X, FX), torch.tensor([[1.5, 2.0, 2.0, 2.5]]))
    assert torch.equal(Concat()(X, FX), torch.tensor([[1.0, -2.0, 3.0, 0.5, 0.5, 4.0, -1.0, 2.0]]))


def _gate(bias: float) -> TransformGate:
    proj = nn.Linear(4, 4)
    nn.init.zeros_(proj.weight)
    return TransformGate(proj, bias)


def test_highway_gate_formula_and_bias() -> None:
    g = Gate(_gate(-2.0))
    t = 1 / (1 + math.exp(2.0))
    assert torch.allclose(g(X, FX), t * FX + (1 - t) * X)
    assert torch.allclose(g.gate.proj.bias, torch.full((4,), -2.0))


def test_shortcut_only_gate_formula() -> None:
    g = Gate(_gate(0.0), mode="shortcut_only")
    assert torch.allclose(g(X, FX), FX + 0.5 * X)


def test_gate_errors() -> None:
    with pytest.raises(ValueError, match="gate mode must be one of"):
        Gate(_gate(0.0), mode="sideways")
    with pytest.raises(ValueError, match="must have a bias"):
        TransformGate(nn.Linear(4, 4, bias=False), -1.0)


def test_scaled_fixed_and_learnable() -> None:
    assert torch.allclose(Scaled(alpha=2.0, beta=0.5)(X, FX), 2.0 * X + 0.5 * FX)
    rezero = Scaled(beta=0.0, learnable_beta=True)
    assert torch.equal(rezero(X, FX), X) and isinstance(rezero.beta, nn.Parameter)
    ls = Scaled(beta=0.1, learnable_beta=True, beta_shape=(4,), channel_dim=-1)
    with torch.no_grad():
        ls.beta.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert torch.allclose(ls(X, FX), X + torch.tensor([1.0, 2.0, 3.0, 4.0]) * FX)
    img = Scaled(beta=1.0, learnable_beta=True, beta_shape=(2,), channel_dim=1)
    x = torch.ones(1, 2, 3, 3)
    with torch.no_grad():
        img.beta.copy_(torch.tensor([2.0, 3.0]))
    assert torch.equal(img(x, x)[0, :, 0, 0], torch.tensor([3.0, 4.0]))


class Double(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * x


class Shift(nn.Module):
    """A 'norm' with a visible effect: subtract the mean (LayerNorm without scaling)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - x.mean(-1, keepdim=True)


def centred(t: torch.Tensor) -> torch.Tensor:
    return t - t.mean(-1, keepdim=True)


@pytest.mark.parametrize(
    ("placement", "expected"),
    [
        ("post", lambda x: centred(x + 2 * x)),
        ("pre", lambda x: x + 2 * centred(x)),
        ("sandwich", lambda x: x + centred(2 * centred(x))),
        ("peri", lambda x: x + centred(2 * centred(x))),
        ("none", lambda x: x + 2 * x),
    ],
)
def test_placement_formulas(placement: str, expected) -> None:  # type: ignore[no-untyped-def]
    r = sublayer(placement, Double(), Add(), norm=Shift)
    assert isinstance(r, PLACEMENTS[placement])
    assert torch.allclose(r(X), expected(X))


def test_placements_own_only_the_norms_they_use() -> None:
    count = {
        p: sum(p_.numel() for p_ in sublayer(p, nn.Identity(), Add(), lambda: nn.LayerNorm(4)).parameters())
        for p in ("post", "pre", "sandwich", "none")
    }
    assert count == {"post": 8, "pre": 8, "sandwich": 16, "none": 0}


def test_placement_errors() -> None:
    with pytest.raises(ValueError, match="norm placement must be one of"):
        sublayer("middle", Double(), Add(), norm=Shift)
    with pytest.raises(ValueError, match="placement 'pre' needs a norm factory"):
        sublayer("pre", Double(), Add())


def test_drop_path_linear_decay_and_eval_identity() -> None:
    assert drop_path_rates(0.5, 4) == [0.125, 0.25, 0.375, 0.5]
    with pytest.raises(ValueError, match=r"drop_path_rate must be in \[0, 1\)"):
        drop_path_rates(1.0, 3)
    r = sublayer("none", Double(), Add(), drop_path=0.5)
    r.eval()
    assert torch.equal(r(X), 3 * X)
    r.train()
    torch.manual_seed(0)
    out = r(torch.ones(1000, 4))
    kept = (out[:, 0] == 1 + 2 / 0.5).float().mean()  # survivors rescaled by 1/(1-p)
    dropped = (out[:, 0] == 1).float().mean()
    assert kept + dropped == 1 and 0.4 < kept < 0.6
