"""CIFAR plain / ResNet / Highway (variants.cifar) and He 2016 orderings (variants.preact)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _nets import randomize_bn
from torch import nn

import variants
from variants.blocks import ResidualUnit
from variants.combinators import Add, Combinator, Gate, NoShortcut, Scaled
from variants.layers import PadShortcut

FAMILIES = {"plain", "resnet", "highway", "preact"}
NAMES = sorted(n for family in FAMILIES for n in variants.list_variants(family=family))


def eval64(model: nn.Module) -> nn.Module:
    return randomize_bn(model).double().eval()


def units(model: nn.Module) -> list[ResidualUnit]:
    return [m for m in model.modules() if isinstance(m, ResidualUnit)]


def test_family_is_registered() -> None:
    assert {"plain", "resnet", "highway", "preact", "plain20", "resnet56", "highway110", "preact_resnet164"} <= set(
        NAMES
    )


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


def _variant_unit(variant: str, **kw: float) -> tuple[ResidualUnit, torch.Tensor, torch.Tensor]:
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


def _bn(x: torch.Tensor, bn: nn.BatchNorm2d) -> torch.Tensor:
    return F.batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias, training=False, eps=bn.eps)


@pytest.mark.parametrize("shortcut", ["A", "B"])
def test_highway_gate_reads_the_reshaped_carry(shortcut: str) -> None:
    """Where a stage starts the two-conv unit computes y = T(s)·H(x) + (1 - T(s))·s with s = shortcut(x): the gate
    reads the carry, zero-padded and subsampled (A) or projected (B), as the docstrings say. Written out on
    float64 from the weights, not from the unit's submodules."""
    torch.manual_seed(0)
    model = eval64(variants.create("highway", depth=8, width=4, shortcut=shortcut))
    u = units(model)[1]  # first unit of stage 2: 4 -> 8 channels, stride 2
    conv1, bn1, _, conv2, bn2, _ = u.body
    with torch.no_grad():  # a non-zero gate weight and bias, so a gate that read anything else would show
        u.combine.gate.proj.weight.normal_(0, 0.5)
        u.combine.gate.proj.bias.copy_(torch.linspace(-1.0, 1.0, 8, dtype=torch.float64))
    x = torch.randn(2, 4, 6, 6, dtype=torch.float64)
    if shortcut == "A":
        s = F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, 0, 4))
    else:
        proj, bn_p = u.shortcut
        s = _bn(F.conv2d(x, proj.weight, stride=2), bn_p)
    h = F.relu(_bn(F.conv2d(F.relu(_bn(F.conv2d(x, conv1.weight, stride=2, padding=1), bn1)), conv2.weight,
                            padding=1), bn2))
    t = torch.sigmoid(F.conv2d(s, u.combine.gate.proj.weight, u.combine.gate.proj.bias))
    assert s.shape == h.shape == (2, 8, 3, 3)
    assert torch.allclose(u(x), t * h + (1 - t) * s, atol=1e-12)


def test_presets_use_the_adapted_two_conv_unit() -> None:
    assert {variants.describe(f"highway{d}")["defaults"]["unit"] for d in (20, 32, 44, 56, 110)} == {"two_conv"}
    # Derived from the units: H ends in BN-ReLU inside the branch, no norm or activation around the gated join.
    assert variants.describe("highway")["axes"]["placement"] == "none"


def _srivastava64() -> nn.Module:
    torch.manual_seed(0)
    return variants.create("highway", depth=8, width=4, unit="srivastava", gate_bias=-2.0).double().eval()


def test_srivastava_layer_formula() -> None:
    """Srivastava 2015 eq. 3 with eq. 2's H and T as 3×3 convs of the layer input: y = H·T + x·(1 - T)."""
    u = units(_srivastava64())[1]  # stage 1, second layer: 4 -> 4 channels
    (w_h, b_h), (w_t, b_t) = (u.body[0].weight, u.body[0].bias), (u.combine.gate.proj.weight, u.combine.gate.proj.bias)
    with torch.no_grad():  # non-zero biases, so a dropped or misplaced bias fails
        b_h.copy_(torch.linspace(-0.5, 0.5, 4, dtype=torch.float64))
        b_t.copy_(torch.linspace(-2.0, 1.0, 4, dtype=torch.float64))
    x = torch.randn(2, 4, 5, 5, dtype=torch.float64)
    h = F.relu(F.conv2d(x, w_h, b_h, padding=1))
    t = torch.sigmoid(F.conv2d(x, w_t, b_t, padding=1))
    assert w_h.shape == w_t.shape == (4, 4, 3, 3)  # the same receptive field
    assert torch.allclose(u(x), h * t + x * (1 - t), atol=1e-12)


def test_srivastava_plain_layers_change_dimensionality() -> None:
    model = _srivastava64()
    layers = units(model)
    down = layers[2]  # first layer of stage 2
    assert isinstance(down.combine, NoShortcut) and not any(isinstance(m, Gate) for m in down.modules())
    x = torch.randn(2, 4, 6, 6, dtype=torch.float64)
    conv = down.body[0]
    assert torch.allclose(down(x), F.relu(F.conv2d(x, conv.weight, conv.bias, stride=2, padding=1)))
    assert [isinstance(u.combine, Gate) for u in layers] == [True, True, False, True, False, True]
    assert not any(isinstance(m, nn.BatchNorm2d) for u in layers for m in u.modules())  # no BN in the layers
    assert model(torch.randn(2, 3, 8, 8, dtype=torch.float64)).shape == (2, 10)


def test_srivastava_gate_bias_and_parameter_count() -> None:
    model = variants.create("highway", depth=8, width=4, unit="srivastava", in_chans=1, num_classes=3)
    gates = [u for u in units(model) if isinstance(u.combine, Gate)]
    assert len(gates) == 4 and all(torch.all(u.combine.gate.proj.bias == -3.0) for u in gates)
    assert all(torch.all(u.body[0].bias == 0) for u in units(model))
    # depth 8 = 3·2 + 2: stem conv 1·4·9 + BN 2·4; stage 1: two highway layers of 2·(4·4·9 + 4);
    # stage 2: plain 4·8·9 + 8, highway 2·(8·8·9 + 8); stage 3: plain 8·16·9 + 16, highway 2·(16·16·9 + 16);
    # classifier 16·3 + 3.
    expected = 36 + 8 + 2 * 296 + 296 + 1168 + 1168 + 4640 + 51
    assert sum(p.numel() for p in model.parameters()) == expected == 7959


def test_srivastava_drop_path_spares_plain_layers() -> None:
    model = variants.create("highway", depth=8, unit="srivastava", drop_path_rate=0.6)
    rates = [u.drop_path.drop_prob for u in units(model)]
    assert rates == pytest.approx([0.1, 0.2, 0.0, 0.4, 0.0, 0.6])


def test_resnet_invalid_shortcut_variant() -> None:
    with pytest.raises(ValueError, match=r"shortcut_variant must be one of .*exclusive_gating"):
        variants.create("resnet", depth=20, shortcut_variant="bogus")


def test_preact_and_highway_invalid_arguments() -> None:
    with pytest.raises(ValueError, match=r"order must be one of .*full_preact"):
        variants.create("preact", order="post")
    with pytest.raises(ValueError, match="shortcut must be one of"):
        variants.create("preact", shortcut="X")
    with pytest.raises(ValueError, match="shortcut must be one of"):
        variants.create("highway", shortcut="X")
    with pytest.raises(ValueError, match="a plain net has no shortcut to choose"):
        variants.create("plain", shortcut="B")
    with pytest.raises(ValueError, match="no residual branch to drop"):
        variants.create("plain", drop_path_rate=0.1)


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
