"""The registry contract of DESIGN.md: register, list_variants, create, describe, and their errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

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
    """Each name cites its paper and its point on the three axes; each family has its own test file
    that parametrises forward/backward checks over all of its names (test_<family>.py)."""
    import variants

    families = set()
    for name in variants.list_variants():
        d = variants.describe(name)
        families.add(d["family"])
        assert d["paper"], name
        assert {"combinator", "placement", "body"} <= set(d["axes"]), name
        assert "num_classes" in d["defaults"] or "vocab_size" in d["defaults"], name
    covered = {"plain", "resnet", "highway", "preact"}  # test_cifar.py
    covered |= {"densenet", "resnet_imagenet", "mlp", "normfree", "transformer"}  # their own files
    assert families == covered


def test_list_by_family(fresh_registry: dict) -> None:
    assert registry.list_variants(family="toy") == ["toy", "toy5"]
    assert registry.list_variants("toy?", family="toy") == ["toy5"]
    assert registry.list_variants(family="other") == []
