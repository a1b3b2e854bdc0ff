"""CIFAR plain / ResNet / Highway (variants.cifar) and He 2016 orderings (variants.preact)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import variants
from variants.combinators import Add, Combinator, Gate, NoShortcut, Scaled
from variants.layers import PadShortcut, Unit
from variants.preact import ORDERS

FAMILIES = {"plain", "resnet", "highway", "preact"}
TOO_BIG = {"resnet1202", "preact_resnet1001"}  # covered by their base variants; counted in test_param_counts
NAMES = [n for n in variants.list_variants() if variants.describe(n)["family"] in FAMILIES]



def randomize_bn(model: nn.Module) -> nn.Module:
    """Non-trivial BN statistics and affine parameters, so formulas that misplace a BN fail."""
    g = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            m.running_mean.copy_(torch.rand(c, generator=g) - 0.5)
            m.running_var.copy_(torch.rand(c, generator=g) + 0.5)
            with torch.no_grad():
                m.weight.copy_(torch.rand(c, generator=g) + 0.5)
                m.bias.copy_(torch.rand(c, generator=g) - 0.5)
    return model


def eval64(model: nn.Module) -> nn.Module:
    return randomize_bn(model).double().eval()


def units(model: nn.Module) -> list[Unit]:
    return [m for m in model.modules() if isinstance(m, Unit)]


def test_family_is_registered() -> None:
    assert {"plain", "resnet", "highway", "preact", "plain20", "resnet56", "highway110", "preact_resnet164"} <= set(
        NAMES
    )


@pytest.mark.parametrize("name", [n for n in NAMES if n not in TOO_BIG])
def test_forward_backward(name: str) -> None:
    torch.manual_seed(0)
    model = variants.create(name, **variants.describe(name)["defaults"])
    y = model(torch.randn(2, 3, 8, 8))
    assert y.shape == (2, 10)
    y.square().mean().backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)


@pytest.mark.parametrize("name", ["plain", "resnet", "highway", "preact"])
def test_in_chans_num_classes_and_any_input_size(name: str) -> None:
    model = variants.create(name, depth=8, in_chans=1, num_classes=7)
    assert next(m for m in model.modules() if isinstance(m, nn.Conv2d)).in_channels == 1
    for size in (7, 12):
        assert model(torch.randn(2, 1, size, size)).shape == (2, 7)


def test_one_combinator_per_unit() -> None:
    model = variants.create("resnet20")
    combinators = [m for m in model.modules() if isinstance(m, Combinator)]
    assert len(combinators) == len(units(model)) == 9


# --- plain and ResNet (He 2015) ---


def test_plain_has_no_shortcut_and_same_layers_as_resnet() -> None:
    plain, res = variants.create("plain20"), variants.create("resnet20")
    assert all(isinstance(u.combine, NoShortcut) and isinstance(u.shortcut, nn.Identity) for u in units(plain))
    assert [p.shape for p in plain.parameters()] == [p.shape for p in res.parameters()]
    model = eval64(plain)
    u, x = units(model)[4], torch.randn(2, 32, 4, 4, dtype=torch.float64)  # stage-2 identity-shaped unit
    assert torch.allclose(u(x), F.relu(u.body(x)))
    # The downsampling unit ignores its input entirely except through the branch.
    d = units(model)[3]
    assert d(torch.randn(2, 16, 8, 8, dtype=torch.float64)).shape == (2, 32, 4, 4)


def test_resnet_unit_formula() -> None:
    model = eval64(variants.create("resnet20"))
    u = units(model)[1]
    conv1, bn1, _, conv2, bn2 = u.body
    x = torch.randn(2, 16, 6, 6, dtype=torch.float64)
    assert isinstance(u.combine, Add)
    assert torch.allclose(u(x), F.relu(x + bn2(conv2(F.relu(bn1(conv1(x)))))), atol=1e-12)


def test_shortcut_a_zero_pads_and_subsamples() -> None:
    x = torch.randn(2, 16, 7, 7)
    y = PadShortcut(16, 32, 2)(x)
    assert y.shape == (2, 32, 4, 4)  # same as a 3×3/2 conv with padding 1 on a 7×7 input
    assert torch.equal(y[:, :16], x[:, :, ::2, ::2])
    assert torch.equal(y[:, 16:], torch.zeros(2, 16, 4, 4))
    model = variants.create("resnet20")
    assert sum(isinstance(u.shortcut, PadShortcut) for u in units(model)) == 2
    assert sum(p.numel() for u in units(model) for p in u.shortcut.parameters()) == 0
    with pytest.raises(ValueError, match="cannot reduce channels"):
        PadShortcut(32, 16, 1)


def test_shortcut_b_and_c_project() -> None:
    b = variants.create("resnet20", shortcut="B")
    projections = [u.shortcut for u in units(b) if not isinstance(u.shortcut, nn.Identity)]
    assert len(projections) == 2 and all(isinstance(s[1], nn.BatchNorm2d) for s in projections)
    c = variants.create("resnet20", shortcut="C")
    assert not any(isinstance(u.shortcut, nn.Identity) for u in units(c))


def test_bottleneck_resnet() -> None:
    model = variants.create("resnet", depth=11, block="bottleneck")
    assert model.head[-1].in_features == 256
    assert model(torch.randn(2, 3, 8, 8)).shape == (2, 10)


# --- He 2016 Table 1 shortcut treatments ---


def _variant_unit(variant: str, **kw: float) -> tuple[Unit, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = eval64(variants.create("resnet20", shortcut_variant=variant, **kw))
    u = units(model)[1]
    x = torch.randn(2, 16, 5, 5, dtype=torch.float64)
    return u, x, u.body(x)


def test_identity_variant() -> None:
    u, x, f = _variant_unit("identity")
    assert torch.allclose(u(x), F.relu(x + f))


def test_constant_scaling() -> None:
    u, x, f = _variant_unit("constant_scaling")
    assert isinstance(u.combine, Scaled)
    assert torch.allclose(u(x), F.relu(0.5 * x + 0.5 * f))


@pytest.mark.parametrize(
    ("variant", "mode"), [("exclusive_gating", "highway"), ("shortcut_only_gating", "shortcut_only")]
)
def test_gating_variants(variant: str, mode: str) -> None:
    u, x, f = _variant_unit(variant)
    assert isinstance(u.combine, Gate) and u.combine.mode == mode
    proj = u.combine.gate.proj
    assert torch.all(proj.bias == -6.0) and proj.kernel_size == (1, 1)  # He 2016 §3.1's best b_g
    g = torch.sigmoid(proj(x))
    expected = g * f + (1 - g) * x if mode == "highway" else f + (1 - g) * x
    assert torch.allclose(u(x), F.relu(expected))
    u2, _, _ = _variant_unit(variant, gate_bias=-1.5)
    assert torch.all(u2.combine.gate.proj.bias == -1.5)


def test_conv_shortcut() -> None:
    u, x, f = _variant_unit("conv_shortcut")
    assert isinstance(u.shortcut, nn.Conv2d) and u.shortcut.kernel_size == (1, 1)
    assert torch.allclose(u(x), F.relu(u.shortcut(x) + f))
    model = variants.create("resnet20", shortcut_variant="conv_shortcut")
    assert all(isinstance(un.shortcut, nn.Conv2d) for un in units(model))


def test_dropout_shortcut() -> None:
    u, x, f = _variant_unit("dropout_shortcut")
    assert torch.allclose(u(x), F.relu(0.5 * x + f))  # eval: the expected scale 0.5
    u.train()
    torch.manual_seed(1)
    s = u.shortcut(torch.ones(4000, dtype=torch.float64))
    assert set(s.unique().tolist()) == {0.0, 1.0}  # a 0/1 mask, not rescaled
    assert abs(s.mean().item() - 0.5) < 0.05


# --- Highway (Srivastava 2015) ---


def test_highway_formula_and_gate_bias() -> None:
    model = eval64(variants.create("highway20"))
    u = units(model)[1]
    assert isinstance(u.combine, Gate) and u.combine.mode == "highway"
    assert torch.all(u.combine.gate.proj.bias == -3.0)
    x = torch.randn(2, 16, 5, 5, dtype=torch.float64)
    conv1, bn1, _, conv2, bn2, _ = u.body
    h = F.relu(bn2(conv2(F.relu(bn1(conv1(x))))))
    t = torch.sigmoid(u.combine.gate.proj(x))
    assert torch.allclose(u(x), t * h + (1 - t) * x)
    custom = variants.create("highway", depth=20, gate_bias=-6.0)
    assert all(torch.all(un.combine.gate.proj.bias == -6.0) for un in units(custom))


# --- He 2016 orderings ---


def _order_formula(order: str, u: Unit, x: torch.Tensor) -> torch.Tensor:
    convs = [m for m in u.body if isinstance(m, nn.Conv2d)]
    bns = [m for m in u.body if isinstance(m, nn.BatchNorm2d)]
    c1, c2 = convs
    if order == "original":
        return F.relu(x + bns[1](c2(F.relu(bns[0](c1(x))))))
    if order == "bn_after_add":
        return F.relu(u.post[0](x + c2(F.relu(bns[0](c1(x))))))
    if order == "relu_before_add":
        return x + F.relu(bns[1](c2(F.relu(bns[0](c1(x))))))
    if order == "relu_only_preact":
        return x + bns[1](c2(F.relu(bns[0](c1(F.relu(x))))))
    assert order == "full_preact"
    return x + c2(F.relu(bns[1](c1(F.relu(bns[0](x))))))


@pytest.mark.parametrize("order", list(ORDERS))
def test_preact_order_formulas(order: str) -> None:
    model = eval64(variants.create("preact", depth=20, order=order))
    u = units(model)[1]  # identity-shaped, not the first unit: nothing shared with the shortcut
    x = torch.randn(2, 16, 5, 5, dtype=torch.float64)
    assert isinstance(u.combine, Add)
    assert torch.allclose(u(x), _order_formula(order, u, x), atol=1e-12)
    assert model(torch.randn(2, 3, 8, 8, dtype=torch.float64)).shape == (2, 10)


def test_full_preact_net_ends_with_bn_relu_and_stem_is_bare_conv() -> None:
    model = variants.create("preact_resnet110")
    assert isinstance(model.head[0][0], nn.BatchNorm2d) and isinstance(model.head[0][1], nn.ReLU)
    assert isinstance(model.stem[0], nn.Conv2d) and len(model.stem) == 1


def test_original_order_equals_resnet() -> None:
    torch.manual_seed(0)
    a = eval64(variants.create("preact", depth=20, order="original"))
    b = eval64(variants.create("resnet20"))
    b.load_state_dict(dict(zip(b.state_dict(), a.state_dict().values(), strict=True)))
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    assert torch.allclose(a(x), b(x))


def test_preact_bottleneck_shares_preactivation_with_projection() -> None:
    model = eval64(variants.create("preact_resnet164"))
    first = units(model)[0]
    assert model.head[-1].in_features == 256
    assert isinstance(first.shortcut, nn.Conv2d)  # projection without BN (pre-activated input)
    bn, relu = first.shared
    x = torch.randn(2, 16, 4, 4, dtype=torch.float64)
    s = relu(bn(x))
    assert torch.allclose(first(x), first.shortcut(s) + first.body(s))
    outs = [u.body[-1].out_channels for u in units(model)]
    assert sorted(set(outs)) == [64, 128, 256]


# --- errors ---


@pytest.mark.parametrize("name", ["plain", "resnet", "highway"])
def test_invalid_depth(name: str) -> None:
    with pytest.raises(ValueError, match=r"depth must be 6n\+2 \(basic\).*got 21"):
        variants.create(name, depth=21)
    with pytest.raises(ValueError, match=r"depth must be 9n\+2 \(bottleneck\).*got 30"):
        variants.create(name, depth=30, block="bottleneck")
    with pytest.raises(ValueError, match=r"6n\+2"):
        variants.create(name, depth=2)


def test_invalid_depth_preact() -> None:
    with pytest.raises(ValueError, match=r"Pre-activation ResNet depth must be 9n\+2 \(bottleneck\).*got 30"):
        variants.create("preact", depth=30, block="bottleneck")
    with pytest.raises(ValueError, match=r"6n\+2"):
        variants.create("preact", depth=20.0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"shortcut": "D"}, r"shortcut must be one of \('A', 'B', 'C'\)"),
        ({"shortcut_variant": "bogus"}, r"shortcut_variant must be one of .*exclusive_gating"),
        ({"block": "wide"}, r"block must be one of \('basic', 'bottleneck'\)"),
        ({"width": 0}, "width must be a positive integer"),
        ({"num_classes": 0}, "num_classes must be a positive integer"),
        ({"in_chans": -1}, "in_chans must be a positive integer"),
        ({"drop_path_rate": 1.0}, r"drop_path_rate must be in \[0, 1\)"),
    ],
)
def test_resnet_invalid_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        variants.create("resnet", depth=20, **kwargs)


def test_preact_and_highway_invalid_arguments() -> None:
    with pytest.raises(ValueError, match=r"order must be one of .*full_preact"):
        variants.create("preact", order="post")
    with pytest.raises(ValueError, match="shortcut must be one of"):
        variants.create("preact", shortcut="X")
    with pytest.raises(ValueError, match="shortcut must be one of"):
        variants.create("highway", shortcut="X")
    with pytest.raises(ValueError, match="takes no keyword"):
        variants.create("plain", shortcut="A")  # plain nets have no shortcut to choose


# --- stochastic depth ---


@pytest.mark.parametrize("name", ["resnet", "highway", "preact"])
def test_drop_path_linear_decay_and_eval_determinism(name: str) -> None:
    torch.manual_seed(0)
    model = variants.create(name, depth=20, drop_path_rate=0.45)
    rates = [u.drop_path.drop_prob for u in units(model)]
    assert rates == pytest.approx([0.45 * (i + 1) / 9 for i in range(9)])
    x = torch.randn(8, 3, 8, 8)
    model.eval()
    assert torch.equal(model(x), model(x))
    model.train()
    torch.manual_seed(1)
    a = model(x)
    torch.manual_seed(2)
    assert not torch.allclose(a, model(x))
