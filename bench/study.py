"""Studies: a TOML file naming a grid of runs, and the driver that runs it on an executor.

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

:func:`run_sweep` is the driver: it hands the runs to an executor (:mod:`bench.executors`: ``local``, each run
in a process of its own, ``--jobs`` at a time), writes each row as it comes back (the driver is the one writer
of the results directory), and prints one line per run with the sweep's counts and an ETA. Resuming is the
default and survives anything: a run counts as done only once its row says ``ok``, so after a Ctrl-C, a
``SIGTERM`` or a ``SIGKILL`` of the driver the same command runs exactly the runs without one (their leftover
partial files are removed first).

Cost is measured once per model configuration (:func:`bench.measure.cost_key`): the first run of each key
measures throughput, memory and FLOPs, the others reuse its figures (the row's ``cost_source`` names it) and
only train; the other runs of a key wait until the figures exist, while runs of other keys fill the slots.
``measure_every_run`` (``--measure-every-run``) measures in every run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import glob
import itertools
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .config import RECIPES, RunConfig
from .fairness import DEFAULT_PARAM_TOLERANCE, check_grid
from .progress import LiveLine

if TYPE_CHECKING:
    from .executors import Event, Executor, Job
    from .results import ResultsStore
    from .runner import Reuse
    from .trackers import Tracker

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
    analysis: dict[str, Any] = field(default_factory=dict)  # what runs after the grid (bench.analysis), if anything

    def analysis_options(self, preset: str | None = None) -> dict[str, Any]:
        """The study's ``[analysis]`` table with the preset's ``analysis`` overrides applied ({} if none)."""
        over = self.presets.get(preset, {}).get("analysis", {}) if preset else {}
        return {**self.analysis, **over} if self.analysis else {}

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

        if not self.grid and self.analysis.get("kind") == "gradcorr":  # a study of models at init: no grid
            listed = list(self.analysis.get("variants", []))
            if present := [n for n in names if n in listed]:
                raise ValueError(f"study {self.name!r} already measures variant(s) {present}; add only variants it "
                                 "does not have")
            analysis = {**self.analysis, "variants": [*listed, *names]}
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

    def configs(self, preset: str | None = None) -> list[RunConfig]:
        """Every run of the grid (under ``preset``), validated before any of them starts."""
        if preset is not None and preset not in self.presets:
            avail = ", ".join(sorted(self.presets)) or "none"
            raise ValueError(f"study {self.name!r} has no preset {preset!r}; presets: {avail}")
        over = dict(self.presets.get(preset, {})) if preset else {}
        over.pop("analysis", None)  # the analysis's own options (analysis_options), not run fields
        if not self.grid and self.analysis:
            self._check_models(preset)
            return []  # an analysis of models at initialisation: no training runs
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
        self._check_fair(out)
        return out

    def _check_models(self, preset: str | None) -> None:
        """The models a study without runs measures (``gradcorr``'s variants x depths) pass the same checks as a
        grid's: valid names and depths, and no difference beyond ``vary`` (:func:`bench.fairness.check_grid`)."""
        from .analysis import check_options

        opts = check_options(self.analysis_options(preset))
        if opts["kind"] != "gradcorr":
            raise ValueError(f"study {self.name!r}: a {opts['kind']} analysis needs trained runs: give it a [grid]")
        models = [RunConfig(variant=v, depth=d, task=opts["task"], study=self.name, preset=preset)
                  for v in opts["variants"] for d in opts["depths"]]  # fmt: skip
        _check_variants(models)
        self._check_fair(models)

    def _check_fair(self, configs: list[RunConfig]) -> None:
        """:func:`bench.fairness.check_grid` on ``configs``; when it fails because of the variants the user added
        (the study passes without them), the error says so and how to proceed."""
        try:
            check_grid(configs, self.vary, self.param_tolerance, self.name)
        except ValueError as exc:
            if not self.added:
                raise
            # Is the study fine without the user's variants? Then theirs is what differs in an undeclared way.
            check_grid([c for c in configs if c.variant not in self.added], self.vary, self.param_tolerance, self.name)
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
    (with the same check in :func:`bench.runner.execute`) while the sweep goes on.
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
                       "claims", "analysis"}
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
    analysis = data.get("analysis", {})
    if not isinstance(analysis, dict) or (analysis and "kind" not in analysis):
        raise ValueError(f"study file {path}: `analysis` must be a table with a kind, e.g. [analysis] "
                         'kind = "lesion"')
    if analysis:
        from .analysis import check_options

        for preset in [None, *data.get("presets", {})]:
            over = data.get("presets", {}).get(preset, {}).get("analysis", {}) if preset else {}
            try:
                check_options({**analysis, **over})
            except ValueError as exc:
                raise ValueError(f"study file {path}: [analysis]{f' (preset {preset})' if preset else ''}: {exc}") \
                    from None
    return Study(
        name=data.get("name", path.stem), description=data.get("description", ""), base=data.get("base", {}),
        grid=grid, presets=data.get("presets", {}), vary=tuple(vary), param_tolerance=float(tol), claims=claims,
        analysis=analysis,
    )  # fmt: skip


def study_path(name: str) -> Path:
    path = STUDIES_DIR / f"{name}.toml"
    if not path.is_file():
        shipped = ", ".join(sorted(p.stem for p in STUDIES_DIR.glob("*.toml"))) or "none"
        raise ValueError(f"no shipped study {name!r}; shipped studies: {shipped}")
    return path


def run_sweep(configs: Sequence[RunConfig], results_dir: str | Path, executor: Executor, *, resume: bool = True,
              measure_every_run: bool = False, progress: bool = True, command: str | None = None,
              trackers: Sequence[Tracker] = ()) -> list[str]:
    """Run ``configs`` on ``executor``, writing one row per run as it ends; returns the run ids written.

    With ``resume`` the runs whose row says ``ok`` are skipped (and their figures reused); a run that failed,
    was killed or never ran runs again. A run refused as bad input (a dataset not on this machine) gets no row,
    the sweep goes on, and a ValueError at the end names them. ``command`` is the command line that resumes
    this sweep, printed after an interruption and under the summary of failed runs. Each written run is also
    logged to ``trackers`` (:mod:`bench.trackers`).
    """
    from .results import ResultsStore

    store = ResultsStore(results_dir)
    store.preflight()  # a broken results directory is bad input: refused before the first run
    driver = _Driver(list(configs), store, executor, measure_every_run, progress, command, trackers)
    driver.skip_recorded(resume)
    with _sigterm_as_interrupt():
        driver.run()
    return driver.summarise()


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM stops a sweep as Ctrl-C does (workers stopped, how to resume printed); main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _Driver:
    """The state of one sweep: what is pending, in flight and done, and whose cost figures to reuse."""

    def __init__(self, configs: list[RunConfig], store: ResultsStore, executor: Executor, measure_every_run: bool,
                 progress: bool, command: str | None, trackers: Sequence[Tracker] = ()) -> None:
        from . import plugins

        self.configs, self.store, self.executor, self.command = configs, store, executor, command
        self.trackers = trackers
        self.measure_every_run = measure_every_run
        self.quiet = not progress  # the summary, refused and failed runs are printed all the same
        self.bars = progress and executor.slots == 1 and sys.stderr.isatty()
        # A status line at the bottom of the terminal (done / running / failed / remaining, ETA, elapsed), redrawn
        # each second; not under a run's own progress bar (one job on a terminal), nor in a log file.
        self.live = LiveLine(sys.stdout, enabled=progress and not self.bars)
        self.plugin_specs = tuple(p.reload for p in plugins.loaded())
        self.n = len(configs)
        self.pending: list[tuple[int, RunConfig]] = []
        self.sources: dict[str, Reuse] = {}  # cost key -> the figures its runs reuse
        self.measuring: dict[str, int] = {}  # cost key -> index of the run measuring it now
        self.last: dict[int, dict[str, Any]] = {}  # index -> data of the run's latest setup/measured event
        self.started: dict[int, float] = {}
        self.written: list[str] = []
        self.ok = 0
        self.failed: list[tuple[int, str, str, str]] = []  # index, run id, status, error
        self.refused: list[tuple[int, str]] = []
        self.t0 = time.perf_counter()

    # -- before the first run --------------------------------------------------------------------------------
    def skip_recorded(self, resume: bool) -> None:
        """Skip the runs with an ok row (with ``resume``); reuse their figures; clear the others' partial files."""
        board = self.store.load_leaderboard()
        done = set(board.loc[board["status"] == "ok", "run_id"]) if resume and not board.empty else set()
        for i, cfg in enumerate(self.configs, 1):
            if cfg.run_id in done:
                if not self.quiet:
                    print(f"[{i}/{self.n}] {cfg.run_id}: already recorded, skipped", flush=True)
                self.ok += 1
                self._reuse_recorded(cfg)
            else:
                self.pending.append((i, cfg))
        self._clean_partial_files({cfg.run_id for _, cfg in self.pending}, set(board["run_id"]))

    def _reuse_recorded(self, cfg: RunConfig) -> None:
        """Take a recorded run's cost figures for its configuration, if it measured (or reused) them all."""
        from .measure import complete, cost_key
        from .runner import Reuse

        key = cost_key(cfg)
        if self.measure_every_run or not cfg.measure or key in self.sources:
            return
        try:
            run = self.store.load_run(cfg.run_id)
        except (ValueError, OSError):
            return  # a row without its JSON: the next run of the configuration measures again
        measurements = run.get("measurements") or {}
        if complete(measurements, cfg.measure):
            self.sources[key] = Reuse(run.get("cost_source") or cfg.run_id, measurements)

    def _clean_partial_files(self, pending: set[str], with_row: set[str]) -> None:
        """Remove what a driver killed while writing left of runs still to run: temporary files, and a run JSON
        written just before it died whose row never was (so no reader pairs it with another run's row)."""
        if not self.store.runs_dir.is_dir():
            return
        for run_id in pending:
            for tmp in self.store.runs_dir.glob(f".{glob.escape(run_id)}.json.*.tmp"):
                tmp.unlink(missing_ok=True)
            if run_id not in with_row:
                (self.store.runs_dir / f"{run_id}.json").unlink(missing_ok=True)

    # -- the loop --------------------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            while self.pending or self.executor.in_flight():
                self._fill_slots()
                if not self.executor.in_flight():  # every pending run waits for figures nobody is measuring
                    raise RuntimeError(f"sweep stalled with {len(self.pending)} runs pending (a bug in resbench)")
                self.live.show(self._status())
                for event in self.executor.wait(timeout=1.0 if self.live.on else None):
                    self._on(event)
            self.live.close()
            self.executor.stop()  # nothing is in flight: this releases what the executor holds (a Ray connection)
        except KeyboardInterrupt:
            self.live.close()
            stopped = self.executor.stop()
            names = ", ".join(job.config.run_id for job in stopped)
            what = f"stopped {len(stopped)} running run(s) ({names}), nothing of them written" if stopped else \
                "no run was in flight"
            print(f"interrupted: {what}; {self.ok} of {self.n} runs have an ok row", file=sys.stderr, flush=True)
            if self.command:
                print(f"resume with: {self.command}  (runs with an ok row are skipped)", file=sys.stderr, flush=True)
            raise
        except BaseException:
            self.live.close()
            self.executor.stop()
            raise

    def _fill_slots(self) -> None:
        while len(self.executor.in_flight()) < self.executor.slots:
            job = self._next_job()
            if job is None:
                return  # the rest wait for cost figures being measured now
            self.started[job.index] = time.perf_counter()
            where = self.executor.submit(job)
            if self.executor.slots > 1:
                self._line(job.index, job.config.run_id, f"started ({where})")

    def _next_job(self) -> Job | None:
        """The first pending run that can start: its figures are known, or nobody is measuring them."""
        from .executors import Job
        from .measure import cost_key

        for pos, (i, cfg) in enumerate(self.pending):
            reuse = None
            if cfg.measure and not self.measure_every_run:
                key = cost_key(cfg)
                if key in self.sources:
                    reuse = self.sources[key]
                elif key in self.measuring:
                    continue
                else:
                    self.measuring[key] = i
            del self.pending[pos]
            return Job(i, cfg, reuse, progress=self.bars, plugins=self.plugin_specs)
        return None

    def _on(self, event: Event) -> None:
        from .measure import complete, cost_key
        from .runner import Reuse, record, unfinished_run

        job, cfg = event.job, event.job.config
        key = cost_key(cfg)
        if event.kind in ("setup", "measured"):
            self.last[job.index] = event.data
            if event.kind == "measured" and self.measuring.get(key) == job.index:
                del self.measuring[key]
                if complete(event.data["measurements"], cfg.measure):
                    self.sources[key] = Reuse(cfg.run_id, event.data["measurements"])
            return
        if self.measuring.get(key) == job.index:
            del self.measuring[key]  # it ended before measuring: the next run of its configuration measures
        wall = time.perf_counter() - self.started.pop(job.index)
        last = self.last.pop(job.index, None)
        if event.kind == "refused":
            self.refused.append((job.index, cfg.run_id))
            self._line(job.index, cfg.run_id, f"not run: {event.data['error']}", always=True)
            return
        if event.kind == "finished":
            run_json = event.data["run_json"]
        else:
            run_json = unfinished_run(cfg, event.data["status"], event.data["error"], wall, last,
                                      event.data.get("placement"))
        record(self.store, run_json, self.trackers)
        self.written.append(cfg.run_id)
        row = run_json["row"]
        if row["status"] == "ok":
            self.ok += 1
        else:
            self.failed.append((job.index, cfg.run_id, row["status"], row["error"]))
        acc = row.get("final_val_acc")
        text = row["status"] + (f": {row['error']}" if row["status"] != "ok" and row["error"] else "")
        self._line(job.index, cfg.run_id, text + (f", val acc {acc:.4f}" if isinstance(acc, float) else "")
                   + f", {row['wall_time_s']:.1f} s")

    # -- what a person watches -------------------------------------------------------------------------------
    def _line(self, index: int, run_id: str, text: str, always: bool = False) -> None:
        if self.quiet and not always:
            return
        self.live.print(f"[{index}/{self.n}] {run_id}: {text} | {self._counts()}")

    def _status(self) -> str:
        """The live line: the counts, the ETA and the time the sweep has run."""
        return f"sweep: {self._counts()}, elapsed {_clock(time.perf_counter() - self.t0)}"

    def _counts(self) -> str:
        running = len(self.executor.in_flight())
        ended_here = len(self.written) + len(self.refused)
        if ended_here and (self.pending or running):
            per_run = (time.perf_counter() - self.t0) / ended_here  # wall time per run with this many slots
            eta = _clock(per_run * (len(self.pending) + running))
        else:
            eta = "-" if not (self.pending or running) else "?"
        return (f"done {self.ok}, running {running}, failed {len(self.failed) + len(self.refused)}, "
                f"remaining {len(self.pending)}, ETA {eta}")

    def summarise(self) -> list[str]:
        """Print the sweep's tally and its failed runs with the command that reruns them; raise if any was refused."""
        print(f"sweep done in {_clock(time.perf_counter() - self.t0)}: {self.ok} of {self.n} runs ok, "
              f"{len(self.failed)} failed, {len(self.refused)} not run", flush=True)
        if self.failed:
            print("failed runs:")
            for index, run_id, status, error in sorted(self.failed):
                print(f"  [{index}/{self.n}] {run_id}: {status}{': ' + error if error else ''}")
            if self.command:
                print(f"rerun just these (runs with an ok row are skipped): {self.command}", flush=True)
        if self.refused:
            ids = [run_id for _, run_id in sorted(self.refused)]
            raise ValueError(f"{len(ids)} of {self.n} runs were not run (bad input, see above): {ids}")
        return self.written


def _clock(seconds: float) -> str:
    return str(datetime.timedelta(seconds=round(seconds)))
