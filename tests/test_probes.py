"""bench.runs.probes: exact per-layer values on hand-built models, and a model left exactly as found."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

import variants
from bench.runs.probes import METRICS, RANK_SAMPLES, format_probe_table, probe, probe_table
from variants.blocks import PostNorm, PreNorm, ResidualUnit
from variants.combinators import Add, Combinator, Gate, NoShortcut, Scaled, TransformGate


def half_sse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return 0.5 * ((out - target) ** 2).sum()


def linear(weight: list[list[float]], bias: bool = False) -> nn.Linear:
    w = torch.tensor(weight)
    layer = nn.Linear(w.shape[1], w.shape[0], bias=bias)
    with torch.no_grad():
        layer.weight.copy_(w)
        if bias:
            layer.bias.zero_()
    return layer


def by_metric(rows: list[dict], metric: str) -> dict[int, float]:
    return {r["layer"]: r["value"] for r in rows if r["metric"] == metric}


W1 = [[0.5, 0.0], [0.0, -1.0]]
W2 = [[0.0, 1.0], [1.0, 0.0]]
X = [[1.0, 2.0], [3.0, -1.0]]
Y = [[0.5, 0.0], [1.0, 2.0]]


def two_unit_stack() -> nn.Sequential:
    return nn.Sequential(ResidualUnit(linear(W1), Add()), ResidualUnit(linear(W2), Add()))


def test_closed_form_values_of_a_linear_residual_stack():
    rows = probe(two_unit_stack(), torch.tensor(X), torch.tensor(Y), half_sse, step=7)
    # By hand: nn.Linear computes h W^T; h1 = x + x W1^T, h2 = h1 + h1 W2^T, L = ½‖h2 - y‖².
    x, w1, w2, y = (np.array(a) for a in (X, W1, W2, Y))
    f1 = x @ w1.T
    h1 = x + f1
    f2 = h1 @ w2.T
    h2 = h1 + f2
    r = h2 - y  # dL/dh2
    g2 = r.T @ h1  # dL/dW2
    g1 = (r + r @ w2).T @ x  # dL/dh1 = r (I + W2), then dL/dW1
    assert by_metric(rows, "grad_norm") == pytest.approx({0: np.linalg.norm(g1), 1: np.linalg.norm(g2)}, rel=1e-6)
    # Bias-free Linear bodies without norms: the unit's only parameter is its weight matrix.
    assert by_metric(rows, "weight_grad_norm") == by_metric(rows, "grad_norm")
    assert by_metric(rows, "out_rms") == pytest.approx(
        {0: np.sqrt((h1**2).mean()), 1: np.sqrt((h2**2).mean())}, rel=1e-6
    )
    assert by_metric(rows, "out_var") == pytest.approx({0: h1.var(), 1: h2.var()}, rel=1e-6)
    ratios = {0: np.linalg.norm(f1) / np.linalg.norm(x), 1: np.linalg.norm(f2) / np.linalg.norm(h1)}
    assert by_metric(rows, "branch_ratio") == pytest.approx(ratios, rel=1e-6)
    assert {r["step"] for r in rows} == {7}
    assert {(r["layer"], r["block"], r["kind"]) for r in rows} == {(0, "0.combine", "mlp"), (1, "1.combine", "mlp")}
    assert not by_metric(rows, "gate_mean") and not by_metric(rows, "residual_scale")


def test_grad_norm_covers_the_whole_owner_of_the_unit():
    # The owner (the unit) holds the body and the post norm: both parameter sets count.
    unit = PostNorm(linear([[1.0, 0.5], [0.0, 1.0]], bias=True), Add(), lambda: nn.LayerNorm(2))
    x, y = torch.tensor(X), torch.tensor(Y)
    rows = probe(unit, x, y, half_sse, 0)
    unit.zero_grad(set_to_none=True)
    half_sse(unit(x), y).backward()
    expected = torch.sqrt(sum(p.grad.pow(2).sum() for p in unit.parameters())).item()
    assert by_metric(rows, "grad_norm") == {0: pytest.approx(expected, rel=1e-6)}


def test_weight_grad_norm_counts_only_the_branch_weight_matrices():
    # Xiong 2020 Fig. 3's quantity: body weights only — not the biases, the LayerNorm's γ/β, the Highway gate's
    # projection (it lives in the combinator), nor the projection shortcut (outside the body).
    torch.manual_seed(0)
    body = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 3))
    unit = PreNorm(body, Gate(TransformGate(nn.Linear(3, 3), bias_init=-1.0)), lambda: nn.LayerNorm(3))
    shortcut = nn.Conv1d(1, 1, 1, bias=False)
    model = ResidualUnit(body=nn.Sequential(nn.Conv1d(1, 1, 3, padding=1), nn.Flatten(), unit, nn.Unflatten(1, (1, 3))),
                 combine=Add(), shortcut=shortcut)  # fmt: skip
    x, y = torch.randn(5, 1, 3), torch.randn(5, 1, 3)
    rows = probe(model, x, y, half_sse, 0)
    model.zero_grad(set_to_none=True)
    half_sse(model(x), y).backward()
    inner = torch.linalg.vector_norm(torch.cat([body[0].weight.grad.flatten(), body[2].weight.grad.flatten()]))
    conv = model.body[0].weight.grad
    outer = torch.sqrt(inner**2 + conv.pow(2).sum())  # the nested unit's weights belong to the outer branch
    everything = torch.sqrt(sum(p.grad.pow(2).sum() for p in unit.parameters()))
    blocks = {r["block"]: r["layer"] for r in rows}
    assert blocks == {"body.2.combine": 0, "combine": 1}  # module order: a unit registers its body first
    assert by_metric(rows, "weight_grad_norm") == pytest.approx({0: inner.item(), 1: outer.item()}, rel=1e-6)
    assert by_metric(rows, "grad_norm")[0] == pytest.approx(everything.item(), rel=1e-6)
    assert everything > inner * 1.01 and shortcut.weight.grad.abs().sum() > 0  # excluding them matters here


class SelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(4, 12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return nn.functional.scaled_dot_product_attention(q, k, v)


class Mixer(nn.Module):
    """Attention by module type, not by class name."""

    def __init__(self) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(4, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mha(x, x, x, need_weights=False)[0]


class Declared(nn.Sequential):
    probe_kind = "dense"


def kinds_of(model: nn.Module, x: torch.Tensor) -> list[tuple[int, str, str]]:
    rows = probe(model, x, torch.zeros_like(x), half_sse, 0)
    return sorted({(r["layer"], r["block"], r["kind"]) for r in rows})


def ffn() -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 4))


def test_kind_is_read_from_the_branch_modules():
    bodies = (SelfAttention(), ffn(), Mixer(), ffn())
    lm = nn.Sequential(*(PreNorm(b, Add(), lambda: nn.LayerNorm(4)) for b in bodies))
    assert [k for *_, k in kinds_of(lm, torch.randn(2, 3, 4))] == ["attn", "ffn", "attn", "ffn"]
    # The same Linear-only body without an attention unit in the model is an MLP layer.
    assert kinds_of(nn.Sequential(ResidualUnit(ffn(), Add())), torch.randn(2, 4)) == [(0, "0.combine", "mlp")]
    conv = ResidualUnit(nn.Conv1d(2, 2, 3, padding=1), Add())
    declared = ResidualUnit(Declared(nn.Conv1d(2, 2, 1)), Add())  # a probe_kind attribute wins over types
    assert kinds_of(nn.Sequential(conv, declared), torch.randn(2, 2, 3)) == [
        (0, "0.combine", "conv"),
        (1, "1.combine", "dense"),
    ]
    gate = TransformGate(nn.Linear(3, 3), bias_init=0.0)
    no_weights = ResidualUnit(nn.ReLU(), Add())
    assert kinds_of(nn.Sequential(no_weights, gate), torch.randn(2, 3)) == [(0, "0.combine", ""), (1, "1", "gate")]


def test_weight_grad_norm_of_multihead_attention_includes_its_bare_projections():
    torch.manual_seed(0)
    mixer = Mixer()
    model = ResidualUnit(mixer, Add())
    x, y = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    rows = probe(model, x, y, half_sse, 0)
    half_sse(model(x), y).backward()
    expected = torch.sqrt(mixer.mha.in_proj_weight.grad.pow(2).sum() + mixer.mha.out_proj.weight.grad.pow(2).sum())
    assert by_metric(rows, "weight_grad_norm") == {0: pytest.approx(expected.item(), rel=1e-6)}


def test_kind_of_registry_transformer_alternates_attention_and_ffn():
    model = variants.create("postln", depth=2, d_model=8, n_heads=2, d_ff=16, vocab_size=7, max_len=4)
    tokens = torch.randint(0, 7, (2, 4))

    def loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(out.flatten(0, 1), y.flatten())

    rows = probe(model, tokens, tokens, loss, 0)
    kinds = sorted({(r["layer"], r["block"], r["kind"]) for r in rows})
    assert kinds == [(0, "blocks.0.attn.combine", "attn"), (1, "blocks.0.ffn.combine", "ffn"),
                     (2, "blocks.1.attn.combine", "attn"), (3, "blocks.1.ffn.combine", "ffn")]  # fmt: skip
    ffn = model.blocks[1].ffn.body
    model.zero_grad(set_to_none=True)
    loss(model(tokens), tokens).backward()
    expected = torch.sqrt(ffn.fc1.weight.grad.pow(2).sum() + ffn.fc2.weight.grad.pow(2).sum()).item()
    assert by_metric(rows, "weight_grad_norm")[3] == pytest.approx(expected, rel=1e-5)


def test_gate_mean_is_sigmoid_of_the_bias_for_a_zero_weight_gate():
    proj = nn.Linear(3, 3)
    gate = Gate(TransformGate(proj, bias_init=-2.0))
    with torch.no_grad():
        proj.weight.zero_()
    model = nn.Sequential(nn.Linear(3, 3), ResidualUnit(nn.Linear(3, 3), gate))
    rows = probe(model, torch.randn(5, 3), torch.randn(5, 3), half_sse, 0)
    assert by_metric(rows, "gate_mean") == {0: pytest.approx(1 / (1 + math.exp(2.0)), rel=1e-6)}
    assert {r["block"] for r in rows if r["metric"] == "gate_mean"} == {"1.combine"}


def test_a_gate_outside_any_combinator_is_a_unit_of_its_own():
    proj = nn.Linear(2, 2)
    model = nn.Sequential(ResidualUnit(linear(W1), Add()), TransformGate(proj, bias_init=1.0))
    with torch.no_grad():
        proj.weight.zero_()
    rows = probe(model, torch.tensor(X), torch.tensor(Y), half_sse, 0)
    gate_rows = [r for r in rows if r["metric"] == "gate_mean"]
    assert [(r["layer"], r["block"]) for r in gate_rows] == [(1, "1")]
    assert gate_rows[0]["value"] == pytest.approx(1 / (1 + math.exp(-1.0)), rel=1e-6)


def test_residual_scale_is_mean_abs_of_a_learnable_beta_only():
    learnable = Scaled(beta=0.1, learnable_beta=True, beta_shape=(3,))
    with torch.no_grad():
        learnable.beta.copy_(torch.tensor([-1.0, 0.5, 0.0]))
    fixed = Scaled(alpha=2.0, beta=0.3)  # DeepNorm-like constant: not probed
    model = nn.Sequential(ResidualUnit(nn.Linear(3, 3), learnable), ResidualUnit(nn.Linear(3, 3), fixed))
    rows = probe(model, torch.randn(4, 3), torch.randn(4, 3), half_sse, 0)
    assert by_metric(rows, "residual_scale") == {0: pytest.approx(0.5)}


def test_a_plugin_join_and_gate_are_probed_by_what_they_declare():
    """Joins, gates and residual scalars are recognised by the interface they declare (variants.roles), not by our
    classes: the plugin's join and gate subclass nothing of ours."""
    from _nets import plugin_net

    rows = probe(plugin_net(), torch.randn(5, 4), torch.randn(5, 3), half_sse, 0)
    assert by_metric(rows, "residual_scale") == {1: pytest.approx(0.25), 3: pytest.approx(0.5)}
    assert by_metric(rows, "gate_mean") == {0: pytest.approx(1 / (1 + math.exp(2.0)), rel=1e-6),
                                            2: pytest.approx(1 / (1 + math.exp(1.0)), rel=1e-6)}
    assert {r["block"] for r in rows if r["metric"] == "branch_ratio"} == {"1.join", "2.join"}


def test_learned_scalars_are_the_declared_learned_ones_one_number_each():
    """bench.runs.scalars: the plugin's g and gate bias (means), a per-channel β as its mean, LAuReL's computed
    α = 2σ(a) as learned; a fixed β (DeepNorm-like) is not recorded."""
    from _nets import plugin_net

    from bench.runs.scalars import learned_scalars
    from variants.combinators import Laurel

    assert learned_scalars(plugin_net(), 7) == [
        {"step": 7, "module": "1.gate", "scalar": "bias", "value": -2.0},
        {"step": 7, "module": "1.join", "scalar": "beta", "value": 0.25},
        {"step": 7, "module": "2.gate", "scalar": "bias", "value": -1.0},
        {"step": 7, "module": "2.join", "scalar": "beta", "value": 0.5},
    ]
    per_channel = Scaled(beta=0.1, learnable_beta=True, beta_shape=(2,))
    with torch.no_grad():
        per_channel.beta.copy_(torch.tensor([0.5, -1.5]))
    model = nn.Sequential(per_channel, Scaled(alpha=2.0, beta=0.3), Laurel(4, form="rw"))
    with torch.no_grad():  # as at an evaluation
        rows = learned_scalars(model, 1)
    assert [(r["module"], r["scalar"], r["value"]) for r in rows] == [
        ("0", "beta", -0.5), ("2", "alpha", 1.0), ("2", "beta", 1.0)]


def test_zero_shortcut_gives_infinite_branch_ratio():
    model = ResidualUnit(nn.Linear(2, 2), Add())
    rows = probe(model, torch.zeros(3, 2), torch.ones(3, 2), half_sse, 0)
    assert by_metric(rows, "branch_ratio") == {0: math.inf}


class Twice(nn.Module):
    """Calls one combinator twice (weight sharing): the probe reports the mean over the calls."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2, bias=False)
        self.combine = Add()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.combine(2 * x, fx=torch.zeros_like(x)) + self.combine(x, torch.zeros_like(x)) + self.lin(x)


def test_a_combinator_called_twice_reports_the_mean_and_keyword_inputs_work():
    x = torch.tensor([[3.0, 4.0]])
    rows = probe(Twice(), x, torch.zeros(1, 2), half_sse, 0)
    rms = float(np.sqrt(12.5))
    assert by_metric(rows, "out_rms") == {0: pytest.approx((2 * rms + rms) / 2)}
    assert by_metric(rows, "branch_ratio") == {0: 0.0}


def norm_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(4, 6),
        PostNorm(nn.Sequential(nn.Linear(6, 6), nn.Dropout(0.5)), Add(), lambda: nn.BatchNorm1d(6)),
        PreNorm(nn.Linear(6, 6), Scaled(beta=0.0, learnable_beta=True), lambda: nn.LayerNorm(6)),
        nn.BatchNorm1d(6),
        nn.Linear(6, 3),
    )


def snapshot(model: nn.Module) -> dict:
    return {
        "state": {k: v.clone() for k, v in model.state_dict().items()},
        "grads": [p.grad for p in model.parameters()],
        "grad_values": [None if p.grad is None else p.grad.clone() for p in model.parameters()],
        "modes": [m.training for m in model.modules()],
    }


def assert_untouched(model: nn.Module, before: dict) -> None:
    after = model.state_dict()
    assert before["state"].keys() == after.keys()
    for k, v in before["state"].items():
        assert torch.equal(v, after[k]), k
    for p, g, value in zip(model.parameters(), before["grads"], before["grad_values"], strict=True):
        assert p.grad is g  # the very same tensor object (or None)
        if g is not None:
            assert torch.equal(p.grad, value)
    assert [m.training for m in model.modules()] == before["modes"]
    for m in model.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks and not m._backward_hooks


def prepared_model() -> nn.Module:
    model = norm_model()
    model.train()
    model[3].eval()  # mixed modes must come back as they were
    params = list(model.parameters())
    params[0].grad = torch.full_like(params[0], 3.0)  # a training loop's pending gradient
    params[2].grad = torch.zeros_like(params[2])
    return model


def test_probe_leaves_model_grads_buffers_modes_and_rng_untouched():
    model = prepared_model()
    before = snapshot(model)
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    rng = torch.random.get_rng_state()
    rows = probe(model, x, y, nn.functional.cross_entropy, 3, train=True)
    assert {r["metric"] for r in rows} <= set(METRICS) and rows
    assert_untouched(model, before)
    assert torch.equal(torch.random.get_rng_state(), rng)


def test_probe_restores_everything_when_the_loss_raises():
    model = prepared_model()
    before = snapshot(model)

    def broken_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("loss exploded")

    with pytest.raises(RuntimeError, match="loss exploded"):
        probe(model, torch.randn(8, 4), torch.zeros(8, dtype=torch.long), broken_loss, 0)
    assert_untouched(model, before)


def train_run(probe_every: int | None) -> list[torch.Tensor]:
    model = norm_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(1)
    for step in range(4):
        x, y = torch.randn(8, 4, generator=gen), torch.randint(0, 3, (8,), generator=gen)
        if probe_every and step % probe_every == 0:
            probe(model, x, y, nn.functional.cross_entropy, step)
        opt.zero_grad(set_to_none=False)
        nn.functional.cross_entropy(model(x), y).backward()
        if probe_every:
            probe(model, x, y, nn.functional.cross_entropy, step)  # between backward and step: grads must survive
        opt.step()
    return [p.detach().clone() for p in model.state_dict().values()]


def test_probing_inside_a_training_loop_does_not_change_training():
    torch.manual_seed(5)
    plain = train_run(None)
    torch.manual_seed(5)
    probed = train_run(1)
    assert all(torch.equal(a, b) for a, b in zip(plain, probed, strict=True))


def test_probe_table_columns_and_errors():
    rows = probe(two_unit_stack(), torch.tensor(X), torch.tensor(Y), half_sse, 0)
    df = probe_table(rows)
    assert list(df.columns) == ["step", "layer", "block", "kind", "metric", "value"] and len(df) == len(rows)
    old = probe_table([{"step": 0, "layer": 0, "block": "b", "metric": "grad_norm", "value": 1.0}])  # before `kind`
    assert old.columns.tolist() == list(df.columns) and old["kind"].isna().all()
    with_id = probe_table([{"run_id": "r", **r} for r in rows])
    assert with_id.columns[0] == "run_id"
    assert probe_table([]).empty
    with pytest.raises(ValueError, match=r"lack columns \['block'\]"):
        probe_table([{"step": 0, "layer": 0, "metric": "grad_norm", "value": 1.0}])


def test_format_probe_table_pivots_layers_by_metrics():
    df = pd.DataFrame(
        [
            {"run_id": "a", "step": 0, "layer": 0, "block": "b0", "metric": "out_rms", "value": 1.0},
            {"run_id": "b", "step": 0, "layer": 0, "block": "b0", "metric": "out_rms", "value": 3.0},
            {"run_id": "a", "step": 0, "layer": 0, "block": "b0", "metric": "grad_norm", "value": 0.5},
            {"run_id": "a", "step": 0, "layer": 1, "block": "b1", "metric": "grad_norm", "value": 0.25},
            {"run_id": "a", "step": 5, "layer": 1, "block": "b1", "metric": "grad_norm", "value": 9.0},
        ]
    )
    text = format_probe_table(df, step=0)
    lines = text.splitlines()
    assert lines[0].split() == ["grad_norm", "out_rms"]  # METRICS order, not alphabetical
    assert lines[2].split() == ["0", "b0", "0.5", "2"]  # mean over runs a, b
    assert lines[3].split() == ["1", "b1", "0.25", "-"]
    assert "step" in format_probe_table(df).splitlines()[1]  # several steps: step is an index level
    assert format_probe_table(df.iloc[0:0]) == "(no probe rows)"
    kinds = format_probe_table(df.assign(kind=["mlp", "mlp", "mlp", "conv", "conv"]), step=0).splitlines()
    assert kinds[1].split() == ["layer", "block", "kind"] and kinds[3].split() == ["1", "b1", "conv", "0.25", "-"]
    with pytest.raises(ValueError, match=r"no probe rows at step 3; steps present: \[0, 5\]"):
        format_probe_table(df, step=3)


# stable_rank and rank_collapse: a combinator that emits a fixed stream, so every value is a hand computation.


class Emit(Combinator):
    """Outputs ``value`` whatever it is given (plus a zero parameter, so the probe's backward has a graph)."""

    def __init__(self, value: torch.Tensor) -> None:
        super().__init__()
        self.value = value
        self.zero = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        return self.value + self.zero


class TokenMixer(nn.Identity):
    probe_kind = "attn"  # an attention unit: the model is a sequence model, its stream channels-last


class ConvLike(nn.Identity):
    probe_kind = "conv"


def rank_values(value: list | torch.Tensor, branch: type[nn.Module] = TokenMixer) -> dict[str, float]:
    value = torch.as_tensor(value, dtype=torch.float32)
    rows = probe(ResidualUnit(branch(), Emit(value)), torch.zeros(1), torch.zeros_like(value), half_sse, 0)
    return {r["metric"]: r["value"] for r in rows if r["metric"] in ("stable_rank", "rank_collapse")}


RANK_ONE = [[1.0, 2.0], [2.0, 4.0], [-1.0, -2.0]]  # rows (tokens) all multiples of (1, 2)
ORTHOGONAL = [[1.0, 1.0], [1.0, -1.0], [1.0, 1.0], [1.0, -1.0]]  # columns orthogonal, both of norm 2
DIAG_3_1 = [[3.0, 0.0], [0.0, 1.0], [0.0, 0.0]]


@pytest.mark.parametrize(("tokens", "expected"), [(RANK_ONE, 1.0), (ORTHOGONAL, 2.0), (DIAG_3_1, (9 + 1) / 9)])
def test_stable_rank_of_one_token_matrix(tokens: list, expected: float):
    assert rank_values([tokens])["stable_rank"] == pytest.approx(expected, rel=1e-6)


def test_stable_rank_is_the_mean_over_sequences_of_each_sequence_matrix():
    # The (2, 3, 2) batch as one (6, 2) matrix would have stable rank (30 + 10) / 30 ≠ 1 + (9 + 1) / 9 halved.
    assert rank_values([RANK_ONE, DIAG_3_1])["stable_rank"] == pytest.approx((1 + 10 / 9) / 2, rel=1e-6)


def test_stable_rank_of_an_image_is_that_of_its_positions_by_channels_matrix():
    # Channel 0 is 3 on the top row, channel 1 is 1 on the bottom row: the (H·W, C) matrix [[3,0],[3,0],[0,1],[0,1]]
    # has orthogonal columns of squared norms 18 and 2, so (18 + 2) / 18. Reading the NCHW memory any other way
    # ((H·W, C) by a plain reshape, (C·H, W) rows, or channels last) gives rows (3,3), (0,0), (0,0), (1,1): rank 1.
    image = [[[3.0, 3.0], [0.0, 0.0]], [[0.0, 0.0], [1.0, 1.0]]]
    assert rank_values([image], ConvLike) == {"stable_rank": pytest.approx(20 / 18, rel=1e-6)}
    blank = [[[0.0, 0.0], [0.0, 0.0]]] * 2
    broken = [[[math.inf, 0.0], [0.0, 0.0]], [[0.0, 0.0], [1.0, 1.0]]]
    # A zero or non-finite sample is undefined and left out of the mean; no row when every sample is.
    assert rank_values([image, blank, broken], ConvLike) == {"stable_rank": pytest.approx(20 / 18, rel=1e-6)}
    assert rank_values([blank, broken], ConvLike) == {}


def test_stable_rank_of_an_mlp_stream_is_that_of_the_whole_batch():
    # Per sample every row has stable rank 1; the batch matrix diag(3, 1) (plus a zero row) has (9 + 1) / 9.
    assert rank_values(DIAG_3_1, ConvLike) == {"stable_rank": pytest.approx(10 / 9, rel=1e-6)}
    assert rank_values(DIAG_3_1) == {"stable_rank": pytest.approx(10 / 9, rel=1e-6)}  # no rank_collapse in 2-D


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        ([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]], 0.0),  # identical tokens: X = 1xᵀ
        ([[1.0, 2.0], [-1.0, -2.0], [3.0, 0.0], [-3.0, 0.0]], 1.0),  # the mean token is zero
        # Mean token (2/3, 4/3): residual rows (1/3, 2/3), (4/3, 8/3), (-5/3, -10/3), ‖·‖² = 210/9; ‖X‖² = 30.
        (RANK_ONE, math.sqrt(210 / 9 / 30)),
        (ORTHOGONAL, math.sqrt(4 / 8)),  # mean token (1, 0): residual rows (0, ±1)
    ],
)
def test_rank_collapse_is_the_relative_distance_from_the_mean_token(tokens: list, expected: float):
    assert rank_values([tokens])["rank_collapse"] == pytest.approx(expected, rel=1e-6, abs=1e-7)


def test_rank_collapse_is_reported_for_sequence_models_only():
    tokens = [RANK_ONE]
    assert rank_values(tokens, ConvLike).keys() == {"stable_rank"}  # (B, C, L) of a conv net: channels at dim 1
    image = [[[3.0, 3.0], [0.0, 0.0]], [[0.0, 0.0], [1.0, 1.0]]]
    assert rank_values([image], ConvLike).keys() == {"stable_rank"}


def test_identical_streams_of_a_multi_stream_model_report_what_one_stream_would():
    # A hyper-connection's (B, T, n, d) stream in a sequence model: rows are the T·n (token, stream) pairs.
    tokens = torch.tensor([RANK_ONE, DIAG_3_1])
    one = rank_values(tokens)
    assert rank_values(tokens.unsqueeze(2).expand(-1, -1, 4, -1)) == pytest.approx(one, rel=1e-6)
    assert one == pytest.approx(
        {"stable_rank": (1 + 10 / 9) / 2, "rank_collapse": 0.5 * (math.sqrt(210 / 270) + math.sqrt(20 / 30))}, rel=1e-6
    )


def test_rank_metrics_read_the_first_rank_samples_of_a_call():
    tokens = torch.tensor([RANK_ONE] * RANK_SAMPLES + [DIAG_3_1])
    assert rank_values(tokens)["stable_rank"] == pytest.approx(1.0, rel=1e-6)


def test_an_svd_that_fails_leaves_out_stable_rank_only(monkeypatch: pytest.MonkeyPatch):
    def fail(*args: object, **kwargs: object) -> torch.Tensor:
        raise torch.linalg.LinAlgError("did not converge")

    monkeypatch.setattr(torch.linalg, "svdvals", fail)
    assert rank_values([RANK_ONE]) == {"rank_collapse": pytest.approx(math.sqrt(210 / 270), rel=1e-6)}


def unit_shapes(model: nn.Module, x: torch.Tensor) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    handles = [
        m.register_forward_hook(lambda mod, args, out, name=name: shapes.__setitem__(name, tuple(out.shape)))
        for name, m in model.named_modules()
        if isinstance(m, Combinator)
    ]
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    return shapes


def lm_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(out.flatten(0, 1), y.flatten())


@pytest.mark.parametrize("name", ["preln", "hyper_connections"])
def test_rank_metrics_of_every_unit_of_a_registry_transformer(name: str):
    torch.manual_seed(0)
    model = variants.create(name, depth=2, d_model=16, n_heads=2, d_ff=32, vocab_size=11, max_len=8)
    tokens = torch.randint(0, 11, (4, 8))
    rows = probe(model, tokens, tokens, lm_loss, 0)
    shapes = unit_shapes(model, tokens)
    for metric in ("stable_rank", "rank_collapse"):
        values = {r["block"]: r["value"] for r in rows if r["metric"] == metric}
        assert values.keys() == shapes.keys() and len(values) == 4
    for r in rows:
        if r["metric"] == "stable_rank":
            shape = shapes[r["block"]]
            assert 1 - 1e-5 <= r["value"] <= min(math.prod(shape[1:-1]), shape[-1]) + 1e-4
        elif r["metric"] == "rank_collapse":
            assert 0 < r["value"] <= 1


def test_rank_metrics_of_every_unit_of_a_registry_cnn():
    torch.manual_seed(0)
    model = variants.create("resnet", depth=8, width=4, num_classes=3, in_chans=1)
    x = torch.randn(4, 1, 8, 8)
    rows = probe(model, x, torch.randint(0, 3, (4,)), nn.functional.cross_entropy, 0)
    shapes = unit_shapes(model, x)
    ranks = {r["block"]: r["value"] for r in rows if r["metric"] == "stable_rank"}
    assert ranks.keys() == shapes.keys() and len(ranks) == 3
    for block, value in ranks.items():
        _, c, h, w = shapes[block]
        assert 1 - 1e-5 <= value <= min(h * w, c) + 1e-4
    assert not [r for r in rows if r["metric"] == "rank_collapse"]


class SdpAttention(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return nn.functional.scaled_dot_product_attention(q, k, v)


def test_pure_attention_collapses_the_tokens_and_pre_ln_skips_do_not():
    # Dong et al. 2021: without skip connections self-attention drives the tokens to one, doubly exponentially
    # (here about 0.3, 1e-4, 1e-8, 0 over four layers); the same attention layers with Pre-LN skips keep them apart.
    torch.manual_seed(0)
    bodies = [SdpAttention(16) for _ in range(4)]
    x = torch.randn(4, 16, 16)
    pure = nn.Sequential(*(ResidualUnit(b, NoShortcut()) for b in bodies))
    pre_ln = nn.Sequential(*(PreNorm(b, Add(), lambda: nn.LayerNorm(16)) for b in bodies))
    collapse = {name: by_metric(probe(m, x, torch.zeros_like(x), half_sse, 0), "rank_collapse")
                for name, m in (("pure", pure), ("pre_ln", pre_ln))}  # fmt: skip
    assert collapse["pure"][3] < 1e-3 and collapse["pure"][1] < 1e-2
    assert min(collapse["pre_ln"].values()) > 0.5
