"""Norm-free and scaled residual nets (variants.normfree): ReZero, SkipInit, Fixup, LayerScale."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import variants
from variants.blocks import ResidualUnit
from variants.combinators import Scaled
from variants.layers import ScalarBias

NAMES = variants.list_variants(family="normfree")
BASES = ["rezero", "skipinit", "fixup", "layerscale"]



def units(model: nn.Module) -> list[ResidualUnit]:
    return [m for m in model.modules() if isinstance(m, ResidualUnit)]


def test_registered() -> None:
    assert set(BASES) | {"rezero_resnet56", "fixup_resnet110"} <= set(NAMES)


@pytest.mark.parametrize("name", BASES)
def test_in_chans_num_classes_bottleneck(name: str) -> None:
    model = variants.create(name, depth=11, block="bottleneck", in_chans=1, num_classes=3)
    assert model(torch.randn(2, 1, 9, 9)).shape == (2, 3)
    assert next(m for m in model.modules() if isinstance(m, nn.Conv2d)).in_channels == 1


@pytest.mark.parametrize("name", ["rezero", "skipinit", "fixup"])
def test_no_normalisation(name: str) -> None:
    model = variants.create(name, depth=20, shortcut="B")
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


@pytest.mark.parametrize("name", ["rezero", "skipinit"])
def test_scalar_skip_identity_at_init_and_formula(name: str) -> None:
    model = variants.create(name, depth=20).double()
    u = units(model)[1]
    assert isinstance(u.combine, Scaled) and u.combine.beta.shape == () and u.combine.beta.item() == 0.0
    x = torch.randn(2, 16, 5, 5, dtype=torch.float64)
    assert torch.equal(u(x), x)  # exactly the identity at init
    with torch.no_grad():
        u.combine.beta.fill_(0.7)
    c1, c2 = [m for m in u.body if isinstance(m, nn.Conv2d)]
    inner = x if name == "rezero" else F.relu(x)  # SkipInit keeps the pre-activation ReLU
    assert torch.allclose(u(x), x + 0.7 * c2(F.relu(c1(inner))))
    assert isinstance(u.body[0], nn.ReLU) == (name == "skipinit")
    custom = variants.create(name, depth=8, alpha_init=0.25)
    assert all(un.combine.beta.item() == 0.25 for un in units(custom))


def test_fixup_identity_at_init_and_zero_logits() -> None:
    model = variants.create("fixup_resnet110").double()
    u = units(model)[1]
    x = torch.rand(2, 16, 5, 5, dtype=torch.float64)  # non-negative: the output of the previous ReLU
    assert torch.equal(u(x), x)
    logits = model(torch.randn(2, 3, 8, 8, dtype=torch.float64))
    assert torch.equal(logits, torch.zeros(2, 10, dtype=torch.float64))  # classifier zero-initialised


def test_fixup_structure_and_scaling() -> None:
    torch.manual_seed(0)
    model = variants.create("fixup", depth=110)  # L = 54 branches of m = 2 convs
    scale = 54 ** (-1 / 2)
    for u in units(model):
        assert isinstance(u.combine, Scaled) and u.combine.beta.item() == 1.0
        # A scalar bias before each conv and each ReLU: the first one is shared with the shortcut only
        # where the shortcut subsamples (Zhang et al.'s `downsample(x + bias1a)`).
        projects = not isinstance(u.shortcut, nn.Identity)
        assert isinstance(u.shared, ScalarBias if projects else nn.Identity)
        assert sum(isinstance(m, ScalarBias) for m in u.body) == (3 if projects else 4)
        convs = [m for m in u.body if isinstance(m, nn.Conv2d)]
        assert torch.all(convs[-1].weight == 0)
    conv = next(m for m in units(model)[-1].body if isinstance(m, nn.Conv2d))  # 64·64·9 weights: tight std estimate
    he_std = math.sqrt(2 / (conv.out_channels * 9))
    assert conv.weight.std().item() == pytest.approx(he_std * scale, rel=0.03)
    bottleneck = variants.create("fixup", depth=29, block="bottleneck")  # L = 9, m = 3
    conv = [m for m in units(bottleneck)[-1].body if isinstance(m, nn.Conv2d)][1]  # the 3×3
    assert conv.weight.std().item() == pytest.approx(math.sqrt(2 / (64 * 9)) * 9 ** (-1 / 4), rel=0.05)
    assert torch.all(model.head[-1].weight == 0) and torch.all(model.head[-1].bias == 0)


def test_fixup_unit_formula_with_trained_scalars() -> None:
    model = variants.create("fixup", depth=14).double()
    u = units(model)[1]  # identity-shaped
    with torch.no_grad():
        for p in u.parameters():
            p.uniform_(-0.5, 0.5) if p.numel() == 1 else p.normal_(0, 0.1)
    assert isinstance(u.shared, nn.Identity)  # the identity shortcut sees the raw input (Zhang et al.'s code)
    b1a, c1, b1b, _, b2a, c2, b2b = u.body
    x = torch.randn(2, 16, 5, 5, dtype=torch.float64)
    branch = b2b(c2(b2a(F.relu(b1b(c1(b1a(x)))))))
    assert torch.allclose(u(x), F.relu(x + u.combine.beta * branch))
    down = units(model)[2]  # the first unit of stage 2 subsamples: bias1a feeds both paths there
    assert isinstance(down.shared, ScalarBias) and not isinstance(down.shortcut, nn.Identity)


@pytest.mark.parametrize(("depth", "eps"), [(20, 0.1), (44, 1e-5), (56, 1e-6)])
def test_layerscale_cait_init_rule(depth: int, eps: float) -> None:
    model = variants.create("layerscale", depth=depth)  # 9, 21 and 27 residual units
    for u in units(model):
        assert isinstance(u.combine, Scaled) and u.combine.beta.shape == (u.body[-1].out_channels,)
        assert torch.all(u.combine.beta == torch.tensor(eps))


def test_layerscale_formula_and_override() -> None:
    model = variants.create("layerscale", depth=20, init_scale=0.5).double().eval()
    u = units(model)[1]
    with torch.no_grad():
        u.combine.beta.copy_(torch.linspace(-1, 1, 16))
    (bn1, _), (c1, bn2, _, c2) = u.preact, u.body
    x = torch.randn(2, 16, 5, 5, dtype=torch.float64)
    f = c2(F.relu(bn2(c1(F.relu(bn1(x))))))
    assert torch.allclose(u(x), x + u.combine.beta.view(1, -1, 1, 1) * f)
    assert torch.all(units(model)[0].combine.beta == 0.5)


@pytest.mark.parametrize("name", BASES)
def test_drop_path_linear_decay_and_eval_determinism(name: str) -> None:
    torch.manual_seed(0)
    model = variants.create(name, depth=20, drop_path_rate=0.9)
    assert [u.drop_path.drop_prob for u in units(model)] == pytest.approx([0.9 * (i + 1) / 9 for i in range(9)])
    x = torch.randn(2, 3, 8, 8)
    model.eval()
    assert torch.equal(model(x), model(x))


PAPER_INITS = {"rezero": "rezero", "skipinit": "skipinit", "fixup": "fixup"}


@pytest.mark.parametrize("name", [n for n in NAMES if variants.describe(n)["defaults"].get("init") in PAPER_INITS])
def test_paper_inits_are_pinned(name: str) -> None:
    """ReZero, SkipInit and Fixup *are* initialisations: describe() says so and other schemes are refused."""
    d = variants.describe(name)
    scheme = d["fixed"]["init"]
    assert d["init"] == scheme and d["init_pinned"] is True
    with pytest.raises(ValueError, match=f"init='kaiming' \\(preset fixes init='{scheme}'\\); variant '{scheme}' "
                                         "itself fixes init"):
        variants.create(name, init="kaiming")


def test_pinned_variants_cover_the_three_papers() -> None:
    pinned = {variants.describe(n)["fixed"]["init"] for n in NAMES if variants.describe(n)["init_pinned"]}
    assert pinned == set(PAPER_INITS.values())
    assert not variants.describe("layerscale")["init_pinned"]


@pytest.mark.parametrize("name", ["rezero", "skipinit", "fixup"])
def test_builder_refuses_another_scheme(name: str) -> None:
    from variants import normfree

    with pytest.raises(ValueError, match=f"initialisation is its paper's own scheme: init must be '{name}', "
                                         "got 'xavier'"):
        getattr(normfree, name)(variants.CifarSpec(depth=8, init="xavier"))


def test_layerscale_takes_any_scheme_and_keeps_its_scale() -> None:
    torch.manual_seed(0)
    model = variants.create("layerscale", depth=20, init="xavier", init_scale=0.3)
    conv = next(m for m in units(model)[6].body if isinstance(m, nn.Conv2d))  # stage 3's first conv, 3×3
    assert conv.weight.shape == (64, 32, 3, 3)
    assert conv.weight.std().item() == pytest.approx(math.sqrt(2 / (288 + 576)), rel=0.03)
    assert all(torch.all(u.combine.beta == 0.3) for u in units(model))
    with pytest.raises(ValueError, match="unknown init 'fixup'; choose one of: kaiming, xavier, normal"):
        variants.create("layerscale", init="fixup")
