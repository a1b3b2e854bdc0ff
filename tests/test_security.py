"""A results folder is data, never code (docs/security.md): a name from a study file, a row or a command line never
writes outside the folder; a folder's plugins are never imported unless the user trusts them; Markdown written from
a folder holds no raw HTML tag."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from _nets import write
from _studies import digits_study

from bench.cli import main
from bench.runs.config import RunConfig
from bench.runs.names import file_name, slug
from bench.runs.results import COLUMNS, ResultsStore

pytestmark = pytest.mark.usefixtures("clean_plugins")  # tests/conftest.py

# Imported, it leaves a mark beside itself (and registers a variant, so that a load of it succeeds).
EVIL = """
from pathlib import Path

import variants

Path(__file__).with_suffix(".ran").write_text("imported")
variants.register_preset("evil_resnet", "resnet")
"""


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def add(store: ResultsStore, variant: str, seed: int, study: str | None, **row: object) -> str:
    """One run of resnet at depth 8 as bench records it; ``variant`` is what its row says."""
    cfg = RunConfig(variant="resnet", depth=8, seed=seed, study=study)
    full = {"run_id": cfg.run_id, "config_hash": cfg.config_hash(), "variant": variant, "depth": 8, "task": "digits",
            "seed": seed, "status": "ok", "final_train_acc": 0.9 + seed / 100, "final_val_acc": 0.8, "study": study,
            "torch_version": "2.14.1", "device_name": "cpu"} | row  # fmt: skip
    store.append({k: v for k, v in full.items() if k in COLUMNS},
                 {"run_id": cfg.run_id, "row": full, "config": cfg.to_dict(), "curves": {"train": [], "eval": []}})
    return cfg.run_id


# -- one sanitiser ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "why"), [
    ("../../pyproject", "holds a path separator"),
    ("/etc/passwd", "holds a path separator"),
    ("..", "starts with '.'"),
    (".hidden", "starts with '.'"),
    ("a\x00b", "holds a NUL character"),
    ("NUL", "is a device name Windows reserves"),
    ("com1.toml", "is a device name Windows reserves"),
    ("C:evil", "holds ':'"),
    ("a b", "holds ' '"),
    ("-rf", "starts with '-'"),
    ("trailing.", "ends with '.'"),
    ("", "is empty"),
    ("x" * 201, "is 201 characters long"),
])  # fmt: skip
def test_the_sanitiser_refuses_every_name_that_is_not_one_file_name(name: str, why: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(f"study {name!r} cannot be a file name: it {why}; a file")):
        file_name(name, "study")
    cleaned = slug(name)
    assert file_name(cleaned, "slug") == cleaned and "/" not in cleaned and len(cleaned) <= 200


def test_safe_names_pass_unchanged_and_long_slugs_stay_distinct() -> None:
    for name in ("degradation", "resnet20-d20-digits-6cf532bc-s0", "lesion-run+2", "timm_vit.augreg"):
        assert file_name(name, "x") == name == slug(name)
    assert slug("curves resnet d20 / eval loss") == "curves_resnet_d20_eval_loss"
    assert slug("x" * 300) != slug("x" * 299 + "y") and len(slug("x" * 300)) == 200


def test_a_study_name_that_climbs_out_writes_nothing_outside_the_folder(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """name = "../../pyproject" once overwrote proj/pyproject.toml with the study's text."""
    project = tmp_path / "proj"
    victim = write(project / "pyproject.toml", "[project]\nname = 'mine'\n")
    study = write(tmp_path / "s.toml", digits_study("../../pyproject", ["plain_mlp"]))
    code, _, err = cli(["sweep", str(study), "--results-dir", str(project / "results"), "--quiet"], capsys)
    assert code == 2 and err.startswith(f"error: study file {study}: its name '../../pyproject' names its stored copy")
    assert victim.read_text() == "[project]\nname = 'mine'\n" and sorted(p.name for p in project.iterdir()) == \
        ["pyproject.toml"]


def test_report_of_a_study_that_climbs_out_writes_nothing_outside(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "a" / "b" / "results"
    add(ResultsStore(root), "resnet", 0, None)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    code, _, err = cli(["report", "--results-dir", str(root), "--study", "../../../outside"], capsys)
    assert code == 2 and err.startswith("error: study '../../../outside' cannot be a file name: it holds a path")
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_a_row_or_run_json_whose_run_id_climbs_out_is_refused(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    store = ResultsStore(tmp_path / "res")
    run_id = add(store, "resnet", 0, None)
    text = store.leaderboard.read_text()
    store.leaderboard.write_text(text.replace(run_id, "../../escaped"))
    code, _, err = cli(["merge", str(store.root), "-o", str(tmp_path / "out")], capsys)
    assert code == 2 and f"error: {store.leaderboard} line 2 is damaged (run_id '../../escaped' holds a path " \
        "separator, but it names the file of the run's JSON)" in err
    assert not (tmp_path / "escaped.json").exists() and not (tmp_path / "out").exists()
    store.leaderboard.write_text(text)
    run = json.loads(store.run_path(run_id).read_text())
    store.run_path(run_id).write_text(json.dumps(run | {"run_id": "/etc/passwd"}))
    code, _, err = cli(["show", run_id, "--results-dir", str(store.root)], capsys)
    assert code == 2 and "its run_id '/etc/passwd' holds a path separator" in err


# -- a results folder never makes resbench import code --------------------------------------------------------


def planted(tmp_path: Path, study: str) -> tuple[Path, Path]:
    """A results folder someone sent: runs of ``study``, and a stored copy of it naming a plugin that marks its
    import."""
    folder = tmp_path / "sent"
    for seed in (0, 1):
        add(ResultsStore(folder), "resnet", seed, study)
    write(folder / "studies" / f"{study}.toml", f'name = "{study}"\nplugins = ["evil_plugin.py"]\n')
    plugin = write(folder / "studies" / "evil_plugin.py", EVIL)
    return folder, plugin.with_suffix(".ran")


@pytest.mark.parametrize("command", [
    ["reproduce", "degradation", "--preset", "no_such_preset"],  # stops before any run, after plugins would load
    ["leaderboard", "--study", "degradation"],
    ["compare", "--study", "degradation", "--baseline", "resnet"],
    ["report", "--study", "degradation"],
])  # fmt: skip
def test_a_planted_copy_of_a_shipped_study_imports_nothing(command: list[str], tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    folder, mark = planted(tmp_path, "degradation")
    code, _, err = cli([*command, "--results-dir", str(folder)], capsys)
    assert code == 2 and not mark.exists()
    if command[0] == "reproduce":  # the shipped study runs, never the folder's copy
        assert "error: study 'degradation' has no preset 'no_such_preset'; presets: cifar10" in err
    else:
        assert f"error: {folder / 'studies' / 'degradation.toml'} names plugins, but 'degradation' is a shipped " \
               "study, which names none" in err


def test_a_folder_study_of_its_own_imports_its_plugins_only_when_trusted_as_recorded(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, mark = planted(tmp_path, "mine")
    stored = folder / "studies" / "mine.toml"
    for command in (["leaderboard", "--study", "mine"], ["report", "--study", "mine"]):
        code, _, err = cli([*command, "--results-dir", str(folder)], capsys)
        assert code == 0, err
        assert "were not imported" not in err and "--trust-plugins" not in err  # the runs hold what they read
    assert not mark.exists()
    code, _, err = cli(["sweep", str(stored), "--results-dir", str(tmp_path / "mine"), "--dry-run"], capsys)
    assert code == 2 and not mark.exists()  # named by its path, a stored study is still data
    code, _, err = cli(["leaderboard", "--study", "mine", "--results-dir", str(folder), "--trust-plugins"], capsys)
    assert code == 2 and "mine.plugins.json is missing or unreadable), so --trust-plugins cannot check them" in err
    manifest = folder / "studies" / "mine.plugins.json"
    manifest.write_text(json.dumps({"files": {"evil_plugin.py": "0" * 64}, "modules": {}}))
    code, _, err = cli(["leaderboard", "--study", "mine", "--results-dir", str(folder), "--trust-plugins"], capsys)
    assert code == 2 and "plugin 'evil_plugin.py' is not the code the sweep recorded (sha256 000000000000, now" in err
    assert not mark.exists()
    digest = hashlib.sha256((folder / "studies" / "evil_plugin.py").read_bytes()).hexdigest()
    manifest.write_text(json.dumps({"files": {"evil_plugin.py": digest}, "modules": {}}))
    code, _, err = cli(["leaderboard", "--study", "mine", "--results-dir", str(folder), "--trust-plugins"], capsys)
    assert code == 0 and mark.exists()  # asked for, and the code the sweep recorded: imported


@pytest.mark.parametrize(("command", "noted"), [
    (["report", "--study", "mine"], True),  # the report runs the analysis step: it builds the models
    (["compare", "--study", "mine", "--baseline", "resnet"], False),
    (["leaderboard", "--study", "mine"], False),
])
def test_a_stored_study_with_an_analysis_step_notes_its_plugins_where_the_command_runs_it(
        command: list[str], noted: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Where --trust-plugins would change the output (a report of a study whose analysis builds the models), the
    note says how to import them; a command that reads the runs only says nothing."""
    folder, mark = planted(tmp_path, "mine")
    stored = folder / "studies" / "mine.toml"
    stored.write_text(stored.read_text(encoding="utf-8") + '[analysis]\nkind = "lesion"\n', encoding="utf-8")
    _, _, err = cli([*command, "--results-dir", str(folder)], capsys)
    note = (f"note: the study file {stored} is stored in the results folder {folder} and names plugins "
            "(evil_plugin.py) that were not imported: a results folder is data, not code. Pass --trust-plugins")
    assert (note in err) is noted, err
    assert not mark.exists()


def test_a_sweep_stores_its_plugins_with_their_hashes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plugin = write(tmp_path / "mine" / "toy.py", 'import variants\nvariants.register_preset("toy8", "resnet", '
                                                 'depth=8)\n')
    study = write(tmp_path / "mine" / "toy.toml", digits_study("toy", ["toy8"], plugins=["toy.py"]))
    res = tmp_path / "res"
    code, _, err = cli(["sweep", str(study), "--results-dir", str(res), "--quiet"], capsys)
    assert code == 0, err
    assert json.loads((res / "studies" / "toy.plugins.json").read_text()) == {
        "files": {"toy.py": hashlib.sha256(plugin.read_bytes()).hexdigest()}, "modules": {}}
    code, _, err = cli(["report", "--results-dir", str(res), "--study", "toy"], capsys)
    assert code == 0, err
    line = next(x for x in (res / "REPORT-toy.md").read_text().splitlines() if x.startswith("python -m bench "))
    assert line.endswith(f"sweep {res / 'studies' / 'toy.toml'} --trust-plugins --results-dir {res}")
    code, out, err = cli(line.split()[3:], capsys)  # the report's command: trusted, as recorded
    assert code == 0 and "already recorded, skipped" in out, err


# -- Markdown holds no raw tag ----------------------------------------------------------------------------------

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(2)>'


def test_a_report_with_script_payloads_holds_no_raw_tag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = ResultsStore(tmp_path)
    for seed in range(3):  # a variant's and a family's names are checked names; a device's name is shown as text
        add(store, "resnet", seed, "xss", device_name=SCRIPT)
        add(store, "resnet8", seed, "xss", device_name=IMG, final_train_acc=0.5)
    write(tmp_path / "studies" / "xss.toml", f"""
        name = "xss"
        [[claims]]
        id = "id{SCRIPT}"
        paper = '{IMG}'
        text = "{SCRIPT}"
        metric = "final_train_acc"
        compare = "device_name"
        a = "{SCRIPT}"
        b = '{IMG}'
        expect = "greater"
    """)
    code, _, err = cli(["report", "--results-dir", str(tmp_path), "--study", "xss"], capsys)
    assert code == 0, err
    text = (tmp_path / "REPORT-xss.md").read_text()
    assert "<script" not in text.lower() and "<img" not in text.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text  # shown, as text: in the table and the claim
    assert "**id&lt;script&gt;alert(1)&lt;/script&gt;** — \"&gt;&lt;img src=x onerror=alert(2)&gt;:" in text
