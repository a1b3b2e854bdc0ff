"""Wide ResNets (variants.wrn) and ResNeXt (variants.resnext): unit formulas, layout, depth rules, errors.

Parameter counts against the papers' tables are in test_param_counts.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _nets import randomize_bn
from torch import nn

import variants
from variants.blocks import ResidualUnit
from variants.resnext import ResNeXtBottleneck
from variants.wrn import WideBasic


def units(model: nn.Module) -> list[ResidualUnit]:
    return [m for m in model.modules() if isinstance(m, ResidualUnit)]


def test_registered() -> None:
    assert {"wrn", "wrn28_10", "wrn16_8", "wrn40_4"} <= set(variants.list_variants(family="wrn"))
    assert {"resnext", "resnext29_8x64d", "resnext29_16x64d"} <= set(variants.list_variants(family="resnext"))
    assert variants.describe("wrn")["axes"] == {"combinator": "add", "placement": "pre", "body": "conv",
                                                "norm": "batchnorm"}
    assert variants.describe("resnext")["axes"]["placement"] == "post-activation"


def test_wrn_layout() -> None:
    model = variants.create("wrn", depth=16, widen_factor=3)  # n = 2 units per stage
    assert isinstance(model.stem, nn.Conv2d) and model.stem.out_channels == 16  # bare stem, not widened
    assert [u.body[-1].out_channels for u in units(model)] == [48, 48, 96, 96, 192, 192]
    # 1x1 projections exactly where the width changes (into every stage, stage 1 included: 16 -> 48)
    assert [isinstance(u.shortcut, nn.Conv2d) for u in units(model)] == [True, False] * 3
    head_bn, head_relu = model.head[0]
    assert isinstance(head_bn, nn.BatchNorm2d) and isinstance(head_relu, nn.ReLU)
    assert model(torch.randn(2, 3, 8, 8)).shape == (2, 10)  # the paper-size presets train in test_registry (slow)


def test_wide_unit_formula_with_dropout_between_the_convolutions() -> None:
    torch.manual_seed(0)
    u = WideBasic(4, 6, stride=2, dropout=0.5)
    randomize_bn(u).double()
    x = torch.randn(2, 4, 6, 6, dtype=torch.float64)
    bn1, _ = u.preact
    c1, bn2, _, drop, c2 = u.body
    assert isinstance(drop, nn.Dropout) and drop.p == 0.5
    u.eval()
    h = F.relu(bn1(x))
    assert torch.allclose(u(x), u.shortcut(h) + c2(F.relu(bn2(c1(h)))))  # projection reads the pre-activated x
    identity = randomize_bn(WideBasic(6, 6)).double().eval()
    y = torch.randn(2, 6, 3, 3, dtype=torch.float64)
    h = F.relu(identity.preact[0](y))
    c1, bn2, _, _, c2 = identity.body
    assert torch.allclose(identity(y), y + c2(F.relu(bn2(c1(h)))))  # identity shortcut reads x itself
    u.train()
    torch.manual_seed(1)
    a = u(x)
    assert not torch.equal(a, u(x))  # dropout is active in training


def test_resnext_unit_formula() -> None:
    torch.manual_seed(0)
    u = randomize_bn(ResNeXtBottleneck(8, 4, 2, cardinality=4, group_width=2)).double().eval()
    c1, b1, _, g, b2, _, c3, b3 = u.body
    assert g.groups == 4 and g.in_channels == g.out_channels == 8 and g.stride == (2, 2)
    assert c3.out_channels == 16
    x = torch.randn(2, 8, 6, 6, dtype=torch.float64)
    grouped = F.conv2d(F.relu(b1(c1(x))), g.weight, stride=2, padding=1, groups=4)
    assert torch.allclose(u(x), F.relu(u.shortcut(x) + b3(c3(F.relu(b2(grouped))))))
    proj, bn = u.shortcut  # option B: 1x1 conv + BN where the shape changes
    assert isinstance(proj, nn.Conv2d) and isinstance(bn, nn.BatchNorm2d)


def test_resnext_group_width_doubles_per_stage() -> None:
    model = variants.create("resnext", depth=11, width=8, cardinality=2, bottleneck_width=4)
    grouped = [m for m in model.modules() if isinstance(m, nn.Conv2d) and m.groups > 1]
    assert [(c.groups, c.out_channels) for c in grouped] == [(2, 8), (2, 16), (2, 32)]
    assert model.head[-1].in_features == 4 * 4 * 8
    assert model(torch.randn(2, 3, 8, 8)).shape == (2, 10)


def test_errors() -> None:
    with pytest.raises(ValueError, match=r"Wide ResNet depth must be 6n\+4 with n >= 1.*got 27"):
        variants.create("wrn", depth=27)
    with pytest.raises(ValueError, match="widen_factor must be a positive integer"):
        variants.create("wrn", depth=10, widen_factor=0)
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        variants.create("wrn", depth=10, dropout=1.0)
    with pytest.raises(ValueError, match="block must be 'basic'"):
        variants.create("wrn", depth=10, block="bottleneck")
    with pytest.raises(ValueError, match=r"ResNeXt depth must be 9n\+2 \(bottleneck\)"):
        variants.create("resnext", depth=28)
    with pytest.raises(ValueError, match="cardinality must be a positive integer"):
        variants.create("resnext", depth=11, cardinality=0)
    with pytest.raises(ValueError, match="block must be 'bottleneck'"):
        variants.create("resnext", depth=20, block="basic")
