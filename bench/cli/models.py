"""Commands about models, not runs: ``list``, ``show-variant``, ``diff``, ``probe``, ``cost``, ``recipes``."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import shlex
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import nn

import variants
from bench.cli.parser import config_from_args
from bench.reports.markdown import render_cost, render_profile
from bench.runs import plugins
from bench.runs.config import RECIPES
from bench.runs.cost import cost_table, profile_pair, timing_notes
from bench.runs.probes import format_probe_table, probe, probe_table
from bench.runs.shapes import Shape, at_depth, build_args, check_builds, check_depth, check_designs, shape_of
from bench.runs.train import resolved_kwargs, setup
from bench.sweeps import structure
from bench.sweeps.fairness import diff_models, format_diff
from variants.formulas import readers
from variants.roles import drops_shortcut, is_gate, is_join


def cmd_list(ns: argparse.Namespace) -> int:
    names = variants.list_variants(ns.pattern)
    if not names:
        raise ValueError(f"no variant matches {ns.pattern!r}; try `python -m bench list` for all")
    if ns.catalogue:
        print(variants.catalogue(names), end="")
        return 0
    width = max(len(n) for n in names)
    for name in names:
        with plugins.blame(name):  # counted on the meta device, without allocating (gpt2_small, resnet1202)
            desc = variants.describe(name)
        owner = plugins.plugin_of(name)
        where = f"  plugin {owner.spec}" if owner is not None else ""
        print(f"{name:<{width}}  {desc['family']:<14} {desc['params']:>13,}{where}", flush=True)
    print(PARAMS_NOTE, file=sys.stderr)
    return 0


# Why a run's parameter count can differ from the list's: the stem and head follow the task.
PARAMS_NOTE = ("parameters as each variant's defaults build it (3-channel images and 10 classes for a CIFAR net, "
               "1,000 for an ImageNet one, 256 tokens for a Transformer); a run counts its own for its task's input "
               "channels, classes and vocabulary (the row's params): digits' 1-channel images give resnet20 "
               "269,434, not 269,722")


def cmd_show_variant(ns: argparse.Namespace) -> int:
    """The variant's paper, size and axes, then its residual stream from the outside in: the layer that composes
    its units, each unit's formula, the join of shortcut and branch — each with the file and line of its forward."""
    shape = shape_of(ns.shape) if ns.shape is not None else None
    with plugins.blame(ns.name):
        if shape is not None:
            check_designs(shape, [ns.name], role="name")  # as `bench diff --shape` checks its two
        desc = variants.describe(ns.name)
        parts = variants.formula(ns.name)
    formulas = any(parts.get(role) for role in ("layer", "unit", "combinator"))
    model, params = None, desc["params"]
    if formulas or shape is not None:  # its formula's modules, or its size at the shape
        with plugins.blame(ns.name), torch.device("meta"):  # shapes only: no memory, no random draws
            built = variants.create(ns.name, **(build_args(ns.name, shape) if shape is not None else {}))
        params = sum(p.numel() for p in built.parameters()) if shape is not None else params
        model = built if formulas else None
    size = f"{params:,} parameters" if params is not None else "size set by its library"
    print(f"{ns.name} ({desc['family']}, {size}): {desc['paper']}")
    print(built_at(ns.name, shape, ns.shape))
    if desc["axes"]:
        print("axes: " + ", ".join(f"{k} {v}" for k, v in sorted(desc["axes"].items())))
    # a cross-layer design: first, where it computes with the earlier values it reads (variants.links)
    for read in readers(model) if model is not None else ():
        print(f"reads earlier values in: {read['file']}:{read['line']} ({read['class'].rsplit('.', 1)[-1]}."
              f"{read['method']}{', inherited from ' + read['owner'] if read['owner'] else ''})")
    outer = next((parts[role][0] for role in ("layer", "unit") if parts.get(role)), None)
    if outer is not None:  # the class that computes the residual stream, outermost first: where a reader starts
        print(f"computed in: {outer['file']}:{outer['line']} ({outer['class'].rsplit('.', 1)[-1]}"
              f"{'.forward' if not outer['forward'] else ', its forward inherited from ' + outer['forward']})")
    for role in variants.FORMULA_ROLES:
        for part in parts.get(role) or ():
            inherited = f"; forward inherited from {part['forward']}" if part["forward"] else ""
            print(f"{role}: {part['class']}  ({part['file']}:{part['line']}{inherited})\n    {part['formula']}")
    if model is None:
        print("no residual unit: this model's formula is its own forward (a timm model, or a net without joins)")
        return 0
    with plugins.blame(ns.name), torch.device("meta"):
        units = structure.describe(model).units
    print("\n".join(shortcut_lines(model)))
    if units:  # two variants of one formula can differ here (SkipInit's branch opens with a ReLU, ReZero's not)
        print(f"ops of the first unit, {units[0].name}, in the order its forward runs them "
              f"(bench.sweeps.structure):\n    {structure.inline(units[0])}")
    return 0


def _shortcut_kind(module: nn.Module) -> str:
    """A shortcut as a reader names it: ``identity``, or its class with its parts (``MixShortcut(PadShortcut,
    Conv2d 1x1)``), a learned scalar's name included."""
    if isinstance(module, nn.Identity):
        return "identity"
    kind = structure.op_kind(module)
    parts = [("identity" if isinstance(c, nn.Identity) else structure.op_kind(c)) for c in module.children()]
    scalars = [f"{n}[]" for n, p in module.named_parameters(recurse=False) if p.dim() == 0]
    inner = ", ".join(parts + scalars)
    return f"{kind}({inner})" if inner else kind


def shortcut_lines(model: nn.Module) -> list[str]:
    """What a design's shortcuts and gates are, unit by unit: every module holding a ``shortcut`` beside its
    join, grouped by what its shortcut is and by the input it reads (a pre-activation unit's shortcut reads
    ``ReLU(BN(x))`` where it shares the unit's pre-activation: the first unit and where the shape changes);
    every module declaring ``residual_role = "gate"``, by class."""
    shortcuts: Counter[str] = Counter()
    gates: Counter[str] = Counter()
    for module in model.modules():
        sc = getattr(module, "shortcut", None)
        joins = [c for c in module.children() if is_join(c)]
        if isinstance(sc, nn.Module) and joins:
            shares = getattr(module, "shares_preact", None)
            reads = "" if shares is None else (", reading ReLU(BN(x))" if shares else ", reading x")
            dropped = any(drops_shortcut(j) for j in joins)
            shortcuts["none (the join drops it: y = F(x))" if dropped else _shortcut_kind(sc) + reads] += 1
        if is_gate(module):
            gates[type(module).__name__] += 1

    def listed(what: str, counts: Counter[str], none: str) -> str:
        if not counts:
            return f"{what}: {none}"
        return f"{what}:" + "".join(f"\n    {kind}: {n} unit{'s' if n > 1 else ''}" for kind, n in counts.items())

    n_joins = sum(is_join(m) for m in model.modules())
    bare = f"the stream itself at each of {n_joins} joins (no shortcut module)" if n_joins else "none (no join)"
    return [listed("shortcut (what each join receives as x)", shortcuts, bare),
            listed("gate", gates, 'none (no module declares residual_role = "gate")')]


def cmd_probe(ns: argparse.Namespace) -> int:
    cfg = config_from_args(ns)
    with plugins.blame(cfg.variant):
        s = setup(dataclasses.replace(cfg, steps=1, measure=()))
    plugins.check_forward(cfg.variant, s.model, s.task)
    x, y = next(iter(s.task.train_eval_batches(cfg.batch_size)))
    s.model.train()
    df = probe_table(probe(s.model, x, y, s.task.loss, 0))
    print(f"{cfg.variant} on {cfg.task} at initialisation (seed {cfg.seed}, batch {len(x)}):")
    print(format_probe_table(df))
    if ns.csv:
        df.to_csv(ns.csv, index=False)
        print(f"tidy table written to {ns.csv}")
    return 0


def cmd_diff(ns: argparse.Namespace) -> int:
    model_args = dict(ns.model_arg or [])
    shape = shape_of(ns.shape) if ns.shape is not None else None
    if ns.depth is not None:
        check_depth(ns.depth)  # as `bench cost --depth` checks it
    if shape is not None:
        shape = at_depth(shape, ns.depth)
    with plugins.blame(ns.a, ns.b):
        for role, name in (("a", ns.a), ("b", ns.b)):  # the roles as diff's arguments name them
            if shape is not None:
                check_designs(shape, [name], role=role)
            else:
                _check_builds(role, name, ns.depth, model_args)
        rows = diff_models(ns.a, ns.b, ns.depth, model_args, seed=ns.seed, param_tolerance=ns.param_tolerance,
                           shape=shape)
    print(f"{ns.a} vs {ns.b}" + (f", depth {ns.depth}" if ns.depth is not None else "")
          + "".join(f", {k}={v!r}" for k, v in model_args.items()) + f", seed {ns.seed} (built on the CPU):")
    print(built_at(ns.a, shape, ns.shape))
    print(format_diff(ns.a, ns.b, rows, show_all=ns.all))
    return 0


def _check_builds(role: str, name: str, depth: int | None, model_args: dict[str, Any]) -> None:
    """ValueError naming the field where ``name`` (diff's argument ``role``) is not registered, does not build at
    ``depth`` where it builds at its own (``depth``, as `bench cost` says it) or does not build with the model
    arguments (:func:`bench.runs.shapes.check_builds`, on the meta device)."""
    at_depth_args = {**({"depth": depth} if depth is not None else {}), **model_args}
    check_builds(name, role, functools.partial(variants.create, name, **at_depth_args),
                 f"with model arguments {model_args}", depth,
                 functools.partial(variants.create, name, **model_args) if depth is not None else None)


def built_at(name: str, shape: Shape | None, shape_arg: str | None) -> str:
    """What `diff` and `show-variant` build at: ``shape`` (``--shape shape_arg``, its depth perhaps replaced), else
    each variant's defaults, ``name``'s input arguments said."""
    if shape is not None:
        return (f"built at: shape {shape.name}, one input {'x'.join(map(str, shape.sample))}, model arguments "
                f"{shape.model_args} (as `bench cost --shape {shape_arg}` builds it)")
    return (f"built at: each variant's defaults ({_default_input(name)}; "
            f"--shape NAME builds at a `bench cost` shape, e.g. digits' one channel)")


def _default_input(name: str) -> str:
    """What a variant's defaults build for: its input channels and classes (or vocabulary), where its builder takes
    them."""
    kwargs = resolved_kwargs(name, {})
    said = [f"{k}={kwargs[k]}" for k in ("in_chans", "num_classes", "vocab_size") if k in kwargs]
    return ", ".join(said) or "no input arguments"


def cmd_recipes(ns: argparse.Namespace) -> int:
    for name, values in sorted(RECIPES.items()):
        print(f"{name}: " + ", ".join(f"{k}={v}" for k, v in values.items()))
    return 0


def cmd_cost(ns: argparse.Namespace) -> int:
    command = "python -m bench " + " ".join(shlex.quote(a) for a in sys.argv[1:])

    def write(text: str, note: str = "") -> None:
        if ns.out:
            made = f"Made by `{command}`{note}.\n\n" if ns.format == "markdown" else ""
            Path(ns.out).parent.mkdir(parents=True, exist_ok=True)
            Path(ns.out).write_text(made + text, encoding="utf-8")

    if ns.profile:
        profiles = []
        for design in ns.designs:
            print(f"  profiling {design} and its baseline at {ns.shape} ...", file=sys.stderr, flush=True)
            profiles.append(profile_pair(design, ns.shape, batch=ns.batch, steps=ns.repeats, device=ns.device,
                                         precision=ns.precision, baseline=ns.baseline, depth=ns.depth))
        text = (str(pd.concat([p.assign(design=p.attrs["design"]) for p in profiles]).to_csv(index=False))
                if ns.format == "csv" else "\n".join(render_profile(p, ns.top) for p in profiles))
    else:
        table = cost_table(ns.designs, ns.shape, measure_time=ns.measure_time, compiled=ns.compile,
                           compile_mode=ns.compile_mode, batch=ns.batch,
                           repeats=ns.repeats, device=ns.device, precision=ns.precision, progress=True,
                           baseline=ns.baseline, depth=ns.depth,
                           partial=lambda t: write(render_cost(t, ns.format),
                                                   " (unfinished: the designs timed so far)"))
        text = render_cost(table, ns.format)
        notes = timing_notes(table)
        if ns.format == "markdown" and notes:
            text += "\n" + "\n\n".join(notes) + "\n"
        else:
            for line in notes:
                print(line, file=sys.stderr)
    print(text, end="")
    write(text)
    return 0
