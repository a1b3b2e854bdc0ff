"""Why Full Attention Residuals stay at the unigram plateau in the crosslayer quick preset: ablations on one seed.

    python scripts/diagnose_attnres.py [--depth 24] [--seed 0] [--only LABEL ...]

Each case is the crosslayer quick preset's configuration of ``attn_res`` (same data, steps, optimiser, schedule, GPT-2
init) changed in one thing, trained once, beside ``preln`` of the same preset. At ``w = 0`` every pseudo-query
reads a uniform average of the sources, and a uniform average has the direction of Pre-LN's sum: the sublayers'
norms hand them what Pre-LN's would, so AttnRes starts as Pre-LN and whatever parts them is learned. The table gives
the validation loss at every evaluation, then, after training: what reaches the final norm (the share of its energy
in the mean over tokens: one vector for every token is the byte frequencies, the plateau), the weight the last read
gives the embeddings, the mean pseudo-query norm, and the share of each sublayer output's energy in its mean over
tokens (median over sublayers). First, at initialisation, the RMS of what enters a few sublayers' norms and of what
the norms hand the sublayers. A diagnosis, not a benchmark: one seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics

import torch
from diagnose_dyt import Edit, scale_embeddings, trained_losses  # a sibling script: python puts scripts/ on the path
from torch import nn

from bench.analysis.studyfile import find_study
from bench.runs.train import setup
from bench.sweeps.study import load_study
from variants.attn_res import AttnResUnit, DepthAttention


def _freeze_queries(model: nn.Module) -> None:
    for m in model.modules():
        if isinstance(m, DepthAttention):
            m.query.requires_grad_(False)


def _norm_eps(eps: float) -> Edit:
    def edit(model: nn.Module) -> None:
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.eps = eps
    return edit


CASES: list[tuple[str, str, dict[str, object], Edit | None]] = [
    ("preln (the study's baseline)", "preln", {}, None),
    ("attn_res (the study's)", "attn_res", {}, None),
    ("attn_res, pseudo-queries frozen at 0", "attn_res", {}, _freeze_queries),
    ("attn_res, lr 1e-3", "attn_res", {"lr": 1e-3}, None),
    ("attn_res, LayerNorm eps 1e-10", "attn_res", {}, _norm_eps(1e-10)),
    ("attn_res, embeddings x sqrt(d) at init", "attn_res", {}, scale_embeddings(8.0)),
]


def built(variant: str, depth: int, seed: int, changes: dict[str, object], edit: Edit | None):
    base = {(c.variant, c.depth, c.seed): c for c in load_study(find_study("crosslayer")).configs("quick")}
    cfg = base[(variant, depth, seed)]
    lr = float(changes.pop("lr", cfg.lr))
    cfg = dataclasses.replace(cfg, lr=lr, measure=(), probe_every=None, save_checkpoint=False)
    s = setup(cfg)
    if edit is not None:
        edit(s.model)
    return s


def common_share(h: torch.Tensor) -> float:
    """The share of the energy of ``h`` (..., d) in its mean over tokens."""
    flat = h.flatten(0, -2)
    return float(flat.mean(0).pow(2).sum() / flat.pow(2).mean(0).sum())


def at_init(s) -> str:
    """The RMS of what enters the sublayers' norms and of what they hand the sublayers, at a few depths."""
    x, _ = next(iter(s.task.train_eval_batches(16)))
    norms = [m for name, m in s.model.named_modules() if name.endswith("norm_in")]
    seen: list[tuple[float, float]] = []
    hooks = [m.register_forward_hook(lambda m, a, o: seen.append((float(a[0].pow(2).mean().sqrt()),
                                                                  float(o.pow(2).mean().sqrt())))) for m in norms]
    with torch.no_grad():
        s.model(x)
    for h in hooks:
        h.remove()
    picks = sorted({0, len(seen) // 4, len(seen) // 2, len(seen) - 1})
    return "; ".join(f"sublayer {i + 1}: {seen[i][0]:.1e} -> {seen[i][1]:.2f}" for i in picks)


def after(s) -> str:
    x, _ = next(iter(s.task.train_eval_batches(16)))
    seen: dict[str, torch.Tensor] = {}
    hooks = [s.model.norm.register_forward_hook(lambda m, a, o: seen.setdefault("final", a[0]))]
    units = [m for m in s.model.modules() if isinstance(m, AttnResUnit)]
    if units:
        def sources(module: torch.nn.Module, args: tuple) -> None:  # the last read's: (earlier ones, the newest)
            seen.setdefault("sources", (*args[0], args[1]))

        hooks.append(units[-1].combine.register_forward_pre_hook(sources))
    with torch.no_grad():
        s.model(x)
    for h in hooks:
        h.remove()
    text = f"final norm input: RMS {float(seen['final'].pow(2).mean().sqrt()):.3f}, common share " \
           f"{common_share(seen['final']):.0%}"
    if units:
        sources = torch.stack(seen["sources"], dim=-2)  # the embeddings and every sublayer's output
        last = units[-1].combine.weights(sources)  # the read that feeds the final norm
        outputs = statistics.median(common_share(sources[..., i, :]) for i in range(1, sources.shape[-2]))
        queries = statistics.mean(float(u.combine.query.detach().norm()) for u in units)
        text += (f"; embeddings' weight in the last read {float(last[..., 0].detach().mean()):.3f} (uniform "
                 f"{1 / sources.shape[-2]:.3f}); mean |w| {queries:.3f}; sublayer outputs' common share {outputs:.0%}")
    return text


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--depth", type=int, default=24)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", nargs="*", help="labels of the cases to run (default: all)")
    ns = p.parse_args()
    cases = [c for c in CASES if not ns.only or c[0] in ns.only]
    print(f"At initialisation (depth {ns.depth}, seed {ns.seed}): RMS of a sublayer's input -> of its norm's output")
    for label, variant, changes, edit in cases:
        print(f"  {label:40s} {at_init(built(variant, ns.depth, ns.seed, dict(changes), edit))}", flush=True)
    print(f"\nTrained, crosslayer quick preset, depth {ns.depth}, seed {ns.seed} (validation loss at each evaluation; "
          f"{math.log(256):.2f} is chance, 3.06 the byte frequencies):")
    for label, variant, changes, edit in cases:
        s = built(variant, ns.depth, ns.seed, dict(changes), edit)
        print(f"  {label:40s} {trained_losses(s)}", flush=True)
        s.model.eval()
        print(f"  {'':40s} {after(s)}", flush=True)


if __name__ == "__main__":
    main()
