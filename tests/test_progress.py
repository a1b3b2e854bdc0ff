"""Progress of long commands (bench/runs/progress.py): a bar on a terminal, plain lines elsewhere, nothing if quiet."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from bench.cli import main
from bench.runs.progress import LiveLine, Progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_lines_where_no_terminal_is_watching() -> None:
    out = io.StringIO()
    with Progress(4, "run-x", stream=out, every_s=0.0) as p:
        assert p.mode == "lines"
        p.update(1, loss="2.300")
        p.update(4, loss="1.100")
    lines = out.getvalue().splitlines()
    assert [re.sub(r", \d+ s$", ", T s", line) for line in lines] == [
        "run-x: 1/4 step (25%), loss 2.300, T s",
        "run-x: 4/4 step (100%), loss 1.100, T s",  # printed once: close() adds nothing after the last update
    ]


def test_lines_are_periodic_with_one_at_the_end() -> None:
    out = io.StringIO()
    with Progress(None, "data.tar.gz", stream=out, unit="B", scale_bytes=True, every_s=3600.0) as p:
        for n in (1000, 5_000_000, 9_000_000):
            p.update(n)
    assert re.fullmatch(r"data\.tar\.gz: 9\.00MB, \d+ s\n", out.getvalue())  # only the closing line: < 1 h apart


def test_a_bar_on_a_terminal_and_nothing_when_quiet() -> None:
    tty = _Terminal()
    with Progress(3, "run-y", stream=tty, every_s=0.0) as p:
        assert p.mode == "bar"
        p.update(3, loss="0.5")
    assert "run-y" in tty.getvalue() and "\r" in tty.getvalue() and "(100%)" not in tty.getvalue()
    quiet = _Terminal()
    with Progress(3, "run-z", enabled=False, stream=quiet) as p:
        assert p.mode == "off"
        p.update(3)
    assert quiet.getvalue() == ""


def test_run_reports_progress_unless_quiet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", "--variant", "plain", "--depth", "8", "--steps", "2", "--batch-size", "64", "--eval-every", "2",
            "--measure", "--results-dir", str(tmp_path)]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert re.search(r"^plain-d8-digits-\w+-s0: 2/2 step \(100%\), loss \d+\.\d{3}, \d+ s$", err, re.M), err
    assert main([*args, "--quiet", "--force"]) == 0  # trained again: quiet while it trains
    assert capsys.readouterr() == ("", "")


def test_a_quiet_sweep_prints_its_summary_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = tmp_path / "tiny.toml"
    study.write_text('name = "tiny"\nvary = ["combinator"]\n[base]\ndepth = 8\nsteps = 2\nbatch_size = 64\n'
                     'eval_every = 2\nmeasure = []\nchance_band = 0.0\n[grid]\nvariant = ["plain", "resnet"]\n'
                     'seed = [0]\n')
    assert main(["sweep", str(study), "--quiet", "--results-dir", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "started" not in out and "[1/2]" not in out
    assert re.search(r"^sweep done in 0:\d\d:\d\d: 2 of 2 runs ok, 0 failed, 0 not run$", out, re.M), out
    assert main(["sweep", str(study), "--results-dir", str(tmp_path / "r")]) == 0  # resumed: both skipped
    out = capsys.readouterr().out
    assert "[1/2] plain-d8-digits-" in out and "already recorded, skipped" in out


def test_live_line_redraws_in_place_on_a_terminal_only() -> None:
    term, log = _Terminal(), io.StringIO()
    for stream in (term, log):
        live = LiveLine(stream)
        live.show("sweep: done 0")
        live.print("[1/2] a: ok")
        live.show("sweep: done 1")
        live.close()
    assert term.getvalue() == ("\r\x1b[Ksweep: done 0" "\r\x1b[K[1/2] a: ok\nsweep: done 0" "\r\x1b[Ksweep: done 1"
                               "\r\x1b[K")
    assert log.getvalue() == "[1/2] a: ok\n"  # no status line in a log: the run lines say it all
    off = _Terminal()
    quiet = LiveLine(off, enabled=False)
    quiet.show("x")
    quiet.print("line")
    assert off.getvalue() == "line\n"


def test_a_sweep_on_a_terminal_keeps_a_status_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    study = tmp_path / "tiny.toml"
    study.write_text('name = "tiny"\nvary = ["combinator"]\n[base]\ndepth = 8\nsteps = 2\nbatch_size = 16\n'
                     'measure = []\nchance_band = 0.0\n[grid]\nvariant = ["plain", "resnet"]\nseed = [0]\n')
    term = _Terminal()
    monkeypatch.setattr("sys.stdout", term)
    assert main(["sweep", str(study), "--results-dir", str(tmp_path / "r")]) == 0
    out = term.getvalue()
    status = re.findall(r"\r\x1b\[K(sweep: done \d, running \d, failed \d, remaining \d, ETA [^,]+, elapsed [\d:]+)",
                        out)
    assert status[0].startswith("sweep: done 0, running 1, failed 0, remaining 1, ETA ?")
    assert any(s.startswith("sweep: done 1, running 1, failed 0, remaining 0") for s in status)
    finished = re.findall(r"\r\x1b\[K(\[\d/2\] [\w-]+: ok, val acc [\d.]+, [\d.]+ s \| done \d)", out)
    assert [f.split(": ok")[0][:10] for f in finished] == ["[1/2] plai", "[2/2] resn"]
    assert re.search(r"\r\x1b\[Ksweep done in 0:\d\d:\d\d: 2 of 2 runs ok", out)  # the status line erased first
