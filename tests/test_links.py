"""The Transformer plugin path: a join told which sublayer it joins (SublayerSpec), reading the earlier values it
declares from the Past the layers pass along; docs/plugins.md's worked example run as written; `bench diff` and the
fairness guard seeing each sublayer's links (shipped designs and plugins alike)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch
from _nets import TINY_LM, layer_norm_by_hand, randomized, write
from torch.autograd.gradcheck import GradcheckError

import variants
from bench.cli import main
from bench.runs import plugins
from bench.runs.config import RunConfig
from bench.sweeps.fairness import check_grid, diff_models
from variants.combinators import Add
from variants.links import Past, Source

REPO = Path(__file__).resolve().parent.parent
IDX = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]])
MARK = "<!-- the Transformer plugin: tests/test_links.py runs this block as written -->"


def docs_block(mark: str = MARK) -> str:
    """A ```python block of docs/plugins.md: the one after ``mark``."""
    page = (REPO / "docs" / "plugins.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", page.split(mark, 1)[1], re.S)
    assert code, f"docs/plugins.md needs its ```python block after {mark}"
    return code.group(1)


def docs_plugin() -> str:
    """The worked Transformer example of docs/plugins.md."""
    return docs_block()


@pytest.fixture
def two_step(tmp_path: Path, clean_plugins: None) -> Path:
    path = write(tmp_path / "two_step.py", docs_plugin())
    plugins.load_plugins([str(path)])
    return path


def test_the_docs_example_is_short_and_starts_as_preln(two_step: Path) -> None:
    """The journey's two-output mix, x ← x + a·F_k(x) + b·F_{k−1}, in at most 30 lines, no state outside its modules
    (no counter, no closure: the SublayerSpec says where it sits), computes Pre-LN's outputs exactly at a = 1, b = 0."""
    code = two_step.read_text()
    assert len(code.splitlines()) <= 30 and not re.search(r"\b(global|nonlocal)\b", code)
    outputs = []
    for name in ("preln", "preln_twostep"):
        torch.manual_seed(0)
        outputs.append(variants.create(name, **TINY_LM)(IDX))
    assert torch.equal(*outputs)
    joins = [u.combine for b in variants.create("preln_twostep", **TINY_LM).blocks for u in (b.attn, b.ffn)]
    assert joins[0].b is None and joins[0].reads == ()  # sublayer 0 has no parameter it would not use
    assert [j.reads for j in joins[1:]] == [(variants.branch(k),) for k in range(5)]


def test_the_docs_example_computes_its_formula(two_step: Path) -> None:
    """Every a and b moved from its init: sublayer k adds b·F_{k−1}, the branch output of the sublayer before it
    (the previous layer's feed-forward for an attention sublayer), as computed by hand."""
    model = randomized(variants.create("preln_twostep", **TINY_LM))
    x = model.tok_emb.weight[IDX] + model.pos_emb.weight[:8]
    previous = None
    for block in model.blocks:
        for unit in (block.attn, block.ffn):
            fx = unit.body(layer_norm_by_hand(unit.norm_in, x))
            x = x + unit.combine.a * fx + (0 if previous is None else unit.combine.b * previous)
            previous = fx
    torch.testing.assert_close(model(IDX), layer_norm_by_hand(model.norm, x) @ model.tok_emb.weight.T)


def test_the_docs_gradient_check_of_the_plugins_join_runs_and_catches_a_cut(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_plugins: None) -> None:
    """The docs' gradcheck of TwoStepMix, as written beside two_step.py; the same check fails on the join with
    F_{k-1} detached (a forward unchanged)."""
    write(tmp_path / "two_step.py", docs_plugin())
    monkeypatch.syspath_prepend(str(tmp_path))
    check = docs_block("<!-- the gradient check: tests/test_links.py runs this block as written")
    try:
        exec(compile(check, "plugins.md", "exec"), {})
        cut = check.replace("import variants\n", "import variants\nimport two_step\n").replace(
            "join = TwoStepMix(", "two_step.TwoStepMix.forward = lambda self, x, fx, e: x + self.a * fx + self.b * "
            "e.detach()\njoin = TwoStepMix(")
        with pytest.raises(GradcheckError, match="Jacobian mismatch"):
            exec(compile(cut, "plugins.md", "exec"), {})
    finally:
        variants.unregister("preln_twostep")
        sys.modules.pop("two_step", None)


def test_bench_diff_names_what_each_sublayer_of_the_plugin_reads(two_step: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", "preln", "preln_twostep", "--depth", "2", "--plugin", str(two_step)]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[1]: " ".join(line.split()[2:]) for line in out.splitlines() if line.startswith("reads ")}
    assert rows == {"blocks.0.ffn": "x x, F(blocks.0.attn) links", "blocks.1.attn": "x x, F(blocks.0.ffn) links",
                    "blocks.1.ffn": "x x, F(blocks.1.attn) links"}  # blocks.0.attn reads nothing earlier: equal
    assert re.search(r"^  Add +TwoStepMix a\[\]   <- differs$", out, re.M)  # blocks.0.attn: no b listed
    assert out.splitlines()[-1] == ("preln and preln_twostep differ in: combinator, structure (the guard's axes); a "
                                      "study comparing them declares combinator in `vary` (combinator covers "
                                      "structure: the guard compares structures only where `vary` names values only, "
                                      "init, dropout, drop_path_rate); also, not guard axes (information only): links")


@pytest.mark.parametrize(("name", "key", "ours", "theirs"), [
    ("mhc", "reads blocks.1.ffn", "x", "x (4 streams)"),  # every sublayer reads the four streams of H
    ("denseformer", "reads dwa.1", "-", "embeddings, out(blocks.0.ffn), out(blocks.1.ffn)"),
    ("mudd", "reads blocks.1", "-", "x, embeddings, out(blocks.0.ffn)"),  # a layer holding its connection: one unit
    # each source with the RMS scale its writer computed once (rms(...)); DCA's history is each layer's update
    ("attn_res", "reads blocks.0.ffn", "x", "x, embeddings, rms(embeddings), F(blocks.0.attn), rms(blocks.0.attn)"),
    ("dca", "reads blocks.1", "-", "x, embeddings, update(blocks.0.ffn)"),
])
def test_bench_diff_names_the_sources_of_the_shipped_cross_layer_designs(name: str, key: str, ours: str,
                                                                        theirs: str) -> None:
    small = {"d_model": 16, "n_heads": 2, "d_ff": 16}
    rows = {r.key: (r.a, r.b) for r in diff_models("preln", name, depth=2, model_args=small) if r.axis == "links"}
    assert rows[key] == (ours, theirs)


TWO_BACK = '''
import torch
import variants


class TwoStepMix(variants.Combinator):
    """x + F_k(x) + b·F_{k-2} (F_0 for k = 1): another link, the docs' example's class name and parameters."""
    axis = "two_step"

    def __init__(self, at):
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor(1.0))
        self.b = torch.nn.Parameter(torch.tensor(0.0)) if at.index > 0 else None
        self.reads = (variants.branch(max(at.index - 2, 0)),) if at.index > 0 else ()

    def forward(self, x, fx, *earlier):
        y = x + self.a * fx
        return y + self.b * earlier[0] if earlier else y


@variants.register("preln_twoback", family="transformer", paper="test", spec=variants.TransformerSpec())
def preln_twoback(spec):
    return variants.build_transformer(variants.Design("two back", "pre", TwoStepMix), spec)
'''


def test_the_guard_refuses_models_whose_links_differ_in_a_study_of_values(two_step: Path, tmp_path: Path) -> None:
    """Same axes, same parameters, other sources: a study varying only the init refuses the pair, naming the link."""
    plugins.load_plugins([str(write(tmp_path / "two_back.py", TWO_BACK))])
    configs = [RunConfig(variant=v, seed=0, study="t", depth=3, task="text")
               for v in ("preln_twostep", "preln_twoback")]
    with pytest.raises(ValueError, match=r"differ in structure: first at unit blocks\.1\.attn .*"
                                         r"TwoStepMix a\[\] b\[\] <- F\(blocks\.0\.ffn\); .*"
                                         r"TwoStepMix a\[\] b\[\] <- F\(blocks\.0\.attn\); declare"):
        check_grid(configs, ["init"], study="t")
    check_grid(configs, ["structure"], study="t")  # declared: compared anyway


def test_the_join_factory_is_told_each_sublayer_in_forward_order() -> None:
    seen: list[variants.SublayerSpec] = []
    variants.build_transformer(variants.Design("spy", "pre", lambda at: seen.append(at) or Add()), depth=2, d_model=16,
                               n_heads=2)
    assert [(at.index, at.kind, at.layer, at.depth, at.d_model) for at in seen] == [
        (0, "attn", 0, 2, 16), (1, "ffn", 0, 2, 16), (2, "attn", 1, 2, 16), (3, "ffn", 1, 2, 16)]
    for form in (lambda depth, d: Add(), Add):  # (depth, d_model), as before; a join class taking nothing
        model = variants.build_transformer(variants.Design("other forms", "pre", form), depth=2)
        assert all(type(u.combine) is Add for b in model.blocks for u in (b.attn, b.ffn))


class Later(Add):
    reads = (variants.branch(1),)

    def forward(self, x: torch.Tensor, fx: torch.Tensor, *earlier: torch.Tensor) -> torch.Tensor:
        return x + fx + earlier[0]


def test_what_a_join_cannot_read_is_named() -> None:
    model = variants.build_transformer(variants.Design("reads ahead", "pre", lambda at: Later()), **TINY_LM)
    with pytest.raises(ValueError, match=r"F\(blocks\.0\.ffn\) is not available to read: it comes later in the stack"):
        model(IDX)
    with pytest.raises(ValueError, match=r"sublayer 0 reads F\(blocks\.0\.ffn\): call its layer with the forward's"):
        model.blocks[0](torch.zeros(1, 2, 16))
    with pytest.raises(ValueError, match=r"out\(blocks\.1\.ffn\) is not available to read: no module declared it"):
        Past(torch.zeros(1), keep=()).read([Source("output", 3)])
    with pytest.raises(ValueError, match=r"a sublayer index is a non-negative integer .*got -1"):
        variants.branch(-1)


def test_a_paper_layer_refuses_other_placements() -> None:
    with pytest.raises(ValueError, match=r"B2T is written for placements \('post', 'post'\), got \('pre', 'pre'\)"):
        variants.build_transformer(variants.Design("b2t on pre", "pre", block=variants.B2T), depth=1)
