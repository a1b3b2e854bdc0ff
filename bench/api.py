"""resbench from Python (a notebook, a script): what the CLI does, through the same code.

    import bench

    run = bench.run("preln", task="tinytext", depth=6, steps=200, batch_size=16, seq_len=32, optimizer="adamw",
                    lr=1e-3, model_args={"d_model": 64}, results_dir="results")
    run.row["final_val_loss"], run.curves.head()            # the leaderboard row, tidy curves
    res = bench.sweep("frontier", preset="smoke", jobs=2)   # a shipped study or a study file (4 tiny runs)
    res = bench.load("results", study="frontier")           # .runs, .curves, .probes: tidy pandas frames
    bench.compare(res, baseline="preln", metrics=["final_val_loss"])  # paired by seed against it, Holm-corrected

Keyword arguments of :func:`run` are the fields of :class:`bench.runs.config.RunConfig` (``python -m bench run
--help`` documents each); lists and dicts are accepted where the CLI takes several values (``betas``, ``milestones``,
``measure``, ``model_args``), and ``recipe`` applies a named recipe as ``--recipe`` does. Keyword arguments of
:func:`sweep` beyond its own are the fields of :class:`bench.sweeps.options.SweepOptions` (``jobs``, ``executor``,
...). Bad input raises ``ValueError`` with the CLI's message and writes nothing. The functions and the fields of
:class:`Run` and :class:`Results` are the stable API; the modules behind them are not.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from bench.analysis.comparison import compare_table
from bench.analysis.multiplier import ScalingFit, check_metric, fit_ladders, floor_of, ladders_from
from bench.analysis.multiplier_columns import with_multipliers
from bench.analysis.scaling import BOOTSTRAP
from bench.analysis.stats import aggregate, by_configuration, headline_metrics, primary_metrics, with_derived
from bench.analysis.studyfile import PLUGIN_ORIGIN, link_in, manifest_path, record_plugins, study_plugins
from bench.reports.analysis_step import for_study
from bench.reports.plotdata import curves_frame, load_frames, probes_frame
from bench.reports.report import write_report
from bench.reports.trackers import Tracker, log_all, make_trackers
from bench.runs import distributed, plugins
from bench.runs.config import DEFAULT_RESULTS, RunConfig, build
from bench.runs.cost import cost_table
from bench.runs.env import environment, machine_id
from bench.runs.measure import cost_key
from bench.runs.names import file_name, versioned
from bench.runs.progress import Progress
from bench.runs.results import ResultsStore, atomic_write_text
from bench.runs.runner import execute
from bench.runs.train import resolve_device
from bench.sweeps.bill import accelerators, bill, render
from bench.sweeps.driver import recorded_figures, recorded_runs, run_sweep
from bench.sweeps.executors import check_options, make_executor, prestart
from bench.sweeps.options import FIELDS as OPTION_FIELDS
from bench.sweeps.options import SweepOptions
from bench.sweeps.rounds import until_decided
from bench.sweeps.study import Study, load_study


@dataclass(frozen=True)
class Run:
    """One recorded run: its leaderboard ``row``, the whole run JSON (``record``) and where both were written."""

    record: Mapping[str, Any]
    results_dir: Path

    @property
    def run_id(self) -> str:
        return str(self.record["run_id"])

    @property
    def row(self) -> Mapping[str, Any]:
        return self.record["row"]

    @property
    def path(self) -> Path:
        """The run JSON."""
        return self.results_dir / "runs" / f"{self.run_id}.json"

    @property
    def curves(self) -> pd.DataFrame:
        """Tidy curves: ``split`` (train/eval), ``step``, ``metric``, ``value`` and the run's metadata."""
        return curves_frame([self.record])

    @property
    def probes(self) -> pd.DataFrame:
        """Tidy per-layer probes: ``step``, ``layer``, ``block``, ``kind``, ``metric``, ``value``."""
        return probes_frame([self.record])


@dataclass(frozen=True)
class Results:
    """A results directory (one study's runs with ``study``): ``runs`` is the leaderboard, ``curves`` and ``probes``
    tidy frames of every run JSON (with a ``config`` label where configurations differ beyond what a figure
    shows), ``records`` the run JSONs themselves."""

    results_dir: Path
    study: str | None
    runs: pd.DataFrame
    curves: pd.DataFrame
    probes: pd.DataFrame
    records: Sequence[Mapping[str, Any]] = field(repr=False)
    # The tables of the study's analysis (lesion, gradcorr, landscape; bench.analysis.analyses) by file stem, e.g.
    # ``analysis["lesion-summary"]``; empty without one.
    analysis: Mapping[str, pd.DataFrame] = field(default_factory=dict, repr=False)

    def leaderboard(self, metrics: Sequence[str] | None = None) -> pd.DataFrame:
        """One row per configuration (seeds pooled, nothing else): ``<metric>_{mean,std,n,ci,ci_low,ci_high,median}``
        for each metric (default: the CLI leaderboard's, each task's primary metric first), as ``bench leaderboard
        --csv`` writes it."""
        named, by = by_configuration(with_derived(self.runs), self.records)
        return aggregate(named, by=by, metrics=list(metrics or headline_metrics(named)))


def config(variant: str | None = None, **fields: Any) -> RunConfig:
    """A validated :class:`~bench.runs.config.RunConfig` from keyword arguments (lists/dicts accepted; a ``recipe``
    applied under the fields given, as on the command line)."""
    if variant is not None:
        fields["variant"] = variant
    return build(fields)


def _log_to(trackers: Sequence[Tracker], results_dir: str | Path) -> Any:
    """What a recorded run is handed to: each tracker (a tracker's failure is a warning: the run is on disk)."""
    retry = f"python -m bench track --results-dir {results_dir}"
    return lambda run_json: log_all(trackers, run_json, retry=retry)


def run(variant: str | None = None, *, results_dir: str | Path = DEFAULT_RESULTS, progress: bool = False,
        tracker: str | Sequence[str] = (), tracker_uri: str | Sequence[str] = (), cfg: RunConfig | None = None,
        force: bool = False, **fields: Any) -> Run:
    """Train ``variant`` once with ``fields`` (RunConfig's; or a ready ``cfg``), record its row and JSON in
    ``results_dir``, return the :class:`Run` — ``python -m bench run``. A failed run (diverged, OOM, error) is
    recorded and returned with its ``status``; bad input raises ValueError before anything is written.
    ``tracker`` ("tensorboard", "mlflow" or both) also logs the run there (:mod:`bench.reports.trackers`). A run
    already recorded in ``results_dir`` is returned as recorded, not trained again, unless ``force``."""
    cfg = cfg if cfg is not None else config(variant, **fields)
    trackers = make_trackers(tracker, tracker_uri, results_dir)
    stored = execute(cfg, results_dir, progress=progress, force=force)
    world = distributed.current()
    if world is None or world.main:  # the rank that wrote the run logs it
        _log_to(trackers, results_dir)(stored)
    return Run(stored, Path(results_dir))


def study_file(study: str | Path) -> Path:
    """A shipped study's file by name (``degradation``), or the path of a study file of your own."""
    loaded = load_study(study)
    assert loaded.path is not None
    return loaded.path


def sweep(study: str | Path, *, results_dir: str | Path = DEFAULT_RESULTS, options: SweepOptions | None = None,
          progress: bool = True, report: bool = False, command: str | None = None, verb: str = "study",
          trust_plugins: bool = False, **option_fields: Any) -> Results:
    """Run a study's grid — ``python -m bench sweep``, or ``reproduce`` with ``report=True`` (the figures and
    ``REPORT.md`` too) — and return its :class:`Results`. ``study`` is a shipped study's name or a study file;
    ``options`` (or its fields as keyword arguments: ``preset``, ``jobs``, ``executor``, ``add_variants``,
    ``tracker`` ...) say how the runs execute (:class:`~bench.sweeps.options.SweepOptions`). The grid is validated
    and checked for confounds before the first run (ValueError); each run executes in a process of its own,
    ``jobs`` at a time, and is logged to each ``tracker`` as it is recorded. A study stored in a results folder has
    its plugins imported only with ``trust_plugins`` (``--trust-plugins``), checked against the hashes recorded with
    it (:func:`bench.analysis.studyfile.study_plugins`). ``until_decided=True`` (with ``max_seeds``) then adds seeds
    in rounds to the configurations whose claims are still open (:mod:`bench.sweeps.rounds`)."""
    unknown = sorted(set(option_fields) - OPTION_FIELDS)
    if unknown:
        raise ValueError(f"sweep() takes no option(s) {unknown}; options: {', '.join(sorted(OPTION_FIELDS))}")
    if options is None:
        options = SweepOptions(**{"quiet": not progress, **option_fields})
    elif option_fields:
        options = dataclasses.replace(options, **option_fields)
    t0 = time.perf_counter()  # what a sweep spends before its first run counts in a dry run's bill
    check_options(options)
    prestart(options)
    plugins.load_plugins(study_plugins(study, trust=trust_plugins), PLUGIN_ORIGIN)  # before the study is checked
    spec = load_study(study).with_variants(list(options.add_variants))
    # checked for confounds, plugins run forward: before anything runs
    configs = spec.configs(options.preset, options.fields())
    if options.dry_run:
        return _dry_run(spec, configs, options, results_dir, time.perf_counter() - t0)
    executor = make_executor(configs, options)  # starts nothing (Ray connects at the first run)
    store = ResultsStore(results_dir)
    store.preflight()
    store.load_runs()  # read again when the sweep ends: a damaged run JSON is refused now, before the first run
    trackers = make_trackers(list(options.tracker), list(options.tracker_uri), results_dir)
    _keep_study_file(spec, store.root)
    added = f" with {', '.join(spec.added)} added" if spec.added else ""
    slots = f", {executor.slots} at a time" if executor.slots > 1 else ""
    print(f"{verb} {spec.name!r}{_preset(spec, options)}{added}: {len(configs)} runs{slots} -> {results_dir}")
    made_with = {k: list(v) for k, v in (("set", options.set), ("add_variants", options.add_variants)) if v}

    def run_round(todo: list[RunConfig]) -> None:
        run_sweep(todo, results_dir, executor if todo is configs else make_executor(todo, options),
                  resume=options.resume, retry_failed=options.retry_failed,
                  measure_every_run=options.measure_every_run, progress=not options.quiet,
                  command=command or f"python -m bench sweep {spec.path} --results-dir {results_dir}",
                  on_record=_log_to(trackers, results_dir), requeue=options.requeue, made_with=made_with)

    if configs and options.until_decided:  # rounds of seeds for the claims still open (bench.sweeps.rounds)
        until_decided(spec.claims, configs, store, spec.name, options.preset, options.max_seeds, run_round)
    elif configs:
        run_round(configs)
    if spec.analysis:  # what the study measures on its trained runs (or, with no grid, on models at init)
        print(f"{spec.analysis['kind']} analysis of study {spec.name!r}:", flush=True)
        for written in for_study(spec.name, spec.analysis_options(options.preset), results_dir,
                                 [c.run_id for c in configs], options.preset):
            print(f"  {written}")
    if report:
        print(write_report(results_dir, spec.name))  # draws the figures too
    return load(results_dir, spec.name)


def _preset(spec: Study, options: SweepOptions) -> str:
    """How a sweep's first line names what it runs: `` (quick)`` (its preset), `` (full)`` (no preset chosen, of a study
    that has some), nothing for a study without presets."""
    if options.preset:
        return f" ({options.preset})"
    return " (full)" if spec.presets else ""


def _dry_run(spec: Study, configs: Sequence[RunConfig], options: SweepOptions, results_dir: str | Path,
             checks_s: float = 0.0) -> Results:
    """The bill of the runs of a study that a sweep into ``results_dir`` would run under ``options`` (those it
    skips as recorded are counted, not billed: :func:`bench.sweeps.driver.recorded_runs`;
    :mod:`bench.sweeps.bill`), and so are the measurement phases of a configuration whose cost figures it reuses
    from those (:func:`bench.sweeps.driver.recorded_figures`, measured on this machine); nothing run, nothing
    recorded. ``checks_s``: what checking the study took (a sweep takes it too, before its first run)."""
    store = ResultsStore(results_dir)
    recorded = recorded_runs(store, configs, options.resume, options.retry_failed)
    todo = [c for c in configs if c.run_id not in recorded]
    skipped = (f", {len(recorded)} of them already recorded in {results_dir} (a sweep skips them), so {len(todo)} "
               "to run" if recorded else "")
    print(f"dry run of study {spec.name!r}{_preset(spec, options)}: {len(configs)} runs checked{skipped}"
          + ("; counting and timing what each model configuration costs here" if todo else ""), flush=True)
    empty = pd.DataFrame()
    if not todo:
        print(f"nothing to bill: a sweep into {results_dir} would run nothing (--no-resume runs them all again)")
        return Results(Path("."), spec.name, empty, empty, empty, [])
    t0 = time.perf_counter()
    env = environment(resolve_device(configs[0].device if configs else "auto"))
    figures = recorded_figures(store, [c for c in configs if c.run_id in recorded], options.measure_every_run)
    here = machine_id(env)  # figures measured on another machine are measured again (bench.runs.runner)
    reused = {key for key, r in figures.items() if r.machine is None or r.machine == here}
    bills = bill(todo, options, cost_key, say=lambda line: print(line, flush=True), recorded=reused)
    device = env["device_name"]
    precision = configs[0].precision if configs else "fp32"
    by_class: dict[str, float] = {}
    for b in bills:
        for c, n in b.costs.flops_by_class.items():
            by_class[c] = by_class.get(c, 0.0) + n * b.steps
    for line in render(bills, options, device, accelerators(precision, by_class), checks_s):
        print(line)
    if options.until_decided:
        print(f"with --until-decided, the configurations of claims still open get more seeds, up to "
              f"--max-seeds {options.max_seeds}: at most {options.max_seeds / max(1, _seeds(configs)):.3g}x this bill")
    print(f"billed in {time.perf_counter() - t0:.0f} s")
    return Results(Path("."), spec.name, empty, empty, empty, [])


def _seeds(configs: Sequence[RunConfig]) -> int:
    """The fewest seeds a configuration of ``configs`` has."""
    per: dict[str, set[int]] = {}
    for cfg in configs:
        per.setdefault(cfg.config_hash(), set()).add(cfg.seed)
    return min((len(s) for s in per.values()), default=1)


def _keep_study_file(spec: Study, root: Path) -> None:
    """The study file travels with its results (``bench report`` reads its claims from there), and so do the plugin
    files it names that lie beside it (at the same relative paths, so the copy names them as the original did),
    with the content hash of every plugin it names (:func:`bench.analysis.studyfile.record_plugins`): a results
    folder imports none of them unless the user trusts them, and then only that code."""
    assert spec.path is not None
    stored = root / "studies" / f"{file_name(spec.name, 'study name')}.toml"
    _refuse_writing_through_link(stored)
    text = spec.path.read_text(encoding="utf-8")
    kept = keep_previous_study(stored, text)
    if kept is not None:
        print(f"note: {spec.path} differs from {stored}, the study file of the runs already in {root}; that copy is "
              f"kept as {kept} (a results folder's earlier runs stay reproducible), and {stored} is now this one")
    atomic_write_text(stored, text)
    here = spec.path.parent.resolve()
    files: dict[str, Path] = {}
    for plugin in spec.plugins:
        source = Path(plugin)
        if source.suffix == ".py" and source.is_file() and source.is_relative_to(here):
            relative = source.relative_to(here)
            target = root / "studies" / Path(*(file_name(part, "plugin file") for part in relative.parts))
            _refuse_writing_through_link(target, len(relative.parts) + 1)
            if target.resolve() != source:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
            files[relative.as_posix()] = target
    modules = [p for p in spec.plugins if not (p.endswith(".py") or "/" in p)]
    if spec.plugins:
        atomic_write_text(manifest_path(stored), json.dumps(record_plugins(files, modules), indent=1) + "\n")


def _refuse_writing_through_link(path: Path, levels: int = 2) -> None:
    """ValueError naming the symbolic link among ``path`` and its folders up to ``studies/`` (``levels`` of them), if
    any: a sweep writes no file of a results folder through a link, which could lead anywhere."""
    link = link_in(path, levels)
    if link is not None:
        raise ValueError(f"{link} is a symbolic link inside results folder {path.parents[levels - 2].parent}: a sweep "
                         f"writes its files there only as files of its own, never through a link (it could lead "
                         "anywhere); replace it with the folder or file itself")


def keep_previous_study(stored: Path, text: str) -> Path | None:
    """Where a stored study file that ``text`` is about to replace is kept: ``studies/previous/NAME-SHA12.toml``
    beside it (by its content's sha256, so two earlier versions never overwrite each other), or None where there is
    nothing to keep (no stored copy, or the same text)."""
    if not stored.is_file():
        return None
    old = stored.read_text(encoding="utf-8")
    if old == text:
        return None
    kept = stored.parent / "previous" / versioned(stored.stem, old.encode(), ".toml")
    if not kept.exists():
        atomic_write_text(kept, old)
    return kept


def load(results_dir: str | Path = DEFAULT_RESULTS, study: str | None = None) -> Results:
    """The :class:`Results` of ``results_dir`` (only ``study``'s runs with it: ValueError if it has none); a folder
    that does not exist is ValueError too (a mistyped path is not an empty folder)."""
    root = Path(results_dir)
    if not root.is_dir():
        raise ValueError(f"no results folder {root}" + (" (it is a file)" if root.exists() else ""))
    tables = {p.stem: pd.read_csv(p) for p in sorted((root / "analysis" / study).glob("*.csv"))} if study else {}
    try:
        frames = load_frames(results_dir, study)
    except ValueError:
        if not tables:
            raise
        empty = pd.DataFrame()  # a study of models at initialisation: its analysis and no runs
        return Results(root, study, empty, empty, empty, [], tables)
    ids = set(frames.leaderboard["run_id"])
    records = [r for r in ResultsStore(results_dir).load_runs() if r.get("run_id") in ids]
    return Results(root, study, frames.leaderboard, frames.curves, frames.probes, records, tables)


def track(results_dir: str | Path = DEFAULT_RESULTS, *, tracker: str | Sequence[str],
          tracker_uri: str | Sequence[str] = (), study: str | None = None, progress: bool = False) -> tuple[int, int]:
    """Log the runs already recorded in ``results_dir`` (only ``study``'s with it) to each ``tracker`` —
    ``python -m bench track``; returns (runs logged, tracker failures). A run logged before is replaced
    (TensorBoard) or skipped (MLflow), so tracking twice duplicates nothing."""
    trackers = make_trackers(tracker, tracker_uri, results_dir)
    if not trackers:
        raise ValueError("name a tracker: tensorboard or mlflow")
    runs = ResultsStore(results_dir).load_runs()
    if study is not None:
        studies = sorted({str(r.get("row", {}).get("study")) for r in runs if r.get("row", {}).get("study")})
        runs = [r for r in runs if r.get("row", {}).get("study") == study]
        if not runs:
            raise ValueError(f"no runs of study {study!r} in {results_dir}; studies: {studies}")
    failed = 0
    with Progress(len(runs), "tracking", enabled=progress, unit="runs") as bar:
        for i, run in enumerate(runs):
            failed += log_all(trackers, run, retry=f"python -m bench track --results-dir {results_dir}")
            bar.update(i + 1)
    return len(runs), failed


def compare(results: Results, baseline: str, metrics: Sequence[str] | None = None) -> pd.DataFrame:
    """Every configuration of ``results`` against the matching configuration of ``baseline`` — ``bench compare``:
    mean, CI and n per metric (default: each task's primary metric), the difference and its 95% CI (paired by seed
    where the runs pair, else Welch's; column ``test``), p and Holm's correction over the table. Where the runs are
    a scaling ladder (a compute budget per size), each design's row of the fitted loss gains its compute multiplier
    and steps-to-target ratio with their intervals (:mod:`bench.analysis.multiplier_columns`; ``.attrs`` says what
    they are, or why they are missing)."""
    board = with_derived(results.runs.drop(columns=["config"], errors="ignore"))
    chosen = list(metrics or primary_metrics(board))
    return with_multipliers(compare_table(board, results.records, baseline, chosen), board, results.records,
                            baseline, chosen)


def scaling_fit(results: Results, baseline: str, metric: str = "final_val_loss", *, fix_floor: bool = True,
                draws: int = BOOTSTRAP, where: Mapping[str, Any] | None = None) -> ScalingFit:
    """Each design's fitted L(C) = E + A·C^(−α) over its ladder of sizes and the compute multiplier against
    ``baseline`` — ``bench scaling-fit`` (:mod:`bench.analysis.multiplier`): ``.fits()`` (E, A, α, α − α_baseline
    with 95% bootstrap intervals over seeds) and ``.multipliers()`` (per design and size). E is held at the task's
    known floor where every run records one (``tinytext``'s entropy rate) unless ``fix_floor`` is False.
    ``where``: only runs with these leaderboard values. ValueError for a metric that is not a loss, a design with
    fewer than 3 sizes or sizes equal in compute, a baseline without runs."""
    check_metric(metric)
    board = results.runs
    for key, value in (where or {}).items():
        if key not in board.columns:
            raise ValueError(f"where: {key!r} is not a leaderboard column")
        board = board[board[key].astype(str) == str(value)]
    ladders = ladders_from(board, results.records, metric)
    return fit_ladders(ladders, baseline, floor_of(results.records) if fix_floor else None, draws=draws)


def cost(designs: Sequence[str], shape: str = "gpt2_small", *, measure_time: bool = True,
         compiled: bool | None = None, compile_mode: str = "default", batch: int | None = None, repeats: int = 3,
         device: str = "cpu", precision: str = "fp32", progress: bool = False, baseline: str | None = None,
         depth: int | None = None) -> pd.DataFrame:
    """What each design costs at a reference shape relative to a baseline — ``bench cost``: parameters
    and exact training FLOPs per sample (meta device), and with ``measure_time`` the step time and memory measured
    beside the baseline, alternating, eager and under ``torch.compile`` in ``compile_mode`` (``compiled`` None: on an
    accelerator), in fp32 or bf16 autocast (``precision``). Shapes: :data:`bench.runs.shapes.SHAPES` (``gpt2_small``,
    ``gpt2_medium``, ``resnet50_224``, ``study_quick``, ``cifar_resnet110``, ``digits``). Any registered variant
    that builds at the shape is a design (a plugin's too); ``baseline`` (default: the shape's) is what every ratio is
    relative to, timed once beside all of them; ``depth`` builds every model at that depth. ValueError naming the
    field for an unknown shape, precision, baseline, a depth out of range or a design that does not build there.
    The table's ``attrs`` say how it was timed (``threads``, the machine's ``load``, each design's per-round ratios in
    ``round_ratios``); :func:`bench.runs.cost.timing_notes` says it in words, with a warning where the rounds spread
    too widely for a ranking."""
    return cost_table(designs, shape, measure_time=measure_time, compiled=compiled, compile_mode=compile_mode,
                      batch=batch, repeats=repeats, device=device, precision=precision, progress=progress,
                      baseline=baseline, depth=depth)
