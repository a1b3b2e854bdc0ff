"""bench.analysis.landscape: filter normalisation, slices pinned against closed forms, summary statistics, figures."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from matplotlib.colors import to_rgb
from matplotlib.contour import ContourSet
from torch import nn

from bench.analysis import landscape as ls
from bench.reports import analysis_figures


def conv_net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 2 * 2, 3))


def frame_1d(alpha: np.ndarray, loss: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"alpha": alpha, "loss": loss})


def frame_2d(coords: np.ndarray, f) -> pd.DataFrame:
    a, b = np.meshgrid(coords, coords, indexing="ij")
    return pd.DataFrame({"alpha": a.ravel(), "beta": b.ravel(), "loss": f(a, b).ravel()})


# -- directions ----------------------------------------------------------------------------------------------------


def test_filter_normalisation_matches_each_weight_filter_and_skips_biases_and_bn() -> None:
    model = conv_net()
    with torch.no_grad():
        model[0].weight[2].zero_()  # a dead filter gets a zero direction
        model[1].weight.fill_(1.5)  # BN γ not all ones: still zero direction
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    d = ls.random_direction(model, torch.Generator().manual_seed(3))
    assert list(d) == [n for n, _ in model.named_parameters()]
    conv_w, lin_w = model[0].weight.detach(), model[4].weight.detach()
    for name, w, filters in (("0.weight", conv_w, 4), ("4.weight", lin_w, 3)):
        assert d[name].shape == w.shape and d[name].dtype == w.dtype
        for f in range(filters):
            assert d[name][f].norm().item() == pytest.approx(w[f].norm().item(), rel=1e-6, abs=1e-12)
    assert d["0.weight"][2].abs().sum() == 0
    assert d["0.weight"][0].abs().min() > 0  # a Gaussian draw, not the weights rescaled
    assert not torch.allclose(d["0.weight"][0] / conv_w[0].norm(), conv_w[0] / conv_w[0].norm())
    for name in ("0.bias", "1.weight", "1.bias", "4.bias"):
        assert torch.count_nonzero(d[name]) == 0
    assert all(torch.equal(b, buffers[n]) for n, b in model.named_buffers())


def test_directions_are_seeded_and_distinct() -> None:
    model = conv_net()
    one, again, other = ls.directions(model, 2, 7), ls.directions(model, 2, 7), ls.directions(model, 1, 8)
    assert len(one) == 2 and len(other) == 1
    assert all(torch.equal(one[k][n], again[k][n]) for k in range(2) for n in one[0])
    assert not torch.equal(one[0]["0.weight"], one[1]["0.weight"])
    assert not torch.equal(one[0]["0.weight"], other[0]["0.weight"])
    assert torch.equal(ls.directions(model, 1, 7)[0]["4.weight"], one[0]["4.weight"])  # first of two = the 1-D one


def test_direction_does_not_depend_on_dtype() -> None:
    model = conv_net()
    d32 = ls.directions(model, 1, 0)[0]
    d64 = ls.directions(model.double(), 1, 0)[0]
    assert d64["0.weight"].dtype == torch.float64
    assert torch.equal(d64["0.weight"].float(), d32["0.weight"])  # same draw, same float64 normalisation
    w = model[0].weight.detach()
    assert (d64["0.weight"].flatten(1).norm(dim=1) - w.flatten(1).norm(dim=1)).abs().max() < 1e-14


@pytest.mark.parametrize("dims", [0, 3, -1])
def test_dims_must_be_one_or_two(dims: int) -> None:
    with pytest.raises(ValueError, match=r"dims must be 1 or 2 .*got " + str(dims)):
        ls.directions(conv_net(), dims, 0)


# -- grid ----------------------------------------------------------------------------------------------------------


def test_grid_is_symmetric_with_exact_zero() -> None:
    g = ls.grid(7, 0.3)
    assert g.dtype == torch.float64
    assert g.tolist() == pytest.approx([-0.3, -0.2, -0.1, 0.0, 0.1, 0.2, 0.3], abs=1e-15)
    assert g[3].item() == 0.0 and torch.equal(g, -g.flip(0))
    assert ls.grid(21, 1.0)[10].item() == 0.0


@pytest.mark.parametrize(
    ("points", "span", "match"),
    [(4, 1.0, "odd integer >= 3 .*got 4"), (1, 1.0, "got 1"), (2.0, 1.0, "got 2.0"), (5, 0.0, "positive finite"),
     (5, -1.0, "got -1.0"), (5, math.inf, "positive finite")],
)  # fmt: skip
def test_grid_rejects(points, span, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ls.grid(points, span)


# -- slices against closed forms -----------------------------------------------------------------------------------


def least_squares_problem(seed: int = 0) -> tuple[nn.Linear, list[tuple[torch.Tensor, torch.Tensor]]]:
    """A float64 Linear(3, 2) fitted by least squares to noisy targets, and the data in batches of 5 and 3."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 3, generator=gen, dtype=torch.float64)
    y = x @ torch.randn(3, 2, generator=gen, dtype=torch.float64) + 0.3 * torch.randn(8, 2, generator=gen,
                                                                                      dtype=torch.float64)  # fmt: skip
    xa = torch.cat([x, torch.ones(8, 1, dtype=torch.float64)], 1)
    sol = torch.linalg.lstsq(xa, y).solution  # (4, 2)
    model = nn.Linear(3, 2).double()
    with torch.no_grad():
        model.weight.copy_(sol[:3].T)
        model.bias.copy_(sol[3])
    return model, [(x[:5], y[:5]), (x[5:], y[5:])]


def test_linear_model_slice_is_the_exact_parabola() -> None:
    model, batches = least_squares_problem()
    (d,) = ls.directions(model, 1, 0)
    x, y = (torch.cat(t).numpy() for t in zip(*batches, strict=True))
    w, b, dw = model.weight.detach().numpy(), model.bias.detach().numpy(), d["weight"].numpy()
    # MSE(α) = mean over all 16 entries of (r + α·Dx)², r = Wx + b - y: sample weighting (5 and 3 samples, each
    # batch's mean over its entries) makes it the mean over all entries.
    r, dx = x @ w.T + b - y, x @ dw.T
    qa, qb, qc = np.mean(dx**2), 2 * np.mean(r * dx), np.mean(r**2)
    coords = ls.grid(9, 2.0)
    frame = ls.landscape(model, F.mse_loss, batches, [d], coords)
    assert list(frame.columns) == ["alpha", "loss"]  # float targets: no accuracy
    a = frame["alpha"].to_numpy()
    np.testing.assert_allclose(a, coords.numpy())
    np.testing.assert_allclose(frame["loss"], qa * a**2 + qb * a + qc, rtol=0, atol=1e-10)
    assert abs(qb) < 1e-12  # the least-squares fit: the slice's vertex is the origin
    s = ls.summary(frame)
    assert s["loss_center"] == pytest.approx(qc, abs=1e-12)
    assert s["edge_rise"] == pytest.approx(qa * 4.0, rel=1e-9)
    assert s["nonconvex_fraction"] == 0.0
    assert s["roughness"] == pytest.approx(2.0, rel=1e-9)


def test_two_directions_give_the_exact_quadratic_form() -> None:
    model, batches = least_squares_problem(1)
    with torch.no_grad():
        model.bias.add_(0.5)  # off the optimum: linear terms too
    d1, d2 = ls.directions(model, 2, 4)
    x, y = (torch.cat(t).numpy() for t in zip(*batches, strict=True))
    r = x @ model.weight.detach().numpy().T + model.bias.detach().numpy() - y
    u, v = x @ d1["weight"].numpy().T, x @ d2["weight"].numpy().T
    coords = ls.grid(5, 1.0)
    frame = ls.landscape(model, F.mse_loss, batches, [d1, d2], coords)
    assert list(frame.columns) == ["alpha", "beta", "loss"] and len(frame) == 25
    assert frame[["alpha", "beta"]].iloc[:2].to_numpy().tolist() == [[-1.0, -1.0], [-1.0, -0.5]]  # α-major
    a, b = frame["alpha"].to_numpy(), frame["beta"].to_numpy()
    expected = (np.mean(r**2) + 2 * a * np.mean(r * u) + 2 * b * np.mean(r * v) + a**2 * np.mean(u**2)
                + 2 * a * b * np.mean(u * v) + b**2 * np.mean(v**2))  # fmt: skip
    np.testing.assert_allclose(frame["loss"], expected, rtol=0, atol=1e-10)
    s = ls.summary(frame)
    assert s["loss_center"] == pytest.approx(np.mean(r**2), abs=1e-12)
    assert s["nonconvex_fraction"] == 0.0  # a positive semi-definite form


def test_accuracy_and_loss_are_sample_weighted() -> None:
    # logits (x + α, -x - α), every target class 0: correct iff x + α > 0; loss log(1 + exp(-2(x + α))).
    model = nn.Linear(1, 2).double()
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0], [-1.0]]))
        model.bias.zero_()
    x = torch.tensor([[-1.5], [-0.5], [0.5], [1.5], [2.5]], dtype=torch.float64)
    y = torch.zeros(5, dtype=torch.long)
    direction = {"weight": torch.zeros(2, 1, dtype=torch.float64), "bias": torch.tensor([1.0, -1.0]).double()}
    frame = ls.landscape(model, F.cross_entropy, [(x[:4], y[:4]), (x[4:], y[4:])], [direction], ls.grid(3, 1.0))
    assert list(frame.columns) == ["alpha", "loss", "acc"]
    assert frame["acc"].tolist() == [2 / 5, 3 / 5, 4 / 5]  # not the mean of per-batch accuracies (0.625, ...)
    xs = x.squeeze(1).numpy()
    for alpha, loss in zip(frame["alpha"], frame["loss"], strict=True):
        assert loss == pytest.approx(np.mean(np.log1p(np.exp(-2 * (xs + alpha)))), abs=1e-12)


class Boom(RuntimeError):
    pass


@pytest.mark.parametrize("fail_at", [None, 3])
def test_parameters_buffers_and_modes_restored_bit_exactly(fail_at: int | None) -> None:
    model = conv_net()
    model.train()
    model[2].eval()  # mixed modes must come back as they were
    x, y = torch.randn(6, 2, 4, 4), torch.tensor([0, 1, 2, 0, 1, 2])
    with torch.no_grad():
        model(x)  # non-trivial running statistics
    before = {n: t.clone() for n, t in model.state_dict().items()}
    modes = [m.training for m in model.modules()]
    calls, seen = [0], []

    def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        calls[0] += 1
        seen.append(model.training)
        if calls[0] == fail_at:
            raise Boom("midway")
        return F.cross_entropy(out, target)

    dirs = ls.directions(model, 2, 0)
    if fail_at is None:
        frame = ls.landscape(model, loss_fn, [(x, y)], dirs, ls.grid(3, 0.7))
        assert len(frame) == 9 and "acc" in frame.columns
    else:
        with pytest.raises(Boom):
            ls.landscape(model, loss_fn, [(x, y)], dirs, ls.grid(3, 0.7))
    assert not any(seen)  # evaluated in eval mode
    assert all(torch.equal(t, before[n]) for n, t in model.state_dict().items())  # weights and BN statistics
    assert [m.training for m in model.modules()] == modes


def test_slice_centre_is_the_model_and_progress_is_reported() -> None:
    model, x = conv_net().eval(), torch.randn(5, 2, 4, 4)
    y = torch.tensor([0, 1, 2, 1, 0])
    with torch.no_grad():
        expected = F.cross_entropy(model(x), y).item()
    done: list[tuple[int, int]] = []
    frame = ls.landscape(model, F.cross_entropy, [(x, y)], ls.directions(model, 1, 0), ls.grid(5, 1.0),
                         progress=lambda k, n: done.append((k, n)))  # fmt: skip
    assert frame["loss"].iloc[2] == pytest.approx(expected, rel=1e-6)
    assert frame["loss"].iloc[0] != frame["loss"].iloc[4]
    assert done == [(k, 5) for k in range(1, 6)]


def test_landscape_rejects_bad_inputs() -> None:
    model = conv_net()
    batches = [(torch.randn(2, 2, 4, 4), torch.tensor([0, 1]))]
    with pytest.raises(ValueError, match="1 or 2 directions"):
        ls.landscape(model, F.cross_entropy, batches, [], ls.grid(3, 1.0))
    with pytest.raises(ValueError, match="one tensor per model parameter"):
        ls.landscape(model, F.cross_entropy, batches, [{"0.weight": torch.zeros(4, 2, 3, 3)}], ls.grid(3, 1.0))
    with pytest.raises(ValueError, match="1-D tensor of finite"):
        ls.landscape(model, F.cross_entropy, batches, ls.directions(model, 1, 0), torch.zeros(2, 2))


# -- summary on constructed slices ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("f", "fraction"),
    [(lambda a, b: a**2 - b**2, 1.0), (lambda a, b: a**2 + 2 * b**2, 0.0), (lambda a, b: a * b, 1.0),
     (lambda a, b: a**2 + b**2 + 1.5 * a * b, 0.0), (lambda a, b: a**2 + b**2 + 3 * a * b, 1.0)],
)  # fmt: skip
def test_nonconvex_fraction_of_quadratic_forms(f, fraction: float) -> None:
    # Hessians [[2, 0], [0, -2]], [[2, 0], [0, 4]], [[0, 1], [1, 0]], [[2, 1.5], [1.5, 2]], [[2, 3], [3, 2]]:
    # the mixed term alone decides the last three.
    assert ls.summary(frame_2d(np.linspace(-1, 1, 7), f))["nonconvex_fraction"] == fraction


def test_summary_2d_by_hand() -> None:
    coords = np.linspace(-2, 2, 5)  # h = 1
    frame = frame_2d(coords, lambda a, b: 3 + a**2 + 2 * b**2).sample(frac=1, random_state=0)  # any row order
    s = ls.summary(frame)
    assert s["loss_center"] == 3.0
    # 16 boundary points: α = ±2 (10 points, α² = 4) and β = ±2 with |α| < 2 (6 points, α² = 1, 0, 1 twice), so
    # Σα² = 44 and by symmetry Σβ² = 44: mean loss 3 + 44/16 + 2·44/16 = 11.25.
    assert s["edge_rise"] == pytest.approx(11.25 - 3.0)
    assert s["nonconvex_fraction"] == 0.0
    # each row along α is α² + const (TV 8, range 4), each column along β 2β² + const (TV 16, range 8)
    assert s["roughness"] == pytest.approx(2.0)
    bumpy = frame_2d(coords, lambda a, b: np.where((a + b) % 2 == 0, 1.0, 0.0))  # a checkerboard
    # each 5-point line alternates: TV 4, range 1
    assert ls.summary(bumpy)["roughness"] == pytest.approx(4.0)


def test_summary_1d_by_hand() -> None:
    alpha = np.linspace(-1, 1, 5)
    s = ls.summary(frame_1d(alpha, (alpha - 0.5) ** 2))  # values 2.25, 1, 0.25, 0, 0.25
    assert s["loss_center"] == 0.25 and s["edge_rise"] == pytest.approx((2.25 + 0.25) / 2 - 0.25)
    assert s["roughness"] == pytest.approx(1 + (0.5 / 1.5) ** 2)  # (2.25 + 0.25) / 2.25
    assert s["nonconvex_fraction"] == 0.0
    wiggle = ls.summary(frame_1d(alpha, np.array([1.0, 0.0, 1.0, 0.0, 1.0])))
    assert wiggle["nonconvex_fraction"] == pytest.approx(1 / 3)  # interior second differences 2, -2, 2
    assert wiggle["roughness"] == 4.0
    line = ls.summary(frame_1d(np.linspace(-3, 3, 61), np.linspace(-3, 3, 61) * 0.1 + 1))
    assert line["nonconvex_fraction"] == 0.0 and line["roughness"] == pytest.approx(1.0)  # rounding is not curvature
    assert ls.summary(frame_1d(alpha, np.full(5, 2.0)))["roughness"] == 1.0
    nan = ls.summary(frame_1d(alpha, np.array([np.inf, 1.0, 0.0, 1.0, 2.0])))
    assert math.isnan(nan["nonconvex_fraction"]) and math.isnan(nan["roughness"]) and nan["loss_center"] == 0.0


def test_summary_rejects_frames_without_origin_or_grid() -> None:
    with pytest.raises(ValueError, match="no point at the origin"):
        ls.summary(frame_1d(np.array([-0.75, -0.25, 0.25, 0.75]), np.ones(4)))
    with pytest.raises(ValueError, match="evenly spaced"):
        ls.summary(frame_1d(np.array([-1.0, 0.0, 0.5]), np.ones(3)))
    with pytest.raises(ValueError, match="exactly once"):
        ls.summary(frame_2d(np.linspace(-1, 1, 3), lambda a, b: a + b).iloc[1:])


# -- figures -------------------------------------------------------------------------------------------------------


def test_figure_1d_draws_each_slice(tmp_path) -> None:
    alpha = np.linspace(-1, 1, 5)
    frames = {"resnet": frame_1d(alpha, 0.1 + alpha**2).assign(acc=0.9 - 0.1 * alpha**2),
              "plain": frame_1d(alpha, 0.1 + 100 * alpha**2).assign(acc=0.5)}  # fmt: skip
    fig = analysis_figures.landscape_figure(frames, "slice")
    loss_ax, acc_ax = fig.axes[:2]
    lines = {line.get_label(): line for line in loss_ax.get_lines() if not line.get_label().startswith("_")}
    assert set(lines) == {"resnet", "plain"}
    np.testing.assert_allclose(lines["plain"].get_ydata(), 0.1 + 100 * alpha**2)
    np.testing.assert_allclose(lines["resnet"].get_xdata(), alpha)
    assert lines["resnet"].get_color() != lines["plain"].get_color()
    assert loss_ax.get_yscale() == "log"  # 0.1 .. 100.1 spans > 100x
    acc = {line.get_label(): line for line in acc_ax.get_lines()}
    np.testing.assert_allclose(acc["resnet"].get_ydata(), 0.9 - 0.1 * alpha**2)
    assert acc_ax.get_ylim() == (-0.02, 1.02)
    red = analysis_figures.landscape_figure(frames, colours={"plain": (1.0, 0.0, 0.0)}).axes[0].get_lines()
    assert [to_rgb(line.get_color()) for line in red if line.get_label() == "plain"] == [(1.0, 0.0, 0.0)]
    path = analysis_figures.plot_slice(frames["resnet"], tmp_path / "sub" / "one.png", "one")
    assert path == tmp_path / "sub" / "one.png" and path.read_bytes()[:4] == b"\x89PNG"


def test_figure_2d_shares_log_levels(tmp_path) -> None:
    coords = np.linspace(-1, 1, 5)
    frames = {"resnet": frame_2d(coords, lambda a, b: 0.01 + a**2 + b**2),
              "plain": frame_2d(coords, lambda a, b: 0.5 + 50 * np.abs(a * b) + a**2)}  # fmt: skip
    fig = analysis_figures.landscape_figure(frames)
    panels = [ax for ax in fig.axes if ax.get_title() in frames]
    assert [ax.get_title() for ax in panels] == ["resnet", "plain"]
    filled = [next(c for c in ax.collections if isinstance(c, ContourSet) and c.filled) for ax in panels]
    np.testing.assert_array_equal(filled[0].levels, filled[1].levels)
    levels = filled[0].levels
    np.testing.assert_allclose(levels[[0, -1]], [0.01, 51.5])  # global min and max of both slices
    np.testing.assert_allclose(np.diff(np.log(levels)), np.log(51.5 / 0.01) / 15)  # log-spaced
    path = analysis_figures.plot_landscape(frames, tmp_path / "two.png")
    assert path.stat().st_size > 0
    with pytest.raises(ValueError, match="1-D and 2-D"):
        analysis_figures.landscape_figure({"a": frames["plain"], "b": frame_1d(coords, coords**2)})
