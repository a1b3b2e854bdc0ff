"""The confound guard: `bench diff` and the study check that a comparison varies one thing."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import variants
from bench.cli import main
from bench.runs import plugins
from bench.runs.config import RunConfig
from bench.sweeps import fairness, structure
from bench.sweeps.fairness import Facts, check_grid, diff_models, format_diff, model_facts, weight_profile
from bench.sweeps.study import load_study
from variants.blocks import ResidualUnit
from variants.combinators import Scaled

GUARD = " (the guard's axes); a study comparing them declares"
# what the last line adds where a declared axis makes the structure's declaration needless
COVERS = " covers structure: the guard compares structures only where `vary` names values only, init, dropout, "\
    "drop_path_rate)"
MIXSHORT = Path(__file__).resolve().parents[1] / "scripts" / "studies" / "mixshort.py"


def _differing(rows: list) -> dict[str, tuple]:
    return {r.key: (r.a, r.b) for r in rows if r.differs}


def test_postln_vs_preln_differ_in_placement_only() -> None:
    rows = diff_models("postln", "preln", depth=12)
    assert {r.axis for r in rows if r.differs} == {"placement", "structure"}  # the structure: where the norms run
    diff = _differing(rows)
    assert diff["axes.placement"] == ("post", "pre")
    assert diff["norm blocks.*.ffn.norm_out"] == ("layernorm (x12)", "-")
    assert diff["norm blocks.*.ffn.norm_in"] == ("-", "layernorm (x12)")
    assert diff["norm norm"] == ("-", "layernorm (x1)")  # Pre-LN's final LayerNorm
    stds = {r.key: (r.a, r.b) for r in rows if r.key.startswith("std ")}
    # Same default init (Xavier), same seed: identical stds, q/k/v of the fused projection apart.
    assert {"std blocks.*.attn.body.qkv[q]", "std blocks.*.attn.body.qkv[v]", "std blocks.*.ffn.body.fc2"} <= set(stds)
    assert all(a == b for a, b in stds.values())
    assert (f"postln and preln differ in: placement, structure{GUARD} placement in `vary` (placement{COVERS}"
            in format_diff("postln", "preln", rows))


def test_diff_names_init_and_combinator_of_deepnorm() -> None:
    rows = diff_models("postln", "deepnorm", depth=4, model_args={"d_model": 32, "n_heads": 2, "d_ff": 64})
    diff = _differing(rows)
    assert diff["init"] == ("xavier", "deepnorm")
    assert {r.axis for r in rows if r.differs} == {"init", "combinator", "scalars", "structure"}
    # DeepNet: q at Xavier-normal of a d x d matrix (std sqrt(1/d)); v scaled by beta = (8N)^-1/4 = 32^-1/4.
    q, v = (float(diff[f"std blocks.*.attn.body.qkv[{p}]"][1].split()[0]) for p in "qv")
    assert q == pytest.approx(32**-0.5, rel=0.05)
    assert v == pytest.approx(32**-0.25 * 32**-0.5, rel=0.05)


def test_weight_profile_pools_roles_and_counts_norms() -> None:
    model = nn.Sequential(nn.Linear(100, 100), nn.LayerNorm(100), nn.Linear(100, 100))
    nn.init.constant_(model[0].weight, 1.0)
    nn.init.constant_(model[2].weight, -1.0)
    prof = weight_profile(model)
    assert prof["norms"] == {"*": ["layernorm"]}
    count, numel, std = prof["weights"]["*"]
    assert (count, numel) == (2, 20_000)
    # One std over the pooled entries (10,000 at +1, 10,000 at -1; ddof=1), not the mean of the tensors' stds (0).
    assert std == pytest.approx(math.sqrt(20_000 / 19_999), rel=1e-6)


def test_model_facts_on_meta_device() -> None:
    facts = model_facts("resnet", 56)
    assert facts.params == 853_018  # ResNet-56 (He 2015 Table 6: 0.85M)
    assert facts.kwargs["depth"] == 56 and facts.kwargs["init"] == "kaiming"
    assert facts.axes["combinator"] == "add"


def _configs(variants: list[str], **kw: object) -> list[RunConfig]:
    return [RunConfig(variant=v, seed=s, study="t", **kw) for v in variants for s in (0, 1)]  # type: ignore[arg-type]


def test_guard_accepts_a_matched_placement_pair() -> None:
    check_grid(_configs(["postln", "preln", "sandwich"], depth=6, task="text"), ["placement"], study="t")


def test_guard_refuses_an_undeclared_init_difference() -> None:
    with pytest.raises(ValueError, match=r"study 't' varies \['placement'\], but postln and deepnorm .* differ in "
                                         r"'combinator'"):
        check_grid(_configs(["postln", "deepnorm"], depth=6, task="text"), ["placement"], study="t")
    with pytest.raises(ValueError, match=r"also differ in 'init': 'xavier' vs 'deepnorm'"):
        check_grid(_configs(["postln", "deepnorm"], depth=6, task="text"), ["placement", "combinator"], study="t")


def test_guard_refuses_a_width_difference() -> None:
    with pytest.raises(ValueError, match=r"differ in 'd_ff': 512 vs 3072"):
        check_grid(_configs(["preln", "gpt2_small"], task="text", model_args=(("vocab_size", 256),)),
                   ["init"], study="t")


def test_guard_parameter_tolerance() -> None:
    """The counts of the models the runs train: built at digits' one input channel (269,722 and 286,186 at the
    builders' three-channel default), as `bench diff --shape digits` builds them."""
    configs = _configs(["resnet", "highway"], depth=20)  # on digits, the default task
    with pytest.raises(ValueError, match=r"'params': 269434 vs 285898 \(parameter counts differ by more than the "
                                         r"tolerance: 0.01\)"):
        check_grid(configs, ["combinator", "placement"], study="t")
    check_grid(configs, ["combinator", "placement"], param_tolerance=0.1, study="t")
    check_grid(configs, ["combinator", "placement", "params"], study="t")


def test_guard_compares_only_within_a_grid_cell() -> None:
    # Depth is a grid axis: resnet-20 vs resnet-56 is declared, never a confound.
    configs = [RunConfig(variant="resnet", depth=d, study="t") for d in (20, 56)]
    check_grid(configs, [], study="t")


def test_guard_runs_no_forward_for_a_study_of_structures(monkeypatch: pytest.MonkeyPatch) -> None:
    # Varying placement compares structures by design: the guard describes none (a forward each, its main cost).
    monkeypatch.setattr(structure, "describe", lambda model: pytest.fail("described a model"))
    check_grid(_configs(["postln", "preln"], depth=2, task="text"), ["placement"], study="t")


def test_guard_rejects_unknown_vary_names() -> None:
    with pytest.raises(ValueError, match=r"`vary` names \['placment'\], which no model of the grid has"):
        check_grid(_configs(["postln", "preln"], depth=2, task="text"), ["placment"], study="t")
    # an axis only other models have (mHC's stream, in another preset of the study) is declared, not a typo
    assert "stream" in variants.axis_names() and "stream" not in variants.describe("preln")["axes"]
    check_grid(_configs(["postln", "preln"], depth=2, task="text"), ["placement", "stream"], study="t")


STUDY = """
name = "mixed"
vary = {vary}
[base]
task = "text"
depth = 2
steps = 1
[grid]
variant = ["postln", "deepnorm"]
seed = [0]
"""


def test_sweep_refuses_a_confounded_study_before_running(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = tmp_path / "mixed.toml"
    study.write_text(STUDY.format(vary='["placement"]'))
    results = tmp_path / "results"
    assert main(["sweep", str(study), "--results-dir", str(results)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: study 'mixed' varies ['placement'], but postln and deepnorm")
    assert not results.exists()  # nothing written


@pytest.mark.parametrize(("vary", "message"), [
    ('"placement"', "`vary` must be a list of axis names"),
    ('[1]', "`vary` must be a list of axis names"),
])
def test_study_file_vary_must_be_names(tmp_path: Path, vary: str, message: str) -> None:
    study = tmp_path / "s.toml"
    study.write_text(STUDY.format(vary=vary))
    with pytest.raises(ValueError, match=message):
        load_study(study)


@pytest.mark.parametrize("tol", ["1.5", "-0.1", "true", '"a"'])
def test_study_file_param_tolerance_is_a_fraction(tmp_path: Path, tol: str) -> None:
    study = tmp_path / "s.toml"
    study.write_text(f"param_tolerance = {tol}\n" + STUDY.format(vary='["combinator"]'))
    with pytest.raises(ValueError, match="`param_tolerance` must be a fraction in"):
        load_study(study)


def _built_once(build: Callable[..., Any]) -> Callable[..., Any]:
    """``build`` (a model's facts or initial values, by variant, depth and arguments) computed once per distinct call:
    a pure function of its arguments, which many studies and presets repeat (a preset training the grid's models)."""
    built: dict[str, Any] = {}

    def once(*args: Any, **kwargs: Any) -> Any:
        key = repr((args, sorted(kwargs.items())))
        if key not in built:
            built[key] = build(*args, **kwargs)
        return built[key]

    return once


@pytest.mark.slow  # every distinct model of the shipped studies built once: about a minute
def test_shipped_studies_pass_their_own_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.analysis.studyfile import STUDIES_DIR

    for name in ("model_facts", "initial_values"):
        monkeypatch.setattr(fairness, name, _built_once(getattr(fairness, name)))
    for path in sorted(STUDIES_DIR.glob("*.toml")):
        study = load_study(path)
        if study.analysis.get("kind") == "cost":  # a cost is what a design adds to its baseline: nothing is held equal
            assert not study.grid and not study.vary, path.name
        else:  # every shipped study comparing variants declares what they may differ in
            assert study.vary or len(study.grid["variant"]) == 1, path.name
        for preset in [None, *study.presets]:
            study.configs(preset)


def test_cli_diff(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", "postln", "preln", "--depth", "12"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "postln vs preln, depth 12, seed 0 (built on the CPU):"
    assert out.rstrip().endswith(f"postln and preln differ in: placement, structure{GUARD} placement in `vary` "
                                  f"(placement{COVERS}")
    assert main(["diff", "postln", "nosuch"]) == 2
    assert "unknown variant 'nosuch'" in capsys.readouterr().err


# -- check_grid's rules on made-up facts (no model built) -------------------------------------------------------


def _fake_grid(monkeypatch: pytest.MonkeyPatch, facts: dict[str, Facts]) -> list[RunConfig]:
    """Configs of the variants in ``facts`` (two seeds each); model_facts answers from ``facts`` (and the made-up
    models have no layers to compare initial values on)."""
    monkeypatch.setattr(fairness, "model_facts", lambda variant, depth, overrides, described=True: facts[variant])
    monkeypatch.setattr(fairness, "initial_values", lambda variant, depth, overrides: {})
    monkeypatch.setattr(fairness, "run_model_args", lambda cfg: dict(cfg.model_overrides()))  # no builder to ask
    return _configs(list(facts))


def _facts(name: str, params: int = 1000, axes: dict | None = None, **kwargs: object) -> Facts:
    return Facts(name, "fam", {"combinator": "add", "placement": "post", **(axes or {})},
                 {"depth": 20, "init": "kaiming", "width": 16, **kwargs}, params)


@pytest.mark.parametrize(("field", "a", "b"), [("init", "kaiming", "xavier"), ("width", 16, 32),
                                               ("d_model", 64, 128), ("dropout", 0.0, 0.1)])
def test_guard_refuses_each_undeclared_confound_and_accepts_it_declared(monkeypatch: pytest.MonkeyPatch,
                                                                      field: str, a: object, b: object) -> None:
    configs = _fake_grid(monkeypatch, {"a": _facts("a", **{field: a}), "b": _facts("b", **{field: b})})
    with pytest.raises(ValueError, match=rf"study 't' varies \['combinator'\], but a and b \(depth 20\) also differ "
                                         rf"in '{field}': {a!r} vs {b!r}; declare it"):
        check_grid(configs, ["combinator"], study="t")
    check_grid(configs, ["combinator", field], study="t")


def test_guard_refuses_an_undeclared_axis_and_ignores_other_builder_options(monkeypatch: pytest.MonkeyPatch) -> None:
    configs = _fake_grid(monkeypatch, {"a": _facts("a", shortcut="A"), "b": _facts("b", axes={"placement": "pre"})})
    with pytest.raises(ValueError, match=r"also differ in 'placement': 'post' vs 'pre'"):
        check_grid(configs, ["combinator"], study="t")
    check_grid(configs, ["placement"], study="t")  # shortcut is one builder's own option, not a confound


@pytest.mark.parametrize(("params_b", "tolerance", "refused"), [
    (990, 0.01, False),  # 10 / 1000 = 0.01: at the tolerance, accepted
    (989, 0.01, True),  # 11 / 1000 > 0.01
    (1010, 0.01, False),  # relative to the larger count: 10 / 1010
    (900, 0.1, False),
    (1000, 0.0, False),
    (1001, 0.0, True),
])
def test_guard_parameter_tolerance_is_relative_to_the_larger_count(monkeypatch: pytest.MonkeyPatch, params_b: int,
                                                                   tolerance: float, refused: bool) -> None:
    configs = _fake_grid(monkeypatch, {"a": _facts("a", params=1000), "b": _facts("b", params=params_b)})
    if refused:
        with pytest.raises(ValueError, match=rf"'params': 1000 vs {params_b} \(parameter counts differ by more than "
                                             rf"the tolerance: {tolerance:g}\)"):
            check_grid(configs, [], tolerance, study="t")
    else:
        check_grid(configs, [], tolerance, study="t")


def test_a_norm_only_difference_is_reported_as_the_norm_axis_only() -> None:
    """Another norm type at the same places is the norm axis, not a placement: the summary line says exactly the
    axes of the rows its table shows (here RMSNorm for LayerNorm; a plugin's registered norm reads the same)."""
    import variants

    variants.register_preset("preln_rms_for_test", "preln", norm="rmsnorm")
    try:
        rows = diff_models("preln", "preln_rms_for_test", depth=2, model_args={"d_model": 32, "n_heads": 2})
    finally:
        variants.unregister("preln_rms_for_test")
    norm_rows = [r for r in rows if r.key.startswith("norm ") and r.differs]
    assert norm_rows and {r.axis for r in norm_rows} == {"norm"}
    assert all(r.a.startswith("layernorm") and r.b.startswith("rmsnorm") for r in norm_rows)
    assert sorted({r.axis for r in rows if r.differs}) == ["norm", "structure"]
    summary = format_diff("preln", "preln_rms_for_test", rows).splitlines()[-1]
    assert summary == f"preln and preln_rms_for_test differ in: norm, structure{GUARD} norm in `vary` (norm{COVERS}"


# -- structure: what the models are made of, unit by unit ---------------------------------------------------------


def _columns(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def test_diff_shows_the_branch_order_of_skipinit_and_rezero(capsys: pytest.CaptureFixture[str]) -> None:
    """Same axes, same kwargs but init, same parameter count: the structure still tells them apart (SkipInit's
    branch opens with a ReLU, ReZero's with the conv), side by side, aligned where they agree."""
    assert main(["diff", "skipinit", "rezero", "--depth", "8"]) == 0
    out = capsys.readouterr().out.rstrip().splitlines()
    assert _columns(out[4]) == ["structure: first difference", "unit stages.0.0 (ResidualUnit)",
                                "unit stages.0.0 (ResidualUnit)", "structure"]
    start = out.index("first structural difference (ops in the order the forward runs them):")
    conv = "Conv2d 3x3 weight[16,16,3,3] bias[16]"
    assert [_columns(line) for line in out[start + 1:-1]] == [
        ["skipinit: unit stages.0.0 (ResidualUnit)", "rezero: unit stages.0.0 (ResidualUnit)"],
        ["ReLU", "-", "<- differs"],
        [conv, conv], ["ReLU", "ReLU"], [conv, conv],
        ["Scaled beta[] alpha[] fixed", "Scaled beta[] alpha[] fixed"],
    ]
    # init changes values only: the structure must be declared too
    assert out[-1] == f"skipinit and rezero differ in: init, structure{GUARD} init, structure in `vary`"


def test_guard_refuses_a_structural_difference_in_a_study_of_the_init() -> None:
    configs = _configs(["skipinit", "rezero"], depth=8)
    conv = r"Conv2d 3x3 weight\[16,16,3,3\] bias\[16\]"
    scaled = r"Scaled beta\[\] alpha\[\] fixed"
    with pytest.raises(ValueError, match=(
            rf"^study 't' varies \['init'\], which changes values only, but skipinit and rezero \(depth 8\) also "
            rf"differ in structure: first at unit stages.0.0 \(ResidualUnit\) vs unit stages.0.0 \(ResidualUnit\); "
            rf"skipinit: ReLU > {conv} > ReLU > {conv} > {scaled}; rezero: {conv} > ReLU > {conv} > {scaled}; "
            r"declare \"structure\" in the study's `vary`")):
        check_grid(configs, ["init"], study="t")
    check_grid(configs, ["init", "structure"], study="t")  # declared: compared knowingly


def test_structure_runs_the_forward_and_says_what_is_learned() -> None:
    """Execution order, not registration order: a pre-activation unit registers its branch before the BN-ReLU it
    runs first. A learned β and a fixed one are different structures; a model whose forward refuses the guessed
    input is described in registration order, and says so."""
    with torch.device("meta"):
        preact = variants.create("preact", depth=8)
    described = structure.describe(preact)
    assert described.order == "execution"
    assert [str(op) for op in described.units[0].ops] == [
        "BatchNorm2d weight[16] bias[16]", "ReLU", "Conv2d 3x3 weight[16,16,3,3]", "BatchNorm2d weight[16] bias[16]",
        "ReLU", "Conv2d 3x3 weight[16,16,3,3]", "Add"]
    nets = [nn.Sequential(ResidualUnit(nn.Linear(2, 2, bias=False), Scaled(beta=0.5, learnable_beta=learned)))
            for learned in (True, False)]
    learned, fixed = (structure.describe(n) for n in nets)
    assert [str(op) for op in learned.units[0].ops] == ["Linear weight[2,2]", "Scaled beta[] alpha[] fixed"]
    assert [str(op) for op in fixed.units[0].ops] == ["Linear weight[2,2]", "Scaled alpha[] fixed beta[] fixed"]
    assert structure.first_difference(learned, fixed) == 0
    assert structure.first_difference(learned, structure.describe(nets[0])) is None
    refuses = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(5, 2))  # 32x32 input: wrong width
    assert structure.describe(refuses).order == "registration"


def test_a_plugin_gate_and_join_are_seen_by_what_they_declare() -> None:
    """Neither subclasses our classes: the profile reads their declared scalars, the structure finds their units."""
    from _nets import plugin_net

    net = plugin_net()
    assert weight_profile(net)["scalars"] == {"*.join beta": pytest.approx(0.375), "*.gate bias": pytest.approx(-1.5)}
    described = structure.describe(net)
    assert [p.name for p in described.units] == ["1", "2"]
    assert [str(op) for op in described.units[0].ops] == [
        "Linear weight[4,4] bias[4]", "PluginGate", "Linear weight[4,4] bias[4]", "ReLU", "PluginJoin g[]"]


def test_diff_resnet_fixup_summary_is_the_axes_of_the_table() -> None:
    """Norms in ResNet and none in Fixup is the norm axis (norm "none"), not a placement: both models are
    post-activation, and every axis of the summary line is the axis column of a row the table shows."""
    rows = diff_models("resnet", "fixup", depth=8)
    assert {r.axis for r in rows if r.key.startswith("norm ")} == {"norm"}
    text = format_diff("resnet", "fixup", rows).splitlines()
    assert text[-1] == (f"resnet and fixup differ in: combinator, init, norm, structure{GUARD} combinator, init, norm "
                        f"in `vary` (combinator, init, norm{COVERS}; also, not guard axes "
                        "(information only): family, scalars")
    table = text[1:text.index("first structural difference (ops in the order the forward runs them):")]
    # The parameter counts, within the guard's tolerance, are shown (with the difference) and not summarised.
    params = next(line for line in table if line.startswith("parameters"))
    assert params.endswith("; within the guard's tolerance)  params")
    assert {_columns(line)[-1] for line in table} == {"combinator", "family", "init", "norm", "params", "scalars",
                                                      "structure"}


@pytest.mark.parametrize(("name", "where"), [
    ("preln", "variants/lm_blocks.py:{} (PreLN.forward)"),  # the layer: both sublayers' equations in one forward
    ("resnet20", "variants/blocks.py:{} (PostActBasic, its forward inherited from variants.blocks.PostActivation"),
])
def test_show_variant_leads_to_the_file_of_the_computation(name: str, where: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The fourth line names the file and line where the residual stream is computed (the layer, else the unit)."""
    assert main(["show-variant", name]) == 0
    third = capsys.readouterr().out.splitlines()[3]
    entry = variants.formula(name)["layer" if name == "preln" else "unit"][0]
    assert third.startswith("computed in: " + where.format(entry["line"])), third


def test_show_variant_says_what_its_parameter_count_is_built_at(capsys: pytest.CaptureFixture[str]) -> None:
    """The header's count is at the variant's defaults, and says so as `diff` does; `--shape` counts as `diff
    --shape` does (digits' one channel: 269,434, not 269,722), and an unknown shape or one the variant does not
    build at is refused, nothing printed."""
    assert main(["show-variant", "resnet20"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("resnet20 (resnet, 269,722 parameters): ")
    assert out[1] == ("built at: each variant's defaults (in_chans=3, num_classes=10; --shape NAME builds at a "
                      "`bench cost` shape, e.g. digits' one channel)")
    assert main(["show-variant", "resnet20", "--shape", "digits"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("resnet20 (resnet, 269,434 parameters): ")
    assert out[1] == ("built at: shape digits, one input 1x8x8, model arguments {'depth': 20, 'num_classes': 10, "
                      "'in_chans': 1} (as `bench cost --shape digits` builds it)")
    assert main(["show-variant", "resnet20", "--shape", "nope"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("error: shape: unknown shape 'nope'; shapes: gpt2_small")
    assert main(["show-variant", "preln", "--shape", "digits"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("error: name: 'preln' does not build at shape 'digits'")


def test_show_variant_prints_the_ops_of_the_first_unit(capsys: pytest.CaptureFixture[str]) -> None:
    """One formula (``y = α·x + β·F(x)``) for both; the first unit's ops tell SkipInit from ReZero."""
    conv = "Conv2d 3x3 weight[16,16,3,3] bias[16]"
    for name, ops in [("skipinit", f"ReLU > {conv} > ReLU > {conv}"), ("rezero", f"{conv} > ReLU > {conv}")]:
        assert main(["show-variant", name]) == 0
        out = capsys.readouterr().out.rstrip().splitlines()
        assert out[-2] == ("ops of the first unit, stages.0.0, in the order its forward runs them "
                           "(bench.sweeps.structure):")
        assert out[-1].strip() == f"{ops} > Scaled beta[] alpha[] fixed"


# -- init on the layers two designs share (common random numbers) --------------------------------------------------


@pytest.fixture
def xavier_stem() -> Iterator[str]:
    """``preact`` but for its stem convolution, which keeps a Glorot-normal draw of its own: 3.5 % narrower than He's
    on a 16×3×3×3 conv, within the noise of a 432-entry std, so only equal draws can tell."""
    from variants.blocks import PreActBasic
    from variants.layers import ops

    def stem(cin: int, width: int) -> nn.Module:
        conv = variants.mark_init(nn.Conv2d(cin, width, 3, padding=1, bias=False), "own")
        nn.init.xavier_normal_(conv.weight)
        return nn.Sequential(conv)

    def build(spec: variants.CifarSpec) -> nn.Module:
        def unit(s: variants.Slot) -> nn.Module:
            return PreActBasic(s.cin, s.width, s.stride, shortcut=spec.shortcut, first=s.position == 0)

        return variants.build_cifar(spec, unit, stem=stem, head_pre=lambda f: nn.Sequential(*ops(("bn", "relu"), f)))

    variants.register("t_xavier_stem", family="preact", paper="a plugin", spec=variants.CifarSpec(depth=8))(build)
    yield "t_xavier_stem"
    variants.unregister("t_xavier_stem")


def test_diff_reports_a_shared_layer_whose_init_differs(xavier_stem: str) -> None:
    rows = diff_models("preact", xavier_stem, depth=8)
    init = [r for r in rows if r.key.startswith("init ")]
    assert [(r.axis, r.key, r.differs) for r in init] == [("init", "init stem.0.weight", True)]
    he, glorot = math.sqrt(2 / (16 * 9)), math.sqrt(2 / (3 * 9 + 16 * 9))
    assert float(init[0].a.split()[1]) == pytest.approx(he, rel=0.1)
    assert float(init[0].b.split()[1]) == pytest.approx(glorot, rel=0.1)
    summary = format_diff("preact", xavier_stem, rows).splitlines()[-1]
    assert summary == f"preact and {xavier_stem} differ in: init{GUARD} init in `vary`"
    assert not [r for r in diff_models("preact", "preact", depth=8) if r.differs]


def test_guard_refuses_designs_whose_shared_layers_start_differently(xavier_stem: str) -> None:
    configs = _configs(["preact", xavier_stem], depth=8)
    with pytest.raises(ValueError, match=r"^study 't' varies \['combinator'\], but preact and t_xavier_stem "
                                         r"\(depth 8\) also differ in 'init' on layers both have: stem.0.weight: std "
                                         r"0.1\d+ vs std 0.1\d+; declare \"init\" in the study's `vary`"):
        check_grid(configs, ["combinator"], study="t")
    check_grid(configs, ["combinator", "init"], study="t")  # declared
    # runs drawn from the global stream are not compared by value: a design's extra draws shift the others there
    check_grid([dataclasses.replace(c, init_stream="global") for c in configs], ["combinator"], study="t")
    # a Highway gate is drawn beside the plain net's convolutions and moves none of them (the degradation study's guard)
    check_grid(_configs(["highway", "plain"], depth=8), ["combinator", "placement"], param_tolerance=0.1, study="t")


# -- diff in the guard's language, at a shape of `bench cost` -------------------------------------------------------


@pytest.mark.usefixtures("clean_plugins")
def test_diff_summary_names_the_guard_axes_and_marks_the_rest_as_information(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A mixed-shortcut plugin against `preact`: the summary names what the guard checks (params, structure), and the
    family, the extra layers and the mix scalar only as information, and that declaring params is enough (the guard
    compares structures only in a study varying values only): a study varying params alone is accepted, one varying
    nothing is refused."""
    assert main(["diff", "preact", "preact_mix", "--depth", "8", "--plugin", str(MIXSHORT)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == (f"preact and preact_mix differ in: params, structure{GUARD} params in `vary` (params{COVERS}; "
                       "also, not guard axes (information only): family, layers, scalars")
    plugins.load_plugins([str(MIXSHORT)])
    configs = _configs(["preact", "preact_mix"], depth=8)
    check_grid(configs, ["params"], study="t")  # what the line says is enough: params covers the structure
    check_grid(configs, ["params", "structure"], study="t")
    with pytest.raises(ValueError, match=r"also differ in 'params'"):
        check_grid(configs, [], study="t")


def test_to_declare_is_the_guards_rule() -> None:
    """Any declared axis but a value's covers the structure; values only (init, dropout, ...) or nothing do not."""
    assert fairness.to_declare(["params", "structure"]) == ["params"]
    assert fairness.to_declare(["combinator", "init", "structure"]) == ["combinator", "init"]
    assert fairness.to_declare(["structure", "init"]) == ["init", "structure"]
    assert fairness.to_declare(["structure"]) == ["structure"]
    assert fairness.to_declare(["init", "dropout"]) == ["dropout", "init"]


def test_guard_axis_is_what_check_grid_checks() -> None:
    """One row per kind: a registry axis, a confound, the parameters, the structure and a shared layer's init are the
    guard's; the family, a layer one model has, a residual scalar and a link are not."""
    row = fairness.DiffRow
    guarded = [row("combinator", "axes.combinator", "add", "gated", True), row("init", "init", "a", "b", True),
               row("params", "parameters", 1, 2, True), row("structure", "structure: first difference", 1, 2, True),
               row("init", "init stem.0.weight", "s", "t", True)]
    assert [fairness.guard_axis(r) for r in guarded] == ["combinator", "init", "params", "structure", "init"]
    info = [row("family", "family", "a", "b", True), row("layers", "std x.proj", "-", "1", True),
            row("scalars", "x alpha", "-", "1", True), row("links", "reads x", "a", "b", True),
            row("init", "std stem.*", "1", "2", True)]
    assert [fairness.guard_axis(r) for r in info] == [None] * 5
    assert format_diff("a", "b", info).splitlines()[-1] == (
        "a and b differ in no guard axis (a study comparing them declares nothing in `vary`); also, not guard axes "
        "(information only): family, init, layers, links, scalars")


@pytest.mark.usefixtures("clean_plugins")
def test_diff_at_a_cost_shape_counts_the_parameters_bench_cost_counts(capsys: pytest.CaptureFixture[str]) -> None:
    """`diff --shape digits` builds at digits' one channel, as `bench cost --shape digits` does (269,434 parameters
    for a depth-20 preact where its 3-channel default has 269,722), and says the shape it built at."""
    from bench.runs import shapes

    assert main(["diff", "preact", "preact_mix", "--shape", "digits", "--plugin", str(MIXSHORT)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == ("built at: shape digits, one input 1x8x8, model arguments {'depth': 20, 'num_classes': 10, "
                      "'in_chans': 1} (as `bench cost --shape digits` builds it)")
    plugins.load_plugins([str(MIXSHORT)])
    shape = shapes.shape_of("digits")
    counted = [shapes.count(name, shape).params for name in ("preact", "preact_mix")]
    assert counted[0] == 269_434
    params = next(line.split() for line in out if line.startswith("parameters"))
    assert params[1:3] == [str(n) for n in counted]
    assert main(["diff", "preact", "preact_mix", "--depth", "20", "--plugin", str(MIXSHORT)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("built at: each variant's defaults (in_chans=3, num_classes=10; ")
    params_row = next(line for line in out if line.startswith("parameters"))
    assert params_row.split()[1:] == ["269722", "283299", "(+13,577,", "+5.0%)", "params"]


def test_diff_parameters_row_shows_the_difference_and_its_share() -> None:
    """The parameters row gives the second model's count with its difference from the first's and that difference's
    share of the first's, either sign; a count within the guard's tolerance is shown too, and says so; an equal
    count (shown with --all) and other rows stay bare."""
    row = fairness.DiffRow
    more = format_diff("a", "b", [row("params", "parameters", 269722, 283308, True)]).splitlines()
    assert more[1] == "parameters  269722  283308 (+13,586, +5.0%)  params"
    fewer = format_diff("a", "b", [row("params", "parameters", 2000, 1900, True)], show_all=True).splitlines()
    assert fewer[1] == "parameters  2000  1900 (-100, -5.0%)  params   <- differs"
    within = format_diff("a", "b", [row("params", "parameters", 2000, 1990, False)]).splitlines()
    assert within[1] == "parameters  2000  1990 (-10, -0.5%; within the guard's tolerance)  params"
    same = format_diff("a", "b", [row("params", "parameters", 7, 7, False),
                                  row("combinator", "axes.combinator", 7, 8, True)], show_all=True).splitlines()
    assert same[1:3] == ["parameters       7  7  params", "axes.combinator  7  8  combinator   <- differs"]


@pytest.mark.parametrize(("args", "message"), [
    (["--shape", "nope"], "error: shape: unknown shape 'nope'; shapes: gpt2_small"),
    (["--shape", "digits", "--depth", "0"], "error: depth must be an integer in 1..2000, got 0"),
    (["--shape", "gpt2_small"], "error: a: 'preact' does not build at shape 'gpt2_small'"),  # diff's argument a
])
def test_diff_bad_shape_exits_2_naming_the_field(args: list[str], message: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", "preact", "resnet", *args]) == 2
    assert capsys.readouterr().err.startswith(message)
