"""The residual interface: what the harness reads of a model's joins, gates and residual scalars.

The harness (the fairness guard and ``bench diff``, the probes, the lesions, the run's record of learned
scalars) never asks which class a module is; it asks what the module declares, so a plugin's join or gate that
subclasses nothing of ours is seen exactly like a shipped one:

- ``residual_role`` (a class attribute): :data:`JOIN` for a module whose ``forward(x, fx)`` joins the shortcut
  ``x`` and the branch output ``F(x)`` into the residual stream (every :class:`~variants.combinators.Combinator`);
  :data:`GATE` for a module whose output is a gate ``T(x)`` in [0, 1] (Highway's transform gate, Srivastava et
  al. 2015 §2).
- ``residual_scalars()`` (a method, optional): the module's own residual scalars, each by its symbol in the
  module's formula, as ``{name: tensor}``: an ``nn.Parameter`` where it is learned, any other tensor (or a
  float) where it is fixed. ``beta`` is the scale of the branch where the formula has one (ReZero's and
  SkipInit's α is ``Scaled``'s β: ``y = x + β·F(x)``), ``alpha`` the shortcut's. A value computed from a
  parameter (LAuReL's ``α = 2σ(a)``) counts as learned when it requires grad.
- a join whose combinator ``axis`` is ``"none"`` drops its shortcut (a plain network's ``y = F(x)``).
"""

from __future__ import annotations

import torch
from torch import nn

JOIN = "join"
GATE = "gate"
ROLES = (JOIN, GATE)


def residual_role(module: nn.Module) -> str | None:
    """The role ``module`` declares (:data:`JOIN`, :data:`GATE`), or None."""
    role = getattr(type(module), "residual_role", None)
    return role if role in ROLES else None


def is_join(module: nn.Module) -> bool:
    return residual_role(module) == JOIN


def is_gate(module: nn.Module) -> bool:
    return residual_role(module) == GATE


def drops_shortcut(module: nn.Module) -> bool:
    """Whether a join is a plain network's ``y = F(x)`` (combinator axis ``"none"``)."""
    return is_join(module) and getattr(module, "axis", None) == "none"


def residual_scalars(module: nn.Module) -> dict[str, torch.Tensor]:
    """The scalars ``module`` declares (``residual_scalars()``), each as a tensor; {} when it declares none."""
    declare = getattr(module, "residual_scalars", None)
    if not callable(declare):
        return {}
    out = {}
    for name, value in dict(declare()).items():
        out[str(name)] = value if isinstance(value, torch.Tensor) else torch.tensor(float(value))
    return out


def learnable(value: torch.Tensor) -> bool:
    """Whether a declared scalar is learned: a parameter, or a value computed from one (it requires grad)."""
    return bool(value.requires_grad)
