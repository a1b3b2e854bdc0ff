"""The modern CNN residual blocks: ConvNeXt, NFNet, RepVGG and airbench's net. Each unit against timm's block on
copied weights (float64), the ImageNet presets' parameter counts against timm's models (ConvNeXt-T also logit for
logit), RepVGG's fused net against its training-time net, NFNet's α/β schedule and adaptive gradient clipping by
hand, airbench's identity init, the CIFAR versions' depth rules and plain forms."""

from __future__ import annotations

import math
from functools import partial

import pytest
import timm
import torch
import torch.nn.functional as F
from _nets import randomize_bn, randomized
from timm.layers import ScaledStdConv2d as TheirConv
from timm.layers import get_attn
from timm.models.byobnet import RepVggBlock
from timm.models.convnext import ConvNeXtBlock
from timm.models.nfnet import NormFreeBlock, _nonlin_gamma, act_with_gamma
from torch import nn

import variants
from variants.airbench import AirbenchLayer
from variants.combinators import NoShortcut, Scaled
from variants.convnext import ConvNeXtUnit, layer_scale
from variants.nfnet import AGC_EPS, NFBlock, ScaledStdConv2d, adaptive_gradient_clipping
from variants.repvgg import FusedRepVGG, RepVGGUnit, fuse

G = torch.Generator().manual_seed(0)


def timm_model(name: str) -> nn.Module:
    """timm's model, built on the meta device where that timm can (1.0.3's NFNet and ByobNet read a tensor's values
    while building: those are built on the CPU)."""
    try:
        with torch.device("meta"):
            return timm.create_model(name)
    except NotImplementedError:
        return timm.create_model(name)


def params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(("ours", "theirs"), [
    ("convnext_t", "convnext_tiny"), ("convnext_s", "convnext_small"), ("convnext_b", "convnext_base"),
    ("nfnet_f0", "dm_nfnet_f0"), ("nfnet_f1", "dm_nfnet_f1"), ("nfnet_f2", "dm_nfnet_f2"),
    ("repvgg_a0", "repvgg_a0"), ("repvgg_a1", "repvgg_a1"), ("repvgg_a2", "repvgg_a2"), ("repvgg_b0", "repvgg_b0"),
])
def test_imagenet_presets_have_timms_parameter_counts(ours: str, theirs: str) -> None:
    with torch.device("meta"):
        mine = params(variants.create(ours))
    assert mine == params(timm_model(theirs))
    assert variants.describe(ours)["params"] == {"convnext_t": 28_589_128, "nfnet_f0": 71_489_284,
                                                 "repvgg_a0": 9_108_968}.get(ours, variants.describe(ours)["params"])


def test_convnext_unit_matches_timms_block() -> None:
    """``x + γ ⊙ PW₂(GELU(PW₁(LN(DW₇ₓ₇(x)))))`` (Liu et al. 2022, Fig. 4) against timm's ``ConvNeXtBlock``."""
    ours = randomized(ConvNeXtUnit(8, layer_scale(8)))
    theirs = ConvNeXtBlock(8).double().eval()
    body, join = ours.body, ours.combine
    assert isinstance(join, Scaled)
    with torch.no_grad():
        theirs.conv_dw.load_state_dict(body.conv_dw.state_dict())
        theirs.norm.load_state_dict(body.norm.state_dict())
        theirs.mlp.fc1.load_state_dict(body.fc1.state_dict())
        theirs.mlp.fc2.load_state_dict(body.fc2.state_dict())
        theirs.gamma.copy_(join.beta)
    x = torch.randn(2, 8, 6, 6, generator=G, dtype=torch.float64)
    torch.testing.assert_close(ours(x), theirs(x))


def test_convnext_t_is_timms_logit_for_logit() -> None:
    """The whole ConvNeXt-T: timm's state dict loads into ours with its names mapped, and the logits agree."""
    torch.manual_seed(0)
    theirs = timm.create_model("convnext_tiny").eval()
    ours = variants.create("convnext_t").eval()
    mapped = {}
    for key, value in theirs.state_dict().items():
        k = key.replace("stem.0", "stem.0").replace("head.norm", "head.2").replace("head.fc", "head.3")
        k = k.replace(".mlp.fc", ".body.fc").replace(".conv_dw", ".body.conv_dw").replace(".norm.", ".body.norm.")
        k = k.replace(".gamma", ".combine.beta")
        if ".downsample." in k:  # timm: stages.s.downsample.{0,1}; ours: the stage's first unit's `down`
            k = k.replace(".downsample.", ".0.down.")
        k = k.replace(".blocks.", ".")
        mapped[k.replace("head.2", "head.2").replace("stem.1.body.", "stem.1.")] = value
    missing, unexpected = ours.load_state_dict(mapped, strict=False)
    assert not missing and not unexpected, (missing[:4], unexpected[:4])
    x = torch.randn(2, 3, 64, 64, generator=G)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), rtol=1e-4, atol=1e-4)


def test_convnext_cifar_and_its_plain_form() -> None:
    model = variants.create("convnext_cifar", depth=11)
    units = [m for m in model.modules() if isinstance(m, ConvNeXtUnit)]
    assert len(units) == 3 and all(isinstance(u.combine, Scaled) for u in units)
    assert all((u.combine.beta == 1e-6).all() for u in units)  # γ₀ = 1e-6
    assert [isinstance(u.down, nn.Identity) for u in units] == [True, False, False]  # stages 2, 3 downsample
    plain = variants.create("convnext_cifar_plain", depth=11)
    assert all(isinstance(u.combine, NoShortcut) for u in plain.modules() if isinstance(u, ConvNeXtUnit))
    assert variants.describe("convnext_cifar_plain")["axes"]["combinator"] == "none"
    with pytest.raises(ValueError, match=r"CIFAR ConvNeXt depth must be 9n\+2 with n >= 1.*got 12"):
        variants.create("convnext_cifar", depth=12)
    with pytest.raises(ValueError, match="block and shortcut must keep their defaults"):
        variants.create("convnext_cifar", block="bottleneck", depth=11)


def _their_nf_block(ours: NFBlock, stride: int, groups: int) -> nn.Module:
    """timm's NormFreeBlock of dm_nfnet (SE after the last conv, skipinit, GELU with its γ) with ours's weights."""
    conv = ours.body[0]
    cin, mid = conv.in_channels, conv.out_channels
    cout = ours.body[6].out_channels
    theirs = NormFreeBlock(
        in_chs=cin, out_chs=cout, alpha=ours.combine.alpha, beta=ours.beta, stride=stride, group_size=mid // groups,
        bottle_ratio=0.5, reg=False, extra_conv=True, skipinit=True, attn_layer=partial(get_attn("se"), rd_ratio=0.5),
        attn_gain=2.0, act_layer=act_with_gamma("gelu", gamma=_nonlin_gamma["gelu"]),
        conv_layer=partial(TheirConv, eps=1e-5)).double()
    names = {"body.0": "conv1", "body.2": "conv2", "body.4": "conv2b", "body.6": "conv3", "body.7": "attn_last",
             "shortcut.1": "downsample.conv", "combine.skipinit_gain": "skipinit_gain"}
    state = {}
    for key, value in ours.state_dict().items():
        for a, b in names.items():
            if key.startswith(a):
                state[b + key[len(a):]] = value
    theirs.load_state_dict(state, strict=True)
    return theirs.eval()


@pytest.mark.parametrize(("cin", "cout", "groups"), [(8, 16, 2), (16, 16, 1)])
def test_nf_unit_matches_timms_block(cin: int, cout: int, groups: int) -> None:
    """``y = s + α·g·F(act(x)·β)`` (Brock et al. 2021) against timm's ``NormFreeBlock`` (stride 1: "SAME" padding is
    symmetric there), with a projection shortcut and without."""
    ours = randomized(NFBlock(cin, cout, 1, 0.7, group_size=cout // 2 // groups))
    theirs = _their_nf_block(ours, 1, groups)
    x = torch.randn(2, cin, 5, 5, generator=G, dtype=torch.float64)
    torch.testing.assert_close(ours(x), theirs(x))


def test_nf_beta_schedule_is_timms() -> None:
    """β = 1/√Var: Var starts at 1, + α² per unit, back to 1 + α² after each stage's first unit."""
    with torch.device("meta"):
        ours = [u.beta for u in variants.create("nfnet_f0").modules() if isinstance(u, NFBlock)]
    theirs = [b.beta for s in timm_model("dm_nfnet_f0").stages for b in s]
    assert ours == pytest.approx(theirs, rel=1e-12)
    assert ours[:4] == pytest.approx([1.0, (1 + 0.04) ** -0.5, (1 + 0.04) ** -0.5, (1 + 0.08) ** -0.5])


def test_scaled_weight_standardisation() -> None:
    """Ŵ = g·(W − μ)/√(N·(σ² + ε)), per output channel over its fan-in N."""
    conv = randomized(ScaledStdConv2d(3, 4, 3))
    w = conv.weight.flatten(1)
    n = w.shape[1]
    want = conv.gain.flatten(1) * (w - w.mean(1, keepdim=True)) / torch.sqrt(n * (w.var(1, unbiased=False,
                                                                                      keepdim=True) + conv.eps))
    torch.testing.assert_close(conv.standardized().flatten(1), want)


def test_adaptive_gradient_clipping() -> None:
    """§4.1: each row's gradient scaled to λ·max(‖W_row‖, 10⁻³) where it exceeds it; the rest (and the skipped
    module) untouched."""
    lin, head = nn.Linear(3, 4), nn.Linear(4, 2)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1.0, 0, 0], [0, 0, 0], [3, 4, 0], [0, 0.1, 0]]))
    model = nn.Sequential(lin, head)
    adaptive_gradient_clipping(model, 0.5, skip=head)
    x = torch.randn(5, 3, generator=G)
    out = model(x)
    grads = torch.autograd.grad(out.pow(2).sum() * 100, [lin.weight, head.weight], retain_graph=True)
    before = {"lin": grads[0], "head": grads[1]}
    out.pow(2).sum().mul(100).backward()
    w_norm = lin.weight.detach().norm(dim=1, keepdim=True).clamp_min(AGC_EPS)
    g_norm = before["lin"].norm(dim=1, keepdim=True)
    want = torch.where(g_norm > 0.5 * w_norm, before["lin"] * 0.5 * w_norm / g_norm, before["lin"])
    torch.testing.assert_close(lin.weight.grad, want)
    assert (lin.weight.grad.norm(dim=1) <= 0.5 * w_norm.flatten() + 1e-6).all()
    torch.testing.assert_close(head.weight.grad, before["head"])


def test_nfnet_cifar() -> None:
    model = variants.create("nfnet_cifar", depth=14)
    units = [m for m in model.modules() if isinstance(m, NFBlock)]
    assert len(units) == 3 and variants.describe("nfnet_cifar")["axes"]["norm"] == "none"
    assert all(u.combine.skipinit_gain.item() == 0.0 for u in units)  # SkipInit: the branches start silent
    with pytest.raises(ValueError, match=r"CIFAR NFNet depth must be 12n\+2"):
        variants.create("nfnet_cifar", depth=20)
    with pytest.raises(ValueError, match=r"clipping \(AGC's λ; 0: no clipping\) must be >= 0, got -1"):
        variants.create("nfnet_cifar", clipping=-1)
    free = variants.create("nfnet_cifar", depth=14, clipping=0)
    assert not any(p._post_accumulate_grad_hooks for p in free.parameters())


def test_repvgg_unit_matches_timms_block() -> None:
    """``ReLU(BN(x) + BN(W₃ * x) + BN(W₁ * x))`` (Ding et al. 2021, Fig. 2) against timm's ``RepVggBlock``."""
    ours = randomize_bn(randomized(RepVGGUnit(6, 6, 1)))
    theirs = RepVggBlock(6, 6).double().eval()
    body = ours.body
    state = {"conv_kxk.conv.weight": body.conv3[0].weight, "conv_1x1.conv.weight": body.conv1[0].weight}
    for ours_bn, name in ((body.conv3[1], "conv_kxk.bn"), (body.conv1[1], "conv_1x1.bn"), (ours.shortcut, "identity")):
        for k, v in ours_bn.state_dict().items():
            state[f"{name}.{k}"] = v
    theirs.load_state_dict(state, strict=True)
    x = torch.randn(2, 6, 5, 5, generator=G, dtype=torch.float64)
    torch.testing.assert_close(ours(x), theirs(x))


def _trained_bn(model: nn.Module) -> nn.Module:
    """BN statistics of a few training batches, then eval mode: what a deployed net fuses."""
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(8, 3, 16, 16, generator=G))
    return model.eval()


@pytest.mark.parametrize("branches", ["3x3+1x1+id", "3x3+1x1", "3x3+id", "3x3"])
def test_repvgg_fused_equals_training_net(branches: str) -> None:
    """§3.3: the re-parameterised net (one 3×3 conv and bias per unit, no shortcut) computes the same function:
    within 1e-5 in float32 on trained BN statistics, to rounding in float64 on random ones."""
    torch.manual_seed(0)
    model = _trained_bn(variants.create("repvgg_cifar", depth=20, branches=branches))
    fused = fuse(model)
    assert not any(isinstance(m, RepVGGUnit) for m in fused.modules())
    assert variants.derive_axes(fused)["combinator"] == "none"  # plain
    x = torch.randn(4, 3, 16, 16, generator=G)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), model(x), rtol=1e-5, atol=1e-5)
    model64 = randomize_bn(model.double())
    with torch.no_grad():
        torch.testing.assert_close(fuse(model64)(x.double()), model64(x.double()), rtol=1e-10, atol=1e-10)


def test_repvgg_a0_fuses_too() -> None:
    torch.manual_seed(0)
    model = randomize_bn(variants.create("repvgg_a0")).eval()
    fused = fuse(model)
    assert sum(isinstance(m, FusedRepVGG) for m in fused.modules()) == 1 + 2 + 4 + 14 + 1
    x = torch.randn(1, 3, 32, 32, generator=G)
    with torch.no_grad():
        y = model(x)
        torch.testing.assert_close(fused(x), y, rtol=1e-4, atol=1e-4 * y.abs().max().item())


def test_repvgg_branches_and_depth() -> None:
    assert variants.describe("repvgg_cifar")["axes"]["combinator"] == "add, none"  # stage starts have no identity
    plain = variants.create("repvgg_plain", depth=11)
    assert all(isinstance(u.combine, NoShortcut) and u.body.conv1 is None for u in plain.modules()
               if isinstance(u, RepVGGUnit))
    with pytest.raises(ValueError, match=r"CIFAR RepVGG depth must be 3n\+2"):
        variants.create("repvgg_cifar", depth=21)
    with pytest.raises(ValueError, match=r"branches must be one of .*got '1x1'"):
        variants.create("repvgg_cifar", branches="1x1")


def test_airbench_is_airbench94() -> None:
    """Whitening 2×2 conv (24 channels), blocks at 64, 256, 256 of two layers, no shortcut, Dirac-initialised convs
    (the second conv of a block is the identity at init), BN without gain, logits / 9."""
    torch.manual_seed(0)
    model = variants.create("airbench94")
    layers = [m for m in model.modules() if isinstance(m, AirbenchLayer)]
    assert [(m.body[0].in_channels, m.body[0].out_channels) for m in layers] == [
        (24, 64), (64, 64), (64, 256), (256, 256), (256, 256), (256, 256)]
    assert all(isinstance(m.combine, NoShortcut) for m in layers)
    dirac = torch.zeros(64, 64, 3, 3)
    dirac[torch.arange(64), torch.arange(64), 1, 1] = 1
    assert torch.equal(layers[1].body[0].weight, dirac)
    assert torch.equal(layers[0].body[0].weight[:24], dirac[:24, :24])
    d = variants.describe("airbench94")
    assert d["axes"]["combinator"] == "none" and d["init_pinned"] and d["params"] == params(model)
    x = torch.randn(2, 3, 32, 32, generator=G)
    model.eval()
    with torch.no_grad():
        logits = model(x)
        features = model.head[:-1](model.blocks(model.whiten(x)))
        torch.testing.assert_close(logits, features @ model.head[-1].weight.T / 9)
    other = variants.create("airbench94", identity_init=False)
    assert not torch.equal(other.blocks[1].body[0].weight, dirac)
    with pytest.raises(ValueError, match=r"preset fixes init='airbench'|init must be 'airbench'"):
        variants.create("airbench94", init="xavier")


@pytest.mark.parametrize("name", ["convnext_cifar", "convnext_cifar_plain", "nfnet_cifar", "repvgg_cifar",
                                  "repvgg_plain", "ortho_preact"])
@pytest.mark.parametrize("init", ["kaiming", "xavier", "trunc_normal"])
def test_cifar_versions_take_every_init(name: str, init: str) -> None:
    torch.manual_seed(0)
    model = variants.create(name, depth={"nfnet_cifar": 14, "convnext_cifar": 11,
                                         "convnext_cifar_plain": 11}.get(name, 20), init=init)
    y = model(torch.randn(2, 3, 8, 8, generator=G))
    F.cross_entropy(y, torch.tensor([1, 2])).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    assert math.isfinite(y.sum().item())
