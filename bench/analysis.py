"""Why residual networks train, measured after (or instead of) training: the ``lesion``, ``gradcorr`` and
``landscape`` commands, and the step a study runs after its grid.

- ``lesion`` (:mod:`bench.lesion`; Veit et al. 2016): delete units of trained runs, one at a time and k at once.
- ``gradcorr`` (:mod:`bench.gradcorr`; Balduzzi et al. 2017): input-gradient correlation along a line of inputs,
  at initialisation — no training, no runs.
- ``landscape`` (:mod:`bench.landscape`; Li et al. 2018): the loss of trained runs on filter-normalised random
  directions through their weights.

Each writes a tidy CSV of everything it evaluated, a *summary* CSV (one row per model — per model and number of
deleted units for ``lesion`` — with the run's identifying fields), and a figure. A study names one of them in its
``[analysis]`` table (``kind`` and the options of :data:`OPTIONS`; a preset may override them in
``[presets.NAME.analysis]``); ``reproduce``/``sweep`` run it on the study's runs with an ok row (they keep a
checkpoint: ``save_checkpoint = true`` in ``[base]``), writing ``analysis/<study>/<kind>.csv``,
``analysis/<study>/<kind>-summary.csv`` and ``plots/<study>/<kind>*.png``, and the report checks the claims whose
``table`` is the analysis against the summary (:mod:`bench.claims`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

# Per kind: option -> (type of the value or of each list element, is it a list, default). Studies and commands
# share these defaults.
OPTIONS: dict[str, dict[str, tuple[type, bool, Any]]] = {
    "lesion": {"drop": (int, True, [1, 2, 4, 8, 16]), "draws": (int, False, 10), "batch_size": (int, False, 256),
               "seed": (int, False, 0)},
    "gradcorr": {"variants": (str, True, ["plain", "resnet", "preact"]), "depths": (int, True, [20, 56, 110]),
                 "seeds": (int, True, [0]), "task": (str, False, "digits"), "points": (int, False, 256),
                 "span": (float, False, 1.0), "max_lag": (int, False, 32)},
    "landscape": {"dims": (int, True, [1]), "points": (int, False, 21), "span": (float, False, 1.0),
                  "samples": (int, False, 512), "seed": (int, False, 0), "batch_size": (int, False, 256)},
}
# The fields of a run that identify it in an analysis's tables (and that claims filter on).
RUN_FIELDS = ("run_id", "variant", "depth", "task", "seed", "study", "init")


def check_options(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` (with ``kind``) validated and completed with the defaults; ValueError naming the problem."""
    kind = options.get("kind")
    if kind not in OPTIONS:
        raise ValueError(f"unknown analysis kind {kind!r}; kinds: {', '.join(OPTIONS)}")
    spec = OPTIONS[kind]
    unknown = sorted(set(options) - {"kind", *spec})
    if unknown:
        raise ValueError(f"unknown option(s) {unknown} for analysis {kind!r}; options: {', '.join(spec)}")
    out: dict[str, Any] = {"kind": kind}
    for name, (typ, is_list, default) in spec.items():
        value = options.get(name, default)
        items = value if is_list else [value]
        ok = isinstance(items, list) and bool(items) and all(_is(v, typ) for v in items)
        if not ok:
            what = f"a non-empty list of {typ.__name__}" if is_list else f"a{'n' if typ is int else ''} {typ.__name__}"
            raise ValueError(f"analysis {kind!r}: {name} must be {what}, got {value!r}")
        if typ is not str and any(v <= 0 for v in items) and name != "seed" and name != "seeds":
            raise ValueError(f"analysis {kind!r}: {name} must be > 0, got {value!r}")
        out[name] = list(value) if is_list else value
    return out


def _is(value: Any, typ: type) -> bool:
    """``value`` is of ``typ`` (an int counts as a float; a bool is neither)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, typ) or (typ is float and isinstance(value, int))


@dataclass
class Output:
    """What an analysis computed: tidy tables of every evaluation (by file-name suffix), the summary (claims
    read it), the figures."""

    tables: dict[str, pd.DataFrame]
    summary: pd.DataFrame
    figure_paths: list[Path]


def _run_fields(run: dict[str, Any]) -> dict[str, Any]:
    row = run.get("row", {})
    return {k: row.get(k, run.get("config", {}).get(k)) for k in RUN_FIELDS} | {"status": "ok"}


def _label(run: dict[str, Any], seed: bool = False) -> str:
    """``variant-depth`` (and `` s<seed>`` with ``seed``): the series of a figure."""
    row = run.get("row", {})
    depth = row.get("depth")
    has_depth = depth is not None and not (isinstance(depth, float) and math.isnan(depth))
    return f"{row.get('variant')}{f'-{int(depth)}' if has_depth else ''}" + (f" s{row.get('seed')}" if seed else "")


def run_lesion(results_dir: str | Path, run_ids: Sequence[str], figure: Path, *, drop: Sequence[int], draws: int,
               batch_size: int, seed: int, device: str = "cpu") -> Output:
    """:func:`bench.lesion.lesion` on each run's trained model (its checkpoint). The options' defaults are
    :data:`OPTIONS`' (the study loader and the CLI fill them in)."""
    from . import checkpoints, lesion, plugins

    trained = [checkpoints.load(results_dir, r, device) for r in run_ids]  # every bad id refused before any work
    tables, summaries = [], []
    labelled: dict[str, pd.DataFrame] = {}
    for t in trained:
        with plugins.blame(t.config.variant):
            table = lesion.lesion(t.model, t.task, drops=drop, draws=draws, seed=seed, batch_size=batch_size)
        fields = _run_fields(t.run)
        tables.append(table.assign(**fields))
        summaries.append(lesion.summary(table).assign(**fields))
        label = _label(t.run)
        labelled[label] = pd.concat([labelled[label], table]) if label in labelled else table  # seeds pooled
    paths = [lesion.plot(labelled, figure, "lesion study (Veit et al. 2016, Figs. 3 and 5)")]
    return Output({"": pd.concat(tables, ignore_index=True)}, pd.concat(summaries, ignore_index=True), paths)


def run_landscape(results_dir: str | Path, run_ids: Sequence[str], figure: Path, *, dims: Sequence[int], points: int,
                  span: float, samples: int, seed: int, batch_size: int, device: str = "cpu") -> Output:
    """Filter-normalised loss slices (:mod:`bench.landscape`) of each run's trained model, on the first ``samples``
    inputs of its task's fixed training subset (no augmentation), for each number of ``dims``."""
    from . import checkpoints, landscape

    trained = [checkpoints.load(results_dir, r, device) for r in run_ids]
    tables, summaries, paths = [], [], []
    for d in dims:
        frames = {}
        for t in trained:
            batches = _first_samples(t.task.train_eval_batches(batch_size), samples)
            dirs = landscape.directions(t.model, d, seed)
            frame = landscape.landscape(t.model, t.task.loss, batches, dirs, landscape.grid(points, span))
            fields = _run_fields(t.run) | {"dims": d}
            tables.append(frame.assign(**fields))
            summaries.append(pd.DataFrame([landscape.summary(frame) | fields]))
            frames[_label(t.run, seed=True)] = frame
        path = figure.with_name(f"{figure.stem}_{d}d{figure.suffix}")
        paths.append(landscape.plot_many(frames, path, title=f"loss landscape, {d}-D filter-normalised slice "
                                                                   "(Li et al. 2018)"))
    return Output({"": pd.concat(tables, ignore_index=True)}, pd.concat(summaries, ignore_index=True), paths)


def run_gradcorr(figure: Path, *, variants: Sequence[str], depths: Sequence[int], seeds: Sequence[int], task: str,
                 points: int, span: float, max_lag: int, study: str | None = None) -> Output:
    """Gradient correlation along a line of inputs (:mod:`bench.gradcorr`) of each (variant, depth, seed) at
    initialisation. Tables: the autocorrelation by lag (``-acf``) and the derivative along the line (``-series``)."""
    from . import gradcorr, plugins

    with plugins.blame(*variants):
        frames = gradcorr.measure_grid(list(variants), list(depths), list(seeds), task=task, points=points,
                                       span=span, max_lag=max_lag)
    paths = [gradcorr.plot(frames.summary, frames.acf, frames.series, figure)]
    tables = {"-acf": frames.acf.assign(study=study), "-series": frames.series.assign(study=study)}
    return Output(tables, frames.summary.assign(study=study, status="ok"), paths)


def _first_samples(batches: Any, n: int) -> list[Any]:
    out, seen = [], 0
    for x, y in batches:
        out.append((x[: n - seen], y[: n - seen]))
        seen += len(out[-1][0])
        if seen >= n:
            break
    return out


# -- where the files go ----------------------------------------------------------------------------------------


def write(output: Output, results_dir: str | Path, stem: str) -> list[Path]:
    """Write ``analysis/<stem><suffix>.csv`` per table and ``analysis/<stem>-summary.csv``; return their paths and
    the figures'."""
    from .results import atomic_write_text

    root = Path(results_dir) / "analysis"
    root.mkdir(parents=True, exist_ok=True)
    written = []
    for suffix, frame in [*output.tables.items(), ("-summary", output.summary)]:
        path = root / f"{stem}{suffix}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, frame.to_csv(index=False))
        written.append(path)
    return [*written, *output.figure_paths]


# -- a study's analysis step -----------------------------------------------------------------------------------


def for_study(name: str, options: dict[str, Any], results_dir: str | Path, run_ids: Sequence[str],
              preset: str | None = None) -> list[Path]:
    """Run a study's ``[analysis]`` (``options``, preset applied) on those of ``run_ids`` with an ok row (none for
    ``gradcorr``); write ``analysis/<study>/<kind>*.csv`` and ``plots/<study>/<kind>*.png``; return the paths."""
    from .results import ResultsStore, atomic_write_text

    opts = check_options(options)
    kind = opts.pop("kind")
    root = Path(results_dir)
    figure = root / "plots" / name / f"{kind}.png"
    if kind == "gradcorr":
        out = run_gradcorr(figure, study=name, **opts)
    else:
        board = ResultsStore(root).load_leaderboard()
        ok = set(board.loc[board["status"] == "ok", "run_id"]) if not board.empty else set()
        ids = [r for r in run_ids if r in ok]
        left = len(run_ids) - len(ids)
        if not ids:
            raise ValueError(f"study {name!r}: no run ended ok, nothing for its {kind} analysis")
        if left:
            print(f"{kind}: {left} run(s) without an ok row left out")
        run = run_lesion if kind == "lesion" else run_landscape
        out = run(root, ids, figure, **opts)
    paths = write(out, root, f"{name}/{kind}")
    atomic_write_text(root / "analysis" / name / "meta.json", json.dumps(_meta(preset), indent=1))
    return paths


def _meta(preset: str | None) -> dict[str, Any]:
    """Where and how a study's analysis ran (its preset for the report's reproduce command, and the environment a
    training run records: resbench's commit, torch, the CPU model, threads, ...) — the analyses run on the CPU."""
    import datetime

    import torch

    from .env import environment

    return {"preset": preset, **environment(torch.device("cpu")),
            "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def report_lines(results_dir: str | Path, study: str, runs: Sequence[dict[str, Any]] = ()) -> list[str]:
    """The report section of a study's analysis (none if it has none or it has not run): the summary over seeds,
    the figures, and the claims about it with their verdicts."""
    from .claims import TABLES, evaluate_claims, load_claims, study_file
    from .report import claim_lines, markdown_table
    from .stats import t_ci
    from .study import read_study_file

    root = Path(results_dir)
    path = study_file(root, study)
    options = read_study_file(path).get("analysis", {}) if path else {}
    kind = options.get("kind")
    summary_csv = root / "analysis" / study / f"{kind}-summary.csv"
    if not kind or not summary_csv.is_file():
        return []
    summary = pd.read_csv(summary_csv)
    metrics = TABLES[kind]
    by = [c for c in ("variant", "depth", "dims", "k") if c in summary]
    rows = []
    for key, g in summary.groupby(by, sort=True):
        cells = []
        for m in metrics:
            s = t_ci(g[m].to_numpy(dtype=float))
            cells.append("n/a" if s["n"] == 0 else f"{s['mean']:.4g}" + (f" ± {s['ci']:.2g}" if s["n"] > 1 else ""))
        rows.append([*(key if isinstance(key, tuple) else (key,)), *cells, len(g)])
    lines = [f"## Analysis: {kind}", "", f"Rows of `analysis/{study}/{kind}-summary.csv`, mean ± 95% CI half-width "
             "over seeds (n = models). Every evaluation is in the other CSVs of `analysis/" + study + "/`.", "",
             markdown_table([*by, *metrics, "n"], rows), ""]
    for fig in sorted((root / "plots" / study).glob(f"{kind}*.png")):
        lines.append(f"![{fig.stem}]({fig.relative_to(root).as_posix()})")
    lines.append("")
    claims = [c for c in load_claims(path) if c.table == kind] if path else []
    if claims:
        results = evaluate_claims(claims, summary, None, list(runs))
        lines += [f"### Claims about the {kind} analysis", "", *claim_lines(results), ""]
    return lines
