"""bench site: the static results site — its files from a small results directory, and the pages in a real browser
(headless Chromium driven by Playwright, in every tox test environment; skipped, saying why, where either is
missing, and failing instead where RESBENCH_REQUIRE_BROWSER is set, as in CI)."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from bench.cli import main
from bench.runs.config import RunConfig
from bench.runs.results import COLUMNS, ResultsStore

pytest.importorskip("plotly", reason="bench site needs plotly: pip install 'resbench[site]'")

from bench.reports.site import build_site, slug  # after the skip: it needs plotly

ROOT = Path(__file__).resolve().parent.parent
VARIANTS, DEPTHS, SEEDS = ("preln", "postln", "rezero"), (2, 4), (0, 1)
STUDY = """name = "mini"
[[claims]]
id = "deeper-is-better"
paper = "Nobody 2026, Fig. 1"
text = "the deeper Pre-LN has a lower validation loss"
metric = "final_val_loss"
where = { variant = "preln" }
compare = "depth"
a = "min"
b = "max"
expect = "less"
"""


def add_run(store: ResultsStore, variant: str, depth: int, seed: int, study: str | None = "mini",
            **row: Any) -> RunConfig:  # fmt: skip
    """One run as bench records it: the row, and a run JSON with its config, environment, curves and probes."""
    cfg = RunConfig(variant=variant, depth=depth, seed=seed, task="copy", study=study)
    loss = 1.0 / depth + 0.01 * seed + 0.1 * VARIANTS.index(variant)
    full = {"run_id": cfg.run_id, "config_hash": cfg.config_hash(), "variant": variant, "family": "transformer",
            "depth": depth, "task": "copy", "seed": seed, "device": "cpu", "device_name": "cpu", "status": "ok",
            "final_train_loss": loss, "final_val_loss": loss + 0.05, "final_val_acc": 1 - loss,
            "train_samples_per_s": 100.0 * depth, "peak_mem_mb": 10.0 * depth, "study": study} | row
    run = {"run_id": cfg.run_id, "row": full, "config": cfg.to_dict(),
           "env": {"torch": "2.14.1", "python": "3.11.7", "device_name": "cpu", "git_sha": "abc123"},
           "curves": {"train": [{"step": s, "loss": loss * (6 - s)} for s in range(1, 6)],
                      "eval": [{"step": 5, "val_loss": loss + 0.05, "val_acc": 1 - loss}]},
           "probes": [{"step": 0, "layer": i, "block": f"blocks.{i}", "kind": "ffn", "metric": "grad_norm",
                       "value": 1.0 + i} for i in range(depth)]}  # fmt: skip
    store.append({k: v for k, v in full.items() if k in COLUMNS}, run)
    return cfg


def mini_results(root: Path) -> Path:
    store = ResultsStore(root)
    (root / "studies").mkdir(parents=True)
    (root / "studies" / "mini.toml").write_text(STUDY, encoding="utf-8")
    for variant in VARIANTS:
        for depth in DEPTHS:
            for seed in SEEDS:
                add_run(store, variant, depth, seed)
    add_run(store, "preln", 2, 0, study=None)  # a run outside any study
    return root


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = mini_results(tmp_path_factory.mktemp("results"))
    return build_site(root, tmp_path_factory.mktemp("site") / "site").root


def test_the_site_has_its_pages_and_carries_plotly_once(site: Path) -> None:
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html"))
    runs = len(VARIANTS) * len(DEPTHS) * len(SEEDS) + 1
    assert pages[:2] == ["index.html", "run/" + sorted(p.name for p in (site / "run").iterdir())[0]]
    assert len(pages) == 1 + runs + 2 and {"study/mini.html", "study/no-study.html"} <= set(pages)
    assert (site / "plotly.min.js").stat().st_size > 1_000_000 and (site / "site.js").is_file()
    for page in site.rglob("*.html"):  # offline: nothing is loaded from elsewhere, plotly.js only from the site's copy
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"""(src|href)=["']https?:""", text), page
        assert "cdn.plot.ly" not in text
        assert text.count('src="') == (0 if page.name == "index.html" else 2)  # plotly.min.js and site.js
    index = (site / "index.html").read_text(encoding="utf-8")
    assert '<a href="study/mini.html">mini</a></td><td>12</td><td>12</td>' in index
    assert "1 agree, 0 disagree, 0 inconclusive" in index  # the study file's claim, evaluated


def test_a_run_page_shows_its_config_hash_command_and_environment(site: Path) -> None:
    cfg = RunConfig(variant="rezero", depth=4, seed=1, task="copy", study="mini")
    text = (site / "run" / f"{slug(cfg.run_id)}.html").read_text(encoding="utf-8")
    assert f'<code id="config-hash">{cfg.config_hash()}</code>' in text
    assert "python -m bench run --variant rezero --depth 4 --task copy --seed 1 --results-dir" in text
    assert text.count("-rerun</pre>") == 1  # the run alone writes to a scratch folder, never into the results folder
    assert ("-rerun, beside the results folder, whose leaderboard it leaves as it is): the same training, seed "
            "included, so its curves and final metrics, and its cost figures as measured on your machine") in text
    assert "<td>abc123</td>" in text and "<td>3.11.7</td>" in text  # the environment the run recorded


def test_a_plugin_run_alone_loads_the_plugin_copy_its_study_stored(tmp_path: Path) -> None:
    from bench.reports.site import _run_command
    root = tmp_path / "res"
    (root / "studies").mkdir(parents=True)
    (root / "studies" / "mine.toml").write_text('name = "mine"\nplugins = ["mine.py", "some.module"]\n')
    mine = {"spec": "/home/me/mine.py", "origin": "study file"}
    recorded = [mine, mine, {"spec": "extra.py", "origin": "--plugin"}]
    run = {"config": {"variant": "mine", "depth": 8, "seed": 1, "task": "digits", "study": "mine"}, "plugins": recorded}
    assert _run_command(run, root).endswith(  # the user's own --plugin as given; the study's from the stored copy
        f" --plugin extra.py --plugin {root.as_posix()}/studies/mine.py --plugin some.module "
        f"--results-dir {tmp_path / 'res-rerun'}")
    (root / "studies" / "mine.toml").unlink()  # the study file gone: the plugin as the run recorded it
    assert _run_command(run, root).endswith(f" --plugin extra.py --plugin /home/me/mine.py --results-dir {root}-rerun")
    assert "--plugin" not in _run_command({"config": run["config"] | {"study": None}}, root)


def test_site_command_and_its_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    root = tmp_path / "results"
    add_run(ResultsStore(root), "preln", 2, 0, study=None)
    assert main(["site", "--results-dir", str(root), "-o", str(tmp_path / "s")]) == 0
    assert re.fullmatch(rf"{re.escape(str(tmp_path / 's' / 'index.html'))}: 3 pages, \d+\.\d MB\n",
                        capsys.readouterr().out)
    assert main(["site", "--results-dir", str(tmp_path / "none"), "-o", str(tmp_path / "t")]) == 2
    assert f"error: no runs in {tmp_path / 'none'}: nothing to show" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert main(["site", "--results-dir", str(root), "-o", str(tmp_path / "file")]) == 2
    assert "is a file; bench site writes a folder" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "plotly.io", None)  # as if plotly were not installed
    assert main(["site", "--results-dir", str(root), "-o", str(tmp_path / "u")]) == 2
    assert "pip install 'resbench[site]'" in capsys.readouterr().err


def test_a_cost_figure_measured_once_and_copied_is_one_measurement(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "results")
    first = RunConfig(variant="preln", depth=2, seed=0, task="copy").run_id  # the run that measured, as sweeps do
    add_run(store, "preln", 2, 0, study=None, cost_source=first)
    add_run(store, "preln", 2, 1, study=None, cost_source=first, train_samples_per_s=200.0)  # a copy of seed 0's
    site = build_site(store.root, tmp_path / "site").root
    page = (site / "study" / "no-study.html").read_text(encoding="utf-8")
    bars = re.findall(r'"type":"bar","x":\["preln d2"\],"y":\[([\d.]+)\],"name":"cpu","customdata":\[(\d+)\]', page)
    assert bars == [("200.0", "1"), ("20.0", "1")]  # throughput and memory: one measurement each, not two
    spreads = re.findall(r'"type":"bar","x":\["preln d2"\].*?"error_y":(\{[^}]*\})', page)
    no_bar = {"type": "data", "symmetric": False, "array": ["NaN"], "arrayminus": ["NaN"]}  # plotly draws no caps
    assert [json.loads(e) for e in spreads] == [no_bar, no_bar]  # as the PNG's "no bars (n = 1)"
    assert '"title":{"text":"peak memory (MiB)"}' in page and "peak memory (MiB) \\u2014 copy: a bar" in page
    assert '<th data-col="peak_mem_mb">peak_mem_mb (MiB)</th>' in page  # the schema's column, its unit beside it


def test_a_digits_run_page_shows_the_data_the_task_used_beside_config_fields_it_does_not_read(tmp_path: Path) -> None:
    """The digits are 8x8 images of one channel in a 1437/360 split, unaugmented, whatever the config's defaults
    (image size 32, 4096/1024 samples, augment on) say: the Config rows say so instead of contradicting the task
    data on the same page."""
    store = ResultsStore(tmp_path / "results")
    cfg = RunConfig(variant="preact", depth=8, seed=0, task="digits")
    row = {"run_id": cfg.run_id, "config_hash": cfg.config_hash(), "variant": "preact", "depth": 8, "task": "digits",
           "seed": 0, "status": "ok", "device": "cpu", "final_val_acc": 0.97, "peak_mem_mb": 24.5}
    task = {"train_size": 1437, "val_size": 360, "image_shape": [1, 8, 8], "num_classes": 10, "augment": "none"}
    store.append(row, {"run_id": cfg.run_id, "row": row, "config": cfg.to_dict(), "task": task,
                       "curves": {"train": [{"step": 1, "loss": 1.0}]}})
    page = (build_site(store.root, tmp_path / "site").root / "run" / f"{slug(cfg.run_id)}.html").read_text("utf-8")
    config = page.split("<h2>Config</h2>")[1].split("<h2>")[0]
    rows = dict(re.findall(r"<tr><td>(\w+)</td><td>([^<]*)</td></tr>", config))
    assert {k: rows[k] for k in ("image_size", "train_size", "val_size", "augment", "channels", "num_classes")} == {
        "image_size": "32 (not used by digits: the run used image_shape [1, 8, 8])",
        "train_size": "4096 (not used by digits: the run used train_size 1437)",
        "val_size": "1024 (not used by digits: the run used val_size 360)",
        "augment": "True (not used by digits: the run used augment none)",
        "channels": "1", "num_classes": "10"}  # the fields the task data agrees with, as they are
    assert rows["depth"] == "8" and rows["batch_size"] == "128"  # fields the task data does not state
    assert "<tr><td>peak_mem_mb (MiB)</td><td>24.5</td></tr>" in page  # the leaderboard row: the schema's name, unit


def test_cost_bars_are_clipped_at_zero_and_the_pareto_counts_a_copied_figure_once(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "results")
    first = RunConfig(variant="preln", depth=2, seed=0, task="copy").run_id
    add_run(store, "preln", 2, 0, study=None, cost_source=first)
    add_run(store, "preln", 2, 1, study=None, cost_source=first)  # a copy of seed 0's 200 samples/s
    add_run(store, "preln", 2, 2, study=None, train_samples_per_s=500.0)  # a measurement of its own
    page = (build_site(store.root, tmp_path / "site").root / "study" / "no-study.html").read_text(encoding="utf-8")
    half = 12.706204736174698 * 150  # t(0.975, 1) · std / √2, the std of (200, 500) being 150·√2
    bar = re.search(r'"type":"bar","x":\["preln d2"\],"y":\[350.0\],.*?"error_y":(\{[^}]*\})', page)
    assert bar and json.loads(bar.group(1)) == {"type": "data", "symmetric": False, "array": [pytest.approx(half)],
                                                "arrayminus": [350.0]}  # down to 0, not below
    point = re.search(r'"type":"scatter","x":\[([\d.]+)\],"y":\[([\d.]+)\],"name":"preln @ cpu"'
                      r'.*?"error_y":(\{[^}]*\})', page)
    accs = [1 - (0.5 + 0.01 * seed) for seed in range(3)]  # add_run's final_val_acc
    assert point and float(point.group(1)) == 350.0 and float(point.group(2)) == pytest.approx(sum(accs) / 3)
    spread = json.loads(point.group(3))  # the seeds' 95% CI, clipped to [0, 1]: it reaches neither end here
    assert spread["array"] == spread["arrayminus"] == [pytest.approx(4.302652729749464 * 0.01 / 3**0.5)]


def test_cost_bars_and_pareto_points_keep_the_load_bands_of_a_configuration_apart(tmp_path: Path) -> None:
    """preln timed by seed 0 on a quiet machine (seed 1 a copy) and by seed 2 beside other work: a bar series and a
    Pareto point per band, named by it, never one 350 samples/s; each point at the mean error of all three seeds."""
    store = ResultsStore(tmp_path / "results")
    first = RunConfig(variant="preln", depth=2, seed=0, task="copy").run_id
    for seed, load, row in ((0, 0.4, {}), (1, 0.4, {}), (2, 6.0, {"train_samples_per_s": 500.0})):
        cfg = add_run(store, "preln", 2, seed, study=None, cost_source=first if seed < 2 else None, **row)
        path = store.root / "runs" / f"{cfg.run_id}.json"
        run = json.loads(path.read_text(encoding="utf-8"))
        run |= {"measurements": {"load": {"load_1m": load, "cpus": 2}}}
        path.write_text(json.dumps(run), encoding="utf-8")
    page = (build_site(store.root, tmp_path / "site").root / "study" / "no-study.html").read_text(encoding="utf-8")
    bars = [(y, json.loads(f'"{name}"'), n) for y, name, n in re.findall(
        r'"type":"bar","x":\["preln d2"\],"y":\[([\d.]+)\],"name":"([^"]+)","customdata":\[(\d+)\]', page)]
    quiet, busy = "unrecorded at load/CPU 0-0.5", "unrecorded at load/CPU 2-4"
    assert bars == [("200.0", quiet, "1"), ("500.0", busy, "1"), ("20.0", quiet, "1"), ("20.0", busy, "1")]
    points = re.findall(r'"type":"scatter","x":\[([\d.]+)\],"y":\[([\d.]+)\],"name":"preln @ ([^"]+)"', page)
    error = sum(1 - (0.5 + 0.01 * seed) for seed in range(3)) / 3  # add_run's final_val_acc, every seed's
    assert [(float(x), json.loads(f'"{name}"')) for x, _, name in points] == [(200.0, quiet), (500.0, busy)]
    assert [float(y) for _, y, _ in points] == [pytest.approx(error)] * 2
    # the bars are a machine's load bands, and the legend says so; the Pareto labels its points with their depth,
    # and its title and the bars' say what a point's or a bar's throughput is
    assert page.count('"legend":{"title":{"text":"machine, load band"}}') == 2  # samples/s and peak memory
    labels = r'"name":"preln @ [^"]+","mode":"markers\+text","text":\["2"\],"textposition":\["top right"\]'
    assert len(re.findall(labels, page)) == 2  # 200 and 500 samples/s, far apart: each label in its usual place
    assert "(seed means, bars: 95% CI; labels: depth; throughput: each point the mean of its measurements)" in page
    assert "a bar per configuration and machine, load band, each bar the mean of its measurements" in page


def test_the_site_draws_a_log_axis_band_as_the_pngs_do_and_its_title_says_so(site: Path) -> None:
    """A training loss of mean 1 whose clipped CI reaches 0: on a log axis the band's lower side is mean²/upper
    (0.25 under an upper side of 4), not 0; on a linear axis the interval as it is."""
    from bench.reports.site import _Figures
    stats = pd.DataFrame({"step": [1, 2], "mean": [1.0, 0.5], "lo": [0.0, 0.25], "hi": [4.0, 1.0], "count": [3, 3]})
    band, _ = _Figures.series(stats, "step", "preln", "#000000", log=True)
    assert band["y"] == [4.0, 1.0, 0.25, 0.25]  # upper side out, lower side back: 0.5²/1 = 0.25, 1²/4 = 0.25
    band, _ = _Figures.series(stats, "step", "preln", "#000000")
    assert band["y"] == [4.0, 1.0, 0.25, 0.0]
    page = (site / "study" / "mini.html").read_text(encoding="utf-8")
    assert ("training loss \\u2014 copy, depth 4: mean over seeds, band = 95% CI (on a log axis, the band's lower "
            "side is its upper side's factor below the mean)") in page  # the dash as plotly's JSON writes it


ATINIT = """name = "atinit"
[analysis]
kind = "gradcorr"
variants = ["plain", "resnet"]
depths = [20]
[[claims]]
id = "shortcuts-keep-correlation"
paper = "Balduzzi et al. 2017, Fig. 2"
text = "with shortcuts the gradients stay more correlated"
table = "gradcorr"
metric = "neighbor_corr"
compare = "variant"
a = "plain"
b = "resnet"
expect = "greater"
"""


def test_a_study_that_trains_nothing_has_a_page_with_its_analysis_and_its_claims(tmp_path: Path) -> None:
    root = tmp_path / "results"
    add_run(ResultsStore(root), "preln", 2, 0, study=None)
    (root / "studies").mkdir()
    (root / "studies" / "atinit.toml").write_text(ATINIT, encoding="utf-8")
    (root / "analysis" / "atinit").mkdir(parents=True)
    (root / "analysis" / "atinit" / "meta.json").write_text('{"preset": "quick"}', encoding="utf-8")
    with (root / "analysis" / "atinit" / "gradcorr-summary.csv").open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([("variant", "depth", "seed", "neighbor_corr", "corr_length", "status"),
                                 ("plain", 20, 0, 0.30, 2.0, "ok"), ("plain", 20, 1, 0.32, 2.0, "ok"),
                                 ("resnet", 20, 0, 0.90, 9.0, "ok"), ("resnet", 20, 1, 0.92, 9.0, "ok")])
    (root / "plots" / "atinit").mkdir(parents=True)
    (root / "plots" / "atinit" / "gradcorr.png").write_bytes(b"\x89PNG figure")
    (root / "analysis" / "stray").mkdir()  # analysis tables no study file declares: no page
    site = build_site(root, tmp_path / "site").root
    assert sorted(p.name for p in (site / "study").glob("*.html")) == ["atinit.html", "no-study.html"]
    page = (site / "study" / "atinit.html").read_text(encoding="utf-8")
    assert "no training runs: the study measures models at initialisation" in page and "Leaderboard" not in page
    assert "python -m bench reproduce atinit --preset quick" in page
    assert ("<tr><td>plain</td><td>20</td><td>0.31 ± 0.13</td><td>2 ± 0</td><td>2</td></tr>"
            "<tr><td>resnet</td><td>20</td><td>0.91 ± 0.13</td><td>9 ± 0</td><td>2</td></tr>") in page
    assert '<img src="img/atinit/gradcorr.png"' in page
    assert (site / "study" / "img" / "atinit" / "gradcorr.png").read_bytes() == b"\x89PNG figure"
    assert "shortcuts-keep-correlation" in page and '<span class="verdict agrees">' in page
    index = (site / "index.html").read_text(encoding="utf-8")
    assert '<a href="study/atinit.html">atinit</a></td><td>0</td><td>0</td>' in index
    assert "1 agree, 0 disagree, 0 inconclusive" in index  # the analysis's claim counts in the study's tally


# -- in a browser ---------------------------------------------------------------------------------------------------


def chromium_path() -> str | None:
    """Debian's chromium (Playwright cannot download its own browsers here), or $RESBENCH_CHROMIUM."""
    return os.environ.get("RESBENCH_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def missing(reason: str) -> None:
    """Skip, saying why; fail instead where the browser is required (CI sets RESBENCH_REQUIRE_BROWSER)."""
    if os.environ.get("RESBENCH_REQUIRE_BROWSER"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright import sync_api
    except ImportError:
        missing("the browser test needs playwright: pip install 'resbench[browser]' (tox's test environments have it)")
    exe = chromium_path()
    if exe is None:
        missing("the browser test needs a chromium executable: apt-get install chromium, or set RESBENCH_CHROMIUM")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe)
        yield b
        b.close()


class Page:
    """A browser page that collects console errors and uncaught exceptions of whatever it loads."""

    def __init__(self, browser: Any) -> None:
        self.page = browser.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def open(self, path: Path) -> Any:
        self.page.goto(path.resolve().as_uri())
        self.page.wait_for_load_state("load")
        return self.page

    def shown(self) -> tuple[int, int]:
        """The count the page states, and the table rows that are visible."""
        return (int(self.page.inner_text("#shown")),
                self.page.locator("#leaderboard tbody tr:visible").count())


def legend_traces(page: Any, figure_prefix: str) -> list[list[str]]:
    """The legend entries (trace names; a design's CI band has none of its own) of each figure named so."""
    return page.evaluate("""prefix => Array.from(document.querySelectorAll('figure.plot'))
        .filter(f => f.dataset.figure.startsWith(prefix))
        .map(f => f.querySelector('.plotly-graph-div').data.filter(t => t.showlegend !== false).map(t => t.name))""",
                         figure_prefix)


def test_study_page_in_a_browser_filters_sorts_and_draws_a_trace_per_design(site: Path, browser: Any) -> None:
    p = Page(browser)
    page = p.open(site / "index.html")
    page.click("text=mini")
    page.wait_for_load_state("load")
    assert page.url.endswith("/study/mini.html")
    assert p.shown() == (12, 12)
    page.select_option("select[data-col=depth]", "4")
    assert p.shown() == (6, 6)
    page.select_option("select[data-col=variant]", "rezero")
    assert p.shown() == (2, 2)
    page.select_option("select[data-col=depth]", "*")
    assert p.shown() == (4, 4)
    page.select_option("select[data-col=variant]", "*")
    page.click("#leaderboard th[data-col=final_train_loss]")  # ascending: the lowest loss, deepest preln seed 0
    first = page.locator("#leaderboard tbody tr").first.inner_text()
    assert first.startswith(RunConfig(variant="preln", depth=4, seed=0, task="copy", study="mini").run_id)
    curves = legend_traces(page, "curves mini copy d4 train")
    assert curves == [sorted(VARIANTS)]  # one trace per design, its band in its legend group
    cfg = RunConfig(variant="rezero", depth=4, seed=1, task="copy", study="mini")
    page.click(f"text={cfg.run_id}")
    page.wait_for_load_state("load")
    assert page.inner_text("#config-hash") == cfg.config_hash()
    assert p.errors == []


def test_a_cost_bar_on_one_measurement_has_no_error_bar_in_a_browser(site: Path, browser: Any) -> None:
    """plotly.js draws an error bar, caps included, for every length it reads as a number (null reads as 0): the
    one-run no-study page's bars rest on one measurement each and show none; the mini study's, on two, show one
    a bar."""
    p = Page(browser)
    drawn = """() => Array.from(document.querySelectorAll('figure.plot'))
        .filter(f => f.dataset.figure.startsWith('cost'))
        .map(f => [f.querySelectorAll('g.point').length, f.querySelectorAll('g.errorbar path').length])"""
    assert p.open(site / "study" / "no-study.html").evaluate(drawn) == [[1, 0], [1, 0]]
    assert p.open(site / "study" / "mini.html").evaluate(drawn) == [[6, 6], [6, 6]]  # 3 designs x 2 depths
    assert p.errors == []


def test_the_console_check_sees_a_planted_error(site: Path, browser: Any, tmp_path: Path) -> None:
    """A broken script is caught: the same page with an error planted in site.js fails the check."""
    broken = tmp_path / "site"
    shutil.copytree(site, broken)
    with (broken / "site.js").open("a", encoding="utf-8") as f:
        f.write("\nundefinedFunctionOfTheSite();\n")
    p = Page(browser)
    p.open(broken / "study" / "mini.html")
    assert p.errors == ["undefinedFunctionOfTheSite is not defined"]


def committed(tmp_path: Path, study: str) -> Path:
    """A results directory holding the committed runs of one study (its rows, run JSONs and nothing else)."""
    src = ROOT / "results"
    with (src / "leaderboard.csv").open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        rows = [r for r in reader if r["study"] == study]
    store = ResultsStore(tmp_path)
    for row in rows:
        run = json.loads((src / "runs" / f"{row['run_id']}.json").read_text(encoding="utf-8"))
        store.append({k: v for k, v in row.items() if k in COLUMNS}, run)
    return tmp_path


def test_the_committed_crosslayer_leaderboard_in_a_browser(browser: Any, tmp_path: Path) -> None:
    site = build_site(committed(tmp_path / "results", "crosslayer"), tmp_path / "site").root
    p = Page(browser)
    page = p.open(site / "study" / "crosslayer.html")
    # quick 54, since_mhc 54, width_and_loops 30 runs, less the 24 repeats of quick's Pre-LN, mHC
    assert p.shown() == (114, 114)
    page.select_option("select[data-col=depth]", "24")
    assert p.shown() == (57, 57)
    designs = sorted({path.name.split("-d")[0] for path in (tmp_path / "results" / "runs").iterdir()})
    assert legend_traces(page, "curves crosslayer tinytext d24 train") == [designs]
    # a leaderboard wider than the window scrolls in its own box; the page itself never scrolls sideways
    page.set_viewport_size({"width": 1000, "height": 800})
    page.reload()
    page.wait_for_load_state("load")
    assert page.evaluate("""() => { const t = document.getElementById('leaderboard');
        return [document.documentElement.scrollWidth <= window.innerWidth, t.scrollWidth > t.clientWidth]; }""") \
        == [True, True]
    assert p.errors == []


def test_a_scaling_study_page_in_a_browser_shows_the_multiplier_table_and_the_fit(browser: Any, tmp_path: Path) -> None:
    from test_scaling_compare import ladder_results

    site = build_site(ladder_results(tmp_path / "results"), tmp_path / "site").root
    p = Page(browser)
    page = p.open(site / "study" / "ladder.html")
    rows = page.locator("table.multipliers tbody tr")
    assert rows.count() == 8  # two designs, four sizes each
    hc = rows.filter(has_text="d_model=16").filter(has_text="hc").inner_text().split("\t")
    assert hc[:2] == ["hc", "budget_flops=1e+12 d_model=16"] and hc[4].startswith("2 [")  # 2x compute, its interval
    assert legend_traces(page, "scaling ladder") == [["preln", "hc"]]  # the points; each fitted curve in its group
    assert p.errors == []
