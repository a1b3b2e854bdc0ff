"""Two sweeps on one results folder train each run once: a driver claims a run before it starts it
(bench.sweeps.leases), and another driver reaching a claimed run leaves it to its holder and says so."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _nets import write
from _studies import combinator_study

from bench.cli import main
from bench.sweeps.leases import Leases
from bench.sweeps.study import load_study

REPO = Path(__file__).resolve().parents[1]
STUDY = combinator_study("twice", (0, 1), batch_size=8)


def rows(res: Path) -> list[dict[str, str]]:
    with (res / "leaderboard.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def test_a_run_another_driver_holds_is_left_to_it_and_said(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    study = write(tmp_path / "twice.toml", STUDY)
    res = tmp_path / "res"
    ids = [c.run_id for c in load_study(study).configs()]
    other = Leases(res)  # another driver, in the middle of running the second run
    assert other.take(ids[1])
    assert main(["sweep", str(study), "--results-dir", str(res), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert f"[2/4] {ids[1]}: being run by another sweep on this folder: left to it" in out
    assert f"1 run(s) were being run by another sweep on {res} and were left to it: {ids[1]}; when it ends, rerun " \
           "this to run any it did not finish" in out
    assert sorted(r["run_id"] for r in rows(res)) == sorted(ids[:1] + ids[2:])
    assert not Leases(res).take(ids[1])  # still the other driver's
    other.release_all()
    assert main(["sweep", str(study), "--results-dir", str(res), "--quiet"]) == 0  # it stopped: the rerun runs it
    assert sorted(r["run_id"] for r in rows(res)) == sorted(ids)
    assert Leases(res).take(ids[0])  # every claim of the sweeps released


@pytest.mark.slow  # two sweeps in two processes: about 20 s
def test_two_sweeps_started_together_train_each_run_once(tmp_path: Path) -> None:
    study = write(tmp_path / "twice.toml", STUDY)
    res = tmp_path / "res"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    args = [sys.executable, "-m", "bench", "sweep", str(study), "--results-dir", str(res)]
    drivers = [subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for _ in range(2)]
    outs = [d.communicate(timeout=300)[0] for d in drivers]
    assert [d.returncode for d in drivers] == [0, 0], outs
    trained = [run_id for out in outs for run_id in re.findall(r"\] (\S+): ok, ", out)]
    ids = sorted(c.run_id for c in load_study(study).configs())
    assert sorted(trained) == ids  # each run trained by exactly one of the two
    assert sorted(r["run_id"] for r in rows(res)) == ids
    for out in outs:  # the other's runs: skipped as recorded, or left to it while it ran them
        mine = set(re.findall(r"\] (\S+): ok, ", out))
        said = set(re.findall(r"\] (\S+): (?:already recorded|recorded by another sweep meanwhile|being run by "
                              r"another sweep)", out))
        assert mine | said == set(ids) and not mine & said, out
