"""The command line: listing, bad input (exit 2, one line, nothing written), leaderboard/show, sweeps, perf."""

from __future__ import annotations

import csv
import re
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from _studies import combinator_study

import variants
from bench.cli import main
from bench.runs.config import RunConfig
from bench.runs.results import ResultsStore

FAST = ["--steps", "2", "--batch-size", "64", "--eval-every", "2", "--measure", "--quiet"]


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_list_prints_name_family_params(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["list", "resnet*"], capsys)
    assert code == 0 and "a run counts its own for its task's input channels" in err
    lines = {line.split()[0]: line.split()[1:] for line in out.splitlines()}
    assert lines["resnet20"] == ["resnet", "269,722"]
    assert lines["resnet50"] == ["resnet_imagenet", "25,557,032"]
    assert list(lines) == sorted(lines)


def test_list_says_why_a_runs_count_differs() -> None:
    """The note's example is true: resnet20 built for digits' 1-channel images has the count it names."""
    from bench.cli.models import PARAMS_NOTE

    one_channel = variants.create("resnet20", in_chans=1)
    assert f"resnet20 {sum(p.numel() for p in one_channel.parameters()):,}, not 269,722" in PARAMS_NOTE


def test_list_whole_registry_and_no_match(capsys: pytest.CaptureFixture[str]) -> None:
    _code, out, _ = run_cli(["list"], capsys)
    names = [line.split()[0] for line in out.splitlines()]
    for required in ("plain", "resnet", "highway", "preact", "densenet", "plain_mlp", "highway_mlp", "residual_mlp",
                     "preact_mlp", "fixup", "skipinit", "layerscale", "postln", "preln", "sandwich", "deepnorm",
                     "mixln", "gpt2_small", "densenet_bc100_k12", "preact_resnet164", "resnet1202"):
        assert required in names
    assert run_cli(["list", "zzz*"], capsys)[0] == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--variant", "resnet21"], "error: unknown variant 'resnet21'; did you mean"),
        (["--variant", "resnet", "--depth", "21"], "error: CIFAR ResNet depth must be 6n+2"),
        (["--variant", "resnet20", "--task", "imagenet"], "error: unknown task 'imagenet'; choose one of:"),
        (["--variant", "resnet20", "--lr", "-1"], "error: --lr must be a finite number in (0, 1000000], got -1.0"),
        (["--variant", "resnet20", "--recipe", "vaswani"], "error: unknown recipe 'vaswani'"),
        # --lr at its default value is still an --lr given: never silently replaced by --lr-base's scaled one
        (["--variant", "resnet20", "--lr", "0.1", "--lr-base", "0.05"], "error: give --lr (the peak lr itself, 0.1)"),
        (["--variant", "resnet20", "--model-arg", "shortcut=Z"], "error:"),
        (["--variant", "resnet20", "--model-arg", "colour=1"], "takes no keyword argument(s) ['colour']"),
        (["--variant", "preln", "--task", "text", "--data-path", "/nonexistent/file.txt"], "error:"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _out, err = run_cli(["run", *args, *FAST, "--results-dir", str(tmp_path)], capsys)
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "leaderboard.csv").exists() and not (tmp_path / "runs").exists()


def test_missing_and_corrupt_cifar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    base = ["run", "--variant", "resnet20", "--task", "cifar10", "--data-dir", str(data), *FAST,
            "--results-dir", str(tmp_path / "res")]
    code, _, err = run_cli(base, capsys)
    assert code == 2 and "python -m bench data download cifar10" in err
    with tarfile.open(data / "cifar-10-python.tar.gz", "w:gz"):
        pass  # a well-formed but wrong archive: its checksum cannot match
    code, _, err = run_cli(base, capsys)
    assert code == 2 and "corrupt" in err.lower()
    assert not (tmp_path / "res" / "leaderboard.csv").exists()


def test_unknown_option_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["run", "--variant", "resnet20", "--learning-rate", "0.1"])
    assert e.value.code == 2
    assert "unrecognized arguments: --learning-rate" in capsys.readouterr().err


@pytest.mark.slow  # interpreters started from scratch: about 20 s
def test_real_process_exit_code(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "bench", "run", "--variant", "nope", "--results-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error: unknown variant 'nope'")


def test_help_documents_every_option_with_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for flag in ("--variant", "--depth", "--task", "--epochs", "--steps", "--batch-size", "--optimizer", "--lr",
                 "--schedule", "--warmup-steps", "--seed", "--device", "--precision", "--compile",
                 "--channels-last", "--deterministic", "--target", "--results-dir", "--probe-every"):
        assert flag in out
    assert "(default: 0.1; a finite number > 0)" in out and "(default: 128; an integer >= 1)" in out  # and ranges


def test_learned_residual_scalars_are_recorded_at_every_evaluation(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Without --probe-every: ReZero's α (the Scaled join's β) of each unit at steps 2 and 4, the last equal to
    the trained weights; `bench show` prints them, one line per unit, one column per evaluation."""
    import torch

    from bench.runs import checkpoints

    args = ["run", "--variant", "rezero", "--depth", "8", "--steps", "4", "--eval-every", "2", "--batch-size", "16",
            "--save-checkpoint", "--measure", "--quiet", "--results-dir", str(tmp_path)]  # training only: no phases
    assert main(args) == 0
    run_id = ResultsStore(tmp_path).load_leaderboard()["run_id"][0]
    recorded = ResultsStore(tmp_path).load_run(run_id)["residual_scalars"]
    units = [f"stages.{i}.0.combine" for i in range(3)]
    assert [(r["step"], r["module"], r["scalar"]) for r in recorded] == [(s, u, "beta") for s in (2, 4) for u in units]
    state = torch.load(checkpoints.checkpoint_path(tmp_path, run_id), weights_only=True)["state_dict"]
    assert [r["value"] for r in recorded[3:]] == [state[f"{u}.beta"].item() for u in units]
    assert all(r["value"] != 0.0 for r in recorded)  # they start at 0 and learned
    capsys.readouterr()
    code, out, _ = run_cli(["show", run_id, "--results-dir", str(tmp_path)], capsys)
    table = out[out.index("learned residual scalars"):].splitlines()
    assert code == 0 and table[1].split() == ["step", "2", "step", "4"]
    assert [line.split()[:2] for line in table[3:]] == [[u, "beta"] for u in units]


def test_leaderboard_and_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for seed in ("0", "1"):
        assert main(["run", "--variant", "resnet20", "--seed", seed, *FAST, "--results-dir", str(tmp_path)]) == 0
    capsys.readouterr()
    code, out, _ = run_cli(["leaderboard", "--results-dir", str(tmp_path)], capsys)
    assert code == 0 and "resnet20" in out
    run_id = ResultsStore(tmp_path).load_leaderboard()["run_id"][0]
    code, out, _ = run_cli(["show", run_id[:-1], "--results-dir", str(tmp_path)], capsys)
    assert code == 2  # the prefix matches both seeds
    code, out, _ = run_cli(["show", run_id, "--results-dir", str(tmp_path)], capsys)
    assert code == 0 and run_id in out and "val_acc" in out
    code, _, err = run_cli(["leaderboard", "--sort", "nope", "--results-dir", str(tmp_path)], capsys)
    assert code == 2 and "cannot sort by 'nope'" in err


def test_leaderboard_never_pools_configs_differing_in_warmup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for warmup in ("0", "1"):
        for seed in ("0", "1"):
            args = ["run", "--variant", "resnet", "--depth", "8", "--seed", seed, "--warmup-steps", warmup,
                    "--warmup-kind", "constant"]
            assert main([*args, *FAST, "--results-dir", str(tmp_path)]) == 0
    capsys.readouterr()
    code, out, _ = run_cli(["leaderboard", "--results-dir", str(tmp_path)], capsys)
    assert code == 0
    lines = out.splitlines()
    header = lines[0].split()
    # Two configurations of two seeds each, told apart by the field that differs (and only that one).
    assert header[:4] == ["variant", "depth", "task", "warmup_steps"] and "warmup_kind" not in header
    rows = [dict(zip(header, line.split(), strict=False)) for line in lines[1:]]
    assert sorted((r["warmup_steps"], r["n_runs"]) for r in rows) == [("0", "2"), ("1", "2")]


@pytest.mark.slow
def test_sweep_runs_a_study_file_and_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = tmp_path / "tiny.toml"
    study.write_text(combinator_study(seeds=(0, 1)) + '[presets.quick]\nseed = [0]\n')
    res = tmp_path / "res"
    assert main(["sweep", str(study), "--preset", "quick", "--quiet", "--results-dir", str(res)]) == 0
    df = ResultsStore(res).load_leaderboard()
    assert sorted(df["variant"]) == ["plain", "resnet"] and set(df["study"]) == {"tiny"}
    assert main(["sweep", str(study), "--preset", "quick", "--results-dir", str(res)]) == 0
    assert capsys.readouterr().out.count("already recorded, skipped") == 2
    # A settled row (ok, diverged) is done; a run that raised runs again, its new row replacing the old; a
    # diverged one runs again with --retry-failed.
    store = ResultsStore(res)
    first, second = (r.dropna().to_dict() for _, r in store.load_leaderboard().iterrows())
    # (rows rewritten in place: an append that is not ok never replaces an ok run, it is kept in runs/failed/)
    store.replace({r["run_id"]: (r | {"status": status}, store.load_run(r["run_id"]))
                   for r, status in ((first, "error"), (second, "diverged"))})
    assert main(["sweep", str(study), "--preset", "quick", "--results-dir", str(res)]) == 0
    out = capsys.readouterr().out
    assert re.findall(r"(\S+): already recorded as (\w+)", out) == [(second["run_id"], "diverged")]
    assert store.load_leaderboard().set_index("run_id")["status"].to_dict() == {first["run_id"]: "ok",
                                                                               second["run_id"]: "diverged"}
    assert main(["sweep", str(study), "--preset", "quick", "--retry-failed", "--results-dir", str(res)]) == 0
    assert capsys.readouterr().out.count("skipped") == 1  # the ok one
    assert store.load_leaderboard()["status"].tolist() == ["ok", "ok"]
    assert main(["sweep", str(study), "--preset", "quick", "--no-resume", "--results-dir", str(res)]) == 0
    assert "skipped" not in capsys.readouterr().out and len(store.load_leaderboard()) == 2  # every run again
    # the full grid: its seed-0 runs are the quick preset's (one configuration, one run), seed 1 is new; the run
    # JSONs keep the --set the sweep was given, for the report's reproduce line
    assert main(["sweep", str(study), "--set", "steps=2", "--results-dir", str(res)]) == 0
    assert capsys.readouterr().out.count("already recorded, skipped") == 2
    board = ResultsStore(res).load_leaderboard()
    assert len(board) == 4 and sorted(board["seed"]) == [0, 0, 1, 1]
    made = {r["run_id"].rsplit("-s", 1)[1]: r.get("made_with") for r in ResultsStore(res).load_runs()}
    assert made == {"0": None, "1": {"set": ["steps=2"]}}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('name = "x"\n[grid]\nvariant = "resnet"\n', "grid entries must be non-empty lists"),
        ('name = "x"\n[grid]\nvariant = ["resnett"]\n', "unknown variant 'resnett'"),
        ('name = "x"\n[base]\ncolour = 1\n[grid]\nvariant = ["resnet"]\n',
         r"unknown run-config field\(s\) \['colour'\]"),
        ('name = "x"\nextra = 1\n', r"unknown top-level key\(s\) \['extra'\]"),
        ("name = \n", "is not valid TOML"),
    ],
)
def test_bad_study_files(tmp_path: Path, content: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    study = tmp_path / "bad.toml"
    study.write_text(content)
    code, _, err = run_cli(["sweep", str(study), "--results-dir", str(tmp_path / "res")], capsys)
    assert code == 2
    assert re.search(message, err)
    assert not (tmp_path / "res").exists()


def test_sweep_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["sweep", str(tmp_path / "none.toml")], capsys)[0] == 2
    code, _, err = run_cli(["reproduce", "nonexistent"], capsys)
    assert code == 2 and "shipped studies: cost, crosslayer, degradation" in err
    code, _, err = run_cli(["reproduce", "degradation", "--preset", "huge"], capsys)
    assert code == 2 and "has no preset 'huge'; presets: cifar10, cifar10_110, quick" in err


def test_shipped_study_expands_to_its_grid() -> None:
    from bench.sweeps.study import load_study

    configs = load_study("degradation").configs("quick")
    assert len(configs) == 36
    assert {c.variant for c in configs} == {"plain", "highway", "resnet", "preact"}
    assert {c.depth for c in configs} == {20, 56, 110} and {c.seed for c in configs} == {0, 1, 2}
    assert len({c.run_id for c in configs}) == 36


def test_a_presets_list_for_a_field_the_grid_lacks_is_an_axis_of_that_preset_alone() -> None:
    """normfree's data-scale preset crosses its variants with train_tokens; the study's other presets keep their run
    ids (their runs record no train_tokens); betas stays one value of a field that holds a list."""
    from bench.sweeps.study import load_study

    study = load_study("normfree")
    configs = study.configs("data_scale")
    assert sorted({(c.variant, c.train_tokens) for c in configs}) == [
        (v, n) for v in ("dyt", "preln") for n in (1024, 16384, 4_000_000)]
    assert len(configs) == 18 and len({c.run_id for c in configs}) == 18
    quick = study.configs("quick")
    assert {c.train_tokens for c in quick} == {None} and "preln-d6-tinytext-f600c3dc-s0" in {c.run_id for c in quick}
    assert {c.betas for c in study.configs("data_scale_paper")} == {(0.9, 0.95)}


def test_perf_overhead_prints_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["perf", "overhead", "--variant", "resnet", "--depth", "8", "--batch-size", "16",
                            "--timed-steps", "2", "--repeats", "2"], capsys)
    assert code == 0 and "throughput ratio harness/minimal = " in out


def test_recipes_listed(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["recipes"], capsys)
    assert code == 0 and "he2015_cifar: optimizer=sgd, lr=0.1" in out and "steps=64000" in out


def test_recipe_applies_and_explicit_flags_win(tmp_path: Path) -> None:
    from bench.cli import build_parser, config_from_args

    ns = build_parser().parse_args(["run", "--variant", "resnet110", "--recipe", "he2015_cifar_warmup", "--lr", "0.05"])
    c = config_from_args(ns)
    assert (c.steps, c.warmup_steps, c.warmup_kind, c.lr, c.milestones) == (64000, 400, "constant", 0.05, (0.5, 0.75))
    ns = build_parser().parse_args(["run", "--variant", "resnet20", "--recipe", "he2015_cifar", "--epochs", "2"])
    c = config_from_args(ns)
    assert c.steps is None and c.epochs == 2.0


def test_sweep_validates_every_model_first_and_goes_on_past_bad_data(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    study = tmp_path / "mixed.toml"
    study.write_text('name = "mixed"\n[base]\nsteps = 1\nbatch_size = 16\nmeasure = []\n'
                     '[grid]\nvariant = ["resnet", "densenet"]\ndepth = [8]\n')
    code, _, err = run_cli(["sweep", str(study), "--results-dir", str(tmp_path / "a")], capsys)
    assert code == 2 and "DenseNet depth must be 3n+4" in err and not (tmp_path / "a").exists()
    study.write_text('name = "data"\n[base]\nsteps = 1\nbatch_size = 16\nmeasure = []\nvariant = "resnet"\n'
                     f'depth = 8\ndata_dir = "{tmp_path / "nodata"}"\n[grid]\ntask = ["cifar10", "digits"]\n')
    code, out, err = run_cli(["sweep", str(study), "--quiet", "--results-dir", str(tmp_path / "b")], capsys)
    # some runs recorded, one refused: not the "nothing written" of bad input, so exit status 1
    assert code == 1 and "1 of 2 runs were not run" in err and "other runs' rows are recorded" in err and \
        "not run: " in out
    assert ResultsStore(tmp_path / "b").load_leaderboard()["task"].tolist() == ["digits"]


def test_batch_larger_than_the_training_split_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["run", "--variant", "resnet20", "--steps", "1", "--batch-size", "2000", "--measure",
                            "--results-dir", str(tmp_path)], capsys)
    assert code == 2 and "--batch-size 2000 exceeds the 1437 training samples" in err
    assert not (tmp_path / "leaderboard.csv").exists()


@pytest.mark.parametrize(
    "command",
    [["list"], ["run", "--variant", "x"], ["leaderboard"], ["show", "x"], ["probe", "--variant", "x"],
     ["diff", "a", "b"], ["plot"], ["report"], ["sweep", "s.toml"], ["reproduce", "degradation"],
     ["data", "download", "cifar10"], ["perf", "overhead", "--variant", "x"], ["recipes"]],
)
def test_every_command_takes_plugins(command: list[str]) -> None:
    from bench.cli import build_parser

    ns = build_parser().parse_args([*command, "--plugin", "a.py", "--plugin", "my.module"])
    assert ns.plugins == ["a.py", "my.module"]
    assert build_parser().parse_args(command).plugins is None


def test_sweep_and_reproduce_take_add_variant() -> None:
    from bench.cli import build_parser

    for command in (["sweep", "s.toml"], ["reproduce", "degradation"]):
        ns = build_parser().parse_args([*command, "--add-variant", "a", "--add-variant", "b"])
        assert ns.add_variants == ["a", "b"]


def test_a_malformed_claim_is_refused_when_the_study_is_loaded(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                                ) -> None:
    """Before any run, not at report time after the compute is spent."""
    study = tmp_path / "claims.toml"
    study.write_text('name = "c"\n[base]\nsteps = 1\nbatch_size = 16\nmeasure = []\n[grid]\nvariant = ["resnet"]\n'
                     'depth = [8]\n[[claims]]\nmetric = "nosuch"\n')
    code, _, err = run_cli(["sweep", str(study), "--results-dir", str(tmp_path / "res")], capsys)
    assert code == 2 and "claim #1: missing field(s) ['id', 'paper', 'text', 'compare', 'a', 'b', 'expect']" in err
    assert not (tmp_path / "res").exists()
    study.write_text('name = "c"\n[grid]\nvariant = ["resnet"]\ndepth = [8]\n[[claims]]\nid = "x"\npaper = "p"\n'
                     'text = "t"\nmetric = "final_val_acc"\ncompare = "dpeth"\na = "min"\nb = "max"\nexpect = "less"\n')
    code, _, err = run_cli(["sweep", str(study), "--results-dir", str(tmp_path / "res")], capsys)
    assert code == 2 and "claim 'x' names field(s) ['dpeth'] that no run records" in err


def test_a_library_error_is_a_bug_with_its_traceback_not_an_error_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """`error:` and exit status 2 are for resbench's own messages about bad input; a ValueError raised inside a
    library (here int() on a bad string, as a bug of ours would) propagates with its traceback."""
    from bench.cli import models

    monkeypatch.setattr(models.variants, "list_variants", lambda pattern: [int("not a number")])
    with pytest.raises(ValueError, match="invalid literal for int"):
        main(["list"])


def test_bad_values_name_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["run", "--variant", "preln", "--task", "copy", "--model-arg", "d_model=abc",
                            "--results-dir", str(tmp_path)], capsys)
    assert code == 2 and "d_model must be a positive integer, got 'abc'" in err
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "resnet-d8-digits-0123abcd-s0.json").write_text('{"run_id": "resnet-d8', encoding="utf-8")
    for command in (["show", "resnet-d8"], ["lesion", "resnet-d8"]):
        code, _, err = run_cli([*command, "--results-dir", str(tmp_path)], capsys)
        assert code == 2 and f"run JSON {runs / 'resnet-d8-digits-0123abcd-s0.json'} cannot be read" in err, command


@pytest.mark.slow  # interpreters started from scratch: about 15 s
def test_list_into_a_closed_pipe_exits_quietly() -> None:
    """`bench list | head -1`: the reader leaves early; no BrokenPipeError traceback."""
    done = subprocess.run(f"{shlex.quote(sys.executable)} -m bench list | head -1", shell=True, capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parent.parent)
    assert done.stdout.count("\n") == 1 and "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


def test_an_unknown_variant_says_which_plugins_are_loaded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["run", "--variant", "preln_dyt", "--results-dir", str(tmp_path)], capsys)
    assert code == 2 and "unknown variant 'preln_dyt'" in err
    assert "plugins loaded: none; a variant of your own is registered by its plugin: give --plugin FILE.py" in err


def test_compare_pairs_a_baseline_from_another_study_and_shows_missing_values_as_the_leaderboard(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A baseline recorded in study A serves study B of the same results directory when the configurations match
    in everything but the study; a missing value reads `—` in both tables."""
    store = ResultsStore(tmp_path)
    for study, variant, values in (("a", "preln", [2.0, 2.1, 2.2]), ("b", "postln", [2.5, 2.6, 2.4])):
        for seed, value in enumerate(values):
            cfg = RunConfig(variant=variant, depth=2, task="copy", seed=seed, study=study)
            row = {"run_id": cfg.run_id, "config_hash": cfg.config_hash(), "variant": variant, "depth": 2,
                   "task": "copy", "seed": seed, "status": "ok", "final_val_loss": value, "study": study,
                   "batch_size": cfg.batch_size, "lr": cfg.lr, "optimizer": cfg.optimizer}
            store.append(row, {"run_id": cfg.run_id, "row": row, "config": cfg.to_dict()})
    code, out, err = run_cli(["compare", "--results-dir", str(tmp_path), "--study", "b", "--baseline", "preln",
                              "--format", "csv"], capsys)
    assert code == 0, err
    post = [r for r in csv.DictReader(out.splitlines()) if r["variant"] == "postln"]
    assert len(post) == 1 and float(post[0]["diff"]) == pytest.approx(0.4) and post[0]["p"] != ""
    code, out, err = run_cli(["compare", "--results-dir", str(tmp_path), "--study", "b", "--baseline", "preln",
                              "--baseline-study", "nope"], capsys)
    assert code == 2 and "no runs of study 'nope'" in err
    code, out, _ = run_cli(["leaderboard", "--results-dir", str(tmp_path), "--metrics", "final_val_loss",
                            "peak_mem_mb"], capsys)
    assert code == 0 and "NaN" not in out and "nan" not in out and "—" in out
