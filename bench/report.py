"""``REPORT.md``: the aggregated leaderboard, the figures, and each paper's claim against our numbers.

Claims checked, when the results directory holds the runs to check them:

- He et al. 2015, "Deep Residual Learning for Image Recognition": deeper *plain* nets reach a higher
  training error than shallower ones (the degradation problem); ResNets do not degrade.
- Srivastava et al. 2015, "Training Very Deep Networks": Highway networks stay trainable as depth grows.
- He et al. 2016, "Identity Mappings in Deep Residual Networks": pre-activation ResNets train well at
  large depth.
- Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture": Post-LN needs learning
  rate warm-up, Pre-LN trains without it; at initialisation Post-LN's gradients grow toward the output.

Verdicts follow fixed, stated rules (``DEGRADE_TOL``, ``WORSE_REL``, ``GRAD_GROWTH``) and are printed
whichever way they go.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench import plots
from bench.results import ResultsStore, atomic_write_text
from bench.stats import aggregate_long

# Training error must rise by more than this (and by more than the two 95% CI half-widths together)
# between the shallowest and the deepest net to call it degradation: seed noise is not degradation.
DEGRADE_TOL = 0.01
# Without warm-up a run is "worse" if its final training loss is more than 5% above the warm-up runs'.
WORSE_REL = 0.05
# Post-LN's "gradients grow toward the output" means last-unit / first-unit gradient norm > this.
GRAD_GROWTH = 1.5
# The command line of a run outside a study (runs/<run_id>.json holds every other field of its config).
RUN_COMMAND = "python -m bench run --variant {variant} --depth {depth} --task {task} --results-dir {results_dir}"
RUN_WARMUP = " --warmup-steps {warmup}"

# (variant pattern, expected to degrade?, source, claim); first matching pattern wins.
DEGRADATION_CLAIMS: tuple[tuple[str, bool, str, str], ...] = (
    (
        "plain*",
        True,
        "He et al. 2015 (Fig. 1, 6)",
        "deeper plain nets have a HIGHER training error than shallower ones",
    ),
    ("highway*", False, "Srivastava et al. 2015 (Fig. 1)", "Highway nets do not degrade as depth grows"),
    ("preact*", False, "He et al. 2016 (1001-layer CIFAR nets)", "pre-activation ResNets do not degrade with depth"),
    ("resnet*", False, "He et al. 2015 (Fig. 6, Table 6)", "deeper ResNets do not have a higher training error"),
    ("residual*", False, "He et al. 2015 (Fig. 6)", "deeper residual nets do not have a higher training error"),
)
# Runs that differ in one of these are different experiments, never pooled as seeds of one.
RECIPE_COLUMNS = ("optimizer", "lr", "schedule", "warmup_steps", "epochs", "steps", "batch_size", "precision")
# (column, header, scale, format) of the leaderboard table.
TABLE_METRICS: tuple[tuple[str, str, float, str], ...] = (
    ("final_train_acc", "train acc (%)", 100.0, ".2f"),
    ("final_val_acc", "val acc (%)", 100.0, ".2f"),
    ("final_train_loss", "train loss", 1.0, ".4f"),
    ("train_samples_per_s", "samples/s", 1.0, ".0f"),
    ("peak_mem_mb", "peak MB", 1.0, ".1f"),
)


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


def recipe_columns(board: pd.DataFrame, exclude: Sequence[str] = ()) -> list[str]:
    """The recipe columns whose value differs between runs: seeds are only pooled within one recipe."""
    return [c for c in RECIPE_COLUMNS if c not in exclude and board[c].nunique(dropna=False) > 1]


def _recipe_label(cols: Sequence[str], values: Sequence[Any]) -> str:
    return f" ({', '.join(f'{c}={v}' for c, v in zip(cols, values, strict=True))})" if cols else ""


def leaderboard_table(board: pd.DataFrame) -> str:
    """The aggregated leaderboard: one row per variant/depth/task (and varying recipe column); rules: bench.stats."""
    by = ["variant", "depth", "task", *recipe_columns(board)]
    metrics = [m for m, *_ in TABLE_METRICS]
    agg = aggregate_long(board, by=by, metrics=[*metrics, "steps_to_target"])
    rows = []
    for key, g in agg.groupby(by, sort=True, dropna=False):
        g = g.set_index("metric")
        first = g.iloc[0]
        runs = f"{int(first['n_runs'] - first['n_failed'])}/{int(first['n_runs'])}"
        target = g.loc["steps_to_target"]
        reached = f"{_num(target['median'], '.0f')} ({int(target['n'])}/{int(target['n_runs'])})"
        rows.append([*key, runs, *(_stat_cell(g.loc[m], sc, f) for m, _, sc, f in TABLE_METRICS), reached])
    headers = [*by, "ok/runs", *(h for _, h, *_ in TABLE_METRICS), "steps→target (reached)"]
    return markdown_table(headers, rows)


def _claim_for(key: str) -> tuple[bool, str, str] | None:
    for pattern, expect, source, claim in DEGRADATION_CLAIMS:
        if fnmatch.fnmatch(key, pattern):
            return expect, source, claim
    return None


def degradation_findings(board: pd.DataFrame) -> list[dict[str, Any]]:
    """Per task and variant with a degradation claim and >= 2 depths: errors by depth and the verdict.

    Training error = 1 - final train accuracy, mean over ok runs. It *degrades* if the deepest net's
    error exceeds the shallowest's by more than ``DEGRADE_TOL`` and the sum of their CI half-widths,
    or if every run at the deepest depth failed (diverged/OOM/error) while the shallowest trained.
    """
    df = board.assign(key=[plots.variant_key(v, d) for v, d in zip(board["variant"], board["depth"], strict=True)])
    df["train_error"] = 1.0 - pd.to_numeric(df["final_train_acc"], errors="coerce")
    recipe = recipe_columns(board)
    agg = aggregate_long(df, by=("task", "key", *recipe, "depth"), metrics=("train_error",))
    found = []
    for (task, key, *values), g in agg.groupby(["task", "key", *recipe], sort=True, dropna=False):
        claim = _claim_for(str(key))
        g = g.sort_values("depth")
        if claim is None or g["depth"].nunique() < 2:
            continue
        shallow, deep = g.iloc[0], g.iloc[-1]
        if shallow["n"] == 0:
            continue  # nothing trained at the shallowest depth: no baseline to degrade from
        if deep["n"] == 0:
            degrades = True
        else:
            margin = max(DEGRADE_TOL, np.nan_to_num(shallow["ci"]) + np.nan_to_num(deep["ci"]))
            degrades = bool(deep["mean"] - shallow["mean"] > margin)
        expect, source, text = claim
        found.append(
            {
                "task": task,
                "variant": key,
                "recipe": _recipe_label(recipe, values),
                "source": source,
                "claim": text,
                "expect_degrade": expect,
                "depths": g["depth"].tolist(),
                "errors": g["mean"].tolist(),
                "n": g["n"].tolist(),
                "n_failed": g["n_failed"].tolist(),
                "degrades": degrades,
                "agrees": degrades == expect,
            }
        )
    return found


def _degradation_section(board: pd.DataFrame) -> list[str]:
    found = degradation_findings(board)
    if not found:
        return []
    out = [
        "## Paper claim vs measured: the degradation problem",
        "",
        f"Training error = 1 − final train accuracy, mean over ok seeds. *Degrades* = the deepest net's error "
        f"exceeds the shallowest's by more than {DEGRADE_TOL:g} and the two 95% CI half-widths together, "
        "or every run at the deepest depth failed.",
        "",
    ]
    for f in found:
        steps = " → ".join(
            _num(e, ".4f") if n else f"failed ({k}/{k})"
            for e, n, k in zip(f["errors"], f["n"], f["n_failed"], strict=True)
        )
        depths = "→".join(str(d) for d in f["depths"])
        verdict = "agrees with" if f["agrees"] else "DISAGREES with"
        out += [
            f"- **{f['variant']}**{f['recipe']} on {f['task']} — {f['source']}: {f['claim']}.",
            f"  Measured final train error, depth {depths}: {steps}; degrades: **{'yes' if f['degrades'] else 'no'}**"
            f" — {verdict} the paper.",
        ]
    return [*out, ""]


def warmup_findings(board: pd.DataFrame) -> list[dict[str, Any]]:
    """Post-LN/Pre-LN variants run with and without warm-up: failures and final training loss per setting.

    Without warm-up is *worse* when a larger fraction of runs failed, or when the ok runs' mean final
    training loss is more than ``WORSE_REL`` above the warm-up runs'. Xiong 2020 predicts worse for
    Post-LN and not worse for Pre-LN.
    """
    found = []
    df = board.assign(kind=board["variant"].map(lambda v: plots.is_ln_transformer(str(v))))
    df = df[df["kind"].notna()].assign(warm=df["warmup_steps"].fillna(0).astype(float) > 0)
    recipe = recipe_columns(board, exclude=("warmup_steps",))
    for (task, variant, depth, *values), g in df.groupby(
        ["task", "variant", "depth", *recipe], sort=True, dropna=False
    ):
        if g["warm"].nunique() < 2:
            continue
        side = {}
        for warm, s in g.groupby("warm"):
            ok = s[s["status"] == "ok"]
            side[bool(warm)] = {
                "n": len(s),
                "failed": int((s["status"] != "ok").sum()),
                "loss": float(pd.to_numeric(ok["final_train_loss"], errors="coerce").mean()),
            }
        w, c = side[True], side[False]
        worse = c["failed"] / c["n"] > w["failed"] / w["n"] or (
            math.isfinite(c["loss"]) and math.isfinite(w["loss"]) and c["loss"] > w["loss"] * (1 + WORSE_REL)
        )
        kind = g["kind"].iloc[0]
        found.append(
            {
                "task": task,
                "variant": variant,
                "recipe": _recipe_label(["depth", *recipe], [depth, *values]),
                "kind": kind,
                "warm": w,
                "cold": c,
                "worse": bool(worse),
                "agrees": bool(worse) == (kind == "post"),
            }
        )
    return found


def grad_findings(probes: pd.DataFrame) -> list[dict[str, Any]]:
    """Post-LN/Pre-LN gradient norm at step 0: last unit / first unit ratio (mean over seeds per layer)."""
    df = probes[(probes["step"] == 0) & (probes["metric"] == "grad_norm")]
    df = df.assign(kind=df["variant"].map(lambda v: plots.is_ln_transformer(str(v))))
    found = []
    for (task, variant, depth), g in df[df["kind"].notna()].groupby(["task", "variant", "depth"], sort=True):
        per_layer = g.groupby("layer")["value"].mean().sort_index()
        if len(per_layer) < 2:
            continue
        ratio = float(per_layer.iloc[-1] / per_layer.iloc[0])
        grows = ratio > GRAD_GROWTH
        kind = g["kind"].iloc[0]
        found.append(
            {
                "task": task,
                "variant": variant,
                "depth": depth,
                "kind": kind,
                "ratio": ratio,
                "grows": grows,
                "agrees": grows == (kind == "post"),
            }
        )
    return found


def _transformer_section(board: pd.DataFrame, probes: pd.DataFrame) -> list[str]:
    warm, grads = warmup_findings(board), grad_findings(probes)
    if not warm and not grads:
        return []
    out = ["## Paper claim vs measured: Post-LN vs Pre-LN (Xiong et al. 2020)", ""]
    if warm:
        out += [
            "Claim: Post-LN Transformers need learning-rate warm-up (without it training fails or ends far "
            "worse); Pre-LN Transformers train without warm-up about as well as with it. "
            f"*Worse* = more failed runs, or final training loss > {1 + WORSE_REL:g}× the warm-up runs'.",
            "",
        ]
        for f in warm:
            w, c = f["warm"], f["cold"]
            claim = "needs warm-up" if f["kind"] == "post" else "does not need warm-up"
            out.append(
                f"- **{f['variant']}**{f['recipe']}, {f['kind'].title()}-LN, on {f['task']}, paper: {claim}. "
                f"With warm-up: final train loss {_num(w['loss'], '.4f')}, failed {w['failed']}/{w['n']}; "
                f"without: {_num(c['loss'], '.4f')}, failed {c['failed']}/{c['n']}. "
                f"Without warm-up is worse: **{'yes' if f['worse'] else 'no'}** — "
                f"{'agrees with' if f['agrees'] else 'DISAGREES with'} the paper."
            )
        out.append("")
    if grads:
        out += [
            "Claim (Fig. 3): at initialisation Post-LN's gradient norm grows toward the output layers, "
            f"Pre-LN's stays flat. *Grows* = last-unit / first-unit gradient norm > {GRAD_GROWTH:g}.",
            "",
        ]
        for f in grads:
            out.append(
                f"- **{f['variant']}** depth {f['depth']} on {f['task']}: last/first gradient norm at step 0 = "
                f"{f['ratio']:.3g}; grows: **{'yes' if f['grows'] else 'no'}** — "
                f"{'agrees with' if f['agrees'] else 'DISAGREES with'} the paper."
            )
        out.append("")
    return out


def _study_presets(results_dir: Path) -> dict[str, str]:
    """The preset each study's runs were made under (recorded in the run JSONs' configs)."""
    presets: dict[str, str] = {}
    for run in ResultsStore(results_dir).load_runs():
        cfg = run.get("config", {})
        if cfg.get("study") and cfg.get("preset"):
            presets[cfg["study"]] = cfg["preset"]
    return presets


def _run_commands(board: pd.DataFrame, results_dir: Path) -> list[str]:
    """Shell lines that reproduce the runs: one ``reproduce`` per study, a seed loop per other configuration."""
    presets = _study_presets(results_dir)
    lines = [
        f"python -m bench reproduce {st}{f' --preset {presets[st]}' if st in presets else ''} "
        f"--results-dir {results_dir}"
        for st in sorted(board["study"].dropna().unique())
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
        f"(figures: `python -m bench plot --results-dir {results_dir}`), from {len(board)} runs in "
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
    """Write ``results_dir/REPORT.md`` (and its figures under ``plots/``); returns the report's path."""
    root = Path(results_dir)
    frames = plots.load_frames(root, study)
    board = frames.leaderboard
    if board.empty:
        raise ValueError(f"no runs in {root}: nothing to report (run `python -m bench run ...` first)")
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
        leaderboard_table(board),
        "",
    ]
    if figures:
        lines += ["## Figures", ""]
        lines += [f"![{p.stem}]({p.relative_to(root).as_posix()})" for p in figures]
        lines.append("")
    lines += _degradation_section(board) + _transformer_section(board, frames.probes)
    path = root / "REPORT.md"
    atomic_write_text(path, "\n".join(lines))
    return path
