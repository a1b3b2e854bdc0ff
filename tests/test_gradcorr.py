"""bench.analysis.gradcorr: input-gradient correlations along a line (Balduzzi et al. 2017), pinned on hand
computations."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from bench.analysis import gradcorr
from bench.reports import analysis_figures

SMALL = {"points": 32, "max_lag": 4, "calibrate": 64}  # a cheap but complete measurement


class Quadratic(nn.Module):
    """f(x) = 0.5 x^T A x per sample, output (N, 1): its input gradient is A x (A symmetric)."""

    def __init__(self, a: torch.Tensor) -> None:
        super().__init__()
        self.a = nn.Parameter(a)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * ((x @ self.a) * x).sum(-1, keepdim=True)


def pearson_acf(g: np.ndarray, k: int) -> float:
    """Independent reference: mean over i of numpy's Pearson correlation of rows i and i + k."""
    return float(np.mean([np.corrcoef(g[i], g[i + k])[0, 1] for i in range(len(g) - k)]))


def test_line_inputs_endpoints_spacing_and_shape() -> None:
    x0, d = torch.arange(6.0).view(2, 3), torch.ones(2, 3)
    xs = gradcorr.line_inputs(x0, d, points=5, span=2.0)
    assert xs.shape == (5, 2, 3)
    assert torch.equal(xs[0], x0 - 2.0) and torch.equal(xs[-1], x0 + 2.0) and torch.equal(xs[2], x0)
    assert torch.allclose(xs.diff(dim=0), torch.full((4, 2, 3), 1.0))


@pytest.mark.parametrize(("points", "span", "match"), [(2, 1.0, "points >= 3"), (3, 0.0, "span must be > 0"),
                                                       (3, -1.0, "span must be > 0")])  # fmt: skip
def test_line_inputs_rejects_bad_arguments(points: int, span: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        gradcorr.line_inputs(torch.zeros(3), torch.ones(3), points, span)


def test_linear_model_has_constant_gradients_and_correlation_one() -> None:
    torch.manual_seed(0)
    lin = nn.Linear(7, 3).double()
    readout = torch.randn(3, dtype=torch.float64)
    xs = gradcorr.line_inputs(torch.randn(7, dtype=torch.float64), torch.randn(7, dtype=torch.float64), 20, 1.0)
    grads = gradcorr.line_gradients(lin, xs, readout, batch=6)
    assert grads.shape == (20, 7)
    assert torch.allclose(grads, (readout @ lin.weight.detach()).expand(20, 7), rtol=0, atol=1e-12)
    c = gradcorr.correlations(grads, max_lag=5)
    assert abs(c["neighbor_corr"] - 1) < 1e-12
    assert np.allclose(c["acf"], 1.0, rtol=0, atol=1e-12) and len(c["acf"]) == 6
    assert math.isnan(c["corr_length"])


def test_quadratic_gradients_and_correlations_match_hand_computation() -> None:
    gen = torch.Generator().manual_seed(1)
    b = torch.randn(6, 6, generator=gen, dtype=torch.float64)
    a = b + b.T
    xs = gradcorr.line_inputs(torch.randn(6, generator=gen, dtype=torch.float64),
                              torch.randn(6, generator=gen, dtype=torch.float64), 40, 3.0)  # fmt: skip
    grads = gradcorr.line_gradients(Quadratic(a), xs, torch.ones(1, dtype=torch.float64), batch=7)
    assert torch.allclose(grads, xs @ a, rtol=0, atol=1e-12)
    c = gradcorr.correlations(grads, max_lag=39)
    g = grads.numpy()
    expected = [pearson_acf(g, k) for k in range(40)]
    assert np.allclose(c["acf"], expected, rtol=0, atol=1e-12)
    assert c["neighbor_corr"] == c["acf"][1]
    below = [k for k, v in enumerate(expected) if v < 1 / math.e]
    assert below, "the test line should be long enough for the correlation to fall below 1/e"
    assert c["corr_length"] == below[0]


def test_zero_variance_pairs_are_left_out_of_the_mean() -> None:
    g = np.array([[1.0, 2.0, 4.0], [0.0, 0.0, 0.0], [3.0, 1.0, 2.0], [1.0, 5.0, 2.0]])
    c = gradcorr.correlations(torch.tensor(g), max_lag=3)
    r = lambda i, j: np.corrcoef(g[i], g[j])[0, 1]  # noqa: E731
    assert c["acf"][0] == pytest.approx(1.0)  # row 1 is left out of lag 0 too
    assert c["acf"][1] == pytest.approx(r(2, 3))  # pairs (0,1) and (1,2) are undefined
    assert c["acf"][2] == pytest.approx(r(0, 2))  # (1,3) undefined
    assert c["acf"][3] == pytest.approx(r(0, 3))
    flat = gradcorr.correlations(torch.ones(4, 3), max_lag=2)
    assert all(math.isnan(v) for v in flat["acf"]) and math.isnan(flat["corr_length"])
    with pytest.raises(ValueError, match="max_lag must be in"):
        gradcorr.correlations(torch.tensor(g), max_lag=4)


def conv_bn() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU(), nn.Flatten(), nn.Linear(18, 3)).double()


def test_line_gradients_uses_eval_mode_restores_modes_and_leaves_grads() -> None:
    model = conv_bn()
    model.train()
    model[4].eval()  # a mixed mode must come back as it was
    sentinel = torch.full_like(model[0].weight, 7.0)
    model[0].weight.grad = sentinel.clone()
    gen = torch.Generator().manual_seed(0)
    xs = torch.randn(10, 1, 5, 5, generator=gen, dtype=torch.float64)
    readout = torch.randn(3, generator=gen, dtype=torch.float64)
    chunked = gradcorr.line_gradients(model, xs, readout, batch=4)
    # One sample at a time gives the same gradients only if the points did not interact (eval-mode BN).
    single = gradcorr.line_gradients(model, xs, readout, batch=1)
    assert torch.allclose(chunked, single, rtol=0, atol=1e-12)
    assert model.training and model[1].training and not model[4].training
    assert torch.equal(model[0].weight.grad, sentinel) and model[1].weight.grad is None
    with pytest.raises(ValueError, match="floating-point"):
        gradcorr.line_gradients(model, torch.zeros(3, 1, 5, 5, dtype=torch.long), readout)


def test_calibrate_batchnorm_sets_running_stats_of_the_batch() -> None:
    model = conv_bn().eval()
    bn = model[1]
    bn.running_mean.fill_(5.0)
    x = torch.randn(8, 1, 5, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    gradcorr.calibrate_batchnorm(model, x)
    with torch.no_grad():
        h = model[0](x)  # the BN's input, by hand
    assert torch.allclose(bn.running_mean, h.mean(dim=(0, 2, 3)), rtol=0, atol=1e-12)
    assert torch.allclose(bn.running_var, h.transpose(0, 1).reshape(2, -1).var(dim=1), rtol=0, atol=1e-12)
    assert bn.momentum == 0.1 and int(bn.num_batches_tracked) == 1
    assert not model.training and not bn.training


def test_measure_is_deterministic_and_documented() -> None:
    rng = torch.get_rng_state()
    a = gradcorr.measure("plain", 8, seed=1, **SMALL)
    b = gradcorr.measure("plain", 8, seed=1, **SMALL)
    assert torch.equal(torch.get_rng_state(), rng)  # the caller's random stream is untouched
    assert a.summary == b.summary
    pd.testing.assert_frame_equal(a.acf, b.acf)
    pd.testing.assert_frame_equal(a.series, b.series)
    s = a.summary
    assert {"variant", "depth", "task", "seed", "points", "span", "neighbor_corr", "corr_length",
            "params"} <= set(s)  # fmt: skip
    assert (s["variant"], s["depth"], s["task"], s["seed"], s["points"]) == ("plain", 8, "digits", 1, 32)
    assert s["neighbor_corr"] == a.acf["acf"].iloc[1] and a.acf["acf"].iloc[0] == pytest.approx(1)
    assert list(a.acf.columns) == ["variant", "depth", "seed", "lag", "acf"] and list(a.acf["lag"]) == [0, 1, 2, 3, 4]
    assert list(a.series.columns) == ["variant", "depth", "seed", "t", "dfdt"]
    assert np.allclose(a.series["t"], np.linspace(-1, 1, 32)) and np.isfinite(a.series["dfdt"]).all()
    assert a.series["dfdt"].abs().max() > 0
    c = gradcorr.measure("plain", 8, seed=2, **SMALL)
    assert not np.allclose(c.series["dfdt"], a.series["dfdt"])  # the seed draws another net and line


def test_measure_refuses_token_inputs_and_bad_arguments() -> None:
    with pytest.raises(ValueError, match="gradcorr needs a task with continuous inputs"):
        gradcorr.measure("preln", 2, task="copy", **SMALL)
    with pytest.raises(ValueError, match="1 <= max_lag < points"):
        gradcorr.measure("plain", 8, points=8, max_lag=8)


def test_measure_reports_the_depth_built_when_none_is_given() -> None:
    assert gradcorr.measure("resnet20", None, **SMALL).summary["depth"] == 20


def test_measure_grid_rows_and_depth_errors() -> None:
    grid = gradcorr.measure_grid(["plain"], [8], [0, 1], **SMALL)
    assert list(grid.summary["seed"]) == [0, 1] and len(grid.acf) == 10 and len(grid.series) == 64
    with pytest.raises(ValueError, match="6n"):
        gradcorr.measure_grid(["resnet"], [9], [0], **SMALL)


def test_shortcuts_keep_gradients_correlated() -> None:
    # Measured at seed 0: resnet20 0.82, plain20 0.31 (64 points); seeds 0-3 all give a gap of at least 0.35.
    plain = gradcorr.measure("plain", 20, points=64, max_lag=8, calibrate=128)
    resnet = gradcorr.measure("resnet", 20, points=64, max_lag=8, calibrate=128)
    assert resnet.summary["neighbor_corr"] > plain.summary["neighbor_corr"] + 0.2


def fake_frames() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    corr = {("plain", 20): (0.6, 0.8), ("plain", 56): (0.01, 0.03), ("resnet", 20): (0.9, 0.95),
            ("resnet", 56): (0.8, 0.9)}  # fmt: skip
    summary = pd.DataFrame([{"variant": v, "depth": d, "seed": s, "neighbor_corr": c[s]}
                            for (v, d), c in corr.items() for s in (0, 1)])  # fmt: skip
    acf = pd.DataFrame([{"variant": v, "depth": d, "seed": s, "lag": k, "acf": (c[s] if k else 1.0) ** k}
                        for (v, d), c in corr.items() for s in (0, 1) for k in range(4)])  # fmt: skip
    t = np.linspace(-1, 1, 9)
    series = pd.DataFrame([{"variant": v, "depth": d, "seed": s, "t": x, "dfdt": (s + 1) * (d + i) * (1 + x)}
                           for (v, d) in corr for s in (0, 1) for i, x in enumerate(t)])  # fmt: skip
    return summary, acf, series


def test_figure_draws_the_data(tmp_path) -> None:
    summary, acf, series = fake_frames()
    fig = analysis_figures.gradcorr_figure(summary, acf, series)
    left, mid, right = fig.axes
    lines = {ln.get_label(): ln for ln in left.get_lines()}
    assert left.get_yscale() == "linear" and left.get_ylim() == (-0.1, 1.05)
    assert np.allclose(lines["plain"].get_xdata(), [20, 56]) and np.allclose(lines["plain"].get_ydata(), [0.7, 0.02])
    assert np.allclose(lines["resnet"].get_ydata(), [0.925, 0.85])
    bands = [c.get_paths()[0].vertices[:, 1] for c in left.collections]
    assert max(b.max() for b in bands) <= 1.0 and min(b.min() for b in bands) >= -1.0  # a correlation's range
    assert max(b.max() for b in bands) > 0.99  # the two-seed t-CI of resnet would reach above 1 unclipped
    mids = {ln.get_label(): ln for ln in mid.get_lines()}
    assert np.allclose(mids["plain (depth 56)"].get_ydata(), [1.0, 0.02, (0.01**2 + 0.03**2) / 2,
                                                              (0.01**3 + 0.03**3) / 2])  # fmt: skip
    rights = {ln.get_label(): ln for ln in right.get_lines()}
    y = np.array([56 + i for i in range(9)]) * (1 + np.linspace(-1, 1, 9))  # seed 0 at depth 56
    rms = np.sqrt(np.mean(y**2))
    assert np.allclose(rights["plain (depth 56, seed 0)"].get_ydata(), y / rms)
    assert np.allclose(rights["resnet (depth 56, seed 0)"].get_ydata(), y / rms + 5)
    out = analysis_figures.plot_gradcorr(summary, acf, series, tmp_path / "deep" / "gradcorr.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
