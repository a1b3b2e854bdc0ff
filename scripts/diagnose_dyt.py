"""Why DyT (and Derf) stay at the unigram plateau in the normfree study's quick preset: ablations on one seed.

    python scripts/diagnose_dyt.py [--depth 6] [--seed 0] [--steps N] [--only LABEL ...]

Each case is the normfree quick preset's Pre-LN configuration (same data, steps, optimiser, schedule, init) changed in
one thing, trained once; the table gives the validation loss at every evaluation, then the scales after training:
the RMS of the stream and norm output as at initialisation, the α of the scalar-α norms (mean over the stack), the
RMS of their γ and of the token embedding. First it prints, at initialisation, the RMS of the residual stream
entering the first attention sublayer and of what its norm hands the attention (the norm's output), and the gradient
of the first norm's α on one batch, per case. ``--steps`` lengthens the schedule (warm-up and evaluations scaled
with it). A diagnosis, not a benchmark: one seed.
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
from variants.lm_norms import EmbeddingScale

Edit = Callable[[nn.Module], None]


def scale_embeddings(factor: float) -> Edit:
    """Multiply the token and position embeddings by ``factor`` at init (also used by diagnose_attnres.py)."""
    def edit(model: nn.Module) -> None:
        with torch.no_grad():
            model.tok_emb.weight.mul_(factor)
            model.pos_emb.weight.mul_(factor)
    return edit


def _embedding_scale(s0: float) -> Edit:
    """The DyT authors' learnable scalar on the embeddings (``dyt_llama``'s stream) at ``s0``: 50 puts the stream at
    unit RMS (the N(0, 0.02) embeddings), the scale their √d gives LLaMA at d_model 4096 (0.02·64 = 1.28)."""
    def edit(model: nn.Module) -> None:
        stream = EmbeddingScale(model.tok_emb.embedding_dim)
        with torch.no_grad():
            stream.scale.fill_(s0)
        model.stream = stream
    return edit


# label, variant, model_args replacing the preset's, edit of the built model
CASES: list[tuple[str, str, dict[str, object], Edit | None]] = [
    ("layernorm", "preln", {"norm": "layernorm"}, None),
    ("dyt (alpha0 0.5)", "preln", {"norm": "dyt"}, None),
    ("derf (alpha0 0.5)", "preln", {"norm": "derf"}, None),
    ("dyt, final norm LayerNorm", "dyt", {"final_norm": "layernorm"}, None),
    ("dyt, alpha0 5", "dyt", {"alpha_init": 5.0}, None),
    ("dyt, alpha0 50", "dyt", {"alpha_init": 50.0}, None),
    ("dyt, embeddings x sqrt(d) at init", "preln", {"norm": "dyt"}, scale_embeddings(8.0)),
    ("layernorm, embeddings x sqrt(d) at init", "preln", {"norm": "layernorm"}, scale_embeddings(8.0)),
    ("dyt, lr 1e-3", "preln", {"norm": "dyt", "lr": 1e-3}, None),
    ("dyt, stream at unit RMS (learnable s0 50)", "preln", {"norm": "dyt"}, _embedding_scale(50.0)),
    ("derf, stream at unit RMS (learnable s0 50)", "preln", {"norm": "derf"}, _embedding_scale(50.0)),
    ("layernorm, stream at unit RMS (s0 50)", "preln", {"norm": "layernorm"}, _embedding_scale(50.0)),
    ("dyt_llama (its recipe)", "dyt_llama", {}, None),
]


def built(variant: str, depth: int, seed: int, changes: dict[str, object], edit: Edit | None,
          steps: int | None = None):
    base = {(c.variant, c.depth, c.seed, dict(c.model_args).get("norm")): c
            for c in load_study(find_study("normfree")).configs("quick")}
    cfg = base[("preln", depth, seed, "layernorm")]
    args = {k: v for k, v in dict(cfg.model_args).items() if k != "norm"}
    lr = float(changes.pop("lr", cfg.lr))
    args |= changes
    if variant == "dyt_llama":  # its own norm, body and biases are pinned
        args = {k: v for k, v in args.items() if k in ("d_model", "n_heads", "d_ff", "init")}
    more = {} if steps is None else {"steps": steps, "warmup_steps": cfg.warmup_steps * steps // cfg.steps,
                                     "eval_every": cfg.eval_every * steps // cfg.steps}
    cfg = dataclasses.replace(cfg, variant=variant, lr=lr, measure=(), probe_every=None,
                              model_args=tuple(sorted(args.items())), **more)
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


def scalar_alpha_norms(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if isinstance(getattr(m, "alpha", None), nn.Parameter)
            and m.alpha.dim() == 0 and isinstance(getattr(m, "weight", None), nn.Parameter)]


def alpha_grad(s) -> str:
    norms = scalar_alpha_norms(s.model)
    if not norms:
        return "no scalar alpha"
    x, y = next(iter(s.task.train_eval_batches(16)))
    s.model.zero_grad()
    logits = s.model(x)
    nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten()).backward()
    g = norms[0].alpha.grad
    s.model.zero_grad()
    return "alpha grad None" if g is None else f"first alpha grad {float(g):+.2e}"


def final_input(s) -> str:
    """What reaches the final norm: the share of its energy in the mean over tokens (one vector added to every
    token, e.g. the byte frequencies written into the stream) and, for a scalar-α norm, the fraction of
    ``|α·x| > 2`` (tanh past 0.96: saturated, its gradient below 0.07)."""
    x, _ = next(iter(s.task.train_eval_batches(16)))
    seen: dict[str, torch.Tensor] = {}
    hook = s.model.norm.register_forward_hook(lambda m, a, o: seen.setdefault("x", a[0]))
    with torch.no_grad():
        s.model(x)
    hook.remove()
    h = seen["x"].flatten(0, -2)
    common = float(h.mean(0).pow(2).sum() / h.pow(2).mean(0).sum())
    alpha = getattr(s.model.norm, "alpha", None)
    sat = "" if alpha is None else f", saturated {float((alpha.detach() * h).abs().gt(2).float().mean()):.0%}"
    return f"final norm input: RMS {float(h.pow(2).mean().sqrt()):.3f}, common share {common:.0%}{sat}"


def state(s) -> str:
    norms = scalar_alpha_norms(s.model)
    emb = float(s.model.tok_emb.weight.detach().pow(2).mean().sqrt())
    if not norms:
        return f"tok_emb {emb:.3f}"
    alphas = [float(m.alpha.detach()) for m in norms]
    gamma = float(torch.cat([m.weight.detach().flatten() for m in norms]).pow(2).mean().sqrt())
    return (f"alpha mean {sum(alphas) / len(alphas):.3f} (min {min(alphas):.3f}, max {max(alphas):.3f}), "
            f"gamma {gamma:.3f}, tok_emb {emb:.3f}")


def trained_losses(s) -> str:
    """Train the set-up run ``s`` to its end; its validation loss at every evaluation and the seconds it took (also
    used by diagnose_attnres.py and diagnose_hybridnorm.py)."""
    rec, t0 = Record(), time.perf_counter()
    train(s, rec, False, None)
    return " ".join(f"{p['val_loss']:.3f}" for p in rec.eval_curve) + f"  ({time.perf_counter() - t0:.0f} s)"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, help="training steps (default: the quick preset's)")
    p.add_argument("--only", nargs="*", help="labels of the cases to run (default: all)")
    ns = p.parse_args()
    cases = [c for c in CASES if not ns.only or c[0] in ns.only]
    print(f"At initialisation (depth {ns.depth}, seed {ns.seed}; RMS over a batch of 16 sequences, first attention):")
    for label, variant, changes, edit in cases:
        s = built(variant, ns.depth, ns.seed, dict(changes), edit)
        print(f"  {label:42s} {scales(s)}; {alpha_grad(s)}; {final_input(s)}", flush=True)
    print(f"\nTrained, normfree quick preset (validation loss at each evaluation; unigram plateau "
          f"{math.log(256):.2f} is chance, 3.06 the byte frequencies):")
    for label, variant, changes, edit in cases:
        s = built(variant, ns.depth, ns.seed, dict(changes), edit, ns.steps)
        print(f"  {label:42s} {trained_losses(s)}", flush=True)
        s.model.eval()
        print(f"  {'':42s} after: {scales(s)}; {state(s)}", flush=True)
        print(f"  {'':42s} {final_input(s)}", flush=True)


if __name__ == "__main__":
    main()
