"""DCA's and Attention Residuals' joins compute their weighted sums two ways: one product per source eagerly (what the
FLOP counter sees), one elementwise sum under torch.compile (what Inductor fuses). The two agree, the compiled graph
holds no per-source product, and the harness records which one ran."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest
import torch

import variants
from bench.runs import cost, shapes
from variants import attn_res, dense

D, N = 8, 4


def joins() -> list[tuple[str, torch.nn.Module, tuple[torch.Tensor, ...]]]:
    torch.manual_seed(0)
    sources = tuple(torch.randn(2, 3, D, dtype=torch.float64) for _ in range(N))
    depth = attn_res.DepthAttention(D).double()
    torch.nn.init.normal_(depth.query)  # away from the uniform average it starts at
    grn = dense.GeneralizedResidual(D, N, 3).double()
    torch.nn.init.normal_(grn.b)
    return [("attnres", depth, (sources[:-1], sources[-1])), ("dca", grn, (sources[:-1], sources[-1]))]


@pytest.mark.parametrize("case", range(2))
def test_the_fused_sum_equals_the_products_value_and_gradient(case: int, monkeypatch: pytest.MonkeyPatch) -> None:
    _, join, (x, fx) = joins()[case]
    results = []
    for fused in (False, True):
        monkeypatch.setattr(sys.modules[type(join).__module__], "compiling", lambda fused=fused: fused)
        leaves = [v.detach().requires_grad_() for v in (*x, fx)]
        out = join(tuple(leaves[:-1]), leaves[-1])
        grads = torch.autograd.grad(out.square().sum(), [*leaves, *join.parameters()])
        results.append((out.detach(), grads))
    (a, ga), (b, gb) = results
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    for g1, g2 in zip(ga, gb, strict=True):
        torch.testing.assert_close(g1, g2, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", range(2))
def test_under_torch_compile_no_product_per_source_is_traced(case: int) -> None:
    """Dynamo traces the fused form (a graph captured by a backend that runs it as traced: no Inductor compile)."""
    _, join, (x, fx) = joins()[case]
    graphs: list[torch.fx.GraphModule] = []

    def capture(gm: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> Callable[..., object]:
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(join, backend=capture, fullgraph=True)
    torch.testing.assert_close(compiled(x, fx), join(x, fx), rtol=1e-12, atol=1e-12)
    (graph,) = graphs
    called = {str(n.target) for n in graph.graph.nodes if n.op in ("call_function", "call_method")}
    assert not {t for t in called if "matmul" in t or "bmm" in t or "linear" in t}, called
    torch._dynamo.reset()


def test_the_harness_says_which_implementation_its_figures_timed() -> None:
    with torch.device("meta"):
        dca, preln = variants.create("dca", depth=2), variants.create("preln", depth=2)
    assert variants.implementation(dca, "eager") == "GeneralizedResidual: one product per source"
    assert variants.implementation(dca, "compiled") == "GeneralizedResidual: one fused elementwise sum"
    assert variants.implementation(preln, "compiled") == "as written"
    assert cost.implementations("attn_res", shapes.SHAPES["study_quick"], [False, True]) == {
        "impl": "DepthAttention: one product per source", "impl_compiled": "DepthAttention: one fused elementwise sum"}
