"""DenseNet (variants.densenet): concat shapes, layer formulas, memory-efficient equivalence, errors."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from _nets import randomize_bn
from torch import nn

import variants
from variants.combinators import Concat
from variants.densenet import DenseLayer

NAMES = variants.list_variants(family="densenet")



def layers(model: nn.Module) -> list[DenseLayer]:
    return [m for m in model.modules() if isinstance(m, DenseLayer)]


def test_in_chans_and_num_classes() -> None:
    model = variants.create("densenet", depth=10, in_chans=1, num_classes=4)
    assert model.stem.in_channels == 1
    assert model(torch.randn(2, 1, 9, 9)).shape == (2, 4)


def _concat_channels(name: str) -> list[tuple[int, int, int]]:
    model = variants.create(name)
    seen: list[tuple[int, int, int]] = []
    for m in model.modules():
        if isinstance(m, Concat):
            m.register_forward_hook(lambda mod, inp, out: seen.append((inp[0].shape[1], inp[1].shape[1], out.shape[1])))
    model(torch.randn(2, 3, 8, 8))
    return seen


def test_concat_shapes_densenet40() -> None:
    seen = _concat_channels("densenet40_k12")
    assert len(seen) == 36 and all(o == x + 12 and f == 12 for x, f, o in seen)
    # Blocks start at 16 (stem), then 160 and 304 (non-BC transitions keep the width); the net ends at 448.
    assert [seen[i][0] for i in (0, 12, 24)] == [16, 160, 304] and seen[-1][2] == 448


def test_concat_shapes_densenet_bc100() -> None:
    seen = _concat_channels("densenet_bc100_k12")
    assert len(seen) == 48 and all(f == 12 for _, f, _ in seen)
    # 2k = 24 stem channels; compression 0.5 halves 216 -> 108 and 300 -> 150; the net ends at 342.
    assert [seen[i][0] for i in (0, 16, 32)] == [24, 108, 150] and seen[-1][2] == 342


def _randomize(model: nn.Module) -> nn.Module:
    return randomize_bn(model).double().eval()


def test_dense_layer_formulas() -> None:
    x = torch.randn(2, 16, 5, 5, dtype=torch.float64)
    plain = _randomize(variants.create("densenet", depth=10))
    layer = layers(plain)[0]
    out, new = layer(x, [x])
    assert torch.allclose(new, layer.conv(F.relu(layer.norm(x))))
    assert torch.equal(out, torch.cat([x, new], 1))
    bc = _randomize(variants.create("densenet", depth=10, bc=True, growth_rate=8))
    layer = layers(bc)[0]
    x = torch.randn(2, 16, 5, 5, dtype=torch.float64)
    bn2, _, conv2, _ = layer.rest
    assert layer.conv.kernel_size == (1, 1) and layer.conv.out_channels == 32  # 4k bottleneck
    expected = conv2(F.relu(bn2(layer.conv(F.relu(layer.norm(x))))))
    assert torch.allclose(layer(x, [x])[1], expected)


def test_memory_efficient_matches_exactly() -> None:
    x = torch.randn(4, 3, 8, 8)
    results = []
    for efficient in (False, True):
        torch.manual_seed(0)
        model = variants.create("densenet", depth=16, bc=True, growth_rate=6, memory_efficient=efficient)
        y = model(x)
        y.square().sum().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        stats = [b.clone() for b in model.buffers()]
        results.append((y.detach(), grads, stats))
    (y0, g0, s0), (y1, g1, s1) = results
    assert torch.allclose(y0, y1, atol=1e-6)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(g0, g1, strict=True))
    # Recomputation must not update the BN running statistics a second time.
    assert all(torch.allclose(a.float(), b.float(), atol=1e-6) for a, b in zip(s0, s1, strict=True))


def test_memory_efficient_checkpoints() -> None:
    model = variants.create("densenet", depth=10, memory_efficient=True)
    layer = layers(model)[0]
    calls = []
    original = layer._concat_bn_relu_conv

    def counted(*features: torch.Tensor) -> torch.Tensor:
        calls.append(len(features))
        return original(*features)

    layer._concat_bn_relu_conv = counted
    model(torch.randn(2, 3, 8, 8)).sum().backward()
    assert calls == [1, 1]  # once forward, once recomputed in backward
    later = layers(model)[2]
    assert later(torch.randn(2, 40, 4, 4), [torch.randn(2, 16, 4, 4, requires_grad=True)] + [
        torch.randn(2, 12, 4, 4) for _ in range(2)])[0].shape == (2, 52, 4, 4)
    with torch.no_grad():
        model(torch.randn(2, 3, 8, 8))
    assert calls == [1, 1]  # no checkpointing without autograd


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"depth": 41}, r"DenseNet depth must be 3n\+4.*got 41"),
        ({"depth": 4}, r"3n\+4"),
        ({"depth": 44, "bc": True}, r"DenseNet-BC depth must be 6n\+4.*got 44"),
        ({"growth_rate": 0}, "growth_rate must be a positive integer"),
        ({"growth_rate": -12}, "growth_rate must be a positive integer"),
        ({"bc": "yes"}, "bc must be True or False"),
        ({"drop_rate": 1.0}, r"drop_rate must be in \[0, 1\)"),
        ({"drop_path_rate": -0.1}, r"drop_path_rate must be in \[0, 1\)"),
        ({"num_classes": 0}, "num_classes must be a positive integer"),
        ({"init": "fixup"}, "unknown init 'fixup'; choose one of: kaiming, xavier, normal"),
    ],
)
def test_invalid_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        variants.create("densenet", **kwargs)


@pytest.mark.parametrize(
    ("init", "std"),
    # The first dense layer's 3×3 conv, 16 -> 12 channels: fan-in 144, fan-out 108 (kaiming: He fan-out).
    [("kaiming", math.sqrt(2 / 108)), ("xavier", math.sqrt(2 / (144 + 108))), ("normal", 0.02)],
)
def test_init_schemes(init: str, std: float) -> None:
    torch.manual_seed(0)
    conv = layers(variants.create("densenet", depth=40, init=init))[0].conv
    assert conv.weight.shape == (12, 16, 3, 3)
    assert conv.weight.std().item() == pytest.approx(std, rel=0.06)  # 1728 weights: ~2% sampling error


def test_dropout_after_each_conv() -> None:
    model = variants.create("densenet", depth=16, bc=True, drop_rate=0.2)
    drops = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert len(drops) == len(convs) - 1 and all(d.p == 0.2 for d in drops)  # every conv but the stem


def test_drop_path_linear_decay_and_eval_determinism() -> None:
    torch.manual_seed(0)
    model = variants.create("densenet", depth=13, drop_path_rate=0.3)
    assert [m.drop_path.drop_prob for m in layers(model)] == pytest.approx([0.3 * (i + 1) / 9 for i in range(9)])
    x = torch.randn(4, 3, 8, 8)
    model.eval()
    assert torch.equal(model(x), model(x))
