"""Where each variant's formula is written: ``describe(name)["unit"]``/``["layer"]``, :func:`variants.formula` and
:func:`variants.catalogue`, all read from the classes a variant builds."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys
from pathlib import Path

import pytest
import torch
from _nets import code_paths, write
from torch import nn

import variants
from variants import blocks, combinators, formulas, lm_blocks, registry, transformer

NAMES = variants.list_variants()
PATHS = code_paths()  # an alias at another size builds the same classes as the name standing for it
ROOT = Path(variants.__file__).resolve().parent.parent  # where the package is installed (site-packages under tox)
REPO = Path(__file__).resolve().parent.parent  # the checkout: docs/
# A code span holding an equation or an update: ``y = x + F(x)``, ``h ← Norm(...)``.
FORMULA = re.compile(r"``[^`]*[=←][^`]*``")
UNITLESS: set[str] = set()  # shipped variants without any residual unit: none


def _class(qualified: str) -> type:
    module, _, name = qualified.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("name", PATHS)
def test_every_variant_names_its_unit(name: str) -> None:
    d = variants.describe(name)
    assert (d["unit"] is None) == (name in UNITLESS), name
    f = variants.formula(name)
    assert d["unit"] == ", ".join(e["class"] for e in f["unit"])
    assert d["layer"] == (", ".join(e["class"] for e in f["layer"]) or None)
    assert f["combinator"], name


def _line(e: dict) -> str:
    return (ROOT / e["file"]).read_text().splitlines()[e["line"] - 1]


@pytest.mark.parametrize("name", PATHS)
def test_formula_points_at_each_forward(name: str) -> None:
    """Every axis a forward computes: the line of the class's own ``forward``, or of the class itself where it
    inherits one (then named, with its own line); the formula first in every docstring of ours but a body's."""
    f = variants.formula(name)
    assert f["norm"] or variants.describe(name)["axes"]["norm"] == "none", name
    for role in variants.FORMULA_ROLES:
        for e in f[role]:
            cls = _class(e["class"])
            assert isinstance(cls, type) and issubclass(cls, nn.Module)
            if e["package"] is not None:  # torch's norms: their lines are torch's
                assert e["package"] == "torch" and role == "norm" and not Path(e["file"]).is_absolute(), e
                continue
            assert not Path(e["file"]).is_absolute() and (ROOT / e["file"]).is_file(), e
            if e["forward"] is None:
                assert "def forward" in _line(e), e
            else:
                assert re.match(rf"\s*class {cls.__name__}\b", _line(e)), e
                inherited = re.fullmatch(r"(\S+) \((\S+):(\d+)\)", e["forward"])
                assert inherited is not None, e
                owner, file, line = inherited.groups()
                assert issubclass(cls, _class(owner)) and "forward" not in cls.__dict__
                assert "def forward" in (ROOT / file).read_text().splitlines()[int(line) - 1], e
            if role != "body":
                assert FORMULA.search(e["formula"]), e


def test_an_inherited_forward_points_at_the_class_that_states_the_formula() -> None:
    """HighwayUnit's formula is its own (the gate it passes in computes it): its line is the class's, and the forward
    it runs, ResidualUnit's, is named beside it."""
    e = variants.formula("highway")["unit"][0]
    assert _line(e).startswith("class HighwayUnit(ResidualUnit):")
    owner_line = variants.formula("plain_mlp")["unit"][0]
    assert e["forward"] == f"variants.blocks.ResidualUnit (variants/blocks.py:{owner_line['line']})"
    assert "T(s)·H(x) + (1 - T(s))·s" in e["formula"]


def test_the_norm_type_is_located_too() -> None:
    dyt = variants.formula("dyt")["norm"]
    assert [e["class"] for e in dyt] == ["variants.norms.DyT"] and "def forward" in _line(dyt[0])
    assert "``DyT(x) = γ ⊙ tanh(α·x) + β``" in dyt[0]["formula"]
    assert [e["class"] for e in variants.formula("dyt")["body"]] == ["variants.attention.CausalSelfAttention",
                                                                       "variants.ffn.FeedForward"]
    ln = variants.formula("preln")["norm"][0]
    assert ln["class"] == "torch.nn.modules.normalization.LayerNorm" and ln["package"] == "torch"
    assert ln["file"] == "torch/nn/modules/normalization.py"
    page = (REPO / "docs" / "variants.md").read_text(encoding="utf-8")
    assert f"- norm `variants.norms.DyT` (`variants/norms.py:{dyt[0]['line']}`): ``DyT(x)" in page
    assert "- norm `torch.nn.modules.normalization.LayerNorm` (from torch)" in page


@pytest.mark.parametrize(("name", "layer", "unit", "combinator"), [
    ("preln", "variants.lm_blocks.PreLN", "variants.lm_blocks.Sublayer", "variants.combinators.Add"),
    ("postln", "variants.lm_blocks.PostLN", "variants.lm_blocks.Sublayer", "variants.combinators.Add"),
    ("sandwich", "variants.lm_blocks.PeriLN", "variants.lm_blocks.Sublayer", "variants.combinators.Add"),
    ("b2t", "variants.lm_blocks.B2T", "variants.lm_blocks.Sublayer", "variants.combinators.Add"),
    ("hybridnorm", "variants.lm_blocks.HybridNorm", "variants.lm_blocks.Sublayer", "variants.combinators.Add"),
    ("rezero_lm", "variants.lm_blocks.ReZero", "variants.lm_blocks.Sublayer", "variants.combinators.Scaled"),
    ("resi_dual", "variants.lm_design.DualLayer", "variants.lm_design.DualPostNorm", "variants.combinators.Add"),
    ("mixln", "variants.lm_blocks.PostLN, variants.lm_blocks.PreLN", "variants.lm_blocks.Sublayer",
     "variants.combinators.Add"),
    ("ngpt", "variants.ngpt.Layer", "variants.ngpt.HypersphereUnit", "variants.ngpt.NLerp"),
    ("resnet", None, "variants.blocks.PostActBasic", "variants.combinators.Add"),
    ("resnet50", None, "variants.blocks.PostActBottleneck", "variants.combinators.Add"),
    ("preact", None, "variants.blocks.PreActBasic", "variants.combinators.Add"),
    ("preact_resnet164", None, "variants.blocks.PreActBottleneck", "variants.combinators.Add"),
    ("highway", None, "variants.blocks.HighwayUnit", "variants.combinators.Gate"),
    ("highway_mlp", None, "variants.blocks.HighwayUnit", "variants.combinators.Gate"),
    ("densenet", None, "variants.densenet.DenseLayer", "variants.combinators.Concat"),
    ("plain", None, "variants.blocks.PostActBasic", "variants.combinators.NoShortcut"),
    ("plain_mlp", None, "variants.blocks.ResidualUnit", "variants.combinators.NoShortcut"),
    ("fixup", None, "variants.normfree.FixupUnit", "variants.combinators.Scaled"),
])
def test_exact_classes(name: str, layer: str | None, unit: str, combinator: str) -> None:
    d, f = variants.describe(name), variants.formula(name)
    assert (d["layer"], d["unit"]) == (layer, unit)
    assert ", ".join(e["class"] for e in f["combinator"]) == combinator


def test_preln_shows_the_whole_residual_stream() -> None:
    """The Pre-LN layer's computation is in one file, its ``forward`` straight-line and under 10 lines, its docstring
    the paper's two equations; the sublayer (its parts and the join's call) sits in the same file."""
    f = variants.formula("preln")
    layer, unit = f["layer"][0], f["unit"][0]
    assert layer["formula"].startswith("Pre-LN, Xiong et al. 2020 (GPT-2): ``h = x + Attn(LN(x))``, "
                                       "``y = h + FFN(LN(h))``")
    assert layer["file"] == unit["file"] == "variants/lm_blocks.py" and layer["forward"] is None
    assert f["combinator"][0]["formula"] == "Identity shortcut, ``y = x + F(x)``."
    source = inspect.getsource(lm_blocks.PreLN.forward).splitlines()
    assert len(source) <= 10 and source[0].strip().startswith("def forward(self, x")
    body = "".join(source)
    assert "h = a.join(x, a.body(a.norm_in(x)), past)" in body and "f.join(h, f.body(f.norm_in(h)), past)" in body
    assert _line(layer).strip().startswith("def forward(self, x")


def _subclasses(base: type) -> list[type]:
    out, todo = [], [base]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo += cls.__subclasses__()
    return [c for c in out if c.__module__.split(".")[0] == "variants"]


SHIPPED = sorted({*_subclasses(blocks.ResidualUnit), *_subclasses(combinators.Combinator),
                  *_subclasses(lm_blocks.Block), _class("variants.ngpt.Layer"), _class("variants.densenet.DenseLayer")},
                 key=registry.qualified_name)


@pytest.mark.parametrize("cls", SHIPPED, ids=registry.qualified_name)
def test_every_unit_layer_and_combinator_states_its_formula_first(cls: type) -> None:
    first = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
    assert FORMULA.search(first), f"{registry.qualified_name(cls)}: {first!r}"


def test_unit_of_a_plugin_and_of_a_model_without_units(tmp_path: Path, clean_plugins: None) -> None:
    path = write(tmp_path / "elsewhere" / "my_units.py", '''
        import torch
        from torch import nn

        import variants


        class Halfway(variants.ResidualUnit):
            """``y = combine(x, F(x) / 2)``: a unit of a plugin."""

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.combine(x, self.body(x) / 2)


        @variants.register("my_halfway", family="toy", paper="none")
        def my_halfway(width: int = 4) -> nn.Module:
            return nn.Sequential(Halfway(nn.Linear(width, width), variants.COMBINATORS["add"]()))


        @variants.register("my_plain", family="toy", paper="none")
        def my_plain(width: int = 4) -> nn.Module:
            return nn.Sequential(nn.Linear(width, width), nn.ReLU())
        ''')
    spec = importlib.util.spec_from_file_location("my_units", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["my_units"] = module
    try:
        spec.loader.exec_module(module)
        assert variants.describe("my_halfway")["unit"] == "my_units.Halfway"
        e = variants.formula("my_halfway")["unit"][0]
        assert e["file"] == "my_units.py" and e["formula"] == "``y = combine(x, F(x) / 2)``: a unit of a plugin."
        assert variants.describe("my_plain")["unit"] is None and variants.describe("my_plain")["layer"] is None
        assert variants.formula("my_plain") == {"name": "my_plain", **{role: [] for role in variants.FORMULA_ROLES}}
        page = variants.catalogue(["my_halfway", "my_plain"])
        assert str(tmp_path) not in page and "(`my_units.py:" in page
    finally:
        variants.unregister("my_halfway")
        variants.unregister("my_plain")
        sys.modules.pop("my_units", None)


def test_timm_has_no_unit() -> None:
    assert variants.describe("timm:resnet18")["unit"] is None
    assert variants.formula("timm:resnet18") == {"name": "timm:resnet18",
                                                 **{role: [] for role in variants.FORMULA_ROLES}}


def test_catalogue_is_deterministic_and_complete() -> None:
    page = variants.catalogue()
    assert page == variants.catalogue()
    assert not re.search(r"0x[0-9a-f]{6,}", page) and str(ROOT) not in page
    families = re.findall(r"^## (\S+)$", page, flags=re.M)
    assert families == sorted({variants.describe(n)["family"] for n in NAMES})
    rows = re.findall(r"^\| `([^`]+)` \|", page, flags=re.M)
    assert sorted(rows) == NAMES
    assert "| `preln` | " in page and "| `PreLN` | `Sublayer` | `Add` |" in page
    e = variants.formula("preln")["layer"][0]
    assert f"- layer `variants.lm_blocks.PreLN` (`variants/lm_blocks.py:{e['line']}`)" in page
    assert f"{variants.describe('resnet56')['params']:,}" in page


def test_transformer_designs_keep_every_name_and_default() -> None:
    assert not hasattr(transformer, "Recipe") and not hasattr(transformer, "RECIPES")
    assert list(transformer.DESIGNS) == ["postln", "preln", "sandwich", "deepnorm", "rezero_lm", "b2t",
                                         "admin", "resi_dual", "hybridnorm", "value_residual", "t_fixup", "mixln"]
    assert all(variants.describe(n)["family"] == "transformer" for n in transformer.DESIGNS)
    with torch.device("meta"):
        assert isinstance(variants.create("preln"), transformer.TransformerLM)


def test_source_path_outside_the_checkout_is_its_name(tmp_path: Path) -> None:
    assert formulas.source_path(str(ROOT / "variants" / "blocks.py")) == "variants/blocks.py"
    assert formulas.source_path(str(tmp_path / "x" / "plugin.py")) == "plugin.py"


@pytest.mark.parametrize("up", [0, 3], ids=["installed-beside-torch", "torch-in-a-venv-under-the-checkout"])
def test_torch_is_another_package_wherever_the_two_are_installed(up: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A non-editable install puts ``variants`` in site-packages beside torch (tox's); an editable one may find torch
    in a venv under the checkout (``.tox/py/lib/python3.X/site-packages``): torch's norms stay "from torch" either way,
    their file relative to torch's folder, and ours keep their path."""
    site = Path(torch.__file__).resolve().parent.parent
    monkeypatch.setattr(formulas, "ROOT", site.parents[up - 1] if up else site)
    ln = formulas.entry(nn.LayerNorm)
    assert (ln["package"], ln["file"]) == ("torch", "torch/nn/modules/normalization.py")
    assert formulas.entry(blocks.PreNorm)["package"] is None
