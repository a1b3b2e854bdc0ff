"""What each layer learned to read from: the cross-layer weights of trained MUDDFormer, DCA and AttnRes runs.

    python scripts/plot_layer_weights.py [--results-dir results] [--study crosslayer] [--seed 0]

For each recorded run of the study (the given seed) of ``mudd``, ``dca``, ``attn_res`` and ``attn_res_block`` that
kept a checkpoint (the crosslayer study's ``save_checkpoint = true``), the trained model reads a batch of validation
sequences; a hook on each cross-layer connection asks it for its coefficients (the ``weights`` method each one has,
the table of its formula) and averages them over tokens:

- MUDDFormer: ``aᶜⱼ + [W₂·GELU(W₁·RMSNorm(Xᵢ))]ᶜⱼ`` per way c (Q, K, V, R) and source j (embeddings, layer outputs);
- DCA: ``bᶜⱼ + ReLU(wᶜᵀ·RMSNorm(xⱼ))`` averaged over features too, per input c (Q, K, V) and source j;
- Attention Residuals: ``softmaxᵢ(wᵀ·RMSNorm(vᵢ))`` per sublayer and source (Block: per block sum).

Heatmaps (row: the layer reading, column: the source; the R way for MUDDFormer, the query input for DCA) go to
``RESULTS/plots/STUDY/layer_weights_<variant>_d<depth>.png``, the numbers to
``RESULTS/analysis/STUDY/layer_weights.csv`` (variant, depth, seed, way, reader, source, weight).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib
import pandas as pd
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import seaborn as sns

from bench.runs.checkpoints import load
from bench.runs.results import ResultsStore
from variants.attn_res import DepthAttention
from variants.dense import GeneralizedResidual, MultiwayDenseConnection

VARIANTS = ("mudd", "dca", "attn_res", "attn_res_block")
WAYS = {"mudd": ("Q", "K", "V", "R"), "dca": ("Q", "K", "V")}


def weights_of(model: torch.nn.Module, x: torch.Tensor) -> list[tuple[str, int, int, float]]:
    """(way, reader, source, mean weight) of every cross-layer connection of ``model`` on the batch ``x``."""
    rows: list[tuple[str, int, int, float]] = []
    joins = [m for m in model.modules() if isinstance(m, (MultiwayDenseConnection, GeneralizedResidual,
                                                          DepthAttention))]

    def hook(reader: int):
        def record(module: torch.nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
            earlier, newest = args[0], args[1].detach()
            if not isinstance(earlier, torch.Tensor):  # AttnRes's and DCA's sources: a sequence, maybe empty
                earlier = torch.stack((*earlier, newest), dim=-2)[..., :-1, :]
            sources = torch.cat((earlier.detach(), newest.unsqueeze(-2)), dim=-2)
            if isinstance(module, MultiwayDenseConnection):
                w = module.weights(newest).mean(dim=(0, 1))  # (ways, sources)
                names = WAYS["mudd"] if w.shape[0] == 4 else ("R",)
            elif isinstance(module, GeneralizedResidual):
                w = module.weights(sources).mean(dim=(0, 1, -1))  # (ways, sources)
                names = WAYS["dca"] if w.shape[0] == 3 else ("out",)
            else:
                w = module.weights(sources).mean(dim=(0, 1)).unsqueeze(0)  # (1, sources)
                names = ("h",)
            for c, way in enumerate(names):
                rows.extend((way, reader, j, float(w[c, j])) for j in range(w.shape[1]))
        return record

    handles = [j.register_forward_hook(hook(i + 1)) for i, j in enumerate(joins)]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results-dir", default="results")
    p.add_argument("--study", default="crosslayer")
    p.add_argument("--seed", type=int, default=0)
    ns = p.parse_args()
    board = ResultsStore(ns.results_dir).load_leaderboard()
    runs = board[(board["study"] == ns.study) & board["variant"].isin(VARIANTS) & (board["seed"] == ns.seed)
                 & board["status"].isin(["ok", "failed_to_learn"])]  # a stalled run's weights are the diagnosis
    out: list[dict[str, object]] = []
    plots = Path(ns.results_dir) / "plots" / ns.study
    plots.mkdir(parents=True, exist_ok=True)
    for _, run in runs.sort_values(["variant", "depth"]).iterrows():
        trained = load(ns.results_dir, str(run["run_id"]))
        x, _ = next(iter(trained.task.train_eval_batches(32)))
        rows = weights_of(trained.model, x)
        frame = pd.DataFrame(rows, columns=["way", "reader", "source", "weight"])
        out += [{"variant": run["variant"], "depth": int(run["depth"]), "seed": ns.seed, **r}
                for r in frame.to_dict("records")]
        way = {"mudd": "R", "dca": "Q"}.get(str(run["variant"]), "h")
        shown = frame[frame["way"].isin([way, "out"])] if way == "Q" else frame[frame["way"] == way]
        table = shown.pivot_table(index="reader", columns="source", values="weight")
        fig, ax = plt.subplots(figsize=(max(5.5, 2 + 0.3 * table.shape[1]), max(4.0, 1.5 + 0.25 * table.shape[0])))
        sns.heatmap(table, ax=ax, cmap="viridis", cbar_kws={"label": "mean weight"})
        ax.set_title(f"{run['variant']}, depth {int(run['depth'])}, seed {ns.seed}:\nwhat each connection reads "
                     f"({way} way)", fontsize=10)
        ax.set_xlabel("source (0 = embeddings)")
        ax.set_ylabel("reading connection")
        fig.tight_layout()
        fig.savefig(plots / f"layer_weights_{run['variant']}_d{int(run['depth'])}.png", dpi=110)
        plt.close(fig)
    analysis = Path(ns.results_dir) / "analysis" / ns.study
    analysis.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(out).to_csv(analysis / "layer_weights.csv", index=False)
    print(f"{len(runs)} runs -> {plots} and {analysis / 'layer_weights.csv'}")


if __name__ == "__main__":
    main()
