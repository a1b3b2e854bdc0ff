"""Extension points of the axes: a plugin adds a norm type (DyT), a feed-forward body, an init scheme or a
combinator by name, every family taking that axis accepts it, and describe() reports it by its name."""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch
from _nets import write
from torch import nn

import variants
from variants import transformer
from variants.blocks import ResidualUnit
from variants.registry import derive_axes

# The acceptance plugin: DyT (Zhu et al. 2025, "Transformers without Normalization", y = γ·tanh(α·x) + β, α a scalar
# starting at 0.5, γ ones, β zeros) as a norm type, and one variant built on it from the family's defaults.
DYT_PLUGIN = '''
    import torch
    from torch import nn

    import variants


    @variants.register_norm("plugin_dyt")
    class DyT(nn.Module):
        """Zhu et al. 2025, Transformers without Normalization: ``y = γ·tanh(α·x) + β``."""

        def __init__(self, d: int) -> None:
            super().__init__()
            self.alpha = nn.Parameter(torch.tensor(0.5))
            self.weight = nn.Parameter(torch.ones(d))
            self.bias = nn.Parameter(torch.zeros(d))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.weight * torch.tanh(self.alpha * x) + self.bias


    @variants.register("sandwich_dyt", family="transformer", paper="Zhu et al. 2025, Transformers without "
                       "Normalization (DyT in a sandwich stack)", spec=variants.TransformerSpec(norm="plugin_dyt"))
    def sandwich_dyt(spec):
        return variants.build_transformer("sandwich", spec)
'''
TINY = {"depth": 2, "d_model": 16, "n_heads": 2, "d_ff": 32, "vocab_size": 11, "max_len": 8}


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def restore() -> Iterator[None]:
    """Whatever a test registers (variants, axis values) is gone after it, as a plugin loader unloads a plugin."""
    names, values = variants.list_variants(), variants.registered_axis_values()
    yield
    for name in sorted(set(variants.list_variants()) - set(names)):
        if name in variants.list_variants():
            variants.unregister(name)
    for axis, name in sorted(set(variants.registered_axis_values()) - set(values)):
        variants.unregister_axis_value(axis, name)


@pytest.fixture
def dyt(tmp_path: Path, restore: None) -> Iterator[ModuleType]:
    module = _load(write(tmp_path / "dyt_plugin.py", DYT_PLUGIN), "dyt_plugin")
    yield module
    sys.modules.pop("dyt_plugin", None)


@pytest.mark.parametrize(("name", "norms"), [("preln", 2 * 2 + 1), ("postln", 2 * 2), ("sandwich", 4 * 2 + 1)])
def test_dyt_builds_in_every_placement(dyt: ModuleType, name: str, norms: int) -> None:
    torch.manual_seed(0)
    model = variants.create(name, norm="plugin_dyt", **TINY)
    assert sum(isinstance(m, dyt.DyT) for m in model.modules()) == norms
    assert not any(isinstance(m, nn.LayerNorm) for m in model.modules())
    assert derive_axes(model)["norm"] == "plugin_dyt"
    y = model(torch.randint(0, 11, (2, 8)))
    (y * torch.randn(y.shape)).sum().backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    alphas = [m.alpha.grad for m in model.modules() if isinstance(m, dyt.DyT)]
    assert all(a is not None and a != 0 for a in alphas)  # every DyT sits on the path to the loss


def test_dyt_formula(dyt: ModuleType) -> None:
    norm = dyt.DyT(4).double()
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([1.0, 2.0, -1.0, 0.5]))
        norm.bias.copy_(torch.tensor([0.0, 0.1, 0.2, -0.3]))
    x = torch.randn(3, 4, dtype=torch.float64)
    assert norm.alpha.item() == 0.5
    assert torch.allclose(norm(x), norm.weight * torch.tanh(0.5 * x) + norm.bias)


def test_describe_of_a_variant_built_with_it_says_dyt(dyt: ModuleType) -> None:
    d = variants.describe("sandwich_dyt")
    assert d["axes"] == {"combinator": "add", "placement": "sandwich", "body": "attention+ffn", "norm": "plugin_dyt"}
    assert d["defaults"]["norm"] == "plugin_dyt" and d["module"] == "dyt_plugin"
    assert (d["layer"], d["unit"]) == ("variants.lm_blocks.PeriLN", "variants.lm_blocks.Sublayer")
    # The family's defaults, not copies: the trunk is sandwich's; each of its 4·6 + 1 norms holds DyT's α besides
    # LayerNorm's γ and β.
    assert {k: v for k, v in d["defaults"].items() if k != "norm"} == {
        k: v for k, v in variants.describe("sandwich")["defaults"].items() if k != "norm"}
    assert d["params"] == variants.describe("sandwich")["params"] + 4 * 6 + 1
    assert derive_axes(variants.create("sandwich_dyt", norm="layernorm", **TINY))["norm"] == "layernorm"


def test_the_rest_of_the_family_and_the_mlp_take_it(dyt: ModuleType) -> None:
    for name in ("hyper_connections", "mhc", "laurel", "mixln", "resi_dual", "b2t"):
        model = variants.create(name, norm="plugin_dyt", **TINY)
        assert derive_axes(model)["norm"] == "plugin_dyt", name
        assert torch.isfinite(model(torch.randint(0, 11, (2, 8)))).all()
    mlp = variants.create("preact_mlp", norm="plugin_dyt", depth=3, width=8, image_size=2)
    assert derive_axes(mlp)["norm"] == "plugin_dyt" and sum(isinstance(m, dyt.DyT) for m in mlp.modules()) == 3
    assert mlp(torch.randn(2, 1, 2, 2)).shape == (2, 10)


def test_a_mismatched_declared_axis_names_the_axis(dyt: ModuleType) -> None:
    variants.register("declared_wrong", family="transformer", paper="p", axes={"norm": "layernorm"},
                      spec=variants.TransformerSpec(norm="plugin_dyt"))(
        lambda spec: variants.build_transformer("pre", spec))
    with pytest.raises(ValueError, match=r"'declared_wrong' declares norm='layernorm', but .* has norm='plugin_dyt'"):
        variants.describe("declared_wrong")
    variants.register("declared_right", family="transformer", paper="p",
                      axes={"norm": "plugin_dyt", "source": "plugin"},
                      spec=variants.TransformerSpec(norm="plugin_dyt"))(lambda spec: variants.build_transformer("pre",
                                                                                                             spec))
    axes = variants.describe("declared_right")["axes"]
    assert axes["norm"] == "plugin_dyt" and axes["source"] == "plugin"  # one the derivation cannot see is kept


def test_duplicates_raise_and_a_plugin_unloads_what_it_registered(dyt: ModuleType) -> None:
    with pytest.raises(ValueError, match=r"norm 'plugin_dyt' is already registered \(by module dyt_plugin\)"):
        variants.register_norm("plugin_dyt", dyt.DyT)
    for shipped in ("layernorm", "rmsnorm", "batch", "batchnorm", "none"):
        with pytest.raises(ValueError, match=f"norm '{shipped}' is already registered \\(by a shipped family\\)"):
            variants.register_norm(shipped, dyt.DyT)
    assert variants.registered_axis_values(module="dyt_plugin") == [("norm", "plugin_dyt")]
    variants.unregister("sandwich_dyt")
    for axis, name in variants.registered_axis_values(module="dyt_plugin"):
        variants.unregister_axis_value(axis, name)
    with pytest.raises(ValueError, match=r"unknown norm 'plugin_dyt'; choose one of: layernorm, rmsnorm, scalenorm, "
                                         r"dyt, derf, seednorm \("):
        variants.create("preln", norm="plugin_dyt")
    with pytest.raises(ValueError, match="norm 'plugin_dyt' is not registered"):
        variants.unregister_axis_value("norm", "plugin_dyt")
    with pytest.raises(ValueError, match="norm 'dyt' is shipped with a family"):  # DyT ships with variants.norms
        variants.unregister_axis_value("norm", "dyt")
    with pytest.raises(ValueError, match="norm 'layernorm' is shipped with a family"):
        variants.unregister_axis_value("norm", "layernorm")
    with pytest.raises(ValueError, match="unknown axis 'colour'"):
        variants.unregister_axis_value("colour", "red")


def test_a_factory_passed_directly(dyt: ModuleType, restore: None) -> None:
    assert derive_axes(variants.create("preln", norm=dyt.DyT, **TINY))["norm"] == "plugin_dyt"  # registered: its name
    assert derive_axes(variants.create("preln", norm=nn.RMSNorm, **TINY))["norm"] == "rmsnorm"  # torch's class

    class Unnamed(dyt.DyT):
        pass

    name = f"{Unnamed.__module__}.{Unnamed.__qualname__}"
    assert derive_axes(variants.create("preln", norm=Unnamed, **TINY))["norm"] == name
    with pytest.raises(ValueError, match=r"unknown norm LayerNorm\(.*choose one of"):
        variants.create("preln", norm=nn.LayerNorm(16))  # a module, not a factory


def test_register_init_in_every_family(restore: None) -> None:
    variants.register_init("orthogonal", nn.init.orthogonal_)
    torch.manual_seed(0)
    lm = variants.create("preln", init="orthogonal", **TINY)
    qkv = lm.blocks[0].attn.body.qkv.weight
    assert torch.allclose(qkv.T @ qkv, torch.eye(16), atol=1e-5)  # 48×16: orthonormal columns
    for name, kw in (("resnet", {"depth": 8, "width": 4}), ("densenet", {"depth": 10, "growth_rate": 4}),
                     ("wrn", {"depth": 10, "widen_factor": 1}), ("layerscale", {"depth": 8, "width": 4})):
        conv = next(m for m in variants.create(name, init="orthogonal", **kw).modules() if isinstance(m, nn.Conv2d))
        w = conv.weight.flatten(1)  # out × (in·k·k), out <= in·k·k: orthonormal rows
        assert torch.allclose(w @ w.T, torch.eye(w.shape[0]), atol=1e-5), name
    with torch.device("meta"):
        variants.create("resnet_imagenet", depth=18, init="orthogonal")
    mlp = variants.create("plain_mlp", depth=3, width=8, image_size=3, init="orthogonal")
    w = mlp.blocks[0].body[0].weight
    assert torch.allclose(w @ w.T, torch.eye(8), atol=1e-5)
    with pytest.raises(ValueError, match="variant 'fixup' itself fixes init"):
        variants.create("fixup", depth=20, init="orthogonal")
    with pytest.raises(ValueError, match="init 'xavier' is already registered"):
        variants.register_init("xavier", nn.init.orthogonal_)


class ReluSquared(nn.Module):
    """A feed-forward body with linear layers of its own names: ``down(relu(up(x))²)``."""

    def __init__(self, d_model: int, d_ff: int, dropout: float, bias: bool) -> None:
        super().__init__()
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.down = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)) ** 2)


def test_register_ffn_and_the_init_schemes_draw_it(restore: None) -> None:
    variants.register_ffn("relu2", ReluSquared)
    for init in ("xavier", "gpt2", "deepnorm", "t_fixup", "normal", "admin"):
        torch.manual_seed(0)
        spec = transformer.TransformerSpec(init=init, ffn="relu2", **{**TINY, "depth": 64, "d_ff": 64})
        model = transformer.TransformerLM(transformer.DESIGNS["preln"], spec)
        assert derive_axes(model)["body"] == "attention+relu2"
        assert torch.isfinite(model(torch.randint(0, 11, (2, 8)))).all()
        if init == "gpt2":  # the last linear layer is the residual projection: N(0, 0.02/√(2N))
            down = torch.cat([b.ffn.body.down.weight.flatten() for b in model.blocks])
            up = torch.cat([b.ffn.body.up.weight.flatten() for b in model.blocks])
            assert down.std().item() == pytest.approx(0.02 / math.sqrt(128), rel=0.05)
            assert up.std().item() == pytest.approx(0.02, rel=0.05)


def test_register_combinator(restore: None) -> None:
    class Mean(variants.Combinator):
        """``y = (x + F(x)) / 2``."""

        def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
            return (x + fx) / 2

    assert derive_axes(nn.Sequential(ResidualUnit(nn.Linear(4, 4), Mean())))["combinator"] == "Mean"
    variants.register_combinator("mean", Mean)
    assert derive_axes(nn.Sequential(ResidualUnit(nn.Linear(4, 4), Mean())))["combinator"] == "mean"
    from variants import axes

    assert axes.lookup("combinator", "mean", variants.COMBINATORS, message=str) == ("mean", Mean)

    class Named(Mean):
        axis = "named"

    with pytest.raises(ValueError, match="its class says axis = 'named'"):
        variants.register_combinator("other", Named)
    with pytest.raises(ValueError, match="combinator 'add' is already registered"):
        variants.register_combinator("add", Mean)
    with pytest.raises(ValueError, match=r"must be a subclass of variants\.Combinator"):
        variants.register_combinator("linear", nn.Linear)


def test_build_transformer_is_the_family_default() -> None:
    torch.manual_seed(0)
    shipped = variants.create("preln")
    torch.manual_seed(0)
    built = variants.build_transformer("preln")
    assert all(torch.equal(a, b) for a, b in zip(shipped.state_dict().values(), built.state_dict().values(),
                                                 strict=True))
    torch.manual_seed(0)
    by_placement = variants.build_transformer("pre", variants.TransformerSpec())
    assert all(torch.equal(a, b) for a, b in zip(shipped.state_dict().values(), by_placement.state_dict().values(),
                                                 strict=True))
    with torch.device("meta"):
        assert derive_axes(variants.build_transformer("post", depth=3))["placement"] == "post"
        assert variants.build_transformer("deepnorm", init="deepnorm") is not None
    with pytest.raises(ValueError, match="design 'deepnorm' is its initialisation: init must be 'deepnorm'"):
        variants.build_transformer("deepnorm")
    with pytest.raises(ValueError, match=r"design must be a Design, one of .*'preln'.* got 'prelm'"):
        variants.build_transformer("prelm")
    with pytest.raises(ValueError, match="d_model must be a positive integer, got 'abc'"):
        variants.TransformerSpec(d_model="abc")
    with pytest.raises(ValueError, match="unknown ffn 'relu'; choose one of: gelu, swiglu"):
        variants.TransformerSpec(ffn="relu")


def test_build_mlp_on_its_spec() -> None:
    spec = variants.MlpSpec(depth=3, width=8, image_size=2)
    model = variants.build_mlp(spec, lambda rate: ResidualUnit(nn.Sequential(spec.hidden(), spec.act()),
                                                               variants.COMBINATORS["add"](), drop_path=rate))
    assert len(model.blocks) == 2 and model(torch.randn(2, 1, 2, 2)).shape == (2, 10)
