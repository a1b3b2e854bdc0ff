"""RunConfig: everything that defines one run, frozen, validated and hashed; the named training recipes; the
environment variables resbench reads.

Each field carries a one-line reason in its metadata; the CLI builds ``--help`` from it, so the
documentation and the defaults cannot drift apart. Every way of making a config (the command line, the Python
API, a study file, a run JSON read back) goes through :func:`build` or the constructor, and the constructor
normalises what may arrive in several spellings (lists for tuples, model arguments as a mapping or pairs in any
order), so one configuration has one run id however it was written.

What each field accepts on its own (type, range, finiteness) is the table of :mod:`bench.runs.constraints`, checked
before any rule between fields. This module imports nothing but the standard library (and resbench's own
standard-library modules): the command line's parser reads it without loading torch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bench.runs import constraints
from bench.runs.constraints import (
    COMPILE_MODES,
    DEVICES,
    INIT_STREAMS,
    LR_SCALES,
    OPTIMIZERS,
    PHASES,
    PRECISIONS,
    SCHEDULES,
    WARMUP_KINDS,
)
from bench.runs.names import problem

# -- the environment -------------------------------------------------------------------------------------------
RESULTS_ENV_VAR = "RESBENCH_RESULTS"  # the results directory when --results-dir is not given
DEFAULT_RESULTS = os.environ.get(RESULTS_ENV_VAR, "results")
PLUGINS_ENV_VAR = "RESBENCH_PLUGINS"  # plugin specs every command loads, os.pathsep-separated (bench.runs.plugins)
PLUGIN_ENTRY_POINTS = "resbench.variants"  # the entry-point group of installed plugins



def _f(default: Any, help: str, **meta: Any) -> Any:
    """A dataclass field whose metadata holds its help line (and CLI hints such as choices)."""
    if isinstance(default, (list, dict, tuple)) and not isinstance(default, tuple):
        return field(default_factory=lambda: default, metadata={"help": help, **meta})
    return field(default=default, metadata={"help": help, **meta})


@dataclass(frozen=True)
class ModelFields:
    """RunConfig's model fields: what is trained: the variant, its depth and its own keyword arguments."""


    variant: str = _f("", "registered variant name (see `bench list`), or timm:<model>")
    depth: int | None = _f(None, "network depth; default: the variant's own (presets fix it)")
    model_args: tuple[tuple[str, Any], ...] = _f((), "extra variant keyword arguments, KEY=VALUE (repeatable)")


@dataclass(frozen=True)
class DataFields:
    """RunConfig's data fields: what it is trained on: the task, its data and how it is read."""


    task: str = _f("digits", "task name: digits, synthetic, pathfinder, cifar10, cifar100, imagefolder, text, "
                             "tinytext, tokens, copy, reverse, recall")
    seq_len: int = _f(128, "sequence tasks: tokens per training window")
    image_size: int = _f(32, "image side: synthetic's images, imagefolder's training and validation crops "
                         "(ImageNet: 224)")
    num_classes: int = _f(10, "synthetic task: number of classes")
    random_labels: bool = _f(False, "synthetic task: labels independent of the inputs")
    train_size: int = _f(4096, "generated tasks (synthetic, copy, reverse, recall): training samples")
    val_size: int = _f(1024, "generated tasks: validation samples")
    contour_length: int = _f(9, "pathfinder task: dashes per contour (the longer, the harder; at most what fits "
                             "straight in --image-size)")
    distractors: int = _f(1, "pathfinder task: contours besides the two that may carry the markers")
    channels: int = _f(1, "pathfinder task: image channels, the grey image in each")
    augment: bool = _f(True, "image tasks: on-device pad-and-crop and flip where the task allows it")
    train_tokens: int | None = _f(None, "sequence tasks (text, tinytext, tokens): train on the first N tokens of the "
                                  "training split only, the data scale a study varies (default: all of it); the "
                                  "validation split is the same at every N")
    vocab_size: int = _f(50257, "tokens task: the model's vocabulary; every token id must be below it (GPT-2: 50257)")
    data_dir: str | None = _f(None, "dataset archive directory (cifar); default $RESBENCH_DATA, ~/.cache/resbench")
    data_path: str | None = _f(None, "the data on disk: the `text` task's UTF-8 file, the `imagefolder` root (train/ "
                               "and val/ class folders, or train-*.tar/val-*.tar shards), the `tokens` shard directory")
    workers: int | None = _f(None, "loader tasks (imagefolder, tokens): DataLoader worker processes; 0 reads in the "
                             "training process (default: imagefolder min(8, CPUs - 1), tokens 1)")
    prefetch: int = _f(2, "loader tasks: batches each worker prepares ahead (DataLoader prefetch_factor)")
    subset_per_class: int | None = _f(None, "imagefolder: only the first K images (sorted names) of each class in "
                                      "each split, for quick runs")
    skip_bad_images: bool = _f(False, "imagefolder: leave unreadable or truncated images out (counted in the run "
                               "JSON) instead of refusing the dataset")
    eval_batches: int | None = _f(None, "at most N batches per evaluation pass (validation and training error): a "
                                  "fixed subset, the same at every evaluation (default: all of it)")
    eval_tokens: int | None = _f(None, "tokens and text tasks: tokens per evaluation pass, in fixed windows "
                                 "(default: tokens 1,048,576; text 8,192)")


@dataclass(frozen=True)
class OptimisationFields:
    """RunConfig's optimisation fields: how it is trained: the length, the batch, the optimiser and its schedule."""


    recipe: str | None = _f(None, "named training recipe from a paper (see `bench recipes`)")
    epochs: float | None = _f(None, "training length in passes over the train split (exclusive with --steps)")
    steps: int | None = _f(None, "optimiser steps to train (default: 30 epochs; 300 steps for sequence tasks)")
    budget_flops: float | None = _f(None, "training length as a compute budget: as many optimiser steps as fit this "
                                          "many training FLOPs (forward + backward of the design, counted on the "
                                          "meta device), so a costlier design takes fewer; exclusive with --steps, "
                                          "--epochs and --budget-samples")
    budget_samples: int | None = _f(None, "training length as samples seen (sequences; tokens = samples x seq_len): "
                                          "steps = this / the global batch, rounded down; exclusive with --steps, "
                                          "--epochs and --budget-flops")
    batch_size: int = _f(128, "samples (sequences) per forward pass, over all processes; an optimiser step takes "
                              "grad_accum of them (He 2015 CIFAR used 128)")
    grad_accum: int = _f(1, "micro-batches of --batch-size whose gradients one optimiser step sums: the global "
                            "batch is batch_size x grad_accum (BatchNorm sees each micro-batch)")
    global_batch_size: int | None = _f(None, "the global batch of one optimiser step: sets grad_accum to "
                                             "global_batch_size / batch_size (which must divide)")
    optimizer: str = _f("sgd", "optimiser", choices=OPTIMIZERS)
    lr: float = _f(0.1, "peak learning rate; He 2015 CIFAR used 0.1")
    lr_base: float | None = _f(None, "peak learning rate at the global batch --lr-base-size, scaled to this run's "
                                     "global batch (timm's convention); exclusive with --lr")
    lr_base_size: int = _f(256, "the global batch --lr-base is given for (timm: 256)")
    lr_base_scale: str = _f("auto", "how --lr-base scales with the global batch: linear (Goyal 2017), sqrt "
                                    "(Krizhevsky 2014), or auto: linear for sgd, sqrt for adam/adamw (timm's rule)",
                            choices=LR_SCALES)
    momentum: float = _f(0.9, "SGD momentum (He 2015: 0.9)")
    weight_decay: float = _f(1e-4, "L2 weight decay (SGD) or decoupled decay (AdamW); He 2015: 1e-4")
    betas: tuple[float, float] = _f((0.9, 0.999), "Adam betas; Xiong 2020 used 0.9 0.98", nargs=2)
    schedule: str = _f("cosine", "learning-rate decay after warm-up", choices=SCHEDULES)
    milestones: tuple[float, ...] = _f((0.5, 0.75), "step schedule: fractions of the run where lr *= gamma", nargs="+")
    gamma: float = _f(0.1, "step schedule: factor at each milestone (He 2015: 0.1)")
    warmup_steps: int = _f(0, "learning-rate warm-up steps (0 = none)")
    warmup_epochs: float | None = _f(None, "learning-rate warm-up length in passes over the train split, made steps "
                                           "once the task is built (Goyal 2017: 5); exclusive with --warmup-steps")
    warmup_kind: str = _f("linear", "linear ramp from 0, or constant lr*warmup_factor (He 2015 ResNet-110)",
                          choices=WARMUP_KINDS)
    warmup_factor: float = _f(0.1, "constant warm-up: lr multiplier during warm-up (He 2015: 0.01/0.1)")
    warmup_until_error: float | None = _f(None, "constant warm-up ends at the first step whose training-batch error "
                                          "is below this (He 2015 §4.2 ResNet-110: 0.8); warmup_steps is then the cap")
    grad_clip: float | None = _f(None, "clip the global gradient norm to this value (off by default)")


@dataclass(frozen=True)
class MeasurementFields:
    """RunConfig's measurement fields: what is measured and judged besides training: the cost phases, evaluation,
    probes, targets and the outcome's rules."""


    measure: tuple[str, ...] = _f(PHASES, "measurement phases to run besides training", nargs="*", choices=PHASES)
    timing_warmup: int = _f(3, "throughput phase: untimed warm-up steps")
    timing_repeats: int = _f(5, "throughput phase: timed repeats (the median is reported)")
    timing_steps: int = _f(5, "throughput phase: steps per timed repeat (a loader task's: rounded up to whole rounds "
                              "of its workers, which deliver their batches together)")
    eval_every: int | None = _f(None, "evaluate every N steps (default: about 10 evaluations per run)")
    probe_every: int | None = _f(None, "run per-layer probes at init and every N steps (off during timing)")
    target: float | None = _f(None, "validation accuracy in [0, 1] whose first reach is recorded (steps/time)")
    target_loss: float | None = _f(None, "validation loss whose first reach is recorded (steps/time), e.g. 3.28, "
                                         "the GPT-2-small speedrun's target; exclusive with --target")
    diverge_factor: float = _f(10.0, "a loss above this multiple of the first-step loss counts as divergence")
    chance_band: float = _f(0.01, "a run whose lowest final loss is not this fraction below its task's chance level "
                            "(the loss of predicting the training targets' frequencies) is recorded as "
                            "failed_to_learn, its numbers kept; 0: never")


@dataclass(frozen=True)
class RunFields:
    """RunConfig's run fields: how and where this one run executes: its seed, the device and precision,
    compilation, checkpoints, and the study that asked for it."""


    seed: int = _f(0, "seed of initialisation, batch order and augmentation")
    init_stream: str = _f("crn", "where the initial weights are drawn from: crn, a stream per (seed, parameter "
                                 "name), so the layers two designs share start equal (common random numbers); "
                                 "global, torch's one stream after the seed (every run recorded before crn)",
                          choices=INIT_STREAMS)
    device: str = _f("auto", "where to train: auto picks cuda, then mps, then cpu", choices=DEVICES)
    precision: str = _f("fp32", "autocast precision of forward/backward (weights stay fp32)", choices=PRECISIONS)
    threads: int | None = _f(None, "CPU threads of torch's operators in this run (default: the cores free now, those "
                                   "this process may run on less the load average, at most torch's own count; a "
                                   "--deterministic run keeps torch's count)")
    compile: bool = _f(False, "wrap the model in torch.compile")
    compile_mode: str = _f("default", "torch.compile's mode with --compile: reduce-overhead replays the step as CUDA "
                                      "graphs (launch-bound nets), max-autotune-no-cudagraphs searches kernels",
                           choices=COMPILE_MODES)
    channels_last: bool = _f(False, "channels-last memory format for 4-D inputs and the model")
    deterministic: bool = _f(False, "deterministic kernels: bit-identical curves for a seed on one machine")
    world_size: int = _f(1, "processes of the torchrun job training this run (DDP; set from WORLD_SIZE by `bench run`)")
    save_checkpoint: bool = _f(False, "keep the trained weights of a run that finished (ok or failed_to_learn) as "
                               "RESULTS/checkpoints/<run_id>.pt (for `bench lesion` / `bench landscape`)")
    checkpoint_every: int | None = _f(None, "save the whole training state every N steps into "
                                            "RESULTS/checkpoints/<run_id>/; rerunning the same command continues "
                                            "from the newest (a SIGTERM or SIGUSR1 always saves before it stops)")
    checkpoint_minutes: float | None = _f(None, "also save the training state every M minutes of training")
    keep_checkpoints: int = _f(2, "mid-run training states kept per run (the newest ones)")
    study: str | None = _f(None, "name of the study this run belongs to (set by `bench sweep`)")
    preset: str | None = _f(None, "the study's preset that first asked for this run, e.g. quick (set by `bench sweep`; "
                                  "not part of its identity)")


# RunConfig's groups by name, in the order of --help and of the fields: each a frozen dataclass of its fields.
GROUPS: dict[str, type] = {"model": ModelFields, "data": DataFields, "optimisation": OptimisationFields,
                           "measurement": MeasurementFields, "run": RunFields}


@dataclass(frozen=True)
class RunConfig(RunFields, MeasurementFields, OptimisationFields, DataFields, ModelFields):
    """One training run of one variant on one task: the fields of its five groups (:data:`GROUPS`: model, data,
    optimisation, measurement, run), one flat namespace, as the command line, study files and run JSONs spell them."""

    def __post_init__(self) -> None:
        # One spelling per value: sequences as tuples, model arguments as (key, value) pairs sorted by key (their
        # order on a command line or in a dict says nothing about the run, and must not change its run id).
        for name in SEQUENCE_FIELDS:
            value = getattr(self, name)
            if isinstance(value, (list, tuple)):
                object.__setattr__(self, name, tuple(value))
        object.__setattr__(self, "model_args", _model_args(self.model_args))
        wrong = constraints.errors(constraints.CONSTRAINTS, self.__dict__)  # each field on its own, before any rule
        if wrong:
            raise ValueError("; ".join(wrong))
        if self.global_batch_size is not None and self.batch_size >= 1 and self.global_batch_size >= 1:
            if self.global_batch_size % self.batch_size:
                raise ValueError(f"--global-batch-size {self.global_batch_size} is not a multiple of --batch-size "
                                 f"{self.batch_size}: the global batch is whole micro-batches")
            accum = self.global_batch_size // self.batch_size
            if self.grad_accum not in (1, accum):
                raise ValueError(f"--global-batch-size {self.global_batch_size} / --batch-size {self.batch_size} "
                                 f"asks for {accum} micro-batches, but --grad-accum says {self.grad_accum}")
            object.__setattr__(self, "grad_accum", accum)
        errors = list(self._errors())
        if errors:
            raise ValueError("; ".join(errors))

    def _errors(self) -> Any:
        """The rules between fields (each field's own range is :data:`bench.runs.constraints.CONSTRAINTS`')."""
        if not self.variant:
            yield "--variant is required"
        elif (why := problem(self.run_id)) is not None:
            yield (f"--variant {self.variant!r} and --task {self.task!r} make the run id {self.run_id!r}, which names "
                   f"the run's files but {why}")
        if self.epochs is not None and self.steps is not None:
            yield "give --epochs or --steps, not both"
        yield from self._budget_errors()
        if self.lr_base is not None and self.lr != FIELD_DEFAULTS["lr"]:
            yield (f"give --lr (the peak lr itself, {self.lr}) or --lr-base (scaled from a reference batch), "
                   "not both")
        if self.lr_base is None and (self.lr_base_size, self.lr_base_scale) != (FIELD_DEFAULTS["lr_base_size"],
                                                                                FIELD_DEFAULTS["lr_base_scale"]):
            yield "--lr-base-size and --lr-base-scale say how --lr-base scales: give --lr-base too"
        if list(self.milestones) != sorted(self.milestones):
            yield f"--milestones must be increasing fractions in (0, 1), got {list(self.milestones)}"
        if self.compile_mode != "default" and not self.compile:
            yield f"--compile-mode {self.compile_mode} is a mode of --compile: give --compile too"
        if self.target is not None and self.target_loss is not None:
            yield "give --target (an accuracy) or --target-loss, not both"
        if self.warmup_epochs is not None and self.warmup_steps:
            yield "give --warmup-steps or --warmup-epochs, not both"
        if self.warmup_until_error is not None and (self.warmup_kind != "constant" or self.warmup_steps < 1):
            yield ("--warmup-until-error ends a constant warm-up early: it needs --warmup-kind constant and "
                   f"--warmup-steps >= 1 as its cap (got {self.warmup_kind!r}, {self.warmup_steps})")

    def _budget_errors(self) -> Any:
        """A budget is the run's length: one at most, instead of steps or epochs, and at least one step's worth
        (a FLOP budget's step is known once the model is counted: :func:`bench.runs.budget.budget_steps`)."""
        given = [f"--{n.replace('_', '-')}" for n in ("steps", "epochs", "budget_flops", "budget_samples")
                 if getattr(self, n) is not None]
        if len(given) > 1 and any(g.startswith("--budget") for g in given):
            yield f"give one training length: {' or '.join(given)}, not both"
        elif self.budget_samples is not None and self.budget_samples < self.global_batch:
            yield (f"--budget-samples {self.budget_samples} is less than one optimiser step, which takes the global "
                   f"batch of {self.global_batch} samples: give at least {self.global_batch}")

    # -- identity ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def config_hash(self) -> str:
        """Hash of the config except the seed (seeds of one config share it) and the measurement knobs.

        The study is part of it: the same config run in two studies is two runs, so neither study's row
        replaces the other's. The preset is not: a run's identity is what it trains, not which preset of its
        study asked for it, so two presets that repeat a configuration share its runs (and renaming a preset
        changes no run id). The payload holds ``preset: null`` for every config, as the ids of runs made
        outside a preset always did: those ids are unchanged (``bench upgrade`` renames the runs recorded
        under a preset, and keeps their old ids resolving).
        """
        payload = {k: v for k, v in self.to_dict().items()
                   if k not in NOT_HASHED and not (k in _HASHED_UNLESS_DEFAULT and v == FIELD_DEFAULTS[k])
                   and not (k in LEGACY and v == LEGACY[k])}
        payload["preset"] = None
        blob = json.dumps(payload, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:8]

    @property
    def global_batch(self) -> int:
        """Samples of one optimiser step, over all processes: ``batch_size x grad_accum``."""
        return self.batch_size * self.grad_accum

    @property
    def peak_lr(self) -> float:
        """The peak learning rate the optimiser gets: ``lr``, or ``lr_base`` scaled from ``lr_base_size`` to
        :attr:`global_batch`, ``lr_base · (global_batch / lr_base_size)`` (linear) or its square root (sqrt); auto
        picks linear for SGD and sqrt for the Adam family, as timm's train.py does."""
        if self.lr_base is None:
            return self.lr
        scale = self.lr_base_scale
        if scale == "auto":
            scale = "linear" if self.optimizer == "sgd" else "sqrt"
        ratio = self.global_batch / self.lr_base_size
        return self.lr_base * (ratio if scale == "linear" else math.sqrt(ratio))

    @property
    def run_id(self) -> str:
        safe_variant = self.variant.replace(":", "_").replace("/", "_")
        depth = f"-d{self.depth}" if self.depth is not None else ""
        return f"{safe_variant}{depth}-{self.task}-{self.config_hash()}-s{self.seed}"

    def model_overrides(self) -> dict[str, Any]:
        return dict(self.model_args)

    def to_argv(self, skip: tuple[str, ...] = ("variant", "study", "preset", "world_size")) -> list[str]:
        """The ``bench run`` options that make this config: ``--variant`` first, then every other field whose value
        is not its default (``skip``'s never). The inverse of the command line's parser, so a config becomes a
        command that trains exactly it."""
        argv = ["--variant", self.variant]
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in skip or value == FIELD_DEFAULTS[f.name]:
                continue
            flag = "--" + f.name.replace("_", "-")
            if f.name == "model_args":
                argv += [a for k, v in value for a in ("--model-arg", f"{k}={_literal(v)}")]
            elif isinstance(value, bool):
                argv.append(flag if value else f"--no-{f.name.replace('_', '-')}")
            elif isinstance(value, tuple):
                argv += [flag, *map(str, value)]
            else:
                argv += [flag, str(value)]
        return argv


# RunConfig fields config_hash leaves out: the seed, and knobs that leave what is trained alone (measurement
# phases, where datasets live, whether the weights are kept).
NOT_HASHED: tuple[str, ...] = (
    "seed", "measure", "timing_warmup", "timing_repeats", "timing_steps", "data_dir", "save_checkpoint",
    "checkpoint_every", "checkpoint_minutes", "keep_checkpoints",
    "global_batch_size",  # what it decides is grad_accum, which is hashed
    "workers", "prefetch",  # how the loader runs, not what it feeds: augmentation is seeded per sample
    "chance_band",  # how the outcome is judged, not what is trained
    "threads",  # how fast the CPU computes it
    "preset",  # which preset of the study asked for the run, not what it trains (config_hash keeps it null)
)  # fmt: skip
# A run id ends in ``-<config_hash>-s<seed>`` (RunConfig.run_id): where a table lacks the hash, it is read from there.
RUN_ID_PATTERN = re.compile(r"-([0-9a-f]{8})-s\d+$")
SEQUENCE_FIELDS = ("betas", "milestones", "measure")
# Fields added after results were recorded: hashed only when set, so existing run ids (and resuming) stay valid.
_HASHED_UNLESS_DEFAULT = frozenset({
    "lr_base", "lr_base_size", "lr_base_scale", "warmup_epochs", "warmup_until_error", "world_size", "grad_accum",
    "target_loss", "subset_per_class", "skip_bad_images", "compile_mode",
    "vocab_size", "eval_batches", "eval_tokens", "train_tokens", "budget_flops", "budget_samples",
    "contour_length", "distractors", "channels",
})  # fmt: skip
# Every field's default (every RunConfig field has a plain one): what a run JSON written before a field existed used,
# but for the fields of LEGACY.
FIELD_DEFAULTS = {f.name: f.default for f in dataclasses.fields(RunConfig)}
# Fields whose default changed the runs they make: field -> the value every run recorded before the field existed
# had. A config holding it hashes without the field (those runs keep their ids), and a recorded config that lacks
# the field reads as it (it was run that way); a config holding another value, the default included, is another run.
LEGACY: dict[str, Any] = {"init_stream": "global"}


def lr_factor(step: int, total_steps: int, cfg: RunConfig, warmup_end: int | None = None) -> float:
    """Multiplier of the peak lr at optimiser step ``step`` (0-based) of ``total_steps``.

    Warm-up first (linear from lr/W to lr, or constant lr·warmup_factor as He 2015 §4.2 did for
    ResNet-110), then the decay. ``step`` decays at the milestone fractions of the whole run
    (He 2015: 32k and 48k of 64k iterations); ``cosine`` from lr to 0 over the steps after warm-up;
    ``inv_sqrt`` is the Transformer rule (Vaswani 2017) normalised to 1 at the end of warm-up:
    sqrt(max(W, 1) / (step + 1)). ``warmup_end`` replaces ``cfg.warmup_steps`` as W where the warm-up
    ended early (``warmup_until_error``): the schedule then runs as if the warm-up had been that long.
    """
    w = cfg.warmup_steps if warmup_end is None else warmup_end
    if step < w:
        return (step + 1) / w if cfg.warmup_kind == "linear" else cfg.warmup_factor
    if cfg.schedule == "constant":
        return 1.0
    if cfg.schedule == "step":
        passed = sum(step >= m * total_steps for m in cfg.milestones)
        return float(cfg.gamma**passed)
    if cfg.schedule == "cosine":
        span = max(total_steps - w, 1)
        return 0.5 * (1.0 + math.cos(math.pi * min(step - w, span) / span))
    return math.sqrt(max(w, 1) / (step + 1))  # inv_sqrt


# Named recipes. Each value is a dict of RunConfig fields; explicit CLI flags override them.
RECIPES: dict[str, dict[str, Any]] = {
    # He et al. 2015, "Deep Residual Learning for Image Recognition", §4.2 (CIFAR-10): SGD, momentum 0.9,
    # weight decay 1e-4, batch 128, lr 0.1 divided by 10 at 32k and 48k iterations, stop at 64k.
    "he2015_cifar": dict(optimizer="sgd", lr=0.1, momentum=0.9, weight_decay=1e-4, batch_size=128,
                         schedule="step", milestones=(0.5, 0.75), gamma=0.1, steps=64000),
    # Same, with §4.2's ResNet-110 warm-up: lr 0.01 (= 0.1 x 0.1) for about 400 iterations, then 0.1.
    "he2015_cifar_warmup": dict(optimizer="sgd", lr=0.1, momentum=0.9, weight_decay=1e-4, batch_size=128,
                                schedule="step", milestones=(0.5, 0.75), gamma=0.1, steps=64000,
                                warmup_steps=400, warmup_kind="constant", warmup_factor=0.1),
    # §4.2's rule itself: "we use 0.01 to warm up the training until the training error is below 80% (about 400
    # iterations), and then go back to 0.1": the warm-up ends at the first batch below 80% error, 400 steps at most.
    "he2015_cifar110": dict(optimizer="sgd", lr=0.1, momentum=0.9, weight_decay=1e-4, batch_size=128,
                            schedule="step", milestones=(0.5, 0.75), gamma=0.1, steps=64000,
                            warmup_steps=400, warmup_kind="constant", warmup_factor=0.1, warmup_until_error=0.8),
    # Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture", §4 / Appendix:
    # Adam with betas (0.9, 0.98), inverse-square-root decay after warm-up (Post-LN needs the warm-up).
    "xiong2020": dict(optimizer="adam", betas=(0.9, 0.98), weight_decay=0.0, schedule="inv_sqrt",
                      warmup_steps=4000, lr=5e-4),
    # He et al. 2015, §3.4 (ImageNet): SGD, momentum 0.9, weight decay 1e-4, lr 0.1 at batch 256, divided by 10 on
    # plateaus (here at 1/3 and 2/3 of the run, torchvision's reference every 30 of 90 epochs), scaled linearly to the
    # run's global batch with a linear warm-up over 5 epochs (Goyal et al. 2017, "Accurate, Large Minibatch SGD",
    # §2.1-2.2). The run length stays the user's. The default of the tasks of TASK_RECIPES: without it a ResNet-50 at
    # batch 64 got lr 0.1, four times He's rate for that batch, and diverged at its third step.
    "he2015_imagenet": dict(optimizer="sgd", lr_base=0.1, lr_base_size=256, lr_base_scale="linear", momentum=0.9,
                            weight_decay=1e-4, schedule="step", milestones=(1 / 3, 2 / 3), gamma=0.1,
                            warmup_epochs=5.0),
}  # fmt: skip
# The recipe a task's runs get where none is named: ImageNet-size images read from disk train as He 2015 did.
TASK_RECIPES: dict[str, str] = {"imagefolder": "he2015_imagenet"}
# Fields of which a recipe sets one and the user the other: the user's replaces the recipe's (lr for lr_base ...).
RECIPE_ALTERNATIVES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("lr",), ("lr_base", "lr_base_size", "lr_base_scale")),
    (("epochs", "budget_flops", "budget_samples"), ("steps",)),
    (("warmup_steps",), ("warmup_epochs",)),
)


def _literal(value: Any) -> str:
    """A model argument's value as ``--model-arg`` reads it back: a bare word for a plain string (``shortcut=B``),
    else its Python literal."""
    plain = isinstance(value, str) and value.isidentifier() and value not in ("True", "False", "None")
    return value if plain else repr(value)


def _model_args(args: Any) -> tuple[tuple[str, Any], ...]:
    """Model arguments as (key, value) pairs sorted by key, from a mapping or from pairs (lists after JSON)."""
    pairs = list(args.items()) if isinstance(args, Mapping) else [tuple(p) for p in args or ()]
    if any(len(p) != 2 or not isinstance(p[0], str) for p in pairs):
        raise ValueError(f"model_args takes KEY=VALUE pairs (a mapping or (key, value) pairs), got {args!r}")
    keys = [k for k, _ in pairs]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ValueError(f"model argument(s) {twice} given more than once")
    return tuple(sorted(((k, v) for k, v in pairs), key=lambda p: p[0]))


def build(fields: Mapping[str, Any]) -> RunConfig:
    """The RunConfig of ``fields``: a recipe's values first (the one named, else the task's, :data:`TASK_RECIPES`), then
    every field given (the one recipe merge of the command line, the Python API and study files; a field given in
    place of a recipe's alternative to it, ``epochs`` for ``steps``, ``lr`` for ``lr_base`` ..., replaces it:
    :data:`RECIPE_ALTERNATIVES`). ValueError names an unknown field or recipe."""
    fields = dict(fields)
    unknown = sorted(set(fields) - set(FIELD_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown run-config field(s) {unknown}; `python -m bench run --help` lists them")
    if fields.get("lr_base") is not None and "lr" in fields:  # here a given --lr is known even at its default
        raise ValueError(f"give --lr (the peak lr itself, {fields['lr']}) or --lr-base (scaled from a reference "
                         "batch), not both")
    if "recipe" not in fields and fields.get("task") in TASK_RECIPES:
        fields["recipe"] = TASK_RECIPES[fields["task"]]
    recipe = fields.get("recipe")
    base: dict[str, Any] = {}
    if recipe is not None:
        if recipe not in RECIPES:
            raise ValueError(f"unknown recipe {recipe!r}; choose one of: {', '.join(sorted(RECIPES))}")
        base = dict(RECIPES[recipe])
        for one, other in RECIPE_ALTERNATIVES:
            for given, replaced in ((one, other), (other, one)):
                if any(k in fields for k in given):
                    for k in replaced:
                        base.pop(k, None)
    return RunConfig(**{**base, **fields})


def config_from_dict(d: Mapping[str, Any]) -> RunConfig:
    """Rebuild a RunConfig from ``to_dict()`` output that went through JSON (recipe values are already in it); a
    field of :data:`LEGACY` it lacks (recorded before the field existed) takes the value those runs had."""
    unknown = sorted(set(d) - set(FIELD_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown run-config field(s) {unknown}")
    return RunConfig(**{**LEGACY, **d})
