"""``REPORT.md``: the aggregated leaderboard, the figures, and each study's declared paper claims against our numbers.

The claims are data: each study file (``bench/studies/<name>.toml``, or the copy a sweep left in
``<results_dir>/studies/``) declares them, and :mod:`bench.claims` evaluates any of them by fixed, stated
rules; this module only renders the verdicts (agrees / DISAGREES / inconclusive), whichever way they go.
Where a difference is larger than the claim's margin but inside the seed spread, the verdict is
*inconclusive*: with three seeds a 95% CI is wide, and we say so rather than guess.

Rows of the leaderboard table are configurations (everything but the seed, :mod:`bench.stats`); the
configuration fields that differ between them are its columns.
"""

from __future__ import annotations

import gzip
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from bench import plots
from bench.claims import Group, Result, describe, evaluate_claims, load_claims, study_file
from bench.results import ResultsStore, atomic_write_bytes, atomic_write_text
from bench.stats import CONFIG_KEY, aggregate_long, by_configuration, group_keys

FIGURE_NOTE = (
    "Lines: mean over seeds. Bands and error bars: 95% Student-t CI of that mean, clipped to the metric's "
    "valid range (accuracy and error in [0, 1]; loss, throughput, memory and gradient norm ≥ 0) — with 3 "
    "seeds the unclipped interval often leaves it. On a log axis a band that runs off the bottom edge has a "
    "CI that reaches 0. Colour = variant (the same in every figure); line style = depth (or warm-up); "
    "training loss and gradient norms use a log scale; gaps in a curve are non-finite losses."
)
CLAIMS_NOTE = (
    "Each study file declares its claims — metric, groups, expected direction, margin, paper and figure — and "
    "they are checked by the rules of `bench.claims`. Groups are compared by their mean over seeds (± the 95% "
    "Student-t CI half-width); a leaderboard metric counts the `ok` runs, a probe quantity every run that "
    "recorded it. *Greater* = the difference exceeds the margin and the two CI half-widths together; *not "
    "greater* = it is at most the margin; anything in between, or a group with fewer than two counted runs, is "
    "*inconclusive*. A group whose every run failed (diverged, out of memory, error) while the other trained "
    "counts as the worse one. A slope agrees when its 95% CI lies inside the expected range and disagrees when "
    "it lies entirely outside. Runs are never pooled across configurations: where a claim's runs differ in "
    "more than the compared field, each configuration gets its own verdict."
)
# The command line of a run outside a study (runs/<run_id>.json holds every other field of its config).
RUN_COMMAND = "python -m bench run --variant {variant} --depth {depth} --task {task} --results-dir {results_dir}"
RUN_WARMUP = " --warmup-steps {warmup}"
# The columns that always name a table row; configuration fields that differ between rows are added after them.
ROW_COLUMNS = ("variant", "depth", "task")
# (column, header, scale, format) of the leaderboard table.
TABLE_METRICS: tuple[tuple[str, str, float, str], ...] = (
    ("final_train_acc", "train acc (%)", 100.0, ".2f"),
    ("final_val_acc", "val acc (%)", 100.0, ".2f"),
    ("final_train_loss", "train loss", 1.0, ".4f"),
    ("train_samples_per_s", "samples/s", 1.0, ".0f"),
    ("peak_mem_mb", "peak MB", 1.0, ".1f"),
)
VERDICT_WORDS = {"agrees": "agrees", "disagrees": "DISAGREES", "inconclusive": "inconclusive"}
TALLY_WORDS = {"agrees": "agree", "disagrees": "disagree", "inconclusive": "inconclusive"}


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured markdown table (``|`` inside cells escaped)."""

    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def _num(v: float, fmt: str) -> str:
    return "—" if v is None or not math.isfinite(v) else format(v, fmt)


def _stat_cell(s: pd.Series, scale: float, fmt: str) -> str:
    """``mean ± std (±CI)``: std over seeds (ddof=1), CI = 95% t half-width; one run: ``mean (n=1)``."""
    if s["n"] == 0:
        return "—"
    if s["n"] == 1:
        return f"{_num(s['mean'] * scale, fmt)} (n=1)"
    return f"{_num(s['mean'] * scale, fmt)} ± {_num(s['std'] * scale, fmt)} (±{_num(s['ci'] * scale, fmt)})"


def leaderboard_table(board: pd.DataFrame, runs: Sequence[Mapping[str, Any]] | None = None) -> str:
    """The aggregated leaderboard: one row per configuration (seeds pooled, nothing else; rules: bench.stats).

    Rows are named by variant, depth, task and every configuration field that differs between them
    (:func:`bench.stats.differing_fields`, from the leaderboard and the run JSONs ``runs``); if two rows
    would still look alike (a difference recorded nowhere but in the config hash), the hash is shown too.
    """
    named, by = by_configuration(board, runs, ROW_COLUMNS)
    metrics = [m for m, *_ in TABLE_METRICS]
    agg = aggregate_long(named, by=by, metrics=[*metrics, "steps_to_target"])
    keys = group_keys(agg, by)
    configs = agg.drop_duplicates(keys)
    shown = [*by, CONFIG_KEY] if CONFIG_KEY in keys and configs[by].astype(str).duplicated().any() else by
    rows = []
    for _, g in agg.groupby(keys, sort=True, dropna=False):
        g = g.set_index("metric")
        first = g.iloc[0]
        runs_cell = f"{int(first['n_runs'] - first['n_failed'])}/{int(first['n_runs'])}"
        target = g.loc["steps_to_target"]
        reached = f"{_num(target['median'], '.0f')} ({int(target['n'])}/{int(target['n_runs'])})"
        cells = [_value(first[c]) for c in shown]
        rows.append([*cells, runs_cell, *(_stat_cell(g.loc[m], sc, f) for m, _, sc, f in TABLE_METRICS), reached])
    headers = [*shown, "ok/runs", *(h for _, h, *_ in TABLE_METRICS), "steps→target (reached)"]
    return markdown_table(headers, rows)


def _value(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def _group_text(g: Group, count_above: float | None) -> str:
    spread = f" ± {_num(g.ci, '.4g')}" if g.n > 1 else ""
    counts = [f"{g.n}/{g.n_runs} runs"]
    if g.n_failed:
        counts.append(f"{g.n_failed} failed")
    if g.n_above is not None:
        counts.append(f"{g.n_above} above {count_above:g}")
    return f"{g.label}: {_num(g.mean, '.4g')}{spread} ({', '.join(counts)})"


def _measured(r: Result) -> str:
    """The numbers behind one verdict, in words."""
    c = r.claim
    groups = [_group_text(g, c.count_above) for g in r.groups]
    if c.kind == "slope":
        lo, hi = c.expect_range or (math.nan, math.nan)
        if not math.isfinite(r.diff):
            return " · ".join(groups)
        ci = f"95% CI {_num(r.diff - r.spread, '.3g')} … {_num(r.diff + r.spread, '.3g')}"
        return f"{' · '.join(groups)}; log-log slope {_num(r.diff, '.3g')} ({ci}; expected in [{lo:g}, {hi:g}])"
    if c.kind == "value":
        return f"{' · '.join(groups)}; mean − {c.threshold:g} = {_num(r.diff, '+.4g')}"
    margin = f"margin {_num(r.threshold, '.4g')}, CI half-widths {_num(r.spread, '.4g')}"
    return f"{' → '.join(groups)}; difference {_num(r.diff, '+.4g')} ({margin})"


def claim_lines(results: Sequence[Result]) -> list[str]:
    """Markdown bullets: one per claim (source, words, the test), one sub-bullet per verdict."""
    out: list[str] = []
    seen: set[str] = set()
    for r in results:
        c = r.claim
        if c.id not in seen:
            seen.add(c.id)
            out.append(f"- **{c.id}** — {c.paper}: {c.text}. Test: {describe(c)}.")
        note = f" — {r.note}" if r.note else ""
        context = f"{r.context}: " if r.context else ""
        measured = f"{_measured(r)}: " if r.groups else ""
        out.append(f"  - {context}{measured}**{VERDICT_WORDS[r.verdict]}**{note}.")
    return out


def _shown_path(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return f"bench/studies/{path.name}"


def _claims_section(
    board: pd.DataFrame, probes: pd.DataFrame, runs: Sequence[Mapping[str, Any]], root: Path, study: str | None
) -> list[str]:
    """The section "Paper claims vs measured": the declared claims of every study of these runs, evaluated."""
    names = [study] if study else sorted(str(s) for s in board["study"].dropna().unique())
    body: list[str] = []
    for name in names:
        path = study_file(root, name)
        claims = [c for c in load_claims(path) if c.table == "leaderboard"] if path else []  # analyses: their own
        if path is None or not claims:
            continue
        rows = board[board["study"] == name]
        results = evaluate_claims(claims, rows, probes[probes["run_id"].isin(rows["run_id"])], runs)
        tally = ", ".join(f"{sum(r.verdict == v for r in results)} {w}" for v, w in TALLY_WORDS.items())
        body += [f"### Study `{name}`", "", f"Claims declared in `{_shown_path(path, root)}`; verdicts: {tally}.",
                 "", *claim_lines(results), ""]  # fmt: skip
    return ["## Paper claims vs measured", "", CLAIMS_NOTE, "", *body] if body else []


def _study_presets(results_dir: Path) -> dict[str, list[str | None]]:
    """The presets each study's runs were made under (recorded in the run JSONs' configs), None (the study's full
    grid) first, then by name: a study may hold the runs of several, e.g. frontier's two inits."""
    presets: dict[str, dict[str | None, None]] = {}
    for run in ResultsStore(results_dir).load_runs():
        cfg = run.get("config", {})
        if cfg.get("study"):
            presets.setdefault(cfg["study"], {})[cfg.get("preset")] = None
    return {study: sorted(p, key=lambda name: (name is not None, name or "")) for study, p in presets.items()}


def _run_commands(board: pd.DataFrame, results_dir: Path) -> list[str]:
    """Shell lines that reproduce the runs: one ``reproduce`` per study and preset, a seed loop per other
    configuration."""
    presets = _study_presets(results_dir)
    lines = [
        f"python -m bench reproduce {st}{f' --preset {p}' if p else ''} --results-dir {results_dir}"
        for st in sorted(board["study"].dropna().unique())
        for p in presets.get(st, [None])
    ]
    solo = board[board["study"].isna()].assign(warmup=board["warmup_steps"].fillna(0).astype(int))
    for (v, d, t, w), g in solo.groupby(["variant", "depth", "task", "warmup"], sort=True):
        seeds = " ".join(str(s) for s in sorted(g["seed"].dropna().astype(int).unique()))
        extra = RUN_WARMUP.format(warmup=w) if w > 0 else ""
        run = RUN_COMMAND.format(variant=v, depth=d, task=t, results_dir=results_dir) + extra
        lines.append(f"for seed in {seeds}; do {run} --seed $seed; done")
    return lines


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
        "```sh",
        *_run_commands(board, results_dir),
        "```",
        "",
    ]
    for col, name in (("torch_version", "torch"), ("device_name", "devices"), ("git_sha", "git commits")):
        values = sorted(str(v) for v in board[col].dropna().unique())
        out.append(f"- {name}: {', '.join(values) if values else 'unrecorded'}")
    return [*out, ""]


def write_report(results_dir: str | Path, study: str | None = None) -> Path:
    """Write ``results_dir/REPORT.md`` (figures under ``plots/``) and the tidy probe table ``probes.csv.gz``.

    With ``study``, only that study's runs: ``REPORT-<study>.md``, ``plots/<study>/`` and
    ``probes-<study>.csv.gz``, so several studies can share one results directory.
    """
    root = Path(results_dir)
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
    runs = [r for r in ResultsStore(root).load_runs() if r.get("run_id") in ids]
    figures = plots.make_all(root, study)
    title = f"# resbench report{f' — study {study}' if study else ''}"
    lines = [
        title,
        "",
        *_provenance(board, root, study),
        "## Leaderboard",
        "",
        "Cells: mean ± std over seeds (±95% CI half-width, Student t); `(n=1)` = a single run, no spread. "
        "Only runs with status `ok` count; `ok/runs` shows how many did. steps→target: median over the "
        "runs that reached the target, (reached/runs); a run that never reached it is not counted as its "
        "last step.",
        "",
        leaderboard_table(board, runs),
        "",
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
    if study:
        from .analysis import report_lines

        lines += report_lines(root, study, runs)
    path = root / f"REPORT{suffix}.md"
    atomic_write_text(path, "\n".join(lines))
    return path


def _analysis_only_report(root: Path, study: str | None) -> Path:
    """``REPORT-<study>.md`` of a study that trains nothing (an analysis of models at initialisation)."""
    from .analysis import report_lines

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
    import json

    try:
        meta = json.loads((root / "analysis" / study / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}
