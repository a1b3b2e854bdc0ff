"""Why DyT (and Derf) stay at the unigram plateau in the normfree study's quick preset: ablations on one seed.

    python scripts/diagnose_dyt.py [--depth 6] [--seed 0] [--only LABEL ...]

Each case is the normfree quick preset's Pre-LN configuration (same data, steps, optimiser, schedule, init) changed in
one thing, trained once; the table gives the validation loss at every evaluation. First it prints, at
initialisation, the RMS of the residual stream entering the first attention sublayer and of what its norm hands the
attention (the norm's output), per case. A diagnosis, not a benchmark: one seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from collections.abc import Callable

import torch
from torch import nn

from bench.analysis.studyfile import find_study
from bench.runs.train import Record, setup, train
from bench.sweeps.study import load_study

Edit = Callable[[nn.Module], None]


def _scale_embeddings(factor: float) -> Edit:
    def edit(model: nn.Module) -> None:
        with torch.no_grad():
            model.tok_emb.weight.mul_(factor)
            model.pos_emb.weight.mul_(factor)
    return edit


# label, variant, model_args replacing the preset's, edit of the built model
CASES: list[tuple[str, str, dict[str, object], Edit | None]] = [
    ("layernorm", "preln", {"norm": "layernorm"}, None),
    ("dyt (alpha0 0.5)", "preln", {"norm": "dyt"}, None),
    ("derf (alpha0 0.5)", "preln", {"norm": "derf"}, None),
    ("dyt, alpha0 5", "dyt", {"alpha_init": 5.0}, None),
    ("dyt, alpha0 50", "dyt", {"alpha_init": 50.0}, None),
    ("dyt, embeddings x sqrt(d) at init", "preln", {"norm": "dyt"}, _scale_embeddings(8.0)),
    ("layernorm, embeddings x sqrt(d) at init", "preln", {"norm": "layernorm"}, _scale_embeddings(8.0)),
    ("dyt, lr 1e-3", "preln", {"norm": "dyt", "lr": 1e-3}, None),
    ("dyt_llama (its recipe)", "dyt_llama", {}, None),
]


def built(variant: str, depth: int, seed: int, changes: dict[str, object], edit: Edit | None):
    base = {(c.variant, c.depth, c.seed, dict(c.model_args).get("norm")): c
            for c in load_study(find_study("normfree")).configs("quick")}
    cfg = base[("preln", depth, seed, "layernorm")]
    args = {k: v for k, v in dict(cfg.model_args).items() if k != "norm"}
    lr = float(changes.pop("lr", cfg.lr))
    args |= changes
    if variant == "dyt_llama":  # its own norm, body and biases are pinned
        args = {k: v for k, v in args.items() if k in ("d_model", "n_heads", "d_ff", "init")}
    cfg = dataclasses.replace(cfg, variant=variant, lr=lr, measure=(), probe_every=None,
                              model_args=tuple(sorted(args.items())))
    s = setup(cfg)
    if edit is not None:
        edit(s.model)
    return s


def scales(s) -> str:
    x, _ = next(iter(s.task.train_eval_batches(16)))
    unit, seen = s.model.blocks[0].attn, {}
    hooks = [unit.register_forward_hook(lambda m, a, o: seen.setdefault("stream", a[0])),
             unit.norm_in.register_forward_hook(lambda m, a, o: seen.setdefault("normed", o))]
    with torch.no_grad():
        s.model(x)
    for h in hooks:
        h.remove()
    rms = {k: float(v.pow(2).mean().sqrt()) for k, v in seen.items()}
    return f"stream {rms['stream']:.3f}, norm output {rms['normed']:.3f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", nargs="*", help="labels of the cases to run (default: all)")
    ns = p.parse_args()
    cases = [c for c in CASES if not ns.only or c[0] in ns.only]
    print(f"At initialisation (depth {ns.depth}, seed {ns.seed}; RMS over a batch of 16 sequences, first attention):")
    for label, variant, changes, edit in cases:
        print(f"  {label:42s} {scales(built(variant, ns.depth, ns.seed, dict(changes), edit))}", flush=True)
    print(f"\nTrained, normfree quick preset (validation loss at each evaluation; unigram plateau "
          f"{math.log(256):.2f} is chance, 3.06 the byte frequencies):")
    for label, variant, changes, edit in cases:
        s = built(variant, ns.depth, ns.seed, dict(changes), edit)
        rec, t0 = Record(), time.perf_counter()
        train(s, rec, False, None)
        losses = " ".join(f"{p['val_loss']:.3f}" for p in rec.eval_curve)
        print(f"  {label:42s} {losses}  ({time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
