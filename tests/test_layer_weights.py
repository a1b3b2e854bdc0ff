"""scripts/plot_layer_weights.py: what each cross-layer connection reads, read off the model's own coefficients, and
the heatmaps and CSV it writes from a study's kept checkpoints."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

import variants

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "plot_layer_weights.py"


@pytest.fixture(scope="module")
def lw():
    spec = importlib.util.spec_from_file_location("plot_layer_weights", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def weights(lw, variant: str, depth: int = 2) -> pd.DataFrame:
    torch.manual_seed(0)
    model = variants.create(variant, depth=depth, d_model=32, n_heads=2, d_ff=64, vocab_size=256, max_len=16).eval()
    rows = lw.weights_of(model, torch.randint(0, 256, (2, 8)))
    return pd.DataFrame(rows, columns=["way", "reader", "source", "weight"])


def test_attention_residuals_read_every_earlier_output_equally_at_init(lw):
    """The pseudo-query starts at zero: softmax over k sources is 1/k for each (Kimi 2026, AttnRes init)."""
    frame = weights(lw, "attn_res")
    assert set(frame["way"]) == {"h"}
    for reader, group in frame.groupby("reader"):
        assert len(group) == reader + 1  # the embeddings and every sublayer output before it
        assert group["weight"].tolist() == pytest.approx([1 / (reader + 1)] * (reader + 1), abs=1e-6)


def test_mudd_starts_as_the_plain_residual(lw):
    """MUDDFormer's connections are initialised to the residual stream: each way reads only the newest source."""
    frame = weights(lw, "mudd")
    assert {"Q", "K", "V", "R"} <= set(frame["way"])
    for (_, reader), group in frame.groupby(["way", "reader"]):
        newest = group["source"].max()
        assert newest == reader
        assert group.set_index("source")["weight"].to_dict() == pytest.approx(
            {s: float(s == newest) for s in group["source"]}, abs=1e-6)


def test_dca_weights_are_its_bias_plus_a_relu(lw):
    """DeepCrossAttention's ``b + ReLU(wᵀ·RMSNorm(x))`` with b = 1 at init: every weight at least 1."""
    frame = weights(lw, "dca")
    assert {"Q", "K", "V"} <= set(frame["way"]) and (frame["weight"] >= 1 - 1e-6).all()


@pytest.mark.slow  # a two-run sweep, then the script in a process of its own: 30-110 s
def test_the_script_draws_and_tabulates_a_studys_kept_checkpoints(tmp_path):
    study = tmp_path / "xl.toml"
    study.write_text('name = "xl"\nvary = ["combinator"]\nparam_tolerance = 0.5\n[base]\ntask = "tinytext"\n'
                     "seq_len = 16\nbatch_size = 4\nsteps = 2\nmeasure = []\nsave_checkpoint = true\n"
                     "model_args = { d_model = 32, n_heads = 2, d_ff = 64 }\n"
                     '[grid]\nvariant = ["preln", "attn_res"]\ndepth = [2]\n', encoding="utf-8")
    res = tmp_path / "res"
    done = subprocess.run([sys.executable, "-m", "bench", "sweep", str(study), "--quiet", "--results-dir", str(res)],
                          cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    done = subprocess.run([sys.executable, str(SCRIPT), "--results-dir", str(res), "--study", "xl"], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert "1 runs" in done.stdout  # attn_res only: Pre-LN has no cross-layer weights
    assert (res / "plots" / "xl" / "layer_weights_attn_res_d2.png").stat().st_size > 0
    table = pd.read_csv(res / "analysis" / "xl" / "layer_weights.csv")
    assert set(table["variant"]) == {"attn_res"} and set(table["way"]) == {"h"}
    sums = table.groupby("reader")["weight"].sum()
    assert sums.tolist() == pytest.approx([1.0] * len(sums), abs=1e-5)  # a softmax over sources per reader
