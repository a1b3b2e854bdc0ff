"""Each task's primary metric: the quantity its studies are shown in first (leaderboards, report tables, learning
curves, the degradation figure, the Pareto figure, ``bench compare``'s default).

A language model is judged by its loss (nats per token; bits per byte is the same number over ln 2 for the
byte-level tasks), a classifier by its error (1 − accuracy): a language model's next-token accuracy says little,
and a classifier's loss is not what its paper reports. A run's table lives in its leaderboard row; the error
columns ``train_error``/``val_error`` are derived from the accuracy columns (:func:`bench.analysis.stats.with_derived`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Primary:
    """What a task's runs are judged by: the final validation figure, its training counterpart (the degradation
    figure's: can the optimiser fit the training data?), the evaluation curve and the words for them."""

    final: str  # a leaderboard column, or a derived one (val_error)
    train: str
    curve: str  # the evaluation curve's metric (val_error: 1 - the recorded val_acc)
    label: str  # the final figure in words, with its unit
    train_label: str
    curve_label: str


LOSS = Primary("final_val_loss", "final_train_loss", "val_loss", "validation loss (nats)", "training loss (nats)",
               "validation loss (cross-entropy, nats)")
ERROR = Primary("val_error", "train_error", "val_error", "validation error (1 − accuracy)",
                "training error (1 − train accuracy)", "validation error (1 − accuracy)")

# Language modelling (next-token loss) or classification (error); the copy, reverse and recall tasks score each
# target token right or wrong: classifiers.
PRIMARY: dict[str, Primary] = {
    "digits": ERROR, "synthetic": ERROR, "cifar10": ERROR, "cifar100": ERROR, "imagefolder": ERROR, "pathfinder": ERROR,
    "copy": ERROR, "reverse": ERROR, "recall": ERROR,
    "text": LOSS, "tinytext": LOSS, "tokens": LOSS,
}  # fmt: skip


def primary(task: object) -> Primary:
    """The primary metric of ``task`` (a task's name); a name of no known task (a run of another version): its
    loss."""
    return PRIMARY.get(str(task), LOSS)


def primaries(tasks: object) -> list[Primary]:
    """The distinct primary metrics of ``tasks`` (names, in order of first appearance)."""
    seen: dict[Primary, None] = {}
    for task in tasks:  # type: ignore[attr-defined]
        if isinstance(task, str):
            seen.setdefault(primary(task), None)
    return list(seen)
