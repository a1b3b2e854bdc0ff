"""What the report and the site say of a study's analysis once it has run (:mod:`bench.reports.analysis_step` runs
it): the summary over seeds of ``analysis/<study>/<kind>-summary.csv``, its figures, and the verdicts of the claims
about it. Reading them needs neither torch nor the variant modules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from bench.analysis.claims import TABLES, Result, evaluate_claims, parse_claims
from bench.analysis.stats import t_ci
from bench.analysis.studyfile import NoStudy, find_study, read_study_file
from bench.reports.markdown import claim_lines, markdown_table, md
from bench.runs.names import problem


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
    except NoStudy:
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
