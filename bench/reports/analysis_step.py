"""A study's analysis step and what its report says of it: the analysis (:mod:`bench.analysis.analyses`) run on
the study's runs, its tables written, its figure drawn (:mod:`bench.reports.analysis_figures`), and the report's
"Analysis" section with the verdicts of the claims about it.

The ``lesion``, ``gradcorr`` and ``landscape`` commands write and draw through the same :func:`draw`.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from bench.analysis import analyses
from bench.analysis.analyses import Output, label
from bench.analysis.claims import TABLES, Result, evaluate_claims, parse_claims
from bench.analysis.options import check_options
from bench.analysis.stats import t_ci
from bench.analysis.studyfile import find_study, read_study_file
from bench.reports.analysis_figures import plot_cost, plot_gradcorr, plot_landscape, plot_lesion
from bench.reports.markdown import claim_lines, markdown_table, md
from bench.reports.plotdata import variant_key
from bench.reports.plots import Colour, palette_of
from bench.runs.env import environment
from bench.runs.names import file_name, problem
from bench.runs.results import ResultsStore, atomic_write_text


def _series(table: pd.DataFrame, seed: bool) -> dict[str, pd.DataFrame]:
    """The rows of ``table`` per figure series (:func:`bench.analysis.analyses.label`), in the order the runs came."""
    labels = [label(dict(zip(table.columns, row, strict=True)), seed) for row in table.itertuples(index=False)]
    keyed = table.assign(_label=labels)
    return {name: keyed[keyed["_label"] == name].drop(columns="_label") for name in dict.fromkeys(labels)}


def draw(output: Output, figure: Path, colours: Mapping[str, Colour] | None = None) -> list[Path]:
    """The figure(s) of ``output`` at ``figure`` (a landscape gets one per number of directions, ``<stem>_<d>d``),
    coloured by variant with ``colours`` (the study's palette, as in its other figures); returns their paths."""
    if output.kind == "lesion":  # seeds of one model pooled in one line
        return [plot_lesion(_series(output.tables[""], seed=False), figure,
                            "lesion study (Veit et al. 2016, Figs. 3 and 5)", colours)]
    if output.kind == "gradcorr":
        return [plot_gradcorr(output.summary, output.tables["-acf"], output.tables["-series"], figure, colours)]
    if output.kind == "cost":
        return [plot_cost(output.summary, figure, colours)]
    paths = []
    table = output.tables[""]
    for d in dict.fromkeys(table["dims"]):
        columns = ["alpha", *(["beta"] if d == 2 else []), "loss", *(["acc"] if "acc" in table else [])]
        series = _series(table[table["dims"] == d], seed=True)
        slices = {name: frame[columns] for name, frame in series.items()}
        kinds = {name: variant_key(str(frame["variant"].iloc[0])) for name, frame in series.items()}
        path = figure.with_name(f"{figure.stem}_{d}d{figure.suffix}")
        paths.append(plot_landscape(slices, path, title=f"loss landscape, {d}-D filter-normalised slice "
                                                        "(Li et al. 2018)", colours=colours, variants=kinds))
    return paths


def write_and_draw(output: Output, results_dir: str | Path, stem: str) -> list[Path]:
    """``analysis/<stem>*.csv`` and ``plots/<stem>*.png``; returns every path written."""
    root = Path(results_dir)
    return [*analyses.write(output, root, stem), *draw(output, root / "plots" / f"{stem}.png")]


def for_study(name: str, options: dict[str, Any], results_dir: str | Path, run_ids: Sequence[str],
              preset: str | None = None) -> list[Path]:
    """Run a study's ``[analysis]`` (``options``, preset applied) on those of ``run_ids`` with an ok row (none for
    ``gradcorr``); write ``analysis/<study>/<kind>*.csv``, ``plots/<study>/<kind>*.png`` and
    ``analysis/<study>/meta.json``; return the paths."""
    opts = check_options(options)
    kind = opts.pop("kind")
    root = Path(results_dir)
    file_name(name, "study")
    if kind == "gradcorr":
        out = analyses.run_gradcorr(study=name, **opts)
    elif kind == "cost":
        out = analyses.run_cost(study=name, **opts)
    else:
        board = ResultsStore(root).load_leaderboard()
        ok = set(board.loc[board["status"] == "ok", "run_id"]) if not board.empty else set()
        ids = [r for r in run_ids if r in ok]
        left = len(run_ids) - len(ids)
        if not ids:
            raise ValueError(f"study {name!r}: no run ended ok, nothing for its {kind} analysis")
        if left:
            print(f"{kind}: {left} run(s) without an ok row left out")
        run = analyses.run_lesion if kind == "lesion" else analyses.run_landscape
        out = run(root, ids, **opts)
    paths = analyses.write(out, root, f"{name}/{kind}")
    paths += draw(out, root / "plots" / name / f"{kind}.png", _study_palette(root, name))
    atomic_write_text(root / "analysis" / name / "meta.json", json.dumps(_meta(preset), indent=1))
    return paths


def _study_palette(root: Path, study: str) -> dict[str, Colour] | None:
    """The colours of the study's other figures (:func:`bench.reports.plots.palette_of` its runs), None without
    runs (a study of models at initialisation: the figure's own variants then)."""
    board = ResultsStore(root).load_leaderboard()
    rows = board[board["study"] == study] if not board.empty else board
    return palette_of(rows) if len(rows) else None


def _meta(preset: str | None) -> dict[str, Any]:
    """Where and how a study's analysis ran (its preset for the report's reproduce command, and the environment a
    training run records: resbench's commit, torch, the CPU model, threads, ...) — the analyses run on the CPU."""
    return {"preset": preset, **environment(torch.device("cpu")),
            "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


@dataclass(frozen=True)
class Summary:
    """A study's analysis as its report and its site page show it: the rows of ``<kind>-summary.csv`` per model
    (mean ± 95% CI half-width over seeds, as text), its figures, and the verdicts of the claims about it."""

    kind: str
    source: str  # the summary CSV, relative to the results folder
    headers: list[str]
    rows: list[list[Any]]
    figures: list[Path]
    results: list[Result]


def summary_of(results_dir: str | Path, study: str, runs: Sequence[dict[str, Any]] = ()) -> Summary | None:
    """The :class:`Summary` of ``study``'s analysis, None if it declares none or it has not run."""
    root = Path(results_dir)
    if problem(study) is not None:  # a study name no file of this folder can have
        return None
    try:
        path: Path | None = find_study(study, root)
    except ValueError:
        path = None
    data = read_study_file(path) if path else {}
    kind = data.get("analysis", {}).get("kind")
    summary_csv = root / "analysis" / study / f"{kind}-summary.csv"
    if not kind or not summary_csv.is_file():
        return None
    summary = pd.read_csv(summary_csv)
    metrics = TABLES[kind]
    by = [c for c in ("variant", "depth", "dims", "k", "shape", "mode") if c in summary]
    rows = []
    for key, g in summary.groupby(by, sort=True):
        cells = []
        for m in metrics:
            s = t_ci(g[m].to_numpy(dtype=float))
            cells.append("n/a" if s["n"] == 0 else f"{s['mean']:.4g}" + (f" ± {s['ci']:.2g}" if s["n"] > 1 else ""))
        rows.append([*(key if isinstance(key, tuple) else (key,)), *cells, len(g)])
    claims = [c for c in parse_claims(data.get("claims", []), str(path)) if c.table == kind]
    return Summary(kind, summary_csv.relative_to(root).as_posix(), [*by, *metrics, "n"], rows,
                   sorted((root / "plots" / study).glob(f"{kind}*.png")),
                   evaluate_claims(claims, summary, None, list(runs)) if claims else [])


def report_lines(results_dir: str | Path, study: str, runs: Sequence[dict[str, Any]] = ()) -> list[str]:
    """The report section of a study's analysis (none if it has none or it has not run): the summary over seeds,
    the figures, and the claims about it with their verdicts."""
    root = Path(results_dir)
    made = summary_of(root, study, runs)
    if made is None:
        return []
    over = ("over the timed rounds (n = rounds; each overhead a fraction of the baseline's, timed beside it in the "
            "same round)" if made.kind == "cost" else "over seeds (n = models). Every evaluation is in the other "
            f"CSVs of `analysis/{study}/`")
    lines = [f"## Analysis: {made.kind}", "", f"Rows of `{made.source}`, mean ± 95% CI half-width {over}.", "",
             markdown_table(made.headers, made.rows), ""]
    lines += [f"![{md(fig.stem)}]({md(fig.relative_to(root).as_posix())})" for fig in made.figures]
    lines.append("")
    if made.results:
        lines += [f"### Claims about the {made.kind} analysis", "", *claim_lines(made.results), ""]
    return lines
