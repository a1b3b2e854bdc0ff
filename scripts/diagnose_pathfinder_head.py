"""Why the original ResNet's first steps blow up on the pathfinder study: what its classifier reads at step 0.

    python scripts/diagnose_pathfinder_head.py [--seeds 0 1 2] [--batch 256]

For each design and depth of the pathfinder study, built exactly as the study builds it (same task, same weights at
the same seed), one training-mode forward (BatchNorm on batch statistics, as at step 0) of a batch of real training
images. It prints the RMS of the features the classifier reads (after global pooling), the mean absolute difference
of the two logits, and the cross-entropy on that batch (chance is ln 2 = 0.693). No weight is updated. A
diagnosis, not a benchmark: medians over the seeds given.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

import torch
from torch import nn

from bench.analysis.studyfile import find_study
from bench.runs.train import setup
from bench.sweeps.study import load_study


def at_init(cfg, batch: int) -> tuple[float, float, float]:
    s = setup(dataclasses.replace(cfg, measure=(), probe_every=None))
    head = [m for m in s.model.modules() if isinstance(m, nn.Linear)][-1]
    seen: dict[str, torch.Tensor] = {}
    hook = head.register_forward_hook(lambda m, a, o: seen.update(features=a[0], logits=o))
    x, y = next(iter(s.task.train_eval_batches(batch)))
    s.model.train()
    with torch.no_grad():
        s.model(x)
    hook.remove()
    logits = seen["logits"]
    return (float(seen["features"].pow(2).mean().sqrt()), float((logits[:, 0] - logits[:, 1]).abs().mean()),
            float(nn.functional.cross_entropy(logits, y)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--batch", type=int, default=256, help="training images in the forward (default 256)")
    ns = p.parse_args()
    configs = {(c.variant, c.depth): c for c in load_study(find_study("pathfinder")).configs() if c.seed == 0}
    print(f"At initialisation, training-mode forward of {ns.batch} training images, median over seeds {ns.seeds}:")
    print(f"  {'design':14s} {'depth':>5s} {'feature RMS':>12s} {'|logit diff|':>13s} {'loss':>6s}")
    for (variant, depth), cfg in sorted(configs.items()):
        rows = [at_init(dataclasses.replace(cfg, seed=seed), ns.batch) for seed in ns.seeds]
        rms, gap, loss = (statistics.median(col) for col in zip(*rows, strict=True))
        print(f"  {variant:14s} {depth:5d} {rms:12.2f} {gap:13.2f} {loss:6.2f}", flush=True)


if __name__ == "__main__":
    main()
