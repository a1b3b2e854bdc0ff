"""Plugins (bench.runs.plugins): a variant defined outside resbench runs everywhere a shipped one does.

Loaded by --plugin FILE.py / MODULE / MODULE:FUNCTION, $RESBENCH_PLUGINS and the `resbench.variants` entry
points of installed distributions (a hand-written dist-info, what installers write, seen by a subprocess).
Every failure (import, duplicate name, a model that fails a forward on the task) is one `error:` line naming
the plugin, exit 2, nothing written. The README's section is run as written, on a tiny copy of its study.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from _nets import toy, write
from _studies import combinator_study

import variants
from bench.analysis.studyfile import find_study
from bench.cli import main
from bench.runs import plugins
from bench.runs.results import ResultsStore
from bench.sweeps import fairness
from bench.sweeps.study import Study, load_study

REPO = Path(__file__).resolve().parents[1]
FAST = ["--steps", "2", "--batch-size", "16", "--eval-every", "2", "--measure", "--quiet", "--chance-band", "0"]
# (--chance-band 0: about the harness, not learning; a 2-step run ends at chance, bench.runs.chance)



pytestmark = pytest.mark.usefixtures("clean_plugins")  # tests/conftest.py


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tiny_study(tmp_path: Path) -> Path:
    return write(tmp_path / "tiny.toml", combinator_study(chance_band=None))


# -- loading ----------------------------------------------------------------------------------------------


def test_plugin_file_runs_is_recorded_and_unloaded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plugin = write(tmp_path / "toy_blocks.py", toy())
    res = tmp_path / "res"
    code, out, err = cli(["list", "toy*", "--plugin", str(plugin)], capsys)
    assert code == 0, err
    assert out.split() == ["toy_half", "toy", "75,290", "plugin", str(plugin)]
    assert "toy_half" not in variants.list_variants()  # a command unloads what it loaded

    code, _, err = cli(["run", "--variant", "toy_half", *FAST, "--plugin", str(plugin), "--results-dir", str(res)],
                       capsys)
    assert code == 0, err
    run = ResultsStore(res).load_runs()[0]
    assert run["row"]["variant"] == "toy_half" and run["row"]["family"] == "toy" and run["row"]["status"] == "ok"
    (record,) = run["plugins"]
    assert record["spec"] == str(plugin) and record["file"] == str(plugin.resolve())
    assert record["sha256"] == sha256(plugin) and record["variants"] == ["toy_half"]
    assert record["origin"] == "--plugin" and record["reload"] == str(plugin.resolve())


def test_parameter_count_of_the_toy_plugin(tmp_path: Path) -> None:
    (plugin,) = plugins.load_plugins([str(write(tmp_path / "toy_blocks.py", toy()))])
    assert plugin.variants == ("toy_half",) and plugins.plugin_of("toy_half") == plugin
    with torch.device("meta"):
        count = {n: sum(p.numel() for p in variants.create(n, depth=8).parameters()) for n in ("resnet", "toy_half")}
    assert count["toy_half"] == count["resnet"] == 75_290  # a parameter-free combinator: the same net


def test_module_and_module_function_specs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "mods" / "toy_mod.py", toy("toy_mod"))
    write(tmp_path / "mods" / "toy_pkg" / "__init__.py", "import variants\n\ndef register():\n" + textwrap.indent(
        toy("toy_fn").replace("import variants\n", ""), "    "))
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    code, out, err = cli(["list", "toy_*", "--plugin", "toy_mod", "--plugin", "toy_pkg:register"], capsys)
    assert code == 0, err
    assert [line.split()[0] for line in out.splitlines()] == ["toy_fn", "toy_mod"]
    assert "plugin toy_pkg:register" in out and "plugin toy_mod" in out
    (fn,) = plugins.load_plugins(["toy_pkg:register"])
    assert fn.kind == "module" and fn.file == str((tmp_path / "mods" / "toy_pkg" / "__init__.py").resolve())
    assert fn.reload == "toy_pkg:register"


def test_env_var_and_the_same_file_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    a = write(tmp_path / "a.py", toy("toy_a"))
    b = write(tmp_path / "b.py", toy("toy_b"))
    monkeypatch.setenv("RESBENCH_PLUGINS", f"{a}{os.pathsep}{os.pathsep}{b}")
    # b again on the command line, spelled differently: loaded once, no duplicate-name error.
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(["list", "toy_*", "--plugin", "./b.py"], capsys)
    assert code == 0, err
    assert out.splitlines()[0].split()[-2:] == ["plugin", str(a)]
    assert out.splitlines()[1].split()[-2:] == ["plugin", str(b)]  # the first spelling that loaded it
    first = plugins.load_plugins([str(a), "a.py", str(a)], origin=plugins.ENV_VAR)
    assert len(first) == 1 and plugins.load_plugins(["./a.py"]) == first
    monkeypatch.syspath_prepend(str(tmp_path))
    assert plugins.load_plugins(["a"]) == first  # the module a.py is the file already loaded


def test_entry_point_of_an_installed_distribution(tmp_path: Path) -> None:
    """A dist-info directory (as pip writes it) on PYTHONPATH; the real importlib.metadata of a fresh process."""
    site = tmp_path / "site"
    write(site / "toy_ep_pkg" / "__init__.py", "import variants\n\ndef register():\n" + textwrap.indent(
        toy("toy_ep_fn").replace("import variants\n", ""), "    "))
    write(site / "toy_ep_mod.py", toy("toy_ep_mod"))
    write(site / "toy_ep-0.1.dist-info" / "METADATA", "Metadata-Version: 2.1\nName: toy-ep\nVersion: 0.1\n")
    write(site / "toy_ep-0.1.dist-info" / "entry_points.txt",
          "[resbench.variants]\nfn = toy_ep_pkg:register\nmod = toy_ep_mod\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "OMP_NUM_THREADS": "1"}
    env.pop("RESBENCH_PLUGINS", None)
    res = tmp_path / "res"
    proc = subprocess.run([sys.executable, "-m", "bench", "run", "--variant", "toy_ep_mod", *FAST,
                           "--results-dir", str(res)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    records = {r["spec"]: r for r in json.loads(next((res / "runs").glob("*.json")).read_text())["plugins"]}
    assert records["toy_ep_pkg:register"]["variants"] == ["toy_ep_fn"]
    assert records["toy_ep_pkg:register"]["origin"] == "entry point 'fn' of toy-ep 0.1"
    assert records["toy_ep_mod"]["variants"] == ["toy_ep_mod"]
    assert records["toy_ep_mod"]["sha256"] == sha256(site / "toy_ep_mod.py")


# -- every failure: one error line naming the plugin, exit 2, nothing written ----------------------------------


BAD = {
    "import": ("import toy_missing_dependency\n",
               r"plugin '{p}' failed to load: ModuleNotFoundError: No module named 'toy_missing_dependency' "
               r"\(bad\.py:1\)"),
    "syntax": ("x = (\n", r"plugin '{p}' failed to load: SyntaxError: "),
    "raises": (toy("toy_partial") + "raise RuntimeError('boom')\n",
               r"plugin '{p}' failed to load: RuntimeError: boom \(bad\.py:\d+\)"),
    "shipped-name": (toy("resnet20"), r"plugin '{p}' registers variant 'resnet20', which resbench's own variant "
                                      r"'resnet20' \(variants\.cifar\) already has; pick another name"),
    "nothing": ("import variants\n", r"plugin '{p}' registered nothing: it must call variants\.register\(\.\.\.\) "
                                     r"\(a variant\) or variants\.register_norm"),
    # Digits have 1 channel: a net built for 3 fails the forward check.
    "forward": (toy().replace("build_cifar(spec,", "build_cifar(variants.CifarSpec(depth=8, in_chans=3),"),
                r"plugin '{p}': variant 'toy_half' fails a forward on a batch of task 'digits' \(input shape "
                r"\(2, 1, 8, 8\).*\): RuntimeError: .*channels"),
    "build": (toy().replace("def unit(", "raise TypeError('no such layer')\n    def unit("),
              r"plugin '{p}': TypeError: no such layer \(bad\.py:\d+\)"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_plugins(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, message = BAD[case]
    plugin = write(tmp_path / "bad.py", source)
    res = tmp_path / "res"
    code, _, err = cli(["run", "--variant", "toy_half", *FAST, "--plugin", str(plugin), "--results-dir", str(res)],
                       capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: plugin ")
    assert re.match("error: " + message.format(p=re.escape(str(plugin))), err), err
    assert not res.exists()
    assert "toy_partial" not in variants.list_variants()  # a failed plugin leaves nothing registered


def test_two_plugins_registering_one_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = write(tmp_path / "a.py", toy()), write(tmp_path / "b.py", toy())
    code, _, err = cli(["list", "--plugin", str(a), "--plugin", str(b)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.strip() == (f"error: plugin '{b}' registers variant 'toy_half', which plugin '{a}' ({a.resolve()}) "
                           "already registered; rename one of them")


def test_bad_specs_and_origin_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(["list", "--plugin", str(tmp_path / "none.py")], capsys)
    assert code == 2 and err.startswith(f"error: plugin '{tmp_path / 'none.py'}': no such file")
    code, _, err = cli(["recipes", "--plugin", "toy_no_such_module"], capsys)
    assert code == 2 and "error: plugin 'toy_no_such_module': no module named 'toy_no_such_module'" in err
    code, _, err = cli(["list", "--plugin", "not a module"], capsys)
    assert code == 2 and "not a Python file (FILE.py), a module name or module:function" in err
    monkeypatch.setenv("RESBENCH_PLUGINS", str(write(tmp_path / "bad.py", "import toy_nope\n")))
    code, _, err = cli(["list"], capsys)
    assert code == 2 and f"error: plugin '{tmp_path / 'bad.py'}' (from RESBENCH_PLUGINS) failed to load" in err


def test_forward_check_leaves_model_and_random_stream_untouched(tmp_path: Path) -> None:
    from bench.runs.tasks import get

    plugins.load_plugins([str(write(tmp_path / "toy_blocks.py", toy()))])
    model = variants.create("toy_half", num_classes=10, in_chans=1).train()
    task = get("digits")
    state = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    plugins.check_forward("toy_half", model, task)
    assert model.training and torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())  # BN statistics included


# -- sweeps and studies: --add-variant ----------------------------------------------------------------------


def test_sweep_add_variant_runs_it_in_the_grid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plugin = write(tmp_path / "toy_blocks.py", toy())
    res = tmp_path / "res"
    code, out, err = cli(["sweep", str(tiny_study(tmp_path)), "--plugin", str(plugin), "--add-variant", "toy_half",
                          "--quiet", "--results-dir", str(res)], capsys)
    assert code == 0, err
    assert "'tiny' with toy_half added: 3 runs" in out  # a study without presets: no "(full)"
    board = ResultsStore(res).load_leaderboard()
    assert sorted(board["variant"]) == ["plain", "resnet", "toy_half"] and set(board["study"]) == {"tiny"}


def test_sweep_refuses_a_plugin_failing_forward_before_writing(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    wrong_head = toy().replace("build_cifar(spec,", "build_cifar(variants.CifarSpec(depth=8, num_classes=3),")
    plugin = write(tmp_path / "bad.py", wrong_head)
    res = tmp_path / "res"
    code, _, err = cli(["sweep", str(tiny_study(tmp_path)), "--plugin", str(plugin), "--add-variant", "toy_half",
                        "--results-dir", str(res)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith(f"error: plugin '{plugin}': variant 'toy_half' fails a forward on a batch of task 'digits'")
    assert not res.exists()  # not even the study file's copy


def test_added_variant_differing_in_an_undeclared_axis_is_refused(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    plugin = write(tmp_path / "toy_blocks.py", toy(init="xavier"))
    res = tmp_path / "res"
    code, _, err = cli(["sweep", str(tiny_study(tmp_path)), "--plugin", str(plugin), "--add-variant", "toy_half",
                        "--results-dir", str(res)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and not res.exists()
    assert "study 'tiny' varies ['combinator'], but plain and toy_half (depth 8) also differ in 'init'" in err
    assert "The variant(s) you added (toy_half) must differ from the study's own only in what it varies " \
           "(combinator)" in err
    assert "python -m bench diff A B --plugin FILE.py" in err and "--add-variant" in err


def test_added_variant_of_a_study_without_runs_gets_the_same_refusal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # shattered measures models at initialisation (no grid): its variants x depths pass the same fairness check.
    # Its shipped file, at depths 8 and 14 instead of 20, 56 and 110: the check is the same on smaller nets.
    import bench.analysis.studyfile

    shipped = find_study("shattered").read_text(encoding="utf-8")
    small = shipped.replace("depths = [20, 56, 110]", "depths = [8, 14]", 1)
    assert small != shipped
    write(tmp_path / "studies" / "shattered.toml", small)
    monkeypatch.setattr(bench.analysis.studyfile, "STUDIES_DIR", tmp_path / "studies")
    plugin = write(tmp_path / "toy_blocks.py", toy(init="xavier"))
    res = tmp_path / "res"
    code, _, err = cli(["reproduce", "shattered", "--plugin", str(plugin), "--add-variant", "toy_half",
                        "--results-dir", str(res)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and not res.exists()
    assert "also differ in 'init'" in err
    assert "The variant(s) you added (toy_half) must differ from the study's own only in what it varies " in err
    assert "python -m bench diff A B --plugin FILE.py" in err


def test_add_variant_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = str(tiny_study(tmp_path))
    code, _, err = cli(["sweep", study, "--add-variant", "toy_half", "--results-dir", str(tmp_path / "r")], capsys)
    assert code == 2 and "cannot add variant 'toy_half' to study 'tiny': unknown variant 'toy_half'" in err
    assert "add --plugin FILE.py (or set RESBENCH_PLUGINS)" in err
    code, _, err = cli(["sweep", study, "--add-variant", "resnet", "--results-dir", str(tmp_path / "r")], capsys)
    assert code == 2 and "study 'tiny' already runs variant(s) ['resnet'] (in its grid)" in err
    code, _, err = cli(["reproduce", "degradation", "--add-variant", "resnet56", "--add-variant", "resnet56"],
                       capsys)
    assert code == 2 and "variant(s) ['resnet56'] added to study 'degradation' more than once" in err
    assert not (tmp_path / "r").exists()


def test_with_variants_extends_grid_base_and_presets_and_keeps_the_study() -> None:
    study = Study(name="s", description="", base={"task": "digits"}, grid={"variant": ["plain"], "depth": [8]},
                  presets={"q": {"variant": ["resnet"], "steps": 1}, "r": {"steps": 2}}, vary=("placement",))
    added = study.with_variants(["preact"])
    assert study.grid["variant"] == ["plain"] and study.presets["q"]["variant"] == ["resnet"] and not study.added
    assert added.grid["variant"] == ["plain", "preact"] and added.presets["q"]["variant"] == ["resnet", "preact"]
    assert added.presets["r"] == {"steps": 2} and added.added == ("preact",)
    assert [c.variant for c in added.configs("q")] == ["resnet", "preact"]
    in_base = Study(name="b", description="", base={"variant": "plain"}, grid={"depth": [8]})
    assert in_base.with_variants(["resnet"]).grid["variant"] == ["plain", "resnet"]
    assert "variant" not in in_base.with_variants(["resnet"]).base and in_base.base == {"variant": "plain"}
    assert study.with_variants([]) is study


# -- the registry helpers plugins rely on ---------------------------------------------------------------------


def test_unregister_and_duplicate_error(tmp_path: Path) -> None:
    (plugin,) = plugins.load_plugins([str(write(tmp_path / "p.py", toy() + '\nvariants.register_preset('
                                                                          '"toy_half14", "toy_half", depth=14)\n'))])
    assert plugin.variants == ("toy_half", "toy_half14")
    assert variants.describe("toy_half")["module"] == plugin.module
    with pytest.raises(variants.DuplicateVariantError, match=rf"'toy_half' is already registered \(by module "
                                                             rf"{plugin.module}\)"):
        variants.register("toy_half", family="x", paper="x")(lambda: torch.nn.Identity())
    variants.unregister("toy_half")  # its preset goes with it
    assert not variants.list_variants("toy_half*")
    with pytest.raises(ValueError, match="unknown variant 'toy_half'"):
        variants.unregister("toy_half")
    plugins.unload(plugin)  # names already gone: nothing to do, and no error
    assert plugins.loaded() == []


# -- the README section, as written ---------------------------------------------------------------------------


def readme_section() -> tuple[str, list[str]]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Benchmark your own residual design", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    command = re.search(r"```sh\n(.*?)```", section, re.S)
    assert code and command, "the README section needs a ```python plugin and a ```sh command"
    return code.group(1), shlex.split(command.group(1))


def test_readme_plugin_and_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The command runs as printed, from a directory holding the plugin; only the study's run length is cut:
    its shipped file (grid, `vary`, tolerance, claims) with the quick preset at 2 steps, depth 8, one seed."""
    import bench.sweeps.study

    code, argv = readme_section()
    assert argv[:3] == ["python", "-m", "bench"] and argv[3:6] == ["reproduce", "degradation", "--preset"]
    plugin_name = argv[argv.index("--plugin") + 1]
    variant = argv[argv.index("--add-variant") + 1]
    results = tmp_path / argv[argv.index("--results-dir") + 1]
    write(tmp_path / plugin_name, code)
    shipped = find_study("degradation").read_text(encoding="utf-8")
    tiny = re.sub(r"\[presets\.quick\][^\[]*", "[presets.quick]\nsteps = 2\neval_every = 2\nprobe_every = 2\n"
                  "batch_size = 32\nmeasure = []\nchance_band = 0.0\ndepth = [8]\nseed = [0]\n\n", shipped, count=1)
    assert tiny != shipped
    write(tmp_path / "studies" / "degradation.toml", tiny)
    monkeypatch.setattr(bench.analysis.studyfile, "STUDIES_DIR", tmp_path / "studies")
    monkeypatch.chdir(tmp_path)

    assert main(argv[3:]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f"with {variant} added: 5 runs" in out
    board = ResultsStore(results).load_leaderboard()
    assert sorted(board["variant"]) == sorted([*load_study("degradation").grid["variant"], variant])
    assert set(board["status"]) == {"ok"}
    report = (results / "REPORT-degradation.md").read_text(encoding="utf-8")
    assert re.search(rf"^\| {variant} \| 8 \| digits \| 1/1 \|", report, re.M)
    # its reproduce line gives the variant and the plugin that registers it (a shipped study names no plugin)
    lines = [line for line in report.splitlines() if line.startswith("python -m bench reproduce")]
    assert any(line.startswith(f"python -m bench reproduce degradation --preset quick --add-variant {variant} "
                               f"--plugin {tmp_path / plugin_name} ") for line in lines), lines
    run = next(r for r in ResultsStore(results).load_runs() if r["row"]["variant"] == variant)
    (record,) = run["plugins"]
    assert record["sha256"] == sha256(tmp_path / plugin_name) and record["variants"] == [variant]
    # The gate declares its residual scalar (no probe code): recorded at the evaluation, one number per unit.
    assert [(r["step"], r["module"], r["scalar"]) for r in run["residual_scalars"]] == \
        [(2, f"stages.{i}.0.combine", "alpha") for i in range(3)]

    # What the section quotes of `bench diff resnet gated_resnet --depth 56`: its parameters row, 1,008 gate
    # parameters more than resnet, 0.1%, within the guard's tolerance.
    plugins.load_plugins([plugin_name])
    with torch.device("meta"):
        n = {v: sum(p.numel() for p in variants.create(v, depth=56).parameters()) for v in ("resnet", variant)}
    assert n[variant] - n["resnet"] == 1008 and round(1008 / n["resnet"], 3) == 0.001
    quoted = f"`{n[variant]} (+1,008, +0.1%; within the guard's tolerance)`"
    assert quoted in " ".join((REPO / "README.md").read_text().split())
    assert fairness.format_diff("resnet", variant, [fairness.DiffRow("params", "parameters", n["resnet"], n[variant],
                                                                     False)]).splitlines()[1].split(None, 2)[2] == \
        f"{quoted.strip('`')}  params"


@pytest.mark.slow  # measurement subprocesses of a plugin variant: about 30 s
def test_a_plugin_variant_gets_its_cost_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CPU memory probe runs in a child process of its own: the plugin is loaded there too, so a plugin's run
    has a peak-memory figure like a shipped variant's (and `perf scaling` passes the plugin on likewise)."""
    plugin = write(tmp_path / "toy.py", toy())
    code, _, err = cli(["run", "--variant", "toy_half", "--plugin", str(plugin), "--steps", "1", "--batch-size", "8",
                        "--measure", "memory", "--quiet", "--results-dir", str(tmp_path / "res")], capsys)
    assert code == 0, err
    run = ResultsStore(tmp_path / "res").load_runs()[0]
    assert "error" not in run["measurements"]["memory"], run["measurements"]["memory"]
    assert run["row"]["peak_mem_mb"] > 0 and run["row"]["mem_method"] == "cpu_rss_peak_minus_baseline_subprocess"


# -- docs/plugins.md's pre-activation plugin, as written ---------------------------------------------------------


def docs_block(marker: str) -> str:
    text = (REPO / "docs" / "plugins.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(.*?)```", text.split(marker, 1)[1], re.S)
    assert block, f"docs/plugins.md needs a ```python block after {marker!r}"
    return block.group(1)


def test_docs_preact_plugin_is_preact_but_for_its_shortcut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The documented pre-activation plugin, with the public stem and head: `bench diff` finds its first structural
    difference in a shortcut, every parameter outside the shortcuts is `preact`'s, and with `preact`'s weights it
    computes `preact`'s output (a = 1); `show-variant` names its shortcut and the input each unit's reads."""
    write(tmp_path / "mixshort.py", docs_block("the pre-activation plugin"))
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(["diff", "preact", "preact_mix", "--depth", "20", "--plugin", "mixshort.py"], capsys)
    assert code == 0, err
    row = re.search(r"^parameters\s+269722\s+(283299 \(\+13,577, \+5\.0%\))\s+params$", out, re.M)
    assert row is not None, out
    assert f"as `{row[1]}`" in " ".join((REPO / "docs" / "plugins.md").read_text().split())  # what the docs quote
    differs = [line.split() for line in out.splitlines() if line.endswith("<- differs")]
    assert differs == [["-", "Conv2d", "1x1", "weight[16,16,1,1]", "<-", "differs"],
                       ["-", "MixShortcut", "a[]", "<-", "differs"]]

    code, out, err = cli(["show-variant", "preact_mix", "--plugin", "mixshort.py"], capsys)
    assert code == 0, err
    assert ("shortcut (what each join receives as x):\n"
            "    MixShortcut(identity, Conv2d 1x1, a[]), reading ReLU(BN(x)): 1 unit\n"
            "    MixShortcut(identity, Conv2d 1x1, a[]), reading x: 6 units\n"
            "    MixShortcut(PadShortcut, Conv2d 1x1/2, a[]), reading ReLU(BN(x)): 2 units\n"
            'gate: none (no module declares residual_role = "gate")\n') in out

    plugins.load_plugins(["mixshort.py"])
    torch.manual_seed(0)
    ours, theirs = variants.create("preact_mix", depth=20).eval(), variants.create("preact", depth=20).eval()
    extra = {k for k in ours.state_dict() if ".shortcut." in k}
    assert set(ours.state_dict()) - extra == set(theirs.state_dict())
    missing, unexpected = ours.load_state_dict(theirs.state_dict(), strict=False)
    assert set(missing) == extra and not unexpected
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=0)


def test_show_variant_names_shortcuts_and_gates(capsys: pytest.CaptureFixture[str]) -> None:
    """One case per kind of line: a gate, a dropped shortcut, post-activation units (no pre-activation to read)."""
    code, out, _ = cli(["show-variant", "highway20"], capsys)
    assert code == 0
    assert "shortcut (what each join receives as x):\n    identity: 7 units\n    PadShortcut: 2 units\n" \
           "gate:\n    TransformGate: 9 units\n" in out
    code, out, _ = cli(["show-variant", "plain20"], capsys)
    assert "shortcut (what each join receives as x):\n    none (the join drops it: y = F(x)): 9 units\n" in out


def test_a_stored_study_notes_its_untrusted_plugins_once_per_command(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`sweep` of a study stored in a results folder reads the study twice (the command line loads plugins, then
    the API it calls): the note that its plugins were not imported is printed once; a second command notes again."""
    folder = tmp_path / "res"
    (folder / "runs").mkdir(parents=True)  # a results folder: data
    write(folder / "studies" / "mine.py", "raise SystemExit('a stored plugin was imported')\n")
    stored = write(folder / "studies" / "mine.toml", 'name = "mine"\nplugins = ["mine.py"]\n[grid]\n'
                   'variant = ["resnet", "mine_net"]\ndepth = [8]\nseed = [0]\n')
    note = (f"note: the study file {stored} is stored in the results folder {folder} and names plugins (mine.py) "
            "that were not imported: a results folder is data, not code. Pass --trust-plugins to import them (each "
            "checked against the content hash its sweep recorded), or --plugin FILE to use your own copy\n")
    for _ in range(2):
        code, _, err = cli(["sweep", str(stored), "--results-dir", str(folder), "--dry-run"], capsys)
        assert code == 2 and err.count("note: the study file") == 1
        assert err.startswith(note) and "error: unknown variant 'mine_net'" in err
