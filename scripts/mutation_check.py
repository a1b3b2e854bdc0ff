"""Plant known bugs one at a time and check that the test suite catches each (a mutation check of the suite).

Each mutant is one exact text replacement in one source file: the off-by-one Holm factor, an initialisation the
fairness guard stops comparing, a divergence limit twice too loose, a norm's weight counted in
``weight_grad_norm``, and He 2015's shortcut options A and B swapped. For each, the checkout's tracked files
are copied to a scratch folder, the replacement made there, and pytest run on the copy (``-x``: the first
failing test kills the mutant). Prints one line per mutant (killed or survived, by which test, in how long) and
exits 1 if any survived, 2 if a mutant's text is no longer in the code (the mutant is stale: update it here).

    python scripts/mutation_check.py                      # the not-slow suite, 2 workers
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
]


def tracked_copy(dest: Path) -> None:
    """The checkout's tracked files as they are on disk (uncommitted edits included) into ``dest``."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def run_mutant(mutant: Mutant, pytest_args: list[str]) -> tuple[bool, str, float]:
    """(killed, the first failing test or pytest's last line, seconds) of one mutant."""
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.name}-") as tmp:
        tree = Path(tmp)
        tracked_copy(tree)
        path = tree / mutant.file
        text = path.read_text(encoding="utf-8")
        if text.count(mutant.old) != 1:
            sys.exit(f"mutant {mutant.name}: {mutant.old!r} is not in {mutant.file} exactly once; update the mutant")
        path.write_text(text.replace(mutant.old, mutant.new), encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": str(tree), "MPLBACKEND": "Agg"}
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *pytest_args],
                              cwd=tree, env=env, capture_output=True, text=True)
        seconds = time.monotonic() - start
    failed = re.findall(r"^FAILED (\S+)", done.stdout, re.M)
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr.strip()[-200:]
    return done.returncode == 1, failed[0] if failed else last, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", choices=[m.name for m in MUTANTS], help="these mutants only")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments "
                        "(default: -m 'not slow' -n 2)")
    args = parser.parse_args()
    pytest_args = args.pytest_args or ["-m", "not slow", "-n", "2"]
    survived = 0
    for mutant in MUTANTS:
        if args.only and mutant.name not in args.only:
            continue
        killed, by, seconds = run_mutant(mutant, pytest_args)
        survived += not killed
        print(f"{mutant.name:17s} {'killed' if killed else 'SURVIVED':8s} {seconds:6.0f} s  {mutant.what}; {by}",
              flush=True)
    sys.exit(1 if survived else 0)


if __name__ == "__main__":
    main()
