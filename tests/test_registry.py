"""The registry contract of DESIGN.md: register, list_variants, create, describe, and their errors."""

from __future__ import annotations

import pytest
import torch
from _nets import SHAPE_KEYS, code_path, code_paths, sample_input
from torch import nn

import variants
from variants import registry


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> dict[str, registry.VariantSpec]:
    table: dict[str, registry.VariantSpec] = {}
    monkeypatch.setattr(registry, "_REGISTRY", table)

    @registry.register("toy", family="toy", paper="none", axes={"combinator": "add"})
    def toy(depth: int = 2, width: int = 4, num_classes: int = 3, in_chans: int = 1) -> nn.Module:
        if depth < 1:
            raise ValueError(f"toy depth must be >= 1, got {depth}")
        return nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)], nn.Linear(width, num_classes))

    registry.register_preset("toy5", "toy", depth=5, paper="toy paper, Table 1")
    return table


def test_list_and_pattern(fresh_registry: dict) -> None:
    assert registry.list_variants() == ["toy", "toy5"]
    assert registry.list_variants("toy?") == ["toy5"]
    assert registry.list_variants("nothing*") == []


def test_create_uses_defaults_and_overrides(fresh_registry: dict) -> None:
    m = registry.create("toy", width=6)
    assert len(m) == 3 and m[0].in_features == 6
    assert len(registry.create("toy5")) == 6


def test_preset_pins_its_values(fresh_registry: dict) -> None:
    assert len(registry.create("toy5", depth=5)) == 6  # same value: fine
    with pytest.raises(
        ValueError, match=r"conflicting argument\(s\) for preset 'toy5': depth=7 \(preset fixes depth=5\)"
    ):
        registry.create("toy5", depth=7)


def test_unknown_kwarg_raises_listing_accepted(fresh_registry: dict) -> None:
    with pytest.raises(ValueError, match=r"takes no keyword argument\(s\) \['widht'\]; it accepts: depth, in_chans"):
        registry.create("toy", widht=3)


def test_unknown_name_suggests_close_matches(fresh_registry: dict) -> None:
    with pytest.raises(ValueError, match=r"unknown variant 'toyy'; did you mean toy"):
        registry.create("toyy")
    with pytest.raises(ValueError, match="run `python -m bench list`"):
        registry.describe("zzzzzz")


def test_duplicate_registration_raises(fresh_registry: dict) -> None:
    with pytest.raises(ValueError, match="'toy' is already registered"):
        registry.register("toy", family="toy", paper="x")(lambda: nn.Identity())
    with pytest.raises(ValueError, match="already registered"):
        registry.register_preset("toy5", "toy", depth=5)


def test_preset_with_unknown_kwarg_raises(fresh_registry: dict) -> None:
    with pytest.raises(ValueError, match="takes no keyword"):
        registry.register_preset("toy9", "toy", layers=9)


def test_timm_prefix_is_reserved(fresh_registry: dict) -> None:
    with pytest.raises(ValueError, match="reserved for timm"):
        registry.register("timm:mine", family="x", paper="x")(lambda: nn.Identity())


def test_describe(fresh_registry: dict) -> None:
    d = registry.describe("toy5")
    assert d["family"] == "toy" and d["paper"] == "toy paper, Table 1"
    assert d["defaults"] == {"depth": 5, "width": 4, "num_classes": 3, "in_chans": 1}
    assert d["fixed"] == {"depth": 5} and d["axes"] == {"combinator": "add"}
    assert d["init"] is None and d["init_pinned"] is False  # the toy builder takes no init


@pytest.fixture
def init_registry(fresh_registry: dict) -> dict[str, registry.VariantSpec]:
    def net(depth: int = 2, init: str = "kaiming") -> nn.Module:
        return nn.Sequential(*[nn.Linear(2, 2) for _ in range(depth)])

    registry.register("free", family="toy", paper="p")(net)
    registry.register_preset("free3", "free", depth=3)
    registry.register("paper_init", family="toy", paper="p", init="fixup")(net)
    registry.register_preset("paper_init3", "paper_init", depth=3)
    return fresh_registry


def test_describe_reports_the_init_and_whether_it_is_pinned(init_registry: dict) -> None:
    summary = {n: (registry.describe(n)["init"], registry.describe(n)["init_pinned"]) for n in init_registry}
    # toy's builder takes no init: it gets the scheme its family's builders share (free's), drawn by the registry
    assert summary == {"toy": ("kaiming", False), "toy5": ("kaiming", False), "free": ("kaiming", False),
                       "free3": ("kaiming", False), "paper_init": ("fixup", True), "paper_init3": ("fixup", True)}
    assert registry.describe("timm:resnet18")["init"] is None


def test_conflict_hint_names_who_fixes_the_value(init_registry: dict) -> None:
    with pytest.raises(ValueError, match=r"depth=4 \(preset fixes depth=3\); use the base variant 'free' instead"):
        registry.create("free3", depth=4)
    for name in ("paper_init", "paper_init3"):
        with pytest.raises(ValueError, match=r"init='xavier' \(preset fixes init='fixup'\); variant 'paper_init' "
                                             r"itself fixes init$"):
            registry.create(name, init="xavier")
    assert len(registry.create("paper_init3", init="fixup")) == 3


def test_builder_errors_propagate(fresh_registry: dict) -> None:
    with pytest.raises(ValueError, match="toy depth must be >= 1, got 0"):
        registry.create("toy", depth=0)


def test_timm_models_through_the_registry() -> None:
    m = registry.create("timm:resnet18", num_classes=7, in_chans=1)
    assert m(torch.randn(2, 1, 32, 32)).shape == (2, 7)
    assert registry.describe("timm:resnet18")["family"] == "timm"
    with pytest.raises(ValueError, match=r"unknown timm model 'resnet18x'; did you mean timm:resnet18"):
        registry.create("timm:resnet18x")
    with pytest.raises(ValueError, match="timm models have a fixed depth"):
        registry.create("timm:resnet18", depth=20)


def test_every_registered_variant_is_described_and_covered() -> None:
    """Each name cites its paper and its point on the three axes; each family has its own test file of formulas."""

    families = set()
    for name in variants.list_variants():
        d = variants.describe(name)
        families.add(d["family"])
        assert d["paper"], name
        assert {"combinator", "placement", "body"} <= set(d["axes"]), name
        assert "num_classes" in d["defaults"] or "vocab_size" in d["defaults"], name
    covered = {"plain", "resnet", "highway", "preact"}  # test_cifar.py
    covered |= {"densenet", "resnet_imagenet", "mlp", "normfree", "transformer"}  # their own files
    covered |= {"wrn", "resnext"}  # test_wide.py
    covered |= {"convnext", "nfnet", "repvgg", "airbench"}  # test_variants_convnets.py
    assert families == covered


REGISTERED = variants.list_variants()
PATHS = code_paths()  # one name per builder, classes and non-size arguments: the smallest of each
BIG = 3_000_000  # parameters above which a forward and backward at 8-32 pixels takes seconds on a CPU core
# The code paths whose smallest name is above BIG, each trained as a stand-in that runs the same code at a smaller
# size (same builder, same classes, same non-size arguments: checked below); their own sizes are pinned by the
# parameter-count tests and built on the meta device by test_every_name_builds_on_the_meta_device.
STAND_INS: dict[str, tuple[str, dict[str, object]]] = {
    "convnext_imagenet": ("convnext_imagenet", {"depths": (1, 1, 1, 1), "dims": (8, 16, 32, 64)}),
    "gpt2_small": ("preln", {"init": "gpt2"}),  # gpt2_small pins GPT-2's size: Pre-LN's builder under its init
    "nfnet_f0": ("nfnet_imagenet", {"depths": (1, 1, 1, 1)}),
    "plain18_imagenet": ("plain_imagenet", {"depth": 18, "width": 8}),
    "repvgg_a0": ("repvgg_imagenet", {"multipliers": (0.25, 0.25)}),
    "resnet18": ("resnet_imagenet", {"depth": 18, "width": 8}),
    "resnet18_a": ("resnet_imagenet", {"depth": 18, "width": 8, "shortcut": "A"}),
    "resnet50": ("resnet_imagenet", {"width": 8}),
    "resnet_imagenet_a": ("resnet_imagenet", {"width": 8, "shortcut": "A"}),
    "resnext": ("resnext", {"cardinality": 2, "bottleneck_width": 4}),
    "wrn40_4": ("wrn", {"depth": 40, "widen_factor": 1}),
}


def test_the_stand_ins_run_the_code_of_the_big_paths() -> None:
    assert sorted(STAND_INS) == sorted(n for n in PATHS if variants.describe(n)["params"] > BIG)
    for name, (stand_in, kwargs) in STAND_INS.items():
        with torch.device("meta"):
            model = variants.create(stand_in, **kwargs)
        assert registry._REGISTRY[stand_in].builder is registry._REGISTRY[name].builder, name
        assert registry.derive_anatomy(model) == registry.anatomy(name), name
        own = {**variants.describe(stand_in)["defaults"], **kwargs}
        assert {k: v for k, v in own.items() if k not in SHAPE_KEYS} == {
            k: v for k, v in variants.describe(name)["defaults"].items() if k not in SHAPE_KEYS}, name
        # nfnet_imagenet has no width to shrink: one block per stage is its smallest form (24.9M, under a second)
        assert sum(p.numel() for p in model.parameters()) <= min(BIG, variants.describe(name)["params"] // 2) or \
            stand_in == "nfnet_imagenet", name


def test_the_code_paths_drop_only_aliases_at_other_sizes() -> None:
    """resnet20 stands for resnet56 and resnet1202; the bottleneck ImageNet ResNets are their own path."""
    assert {"resnet20", "resnet18", "resnet50", "preact_resnet164", "densenet_bc100_k12", "attn_res_block",
            "fixup", "highway20"} <= set(PATHS)
    assert not {"resnet56", "resnet1202", "resnet101", "convnext_t", "wrn28_10", "densenet40_k12"} & set(PATHS)
    assert {code_path(n) for n in REGISTERED} == {code_path(n) for n in PATHS}


@pytest.mark.parametrize("name", PATHS)
def test_every_code_path_trains(name: str) -> None:
    """Every registered code path, shipped or not: a forward on its family's input gives one finite output per
    class (token), and one backward gives every parameter a finite gradient, not all zero."""
    stand_in, kwargs = STAND_INS.get(name, (name, {}))
    torch.manual_seed(0)
    model = variants.create(stand_in, **kwargs).train()
    x = sample_input(stand_in, **kwargs)
    y = model(x)
    d = variants.describe(stand_in)
    classes = d["defaults"].get("num_classes", d["defaults"].get("vocab_size"))
    assert y.shape == (*x.shape[: 2 if d["family"] == "transformer" else 1], classes)
    assert torch.isfinite(y).all()
    (y.float() * torch.randn(y.shape)).sum().backward()  # nonzero d loss / d y even where y starts at 0 (Fixup)
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads), name
    assert any(g.abs().sum() > 0 for g in grads), name


def test_axes_are_derived_from_the_units_and_combinators() -> None:
    """No label typed by hand: each axis is what the built model holds."""
    assert variants.describe("resnet")["axes"] == {"combinator": "add", "placement": "post-activation", "body": "conv",
                                                   "norm": "batchnorm"}
    assert variants.describe("plain")["axes"]["combinator"] == "none"
    assert variants.describe("preact")["axes"]["placement"] == "pre"
    assert variants.describe("highway")["axes"] == {"combinator": "gate", "placement": "none", "body": "conv",
                                                    "norm": "batchnorm"}
    assert variants.describe("densenet")["axes"] == {"combinator": "concat", "placement": "pre", "body": "conv",
                                                     "norm": "batchnorm"}
    assert variants.describe("fixup")["axes"]["norm"] == "none"  # no normalisation at all
    # The MLP that computes act(x + norm(Wx)) is post-activation (issue #9 found it hand-labelled "post").
    assert variants.describe("residual_mlp")["axes"]["placement"] == "post-activation"
    assert variants.describe("postln")["axes"] == {"combinator": "add", "placement": "post", "body": "attention+ffn",
                                                   "norm": "layernorm"}
    assert variants.describe("mixln")["axes"]["placement"] == "post, pre"  # Post-LN layers first, then Pre-LN
    assert variants.describe("deepnorm")["axes"]["combinator"] == "scaled"


def test_derive_axes_on_a_hand_made_model() -> None:
    class Mine(variants.Combinator):
        def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
            return x - fx

    class Labelled(Mine):
        axis = "subtract"

    model = nn.Sequential(variants.PreNorm(nn.Linear(2, 2), Mine(), lambda: nn.LayerNorm(2)),
                          variants.ResidualUnit(nn.Linear(2, 2), Labelled()))
    assert registry.derive_axes(model) == {"combinator": "Mine, subtract", "placement": "pre, none", "body": "mlp",
                                           "norm": "layernorm"}
    assert registry.derive_axes(nn.Linear(2, 2)) == {}  # no residual join at all


def test_spec_builders_take_the_spec_fields_as_keywords(fresh_registry: dict) -> None:
    @registry.register("speccy", family="toy", paper="none", spec=variants.CifarSpec(depth=8))
    def speccy(spec: variants.CifarSpec, *, scale: float = 1.0) -> nn.Module:
        return variants.build_cifar(spec, lambda s: variants.PostActBasic(s.cin, s.width, s.stride))

    assert registry.describe("speccy")["defaults"] == {
        "depth": 8, "width": 16, "num_classes": 10, "in_chans": 3, "block": "basic", "shortcut": "A",
        "drop_path_rate": 0.0, "init": "kaiming", "scale": 1.0}
    assert registry.create("speccy", width=4, num_classes=3)(torch.randn(1, 3, 8, 8)).shape == (1, 3)
    with pytest.raises(ValueError, match="shortcut must be one of"):  # the spec validates its fields
        registry.create("speccy", shortcut="D")
    with pytest.raises(ValueError, match=r"takes no keyword argument\(s\) \['widht'\]"):
        registry.create("speccy", widht=4)
    with pytest.raises(TypeError, match="spec must be a dataclass instance"):
        registry.register("bad", family="toy", paper="none", spec=variants.CifarSpec)


CIFAR_BUILDERS = [n for n in REGISTERED
                  if isinstance(registry._REGISTRY[n].spec, variants.CifarSpec) and registry._REGISTRY[n].base is None]


@pytest.mark.parametrize("name", CIFAR_BUILDERS)
def test_every_cifar_builder_validates_its_spec_before_building(name: str) -> None:
    for kw, message in [({"shortcut": "Z"}, r"shortcut must be one of \('A', 'B', 'C'\)"),
                        ({"block": "wide"}, r"block must be one of \('basic', 'bottleneck'\)"),
                        ({"num_classes": 0}, "num_classes must be a positive integer"),
                        ({"in_chans": -1}, "in_chans must be a positive integer"),
                        ({"width": 0}, "width must be a positive integer"),
                        ({"drop_path_rate": 1.0}, r"drop_path_rate must be in \[0, 1\)")]:
        with pytest.raises(ValueError, match=message):
            variants.create(name, **kw)


HE_DEPTH_RULE = ["plain", "resnet", "highway", "preact", "rezero", "skipinit", "fixup", "layerscale"]


@pytest.mark.parametrize("name", HE_DEPTH_RULE)
def test_he_cifar_builders_enforce_the_depth_rule(name: str) -> None:
    """He 2015 §4.2: 6n+2 with basic units, 9n+2 with bottlenecks (wrn and resnext have their own rules)."""
    with pytest.raises(ValueError, match=r"depth must be 6n\+2 \(basic\).*got 21"):
        variants.create(name, depth=21)
    with pytest.raises(ValueError, match=r"depth must be 9n\+2 \(bottleneck\).*got 30"):
        variants.create(name, depth=30, block="bottleneck")
    with pytest.raises(ValueError, match=r"6n\+2"):
        variants.create(name, depth=2)


def test_cifar_spec_validates_every_field() -> None:
    for kw, message in [({"width": 0}, "width must be a positive integer"),
                        ({"num_classes": 1.5}, "num_classes must be a positive integer"),
                        ({"block": "wide"}, "block must be one of"),
                        ({"drop_path_rate": 1.0}, r"drop_path_rate must be in \[0, 1\)"),
                        ({"init": 3}, "init must be the name of a scheme")]:
        with pytest.raises(ValueError, match=message):
            variants.CifarSpec(**kw)
    with pytest.raises(TypeError):
        variants.CifarSpec(56)  # keyword-only


def test_list_by_family(fresh_registry: dict) -> None:
    assert registry.list_variants(family="toy") == ["toy", "toy5"]
    assert registry.list_variants("toy?", family="toy") == ["toy5"]
    assert registry.list_variants(family="other") == []


@pytest.mark.parametrize("name", REGISTERED)
def test_every_name_builds_on_the_meta_device(name: str) -> None:
    """Every registered name at its own size, the big presets too (shapes only: cheap even for resnet1202): its
    init is exposed (the harness records ``{**describe(name)["defaults"], **overrides}.get("init")``) and its
    parameter count is the one it describes."""
    d = variants.describe(name)
    assert isinstance(d["init"], str) and d["init"] == d["defaults"]["init"]
    assert d["init_pinned"] == ("init" in d["fixed"])
    with torch.device("meta"):
        model = variants.create(name, init=d["init"])
    assert sum(p.numel() for p in model.parameters()) == d["params"]


@pytest.mark.parametrize("name", PATHS)
def test_every_code_path_gives_one_output_per_class_on_the_meta_device(name: str) -> None:
    """A forward on the meta device of each code path (an alias at another size runs the same code: resnet1202's
    forward alone would run torch's Python BatchNorm decomposition 2,400 times) gives one output per class
    (token)."""
    d = variants.describe(name)
    with torch.device("meta"):
        x = sample_input(name)
        y = variants.create(name)(x)
    classes = d["defaults"].get("num_classes", d["defaults"].get("vocab_size"))
    assert y.shape == (*x.shape[: 2 if d["family"] == "transformer" else 1], classes)


@pytest.mark.parametrize("name", [n for n in PATHS if not variants.describe(n)["init_pinned"]])
def test_every_free_variant_builds_under_xavier(name: str) -> None:
    with torch.device("meta"):
        model = variants.create(name, init="xavier")
    assert sum(p.numel() for p in model.parameters()) > 0


@pytest.mark.parametrize("name", [n for n in REGISTERED if variants.describe(n)["init_pinned"]])
def test_pinned_inits_refuse_other_schemes(name: str) -> None:
    scheme = variants.describe(name)["init"]
    other = "kaiming" if scheme != "kaiming" else "xavier"
    with pytest.raises(ValueError, match=f"preset fixes init='{scheme}'"):
        variants.create(name, init=other)
