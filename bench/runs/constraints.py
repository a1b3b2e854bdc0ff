"""What each RunConfig field accepts: one table (:data:`CONSTRAINTS`) of type, range and finiteness per field.

Every way of making a config reads it: :class:`bench.runs.config.RunConfig` checks each field against it before any
other rule (so a study file's ``depth = ["eight"]`` or a ``--set momentum=nan`` is refused naming the field and what
it accepts, never by a comparison failing deep inside), the command line converts its text with it
(:func:`from_text`) and shows each field's range in ``--help`` (:meth:`Constraint.describe`), and the Python API,
study files and ``--set`` reach it through the constructor. Rules between fields (``--epochs`` or ``--steps``, a
warm-up's cap) stay in :mod:`bench.runs.config`.

Numbers are finite: NaN and infinity are refused everywhere. An integer field takes a Python int only (not a bool,
not 2.0); a number field takes an int or a float (not a bool). A field whose default is None also takes None.

This module imports nothing but the standard library: the command line's parser reads it without loading torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.runs.names import problem


@dataclass(frozen=True)
class Constraint:
    """What one field accepts. ``kind``: "int", "float", "text", "name" (text that is a safe file name,
    :mod:`bench.runs.names`), "flag", "choice", "pairs"; ``low``/``high`` bound a number (``open_low``/``open_high``:
    the bound itself excluded); ``choices`` of a choice; ``items``: the field is a sequence of such values (``length``
    of them exactly, when given); ``optional``: None is accepted too."""

    kind: str
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    choices: tuple[str, ...] = ()
    items: bool = False
    length: int | None = None
    optional: bool = False

    def describe(self) -> str:
        """What the field accepts, in words: ``an integer in [1, 10000]``, ``2 numbers, each a finite number in
        [0, 1)``."""
        one = self._one()
        if not self.items:
            return one
        count = f"{self.length} values" if self.length is not None else "a list of values"
        return f"{count}, each {one}"

    def _one(self) -> str:
        if self.kind == "choice":
            return f"one of {', '.join(self.choices)}"
        if self.kind in ("text", "flag", "pairs"):
            return {"text": "text", "flag": "true or false", "pairs": "KEY=VALUE pairs"}[self.kind]
        if self.kind == "name":
            return "a name that can be a file name (letters, digits, '.', '_', '-', '+'; not starting with '.' or '-')"
        what = "an integer" if self.kind == "int" else "a finite number"
        low, high = _bound(self.low), _bound(self.high)
        if self.low is not None and self.high is not None:
            return f"{what} in {'(' if self.open_low else '['}{low}, {high}{')' if self.open_high else ']'}"
        if self.low is not None:
            return f"{what} {'>' if self.open_low else '>='} {low}"
        if self.high is not None:
            return f"{what} {'<' if self.open_high else '<='} {high}"
        return what

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` (as a RunConfig holds it: sequences as tuples) is one the field takes."""
        if value is None:
            return self.optional
        if not self.items:
            return self._accepts_one(value)
        if not isinstance(value, tuple) or (self.length is not None and len(value) != self.length):
            return False
        return all(self._accepts_one(v) for v in value)

    def _accepts_one(self, value: Any) -> bool:
        if self.kind == "text":
            return isinstance(value, str)
        if self.kind == "name":  # it names a file (studies/<study>.toml) and lands in the commands a report prints
            return problem(value) is None
        if self.kind == "flag":
            return isinstance(value, bool)
        if self.kind == "choice":
            return isinstance(value, str) and value in self.choices
        if self.kind == "pairs":
            return isinstance(value, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in value)
        if isinstance(value, bool) or not isinstance(value, (int, float) if self.kind == "float" else int):
            return False
        if not math.isfinite(value):
            return False
        if self.low is not None and (value < self.low or (self.open_low and value == self.low)):
            return False
        return self.high is None or not (value > self.high or (self.open_high and value == self.high))

    def parse(self, text: str) -> Any:
        """One value of the field from command-line text (an int or float for a number; other kinds as they are);
        ValueError if it is not of the field's type (its range is checked by the config)."""
        if self.kind == "int":
            return int(text)
        if self.kind == "float":
            return float(text)
        return text


def _bound(value: float | None) -> str:
    return f"{value:g}" if isinstance(value, float) and value < 1e6 else str(value)


def _int(low: int | None = None, high: int | None = None, *, optional: bool = False) -> Constraint:
    return Constraint("int", low, high, optional=optional)


def _float(low: float | None = None, high: float | None = None, *, open_low: bool = False, open_high: bool = False,
           optional: bool = False) -> Constraint:
    return Constraint("float", low, high, open_low, open_high, optional=optional)


OPTIMIZERS = ("sgd", "adamw", "adam")
SCHEDULES = ("constant", "step", "cosine", "inv_sqrt")
WARMUP_KINDS = ("linear", "constant")
LR_SCALES = ("auto", "linear", "sqrt")
PRECISIONS = ("fp32", "bf16", "fp16")
DEVICES = ("auto", "cpu", "cuda", "mps")
PHASES = ("flops", "throughput", "memory")
# Where a model's initial values come from (variants.draws): a stream per (seed, parameter name), or torch's one
# global stream after the seed, as every run recorded before the first drew them.
INIT_STREAMS = ("crn", "global")
# torch.compile's Inductor modes (bench.runs.execution): reduce-overhead adds CUDA graphs, max-autotune kernel search
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
_POSITIVE = _float(0.0, open_low=True)
_FRACTION = _float(0.0, 1.0, open_low=True)  # (0, 1]: an accuracy, an error rate, a factor of a rate
TEXT, FLAG = Constraint("text"), Constraint("flag")
OPTIONAL_TEXT = Constraint("text", optional=True)
OPTIONAL_NAME = Constraint("name", optional=True)
MAX_DEPTH = 10_000  # Zhang et al. 2019 (Fixup) trained a 10,000-layer residual network; nothing published is deeper
MAX_SEED = 2**32 - 1  # the range every seeded generator of resbench takes, with room for the offsets it adds
MAX_THREADS = 1024
MAX_STEPS = 10**9  # a billion optimiser steps: beyond any run published; a larger count is a typo (1e15)
MAX_LR = 10**6  # far beyond any rate that trains (a divergence test uses 1e6); 1e300 is a typo, not an experiment
MAX_SAMPLES = 10**9  # a generated split of a billion samples: more than any generated task needs
MAX_IMAGE_SIZE = 8192  # an image side in pixels: beyond any model the benchmark builds
MAX_CONTOUR = 41  # pathfinder: the longest contour a straight line fits in its largest image (128 pixels)
MAX_DISTRACTORS = 16  # pathfinder: beyond this, contours rarely fit apart even in its largest image


def choice(*names: str) -> Constraint:
    return Constraint("choice", choices=tuple(names))


def sequence(item: Constraint, length: int | None = None) -> Constraint:
    return Constraint(item.kind, item.low, item.high, item.open_low, item.open_high, item.choices, items=True,
                      length=length)


# The constraint of every RunConfig field (tests/test_constraints.py checks that the two name the same fields).
CONSTRAINTS: dict[str, Constraint] = {
    "variant": TEXT, "depth": _int(1, MAX_DEPTH, optional=True), "task": TEXT,
    "epochs": _float(0.0, open_low=True, optional=True), "steps": _int(1, MAX_STEPS, optional=True),
    "batch_size": _int(1), "optimizer": choice(*OPTIMIZERS), "lr": _float(0.0, MAX_LR, open_low=True),
    "lr_base": _float(0.0, open_low=True, optional=True), "lr_base_size": _int(1), "lr_base_scale": choice(*LR_SCALES),
    "momentum": _float(0.0, 1.0, open_high=True), "weight_decay": _float(0.0),
    "betas": sequence(_float(0.0, 1.0, open_high=True), 2), "schedule": choice(*SCHEDULES),
    "milestones": sequence(_float(0.0, 1.0, open_low=True, open_high=True)), "gamma": _POSITIVE,
    "warmup_steps": _int(0), "warmup_epochs": _float(0.0, open_low=True, optional=True),
    "warmup_kind": choice(*WARMUP_KINDS), "warmup_factor": _FRACTION,
    "warmup_until_error": _float(0.0, 1.0, open_low=True, optional=True),
    "grad_clip": _float(0.0, open_low=True, optional=True), "seed": _int(0, MAX_SEED),
    "init_stream": choice(*INIT_STREAMS),
    "device": choice(*DEVICES), "precision": choice(*PRECISIONS), "threads": _int(1, MAX_THREADS, optional=True),
    "compile": FLAG, "compile_mode": choice(*COMPILE_MODES), "channels_last": FLAG, "deterministic": FLAG,
    "target": _float(0.0, 1.0, open_low=True, optional=True), "eval_every": _int(1, optional=True),
    "probe_every": _int(1, optional=True), "diverge_factor": _float(1.0, open_low=True),
    "chance_band": _float(0.0, 1.0, open_high=True), "measure": sequence(choice(*PHASES)),
    "timing_warmup": _int(0), "timing_repeats": _int(1), "timing_steps": _int(1),
    "data_dir": OPTIONAL_TEXT, "data_path": OPTIONAL_TEXT,
    "workers": _int(0, optional=True), "prefetch": _int(1), "subset_per_class": _int(1, optional=True),
    "skip_bad_images": FLAG, "vocab_size": _int(2), "eval_batches": _int(1, optional=True),
    "eval_tokens": _int(1, optional=True), "train_tokens": _int(2, optional=True),
    "seq_len": _int(1), "image_size": _int(1, MAX_IMAGE_SIZE), "num_classes": _int(1), "random_labels": FLAG,
    "train_size": _int(1, MAX_SAMPLES), "val_size": _int(1, MAX_SAMPLES), "augment": FLAG, "save_checkpoint": FLAG,
    "contour_length": _int(2, MAX_CONTOUR), "distractors": _int(0, MAX_DISTRACTORS), "channels": _int(1, 3),
    "checkpoint_every": _int(1, optional=True), "checkpoint_minutes": _float(0.0, open_low=True, optional=True),
    "keep_checkpoints": _int(1), "grad_accum": _int(1), "global_batch_size": _int(1, optional=True),
    "target_loss": _float(0.0, open_low=True, optional=True), "model_args": Constraint("pairs"),
    "recipe": OPTIONAL_TEXT, "world_size": _int(1), "study": OPTIONAL_NAME, "preset": OPTIONAL_NAME,
    "budget_flops": _float(0.0, open_low=True, optional=True), "budget_samples": _int(1, optional=True),
}  # fmt: skip


def flag_of(name: str) -> str:
    """The command-line option of a field: ``batch_size`` -> ``--batch-size``."""
    return "--" + name.replace("_", "-")


def _shown(value: Any) -> str:
    """A refused value as the message shows it: its type too where that is what is wrong (``'eight' (str)``)."""
    if isinstance(value, tuple):
        return repr(list(value))
    plain = (isinstance(value, (int, float)) and not isinstance(value, bool)) or value is None
    return repr(value) if plain else f"{value!r} ({type(value).__name__})"


def errors(constraints: Mapping[str, Constraint], values: Mapping[str, Any]) -> list[str]:
    """One message per field of ``values`` its constraint refuses: the field, what it accepts, what it got."""
    return [f"{flag_of(name)} must be {constraints[name].describe()}, got {_shown(value)}"
            for name, value in values.items() if name in constraints and not constraints[name].accepts(value)]


def from_text(constraints: Mapping[str, Constraint], name: str, text: Any) -> Any:
    """The value of field ``name`` from the command line's text (a list of texts for a sequence); ValueError naming
    the field and what it accepts when a text is not of its type."""
    c = constraints[name]
    try:
        return [c.parse(t) for t in text] if isinstance(text, list) else c.parse(text)
    except ValueError:
        raise ValueError(f"{flag_of(name)} must be {c.describe()}, got {text!r}") from None
