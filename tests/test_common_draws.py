"""Common random numbers (variants.draws): every initial value is a function of (seed, the tensor's qualified name),
so the layers two designs share start equal at one seed, a design's extra layers move nothing else, and the model's
draws take nothing from the data, augmentation and dropout streams."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch
from torch import nn

import variants
from bench.runs.config import FIELD_DEFAULTS, RunConfig, build, config_from_dict
from bench.runs.train import build_model, setup
from variants import draws
from variants.blocks import PreActBasic
from variants.layers import conv3x3, ops
from variants.preact import BN_RELU

TINY_LM = {"depth": 2, "d_model": 16, "n_heads": 2, "d_ff": 32, "vocab_size": 11, "max_len": 8}


class ProjShortcut(variants.Combinator):
    """The researcher's shortcut: ``y = a·x + b·P(x) + F(x)``, P a 1×1 conv (torch's default draw), a = 1 and
    b = 0 at init, so the net equals ``preact`` at step 0."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(channels, channels, 1, bias=False)
        self.a = nn.Parameter(torch.ones(()))
        self.b = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        return self.a * x + self.b * self.proj(x) + fx


class GatedAdd(variants.Combinator):
    """A Transformer join with a learned gate: ``y = x + σ(g(x))·F(x)``."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.gate = nn.Linear(d_model, 1)

    def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        return x + torch.sigmoid(self.gate(x)) * fx


def proj_preact(spec: variants.CifarSpec) -> nn.Module:
    def unit(s: variants.Slot) -> nn.Module:
        return PreActBasic(s.cin, s.width, s.stride, shortcut=spec.shortcut, drop_path=s.drop_path,
                           first=s.position == 0, combine=ProjShortcut)

    return variants.build_cifar(spec, unit, stem=lambda cin, w: nn.Sequential(conv3x3(cin, w)),
                                head_pre=lambda features: nn.Sequential(*ops(BN_RELU, features)))


def gated_preln(spec: variants.TransformerSpec) -> nn.Module:
    from variants.transformer import Design

    return variants.build_transformer(Design("a gated pre-LN plugin", "pre",
                                             combinator=lambda at: GatedAdd(at.d_model)), spec)


@pytest.fixture
def plugins() -> Iterator[None]:
    variants.register("test_proj_preact", family="preact", paper="a plugin",
                      spec=variants.CifarSpec(depth=20))(proj_preact)
    variants.register("test_gated_preln", family="transformer", paper="a plugin",
                      spec=variants.TransformerSpec())(gated_preln)
    yield
    variants.unregister("test_proj_preact")
    variants.unregister("test_gated_preln")


def _shared(a: nn.Module, b: nn.Module) -> tuple[list[str], list[str]]:
    """The tensors ``a`` and ``b`` share (same qualified name and shape), and those of them whose values differ."""
    sa, sb = a.state_dict(), b.state_dict()
    shared = [k for k in sa if k in sb and sa[k].shape == sb[k].shape]
    return shared, [k for k in shared if not torch.equal(sa[k], sb[k])]


def test_a_plugin_that_adds_a_projection_per_unit_shares_every_other_tensor_with_preact(plugins: None) -> None:
    base = variants.create("preact", depth=20, seed=7)
    plugin = variants.create("test_proj_preact", depth=20, seed=7)
    shared, differ = _shared(base, plugin)
    convs = [k for k in shared if base.state_dict()[k].dim() == 4]
    assert len(convs) == 19 and len(shared) == len(base.state_dict()) and differ == []
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    assert torch.equal(base.eval()(x), plugin.eval()(x))  # b = 0: the same net at step 0, to the last bit
    # torch's one global stream: the projections drawn after each unit's convs shift every draw after them
    torch.manual_seed(7)
    old_base = variants.create("preact", depth=20)
    torch.manual_seed(7)
    old_plugin = variants.create("test_proj_preact", depth=20)
    assert len(_shared(old_base, old_plugin)[1]) == 19  # all but the first unit's two convs, the head included


def test_a_transformer_plugin_that_adds_a_gate_shares_every_other_tensor_with_preln(plugins: None) -> None:
    base = variants.create("preln", seed=3, **TINY_LM)
    plugin = variants.create("test_gated_preln", seed=3, **TINY_LM)
    shared, differ = _shared(base, plugin)
    assert len(shared) == len(base.state_dict()) == 28 and differ == []
    assert sum(k.endswith("gate.weight") for k in plugin.state_dict()) == 4
    torch.manual_seed(3)
    old_base = variants.create("preln", **TINY_LM)
    torch.manual_seed(3)
    assert _shared(old_base, variants.create("test_gated_preln", **TINY_LM))[1] != []


def test_preln_and_postln_share_every_tensor_of_the_same_name() -> None:
    pre, post = variants.create("preln", seed=11, **TINY_LM), variants.create("postln", seed=11, **TINY_LM)
    shared, differ = _shared(pre, post)
    assert len(shared) == 18 and differ == []  # embeddings and every sublayer's weights; the norms are named apart


def test_a_tensor_reads_the_stream_of_its_seed_and_name() -> None:
    """A bare layer's weight is exactly torch's own draw from the generator of (seed, name); the hash is pinned, so
    a seed draws the same weights on every machine and release."""
    assert draws.stream_seed(0, "weight") == draws.stream_seed(0, "weight") != draws.stream_seed(1, "weight")
    assert draws.stream_seed(0, "weight") == 3951154644049706098
    model = draws.build(lambda: nn.Linear(4, 3), seed=5)
    expected = torch.empty(3, 4)
    nn.init.kaiming_uniform_(expected, a=math.sqrt(5),
                             generator=torch.Generator().manual_seed(draws.stream_seed(5, "weight")))
    assert torch.equal(model.weight, expected)
    bias = torch.empty(3).uniform_(-0.5, 0.5, generator=torch.Generator().manual_seed(draws.stream_seed(5, "bias")))
    assert torch.equal(model.bias, bias)


def test_a_value_reaches_its_tensor_through_arithmetic_and_copies() -> None:
    """``Parameter(randn(...) * 0.02)`` and a draw into a scratch tensor copied in (orthogonal init) read the stream
    of the tensor they end up in, whatever else the build draws before them."""

    class Net(nn.Module):
        def __init__(self, extra: bool) -> None:
            super().__init__()
            if extra:
                self.first = nn.Parameter(torch.randn(5))
            self.pos = nn.Parameter(torch.randn(4, 3) * 0.02)
            self.rot = nn.Linear(3, 3, bias=False)
            nn.init.orthogonal_(self.rot.weight)

    a, b = draws.build(lambda: Net(False), seed=2), draws.build(lambda: Net(True), seed=2)
    assert torch.equal(a.pos, b.pos) and torch.equal(a.rot.weight, b.rot.weight)
    g = torch.Generator().manual_seed(draws.stream_seed(2, "pos"))
    assert torch.equal(a.pos, torch.randn(4, 3, generator=g) * 0.02)
    assert torch.allclose(a.rot.weight @ a.rot.weight.T, torch.eye(3), atol=1e-6)


def test_the_model_takes_nothing_from_the_global_stream() -> None:
    torch.manual_seed(1)
    one = variants.create("preact", depth=8, seed=4)
    after = torch.get_rng_state()
    torch.manual_seed(1)
    assert torch.equal(after, torch.get_rng_state())  # the build drew nothing from it
    torch.manual_seed(2)
    two = variants.create("preact", depth=8, seed=4)
    assert _shared(one, two)[1] == []


def test_data_order_augmentation_and_dropout_streams_do_not_depend_on_the_design(plugins: None) -> None:
    """Two designs that draw different numbers of initial values leave the same global state behind (dropout's
    stream starts from it) under crn; the old global stream did not."""
    states = {}
    for stream in ("crn", "global"):
        for variant in ("preact", "test_proj_preact"):
            cfg = build({"variant": variant, "depth": 8, "task": "synthetic", "train_size": 64, "val_size": 32,
                         "image_size": 8, "batch_size": 16, "steps": 1, "seed": 3, "init_stream": stream,
                         "device": "cpu"})
            s = setup(cfg)
            states[stream, variant] = (torch.get_rng_state(), s.model)
    assert torch.equal(states["crn", "preact"][0], states["crn", "test_proj_preact"][0])
    assert not torch.equal(states["global", "preact"][0], states["global", "test_proj_preact"][0])
    assert _shared(states["crn", "preact"][1], states["crn", "test_proj_preact"][1])[1] == []


def test_a_build_that_draws_differently_the_second_time_is_refused() -> None:
    calls: list[int] = []

    def more() -> nn.Module:
        calls.append(1)
        return nn.Sequential(*(nn.Linear(2, 2) for _ in calls))

    with pytest.raises(RuntimeError, match=r"^building variant 'x' twice drew differently \(draw 2: "
                                           r"aten.uniform_.default, the first build had no more draws\): its "
                                           r"construction must not depend on random values$"):
        draws.build(more, seed=0, what="variant 'x'")
    calls.clear()

    def fewer() -> nn.Module:
        calls.append(1)
        return nn.Sequential(*(nn.Linear(2, 2) for _ in range(3 - len(calls))))

    with pytest.raises(RuntimeError, match=r"^building the model twice drew differently \(the first build drew 4 "
                                           r"times, the second 2\)"):
        draws.build(fewer, seed=0)


@pytest.mark.parametrize(("name", "kwargs"), [("convnext_cifar", {"depth": 11, "width": 4}),
                                              ("densenet", {"init": "trunc_normal"})])
def test_a_truncated_normal_draw_takes_one_draw_a_tensor_whatever_its_values(name: str, kwargs: dict) -> None:
    """torch's own trunc_normal_ redraws out-of-bounds values in a loop in recent releases, so the build drew a
    value-dependent number of times and every seeded build of the ConvNeXts failed ("twice drew differently")."""
    a, b = (variants.create(name, seed=s, **kwargs) for s in (0, 0))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    weights = [m.weight for m in a.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    assert all(w.abs().max() <= 0.04 for w in weights)  # N(0, 0.02) truncated at 2 sigma


def test_on_the_meta_device_nothing_is_drawn() -> None:
    with torch.device("meta"):
        model = variants.create("preact", depth=8, seed=0)
    assert all(p.is_meta for p in model.parameters())


def test_the_init_stream_is_part_of_a_runs_identity() -> None:
    fields = {"variant": "preact", "depth": 8, "task": "digits", "steps": 5}
    crn, old = build(fields), build({**fields, "init_stream": "global"})
    assert crn.init_stream == FIELD_DEFAULTS["init_stream"] == "crn"
    assert crn.run_id != old.run_id  # never pooled, never paired
    recorded = old.to_dict()
    del recorded["init_stream"]  # a run recorded before the field existed was drawn from the global stream
    assert config_from_dict(recorded) == old and config_from_dict(recorded).run_id == old.run_id
    assert config_from_dict(crn.to_dict()).run_id == crn.run_id
    assert "--init-stream" in old.to_argv() and "--init-stream" not in crn.to_argv()
    with pytest.raises(ValueError, match=r"^--init-stream must be one of crn, global, got 'fold' \(str\)$"):
        build({**fields, "init_stream": "fold"})


def test_build_model_draws_as_the_config_says() -> None:
    cfg = build({"variant": "preact", "depth": 8, "task": "digits", "seed": 6})
    kw = {"depth": 8, "num_classes": 10}
    crn = build_model(cfg, kw)
    torch.manual_seed(6)
    old = variants.create("preact", **kw)
    assert torch.equal(build_model(RunConfig(**{**cfg.to_dict(), "init_stream": "global"}), kw)
                       .stem[0].weight, old.stem[0].weight)
    assert torch.equal(crn.stem[0].weight, variants.create("preact", depth=8, num_classes=10, seed=6).stem[0].weight)
    assert not torch.equal(crn.stem[0].weight, old.stem[0].weight)


def test_the_build_sees_the_global_stream_as_the_caller_left_it() -> None:
    """Draws take their values from their streams, and nothing else changes for the builder's own code: a plugin that
    reads ``torch.initial_seed()`` after drawing its layers reads the seed the caller set."""
    seen = []

    def make() -> nn.Module:
        model = nn.Linear(3, 3)
        seen.append(torch.initial_seed())
        return model

    torch.manual_seed(123)
    draws.build(make, seed=5)
    assert seen == [123, 123]
