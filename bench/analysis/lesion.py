"""Lesion studies: delete residual units of a trained network at test time and measure the error.

Veit, Wilber and Belongie 2016, "Residual Networks Behave Like Ensembles of Relatively Shallow Networks"
(NeurIPS), §4: deleting a single unit of a trained ResNet barely moves its test error, while deleting a layer of
a plain (VGG-style) network destroys it (Fig. 3); and the error grows smoothly with the number of units deleted
at once (Fig. 5) — the behaviour of an ensemble of many paths, not of one deep chain.

Works on any model whose units are joins — modules declaring ``residual_role = "join"`` (:mod:`variants.roles`):
every :class:`variants.combinators.Combinator`, and a plugin's join without subclassing it — with no
variant-specific code. A unit is *lesioned* by a forward pre-hook on its join that changes what it joins:

- a unit with a shortcut (``add``, ``gate``, ``scaled``, ``concat``, ...) gets a zero branch, ``combine(x, 0)``:
  the unit becomes its shortcut — ``x`` for an identity shortcut (and ``act(x) = x`` after a ReLU that follows
  a ReLU), the projection or zero-padding where the unit changes the shape (Veit's "downsampling blocks"),
  ``(1 - T(x))·x`` for Highway, ``[x, 0]`` for a DenseNet layer, ``norm(x)`` for a Post-LN sublayer;
- a plain unit (combinator axis ``none``: ``y = F(x)``) is replaced by the identity, ``y = x`` — where the shapes
  allow, as Veit did for VGG; a plain unit that changes the shape cannot be deleted and is left out
  (``lesionable`` says which).

The branch is still computed and thrown away: simple, and what a hook can do without knowing the unit.
Quantities: ``error`` = 1 - accuracy and ``loss`` (the task's mean cross-entropy) on the task's validation split,
in eval mode (BatchNorm with the running statistics of training, as Veit evaluated).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import pandas as pd
import torch
from torch import nn

from bench.runs.train import eval_pass
from variants.roles import drops_shortcut, is_join

DEFAULT_DROPS = (1, 2, 4, 8, 16)
COLUMNS = ("mode", "k", "draw", "unit", "layer", "error", "loss")


def units(model: nn.Module) -> list[str]:
    """Qualified names of the model's joins, in ``model.modules()`` order (the probes' layers)."""
    return [name for name, m in model.named_modules() if is_join(m)]


def _joined(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """The shortcut ``x`` and branch ``fx`` a Combinator is called with, positionally or by keyword."""
    x = args[0] if args else kwargs["x"]
    fx = args[1] if len(args) > 1 else kwargs["fx"]
    return x, fx


def _lesion_hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict]:
    x, fx = _joined(args, kwargs)
    if drops_shortcut(module):
        if x.shape != fx.shape:
            raise ValueError(f"a plain unit that maps {tuple(x.shape)} to {tuple(fx.shape)} cannot be deleted")
        return (x, x, *args[2:]), {}  # y = F(x) becomes y = x
    return (x, torch.zeros_like(fx), *args[2:]), {}  # what else the join reads (the embeddings ...) it keeps


@contextlib.contextmanager
def lesioned(model: nn.Module, names: Sequence[str]) -> Iterator[None]:
    """Within the block, the units ``names`` of ``model`` are deleted (see the module docstring)."""
    modules = dict(model.named_modules())
    unknown = [n for n in names if n not in modules or not is_join(modules[n])]
    if unknown:
        raise ValueError(f"not residual units of this model: {unknown}")
    with contextlib.ExitStack() as stack:
        for name in names:
            handle = modules[name].register_forward_pre_hook(_lesion_hook, with_kwargs=True)
            stack.callback(handle.remove)
        yield


def lesionable(model: nn.Module, x: torch.Tensor) -> list[str]:
    """The units that can be deleted: every unit with a shortcut, and the plain units that keep the shape
    (found by one forward on ``x``, in eval mode)."""
    shapes: dict[str, bool] = {}

    def watch(name: str) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            a, b = _joined(args, kwargs)
            shapes[name] = not drops_shortcut(module) or a.shape == b.shape

        return hook

    modules = dict(model.named_modules())
    with contextlib.ExitStack() as stack, torch.no_grad():
        for name in units(model):
            stack.callback(modules[name].register_forward_pre_hook(watch(name), with_kwargs=True).remove)
        was = model.training
        model.eval()
        try:
            model(x)
        finally:
            model.train(was)
    return [n for n in units(model) if shapes.get(n)]


def evaluate(model: nn.Module, task: Any, batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> tuple[float, float]:
    """``(error, loss)`` of ``model`` on ``batches`` in eval mode: 1 - accuracy, and the count-weighted mean loss
    (the evaluation of training, :func:`bench.runs.train.eval_pass`)."""
    loss, acc = eval_pass(model, task, batches)
    return 1.0 - acc, loss


def lesion(model: nn.Module, task: Any, *, drops: Sequence[int] = DEFAULT_DROPS, draws: int = 10, seed: int = 0,
           batch_size: int = 256) -> pd.DataFrame:
    """The lesion table of a trained model: one row per evaluation (:data:`COLUMNS`).

    ``mode`` is ``intact`` (k = 0), ``single`` (each deletable unit in turn: ``unit`` and its ``layer`` index
    among all units) or ``random`` (``draws`` draws of ``k`` distinct deletable units at once, for each ``k > 1``
    of ``drops`` up to the number of deletable units; the draws come from a generator seeded with ``seed``, so the
    table is deterministic). ValueError if the model has no residual unit that can be deleted.
    """
    batches = list(task.val_batches(batch_size))
    every = units(model)
    if not every:
        raise ValueError(f"{type(model).__name__} has no residual units (no joins): a lesion deletes units "
                         "whose join declares residual_role = 'join' (every variants.Combinator does)")
    able = lesionable(model, batches[0][0])
    if not able:
        raise ValueError("none of the model's units can be deleted (plain units that change the shape only)")
    if any(int(k) != k or k < 1 for k in drops) or draws < 1:
        raise ValueError(f"--drop takes unit counts >= 1 and --draws >= 1, got drops {list(drops)}, draws {draws}")
    layer = {name: i for i, name in enumerate(every)}
    error, loss = evaluate(model, task, batches)
    rows: list[dict[str, Any]] = [dict(mode="intact", k=0, draw=0, unit="", layer=-1, error=error, loss=loss)]
    for name in able:
        with lesioned(model, [name]):
            error, loss = evaluate(model, task, batches)
        rows.append(dict(mode="single", k=1, draw=0, unit=name, layer=layer[name], error=error, loss=loss))
    gen = torch.Generator().manual_seed(seed)
    for k in sorted({int(k) for k in drops if 1 < k <= len(able)}):  # k = 1 is every single deletion, above
        for draw in range(draws):
            chosen = [able[i] for i in torch.randperm(len(able), generator=gen)[:k].tolist()]
            with lesioned(model, chosen):
                error, loss = evaluate(model, task, batches)
            rows.append(dict(mode="random", k=k, draw=draw, unit=" ".join(chosen), layer=-1, error=error, loss=loss))
    return pd.DataFrame(rows, columns=list(COLUMNS))


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per ``k``: the mean ``error`` and ``loss`` of the intact model (k = 0), of single deletions (k = 1: the mean
    over every deletable unit) and of the random draws of each k > 1 (their mean), with ``error_increase`` =
    error - the intact error. Extra columns of ``table`` that are constant (run id, variant, ...) are kept."""
    intact = float(table.loc[table["mode"] == "intact", "error"].iloc[0])
    parts = [table[table["mode"].isin(["intact", "single"])], table[(table["mode"] == "random") & (table["k"] > 1)]]
    used = pd.concat(parts)
    keep = [c for c in table.columns if c not in COLUMNS and table[c].nunique(dropna=False) <= 1]
    out = used.groupby("k", as_index=False).agg(error=("error", "mean"), loss=("loss", "mean"), n=("error", "size"))
    for c in keep:
        out[c] = table[c].iloc[0]
    out["error_increase"] = out["error"] - intact
    return out
