"""One run: build task and model, measure (FLOPs, throughput, memory), train, evaluate, record.

Setup errors (unknown variant or task, invalid depth, missing dataset) raise before anything is
written; the CLI turns them into exit code 2. Everything after setup is recorded: a run that
diverges, runs out of memory or raises still produces a leaderboard row whose ``status`` and
``error`` say what happened.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

import variants
from bench.runs import budget, distributed, execution, measure, plugins, resume
from bench.runs.config import RunConfig, lr_factor
from bench.runs.progress import Progress
from bench.runs.scalars import learned_scalars
from bench.runs.tasks import Task, TaskError, TaskOptions
from bench.runs.tasks import get as get_task
from bench.runs.tasks.base import check_fits
from bench.runs.validate import name_problem

# Which model keywords a task must be able to set, by task kind: a variant that lacks them
# cannot fit the task's data (e.g. a Transformer on images).
REQUIRED_MODEL_KWARGS = {"image": ("num_classes",), "sequence": ("vocab_size",)}
TIMM_MODEL_KWARGS = ("num_classes", "in_chans")
DEFAULT_EPOCHS = 30.0  # run length when neither --epochs nor --steps is given and the task names none


class Diverged(RuntimeError):
    """The training loss became non-finite or exploded."""

    def __init__(self, step: int, message: str) -> None:
        super().__init__(message)
        self.step = step


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda asked for, but torch sees no CUDA device; use --device cpu or auto")
    if name == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ValueError("--device mps asked for, but MPS is not available; use --device cpu or auto")
    return torch.device(name)


def task_options(cfg: RunConfig, world: distributed.World | None = None) -> TaskOptions:
    """The task's options from the config; under torchrun, ``world`` tells a loader task which share to read."""
    return TaskOptions(
        data_dir=cfg.data_dir, data_path=cfg.data_path, seq_len=cfg.seq_len, image_size=cfg.image_size,
        num_classes=cfg.num_classes, random_labels=cfg.random_labels, augment=cfg.augment,
        train_size=cfg.train_size, val_size=cfg.val_size, contour_length=cfg.contour_length,
        distractors=cfg.distractors, channels=cfg.channels,
        workers=cfg.workers, prefetch=cfg.prefetch, subset_per_class=cfg.subset_per_class,
        skip_bad_images=cfg.skip_bad_images, vocab_size=cfg.vocab_size, eval_batches=cfg.eval_batches,
        eval_tokens=cfg.eval_tokens, train_tokens=cfg.train_tokens, rank=world.rank if world else 0,
        world_size=world.size if world else 1,
    )  # fmt: skip


def model_kwargs(cfg: RunConfig, task: Task) -> dict[str, Any]:
    """Keyword arguments for ``variants.create``: what the task dictates, the depth, the user's extras."""
    user = cfg.model_overrides()
    if cfg.variant.startswith(variants.registry.TIMM_PREFIX):
        accepted: set[str] = set(TIMM_MODEL_KWARGS)
        if task.kind != "image":
            raise ValueError(f"timm models take images; task {task.name!r} is a {task.kind} task")
    else:
        accepted = set(variants.describe(cfg.variant)["defaults"])
        missing = [k for k in REQUIRED_MODEL_KWARGS[task.kind] if k not in accepted]
        if missing:
            family = variants.describe(cfg.variant)["family"]
            raise ValueError(
                f"variant {cfg.variant!r} ({family}) cannot run {task.kind} task {task.name!r}: "
                f"it takes no {missing[0]}"
            )
    kw = {k: v for k, v in task.model_kwargs.items() if k in accepted}
    clash = {k for k in user if k in kw and user[k] != kw[k]}
    if clash:
        raise ValueError(f"--model-arg {sorted(clash)} conflicts with what task {task.name!r} sets: {kw}")
    if cfg.depth is not None:
        if "depth" in user:
            raise ValueError("give the depth once: --depth or --model-arg depth=..., not both")
        kw["depth"] = cfg.depth
    return {**kw, **user}


def resolved_kwargs(variant: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Every keyword argument the variant's builder gets: its defaults, the preset's pins, then ``overrides``."""
    return {**variants.describe(variant)["defaults"], **overrides}


def build_model(cfg: RunConfig, kw: Mapping[str, Any]) -> torch.nn.Module:
    """The run's model (on the CPU), its initial values drawn as ``cfg.init_stream`` says: ``crn``, each tensor from
    the stream of (seed, its name) (:mod:`variants.draws`), the global random state left as it was; ``global``,
    from torch's one stream right after ``torch.manual_seed(seed)``, as runs recorded before ``crn`` drew them."""
    torch.manual_seed(cfg.seed)  # where the global stream stands after the build under crn (it draws none of it)
    if cfg.init_stream == "crn":
        return variants.create(cfg.variant, seed=cfg.seed, **kw)
    return variants.create(cfg.variant, **kw)


@dataclass
class Setup:
    """Everything built before training; building it is where bad input is caught."""

    cfg: RunConfig
    device: torch.device
    task: Task
    model: torch.nn.Module
    model_kwargs: dict[str, Any]
    total_steps: int
    eval_every: int
    world: distributed.World | None = None  # this rank's place in a torchrun job (bench.runs.distributed), if any
    ddp: torch.nn.Module | None = None  # the model wrapped in DistributedDataParallel: what a training step runs
    warmup_steps: int = 0  # the learning-rate warm-up in steps (--warmup-epochs made steps on this task)
    step_flops: float | None = None  # training FLOPs of one optimiser step, where a FLOP budget counted them


def _world(cfg: RunConfig) -> distributed.World | None:
    """The torchrun job a run with ``world_size > 1`` trains in; bad input where there is none or it differs."""
    if cfg.world_size == 1:
        return None
    world = distributed.current()
    if world is None or world.size != cfg.world_size:
        raise ValueError(f"world_size {cfg.world_size} needs a torchrun job of that many processes "
                         f"(`torchrun --nproc-per-node {cfg.world_size} -m bench run ...`); this process is in "
                         f"{'none' if world is None else f'one of {world.size}'}")
    if cfg.batch_size % world.size:
        raise ValueError(f"--batch-size {cfg.batch_size} is the global batch: it must divide evenly over the "
                         f"{world.size} processes (each takes an equal shard)")
    return world


def _meta_footprint(cfg: RunConfig, task: Task, kw: Mapping[str, Any]) -> tuple[int, int]:
    """The parameters of ``cfg``'s model and the bytes of the op outputs of one forward of a batch
    (:func:`bench.runs.measure.meta_activation_bytes`), both on the meta device; 0 for what cannot be counted there
    (a plugin's model that needs real tensors to be built, or to run forward)."""
    try:
        with torch.device("meta"):
            model = variants.create(cfg.variant, **kw)
    except (RuntimeError, NotImplementedError):
        return 0, 0
    params = sum(p.numel() for p in model.parameters())
    check_model_fits(cfg, params, 0)  # before the forward: minutes for a model that large
    try:
        x, _ = next(task.train_batches(1, torch.Generator(device=budget.task_device(task)).manual_seed(0)))
        return params, measure.meta_activation_bytes(model, x.expand(cfg.batch_size, *x.shape[1:]))
    except Exception:  # any model whose forward cannot run on meta tensors is estimated without its activations
        return params, 0


def check_model_fits(cfg: RunConfig, params: int, acts: int) -> None:
    """TaskError, before any weight exists, when ``cfg``'s model of ``params`` parameters (4-byte weights, gradients
    and two optimiser states each) and ``acts`` bytes of one forward's activations, both counted on the meta device,
    needs more memory than this process may allocate (:func:`bench.runs.tasks.base.check_fits`)."""
    what = (f"{cfg.variant} with {params:,} parameters (4-byte weights, gradients and two optimiser states each)"
            + (f" and {acts / 2**20:,.1f} MiB of activations at --batch-size {cfg.batch_size}" if acts else ""))
    check_fits(16 * params + acts, what)


def setup(cfg: RunConfig) -> Setup:
    """Build task and model; raises ValueError (incl. TaskError) on bad input, before anything is written."""
    if not cfg.variant.startswith(variants.registry.TIMM_PREFIX):
        family = variants.describe(cfg.variant)["family"]  # unknown name -> ValueError naming close matches
        if family is not None and (why := name_problem(family)) is not None:  # a plugin's family names rows too
            raise ValueError(f"family {family!r} of variant {cfg.variant!r} {why}")
    world = _world(cfg)
    device = resolve_device(cfg.device)
    if world is not None:
        device = distributed.device_for(world, device)
    seed_everything(cfg.seed, cfg.deterministic)
    task = get_task(cfg.task, device=device, seed=cfg.seed, options=task_options(cfg, world))
    if (task.kind == "image" or task.loader_workers is not None) and cfg.global_batch > task.num_train:
        batch = f"--batch-size {cfg.batch_size}" if cfg.grad_accum == 1 else \
            f"the global batch {cfg.global_batch} (--batch-size {cfg.batch_size} x --grad-accum {cfg.grad_accum})"
        more = " (or a larger --train-size)" if task.name == "synthetic" else ""
        raise TaskError(f"{batch} exceeds the {task.num_train} training samples of task {task.name!r}; use a smaller "
                        f"batch{more}")
    kw = model_kwargs(cfg, task)
    if device.type == "cpu":  # before the weights exist: a model too large for the machine is bad input, not an OOM
        params, acts = _meta_footprint(cfg, task, kw)
        check_model_fits(cfg, params, acts)
    model = build_model(cfg, kw).to(device)  # after the count: the model drawn is the same with and without it
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    step_flops = budget.step_flops(cfg, task, kw) if cfg.budget_flops is not None else None
    if cfg.budget_flops is not None or cfg.budget_samples is not None:
        total = budget.budget_steps(cfg, step_flops)  # fewer for a costlier design; ValueError under one step
    elif cfg.steps is not None:
        total = cfg.steps
    elif cfg.epochs is None and task.default_steps is not None:
        total = task.default_steps
    else:
        epochs = cfg.epochs if cfg.epochs is not None else DEFAULT_EPOCHS
        total = max(1, math.ceil(epochs * task.num_train / cfg.global_batch))
    eval_every = cfg.eval_every or max(1, total // 10)
    warmup = cfg.warmup_steps if cfg.warmup_epochs is None else \
        max(1, math.ceil(cfg.warmup_epochs * task.num_train / cfg.global_batch))
    if warmup > total:
        print(f"warning: the warm-up of {warmup} steps is longer than the run's {total} steps: the learning rate "
              "never reaches its peak", file=sys.stderr, flush=True)
    ddp = None
    if world is not None:  # one wrapper for every step of the run: it broadcasts rank 0's weights as it wraps
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda"
                                                        else None)
    return Setup(cfg, device, task, model, kw, total, eval_every, world, ddp, warmup_steps=warmup,
                 step_flops=step_flops)


def seed_everything(seed: int, deterministic: bool) -> None:
    torch.manual_seed(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS needs it for determinism
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
    else:
        torch.use_deterministic_algorithms(False)


def make_optimizer(cfg: RunConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
    """The run's optimiser over the model's trainable parameters, fused on CUDA (:mod:`bench.runs.execution`)."""
    params = [p for p in model.parameters() if p.requires_grad]
    device = params[0].device if params else torch.device("cpu")
    if cfg.optimizer == "sgd":
        return execution.make_optimizer("sgd", params, device, lr=cfg.peak_lr, momentum=cfg.momentum,
                                        weight_decay=cfg.weight_decay)
    return execution.make_optimizer(cfg.optimizer, params, device, lr=cfg.peak_lr, betas=cfg.betas,
                                    weight_decay=cfg.weight_decay)


def autocast(cfg: RunConfig, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    if cfg.precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if cfg.precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def after_step_hook(model: torch.nn.Module) -> Callable[[], Any] | None:
    """The model's ``after_optimizer_step`` (see ``variants``' public API), or None: part of every training step,
    e.g. nGPT's renormalisation of its matrices (Loshchilov et al. 2024, §2.6)."""
    hook = getattr(model, "after_optimizer_step", None)
    return hook if callable(hook) else None


class StepRunner:
    """The training step, shared by the timing phase, the memory probe and the training loop.

    One step draws the global batch (``batch_size x grad_accum`` samples; this process's shard of it under
    torchrun) from the task with ``generator``, and sums the gradients of its ``grad_accum`` micro-batches before
    the optimiser steps (DistributedDataParallel synchronises only on the last one); its loss is the mean of the
    micro-batches' losses. The global batch is drawn whole, so a run with ``grad_accum`` K sees exactly the samples
    of one with K times its batch size. ``skip`` draws and drops that many global batches first: a resumed run's
    data stream stands where the interrupted run left it.

    With ``watch_warmup_error`` (the training loop only: it syncs to the host each warm-up step, which
    a timed phase must not) and ``cfg.warmup_until_error`` set, the warm-up ends after the first step
    whose training batch's error is below the threshold; ``warmup_end`` is then that step count.
    """

    def __init__(self, cfg: RunConfig, s: Setup, model: torch.nn.Module, generator: torch.Generator,
                 watch_warmup_error: bool = False, skip: int = 0) -> None:
        self.cfg, self.device, self.task = cfg, s.device, s.task
        self.model = model
        stepped = s.ddp if s.ddp is not None else model  # under torchrun the step's gradients are averaged
        self.forward = execution.compiled(stepped, cfg.compile_mode) if cfg.compile else stepped
        self.opt = make_optimizer(cfg, model)
        total = s.total_steps
        self.steps_done = 0
        self._warmup = [s.warmup_steps]  # steps of warm-up; an error threshold may end it earlier (warmup_end)
        self.watch_error = watch_warmup_error and cfg.warmup_until_error is not None
        # the schedule reads the warm-up's end from its own cell, not through the runner: a lambda holding the
        # runner made a reference cycle, so a finished runner (its model, optimiser state) lived on until the
        # cycle collector ran, and a CUDA memory phase after it counted a previous phase's optimiser state
        warmup = self._warmup
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda i: lr_factor(i, total, cfg, warmup[0]))
        self.scaler = torch.amp.GradScaler(s.device.type, enabled=cfg.precision == "fp16")
        world = s.world
        self.world, self.ddp = world, s.ddp
        batches = s.task.train_batches_from(cfg.global_batch, generator, skip)
        # under torchrun: every rank draws the same global batch and keeps its own shard of it (a loader task
        # reads only its own share in the first place)
        if world is not None and not s.task.per_rank_batches:
            batches = (distributed.shard(x, y, world) for x, y in batches)
        self.batches = batches
        self.channels_last = cfg.channels_last
        self.after_step = after_step_hook(model)

    @property
    def warmup_end(self) -> int:
        return self._warmup[0]

    @warmup_end.setter
    def warmup_end(self, steps: int) -> None:
        self._warmup[0] = steps

    def __call__(self) -> torch.Tensor:
        if self.cfg.compile:
            execution.mark_step()
        x, y = next(self.batches)
        if self.channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        k = self.cfg.grad_accum
        warming = self.watch_error and self.steps_done < self.warmup_end
        self.opt.zero_grad(set_to_none=True)
        total: torch.Tensor | float = 0.0
        correct: torch.Tensor | None = None
        for i, (xb, yb) in enumerate(zip(x.chunk(k), y.chunk(k), strict=True)):
            # gradients are all-reduced once, with the last micro-batch's backward
            sync = self.ddp.no_sync() if self.ddp is not None and i < k - 1 else contextlib.nullcontext()  # type: ignore[operator]
            with sync:
                with autocast(self.cfg, self.device):
                    logits = self.forward(xb)  # type: ignore[operator]
                    loss = self.task.loss(logits, yb)
                if warming:  # on the device: no sync yet
                    hits = self.task.correct(logits.detach(), yb)
                    correct = hits if correct is None else correct + hits
                del logits  # not held through backward: the memory phase's peak must stay that of a plain step
                self.scaler.scale(loss / k if k > 1 else loss).backward()
            total = total + loss.detach()
        if self.cfg.grad_clip is not None:
            self.scaler.unscale_(self.opt)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        self.scaler.step(self.opt)
        self.scaler.update()
        if self.after_step is not None:
            with torch.no_grad():
                self.after_step()
        if correct is not None:
            self._end_warmup_below_error(correct, y)
        self.steps_done += 1
        self.sched.step()  # after the check: the next step's lr already follows the post-warm-up schedule
        return total / k if k > 1 else total  # type: ignore[return-value]

    def _end_warmup_below_error(self, correct: torch.Tensor, y: torch.Tensor) -> None:
        """He 2015 §4.2: warm up "until the training error is below 80%", judged on this step's batch."""
        count = self.task.count(y)
        if self.world is not None:  # the global batch's error: the same decision on every rank
            correct, count = distributed.sum_across(correct), count * self.world.size
        error = 1.0 - float(correct) / max(count, 1)  # a host sync, in warm-up steps only
        if error < self.cfg.warmup_until_error:  # type: ignore[operator]
            self.warmup_end = self.steps_done + 1


def batch_generator(s: Setup, offset: int = 0) -> torch.Generator:
    return torch.Generator(device=s.device).manual_seed(s.cfg.seed + offset)


@dataclass
class Record:
    """What the run has measured so far; turned into the row and the run JSON, whatever happens."""

    measurements: dict[str, Any] = field(default_factory=dict)
    train_curve: list[dict[str, Any]] = field(default_factory=list)
    eval_curve: list[dict[str, Any]] = field(default_factory=list)
    probes: list[dict[str, Any]] = field(default_factory=list)
    residual_scalars: list[dict[str, Any]] = field(default_factory=list)  # at every evaluation (bench.runs.scalars)
    steps_done: int = 0
    train_time_s: float = 0.0
    steps_to_target: int | None = None
    time_to_target_s: float | None = None
    eval_time_s: float = 0.0  # time spent evaluating: apart from train_time_s, so from throughput and time to target
    warmup_ended_at: int | None = None  # steps of warm-up made (0: none); None if the run stopped inside it
    resumed_from_step: int | None = None  # the step this segment continued from (a rerun of an interrupted run)
    restarts: int = 0  # segments before this one
    wall_before_s: float = 0.0  # wall time of the segments before this one
    status: str = "ok"
    error: str = ""


def measure_phases(s: Setup, rec: Record) -> None:
    """FLOPs, throughput and memory, each on the model's own state, which is restored afterwards.

    A phase that fails (a CPU memory probe killed for memory, say) is recorded with its error and
    the run goes on to train: a missing measurement must not cost the convergence result.
    """
    cfg, model, device = s.cfg, s.model, s.device
    # On the host, so the CUDA memory phase does not count a second copy of the weights.
    snapshot = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()

    def flops() -> dict[str, Any]:
        x, y = next(s.task.train_batches(cfg.batch_size, batch_generator(s, 1)))  # one micro-batch

        def forward() -> torch.Tensor:
            with autocast(cfg, device):
                return s.task.loss(model(x), y)

        counted = measure.count_step_flops(forward, device)
        fwd, train_step = counted.forward, counted.train
        model.zero_grad(set_to_none=True)
        # per_step (forward + backward of every micro-batch) is what a training step computes: MFU divides it by the
        # step time. Under torchrun a loader task's batch is this rank's share: the step computes the whole batch.
        n, scale = len(x), cfg.batch_size / len(x)
        return {"per_step": train_step * scale * cfg.grad_accum, "train_per_sample": train_step / n,
                "fwd_per_step": fwd * scale * cfg.grad_accum, "fwd_per_sample": fwd / n,
                "train_per_sample_by_class": {c: f / n for c, f in counted.train_by_class.items()},
                "method": "torch.utils.flop_counter"}

    def throughput() -> dict[str, Any]:
        runner = StepRunner(cfg, s, model, batch_generator(s, 2))
        # a loader's workers fill their queues while idle: the warm-up drains those batches, so the timed steps wait
        # on the loader as a long run does
        workers = s.task.loader_workers or 0
        warmup = cfg.timing_warmup + cfg.prefetch * workers
        # W workers started together deliver their batches in bursts of W: a repeat spans whole rounds of them
        steps = -(-cfg.timing_steps // max(workers, 1)) * max(workers, 1)
        times = measure.time_steps(runner, device, warmup, cfg.timing_repeats, steps)
        med = measure.median(times)
        # the peak of the step's own mix of matmuls and convolutions (in fp32 on CUDA they can differ 7x)
        by_class = rec.measurements.get("flops", {}).get("train_per_sample_by_class")
        rec.measurements["peak_flops"], rec.measurements["peak_source"] = measure.peak_flops(
            device, cfg.precision, by_class)
        return {
            "step_times_ms": times, "median_step_ms": med, "samples_per_s": cfg.global_batch / (med / 1e3),
            "warmup_steps": warmup, "repeats": cfg.timing_repeats, "steps_per_repeat": steps,
            **(model_apart(cfg, runner, device, med) if s.task.loader_workers is not None else {}),
        }  # fmt: skip

    def memory() -> dict[str, Any]:
        if device.type == "cuda":
            runner = StepRunner(cfg, s, model, batch_generator(s, 3))
            return measure.cuda_peak_memory(runner, device)
        if device.type == "cpu" and s.world is not None:
            return {"peak_mb": None, "method": "not measured under torchrun on the CPU (the probe is one process)"}
        if device.type == "cpu":
            # the child loads the plugins loaded here, so a plugin's variant is measured as a shipped one is
            return measure.cpu_peak_memory_subprocess(cfg.to_dict(), [p.reload for p in plugins.loaded()])
        return {"peak_mb": None, "method": f"unsupported on {device.type}"}

    phases = {"flops": flops, "throughput": throughput, "memory": memory}
    try:
        for name in (p for p in phases if p in cfg.measure):
            try:
                rec.measurements[name] = phases[name]()
            except Exception as exc:  # recorded; training still runs
                rec.measurements[name] = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}
                model.zero_grad(set_to_none=True)
    finally:
        model.load_state_dict(snapshot)
        model.zero_grad(set_to_none=True)
        torch.set_rng_state(rng)


def model_apart(cfg: RunConfig, runner: StepRunner, device: torch.device, end_to_end_ms: float) -> dict[str, Any]:
    """A loader task's model step timed apart from its loader: the same step on ``timing_steps`` batches already on
    the device (taken from the loader, then cycled), beside the end-to-end median measured just before."""
    runner.batches = itertools.cycle([next(runner.batches) for _ in range(cfg.timing_steps)])
    times = measure.time_steps(runner, device, 1, cfg.timing_repeats, cfg.timing_steps)
    med = measure.median(times)
    return {"model_step_times_ms": times, "model_median_step_ms": med,
            "model_samples_per_s": cfg.global_batch / (med / 1e3),
            "input_bound_fraction": max(0.0, 1.0 - med / end_to_end_ms), "loader_workers": runner.task.loader_workers}


@torch.no_grad()
def eval_pass(
    model: torch.nn.Module,
    task: Task,
    batches: Iterable[Any],
    amp: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
) -> tuple[float, float]:
    """Count-weighted mean loss and accuracy of ``model`` over one pass of ``batches``, in eval mode (the model's
    mode is restored afterwards, also on an error); the forward runs inside ``amp()`` (autocast), the loss on
    fp32 logits. The sums stay on the device: one host sync at the end. (nan, nan) when there are no batches.
    Shared by training's evaluations and :mod:`bench.analysis.lesion`."""
    was_training = model.training
    model.eval()
    loss_sum: Any = 0.0
    correct: Any = 0
    count = 0
    try:
        for x, y in batches:
            with amp():
                logits = model(x)
            n = task.count(y)
            low = logits.dtype in (torch.float16, torch.bfloat16)
            loss_sum = loss_sum + task.loss(logits.float() if low else logits, y) * n
            correct = correct + task.correct(logits, y)
            count += n
    finally:
        model.train(was_training)
    if count == 0:
        return float("nan"), float("nan")
    return float(loss_sum) / count, float(correct) / count


def evaluate(s: Setup, model: torch.nn.Module, batches: Iterator[Any]) -> tuple[float, float]:
    """Mean loss and accuracy over one pass of ``batches`` under the run's precision (:func:`eval_pass`)."""
    return eval_pass(model, s.task, batches, lambda: autocast(s.cfg, s.device))


def train(s: Setup, rec: Record, progress: bool, probe: Callable[..., list[dict[str, Any]]] | None,
          checkpointer: resume.Checkpointer | None = None, state: dict[str, Any] | None = None) -> None:
    """Train ``s.model`` for the run's steps, recording into ``rec``: the loss of every step, an evaluation every
    ``eval_every`` steps, probes every ``probe_every``. With ``state`` (a checkpoint of this run,
    :mod:`bench.runs.resume`) it continues where that state was saved; with ``checkpointer`` it saves its state
    when the schedule or a preemption signal asks (the latter then raises :class:`~bench.runs.resume.Preempted`)."""
    cfg, model, device, task = s.cfg, s.model, s.device, s.task
    torch.manual_seed(cfg.seed + 4)  # dropout / drop-path stream, independent of what measuring consumed
    model.train()
    start = int(state["step"]) if state else 0
    runner = StepRunner(cfg, s, model, batch_generator(s), watch_warmup_error=True, skip=start)
    probe_batch = next(iter(task.train_eval_batches(cfg.batch_size))) if probe else None
    losses = torch.empty(s.total_steps, device=device)
    lrs: list[float] = []
    first_loss: float | None = None
    checked = 0  # losses[:checked] were already checked for divergence
    if state:
        _restore(state, runner, model, rec, losses)
        lrs, first_loss, checked = list(state["lrs"]), state["first_loss"], start
    check_every = max(1, min(s.eval_every, 25))
    bar = Progress(s.total_steps, cfg.run_id, enabled=progress)  # a bar on a terminal, else a line every 30 s
    try:
        with resume.preemption() as stop:
            for step in range(start, s.total_steps):
                if probe and step % cfg.probe_every == 0:  # type: ignore[operator]
                    t_sync = time.perf_counter()  # queued training kernels finish here: training, not probe time
                    measure.synchronize(device)
                    rec.train_time_s += time.perf_counter() - t_sync
                    rec.probes += probe(model, *probe_batch, task.loss, step)  # type: ignore[misc]
                t0 = time.perf_counter()
                lrs.append(float(runner.sched.get_last_lr()[0]))
                losses[step] = runner()
                done = step + 1
                rec.steps_done = done
                # by the step count (the same on every rank); by the clock or a signal: decided at the next check
                saving = checkpointer is not None and checkpointer.every_steps is not None and \
                    done % checkpointer.every_steps == 0
                stopping = False
                # One host sync per check, not per step: the loss values stay on the device until then.
                if saving or done - checked >= check_every or done % s.eval_every == 0 or done == s.total_steps:
                    if s.world is not None:  # the curve is the global batch's loss: the mean of the ranks' shards
                        losses[checked:done] = distributed.mean_across(losses[checked:done])
                    chunk = losses[checked:done]
                    measure.synchronize(device)
                    rec.train_time_s += time.perf_counter() - t0
                    if first_loss is None:
                        first_loss = float(losses[0])
                    try:
                        _check_divergence(chunk, checked, first_loss, cfg.diverge_factor)
                    except Diverged as exc:
                        rec.steps_done = exc.step  # the row and the curve end at the first bad step
                        raise
                    checked = done
                    bar.update(done, loss=f"{float(chunk[-1]):.3f}")
                    # Decided where every rank checks, so that every rank stops (and saves) at the same step.
                    stopping = distributed.any_across(stop.signal_name is not None, s.world)
                    due = checkpointer is not None and distributed.any_across(checkpointer.due(done), s.world)
                    saving = saving or stopping or due
                else:
                    rec.train_time_s += time.perf_counter() - t0
                if done % s.eval_every == 0 or done == s.total_steps:
                    _eval_point(s, rec, done)
                if saving and checkpointer is not None and done < s.total_steps:
                    state_now = _state(done, runner, model, rec, losses, lrs, first_loss)
                    if s.world is None or s.world.main:  # rank 0 writes; every rank holds the same state
                        checkpointer.save(done, state_now)
                if stopping and done < s.total_steps:
                    where = checkpointer.folder if checkpointer is not None else None
                    raise resume.Preempted(done, where, stop.signal_name or "a preemption signal on another rank")
            if probe and s.total_steps % cfg.probe_every == 0:  # type: ignore[operator]
                rec.probes += probe(model, *probe_batch, task.loss, s.total_steps)  # type: ignore[misc]
    finally:
        bar.close()
        n = rec.steps_done
        rec.warmup_ended_at = runner.warmup_end if runner.warmup_end <= n else None
        values = losses[:n].tolist()
        rec.train_curve = [
            {"step": i + 1, "loss": v if math.isfinite(v) else None, "lr": lrs[i]} for i, v in enumerate(values)
        ]


def _state(step: int, runner: StepRunner, model: torch.nn.Module, rec: Record, losses: torch.Tensor,
           lrs: list[float], first_loss: float | None) -> dict[str, Any]:
    """Everything the rest of the run depends on, at a step boundary (module docstring of bench.runs.resume)."""
    return {
        "model": model.state_dict(), "optimizer": runner.opt.state_dict(), "scheduler": runner.sched.state_dict(),
        "scaler": runner.scaler.state_dict(), "warmup_end": runner.warmup_end, "runner_steps": runner.steps_done,
        "losses": losses[:step].cpu(), "lrs": list(lrs), "first_loss": first_loss, "rng": resume.rng_state(),
        "record": {"eval_curve": rec.eval_curve, "probes": rec.probes, "residual_scalars": rec.residual_scalars,
                   "steps_to_target": rec.steps_to_target,
                   "time_to_target_s": rec.time_to_target_s, "train_time_s": rec.train_time_s,
                   "eval_time_s": rec.eval_time_s},
    }  # fmt: skip


def _restore(state: dict[str, Any], runner: StepRunner, model: torch.nn.Module, rec: Record,
             losses: torch.Tensor) -> None:
    """Put a saved training state back (after the runner has drawn the batches it skips)."""
    model.load_state_dict(state["model"])
    runner.warmup_end, runner.steps_done = int(state["warmup_end"]), int(state["runner_steps"])
    runner.opt.load_state_dict(state["optimizer"])
    runner.sched.load_state_dict(state["scheduler"])
    runner.scaler.load_state_dict(state["scaler"])
    saved = state["losses"]
    losses[: len(saved)] = saved.to(losses.device)
    for key, value in state["record"].items():
        setattr(rec, key, value)
    rec.steps_done = int(state["step"])
    resume.set_rng_state(state["rng"])


def _check_divergence(chunk: torch.Tensor, start: int, first: float, factor: float) -> None:
    """Raise :class:`Diverged` at the first non-finite loss, or the first above ``factor`` x the first loss."""
    bad = ~torch.isfinite(chunk)
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        raise Diverged(start + i + 1, f"loss became {float(chunk[i])} at step {start + i + 1}")
    limit = factor * first if math.isfinite(first) else math.inf
    over = chunk > limit
    if bool(over.any()):
        i = int(over.nonzero()[0])
        raise Diverged(
            start + i + 1, f"loss {float(chunk[i]):.4g} exceeded {factor:g} x first-step loss {first:.4g} "
            f"at step {start + i + 1}"
        )


def _eval_point(s: Setup, rec: Record, step: int) -> None:
    started = time.perf_counter()
    val, train_eval = s.task.val_batches(s.cfg.batch_size), s.task.train_eval_batches(s.cfg.batch_size)
    if s.cfg.eval_batches is not None:  # a fixed subset: the first batches of each (fixed) pass
        val, train_eval = itertools.islice(val, s.cfg.eval_batches), itertools.islice(train_eval, s.cfg.eval_batches)
    val_loss, val_acc = evaluate(s, s.model, val)
    tr_loss, tr_acc = evaluate(s, s.model, train_eval)
    rec.eval_time_s += time.perf_counter() - started  # evaluate() ends in a host sync: the device work is counted
    point = {
        "step": step, "epoch": step * s.cfg.global_batch / s.task.num_train if s.task.num_train else None,
        "train_time_s": rec.train_time_s, "train_loss": tr_loss, "train_acc": tr_acc,
        "val_loss": val_loss, "val_acc": val_acc, **s.task.extra_metrics(val_loss),
    }  # fmt: skip
    rec.eval_curve.append(point)
    rec.residual_scalars += learned_scalars(s.model, step)
    reached = (s.cfg.target is not None and val_acc >= s.cfg.target) or \
        (s.cfg.target_loss is not None and val_loss <= s.cfg.target_loss)
    if reached and rec.steps_to_target is None:
        rec.steps_to_target, rec.time_to_target_s = step, rec.train_time_s
