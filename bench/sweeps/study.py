"""Studies: a TOML file naming a grid of runs, validated as a whole when it is loaded.

A study is data, not code (``docs/study-files.md`` lists every key)::

    name = "degradation"
    description = "..."
    [base]            # RunConfig fields shared by every run
    task = "digits"
    [grid]            # the cartesian product of these lists
    variant = ["plain", "resnet"]
    depth = [20, 56]
    seed = [0, 1, 2]
    [presets.quick]   # overrides of base (and grid lists, or new ones) for a named preset
    epochs = 5
    vary = ["combinator"]       # the axes the variants of the grid may differ in (bench.sweeps.fairness)
    param_tolerance = 0.01      # and by how much (relative) their parameter counts may differ
    [[claims]]        # what the paper says, checked by `bench report` (bench.analysis.claims)

Before the first run every model of the grid is built on the meta device, and a grid whose
variants differ in more than ``vary`` says is refused (:func:`bench.sweeps.fairness.check_grid`).
:meth:`Study.with_variants` (``--add-variant NAME``) appends the user's own variants to a study's grid;
the same guard then applies to them.

A study file may also name the ``plugins`` its variants come from (paths relative to the file, or module
names): every command that reads the study loads them. Its claims and analysis are validated when the file is
loaded, before any run: a malformed claim is refused then, not after the compute is spent.

The sweep's driver, which runs the grid on an executor, is :mod:`bench.sweeps.driver`.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import variants
from bench.analysis.claims import AXES, TABLES, Claim, parse_claims
from bench.analysis.options import check_options
from bench.analysis.studyfile import find_study, plugin_spec, read_study_file
from bench.runs import plugins, shapes
from bench.runs.config import FIELD_DEFAULTS, SEQUENCE_FIELDS, RunConfig, build
from bench.runs.constraints import CONSTRAINTS, errors
from bench.runs.names import RULE, problem
from bench.runs.results import COLUMNS
from bench.runs.tasks import TaskError
from bench.runs.tasks import get as get_task
from bench.runs.train import build_model, model_kwargs, task_options
from bench.sweeps.budgets import budget_steps
from bench.sweeps.fairness import DEFAULT_PARAM_TOLERANCE, check_grid

# The analyses of a study that trains nothing, each with the option that lists its models.
UNTRAINED = {"gradcorr": "variants", "cost": "designs"}
KEYS = ("name", "description", "claim", "base", "grid", "presets", "vary", "param_tolerance", "claims", "analysis",
        "plugins", "zip")  # fmt: skip



def set_axes(fields: dict[str, Any]) -> dict[str, list[Any]]:
    """Pop from ``fields`` (``--set KEY=VALUE``) the lists of a field that takes one value (``seed=[3, 4]``, not
    ``betas=[0.9, 0.95]``): each becomes that grid axis, replacing the study's, so that a second machine sweeps the
    same study file with other seeds and its folder merges with the first. ValueError naming the field for an empty
    list or one with repeats; each value is then checked as the field's (an integer seed in range)."""
    listed = [k for k, v in fields.items() if isinstance(v, list) and k not in SEQUENCE_FIELDS]
    axes = {k: fields.pop(k) for k in listed}
    for key, values in axes.items():
        repeats = sorted({repr(v) for v in values if values.count(v) > 1})
        if not values or repeats:
            raise ValueError(f"--set {key}: a list of distinct values, e.g. {key}=[3,4], got {values!r}"
                             + (f" ({', '.join(repeats)} repeated)" if repeats else ""))
    return axes

@dataclass(frozen=True)
class Study:
    name: str
    description: str
    base: dict[str, Any]
    grid: dict[str, list[Any]]
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)
    vary: tuple[str, ...] = ()
    param_tolerance: float = DEFAULT_PARAM_TOLERANCE
    together: tuple[str, ...] = ()  # the `zip` key: grid keys whose lists step together instead of being crossed
    claims: list[Claim] = field(default_factory=list)  # validated when the file was loaded
    added: tuple[str, ...] = ()  # variants appended to the grid by the user (--add-variant), not by the file
    analysis: dict[str, Any] = field(default_factory=dict)  # what runs after the grid (bench.analysis), if anything
    plugins: tuple[str, ...] = ()  # the plugin specs its variants need, file paths resolved against the study file
    path: Path | None = None  # the file it was loaded from

    def analysis_options(self, preset: str | None = None) -> dict[str, Any]:
        """The study's ``[analysis]`` table with the preset's ``analysis`` overrides applied ({} if none)."""
        over = self.presets.get(preset, {}).get("analysis", {}) if preset else {}
        return {**self.analysis, **over} if self.analysis else {}

    def with_variants(self, names: Sequence[str]) -> Study:
        """This study with ``names`` appended to its grid's ``variant`` list (and to every preset's own list).

        The study's ``vary`` and ``param_tolerance`` still apply to the grid it then makes (see :meth:`configs`).
        """
        if not names:
            return self
        for name in names:
            try:
                variants.describe(name)
            except ValueError as exc:
                raise ValueError(f"cannot add variant {name!r} to study {self.name!r}: {exc}; a variant of your "
                                 "own is registered by its plugin: add --plugin FILE.py (or set RESBENCH_PLUGINS)"
                                 ) from None
        twice = sorted({n for n in names if list(names).count(n) > 1})
        if twice:
            raise ValueError(f"variant(s) {twice} added to study {self.name!r} more than once")

        def extend(current: Any, where: str) -> list[Any]:
            listed = list(current) if isinstance(current, list) else [current]
            present = [n for n in names if n in listed]
            if present:
                raise ValueError(f"study {self.name!r} already runs variant(s) {present} ({where}); "
                                 "add only variants it does not have")
            return [*listed, *names]

        if not self.grid and self.analysis.get("kind") in UNTRAINED:  # a study that trains nothing: no grid
            key = UNTRAINED[self.analysis["kind"]]
            listed = list(self.analysis.get(key, []))
            if present := [n for n in names if n in listed]:
                raise ValueError(f"study {self.name!r} already measures variant(s) {present}; add only variants it "
                                 "does not have")
            analysis = {**self.analysis, key: [*listed, *names]}
            return dataclasses.replace(self, analysis=analysis, added=(*self.added, *names))
        base, grid = dict(self.base), dict(self.grid)
        if "variant" in grid:
            grid["variant"] = extend(grid["variant"], "in its grid")
        elif "variant" in base:
            grid["variant"] = extend(base.pop("variant"), "in its base")
        else:
            grid["variant"] = list(names)
        presets = {p: {**o, "variant": extend(o["variant"], f"in preset {p!r}")} if "variant" in o else o
                   for p, o in self.presets.items()}
        return dataclasses.replace(self, base=base, grid=grid, presets=presets, added=(*self.added, *names))

    def configs(self, preset: str | None = None, fields: dict[str, Any] | None = None) -> list[RunConfig]:
        """Every run of the grid (under ``preset``), validated before any of them starts. ``fields`` set run-config
        fields of every run over the study's own (``--set data_path=/data/imagenet``: where this machine keeps
        the dataset the study names)."""
        if preset is not None and preset not in self.presets:
            avail = ", ".join(sorted(self.presets)) or "none"
            raise ValueError(f"study {self.name!r} has no preset {preset!r}; presets: {avail}")
        over = dict(self.presets.get(preset, {})) if preset else {}
        over.pop("analysis", None)  # the analysis's own options (analysis_options), not run fields
        if not self.grid and self.analysis:
            self._check_models(preset)
            return []  # an analysis of models at initialisation: no training runs
        grid = {k: over.pop(k) if k in over else v for k, v in self.grid.items()}
        # a preset's list for a field the grid does not vary is a grid axis of that preset (a list-valued field,
        # betas or milestones, stays one value): the study's other presets keep their runs and run ids
        for k in [k for k, v in over.items() if isinstance(v, list) and k not in grid and k not in SEQUENCE_FIELDS]:
            grid[k] = over.pop(k)
        bad = [k for k, v in grid.items() if not isinstance(v, list) or not v]
        if bad:
            raise ValueError(f"study {self.name!r}: grid entries must be non-empty lists (also in presets): {bad}")
        fields = dict(fields or {})
        grid.update(set_axes(fields))  # `--set seed=[3,4]`: the grid's seeds replaced (a colleague's other seeds)
        base = {**self.base, **over, **fields}
        if "variant" not in grid and "variant" not in base:
            where = ("" if self.grid else "has no [grid] and ") + "names no variant" + \
                (f" in preset {preset!r}" if preset else "")
            raise ValueError(f"study {self.name!r} {where}: a study trains the runs of its grid, e.g. [grid] variant "
                             '= ["plain", "resnet"], depth = [20, 56], seed = [0, 1, 2]')
        grid = {k: v for k, v in grid.items() if k not in fields}
        out = []
        keys, steps = self._steps_together(grid)
        for values in itertools.product(*(grid[k] for k in keys), steps):
            kw = {**base, **dict(zip(keys, values, strict=False)), **values[-1], "study": self.name, "preset": preset}
            try:
                out.append(build(kw))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"study {self.name!r}{f' (preset {preset})' if preset else ''}: {exc}") from None
        _check_variants(out)
        self._check_fair(out)
        budget_steps(out, self.name)  # a budget under one step of some design: refused before any run
        return out

    def _steps_together(self, grid: dict[str, list[Any]]) -> tuple[list[str], list[dict[str, Any]]]:
        """The grid's keys to cross, and the rows of its ``zip`` keys, which step together (the i-th value of each:
        a ladder's sizes, each with its own budget) instead of being crossed; ValueError where they differ in
        length or one is not a grid list."""
        together = [k for k in self.together if k in grid]
        if not together:
            return list(grid), [{}]
        if len(together) != len(self.together) or len({len(grid[k]) for k in together}) != 1:
            lengths = {k: len(grid[k]) if k in grid else "not in the grid" for k in self.together}
            raise ValueError(f"study {self.name!r}: `zip` steps its grid lists together, so each must be a grid list "
                             f"of one length; got {lengths}")
        return [k for k in grid if k not in together], [dict(zip(together, row, strict=True))
                                                        for row in zip(*(grid[k] for k in together), strict=True)]

    def _check_models(self, preset: str | None) -> None:
        """The models a study without runs measures pass the checks of a grid's: ``gradcorr``'s variants x depths
        valid names and depths, with no difference beyond ``vary`` (:func:`bench.sweeps.fairness.check_grid`);
        ``cost``'s designs that build at its shape, in modes it knows (what differs between a design and
        its baseline is what a cost measures)."""
        opts = check_options(self.analysis_options(preset))
        if opts["kind"] not in UNTRAINED:
            raise ValueError(f"study {self.name!r}: a {opts['kind']} analysis needs trained runs: give it a [grid]")
        if opts["kind"] == "cost":
            try:
                shapes.check_designs(shapes.shape_of(opts["shape"]), opts["designs"], opts["modes"])
            except ValueError as exc:
                raise ValueError(f"study {self.name!r}: [analysis]: {exc}") from None
            return
        models = [RunConfig(variant=v, depth=d, task=opts["task"], study=self.name, preset=preset)
                  for v in opts["variants"] for d in opts["depths"]]  # fmt: skip
        _check_variants(models)
        self._check_fair(models)

    def _check_fair(self, configs: list[RunConfig]) -> None:
        """:func:`bench.sweeps.fairness.check_grid` on ``configs``; when it fails because of the variants the user added
        (the study passes without them), the error says so and how to proceed."""
        # fields zipped with the variant: each variant runs its own values of them (bench.sweeps.fairness)
        zipped = [k for k in self.together if k != "variant"] if "variant" in self.together else []
        try:
            check_grid(configs, self.vary, self.param_tolerance, self.name, zipped)
        except ValueError as exc:
            if not self.added:
                raise
            # Is the study fine without the user's variants? Then theirs is what differs in an undeclared way.
            check_grid([c for c in configs if c.variant not in self.added], self.vary, self.param_tolerance, self.name,
                       zipped)
            raise ValueError(
                f"{exc}. The variant(s) you added ({', '.join(self.added)}) must differ from the study's own only "
                f"in what it varies ({', '.join(self.vary) or 'nothing'}): build it from the same kind of units "
                "and defaults, since its axes are read from the model it builds (`python -m bench diff A B "
                "--plugin FILE.py` shows every difference), or compare along another axis in a copy of the study file "
                "with it added to `vary` "
                "(`python -m bench sweep COPY.toml --add-variant ...`)"
            ) from None


def _check_variants(configs: list[RunConfig]) -> None:
    """Unknown names, invalid depths and bad model arguments fail before the first run starts.

    Each distinct model is built on the meta device (no memory, no data): the builders check
    depth rules and arguments there exactly as they will in the run. A variant a plugin registered
    is also built on the CPU and run forward on a batch of its task (:func:`bench.runs.plugins.check_forward`).
    """
    seen: set[tuple[Any, ...]] = set()
    for cfg in configs:
        key = (cfg.variant, cfg.depth, cfg.model_args)
        if cfg.variant.startswith("timm:") or key in seen:
            continue
        seen.add(key)
        kw = {**({"depth": cfg.depth} if cfg.depth is not None else {}), **cfg.model_overrides()}
        with plugins.blame(cfg.variant), torch.device("meta"):
            variants.create(cfg.variant, **kw)
    _check_plugin_forwards([c for c in configs if plugins.plugin_of(c.variant) is not None])


def _check_plugin_forwards(configs: list[RunConfig]) -> None:
    """One CPU forward per distinct (plugin variant, model arguments, task) on a real batch of the task.

    A task that cannot be built here (a dataset not downloaded) is skipped: its runs are refused one by one
    (with the same check in :func:`bench.runs.runner.execute`) while the sweep goes on.
    """
    tasks: dict[tuple[Any, ...], Any] = {}
    seen: set[tuple[Any, ...]] = set()
    with torch.random.fork_rng(devices=[]):
        for cfg in configs:
            task_key = (cfg.task, task_options(cfg))
            key = (cfg.variant, cfg.depth, cfg.model_args, task_key)
            if key in seen:
                continue
            seen.add(key)
            if task_key not in tasks:
                try:
                    tasks[task_key] = get_task(cfg.task, device="cpu", seed=cfg.seed, options=task_options(cfg))
                except TaskError:
                    tasks[task_key] = None
            task = tasks[task_key]
            if task is None:
                continue
            with plugins.blame(cfg.variant):
                model = build_model(cfg, model_kwargs(cfg, task))
            plugins.check_forward(cfg.variant, model, task)


def load_study(ref: str | Path, results_dir: str | Path | None = None) -> Study:
    """The study ``ref`` names (a file, or a shipped study's name: :func:`bench.analysis.studyfile.find_study`),
    every key validated; bad input raises ValueError naming the file and the key."""
    path = find_study(ref, results_dir)
    data = read_study_file(path)
    unknown = set(data) - set(KEYS)
    if unknown:
        raise ValueError(f"study file {path}: unknown top-level key(s) {sorted(unknown)}; keys: {', '.join(KEYS)}")
    for key, kind, example in (("name", str, 'name = "my_study"'), ("description", str, 'description = "..."'),
                               ("claim", str, 'claim = "..."'), ("base", dict, "[base]"), ("grid", dict, "[grid]")):
        if key in data and not isinstance(data[key], kind):
            raise ValueError(f"study file {path}: `{key}` must be a {'table' if kind is dict else 'string'} "
                             f"({example}), got {data[key]!r}")
    name = data.get("name", path.stem)
    if (why := problem(name)) is not None:
        raise ValueError(f"study file {path}: its name {name!r} names its stored copy and report files, but it "
                         f"{why}: give it name = \"...\" ({RULE})")
    grid = data.get("grid", {})
    bad = [k for k, v in grid.items() if not isinstance(v, list) or not v]
    if bad:
        raise ValueError(f"study file {path}: grid entries must be non-empty lists: {bad}")
    vary = data.get("vary", [])
    if not isinstance(vary, list) or not all(isinstance(v, str) for v in vary):
        raise ValueError(f"study file {path}: `vary` must be a list of axis names, e.g. vary = [\"placement\"]")
    together = data.get("zip", [])
    if not isinstance(together, list) or len(together) == 1 or not all(isinstance(v, str) for v in together):
        raise ValueError(f"study file {path}: `zip` must list two or more grid keys whose lists step together, e.g. "
                         'zip = ["model_args", "budget_flops"]')
    tol = data.get("param_tolerance", DEFAULT_PARAM_TOLERANCE)
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 <= tol < 1:
        raise ValueError(f"study file {path}: `param_tolerance` must be a fraction in [0, 1), got {tol!r}")
    presets = data.get("presets", {})
    if not isinstance(presets, dict) or not all(isinstance(o, dict) for o in presets.values()):
        raise ValueError(f"study file {path}: `presets` must be tables, e.g. [presets.quick]")
    analysis = data.get("analysis", {})
    if not isinstance(analysis, dict) or (analysis and "kind" not in analysis):
        raise ValueError(f"study file {path}: `analysis` must be a table with a kind, e.g. [analysis] "
                         'kind = "lesion"')
    for preset in [None, *presets] if analysis else []:
        over = presets.get(preset, {}).get("analysis", {}) if preset else {}
        try:
            check_options({**analysis, **over})
        except ValueError as exc:
            raise ValueError(f"study file {path}: [analysis]{f' (preset {preset})' if preset else ''}: {exc}") \
                from None
    specs = data.get("plugins", [])
    if not isinstance(specs, list) or not all(isinstance(s, str) and s.strip() for s in specs):
        raise ValueError(f"study file {path}: `plugins` must be a list of plugin files or modules, e.g. "
                         'plugins = ["my_norm.py"]')
    _check_field_values(data, path)
    claims = parse_claims(data.get("claims", []), f"study file {path}")  # malformed claims: refused now
    _check_claim_fields(claims, data, path)
    _check_claim_values(claims, data, path)
    return Study(
        name=name, description=data.get("description", ""), base=data.get("base", {}),
        grid=grid, presets=presets, vary=tuple(vary), param_tolerance=float(tol), together=tuple(together),
        claims=claims,
        analysis=analysis, plugins=tuple(plugin_spec(s, path) for s in specs), path=path,
    )  # fmt: skip


def _check_field_values(data: dict[str, Any], path: Path) -> None:
    """ValueError naming the table, the field and what it accepts where a value in ``[base]``, ``[grid]`` or any
    preset is outside its field's constraint (:data:`bench.runs.constraints.CONSTRAINTS`): the whole file is checked
    when it is loaded, so a preset nobody chose yet is not a mistake waiting for the day it is."""
    name = data.get("name", path.stem)
    tables = [("base", data.get("base", {})), ("grid", data.get("grid", {})),
              *((f"presets.{p}", o) for p, o in data.get("presets", {}).items())]
    for where, table in tables:
        for key, value in table.items():
            c = CONSTRAINTS.get(key)
            if c is None or c.kind == "pairs":
                continue
            # a list is an axis of values, except a sequence field's single value (betas = [0.9, 0.99])
            one = not isinstance(value, list) or (c.items and not any(isinstance(v, list) for v in value))
            for v in [value] if one else value:
                wrong = errors(CONSTRAINTS, {key: tuple(v) if isinstance(v, list) else v})
                if wrong:
                    raise ValueError(f"study {name!r}: {wrong[0]} (in [{where}] of {path})")


def _check_claim_fields(claims: Sequence[Claim], data: dict[str, Any], path: Path) -> None:
    """Every field a leaderboard claim filters, groups or compares by is one runs record: a leaderboard column, a
    run-config field, a variant axis, or a model argument of one of the study's variants (claims about an analysis
    table filter on its own columns). A misspelt field would otherwise make the claim inconclusive at report
    time, after the compute is spent."""
    grids = [data.get("grid", {}), *(o for o in data.get("presets", {}).values())]
    names = {str(v) for g in grids for v in (g.get("variant") if isinstance(g.get("variant"), list) else [])}
    names |= {str(data.get("base", {}).get("variant"))} - {"None"}
    known = {*COLUMNS, *FIELD_DEFAULTS, *AXES, "train_error", "val_error"}
    for name in names:
        try:
            known |= set(variants.describe(name)["defaults"])
        except ValueError:
            return  # a variant this process does not know (a plugin not loaded yet): its arguments are unknown
    for claim in claims:
        if claim.table in TABLES:
            continue
        named = [*claim.where, *(f for f in (claim.for_each, claim.compare, claim.x) if f)]
        unknown = [f for f in named if f not in known]
        if unknown:
            raise ValueError(f"study file {path}: claim {claim.id!r} names field(s) {unknown} that no run records; "
                             "fields: leaderboard columns, run-config fields, axes "
                             f"({', '.join(AXES)}) or the variants' model arguments")


def _check_claim_values(claims: Sequence[Claim], data: dict[str, Any], path: Path) -> None:
    """Every value a leaderboard claim names (its groups ``a`` and ``b``, its ``where``) for a field the study sets
    (in ``[base]``, ``[grid]`` or a preset) is one the study sets it to: a claim about a variant the grid does not
    run would otherwise be found inconclusive only at report time, after the compute is spent."""
    tables = [data.get("base", {}), data.get("grid", {}), *data.get("presets", {}).values()]
    for claim in claims:
        if claim.table in TABLES:
            continue
        named = {f: v if isinstance(v, list) else [v] for f, v in claim.where.items()}
        if claim.compare or claim.kind == "multiplier":  # a multiplier claim compares two variants' scaling fits
            named.setdefault(claim.compare or "variant", []).extend(v for v in (claim.a, claim.b)
                                                                   if v not in (None, "min", "max"))
        for field_name, values in named.items():
            runs = [t[field_name] for t in tables if field_name in t]
            if not runs:
                continue  # a field the study leaves at its default, or an axis: its values are the runs' own
            known = [v for r in runs for v in (r if isinstance(r, list) else [r])]
            missing = [v for v in values if v not in known and str(v) not in map(str, known)]  # as claims match
            if missing:
                raise ValueError(f"study file {path}: claim {claim.id!r} names {field_name} {missing}, which no run "
                                 f"of the study has ({field_name} takes {', '.join(map(str, dict.fromkeys(known)))} "
                                 "in its base, grid and presets)")
