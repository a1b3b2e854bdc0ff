"""Seeds until decided (bench.analysis.sequential, bench.sweeps.rounds): the error rate of the sequential rule by
simulation, the looks, the rounds of a sweep (with runs recorded by a stand-in for training), what the report says,
and the options' errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from _studies import beats_preln_claims, combinator_study

from bench.analysis.claims import parse_claim
from bench.analysis.sequential import Looks, looks_file, read_looks, simulate
from bench.cli import main
from bench.reports.report import write_report
from bench.runs.config import RunConfig
from bench.runs.results import COLUMNS, ResultsStore
from bench.sweeps.rounds import until_decided

SEED_PART = np.array([0.0, 0.09, -0.08, 0.05, -0.03, 0.02, -0.06, 0.07, 0.01, -0.04])  # shared by the designs
EFFECT = {"preln": 0.0, "strong": -0.3, "weak": -0.02}  # a design's own offset of the loss
NOISE = np.array([0.004, -0.011, 0.009, -0.002, 0.012, -0.007, 0.003, -0.01, 0.006, -0.004])  # per seed, weak's own


@pytest.mark.parametrize("cap", [10, 12])
def test_the_rule_decides_a_null_difference_wrongly_in_at_most_5_percent_of_studies(cap: int) -> None:
    """1,000 simulated studies of a claim whose true difference is 0 (margin 0): any verdict but *inconclusive* is
    wrong. The Bonferroni looks keep it at most 5%; reading every look at 95% does not (about 15%)."""
    looks = Looks.plan(3, cap)
    honest = simulate(looks, 0.0, studies=1000, seed=1)
    assert honest["agrees"] + honest["disagrees"] <= 0.05
    naive = simulate(looks, 0.0, studies=1000, level=0.95, seed=1)
    assert naive["agrees"] + naive["disagrees"] > 0.10


def test_the_rule_decides_a_real_difference_and_on_which_side() -> None:
    looks = Looks.plan(3, 12)
    better = simulate(looks, -1.5, studies=1000, seed=2)  # the design lowers the loss by 1.5 seeds' spread
    assert better["agrees"] > 0.9 and better["disagrees"] == 0.0 and better["mean_look"] < 3
    worse = simulate(looks, 1.5, studies=1000, seed=3)
    assert worse["disagrees"] > 0.9 and worse["agrees"] == 0.0


def test_the_looks_are_fixed_in_advance() -> None:
    looks = Looks.plan(3, 10)
    assert looks.seeds == (3, 6, 9, 10) and looks.level == pytest.approx(1 - 0.05 / 4)
    assert [looks.look(n) for n in (2, 3, 5, 6, 10, 12)] == [0, 1, 1, 2, 4, 4]
    assert Looks.plan(3, 3).seeds == (3,) and Looks.plan(3, 3).level == pytest.approx(0.95)
    assert Looks.from_json(looks.to_json()) == looks
    with pytest.raises(ValueError, match="--max-seeds must be at least the study's 3 seeds, got 2"):
        Looks.plan(3, 2)
    with pytest.raises(ValueError, match="at least 2 seeds per configuration, got 1"):
        Looks.plan(1, 5)


@pytest.mark.parametrize(("data", "why"), [
    ({"seeds": [], "alpha": 0.05}, '"seeds" must be an increasing list of integers from 2, got []'),
    ({"seeds": [6, 3], "alpha": 0.05}, '"seeds" must be an increasing list of integers from 2, got [6, 3]'),
    ({"seeds": [3, 6], "alpha": 5}, '"alpha" must be a number in (0, 1), got 5'),
    ({"seeds": [3, 6], "rounds": {}}, '"rounds" must be a list, got dict'),
])
def test_a_looks_file_that_no_plan_makes_is_refused_naming_its_field(data: dict, why: str, tmp_path: Path) -> None:
    """Such a file once divided by zero (no seeds) or read every interval at -150 % (alpha 5), changing verdicts."""
    path = looks_file(tmp_path, "s")
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError) as info:
        read_looks(tmp_path, "s")
    assert str(info.value) == f"{path} cannot be read ({why}); restore it, or delete it to judge the study as run once"


def claim(design: str) -> object:
    return parse_claim({"id": f"{design}-beats-preln", "paper": "P", "text": "t", "metric": "final_val_loss",
                        "where": {"variant": ["preln", design]}, "compare": "variant", "a": "preln", "b": design,
                        "expect": "less"})


def configs(seeds: range = range(3)) -> list[RunConfig]:
    return [RunConfig(variant=v, depth=2, task="tinytext", seed=s, study="s", preset="quick")
            for v in EFFECT for s in seeds]


def recorder(store: ResultsStore, ran: list[list[str]]):
    """A stand-in for the sweep: records each run with the loss its variant and seed give, no training."""
    def run(todo: list[RunConfig]) -> None:
        ran.append(sorted(c.run_id for c in todo))
        for cfg in todo:
            loss = float(2.0 + SEED_PART[cfg.seed] + EFFECT[cfg.variant] + (NOISE[cfg.seed] if cfg.variant == "weak"
                                                                              else 0))
            row = {"run_id": cfg.run_id, "config_hash": cfg.config_hash(), "variant": cfg.variant, "depth": 2,
                   "task": "tinytext", "seed": cfg.seed, "status": "ok", "final_val_loss": loss, "study": "s"}
            store.append({k: v for k, v in row.items() if k in COLUMNS},
                         {"run_id": cfg.run_id, "row": row, "config": cfg.to_dict(), "curves": {}, "probes": []})
    return run


def test_rounds_add_seeds_to_the_open_claims_only_until_decided(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    ran: list[list[str]] = []
    said: list[str] = []
    looks = until_decided([claim("strong"), claim("weak")], configs(), store, "s", "quick", 9,
                          recorder(store, ran), said.append)
    assert looks.seeds == (3, 6, 9)
    # strong (-0.3 at every seed) is decided at once; weak (-0.02 ± 0.01) is not: it and preln get seeds 3-5
    assert [len(r) for r in ran] == [9, 6]
    assert {i.rsplit("-s", 1)[1] for i in ran[1]} == {"3", "4", "5"}
    assert {i.split("-")[0] for i in ran[1]} == {"preln", "weak"}
    assert [r["open"] for r in looks.rounds] == [1, 0]
    assert said[-1] == "every claim decided after round 2 (each interval at 98.33%)"
    assert json.loads(looks_file(tmp_path, "s").read_text())["seeds"] == [3, 6, 9]
    study = 'name = "s"\n' + beats_preln_claims(("strong", "weak"))
    (tmp_path / "studies" / "s.toml").write_text(study, encoding="utf-8")
    text = write_report(tmp_path, "s").read_text()
    assert "judged at 3 looks fixed in advance (3, 6, 9 seeds), each interval at 98.33%" in text
    assert "Decided at look 1, 2, ...: 1, 1, 0; 0 still open." in text
    lines = [line for line in text.splitlines() if "**agrees**" in line]
    # the strong design's difference is -0.3 at every seed: known exactly, no interval to read at the look's level
    assert lines[0].endswith("difference -0.3 (exact: no spread, no test; margin 0): **agrees** at look 1 of 3.")
    assert "paired t, 6 seeds" in lines[1] and lines[1].endswith("**agrees** at look 2 of 3.")
    # the same command again resumes: the same rounds follow from the recorded runs, nothing new to run
    again: list[list[str]] = []
    until_decided([claim("strong"), claim("weak")], configs(), store, "s", "quick", 9, recorder(store, again),
                  said.append)
    assert again == ran  # the same rounds, the same runs (the sweep's resume skips them)
    with pytest.raises(ValueError, match=r"was run --until-decided with looks at 3, 6, 9 seeds \(--max-seeds 9\)"):
        until_decided([claim("weak")], configs(), store, "s", "quick", 12, recorder(store, []))


def test_a_study_without_a_compare_claim_has_nothing_to_decide(tmp_path: Path) -> None:
    value = parse_claim({"id": "v", "paper": "P", "text": "t", "metric": "final_val_loss", "kind": "value",
                         "expect": "less", "threshold": 3.0})
    with pytest.raises(ValueError, match="declares no compare claim on a leaderboard metric"):
        until_decided([value], configs(), ResultsStore(tmp_path), "s", None, 9, print)


@pytest.mark.parametrize(("args", "message"), [
    (["--max-seeds", "6"], "--max-seeds is the cap of --until-decided: give --until-decided too"),
    (["--until-decided", "--max-seeds", "1"], "--max-seeds must be >= 2, got 1"),
])
def test_the_options_say_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str], args, message) -> None:
    assert main(["sweep", "crosslayer", "--preset", "smoke", *args, "--results-dir", str(tmp_path)]) == 2
    assert f"error: {message}" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


@pytest.mark.slow  # two rounds of real runs (8 runs of 2 steps)
def test_bench_sweep_until_decided_runs_rounds_and_the_report_names_them(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    study = tmp_path / "tiny.toml"
    study.write_text(combinator_study(seeds=(0, 1)) + '\n[[claims]]\nid = "resnet-below-plain"\npaper = "P"\n'
                     'text = "t"\nmetric = "final_train_loss"\ncompare = "variant"\na = "plain"\nb = "resnet"\n'
                     'expect = "similar"\nthreshold = 1e-9\n', encoding="utf-8")  # a margin too tight to agree
    res = tmp_path / "res"
    assert main(["sweep", str(study), "--until-decided", "--max-seeds", "4", "--quiet", "--results-dir", str(res)]) == 0
    out = capsys.readouterr().out
    assert "round 1 of at most 2: 4 run(s), to 2 seeds a configuration" in out
    assert "round 2 of at most 2: 4 run(s), to 4 seeds a configuration" in out
    # at 4 seeds the claim is decided or, at the cap, left open: which, the runs' losses say
    assert re.search(r"(every claim decided|1 verdict\(s\) still open at the cap) after round 2 \(each interval "
                     r"at 97\.5%\)", out)
    assert sorted(ResultsStore(res).load_leaderboard()["seed"]) == [0, 0, 1, 1, 2, 2, 3, 3]
    looks = json.loads(looks_file(res, "tiny").read_text())
    assert looks["seeds"] == [2, 4] and looks["rounds"][0]["open"] == 1 and len(looks["rounds"]) == 2
    assert main(["report", "--study", "tiny", "--results-dir", str(res)]) == 0
    text = (res / "REPORT-tiny.md").read_text()
    assert "judged at 2 looks fixed in advance (2, 4 seeds), each interval at 97.5%" in text
    assert re.search(r"paired t, 4 seeds: 97\.5% CI .*\*\*(DISAGREES\*\* at|inconclusive\*\* after) look 2 of 2\.",
                     text)
