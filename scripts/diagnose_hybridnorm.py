"""Why HybridNorm stalls at the unigram plateau in the frontier study's quick preset: ablations on seed 0, depth 6.

    python scripts/diagnose_hybridnorm.py [--lr 1e-3] [--depth 6] [--seed 0]

Each case is the frontier quick preset's configuration of its variant (same data, steps, optimiser, schedule),
changed in one thing, trained once; the table gives the validation loss at every evaluation. First it prints, at
initialisation, the RMS of the residual stream entering each attention sublayer and of the attention branch's
output (before the join), for the cases that differ at initialisation. A diagnosis, not a benchmark: one seed.
"""

from __future__ import annotations

import argparse
import dataclasses

import torch
from diagnose_dyt import Edit, trained_losses  # a sibling script: python puts scripts/ on the path
from torch import nn

from bench.analysis.studyfile import find_study
from bench.runs.train import setup
from bench.sweeps.study import load_study


def _drop(*names: str) -> Edit:
    def edit(model: nn.Module) -> None:
        for mod in model.modules():
            for name in names:
                if hasattr(mod, name):
                    setattr(mod, name, nn.Identity())
    return edit


def _scale_out_proj(factor: float) -> Edit:
    def edit(model: nn.Module) -> None:
        with torch.no_grad():
            for mod in model.modules():
                if hasattr(mod, "v_norm"):
                    mod.proj.weight.mul_(factor)
    return edit


# label, variant, extra model_args, edit of the built model
CASES: list[tuple[str, str, dict[str, object], Edit | None]] = [
    ("preln", "preln", {}, None),
    ("postln", "postln", {}, None),
    ("hybridnorm", "hybridnorm", {}, None),
    ("hybridnorm without V-norm", "hybridnorm", {}, _drop("v_norm")),
    ("hybridnorm without QKV-norm", "hybridnorm", {}, _drop("q_norm", "k_norm", "v_norm")),
    ("hybridnorm, out-proj x0.1 at init", "hybridnorm", {}, _scale_out_proj(0.1)),
    ("hybridnorm, init=gpt2 (Megatron)", "hybridnorm", {"init": "gpt2"}, None),
    ("preln, init=gpt2 (Megatron)", "preln", {"init": "gpt2"}, None),
    ("postln, init=gpt2 (Megatron)", "postln", {"init": "gpt2"}, None),
]


def built(variant: str, depth: int, seed: int, lr: float, model_args: dict[str, object], edit: Edit | None):
    base = {(c.variant, c.depth, c.seed): c for c in load_study(find_study("frontier")).configs("quick")}
    cfg = base[(variant, depth, seed)]
    args = dict(cfg.model_args) | model_args
    cfg = dataclasses.replace(cfg, lr=lr, measure=(), probe_every=None, model_args=tuple(sorted(args.items())))
    s = setup(cfg)
    if edit is not None:
        edit(s.model)
    return s


def branch_scales(s, layers: tuple[int, ...] = (0, 1)) -> str:
    x, _ = next(iter(s.task.train_eval_batches(16)))
    out = []
    for i in layers:
        unit, seen = s.model.blocks[i].attn, {}
        hooks = [unit.register_forward_hook(lambda m, a, o, seen=seen: seen.setdefault("stream", a[0])),
                 unit.body.register_forward_hook(lambda m, a, o, seen=seen: seen.setdefault("branch", o))]
        with torch.no_grad():
            s.model(x)
        for h in hooks:
            h.remove()
        rms = {k: float(v.pow(2).mean().sqrt()) for k, v in seen.items()}
        out.append(f"layer {i}: stream {rms['stream']:.3f}, attention branch {rms['branch']:.3f}")
    return "; ".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", nargs="*", help="labels of the cases to run (default: all)")
    ns = p.parse_args()
    cases = [c for c in CASES if not ns.only or c[0] in ns.only]
    print(f"At initialisation (depth {ns.depth}, seed {ns.seed}; RMS over a batch of 16 sequences):")
    for label, variant, args, edit in cases:
        print(f"  {label:36s} {branch_scales(built(variant, ns.depth, ns.seed, ns.lr, args, edit))}")
    print(f"\nTrained, frontier quick preset at lr {ns.lr:g} (validation loss at each evaluation):")
    for label, variant, args, edit in cases:
        s = built(variant, ns.depth, ns.seed, ns.lr, args, edit)
        print(f"  {label:36s} {trained_losses(s)}", flush=True)


if __name__ == "__main__":
    main()
