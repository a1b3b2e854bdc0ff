"""The commands that read results, as fast as the data allows and drawing the same thing: no torch or variant module
imported, the registry's static index current, each run JSON parsed once, the run heads' cache never trusted over
the run JSONs, figures drawn in parallel the same files as in turn."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

import variants  # noqa: F401  (this process has the registry: the reference path of the figures)
from bench.analysis.claims import least_squares_slope
from bench.analysis.stats import t_quantile, t_tail, two_groups
from bench.cli import main
from bench.reports import report
from bench.reports.parallel import draw_all
from bench.reports.plotdata import registry_entries
from bench.runs import reading, registry_index
from bench.runs.results import ResultsStore

REPO = Path(__file__).resolve().parent.parent
STUDIES = ("lesion", "warmup")  # small committed studies: ResNet presets on digits, Post-/Pre-LN on text


def shipped_runs(dst: Path, studies: tuple[str, ...] = STUDIES) -> Path:
    """A results folder of the committed runs of ``studies`` (shipped variants), with their study files and
    analyses."""
    src = ResultsStore(REPO / "results")
    rows = [r for r in src.rows() if r["study"] in studies]
    ResultsStore(dst).write_all(rows, {})
    (dst / "runs").mkdir()
    for r in rows:
        shutil.copy2(src.run_path(r["run_id"]), dst / "runs")
    for study in studies:
        for part in (f"studies/{study}.toml", f"analysis/{study}"):
            if (REPO / "results" / part).is_file():
                (dst / part).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / "results" / part, dst / part)
            elif (REPO / "results" / part).is_dir():
                shutil.copytree(REPO / "results" / part, dst / part)
    return dst


def test_the_registry_index_is_current() -> None:
    assert registry_index.INDEX.read_text(encoding="utf-8") == registry_index.render(registry_entries()), \
        "the registry changed: python scripts/pin_variants.py --index"


BLOCKED = textwrap.dedent("""
    import importlib.abc, sys

    class NoTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError(f"{name} is not importable in this test")

    sys.meta_path.insert(0, NoTorch())
    from bench.cli import main
    root, site, studies = sys.argv[1], sys.argv[2], sys.argv[3:]
    for argv in (["leaderboard"], ["compare", "--study", "warmup", "--baseline", "preln"],
                 *(["report", "--study", s, "--jobs", "2"] for s in studies),
                 ["plot", "--study", "lesion", "--jobs", "2"], ["site", "-o", site]):
        code = main([*argv, "--results-dir", root])
        assert code == 0, (argv, code)
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "variants"))
    print("loaded:", loaded)
""")


def test_read_commands_need_neither_torch_nor_the_variant_modules_and_draw_what_the_registry_draws(
        tmp_path: Path) -> None:
    """The no-torch path (the registry's static index, run JSONs parsed once, two drawing processes) writes the
    same report and byte-identical figures as the reference path (the imported registry, one process)."""
    pytest.importorskip("plotly", reason="bench site needs plotly: pip install 'resbench[site]'")
    root = shipped_runs(tmp_path / "results")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "MPLBACKEND": "Agg"}
    env.pop("RESBENCH_PLUGINS", None)
    done = subprocess.run([sys.executable, "-c", BLOCKED, str(root), str(tmp_path / "site"), *STUDIES], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "loaded: []" in done.stdout
    assert (tmp_path / "site" / "index.html").is_file()
    fast = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.suffix in (".png", ".md")}
    assert {p.as_posix() for p in fast if p.suffix == ".md"} == {f"REPORT-{s}.md" for s in STUDIES}
    assert len(fast) > 2 * len(STUDIES) + 6
    for study in STUDIES:  # the reference: this process, the registry imported, one process drawing
        report.write_report(root, study, workers=1)
    again = {p: (root / p).read_bytes() for p in fast}
    assert [str(p) for p in fast if fast[p] != again[p]] == []


def test_a_run_json_is_parsed_once_per_command_and_again_once_rewritten(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    root = shipped_runs(tmp_path / "r", ("lesion",))
    parsed: list[str] = []
    real = reading.read_run_json
    monkeypatch.setattr(reading, "read_run_json", lambda p: parsed.append(p.name) or real(p))
    runs = ResultsStore(root).runs_dir
    n = len(list(runs.glob("*.json")))
    with reading.once():
        first = reading.read_runs(root)
        assert reading.read_runs(root, {first[0]["run_id"]}) == [first[0]]
        assert all(a is b for a, b in zip(reading.read_runs(root), first, strict=True))
        assert len(parsed) == n
        path = runs / f"{first[0]['run_id']}.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "note": "edited"}))
        assert reading.read_runs(root)[0]["note"] == "edited" and len(parsed) == n + 1
    reading.read_runs(root)  # outside a command's scope: parsed afresh
    assert len(parsed) == 2 * n + 1


def test_the_heads_cache_is_rebuilt_when_a_run_json_changes_and_when_it_is_damaged(tmp_path: Path) -> None:
    root = shipped_runs(tmp_path / "r", ("lesion",))
    cache = root / reading.HEADS_CACHE
    full = reading.read_runs(root)
    heads = reading.read_heads(root)
    assert heads == [{k: v for k, v in r.items() if k not in ("curves", "probes")} for r in full]
    assert "curves" in full[0] and json.loads(cache.read_text())["format"] == reading.HEADS_FORMAT
    # a run JSON changed after the cache was written (another size, a newer mtime): read again, the cache updated
    path = ResultsStore(root).run_path(heads[0]["run_id"])
    run = json.loads(path.read_text())
    run["config"]["lr"] = 0.123
    path.write_text(json.dumps(run))
    os.utime(path, ns=(cache.stat().st_mtime_ns + 10**9,) * 2)
    assert reading.read_heads(root)[0]["config"]["lr"] == 0.123
    assert json.loads(cache.read_text())["files"][path.name][2]["config"]["lr"] == 0.123
    # a run JSON removed: gone from the heads and the cache
    path.unlink()
    assert [h["run_id"] for h in reading.read_heads(root)] == [h["run_id"] for h in heads[1:]]
    assert path.name not in json.loads(cache.read_text())["files"]
    # damaged caches are rebuilt from the run JSONs, never read: truncated, another format (its heads forged),
    # an entry that is no head, a stamp that is no number, bytes that are no text
    good = reading.read_heads(root)
    text = cache.read_text()
    entries = json.loads(text)["files"]
    first = next(iter(entries))
    forged = {**entries, first: [*entries[first][:2], {"run_id": "forged"}]}
    def cache_of(files: dict, form: str = reading.HEADS_FORMAT) -> bytes:
        return json.dumps({"format": form, "files": files}).encode()

    for damaged in (text[:1000].encode(), cache_of(forged, "other"), cache_of({**entries, first: [1, 2, {"a": 1}]}),
                    cache_of({**entries, "a.json": [1, "2", {}]}), b"\x00\xff"):
        cache.write_bytes(damaged)
        assert reading.read_heads(root) == good
        assert json.loads(cache.read_text())["files"] == entries


def test_a_folder_one_may_only_read_is_read_without_a_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = shipped_runs(tmp_path / "r", ("lesion",))

    def refuse(path: Path, text: str) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(reading, "atomic_write_text", refuse)
    assert [h["run_id"] for h in reading.read_heads(root)] == [r["run_id"] for r in reading.read_runs(root)]
    assert not (root / reading.HEADS_CACHE).exists()


def _figure(value: float) -> Figure:
    fig = Figure(figsize=(2, 2))
    fig.add_subplot().plot([0, 1], [0, value])
    return fig


def _broken() -> Figure:
    raise ZeroDivisionError("a bug in a figure")


def test_figures_drawn_by_several_processes_are_the_files_one_draws(tmp_path: Path,
                                                                    capfd: pytest.CaptureFixture[str]) -> None:
    jobs = [(tmp_path / "a" / f"{i}.png", lambda i=i: _figure(i)) for i in range(5)]
    draw_all(jobs, 3)
    parallel = {p: p.read_bytes() for p, _ in jobs}
    draw_all(jobs, 1)
    assert parallel == {p: p.read_bytes() for p, _ in jobs}
    with pytest.raises(RuntimeError, match="1 of 2 figure-drawing processes failed"):
        draw_all([(tmp_path / "b" / "ok.png", lambda: _figure(1)), (tmp_path / "b" / "bad.png", _broken)], 2)
    assert "ZeroDivisionError: a bug in a figure" in capfd.readouterr().err
    assert (tmp_path / "b" / "ok.png").is_file()


def test_jobs_must_be_a_positive_number(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["plot", "--results-dir", str(tmp_path), "--jobs", "0"])
    assert exit_.value.code == 2
    assert "argument --jobs: a whole number of processes, 1 or more; got '0'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


TABLES_ONLY = textwrap.dedent("""
    import sys
    from bench.cli import main
    root = sys.argv[1]
    for argv in (["leaderboard"], ["compare", "--study", "warmup", "--baseline", "preln"]):
        assert main([*argv, "--results-dir", root]) == 0, argv
    print("loaded:", sorted(m for m in sys.modules if m.split(".")[0] == "scipy" and m.startswith("scipy.stats")))
""")


def test_the_tables_import_no_scipy_stats(tmp_path: Path) -> None:
    """Importing scipy.stats costs more CPU than reading the tables (about 0.7 s): leaderboard and compare take
    Student's t from scipy.special, the functions scipy.stats calls (pinned below)."""
    root = shipped_runs(tmp_path / "results", ("warmup",))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", TABLES_ONLY, str(root)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "loaded: []" in done.stdout


def test_the_t_distribution_welch_and_the_slope_are_scipy_stats_own() -> None:
    sps = pytest.importorskip("scipy.stats")
    for dof in (1, 2, 3, 4.5, 29, np.array([1.0, 2.0, 7.0])):
        assert np.array_equal(t_quantile(0.975, dof), sps.t.ppf(0.975, dof))
        assert np.array_equal(t_tail(1.7, dof), sps.t.sf(1.7, dof))
    rng = np.random.default_rng(0)
    for _ in range(200):
        x, base = rng.normal(size=rng.integers(2, 8)) * 3, rng.normal(size=rng.integers(2, 8)) + 1
        ours, theirs = two_groups(x, base), sps.ttest_ind(x, base, equal_var=False)
        assert ours.t == pytest.approx(float(theirs.statistic), rel=1e-12)
        assert ours.p == pytest.approx(float(theirs.pvalue), rel=1e-12)
        xs = np.log(rng.choice([6.0, 12.0, 24.0, 48.0], size=6))
        ys = 0.3 * xs + rng.normal(size=6) * rng.choice([0.0, 0.1])
        if len(set(xs)) > 1:
            fit = sps.linregress(xs, ys)
            # the same formulas; scipy's arithmetic differs between its releases in the last bit, and in the rounding
            # noise (about 1e-9) that stands for the standard error of an exact line
            assert least_squares_slope(xs, ys) == pytest.approx((fit.slope, fit.stderr), rel=1e-12, abs=1e-8)
