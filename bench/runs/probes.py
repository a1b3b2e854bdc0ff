"""Per-layer probes: why a residual design trains (or does not), measured by hooks on any model.

The probes reproduce the per-layer views of the papers resbench re-measures:

- the gradient norm of each layer at initialisation (Xiong et al. 2020, "On Layer Normalization in
  the Transformer Architecture", Fig. 3: Post-LN's gradients near the output are large, Pre-LN's
  are flat across layers);
- the size of the residual stream and of each branch relative to its shortcut (He et al. 2016,
  "Identity Mappings in Deep Residual Networks"; the branch-to-shortcut ratio is what ReZero,
  SkipInit and Fixup drive to zero at initialisation);
- the rank of the residual stream (Dong et al. 2021, "Attention is not all you need: pure attention loses
  rank doubly exponentially with depth": without skip connections, self-attention makes every token the same);
- the Highway transform-gate activity (Srivastava et al. 2015, "Training Very Deep Networks", Fig. 2);
- learnable residual scales (ReZero, Bachlechner et al. 2020; LayerScale, Touvron et al. 2021).

No variant carries probe code. A *residual unit* is any module that declares itself a join
(``residual_role = "join"``, :mod:`variants.roles`; every :class:`variants.combinators.Combinator` does, and a
plugin's join need not subclass it): its ``forward(x, fx)`` receives the shortcut ``x`` (a tensor, or for a
cross-layer join the sequence of earlier outputs it reads) and the branch output ``F(x)`` and returns the residual
stream; below, "Combinator" means such a join. Definitions (one row per unit
and metric):

- ``layer``: the position of the unit among all units, in ``model.modules()`` order (0 = first).
  ``block``: the unit's qualified module name.
- ``kind``: what the unit's branch computes, so figures and claims compare like with like. The unit's
  *owner* is the module holding the Combinator as a direct child; its *branch* is the owner's ``body``
  attribute when it has a module there (every :class:`variants.blocks.ResidualUnit`),
  else the owner itself (e.g. a DenseNet layer). The first rule that applies names the kind:
  a ``probe_kind`` string class attribute of the branch, then of the owner; ``"attn"`` if the branch
  holds an :class:`~torch.nn.MultiheadAttention` or a module whose class name contains ``Attention``;
  ``"conv"`` if it holds a ``Conv1d/2d/3d``; ``"ffn"`` if it holds ``Linear`` layers and the model has
  an attention unit (a Transformer's feed-forward sublayer), else ``"mlp"``; otherwise ``""``.
  A gate outside every Combinator is ``"gate"``.
- ``out_rms``: root-mean-square of the Combinator's output over all its elements in the batch,
  ``sqrt(mean(y²))`` — the quadratic mean of the per-sample RMS values. (With ``post`` placement this
  is the stream *before* the unit's norm: the sum the norm has to tame.)
- ``out_var``: variance of the unit's output over all its elements in the batch (population, ddof=0).
- ``branch_ratio``: ``‖F(x)‖ / ‖x‖`` with Frobenius norms over the whole batch (``inf`` if ``x`` is 0; a
  sequence ``x``: the norm of all its tensors together).
  ``F(x)`` is the branch as the Combinator receives it, before any gate or scale the Combinator applies
  (``gate_mean`` and ``residual_scale`` report those), so a ReZero unit at init shows its branch's size.
- ``stable_rank``: ``‖X‖_F² / ‖X‖₂²`` (squared Frobenius over squared spectral norm: the numerical rank of
  Rudelson & Vershynin 2007, between 1 and rank(X)) of the output written as a matrix X of positions × channels.
  The layout is read from the model, not guessed per tensor: in a *sequence model* (one with an ``attn`` unit,
  the rule that names ``ffn`` above) the stream is channels-last, so a (B, T, d) output gives per sequence the
  (T, d) token matrix, and the dims between batch and channels are positions (a hyper-connection's (B, T, n, d)
  streams give (T·n, d): n identical streams report exactly what one stream would); in any other model channels
  are at dim 1, so a (B, C, H, W) output gives per sample the (H·W, C) matrix of positions × channels (a
  (B, C, L) or (B, C, D, H, W) output likewise (L, C) or (D·H·W, C)). The value is the mean over the samples of
  the per-sample stable ranks, taken over the first ``RANK_SAMPLES`` (16) samples of the call: an estimate of the
  batch mean whose SVD cost does not grow with the batch. A 2-D (B, features) output (an MLP) is one matrix X,
  the whole batch (never subsampled); 0-D and 1-D outputs give no row. (Stable rank is transpose-invariant, so
  for 3-D outputs only ``rank_collapse`` depends on the layout rule.)
- ``rank_collapse`` (sequence models, outputs of 3 or more dims, same matrices and samples as ``stable_rank``):
  ``‖X − 1·x̄ᵀ‖_F / ‖X‖_F`` with x̄ the mean token (the mean of X's rows), mean over the samples. Dong et al.
  2021, "Attention is not all you need: pure attention loses rank doubly exponentially with depth", §2, measure
  the residual ``res(X) = X − 1xᵀ``, x minimising its norm, which pure self-attention drives to 0 doubly
  exponentially with depth. They use the composite norm ``sqrt(‖·‖₁‖·‖_∞)``; this is the Frobenius version:
  its minimiser is the mean token in closed form (no inner minimisation, one pass over the stream), and the
  fixed point is the same (the residual vanishes, in any norm, exactly when every token is identical). Divided
  by ``‖X‖_F`` it is scale-free and lies in [0, 1] (x = 0 is a candidate): 0 = collapsed to a rank-one matrix
  1xᵀ, 1 = the mean token is zero.
  For both: a sample that is zero or not finite is undefined (NaN) and left out of the mean; no row if all are.
  A call whose SVD fails to converge (``torch.linalg.LinAlgError``) adds no ``stable_rank`` value.
- ``grad_norm``: L2 norm of the gradients of *all* parameters of the unit's owner — the whole unit: for
  :class:`variants.blocks.ResidualUnit` the branch body's weights and biases, its norms' γ/β and the
  combinator's parameters. Owners without any gradient give no row; units sharing an owner report the
  same value.
- ``weight_grad_norm``: Xiong et al.'s quantity (Fig. 3 plots it for the FFN sublayers): L2 norm of the
  gradients of the weight matrices of the unit's branch only — the ``weight`` of every ``nn.Linear`` and
  ``nn.Conv1d/2d/3d`` (and the q/k/v projection matrices of an ``nn.MultiheadAttention``) among the
  branch's descendants, excluding any module inside a Combinator (a
  Highway gate's projection belongs to the join, not the branch). Biases, norms, embeddings and a
  projection shortcut (outside ``body``) do not count; a unit nested in the branch does. No row when
  none of those weights has a gradient.
- ``gate_mean``: mean of a gate's output ``T(x)`` in [0, 1] (a module declaring ``residual_role = "gate"``:
  :class:`~variants.combinators.TransformGate`, or a plugin's);
  reported on the unit that encloses the gate (a gate outside every Combinator is a unit of its own).
- ``residual_scale``: mean ``|β|`` of a join whose declared residual scalar ``beta`` (``residual_scalars()``,
  :mod:`variants.roles`) is learned: :class:`~variants.combinators.Scaled` of ReZero, SkipInit, LayerScale.
  Fixed scales (DeepNorm's α) are constants and not probed.

A module called several times in one forward (weight sharing) reports the mean over its calls.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack
from typing import Any

import pandas as pd
import torch
from torch import nn

from variants.roles import is_gate, is_join, learnable, residual_scalars

METRICS: tuple[str, ...] = (
    "grad_norm", "weight_grad_norm", "out_rms", "out_var", "branch_ratio", "stable_rank", "rank_collapse",
    "gate_mean", "residual_scale",
)  # fmt: skip
COLUMNS: tuple[str, ...] = ("step", "layer", "block", "kind", "metric", "value")
RANK_SAMPLES = 16  # stable_rank/rank_collapse look at the first this-many samples of each call (module docstring)
_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def _units(model: nn.Module) -> tuple[dict[str, int], dict[str, str]]:
    """Unit name -> layer index, and name of every gate -> name of the unit it reports on."""
    layers: dict[str, int] = {}
    gate_unit: dict[str, str] = {}
    for name, module in model.named_modules():
        if is_join(module):
            layers[name] = len(layers)
        elif is_gate(module):
            enclosing = [u for u in layers if name.startswith(f"{u}.") or u == ""]
            # named_modules() is pre-order, so the last enclosing unit seen is the innermost one.
            unit = enclosing[-1] if enclosing else name
            if not enclosing:
                layers[name] = len(layers)
            gate_unit[name] = unit
    return layers, gate_unit


def _owner_name(unit: str) -> str:
    return unit.rsplit(".", 1)[0] if "." in unit else ""


def _sample_matrices(y: torch.Tensor, sequence: bool) -> torch.Tensor | None:
    """The stream as a batch of (positions, channels) matrices, by the layout rule of the module docstring."""
    if y.dim() < 2:
        return None
    if y.dim() == 2:
        return y.unsqueeze(0)  # an MLP's (B, features) stream: the whole batch is one matrix
    y = y[:RANK_SAMPLES]
    if not sequence:
        y = y.movedim(1, -1)  # (B, C, *spatial) -> (B, *spatial, C)
    return y.reshape(y.shape[0], -1, y.shape[-1])


def _batch_mean(values: torch.Tensor) -> float | None:
    """Mean over the samples whose value is defined (not NaN); None if there is none."""
    mean = torch.nanmean(values).item()
    return None if math.isnan(mean) else mean


def _rank_metrics(y: torch.Tensor, sequence: bool) -> dict[str, float]:
    """``stable_rank`` (and ``rank_collapse`` for a sequence model) of one call's stream ``y`` (float32)."""
    mats = _sample_matrices(y, sequence)
    if mats is None or 0 in mats.shape:
        return {}
    # Both metrics are scale-free: dividing each sample by its largest |entry| keeps the SVD and norms far from
    # float32 overflow. A zero or non-finite sample is zeroed here and reported as NaN below.
    scale = mats.abs().amax(dim=(1, 2), keepdim=True)
    ok = torch.isfinite(scale) & (scale > 0)
    mats = torch.where(ok, mats / torch.where(ok, scale, 1.0), 0.0)
    ok = ok.flatten()
    values: dict[str, torch.Tensor] = {}
    try:
        sigma = torch.linalg.svdvals(mats)  # descending, per sample
        values["stable_rank"] = torch.where(ok, (sigma / sigma[:, :1]).pow(2).sum(dim=1), math.nan)
    except torch.linalg.LinAlgError:  # an SVD that does not converge must not end the training run being probed
        pass
    if sequence and y.dim() >= 3:
        residual = mats - mats.mean(dim=1, keepdim=True)  # X - 1·x̄ᵀ, x̄ the mean token
        norms = torch.linalg.vector_norm(residual, dim=(1, 2)) / torch.linalg.vector_norm(mats, dim=(1, 2))
        values["rank_collapse"] = torch.where(ok, norms, math.nan)
    means = {metric: _batch_mean(v) for metric, v in values.items()}
    return {metric: v for metric, v in means.items() if v is not None}


def _norm(x: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
    """The Frobenius norm of a shortcut: one tensor, or a cross-layer join's sources (the norm of their stack; 0 for
    none)."""
    parts = [x] if isinstance(x, torch.Tensor) else list(x)
    return torch.linalg.vector_norm(torch.tensor([torch.linalg.vector_norm(t.detach().float()) for t in parts]))


def _combinator_hook(sums: dict[tuple[str, str], list[float]], unit: str, sequence: bool) -> Callable[..., None]:
    def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: torch.Tensor) -> None:
        inputs = list(args) + [kwargs[k] for k in ("x", "fx") if k in kwargs]
        x, fx = inputs[:2]
        y = out.detach().float()
        x_norm = _norm(x)
        ratio = _norm(fx) / x_norm if x_norm > 0 else torch.tensor(math.inf)
        sums[(unit, "out_rms")].append(y.pow(2).mean().sqrt().item())
        sums[(unit, "out_var")].append(y.var(unbiased=False).item())
        sums[(unit, "branch_ratio")].append(float(ratio))
        for metric, value in _rank_metrics(y, sequence).items():
            sums[(unit, metric)].append(value)

    return hook


def _gate_hook(sums: dict[tuple[str, str], list[float]], unit: str) -> Callable[..., None]:
    def hook(module: nn.Module, args: tuple[Any, ...], out: torch.Tensor) -> None:
        sums[(unit, "gate_mean")].append(out.detach().float().mean().item())

    return hook


def _norm_of_grads(params: Iterable[torch.Tensor]) -> float | None:
    grads = [p.grad.detach().float() for p in params if p.grad is not None]
    if not grads:
        return None
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item()


def _branch(owner: nn.Module) -> nn.Module:
    body = getattr(owner, "body", None)
    return body if isinstance(body, nn.Module) else owner


def _branch_modules(owner: nn.Module) -> list[nn.Module]:
    """The branch and its descendants, each once, without entering any Combinator (the join is not the branch)."""
    found: dict[int, nn.Module] = {}
    stack = [_branch(owner)]
    while stack:
        m = stack.pop()
        if is_join(m) or id(m) in found:
            continue
        found[id(m)] = m
        stack.extend(reversed(list(m.children())))
    return list(found.values())


def _branch_weights(owner: nn.Module) -> list[torch.Tensor]:
    weights = []
    for m in _branch_modules(owner):
        if isinstance(m, (nn.Linear, *_CONVS)):
            weights.append(m.weight)
        elif isinstance(m, nn.MultiheadAttention):  # its q/k/v projections are bare parameters, not Linears
            weights += [
                w for w in (m.in_proj_weight, m.q_proj_weight, m.k_proj_weight, m.v_proj_weight) if w is not None
            ]
    return weights


def _raw_kind(owner: nn.Module) -> str:
    """The kind of a unit by the rule of the module docstring; Linear-only branches are ``"linear"`` for now."""
    for m in (_branch(owner), owner):
        declared = getattr(m, "probe_kind", None)
        if isinstance(declared, str):
            return declared
    modules = _branch_modules(owner)
    if any(isinstance(m, nn.MultiheadAttention) or "Attention" in type(m).__name__ for m in modules):
        return "attn"
    if any(isinstance(m, _CONVS) for m in modules):
        return "conv"
    return "linear" if any(isinstance(m, nn.Linear) for m in modules) else ""


def _kinds(layers: dict[str, int], modules: dict[str, nn.Module]) -> dict[str, str]:
    raw = {u: _raw_kind(modules[_owner_name(u)]) if is_join(modules[u]) else "gate" for u in layers}
    # A Linear-only branch next to attention units is a Transformer's feed-forward sublayer.
    linear = "ffn" if "attn" in raw.values() else "mlp"
    return {u: linear if k == "linear" else k for u, k in raw.items()}


def probe(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    step: int,
    train: bool = True,
) -> list[dict[str, Any]]:
    """One forward+backward of ``loss_fn(model(x), y)``; tidy rows ``{step, layer, block, kind, metric, value}``.

    ``train`` picks the mode the probe runs in (training mode by default, so BatchNorm uses batch
    statistics as it does in the step being diagnosed). The model is left exactly as found: no
    parameter changes, each ``.grad`` restored to the very tensor (or ``None``) it was, every buffer
    (BatchNorm running statistics, counters) restored, training/eval mode of every submodule restored,
    the RNG state restored (so dropout masks of the next training step do not shift) and all hooks
    removed — also when the forward, the loss or the backward raises.
    """
    layers, gate_unit = _units(model)
    modules = dict(model.named_modules())
    params = list(model.parameters())
    saved_grads = [p.grad for p in params]
    # Keep (owner, name, tensor, copy): restore the values *and* the attribute, in case a module reassigns it.
    saved_buffers = [
        (m, name, b, b.detach().clone()) for m in model.modules() for name, b in m._buffers.items() if b is not None
    ]
    saved_modes = [(m, m.training) for m in model.modules()]
    cpu_rng = torch.random.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    sums: dict[tuple[str, str], list[float]] = defaultdict(list)
    grad_norms: dict[tuple[str, str], float] = {}
    kinds = _kinds(layers, modules)
    sequence = "attn" in kinds.values()
    with ExitStack() as stack:
        for unit in layers:
            module = modules[unit]
            if is_join(module):
                handle = module.register_forward_hook(_combinator_hook(sums, unit, sequence), with_kwargs=True)
                stack.callback(handle.remove)
        for gate, unit in gate_unit.items():
            stack.callback(modules[gate].register_forward_hook(_gate_hook(sums, unit)).remove)
        try:
            for p in params:
                p.grad = None  # our backward must not accumulate into the training loop's gradients
            model.train(train)
            loss_fn(model(x), y).backward()
            for unit in layers:
                if is_join(modules[unit]):
                    owner = modules[_owner_name(unit)]
                    norms = {"grad_norm": owner.parameters(), "weight_grad_norm": _branch_weights(owner)}
                    for metric, of in norms.items():
                        norm = _norm_of_grads(of)
                        if norm is not None:
                            grad_norms[(unit, metric)] = norm
        finally:
            for p, g in zip(params, saved_grads, strict=True):
                p.grad = g
            with torch.no_grad():
                for m, name, buf, copy in saved_buffers:
                    buf.copy_(copy)
                    m._buffers[name] = buf
            for m, mode in saved_modes:
                m.training = mode
            torch.random.set_rng_state(cpu_rng)
            if cuda_rng is not None:
                torch.cuda.set_rng_state_all(cuda_rng)

    rows: list[dict[str, Any]] = []
    for unit, layer in layers.items():
        module = modules[unit]
        values = {m: v for (u, m), v in grad_norms.items() if u == unit}
        for metric in METRICS:
            calls = sums.get((unit, metric))
            if calls:
                values[metric] = sum(calls) / len(calls)
        beta = residual_scalars(module).get("beta")
        if beta is not None and learnable(beta):
            values["residual_scale"] = beta.detach().abs().float().mean().item()
        where = {"step": int(step), "layer": layer, "block": unit, "kind": kinds[unit]}
        rows += [where | {"metric": m, "value": float(values[m])} for m in METRICS if m in values]
    return rows


def probe_table(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Tidy probe rows as a DataFrame: ``[run_id,] step, layer, block, kind, metric, value`` (run_id if any row
    has it). Rows recorded before ``kind`` existed load with an empty (NaN) kind; any other missing column raises.
    """
    df = pd.DataFrame(list(rows))
    columns = list(COLUMNS)
    if "run_id" in df.columns:
        columns.insert(0, "run_id")
    if df.empty:
        return pd.DataFrame(columns=columns)
    if "kind" not in df.columns:
        df["kind"] = math.nan
    missing = set(columns) - set(df.columns)
    if missing:
        raise ValueError(f"probe rows lack columns {sorted(missing)}")
    return df[columns].astype({"step": int, "layer": int, "value": float})


def format_probe_table(df: pd.DataFrame, step: int | None = None) -> str:
    """A printable per-layer table: layers as rows, metrics as columns (mean over runs/seeds).

    ``step`` selects one probe step; by default the table shows every step present (as an index level).
    ``kind`` is an index level too when every row has one.
    """
    if df.empty:
        return "(no probe rows)"
    if step is not None:
        if step not in set(df["step"]):
            raise ValueError(f"no probe rows at step {step}; steps present: {sorted(set(df['step']))}")
        df = df[df["step"] == step]
    index = ["layer", "block"] if df["step"].nunique() == 1 else ["step", "layer", "block"]
    if "kind" in df.columns and df["kind"].notna().all():  # rows from before `kind` existed: no kind column
        index.append("kind")
    wide = df.pivot_table(index=index, columns="metric", values="value", aggfunc="mean")
    wide = wide[[m for m in METRICS if m in wide.columns] + [m for m in wide.columns if m not in METRICS]]
    wide.columns.name = None
    return wide.to_string(float_format=lambda v: f"{v:.4g}", na_rep="-")
