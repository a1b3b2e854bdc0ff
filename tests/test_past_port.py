"""Every design that reads earlier values does so through the forward's Past (variants.links), declared in `reads`:
its logits and gradients are those of the code before the port (tests/data/past_port.json, written by this file's
`write_fixture` on that code), and no module of any registered Transformer keeps a tensor across sublayers."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import variants
from bench.cli import main
from variants.formulas import readers

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


def _tensors(value: object) -> int:
    """How many tensors ``value`` holds (itself, or in tuples and lists, named tuples included)."""
    if isinstance(value, torch.Tensor):
        return 1
    if isinstance(value, (tuple, list)):
        return sum(_tensors(v) for v in value)
    return 0


# What the layers of these designs hand each other besides the one stream, and why it is not a history:
STATES: dict[str, Callable[[torch.nn.Module], int]] = {
    "resi_dual": lambda model: 2,  # the Post-LN stream and the dual stream, both at the current depth (Xie 2023)
    "speedrun": lambda model: 1 + len(model.value_embeds),  # the stream and the value embeddings of the tokens (input)
}
LMS = [n for n in variants.list_variants(family="transformer") if n != "gpt2_small"]  # gpt2_small: preln's code


@pytest.mark.parametrize("name", LMS)
def test_no_module_keeps_a_tensor_across_sublayers(name: str) -> None:
    """Acceptance of the one way to read the past: at every layer's input, no module of the model holds a tensor in an
    attribute and the state the layers hand each other is the stream (no tuple of earlier values); the forward's Past
    keeps exactly what the model's modules declare they read, and every declared source was computed."""
    torch.manual_seed(0)
    model = variants.create(name, depth=3, d_model=16, n_heads=2, d_ff=24, vocab_size=11, max_len=8)
    held: list[str] = []
    states: list[int] = []
    pasts: list[variants.Past] = []

    def before(block: torch.nn.Module, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
        states.append(_tensors(args[0]))
        pasts.extend(a for a in (*args[1:], *kwargs.values()) if isinstance(a, variants.Past))
        held.extend(f"{where}.{key}" for where, m in model.named_modules() for key, value in vars(m).items()
                    if not key.startswith("_") and _tensors(value))

    hooks = [b.register_forward_pre_hook(before, with_kwargs=True) for b in model.blocks]
    model(IDX[:, :6] % 11)
    for hook in hooks:
        hook.remove()
    assert not held, f"{name}: modules hold tensors between layers: {sorted(set(held))}"
    expected = STATES.get(name, lambda model: 1)(model)
    assert set(states) == {expected}, f"{name}: the layers hand each other {states} tensors, not {expected}"
    declared = {s for m in model.modules() for s in variants.links.reads(m)}
    if not pasts:  # a model of its own forward (nGPT, ...): it may declare nothing it could not be handed
        assert not declared
        return
    past = pasts[0]
    assert past.keep == declared
    assert set(past.kept) == declared | {variants.EMBEDDINGS}  # each declared value was computed and kept


CROSS_LAYER = {  # every shipped design that reads earlier values, and the class show-variant opens with
    "attn_res": "DepthAttention.forward", "attn_res_block": "DepthAttention.forward",
    "dca": "GeneralizedResidual.forward", "denseformer": "DepthWeightedAverage.forward",
    "mudd": "MultiwayDenseConnection.forward", "preln_backout": "Backout.end",
    "preln_unet": "UnetSkipLayer.forward, inherited from variants.speedrun.SpeedrunLayer",
    "preln_x0": "SkipToEmbedding.forward", "speedrun": "SkipToEmbedding.forward",
    "value_residual": "ValueResidualAttention.forward",
}


def test_the_cross_layer_designs_are_those_that_declare_reads() -> None:
    with torch.device("meta"):
        reading = {n for n in LMS if readers(variants.create(n))}
    assert reading == set(CROSS_LAYER)


@pytest.mark.parametrize("name", sorted(CROSS_LAYER))
def test_show_variant_opens_with_where_a_cross_layer_design_reads_the_past(name: str,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show-variant", name]) == 0
    lines = capsys.readouterr().out.splitlines()
    with torch.device("meta"):
        first = readers(variants.create(name))[0]
    assert lines[3] == f"reads earlier values in: {first['file']}:{first['line']} ({CROSS_LAYER[name]})"
    path, line = first["file"], first["line"]
    source = (Path(__file__).resolve().parent.parent / path).read_text(encoding="utf-8").splitlines()
    method = CROSS_LAYER[name].split(",")[0].split(".")[1]
    assert f"def {method}(" in source[line - 1]  # the line of the method itself
