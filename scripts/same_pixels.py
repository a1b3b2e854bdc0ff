"""Compare, decoded pixel for pixel, the PNGs of a results folder's copy that commands drew again with the committed
ones: a change meant to make drawing faster must leave every figure as it was.

    python scripts/read_bench.py --reports --repeat 1 --keep /tmp/after    # every study's report, figures redrawn
    python scripts/same_pixels.py /tmp/after                                # ... against results/plots/

A PNG counts as redrawn when the copy's file is newer than the committed one (the copy keeps the committed files'
times); the others were not drawn by the commands run (e.g. figures made by the analysis commands) and are only
counted. Exits 1 when a redrawn PNG differs (its size or any pixel).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parent.parent


def same(a: Path, b: Path) -> bool:
    x, y = np.asarray(Image.open(a)), np.asarray(Image.open(b))
    return x.shape == y.shape and np.array_equal(x, y)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("copy", type=Path, help="the results folder the commands wrote into (read_bench.py --keep DIR)")
    p.add_argument("--against", type=Path, default=REPO / "results", help="the committed folder (default results/)")
    args = p.parse_args()
    committed = sorted((args.against / "plots").rglob("*.png"))
    redrawn = [c for c in committed if (args.copy / c.relative_to(args.against)).exists()
               and (args.copy / c.relative_to(args.against)).stat().st_mtime > c.stat().st_mtime]
    different = [c for c in redrawn if not same(c, args.copy / c.relative_to(args.against))]
    for c in different:
        print(f"differs: {c.relative_to(args.against)}")
    print(f"{len(redrawn) - len(different)} of {len(redrawn)} redrawn PNGs pixel-identical "
          f"({len(committed) - len(redrawn)} of the {len(committed)} committed PNGs not redrawn)")
    return 1 if different else 0


if __name__ == "__main__":
    sys.exit(main())
