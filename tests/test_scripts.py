"""Every Python script of scripts/ starts: its imports resolve against the package as it is now (a script whose
imports a refactor broke fails here, not the day someone reruns a committed diagnosis)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = sorted((REPO / "scripts").glob("*.py"))


def test_the_scripts_are_found() -> None:
    assert {"diagnose_attnres.py", "diagnose_dyt.py", "diagnose_hybridnorm.py"} <= {p.name for p in SCRIPTS}


# One fresh interpreter runs every script's --help in turn (each as __main__, as `python SCRIPT --help` would), so
# torch and the package are imported once rather than once per script; each script's usage and exit status come
# back in order, each after a line of its own.
RUN_EACH = """
import contextlib, io, os, runpy, sys
for path in sys.argv[1:]:
    out, err, code = io.StringIO(), io.StringIO(), None
    sys.argv, sys.path[0] = [path, "--help"], os.path.dirname(path)  # as `python SCRIPT` sets them
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as stop:
            code = stop.code
        except BaseException as exc:
            code = f"{type(exc).__name__}: {exc}"
    print(f"=== {path} exit={code!r}")
    print(out.getvalue() + err.getvalue())
"""


def test_every_script_imports_and_prints_its_usage() -> None:
    done = subprocess.run([sys.executable, "-c", RUN_EACH, *map(str, SCRIPTS)], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    parts = done.stdout.split("=== ")[1:]
    assert [part.split(" exit=")[0] for part in parts] == [str(p) for p in SCRIPTS]
    for script, part in zip(SCRIPTS, parts, strict=True):
        head, _, usage = part.partition("\n")
        assert head.endswith("exit=0"), f"{script.name}: {head} {usage[-2000:]}"
        assert usage.startswith(f"usage: {script.name}"), f"{script.name}: {usage[:500]}"
