"""resbench from Python (a notebook, a script): what the CLI does, through the same code.

    import bench

    run = bench.run("preln", task="tinytext", depth=6, steps=200, batch_size=16, seq_len=32, optimizer="adamw",
                    lr=1e-3, model_args={"d_model": 64}, results_dir="results")
    run.row["final_val_loss"], run.curves.head()            # the leaderboard row, tidy curves
    res = bench.sweep("frontier", preset="smoke", jobs=2)   # a shipped study or a study file (4 tiny runs)
    res = bench.load("results", study="frontier")           # .runs, .curves, .probes: tidy pandas frames
    bench.compare(res, baseline="preln", metrics=["final_val_loss"])  # Welch tests against it, Holm-corrected

Keyword arguments of :func:`run` are the fields of :class:`bench.config.RunConfig` (``python -m bench run --help``
documents each); lists and dicts are accepted where the CLI takes several values (``betas``, ``milestones``,
``measure``, ``model_args``). Bad input raises ``ValueError`` with the CLI's message and writes nothing. The
functions and the fields of :class:`Run` and :class:`Results` are the stable API; the modules behind them are not.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the CLI imports this module; torch and pandas load only when a function runs
    import pandas as pd

    from .config import RunConfig

DEFAULT_RESULTS = os.environ.get("RESBENCH_RESULTS", "results")
_SEQUENCES = ("betas", "milestones", "measure")


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
        from .plotdata import curves_frame

        return curves_frame([self.record])

    @property
    def probes(self) -> pd.DataFrame:
        """Tidy per-layer probes: ``step``, ``layer``, ``block``, ``kind``, ``metric``, ``value``."""
        from .plotdata import probes_frame

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
    # The tables of the study's analysis (lesion, gradcorr, landscape; bench.analysis) by file stem, e.g.
    # ``analysis["lesion-summary"]``; empty without one.
    analysis: Mapping[str, pd.DataFrame] = field(default_factory=dict, repr=False)

    def leaderboard(self, metrics: Sequence[str] | None = None) -> pd.DataFrame:
        """One row per configuration (seeds pooled, nothing else): ``<metric>_{mean,std,n,ci,ci_low,ci_high,median}``
        for each metric (default: the CLI leaderboard's), as ``bench leaderboard --csv`` writes it."""
        from .cli import LEADERBOARD_METRICS
        from .stats import aggregate, by_configuration

        named, by = by_configuration(self.runs, self.records)
        return aggregate(named, by=by, metrics=list(metrics or LEADERBOARD_METRICS))


def config(variant: str | None = None, **fields: Any) -> RunConfig:
    """A validated :class:`~bench.config.RunConfig` from keyword arguments (lists/dicts accepted)."""
    from .config import RunConfig

    if variant is not None:
        fields["variant"] = variant
    for name in _SEQUENCES:
        if name in fields and not isinstance(fields[name], tuple):
            fields[name] = tuple(fields[name])
    args = fields.get("model_args")
    if isinstance(args, Mapping):
        fields["model_args"] = tuple(args.items())
    elif args is not None:
        fields["model_args"] = tuple(tuple(pair) for pair in args)
    return RunConfig(**fields)


def run(variant: str | None = None, *, results_dir: str | Path = DEFAULT_RESULTS, progress: bool = False,
        tracker: str | Sequence[str] = (), tracker_uri: str | Sequence[str] = (), cfg: RunConfig | None = None,
        **fields: Any) -> Run:
    """Train ``variant`` once with ``fields`` (RunConfig's; or a ready ``cfg``), record its row and JSON in
    ``results_dir``, return the :class:`Run` — ``python -m bench run``. A failed run (diverged, OOM, error) is
    recorded and returned with its ``status``; bad input raises ValueError before anything is written.
    ``tracker`` ("tensorboard", "mlflow" or both) also logs the run there (:mod:`bench.trackers`)."""
    from .runner import execute
    from .trackers import make_trackers

    cfg = cfg if cfg is not None else config(variant, **fields)
    trackers = make_trackers(tracker, tracker_uri, results_dir)
    return Run(execute(cfg, results_dir, progress=progress, trackers=trackers), Path(results_dir))


def study_file(study: str | Path) -> Path:
    """A shipped study's file by name (``degradation``), or the path of a study file of your own."""
    from .study import study_path

    path = Path(study)
    return path if path.suffix == ".toml" or path.exists() else study_path(str(study))


def sweep(study: str | Path, *, preset: str | None = None, executor: str = "local", jobs: int = 1,
          gpus_per_run: int = 1, results_dir: str | Path = DEFAULT_RESULTS, resume: bool = True,
          measure_every_run: bool = False, add_variants: Iterable[str] = (), progress: bool = True,
          report: bool = False, tracker: str | Sequence[str] = (), tracker_uri: str | Sequence[str] = (),
          command: str | None = None, verb: str = "study", address: str | None = None, cpus_per_run: int = 1,
          retries: int = 0) -> Results:
    """Run a study's grid (``preset`` applied) — ``python -m bench sweep``, or ``reproduce`` with ``report=True``
    (the figures and ``REPORT.md`` too) — and return its :class:`Results`. The grid is validated and checked for
    confounds before the first run (ValueError); each run executes in a process of its own, ``jobs`` at a time,
    and is logged to each ``tracker`` as it is recorded."""
    from .executors import check_options, make_executor, prestart
    from .results import ResultsStore, atomic_write_text
    from .study import load_study, run_sweep
    from .trackers import make_trackers

    path = study_file(study)
    check_options(executor, jobs, gpus_per_run, address, cpus_per_run, retries)
    prestart(executor)
    spec = load_study(path).with_variants(list(add_variants))
    configs = spec.configs(preset)  # validated, checked for confounds, plugins run forward: before anything runs
    runner = make_executor(executor, configs, jobs=jobs, gpus_per_run=gpus_per_run, address=address,
                           cpus_per_run=cpus_per_run, retries=retries)  # starts nothing (Ray connects at the first run)
    store = ResultsStore(results_dir)
    store.preflight()
    trackers = make_trackers(tracker, tracker_uri, results_dir)
    # The study file travels with its results: `bench report` reads its claims from there.
    atomic_write_text(store.root / "studies" / f"{spec.name}.toml", path.read_text(encoding="utf-8"))
    added = f" with {', '.join(spec.added)} added" if spec.added else ""
    slots = f", {runner.slots} at a time" if runner.slots > 1 else ""
    print(f"{verb} {spec.name!r} ({preset or 'full'}){added}: {len(configs)} runs{slots} -> {results_dir}")
    if configs:
        run_sweep(configs, results_dir, runner, resume=resume, measure_every_run=measure_every_run,
                  progress=progress, command=command or f"python -m bench sweep {path} --results-dir {results_dir}",
                  trackers=trackers)
    if spec.analysis:  # what the study measures on its trained runs (or, with no grid, on models at init)
        from .analysis import for_study

        kind = spec.analysis["kind"]
        print(f"{kind} analysis of study {spec.name!r}:", flush=True)
        for written in for_study(spec.name, spec.analysis_options(preset), results_dir,
                                 [c.run_id for c in configs], preset):
            print(f"  {written}")
    if report:
        from .report import write_report

        print(write_report(results_dir, spec.name))  # draws the figures too
    return load(results_dir, spec.name)


def load(results_dir: str | Path = DEFAULT_RESULTS, study: str | None = None) -> Results:
    """The :class:`Results` of ``results_dir`` (only ``study``'s runs with it: ValueError if it has none)."""
    import pandas as pd

    from .plotdata import load_frames
    from .results import ResultsStore

    root = Path(results_dir)
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
    from .progress import Progress
    from .results import ResultsStore
    from .trackers import log_all, make_trackers

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


def compare(results: Results, baseline: str, metrics: Sequence[str] = ("final_val_loss",)) -> pd.DataFrame:
    """Every configuration of ``results`` against the matching configuration of ``baseline`` — ``bench compare``:
    mean, CI and n per metric, the difference, Welch's p and Holm's correction over the table."""
    from .comparison import compare_table

    board = results.runs.drop(columns=["config"], errors="ignore")
    return compare_table(board, results.records, baseline, list(metrics))
