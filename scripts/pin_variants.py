"""Fingerprint every registered variant: parameter names and shapes, and bit-exact hashes of the weights a
seed draws, of a training-mode forward on a fixed input and of the gradients it gives.

Refactoring the variants must not change what they compute. Run this before and after a change and
compare the two files (``--check OLD.json`` exits 1 naming every variant whose fingerprint moved):

    python scripts/pin_variants.py --out before.json          # on the old commit
    python scripts/pin_variants.py --check before.json        # on the new one

It also writes the registry's static index, what the commands that only read results know of each variant (family,
paper, axes, figure series) without importing torch (:mod:`bench.runs.registry_index`); rewrite it after changing
a variant's registration, and a test says when it is stale:

    python scripts/pin_variants.py --index                     # rewrites bench/runs/registry_index.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys

import torch

import variants
from bench.reports.plotdata import registry_entries
from bench.runs import registry_index

# Too big to build and run on a CPU in seconds: compared by parameter names and shapes only (meta device).
SHAPES_ONLY_ABOVE = 30_000_000


def _digest(tensors) -> str:
    """One hash of the tensors' shapes and exact values, whatever their names and order (a refactor may rename
    and reorder modules without changing what a seed draws or what the model computes)."""
    each = sorted(hashlib.sha256(str(tuple(t.shape)).encode() + t.detach().contiguous().cpu().numpy().tobytes())
                  .hexdigest() for t in tensors)
    return hashlib.sha256("".join(each).encode()).hexdigest()[:16]


def _input(name: str, kwargs: dict) -> torch.Tensor:
    family = variants.describe(name)["family"]
    g = torch.Generator().manual_seed(1)
    if family == "transformer":
        return torch.randint(0, kwargs.get("vocab_size", 256), (2, 16), generator=g)
    if family == "mlp":
        size = kwargs.get("image_size", 28)
        return torch.randn(4, kwargs.get("in_chans", 1), size, size, generator=g)
    size = 64 if family == "resnet_imagenet" else 32
    return torch.randn(4, kwargs.get("in_chans", 3), size, size, generator=g)


def fingerprint(name: str) -> dict:
    desc = variants.describe(name)
    with torch.device("meta"):
        meta = variants.create(name)
    out = {
        "params": {k: list(v.shape) for k, v in meta.state_dict().items()},
        "modules": [n for n, _ in meta.named_modules()],
        "axes": desc["axes"],
    }
    if sum(p.numel() for p in meta.parameters()) > SHAPES_ONLY_ABOVE:
        return out
    torch.manual_seed(0)
    model = variants.create(name)
    model.train()
    x = _input(name, desc["defaults"])
    y = model(x)
    y.float().square().mean().backward()
    out["weights"] = _digest(model.state_dict().values())
    out["output"] = _digest([y])
    out["grads"] = _digest(p.grad for p in model.parameters() if p.grad is not None)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="write the fingerprints to this JSON file")
    p.add_argument("--check", help="compare against fingerprints written earlier; exit 1 on any change")
    p.add_argument("--only", nargs="*", help="these variants only")
    p.add_argument("--index", action="store_true", help=f"write the registry's static index ({registry_index.INDEX})")
    args = p.parse_args()
    if args.index:
        registry_index.INDEX.write_text(registry_index.render(registry_entries()), encoding="utf-8")
        print(f"{registry_index.INDEX} written")
        return 0
    torch.use_deterministic_algorithms(True)
    names = args.only or variants.list_variants()
    prints = {n: fingerprint(n) for n in names}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(prints, f, indent=1, sort_keys=True)
    if args.check:
        with open(args.check) as f:
            old = json.load(f)
        bad = 0
        for n in sorted(set(prints) if args.only else set(old) | set(prints)):
            if n not in prints or n not in old:
                print(f"{n}: only in {'the old' if n in old else 'the new'} fingerprints")
                bad += 1
                continue
            moved = [k for k in sorted(set(old[n]) | set(prints[n])) if old[n].get(k) != prints[n].get(k)]
            if moved:
                print(f"{n}: changed {', '.join(moved)}")
                for k in ("params", "modules"):
                    if k in moved:
                        a, b = set(old[n][k]), set(prints[n][k])
                        print(f"    {k} only before: {sorted(a - b)[:8]}\n    {k} only after: {sorted(b - a)[:8]}")
                bad += 1
        print(f"{len(prints)} variants fingerprinted, {bad} changed")
        return 1 if bad else 0
    print(f"{len(prints)} variants fingerprinted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
