"""Every layer under the run's init (variants.init_marks): under ``kaiming`` a plugin's plain convolution is drawn
He's way like the shipped ones, a layer marked ``own`` keeps its constructor's draw and ``zero`` starts at zero under
every scheme, the run JSON lists the marked layers, and a mark that is not one of them is bad input."""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from _nets import write
from torch import nn

import variants
from bench.cli import main
from variants import init_marks

# The researcher's design: pre-activation units whose shortcut is a·x + b·P(x) (P a plain 1×1 conv, a = 1, b = 0),
# with P's init as the class says (MARK: none, "own", "zero", or a mark that does not exist).
PLUGIN = '''
import torch
from torch import nn

import variants
from variants.blocks import PreActBasic
from variants.layers import conv3x3, ops


class ProjShortcut(variants.Combinator):
    def __init__(self, channels):
        super().__init__()
        self.proj = nn.Conv2d(channels, channels, 1, bias=False)
        self.a = nn.Parameter(torch.ones(()))
        self.b = nn.Parameter(torch.zeros(()))
        MARK

    def forward(self, x, fx):
        return self.a * x + self.b * self.proj(x) + fx


@variants.register("NAME", family="preact", paper="a plugin", spec=variants.CifarSpec(depth=8))
def build(spec):
    def unit(s):
        return PreActBasic(s.cin, s.width, s.stride, shortcut=spec.shortcut, first=s.position == 0,
                           combine=ProjShortcut)

    return variants.build_cifar(spec, unit, stem=lambda cin, w: nn.Sequential(conv3x3(cin, w)),
                                head_pre=lambda f: nn.Sequential(*ops(("bn", "relu"), f)))
'''
FAST = ["--task", "digits", "--steps", "2", "--batch-size", "16", "--eval-every", "2", "--measure", "--quiet",
        "--chance-band", "0"]


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[object]:
    """``plugin(name, mark)``: register the plugin above under ``name`` (its module file under tmp_path)."""
    loaded: list[str] = []

    def load(name: str, mark: str = "") -> Path:
        path = write(tmp_path / f"{name}.py", PLUGIN.replace("NAME", name).replace("MARK", mark or "pass"))
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
        loaded.append(name)
        return path

    yield load
    for name in loaded:
        if name in variants.list_variants():
            variants.unregister(name)


def _projections(model: nn.Module) -> list[nn.Conv2d]:
    return [m.proj for m in model.modules() if type(m).__name__ == "ProjShortcut"]


def test_a_plugins_conv_is_drawn_hes_way_under_kaiming(plugin) -> None:
    plugin("t_proj")
    model = variants.create("t_proj", depth=20, seed=0)
    projections = _projections(model)
    assert len(projections) == 9
    for conv in projections:  # He et al. 2015, fan-out: std √(2 / (C_out · 1 · 1)); torch's default is 2.5x narrower
        he = math.sqrt(2.0 / conv.out_channels)
        assert conv.weight.std().item() == pytest.approx(he, rel=0.10)
    stem = model.stem[0].weight  # the shipped layers as they always were: He's draw from their constructors
    assert stem.std().item() == pytest.approx(math.sqrt(2.0 / (16 * 9)), rel=0.10)
    assert variants.marked_layers(model) == {}


def test_a_layer_marked_own_keeps_its_constructors_draw_and_zero_starts_at_zero(plugin) -> None:
    plugin("t_own", "variants.mark_init(self.proj, 'own')")
    plugin("t_zero", "variants.mark_init(self.proj, 'zero')")
    own = variants.create("t_own", depth=8, seed=0)
    for conv in _projections(own):  # torch's default: uniform within ±1/√fan_in, std 1/√(3·fan_in)
        assert conv.weight.abs().max().item() <= 1 / math.sqrt(conv.in_channels)
        assert conv.weight.std().item() == pytest.approx(1 / math.sqrt(3 * conv.in_channels), rel=0.15)
    assert variants.marked_layers(own) == {f"stages.{i}.0.combine.proj": "own" for i in range(3)}
    zero = variants.create("t_zero", depth=8, seed=0, init="xavier")  # every scheme: the mark wins
    assert all(torch.equal(c.weight, torch.zeros_like(c.weight)) for c in _projections(zero))
    assert set(variants.marked_layers(zero).values()) == {"zero"}
    xavier = variants.create("t_own", depth=8, seed=0, init="xavier")
    assert all(torch.equal(a.weight, b.weight) for a, b in zip(_projections(own), _projections(xavier), strict=True))


def test_the_run_json_lists_the_marked_layers(plugin, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = plugin("t_listed", "variants.mark_init(self.proj, 'own')")
    variants.unregister("t_listed")  # the command loads it itself
    res = tmp_path / "res"
    assert main(["run", "--variant", "t_listed", "--depth", "8", *FAST, "--plugin", str(path),
                 "--results-dir", str(res)]) == 0, capsys.readouterr().err
    (run,) = (json.loads(p.read_text(encoding="utf-8")) for p in (res / "runs").glob("*.json"))
    assert run["own_init"] == {f"stages.{i}.0.combine.proj": "own" for i in range(3)}
    assert run["config"]["init_stream"] == "crn"


def test_an_unknown_init_mark_is_bad_input(plugin, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = plugin("t_bad", "self.proj.init_mark = 'mine'")
    variants.unregister("t_bad")
    res = tmp_path / "res"
    code = main(["run", "--variant", "t_bad", "--depth", "8", *FAST, "--plugin", str(path), "--results-dir", str(res)])
    err = capsys.readouterr().err
    assert code == 2
    assert ("error: init_mark of layer 'stages.0.0.combine.proj' (Conv2d) must be one of own, zero, got 'mine'"
            in err), err
    assert not (res / "leaderboard.csv").exists() and not (res / "runs").exists()
    with pytest.raises(ValueError, match=r"^init_mark of layer Linear must be one of own, zero, got 'keep'$"):
        variants.mark_init(nn.Linear(2, 2), "keep")


def test_kaiming_leaves_what_a_scheme_drew_and_draws_the_rest() -> None:
    drawn = variants.layers.conv3x3(4, 8)
    before = drawn.weight.clone()
    bare = nn.Conv2d(8, 8, 1, bias=True)
    model = init_marks.kaiming_(nn.Sequential(drawn, bare))
    assert torch.equal(drawn.weight, before)  # a shipped draw is not drawn again
    assert init_marks.is_drawn(bare) and torch.equal(bare.bias, torch.zeros(8))
    assert model[1].weight.std().item() == pytest.approx(0.5, rel=0.25)  # √(2/8), 64 entries


@pytest.fixture
def mlp_plugin() -> Iterator[str]:
    """A plugin's fully-connected net of plain ``nn.Linear`` layers (torch's default draw in its constructor)."""

    @variants.register("t_mlp", family="mlp", paper="a plugin", spec=variants.MlpSpec(depth=3, width=256, image_size=8))
    def build(spec: variants.MlpSpec) -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(64, spec.width), nn.ReLU(), nn.Linear(spec.width, spec.width),
                             nn.ReLU(), nn.Linear(spec.width, spec.num_classes))

    yield "t_mlp"
    variants.unregister("t_mlp")


def test_a_plugins_hidden_linear_is_drawn_hes_way_and_its_classifier_keeps_torchs_default(mlp_plugin: str) -> None:
    model = variants.create(mlp_plugin, seed=0)
    first, hidden, head = (m for m in model.modules() if isinstance(m, nn.Linear))
    for layer in (first, hidden):  # as the shipped MLPs' ReLU layers: He fan-in, std √(2 / fan_in), bias 0
        assert layer.weight.std().item() == pytest.approx(math.sqrt(2.0 / layer.in_features), rel=0.10)
        assert torch.equal(layer.bias, torch.zeros_like(layer.bias)) and init_marks.is_drawn(layer)
    bound = 1 / math.sqrt(256)  # as every shipped classifier: torch's default, uniform within ±1/√fan_in
    assert head.weight.abs().max().item() <= bound and head.bias.abs().max().item() <= bound
    assert head.weight.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.15) and head.bias.abs().sum() > 0
    assert not init_marks.is_drawn(head)
    shipped = variants.create("plain_mlp", depth=3, width=256, image_size=8, seed=0).head[-1]
    assert shipped.weight.abs().max().item() <= bound and not init_marks.is_drawn(shipped)


def test_kaiming_leaves_the_shipped_mlps_draw_for_its_activation() -> None:
    model = variants.create("plain_mlp", depth=3, activation="tanh", seed=0)
    hidden = model.blocks[0].body[0]
    assert hidden.weight.std().item() == pytest.approx(5 / 3 / math.sqrt(71), rel=0.05)  # tanh's gain, not ReLU's √2


class LinearGateJoin(variants.Combinator):
    """A plugin's join ``x + σ(W·x) ⊙ F(x)``, W a plain ``nn.Linear`` of its own (torch's default draw), ``mark`` on
    it where given."""

    axis = "t_linear_gate"
    mark: str | None = None

    def __init__(self, at: variants.SublayerSpec) -> None:
        super().__init__()
        self.w = nn.Linear(at.d_model, at.d_model)
        if self.mark is not None:
            variants.mark_init(self.w, self.mark)

    def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        return x + torch.sigmoid(self.w(x)) * fx


class OwnGateJoin(LinearGateJoin):
    mark = "own"


@pytest.fixture
def gate_plugin() -> Iterator[None]:
    """Two Pre-LN designs on the documented path (``Design`` + ``build_transformer``): ``t_lgate`` whose join's linear
    layer carries no mark, ``t_lgate_own`` whose join keeps its own."""
    for name, join in (("t_lgate", LinearGateJoin), ("t_lgate_own", OwnGateJoin)):
        variants.register(name, family="transformer", paper="a plugin", spec=variants.TransformerSpec(
            depth=2, d_model=32, n_heads=4, d_ff=64, vocab_size=64, max_len=16))(
            lambda spec, join=join: variants.build_transformer(variants.Design("linear gate", "pre", join), spec))
    yield
    variants.unregister("t_lgate")
    variants.unregister("t_lgate_own")


def _gates(model: nn.Module) -> list[nn.Linear]:
    return [m.w for m in model.modules() if isinstance(m, LinearGateJoin)]


def test_a_transformer_scheme_draws_a_plugin_joins_linear_layer_unless_a_mark_keeps_it(gate_plugin: None) -> None:
    xavier_bound = math.sqrt(6 / (32 + 32))  # Glorot-uniform of a 32×32 weight: std bound/√3 = 0.1768
    stds = {}
    for init in ("xavier", "gpt2", "normal", "t_fixup"):
        gates = _gates(variants.create("t_lgate", init=init, seed=0))
        assert len(gates) == 4  # one join per sublayer
        stds[init] = [round(g.weight.std().item(), 4) for g in gates]
        assert all(torch.equal(g.bias, torch.zeros(32)) for g in gates)
    # torch's default draw (uniform within ±1/√32, std 0.102) under every scheme before; now each scheme's own
    assert stds["xavier"] == stds["t_fixup"] == [0.1784, 0.1773, 0.1787, 0.178]
    assert stds["gpt2"] == stds["normal"] == [0.0208, 0.0201, 0.0205, 0.0208]  # N(0, 0.02): not a residual projection
    assert max(g.weight.abs().max().item() for g in _gates(variants.create("t_lgate", seed=0))) <= xavier_bound
    own = [_gates(variants.create("t_lgate_own", init=init, seed=0)) for init in ("xavier", "gpt2")]
    assert all(torch.equal(a.weight, b.weight) for a, b in zip(*own, strict=True))  # the mark: no scheme draws it
    assert round(own[0][0].weight.std().item(), 4) == 0.1048  # torch's default, 1/√(3·32) = 0.102
    assert variants.marked_layers(variants.create("t_lgate", seed=0)) == {}


@pytest.fixture
def keyword_only_plugin() -> Iterator[str]:
    """A ResNet whose stem is a plain ``nn.Conv2d`` of the plugin's (torch's default draw), registered with a
    keyword-only builder that takes no ``init``."""

    @variants.register("t_uniform_stem", family="resnet", paper="a plugin")
    def build(*, depth: int = 20, num_classes: int = 10, in_chans: int = 3) -> nn.Module:
        net = variants.create("resnet", depth=depth, num_classes=num_classes, in_chans=in_chans)
        net.stem[0] = nn.Conv2d(in_chans, 16, 3, padding=1, bias=False)
        return net

    yield "t_uniform_stem"
    variants.unregister("t_uniform_stem")


def test_a_keyword_only_builder_without_init_gets_its_familys_scheme(keyword_only_plugin: str) -> None:
    stem = variants.create(keyword_only_plugin, seed=0).stem[0].weight
    shipped = variants.create("resnet", depth=20, seed=0).stem[0].weight
    assert torch.equal(stem, shipped)  # He's fan-out draw from the same stream: std √(2 / (16·9)) = 0.118
    assert round(stem.std().item(), 4) == 0.1156
    assert variants.describe(keyword_only_plugin)["init"] == "kaiming"  # what the run records and the guard compares
    with pytest.raises(ValueError, match=(
            r"^variant 't_uniform_stem' is drawn under init='xavier', but its builder takes no `init` keyword: the "
            r"registry can draw a model it did not build only under 'kaiming' .*add `init` to the builder")):
        variants.create(keyword_only_plugin, init="xavier")
