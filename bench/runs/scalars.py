"""The learned residual scalars of a model, recorded at every evaluation: what ReZero's and SkipInit's α, LayerScale's
diag(β), a Highway gate's bias learned (Bachlechner et al. 2020 Fig. 3 and De & Smith 2020 §4 read them to see how
far each unit left the identity).

A module declares its residual scalars (``residual_scalars()``, :mod:`variants.roles`); those that are learned (a
parameter, or computed from one) are recorded, one number each: the mean over its entries (a per-channel β is one
number per unit). Constants (DeepNorm's α) never change and are left out. A row is
``{"step", "module", "scalar", "value"}``: a few dozen numbers per evaluation for a ResNet-56, nothing for a
model without any.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd
import torch
from torch import nn

from variants.roles import learnable, residual_scalars

COLUMNS = ("step", "module", "scalar", "value")


def learned_scalars(model: nn.Module, step: int) -> list[dict[str, Any]]:
    """One row per learned residual scalar of ``model`` (module docstring), at training step ``step``."""
    found: list[tuple[str, str]] = []
    means: list[torch.Tensor] = []
    for name, module in model.named_modules():
        with torch.enable_grad():  # a scalar computed from a parameter requires grad only with grad enabled
            declared = residual_scalars(module)
        for symbol, value in declared.items():
            if learnable(value):
                found.append((name, symbol))
                means.append(value.detach().float().mean())
    values = torch.stack(means).tolist() if means else []  # one transfer from the device, not one per scalar
    return [{"step": int(step), "module": name, "scalar": symbol, "value": v}
            for (name, symbol), v in zip(found, values, strict=True)]


def scalar_table(rows: Iterable[Mapping[str, Any]]) -> str:
    """The recorded scalars as a table: one line per module and scalar, one column per evaluation step."""
    df = pd.DataFrame(list(rows), columns=list(COLUMNS))
    if df.empty:
        return "(no learned residual scalars)"
    wide = df.pivot_table(index=["module", "scalar"], columns="step", values="value", aggfunc="mean", sort=False)
    wide.columns = [f"step {c}" for c in wide.columns]
    return wide.to_string(float_format=lambda v: f"{v:.4g}", na_rep="-")
