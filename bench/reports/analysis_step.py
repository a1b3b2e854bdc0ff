"""A study's analysis step and what its report says of it: the analysis (:mod:`bench.analysis.analyses`) run on
the study's runs, its tables written, its figure drawn (:mod:`bench.reports.analysis_figures`), and the report's
"Analysis" section with the verdicts of the claims about it.

The ``lesion``, ``gradcorr`` and ``landscape`` commands write and draw through the same :func:`draw`; what the report
and the site say of an analysis that has run is read by :mod:`bench.reports.analysis_summary` (without torch).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from bench.analysis import analyses
from bench.analysis.analyses import Output, label
from bench.analysis.options import check_options
from bench.reports.analysis_figures import plot_cost, plot_gradcorr, plot_landscape, plot_lesion
from bench.reports.plotdata import variant_key
from bench.reports.plots import Colour, palette_of
from bench.runs.env import environment
from bench.runs.names import file_name
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
