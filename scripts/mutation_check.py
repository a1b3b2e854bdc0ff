"""Plant known bugs one at a time and check that the test suite catches each (a mutation check of the suite).

Each mutant is one exact text replacement in one source file: the off-by-one Holm factor, an initialisation the
fairness guard stops comparing, a divergence limit twice too loose, a norm's weight counted in
``weight_grad_norm``, He 2015's shortcut options A and B swapped, and Highway's carry cut from its gate's gradient.
For each, the checkout's tracked files are copied to a scratch folder, the replacement made there, and pytest run on
the copy (``-x``: the first failing test kills the mutant, if it passes on an unmutated copy). Prints one line per
mutant (killed, SURVIVED, or INVALID where the test that failed fails without the mutant too; by which test; in how
long) and exits 1 unless every mutant was killed; a mutant whose text is no longer in the code stops it (update the
mutant here).

    python scripts/mutation_check.py                      # the README command's suite, 2 workers
    python scripts/mutation_check.py --only holm -- -k stats
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent


class Mutant(NamedTuple):
    name: str
    file: str
    old: str
    new: str
    what: str


MUTANTS = [
    Mutant("holm", "bench/analysis/comparison.py", "min(1.0, (m - rank) * p[i])", "min(1.0, (m - rank + 1) * p[i])",
           "Holm's factor off by one (m - k + 2 instead of m - k + 1)"),
    Mutant("fairness-init", "bench/sweeps/fairness.py", 'CONFOUNDS = ("init", "width"', 'CONFOUNDS = ("width"',
           "the fairness guard no longer compares the initialisation"),
    Mutant("divergence", "bench/runs/train.py", "limit = factor * first if", "limit = 2 * factor * first if",
           "a run diverges only at twice the declared factor"),
    Mutant("weight-grad-norm", "bench/runs/probes.py", "if isinstance(m, (nn.Linear, *_CONVS)):",
           "if isinstance(m, (nn.Linear, nn.LayerNorm, nn.BatchNorm2d, *_CONVS)):",
           "a norm's gain counted in weight_grad_norm"),
    Mutant("shortcut", "variants/layers.py", 'if kind == "C" or (kind == "B" and not same_shape):',
           'if kind == "C" or (kind == "A" and not same_shape):', "shortcut options A and B swapped (He 2015 §3.3)"),
    Mutant("highway-carry", "variants/combinators.py", "carry = (1.0 - t) * x", "carry = (1.0 - t.detach()) * x",
           "Highway's carry cut from its gate's gradient (the same forward)"),
]


def tracked_copy(dest: Path, mutant: Mutant | None = None) -> None:
    """The checkout's tracked files as they are on disk (uncommitted edits included) into ``dest``, with ``mutant``
    planted, committed there as a git repository of its own (runs record the commit they ran on)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    if mutant is not None:
        path = dest / mutant.file
        text = path.read_text(encoding="utf-8")
        if text.count(mutant.old) != 1:
            sys.exit(f"mutant {mutant.name}: {mutant.old!r} is not in {mutant.file} exactly once; update the mutant")
        path.write_text(text.replace(mutant.old, mutant.new), encoding="utf-8")
    git = ["git", "-c", "user.name=mutant", "-c", "user.email=mutant@localhost"]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", mutant.name if mutant else "unmutated"]):
        subprocess.run([*git, *cmd], cwd=dest, check=True, capture_output=True)


def pytest_in(tree: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree), "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *args], cwd=tree,
                          env=env, capture_output=True, text=True)


def run_mutant(mutant: Mutant, pytest_args: list[str]) -> tuple[str, str, float]:
    """(verdict, the first failing test or pytest's last line, seconds) of one mutant. A mutant is killed by a test
    that fails with it and passes without it (checked on an unmutated copy: a test failing anyway kills nothing)."""
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.name}-") as tmp:
        tracked_copy(Path(tmp), mutant)
        start = time.monotonic()
        done = pytest_in(Path(tmp), pytest_args)
        seconds = time.monotonic() - start
    failed = re.findall(r"^FAILED (.+?)(?: - .*)?$", done.stdout, re.M)  # a test id may hold spaces
    if not failed:
        last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr.strip()[-200:]
        return "SURVIVED", last, seconds
    with tempfile.TemporaryDirectory(prefix="unmutated-") as tmp:
        tracked_copy(Path(tmp))
        control = pytest_in(Path(tmp), [failed[0]])
    return ("killed" if control.returncode == 0 else "INVALID"), failed[0], seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", choices=[m.name for m in MUTANTS], help="these mutants only")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments "
                        "(default: -m 'not slow' -n 2)")
    args = parser.parse_args()
    pytest_args = args.pytest_args or ["-m", "not slow and not gpucheck", "-n", "2"]  # the README command's suite
    survived = 0
    for mutant in MUTANTS:
        if args.only and mutant.name not in args.only:
            continue
        verdict, by, seconds = run_mutant(mutant, pytest_args)
        survived += verdict != "killed"
        print(f"{mutant.name:17s} {verdict:8s} {seconds:6.0f} s  {mutant.what}; {by}", flush=True)
    sys.exit(1 if survived else 0)


if __name__ == "__main__":
    main()
