"""Studies: a TOML file naming a grid of runs, and a runner that executes it.

A study is data, not code::

    name = "degradation"
    description = "..."
    [base]            # RunConfig fields shared by every run
    task = "digits"
    [grid]            # the cartesian product of these lists
    variant = ["plain", "resnet"]
    depth = [20, 56]
    seed = [0, 1, 2]
    [presets.quick]   # overrides of base (and grid lists) for a named preset
    epochs = 5
    vary = ["combinator"]       # the axes the variants of the grid may differ in (bench.fairness)
    param_tolerance = 0.01      # and by how much (relative) their parameter counts may differ
    [[claims]]        # what the paper says, checked by `bench report` (bench.claims)

Before the first run every model of the grid is built on the meta device, and a grid whose
variants differ in more than ``vary`` says is refused (:func:`bench.fairness.check_grid`).
:meth:`Study.with_variants` (``--add-variant NAME``) appends the user's own variants to a study's grid;
the same guard then applies to them.

The runner is a separate, replaceable piece: :class:`SequentialRunner` runs the configs one
after another in this process; an isolated/parallel/cluster runner only has to offer ``run``.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import RECIPES, RunConfig
from .fairness import DEFAULT_PARAM_TOLERANCE, check_grid

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

STUDIES_DIR = Path(__file__).parent / "studies"
_TUPLE_FIELDS = ("betas", "milestones", "measure")


@dataclass(frozen=True)
class Study:
    name: str
    description: str
    base: dict[str, Any]
    grid: dict[str, list[Any]]
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)
    vary: tuple[str, ...] = ()
    param_tolerance: float = DEFAULT_PARAM_TOLERANCE
    claims: list[dict[str, Any]] = field(default_factory=list)
    added: tuple[str, ...] = ()  # variants appended to the grid by the user (--add-variant), not by the file

    def with_variants(self, names: Sequence[str]) -> Study:
        """This study with ``names`` appended to its grid's ``variant`` list (and to every preset's own list).

        The study's ``vary`` and ``param_tolerance`` still apply to the grid it then makes (see :meth:`configs`).
        """
        import variants

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

    def configs(self, preset: str | None = None) -> list[RunConfig]:
        """Every run of the grid (under ``preset``), validated before any of them starts."""
        if preset is not None and preset not in self.presets:
            avail = ", ".join(sorted(self.presets)) or "none"
            raise ValueError(f"study {self.name!r} has no preset {preset!r}; presets: {avail}")
        over = dict(self.presets.get(preset, {})) if preset else {}
        grid = {k: over.pop(k) if k in over else v for k, v in self.grid.items()}
        bad = [k for k, v in grid.items() if not isinstance(v, list) or not v]
        if bad:
            raise ValueError(f"study {self.name!r}: grid entries must be non-empty lists (also in presets): {bad}")
        base = {**self.base, **over}
        recipe = base.pop("recipe", None)
        if recipe is not None:
            if recipe not in RECIPES:
                raise ValueError(f"study {self.name!r}: unknown recipe {recipe!r}")
            from_recipe = dict(RECIPES[recipe])
            if "epochs" in base or "epochs" in grid:
                from_recipe.pop("steps", None)  # as on the command line: epochs given replace the recipe's steps
            base = {**from_recipe, "recipe": recipe, **base}
        out = []
        keys = list(grid)
        for values in itertools.product(*(grid[k] for k in keys)):
            kw = {**base, **dict(zip(keys, values, strict=False)), "study": self.name, "preset": preset}
            for name in _TUPLE_FIELDS:
                if name in kw:
                    kw[name] = tuple(kw[name])
            if "model_args" in kw:
                kw["model_args"] = tuple(sorted(dict(kw["model_args"]).items()))
            try:
                out.append(RunConfig(**kw))
            except TypeError as exc:
                raise ValueError(f"study {self.name!r}: {exc}") from None
        _check_variants(out)
        try:
            check_grid(out, self.vary, self.param_tolerance, self.name)
        except ValueError as exc:
            if not self.added:
                raise
            # Is the study fine without the user's variants? Then theirs is what differs in an undeclared way.
            check_grid([c for c in out if c.variant not in self.added], self.vary, self.param_tolerance, self.name)
            raise ValueError(
                f"{exc}. The variant(s) you added ({', '.join(self.added)}) must differ from the study's own only "
                f"in what it varies ({', '.join(self.vary) or 'nothing'}): build it from the same kind of units "
                "and defaults, since its axes are read from the model it builds (`python -m bench diff A B "
                "--plugin FILE.py` shows every difference), or compare along another axis in a copy of the study file with it added to `vary` "
                "(`python -m bench sweep COPY.toml --add-variant ...`)"
            ) from None
        return out


def _check_variants(configs: list[RunConfig]) -> None:
    """Unknown names, invalid depths and bad model arguments fail before the first run starts.

    Each distinct model is built on the meta device (no memory, no data): the builders check
    depth rules and arguments there exactly as they will in the run. A variant a plugin registered
    is also built on the CPU and run forward on a batch of its task (:func:`bench.plugins.check_forward`).
    """
    import torch

    import variants

    from . import plugins

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
    (with the same check in :func:`bench.run.execute`) while the sweep goes on.
    """
    import torch

    import variants

    from . import plugins
    from .tasks import TaskError
    from .tasks import get as get_task
    from .train import model_kwargs, task_options

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
            torch.manual_seed(cfg.seed)
            with plugins.blame(cfg.variant):
                model = variants.create(cfg.variant, **model_kwargs(cfg, task))
            plugins.check_forward(cfg.variant, model, task)


def read_study_file(path: str | Path) -> dict[str, Any]:
    """A study file's TOML as a dict; a missing or malformed file is bad input (ValueError)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"study file {path} does not exist")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"study file {path} is not valid TOML: {exc}") from None


def load_study(path: str | Path) -> Study:
    path = Path(path)
    data = read_study_file(path)
    unknown = set(data) - {"name", "description", "claim", "base", "grid", "presets", "vary", "param_tolerance",
                       "claims"}
    if unknown:
        raise ValueError(f"study file {path}: unknown top-level key(s) {sorted(unknown)}")
    grid = data.get("grid", {})
    bad = [k for k, v in grid.items() if not isinstance(v, list) or not v]
    if bad:
        raise ValueError(f"study file {path}: grid entries must be non-empty lists: {bad}")
    vary = data.get("vary", [])
    if not isinstance(vary, list) or not all(isinstance(v, str) for v in vary):
        raise ValueError(f"study file {path}: `vary` must be a list of axis names, e.g. vary = [\"placement\"]")
    tol = data.get("param_tolerance", DEFAULT_PARAM_TOLERANCE)
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 <= tol < 1:
        raise ValueError(f"study file {path}: `param_tolerance` must be a fraction in [0, 1), got {tol!r}")
    claims = data.get("claims", [])
    if not isinstance(claims, list) or not all(isinstance(c, dict) for c in claims):
        raise ValueError(f"study file {path}: `claims` must be an array of tables ([[claims]])")
    return Study(
        name=data.get("name", path.stem), description=data.get("description", ""), base=data.get("base", {}),
        grid=grid, presets=data.get("presets", {}), vary=tuple(vary), param_tolerance=float(tol), claims=claims,
    )  # fmt: skip


def study_path(name: str) -> Path:
    path = STUDIES_DIR / f"{name}.toml"
    if not path.is_file():
        shipped = ", ".join(sorted(p.stem for p in STUDIES_DIR.glob("*.toml"))) or "none"
        raise ValueError(f"no shipped study {name!r}; shipped studies: {shipped}")
    return path


class SequentialRunner:
    """Run configs one after another in this process; a failed run is recorded and the sweep goes on."""

    def __init__(self, progress: bool = True) -> None:
        self.progress = progress

    def run(self, configs: list[RunConfig], results_dir: str | Path, resume: bool = True) -> list[str]:
        from .results import ResultsStore
        from .run import execute

        done: set[str] = set()
        store = ResultsStore(results_dir)
        store.preflight()  # a broken results directory is bad input: refused before the first run
        if resume:
            df = store.load_leaderboard()
            done = set(df.loc[df["status"] == "ok", "run_id"]) if not df.empty else set()
        finished, refused = [], []
        for i, cfg in enumerate(configs, 1):
            if cfg.run_id in done:
                print(f"[{i}/{len(configs)}] {cfg.run_id}: already recorded, skipped")
                continue
            try:
                result = execute(cfg, results_dir, progress=self.progress and sys.stderr.isatty())
            except ValueError as exc:  # bad input for this run only (e.g. a missing dataset): the sweep goes on
                print(f"[{i}/{len(configs)}] {cfg.run_id}: not run: {exc}", flush=True)
                refused.append(cfg.run_id)
                continue
            row = result["row"]
            acc = row["final_val_acc"]
            print(
                f"[{i}/{len(configs)}] {cfg.run_id}: {row['status']}"
                + (f", val acc {acc:.4f}" if isinstance(acc, float) else "")
                + f", {row['wall_time_s']:.1f} s",
                flush=True,
            )
            finished.append(cfg.run_id)
        if refused:
            raise ValueError(f"{len(refused)} of {len(configs)} runs were not run (bad input, see above): {refused}")
        return finished
