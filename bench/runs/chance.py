"""A run that ends at chance learned nothing: its row says so (``status = "failed_to_learn"``), numbers kept.

Every task declares its chance level (:attr:`bench.runs.tasks.base.Task.chance_loss`): the cross-entropy, in
nats, of a model that predicts the training targets' frequencies and nothing else — ln 10 for ten balanced
classes, the unigram entropy of a text. A run that ended ``ok`` but whose best final loss (training or
validation, whichever is lower: a net that memorised random labels did learn) is not :data:`CHANCE_BAND` below
that level (``--chance-band``), at it or above it, is ``failed_to_learn``: two such groups never "agree" in a
claim, and a group of them counts as the failed one (``bench.analysis.claims``). A stalled Post-LN stack at 3.059
nats/byte on a text whose unigram entropy is 3.053 is one; a net at 9.9% accuracy on ten classes is another.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

STATUS = "failed_to_learn"
# How close to chance a final loss may come and still be chance: 1% of the chance level (0.023 nats for ten
# classes, 0.031 nats/byte for the bundled English text). In the committed studies the ok runs' best final losses
# either sit on the plateau, 0.990-1.015 x chance (166 of 486: stalled stacks, the 50-step probe runs), or lie at
# 0.988 x it or below.
CHANCE_BAND = 0.01


def _finite(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def failed_to_learn(row: Mapping[str, Any], band: float = CHANCE_BAND) -> str | None:
    """Why the ``ok`` run of ``row`` learned nothing (its best final loss not ``band`` below its ``chance_loss``), or
    None: it learned, it failed otherwise, its task declares no chance level, or ``band`` is 0 (never judged)."""
    chance = _finite(row.get("chance_loss"))
    losses = {k: v for k in ("final_train_loss", "final_val_loss") if (v := _finite(row.get(k))) is not None}
    if row.get("status") != "ok" or chance is None or chance <= 0 or not losses or band <= 0:
        return None
    which, best = min(losses.items(), key=lambda kv: kv[1])
    if best < (1 - band) * chance:
        return None
    name = which.removeprefix("final_").replace("_", " ")
    return (f"ended at chance: its lowest final loss ({name} {best:.4g}) is not {band:.0%} below the task's chance "
            f"level, {chance:.4g} nats (the loss of predicting the training targets' frequencies)")


def judge(row: Mapping[str, Any], band: float = CHANCE_BAND) -> dict[str, Any]:
    """``row`` with ``status``/``error`` set to :data:`STATUS` and the reason where :func:`failed_to_learn` says
    so; its numbers are kept."""
    reason = failed_to_learn(row, band)
    return {**row, "status": STATUS, "error": reason} if reason else dict(row)
