"""A researcher's own design, end to end, as the documentation tells it: a plugin that adds a norm type (DyT) in a
dozen lines, a study file that names it, the confound check, a sweep, a comparison, a report whose reproduce line
runs, and an edited plugin noticed on resume. Each step's output is checked, on a tiny model (under a minute)."""

from __future__ import annotations

import csv
import shlex
from pathlib import Path

import pytest
from _nets import write

from bench.cli import main

pytestmark = pytest.mark.usefixtures("clean_plugins")  # tests/conftest.py

# Zhu, Chen, He, LeCun and Liu 2025, "Transformers without Normalization": DyT(x) = γ ⊙ tanh(α·x) + β, α a
# learnable scalar starting at 0.5. Registered as a norm type, it is accepted by every placement of the family.
DYT = '''
import torch
from torch import nn

import variants


@variants.register_norm("plugin_dyt")  # not "dyt": that one ships with variants.norms
class DyT(nn.Module):
    def __init__(self, d: int, alpha0: float = 0.5) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.tensor(alpha0))
        self.weight, self.bias = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * torch.tanh(self.alpha * x) + self.bias


variants.register_preset("preln_dyt", "preln", paper="Zhu et al. 2025, Transformers without Normalization",
                         norm="plugin_dyt")
'''

STUDY = '''
name = "dyt"
description = "DyT vs LayerNorm in Pre-LN"
plugins = ["dyt_plugin.py"]
vary = ["norm"]

[base]
task = "copy"
steps = 4
chance_band = 0  # four steps learn nothing: the journey checks the mechanics, not the outcome
batch_size = 8
seq_len = 16
train_size = 64
val_size = 32
eval_every = 4
optimizer = "adamw"
lr = 1e-3
measure = ["throughput"]
timing_warmup = 0
timing_repeats = 1
timing_steps = 1
model_args = { d_model = 16, n_heads = 2, d_ff = 32 }

[grid]
variant = ["preln", "preln_dyt"]
depth = [2]
seed = [0, 1, 2]

[[claims]]
id = "dyt-matches-layernorm"
paper = "Zhu et al. 2025, Table 1"
text = "DyT reaches LayerNorm's validation loss"
metric = "final_val_loss"
compare = "variant"
a = "preln"
b = "preln_dyt"
expect = "similar"
threshold = 10.0
'''


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def board(res: Path) -> list[dict[str, str]]:
    with (res / "leaderboard.csv").open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow  # the whole journey, in subprocesses: about a minute
def test_a_new_norm_from_plugin_to_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plugin = write(tmp_path / "study" / "dyt_plugin.py", DYT)
    study = write(tmp_path / "study" / "dyt.toml", STUDY)
    res = tmp_path / "res"

    # The norm type works in every placement, without a variant of its own.
    for variant in ("preln", "postln", "sandwich"):
        code, _, err = cli(["run", "--variant", variant, "--depth", "2", "--task", "copy", "--steps", "1",
                            "--batch-size", "8", "--seq-len", "16", "--train-size", "16", "--val-size", "16",
                            "--model-arg", "norm=plugin_dyt", "--model-arg", "d_model=16", "--model-arg", "n_heads=2",
                            "--measure", "--quiet", "--plugin", str(plugin), "--results-dir", str(tmp_path / "one")],
                           capsys)
        assert code == 0, err
    assert {r["variant"]: r["norm"] for r in board(tmp_path / "one")} == {"preln": "plugin_dyt",
                                                                         "postln": "plugin_dyt",
                                                                         "sandwich": "plugin_dyt"}

    # What differs, read from the study file's plugins (no --plugin): the norm, and only the norm (the structure
    # differs by the norm modules' class only).
    code, out, err = cli(["diff", "preln", "preln_dyt", "--depth", "2", "--study", str(study)], capsys)
    assert code == 0, err
    assert out.strip().splitlines()[-1] == ("preln and preln_dyt differ in: norm, structure (the guard's axes); a "
                                           "study comparing them declares norm in `vary` (norm covers structure: the "
                                           "guard compares structures only where `vary` names values only, init, "
                                           "dropout, drop_path_rate)")

    # The sweep: no --plugin either; the study's guard lets the norm differ and nothing else.
    code, out, err = cli(["sweep", str(study), "--results-dir", str(res), "--quiet"], capsys)
    assert code == 0, err
    rows = board(res)
    assert len(rows) == 6 and {r["status"] for r in rows} == {"ok"}
    assert {r["norm"] for r in rows if r["variant"] == "preln_dyt"} == {"plugin_dyt"}
    assert {r["norm"] for r in rows if r["variant"] == "preln"} == {"layernorm"}
    assert (res / "studies" / "dyt_plugin.py").read_text() == plugin.read_text()  # the plugin travels with the study

    # Compare: the loss is compared over seeds; throughput was measured once per configuration, so it is one
    # observation (n = 1), never a test on copies.
    code, out, err = cli(["compare", "--results-dir", str(res), "--study", "dyt", "--baseline", "preln",
                          "--metric", "final_val_loss", "train_samples_per_s", "--format", "csv"], capsys)
    assert code == 0, err
    table = list(csv.DictReader(out.splitlines()))
    dyt_loss = next(r for r in table if r["variant"] == "preln_dyt" and r["metric"] == "final_val_loss")
    dyt_speed = next(r for r in table if r["variant"] == "preln_dyt" and r["metric"] == "train_samples_per_s")
    assert dyt_loss["n"] == "3" and dyt_loss["p"] != ""
    assert dyt_speed["n"] == "1" and dyt_speed["p"] == "" and dyt_speed["ci"] == ""
    assert "RuntimeWarning" not in err

    # The report: its claim is evaluated, and its reproduce line runs as printed and skips everything recorded.
    code, out, err = cli(["report", "--results-dir", str(res), "--study", "dyt"], capsys)
    assert code == 0, err
    report = (res / "REPORT-dyt.md").read_text()
    assert "**dyt-matches-layernorm**" in report
    (line,) = [x for x in report.splitlines() if x.startswith("python -m bench ")]
    assert line == shlex.join(["python", "-m", "bench", "sweep", (res / "studies" / "dyt.toml").as_posix(),
                               "--trust-plugins", "--results-dir", str(res)])  # a folder's code: asked for
    code, out, err = cli(shlex.split(line)[3:], capsys)
    assert code == 0, err
    assert out.count("already recorded, skipped") == 6

    # The plugin is edited: its runs are run again (saying why), LayerNorm's are not.
    plugin.write_text(plugin.read_text().replace("alpha0: float = 0.5", "alpha0: float = 0.8"))
    code, out, err = cli(["sweep", str(study), "--results-dir", str(res)], capsys)
    assert code == 0, err
    assert out.count("already recorded, skipped") == 3
    assert out.count("recorded with another version of") == 3 and "run again (its row will be replaced)" in out
    assert len(board(res)) == 6
