"""Every design that reads earlier values does so through the forward's Past (variants.links), declared in `reads`:
its logits and gradients are those of the code before the port (tests/data/past_port.json, written by this file's
`write_fixture` on that code), and no module of any registered Transformer keeps a tensor across sublayers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

import variants

FIXTURE = Path(__file__).resolve().parent / "data" / "past_port.json"
# the designs the port moved onto Past, at a size where each reads something (attn_res_block: blocks of 2 sublayers)
PORTED = ["attn_res", "attn_res_block", "dca", "mudd", "preln_backout", "preln_unet", "speedrun", "value_residual"]
SIZE = dict(depth=6, d_model=16, n_heads=2, d_ff=32, vocab_size=16, max_len=8)
IDX = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]])


def logits_and_grads(name: str) -> tuple[torch.Tensor, dict[str, float]]:
    """``name``'s logits on IDX in float64, every parameter moved off its init by a draw in name order (so that each
    gate, pseudo-query and dense weight is away from the identity it starts at), and each parameter's gradient norm
    of the mean squared logit."""
    torch.manual_seed(0)
    model = variants.create(name, **SIZE).double()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=torch.float64))
    logits = model(IDX)
    logits.square().mean().backward()
    grads = {n: float(p.grad.norm()) for n, p in sorted(model.named_parameters()) if p.grad is not None}
    return logits.detach(), grads


def write_fixture() -> None:
    """Run on the code before the port: ``python tests/test_past_port.py``."""
    out = {}
    for name in PORTED:
        logits, grads = logits_and_grads(name)
        out[name] = {"logits": logits.flatten().tolist(), "shape": list(logits.shape), "grads": grads}
    FIXTURE.write_text(json.dumps(out) + "\n")


@pytest.mark.parametrize("name", PORTED)
def test_logits_and_gradients_equal_the_code_before_the_port(name: str) -> None:
    before = json.loads(FIXTURE.read_text())[name]
    logits, grads = logits_and_grads(name)
    expected = torch.tensor(before["logits"], dtype=torch.float64).view(before["shape"])
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-6)
    assert grads.keys() == before["grads"].keys()
    for key, value in grads.items():
        assert value == pytest.approx(before["grads"][key], rel=1e-6, abs=1e-9), key


if __name__ == "__main__":
    write_fixture()
    sys.exit(0)
