"""``REPORT.md``: the aggregated leaderboard, the figures, and each study's declared paper claims against our numbers.

The claims are data: each study file (``bench/studies/<name>.toml``, or the copy a sweep left in
``<results_dir>/studies/``) declares them, and :mod:`bench.analysis.claims` evaluates any of them by fixed, stated
rules; this module only renders the verdicts (agrees / DISAGREES / inconclusive), whichever way they go.
Where a difference is larger than the claim's margin but inside the seed spread, the verdict is
*inconclusive*: with three seeds a 95% CI is wide, and we say so rather than guess.

Rows of the leaderboard table are configurations (everything but the seed, :mod:`bench.analysis.stats`); the
configuration fields that differ between them are its columns.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from bench.analysis.claims import Result
from bench.analysis.sequential import Looks
from bench.analysis.stats import (
    CONFIG_KEY,
    EQUAL,
    EXACT,
    MACHINE_KEY,
    PAIRED,
    WELCH,
    aggregate_long,
    by_configuration,
    cost_by_band,
    group_keys,
    load_bands,
    machines_of,
    several_machines,
    targeted,
    with_derived,
)
from bench.analysis.studyfile import NoStudy, find_study, is_shipped
from bench.analysis.timed import TIMED, band_spread, cost_command, shows_timed_difference
from bench.analysis.timed import note as once_note
from bench.reports import plots
from bench.reports import scaling as scaling_report
from bench.reports.analysis_summary import report_lines
from bench.reports.forest import study_results
from bench.reports.markdown import MISSING, claim_lines, fenced, fmt_number, markdown_table, md, tally
from bench.reports.reproduce import run_commands, study_commands
from bench.runs.names import file_name
from bench.runs.primary import primaries
from bench.runs.reading import read_runs
from bench.runs.results import atomic_write_bytes, atomic_write_text, check_writable
from bench.runs.schema import COST_COLUMNS

FIGURE_NOTE = (
    "Lines: mean over seeds. Bands and error bars: 95% Student-t CI of that mean, clipped to the metric's "
    "valid range (accuracy and error in [0, 1]; loss, throughput, memory and gradient norm ≥ 0) — with 3 "
    "seeds the unclipped interval often leaves it. On a log axis a band that runs off the bottom edge has a "
    "CI that reaches 0. Colour = variant, one colour per variant in every figure of these runs; line style "
    "(or marker) = the rest of the configuration (depth, warm-up, and any field that differs between the runs, "
    "such as steps or learning rate). Training loss and gradient norms use a log scale; gaps in a curve are "
    "non-finite losses. A y axis follows the bulk of its values: a point far outside it (a loss spike) is a "
    "triangle on the edge, and the axis label says how many there are."
)
CLAIMS_NOTE = (
    "Each study file declares its claims — metric, groups, expected direction, margin, paper and figure — and "
    "they are checked by the rules of `bench.analysis.claims`. Two groups whose configurations differ in the compared "
    "field alone and share seeds are compared **paired by seed**: a seed fixes the initialisation and the data order "
    "for every design, so the per-seed differences are what the claim is about; their mean and its 95% t interval "
    "[lo, hi] over the n seeds both ran (with few pairs also the exact sign-flip p, whose floor is 2/2ⁿ). Other "
    "groups (other seeds, or a confound such as an init that comes with a variant) get the difference of their means "
    "and its 95% Welch interval. Each verdict names its test and n. A leaderboard metric counts the `ok` runs, a "
    "probe quantity every run that recorded it. *Greater* agrees when lo > margin and disagrees when hi ≤ margin; "
    "*not greater* (non-inferiority) agrees when hi ≤ margin and disagrees when lo > margin; *similar* "
    "(equivalence) agrees only when the whole interval lies inside ±margin and disagrees when it lies wholly "
    "outside; anything else, or a group with fewer than two counted runs, is *inconclusive*: a wide interval "
    "never reads as agreement. A run that ended at its task's chance loss is `failed_to_learn`; a group whose "
    "every run failed (diverged, failed to learn, out of memory, error) while the other trained counts as the "
    "worse one, and two such groups never agree. A slope agrees when its 95% CI lies inside the expected range "
    "and disagrees when it lies entirely outside. Runs are never pooled across configurations: where a claim's "
    "runs differ in more than the compared field, each configuration gets its own verdict."
)
# The columns that always name a table row; configuration fields that differ between rows are added after them.
ROW_COLUMNS = ("variant", "depth", "task")
# (column, header, scale, format) of the leaderboard table, by the task's primary metric (bench.runs.primary):
# a classifier's error, a language model's loss, first.
TABLE_METRICS: dict[str, tuple[tuple[str, str, float, str], ...]] = {
    "val_error": (
        ("val_error", "val error (%)", 100.0, ".2f"),
        ("train_error", "train error (%)", 100.0, ".2f"),
        ("final_train_loss", "train loss", 1.0, ".4f"),
        ("train_samples_per_s", "samples/s", 1.0, ".0f"),
        ("peak_mem_mb", "peak MiB", 1.0, ".1f"),
    ),
    "final_val_loss": (
        ("final_val_loss", "val loss (nats)", 1.0, ".4f"),
        ("final_train_loss", "train loss (nats)", 1.0, ".4f"),
        ("train_tokens_per_s", "tokens/s", 1.0, ".0f"),
        ("peak_mem_mb", "peak MiB", 1.0, ".1f"),
    ),
}


def table_metrics(board: pd.DataFrame) -> list[tuple[str, str, float, str]]:
    """The leaderboard table's columns for the tasks of ``board``: each primary metric's, in order, once."""
    out = {m[0]: m for p in primaries(board["task"]) for m in TABLE_METRICS.get(p.final, ())}
    return list(out.values()) or list(TABLE_METRICS["val_error"])


def _stat_cell(s: pd.Series, scale: float, fmt: str) -> str:
    """``mean ± std (±CI)``: std over seeds (ddof=1), CI = 95% t half-width; one run: ``mean (n=1)``."""
    if s["n"] == 0:
        return MISSING
    if s["n"] == 1:
        return f"{fmt_number(s['mean'] * scale, fmt)} (n=1)"
    mean, std, ci = (fmt_number(s[k] * scale, fmt) for k in ("mean", "std", "ci"))
    return f"{mean} ± {std} (±{ci})"


def _cost_cell(s: pd.Series, scale: float, fmt: str) -> str:
    """A cost figure's pooled cell: :func:`_stat_cell`, with the number of measurements it rests on where that is not
    the row's number of runs (seeds that reused another run's figure add none): ``mean ± std (±CI, n=k)``."""
    cell = _stat_cell(s, scale, fmt)
    if s["n"] < 2 or s["n"] == s["n_runs"]:
        return cell
    return f"{cell[:-1]}, n={int(s['n'])})"


def _band_cell(s: Mapping[str, float], scale: float, fmt: str, band: str) -> str:
    """One load band's part of a cost cell: ``mean (n=1, band)`` or ``mean ± std (±CI, n=k, band)``."""
    if s["n"] == 1:
        return f"{fmt_number(s['mean'] * scale, fmt)} (n=1, {band})"
    mean, std, ci = (fmt_number(s[k] * scale, fmt) for k in ("mean", "std", "ci"))
    return f"{mean} ± {std} (±{ci}, n={int(s['n'])}, {band})"


def _metric_cell(s: pd.Series, split: Sequence[tuple[str, Mapping[str, float]]], scale: float, fmt: str) -> str:
    """The row's pooled cell ``s``, or where its cost figures span load bands (``split``) each band's, ``; ``-joined."""
    if split:
        return "; ".join(_band_cell(b, scale, fmt, band) for band, b in split)
    return _cost_cell(s, scale, fmt) if s.name in COST_COLUMNS else _stat_cell(s, scale, fmt)


def _targeted(board: pd.DataFrame) -> pd.Series:
    """Per row: did its run set a target (:func:`bench.analysis.stats.targeted`; no, where none is recorded)?"""
    found = targeted(board)
    return pd.Series(False, index=board.index) if found is None else found


class Table(str):
    """A table's Markdown, and what its cells show that the text around it must say: ``split_bands`` (some cost cell
    lists each load band's figure) and ``timed_difference`` (timed cost cells of two designs or more sit side by side, a
    difference between separate runs' timings: :func:`bench.analysis.timed.shows_timed_difference`)."""

    split_bands = False
    timed_difference = False


def _timings(s: pd.Series, split: Sequence[tuple[str, Mapping[str, float]]]) -> float:
    """How many timings a timed cell (its pooled statistics ``s``, or each band's) rests on."""
    return float(sum(b["n"] for _, b in split)) if split else float(s["n"])


def leaderboard_table(board: pd.DataFrame, runs: Sequence[Mapping[str, Any]] | None = None) -> Table:
    """The aggregated leaderboard: one row per configuration (seeds pooled, nothing else; rules: bench.analysis.stats).

    Rows are named by variant, depth, task and every configuration field that differs between them
    (:func:`bench.analysis.stats.differing_fields`, from the leaderboard and the run JSONs ``runs``); if two rows
    would still look alike (a difference recorded nowhere but in the config hash), the hash is shown too. The
    steps-to-target column is there only when some run set a target (:func:`_targeted`); a row none of whose runs
    set one reads ``no target``. A cost cell of a configuration whose figures were measured in several load bands
    shows each band's figure, never their average (:func:`bench.analysis.stats.cost_by_band`). The Markdown comes as a
    :class:`Table` saying whether a cell was split so, and whether timed cells of several designs sit side by side.
    """
    columns = table_metrics(board)
    named, by = by_configuration(with_derived(board), runs, ROW_COLUMNS)
    named = named.assign(_targeted=_targeted(named))
    bands = load_bands(named, runs)
    with_target = bool(named["_targeted"].any())
    if several_machines(named):  # cost cells per machine: a row per configuration and machine
        named, by = named.assign(**{MACHINE_KEY: machines_of(named)}), [*by, MACHINE_KEY]
    metrics = [m for m, *_ in columns]
    agg = aggregate_long(named, by=by, metrics=[*metrics, "steps_to_target"])
    keys = group_keys(agg, by)
    configs = agg.drop_duplicates(keys)
    shown = [*by, CONFIG_KEY] if CONFIG_KEY in keys and configs[by].astype(str).duplicated().any() else by
    parts = [part for _, part in named.groupby(keys, sort=True, dropna=False)]
    rows, split_bands = [], False
    timings: dict[str, dict[str, float]] = {}  # per timed metric, per design: the most timings a cell of it rests on
    for (_, g), part in zip(agg.groupby(keys, sort=True, dropna=False), parts, strict=True):
        g, targeted = g.set_index("metric"), bool(part["_targeted"].any())
        first = g.iloc[0]
        runs_cell = f"{int(first['n_runs'] - first['n_failed'])}/{int(first['n_runs'])}"
        cells = [_value(first[c]) for c in shown]
        splits = {m: cost_by_band(part, m, bands.loc[part.index]) for m, *_ in columns}
        stats = [_metric_cell(g.loc[m], splits[m], sc, f) for m, _, sc, f in columns]
        split_bands = split_bands or any(splits.values())
        for m in (m for m in splits if m in TIMED):
            seen = timings.setdefault(m, {})
            seen[str(first["variant"])] = max(seen.get(str(first["variant"]), 0.0), _timings(g.loc[m], splits[m]))
        row = [*cells, runs_cell, *stats]
        if with_target:
            target = g.loc["steps_to_target"]
            reached = f"{fmt_number(target['median'], '.0f')} ({int(target['n'])}/{int(target['n_runs'])})"
            row.append(reached if targeted else "no target")
        rows.append(row)
    headers = [*shown, "ok/runs", *(h for _, h, *_ in columns)]
    table = Table(markdown_table([*headers, *(["steps→target (reached)"] if with_target else [])], rows))
    table.split_bands = split_bands
    table.timed_difference = any(shows_timed_difference(m, seen.values()) for m, seen in timings.items())
    return table


def timed_note(board: pd.DataFrame, runs: Sequence[Mapping[str, Any]] | None) -> str:
    """The line under a leaderboard showing timed cells of several designs: the one ``bench compare`` prints
    (:func:`bench.analysis.timed.note`), at the depths of ``board``. Its example spread is of a timed figure the
    table shows, named by its column's header (``samples/s``), never of one the reader cannot find in it."""
    depths = board["depth"].dropna().unique().tolist() if "depth" in board.columns else []
    tasks = board["task"].dropna().unique().tolist() if "task" in board.columns else []
    headers = {m: h for m, h, *_ in table_metrics(board) if m in TIMED}
    spread = band_spread(board, runs, list(headers))
    shown = replace(spread, metric=headers[spread.metric]) if spread is not None else None
    return once_note(shown, cost_command(depths=depths, tasks=tasks))


def has_target(board: pd.DataFrame) -> bool:
    """Whether any run of ``board`` set a target (and the leaderboard shows steps to it)."""
    return bool(_targeted(board).any())


def _value(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return MISSING
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def _shown_path(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return f"bench/studies/{path.name}" if is_shipped(path) else path.as_posix()


def _study_path(root: Path, name: str) -> Path | None:
    """The study file of ``name``'s runs (the copy its sweep left in ``root``, else the shipped one), or None."""
    try:
        return find_study(name, root)
    except NoStudy:
        return None


def study_claims(
    board: pd.DataFrame, probes: pd.DataFrame, runs: Sequence[Mapping[str, Any]], root: Path, name: str
) -> tuple[Path | None, list[Result]]:
    """The study file of ``name``'s runs (None when there is none) and its leaderboard claims' verdicts on the runs
    of ``board`` in that study (the analyses' claims have their own section: :mod:`bench.reports.analysis_step`)."""
    path, results, _ = study_results(root, name, board, probes, runs)
    return path, results


def _looks_lines(looks: Looks, results: Sequence[Result]) -> list[str]:
    """What a study run ``--until-decided`` says about its looks: the rule, each round, and the look each verdict
    was decided at."""
    rounds = "; ".join(f"round {r['round']}: {r['runs']} run(s) to {r['seeds']} seeds, {r['open']} verdict(s) then "
                       "open" for r in looks.rounds)
    decided = [r for r in results if r.claim.kind == "compare" and r.test]
    at = {k: sum(looks.look(r.compared) == k and r.verdict != "inconclusive" for r in decided)
          for k in range(1, len(looks.seeds) + 1)}
    return [f"This study was run with `--until-decided`: seeds added in rounds to the configurations of the claims "
            f"still open, judged at {len(looks.seeds)} looks fixed in advance ({', '.join(map(str, looks.seeds))} "
            f"seeds), each interval at {100 * looks.level:.4g}% (α = {looks.alpha:g} shared by the looks, Bonferroni; "
            "`bench.analysis.sequential`). Decided at look 1, 2, ...: "
            + ", ".join(f"{n}" for n in at.values()) + f"; {sum(r.verdict == 'inconclusive' for r in decided)} still "
            "open." + (f" Rounds: {rounds}." if rounds else ""), ""]


def _claims_section(
    board: pd.DataFrame, probes: pd.DataFrame, runs: Sequence[Mapping[str, Any]], root: Path, study: str | None
) -> list[str]:
    """The section "Paper claims vs measured": the declared claims of every study of these runs, evaluated."""
    names = [study] if study else sorted(str(s) for s in board["study"].dropna().unique())
    body: list[str] = []
    for name in names:
        path, results, looks = study_results(root, name, board, probes, runs)
        if path is None or not results:
            continue
        counted = tally(results)
        tests = ", ".join(f"{sum(r.test == t for r in results)} {t}" for t in (PAIRED, WELCH, EXACT, EQUAL)
                          if any(r.test == t for r in results))
        # code spans: a study's name is a safe file name (bench.runs.names), so nothing in it closes the span
        body += [f"### Study `{name}`", "", f"Claims declared in `{_shown_path(path, root)}`; verdicts: {counted}"
                 f"{f' ({tests})' if tests else ''}.", "", *(_looks_lines(looks, results) if looks else []),
                 *claim_lines(results, looks), ""]  # fmt: skip
    return ["## Paper claims vs measured", "", CLAIMS_NOTE, "", *body] if body else []


def _study_command(name: str, preset: str | None, root: Path, runs: Sequence[Mapping[str, Any]]) -> str:
    """The commands that rerun a study's runs made under ``preset``, one a line (:mod:`bench.reports.reproduce`)."""
    return "\n".join(study_commands(name, preset, root, runs))


def _provenance(board: pd.DataFrame, results_dir: Path, study: str | None) -> list[str]:
    flag = f" --study {study}" if study else ""
    out = [
        "## How this was produced",
        "",
        f"This report: `python -m bench report --results-dir {results_dir}{flag}` "
        f"(figures: `python -m bench plot --results-dir {results_dir}{flag}`), from {len(board)} runs in "
        "`leaderboard.csv`. The runs (each run's full config, environment, curves and probes are in "
        "`runs/<run_id>.json`; options not shown here are the recipe defaults recorded there):",
        "",
        *fenced(run_commands(board, results_dir), "sh"),
        "",
    ]
    for col, name in (("torch_version", "torch"), ("device_name", "devices"), ("machine", "machines"),
                      ("git_sha", "git commits")):
        values = sorted(str(v) for v in board[col].dropna().unique())
        out.append(f"- {name}: {md(', '.join(values)) if values else 'unrecorded'}")
    return [*out, ""]


def _measured_at(runs: list[dict[str, Any]]) -> str:
    """The scale the speed and memory columns were measured at (model width, batch, device), so that no reader takes
    a toy width's cost for a design's cost; empty when the runs record none of it."""
    def values(get: Callable[[dict[str, Any]], Any]) -> str:
        found = {get(r) for r in runs} - {None}
        try:
            ordered = sorted(found)
        except TypeError:  # mixed kinds: by their text
            ordered = sorted(found, key=str)
        return ", ".join(map(str, ordered))

    parts = [f"{label} {v}" for label, v in (
        ("d_model", values(lambda r: (r.get("model_kwargs") or {}).get("d_model"))),
        ("batch", values(lambda r: (r.get("config") or {}).get("batch_size"))),
    ) if v]
    devices = values(lambda r: (r.get("env") or {}).get("device_name"))
    if not parts and not devices:
        return ""
    where = md("; ".join(parts) + (f" on {devices}" if devices else ""))
    return (f" samples/s and peak MiB were measured at these runs' scale ({where.strip()}), where per-op overhead "
            "weighs more than at a paper's width; `python -m bench cost` measures a design's cost at a paper's shape.")


def write_report(results_dir: str | Path, study: str | None = None, workers: int = 1, cached: bool = True
                 ) -> Path:
    """Write ``results_dir/REPORT.md`` (figures under ``plots/``) and the tidy probe table ``probes.csv.gz``.

    With ``study``, only that study's runs: ``REPORT-<study>.md``, ``plots/<study>/`` and
    ``probes-<study>.csv.gz``, so several studies can share one results directory. ``workers`` processes draw the
    figures (:func:`bench.reports.plots.make_all`; ``cached``: only those whose data or drawing code changed).
    """
    root = Path(results_dir)
    if study is not None:
        file_name(study, "study")  # it names REPORT-<study>.md, plots/<study>/ and probes-<study>.csv.gz
    check_writable(root, "results directory", "--results-dir")  # before any figure is drawn
    try:
        frames = plots.load_frames(root, study)
    except ValueError:
        if study and (root / "analysis" / study).is_dir():  # a study that measures models at init: no runs
            return _analysis_only_report(root, study)
        raise
    board = frames.leaderboard
    if board.empty:
        return _analysis_only_report(root, study)
    ids = set(board["run_id"])
    runs = read_runs(root, ids)
    figures = plots.make_all(root, study, workers, cached)
    table = leaderboard_table(board, runs)
    title = f"# resbench report{f' — study {study}' if study else ''}"
    lines = [
        title,
        "",
        *_provenance(board, root, study),
        "## Leaderboard",
        "",
        "Cells: mean ± std over seeds (±95% CI half-width, Student t); `(n=1)` = a single run, no spread. "
        "Only runs with status `ok` count; `ok/runs` shows how many did. Cost figures (samples/s, memory) count once "
        "per measurement, not per seed: a seed that reused another run's figure adds none, and a cost cell resting on "
        "fewer measurements than its row's runs says how many (`n=2`)." + _measured_at(runs)
        + (" A configuration whose cost figures were measured in several bands of machine load (load per CPU) "
           "shows each band's figure in its cost cells, never their average; its other cells pool every seed."
           if table.split_bands else "")
        + (" steps→target: median over the runs that reached the target, (reached/runs); a run that never "
           "reached it is not counted as its last step." if has_target(board) else ""),
        "",
        table,
        "",
        *([md(timed_note(board, runs)), ""] if table.timed_difference else []),
    ]
    if figures:
        lines += ["## Figures", "", FIGURE_NOTE, ""]
        lines += [f"![{p.stem}]({p.relative_to(root).as_posix()})" for p in figures]
        lines.append("")
    suffix = f"-{study}" if study else ""
    if not frames.probes.empty:
        # gzip (pandas.read_csv reads it as it is): a study's table is ~10x smaller, and mtime 0 keeps the bytes
        # of an unchanged table unchanged
        probes_csv = root / f"probes{suffix}.csv.gz"
        atomic_write_bytes(probes_csv, gzip.compress(frames.probes.to_csv(index=False).encode("utf-8"), mtime=0))
        lines += [f"Per-layer probes of these runs, as a tidy table (run_id, step, layer, metric, value ...): "
                  f"[{probes_csv.name}]({probes_csv.name}).", ""]
    lines += _claims_section(board, frames.probes, runs, root, study)
    if study:  # a study with a multiplier claim: its scaling fit, tables and figure
        lines += scaling_report.report_lines(root, study, board, runs)
    if study:
        lines += report_lines(root, study, runs)
    path = root / f"REPORT{suffix}.md"
    atomic_write_text(path, "\n".join(lines))
    return path


def _analysis_only_report(root: Path, study: str | None) -> Path:
    """``REPORT-<study>.md`` of a study that trains nothing (an analysis of models at initialisation)."""
    lines = report_lines(root, study) if study else []
    if not lines:
        raise ValueError(f"no runs in {root}{f' for study {study!r}' if study else ''}: nothing to report "
                         "(run `python -m bench run ...` or `python -m bench reproduce ...` first)")
    meta = _analysis_meta(root, study)  # type: ignore[arg-type]
    presets = f" --preset {meta['preset']}" if meta.get("preset") else ""
    head = [f"# resbench report — study {study}", "", "## How this was produced", "",
            f"`python -m bench reproduce {study}{presets} --results-dir {root}` (no training runs: the study measures "
            f"models at initialisation); this report: `python -m bench report --results-dir {root} --study {study}`.",
            "", *(f"- {k}: {meta[k]}" for k in ("git_sha", "torch", "device", "device_name", "created_at")
                  if k in meta), ""]  # fmt: skip
    path = root / f"REPORT-{study}.md"
    atomic_write_text(path, "\n".join([*head, *lines]))
    return path


def _analysis_meta(root: Path, study: str) -> dict[str, Any]:
    """What ``analysis/<study>/meta.json`` records (preset, commit, torch, machine), {} if absent or unreadable."""
    try:
        meta = json.loads((root / "analysis" / study / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}
