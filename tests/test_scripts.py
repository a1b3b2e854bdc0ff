"""Every Python script of scripts/ starts: its imports resolve against the package as it is now (a script whose
imports a refactor broke fails here, not the day someone reruns a committed diagnosis)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = sorted((REPO / "scripts").glob("*.py"))


def test_the_scripts_are_found() -> None:
    assert {"diagnose_attnres.py", "diagnose_dyt.py", "diagnose_hybridnorm.py"} <= {p.name for p in SCRIPTS}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_a_script_imports_and_prints_its_usage(script: Path) -> None:
    done = subprocess.run([sys.executable, str(script), "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: {script.name}")
