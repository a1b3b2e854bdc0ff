"""Fully-connected plain / Highway / residual / pre-activation stacks (variants.mlp)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from _nets import randomize_bn
from torch import nn

import variants
from variants.combinators import Add, Gate, NoShortcut

NAMES = variants.list_variants(family="mlp")
BASES = ["plain_mlp", "highway_mlp", "residual_mlp", "preact_mlp"]



def test_registered() -> None:
    expected = set(BASES) | {f"{k}_mlp{d}" for k in ("plain", "highway") for d in (10, 20, 50, 100)}
    assert expected <= set(NAMES)


@pytest.mark.parametrize("name", BASES)
def test_depth_1000_forward_backward(name: str) -> None:
    torch.manual_seed(0)
    model = variants.create(name, depth=1000, width=8, image_size=4)
    assert len(model.blocks) == 999
    y = model(torch.randn(4, 1, 4, 4))
    y.sum().backward()
    assert torch.isfinite(y).all()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("name", BASES)
def test_input_is_flattened_image_and_num_classes(name: str) -> None:
    model = variants.create(name, depth=3, in_chans=3, image_size=5, num_classes=7, width=6)
    first = next(m for m in model.modules() if isinstance(m, nn.Linear))
    assert first.in_features == 75 and first.out_features == 6
    assert model(torch.randn(2, 3, 5, 5)).shape == (2, 7)
    assert len(variants.create(name, depth=1, image_size=4).blocks) == 0  # one plain hidden layer only


def test_srivastava_defaults() -> None:
    assert variants.describe("plain_mlp")["defaults"]["width"] == 71
    assert variants.describe("highway_mlp")["defaults"]["width"] == 50
    model = variants.create("highway_mlp20")
    assert len(model.blocks) == 19  # a plain first layer + 19 highway layers
    assert all(torch.all(u.combine.gate.proj.bias == -2.0) for u in model.blocks)


def _eval64(model: nn.Module) -> nn.Module:
    return randomize_bn(model).double().eval()


def test_unit_formulas() -> None:
    x = torch.randn(3, 8, dtype=torch.float64)
    plain = _eval64(variants.create("plain_mlp", depth=3, width=8, image_size=2)).blocks[0]
    assert isinstance(plain.combine, NoShortcut)
    w = plain.body[0]
    assert torch.allclose(plain(x), F.relu(x @ w.weight.T + w.bias))

    hw = _eval64(variants.create("highway_mlp", depth=3, width=8, image_size=2, gate_bias=-1.0)).blocks[0]
    assert isinstance(hw.combine, Gate) and torch.all(hw.combine.gate.proj.bias == -1.0)
    h = F.relu(hw.body[0](x))
    t = torch.sigmoid(hw.combine.gate.proj(x))
    assert torch.allclose(hw(x), t * h + (1 - t) * x)

    res = _eval64(variants.create("residual_mlp", depth=3, width=8, image_size=2)).blocks[0]
    lin, bn = res.body
    assert isinstance(res.combine, Add)
    assert torch.allclose(res(x), F.relu(x + bn(lin(x))))

    pre = _eval64(variants.create("preact_mlp", depth=3, width=8, image_size=2)).blocks[0]
    _, lin = pre.body
    assert torch.allclose(pre(x), x + lin(F.relu(pre.norm_in(x))))
    assert isinstance(pre.norm_in, nn.BatchNorm1d)


def test_preact_head_applies_last_activation() -> None:
    model = variants.create("preact_mlp", depth=2, norm="layer", activation="tanh", image_size=2)
    assert isinstance(model.head[0][0], nn.LayerNorm) and isinstance(model.head[0][1], nn.Tanh)
    assert isinstance(model.stem[1], nn.Linear)  # no activation after the first layer of a pre-act stack


@pytest.mark.parametrize("name", BASES)
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"depth": 0}, r"MLP depth must be an integer >= 1.*got 0"),
        ({"depth": 2.5}, "MLP depth must be an integer"),
        ({"activation": "gelu"}, r"activation must be one of \('relu', 'tanh'\)"),
        ({"norm": "group"}, r"norm must be one of \('none', 'batch', 'layer'\)"),
        ({"image_size": 0}, "image_size must be a positive integer"),
        ({"width": -3}, "width must be a positive integer"),
        ({"in_chans": 0}, "in_chans must be a positive integer"),
    ],
)
def test_invalid_arguments(name: str, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        variants.create(name, **kwargs)


@pytest.mark.parametrize("name", ["highway_mlp", "residual_mlp", "preact_mlp"])
def test_drop_path_linear_decay_and_eval_determinism(name: str) -> None:
    torch.manual_seed(0)
    model = variants.create(name, depth=5, drop_path_rate=0.4, image_size=4)
    assert [u.drop_path.drop_prob for u in model.blocks] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    x = torch.randn(4, 1, 4, 4)
    model.eval()
    assert torch.equal(model(x), model(x))
    with pytest.raises(ValueError, match=r"drop_path_rate must be in \[0, 1\)"):
        variants.create(name, drop_path_rate=1.5)


def test_residual_mlp_placement_label_is_post_activation() -> None:
    # act(x + norm(W·x)): the norm is inside the branch, so not the "post" of norm(x + F(x)).
    assert variants.describe("residual_mlp")["axes"]["placement"] == "post-activation"
    assert variants.describe("residual_mlp")["axes"]["placement"] == variants.describe("resnet")["axes"]["placement"]


@pytest.mark.parametrize(
    ("init", "std"), [("kaiming", math.sqrt(2 / 71)), ("xavier", math.sqrt(2 / (71 + 71))), ("normal", 0.02)]
)
def test_init_schemes(init: str, std: float) -> None:
    torch.manual_seed(0)
    model = variants.create("plain_mlp", depth=30, init=init)  # kaiming: He fan-in with the ReLU gain
    hidden = torch.cat([u.body[0].weight.flatten() for u in model.blocks])  # 29 layers of 71×71
    assert hidden.std().item() == pytest.approx(std, rel=0.02)


def test_init_keeps_gate_biases_and_validates() -> None:
    model = variants.create("highway_mlp", depth=4, init="xavier", gate_bias=-1.5)
    assert all(torch.all(u.combine.gate.proj.bias == -1.5) for u in model.blocks)
    for name in BASES:
        with pytest.raises(ValueError, match="unknown init 'glorot'; choose one of: kaiming, xavier, normal"):
            variants.create(name, init="glorot")
