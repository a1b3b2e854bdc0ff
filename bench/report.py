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
whichever way they go. Where a difference is larger than the tolerance but inside the seed spread, the
verdict is *inconclusive*: with three seeds a 95% CI is wide, and we say so rather than guess.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from bench import plots
from bench.results import ResultsStore, atomic_write_text
from bench.stats import aggregate_long, t_ci

# Training error must rise by more than this (and by more than the two 95% CI half-widths together)
# between the shallowest and the deepest net to call it degradation: seed noise is not degradation.
DEGRADE_TOL = 0.01
# A seed whose final training error is above this failed to train (a bimodal outcome the mean hides).
FAIL_ERR = 0.5
# Without warm-up a run is "worse" if its final training loss is more than 5% above the warm-up runs'.
WORSE_REL = 0.05
# Post-LN's "gradients grow toward the output" means last-unit / first-unit gradient norm > this.
GRAD_GROWTH = 1.5
FIGURE_NOTE = (
    "Lines: mean over seeds. Bands and error bars: 95% Student-t CI of that mean, clipped to the metric's "
    "valid range (accuracy and error in [0, 1]; loss, throughput, memory and gradient norm ≥ 0) — with 3 "
    "seeds the unclipped interval often leaves it. On a log axis a band that runs off the bottom edge has a "
    "CI that reaches 0. Colour = variant (the same in every figure); line style = depth (or warm-up); "
    "training loss and gradient norms use a log scale; gaps in a curve are non-finite losses."
)
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


def rise_verdict(base: dict[str, float], top: dict[str, float], tol: float) -> str:
    """``"no"`` if ``top``'s mean is at most ``tol`` above ``base``'s; ``"yes"`` if it is above by more than
    ``tol`` and the two 95% CI half-widths together; else ``"inconclusive"`` (including when either side has
    fewer than two runs, so no spread to compare with). ``base``/``top``: dicts with ``mean``, ``ci``, ``n``."""
    rise = top["mean"] - base["mean"]
    if not math.isfinite(rise):
        return "inconclusive"
    if rise <= tol:
        return "no"
    if min(base["n"], top["n"]) < 2:
        return "inconclusive"
    return "yes" if rise > base["ci"] + top["ci"] else "inconclusive"


def verdict_text(verdict: str, expect_yes: bool, n: int) -> str:
    """How a three-valued verdict reads against the paper's expectation."""
    if verdict == "inconclusive":
        return f"cannot confirm or refute with n={n} seed{'s' * (n != 1)}; more seeds or a longer schedule needed"
    return f"{'agrees with' if (verdict == 'yes') == expect_yes else 'DISAGREES with'} the paper"


def degradation_findings(board: pd.DataFrame) -> list[dict[str, Any]]:
    """Per task and variant with a degradation claim and >= 2 depths: errors by depth and the verdict.

    Training error = 1 - final train accuracy, mean over ok runs. ``degrades`` is ``"yes"`` if every run
    at the deepest depth failed (diverged/OOM/error) while the shallowest trained, else
    :func:`rise_verdict` of the shallowest vs the deepest depth with tolerance ``DEGRADE_TOL``.
    ``too_high``: per depth, the ok seeds whose training error is above ``FAIL_ERR``.
    """
    df = board.assign(key=[plots.variant_key(v, d) for v, d in zip(board["variant"], board["depth"], strict=True)])
    df["train_error"] = 1.0 - pd.to_numeric(df["final_train_acc"], errors="coerce")
    df["too_high"] = (df["train_error"] > FAIL_ERR).astype(float)  # its mean over ok runs x n = the count
    recipe = recipe_columns(board)
    agg = aggregate_long(df, by=("task", "key", *recipe, "depth"), metrics=("train_error", "too_high"))
    counts = agg[agg["metric"] == "too_high"]
    agg = agg[agg["metric"] == "train_error"].assign(
        too_high=(counts["mean"].fillna(0).to_numpy() * counts["n"].to_numpy()).round().astype(int)
    )
    found = []
    for (task, key, *values), g in agg.groupby(["task", "key", *recipe], sort=True, dropna=False):
        claim = _claim_for(str(key))
        g = g.sort_values("depth")
        if claim is None or g["depth"].nunique() < 2:
            continue
        shallow, deep = g.iloc[0], g.iloc[-1]
        if shallow["n"] == 0:
            continue  # nothing trained at the shallowest depth: no baseline to degrade from
        degrades = "yes" if deep["n"] == 0 else rise_verdict(shallow, deep, DEGRADE_TOL)
        expect, source, text = claim
        n = int(min(shallow["n"], deep["n"])) if deep["n"] else int(shallow["n"])
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
                "too_high": g["too_high"].tolist(),
                "degrades": degrades,
                "agrees": None if degrades == "inconclusive" else (degrades == "yes") == expect,
                "verdict": verdict_text(degrades, expect, n),
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
        f"Training error = 1 − final train accuracy, mean over ok seeds. *Degrades: yes* = the deepest net's "
        f"error exceeds the shallowest's by more than {DEGRADE_TOL:g} and by more than the two 95% CI "
        f"half-widths together, or every run at the deepest depth failed; *no* = it is at most {DEGRADE_TOL:g} "
        "above the shallowest's (or lower); *inconclusive* = it rises, but within the seed spread (or a depth "
        f"has a single seed). *Failed to train* = an ok seed whose final training error is above {FAIL_ERR:g} "
        "(the mean hides such bimodal outcomes).",
        "",
    ]
    for f in found:
        steps = " → ".join(
            _num(e, ".4f") if n else f"failed ({k}/{k})"
            for e, n, k in zip(f["errors"], f["n"], f["n_failed"], strict=True)
        )
        depths = "→".join(str(d) for d in f["depths"])
        failed = " → ".join(
            f"{k}/{n}" + (f" (+{m} not ok)" if m else "")
            for k, n, m in zip(f["too_high"], f["n"], f["n_failed"], strict=True)
        )
        out += [
            f"- **{f['variant']}**{f['recipe']} on {f['task']} — {f['source']}: {f['claim']}.",
            f"  Measured final train error, depth {depths}: {steps}; degrades: **{f['degrades']}** — {f['verdict']}.",
            f"  Seeds that failed to train (error > {FAIL_ERR:g}), depth {depths}: {failed}.",
        ]
    return [*out, ""]


def _warmup_verdict(w: dict[str, Any], c: dict[str, Any]) -> str:
    all_w, all_c = w["failed"] == w["n"], c["failed"] == c["n"]
    if all_w or all_c:
        return "inconclusive" if all_w and all_c else "yes" if all_c else "no"
    by_loss = rise_verdict(w | {"n": w["n_ok"]}, c | {"n": c["n_ok"]}, WORSE_REL * abs(w["mean"]))
    more_failed = c["failed"] / c["n"] > w["failed"] / w["n"]
    return "inconclusive" if more_failed and by_loss != "yes" else by_loss


def warmup_findings(board: pd.DataFrame) -> list[dict[str, Any]]:
    """Post-LN/Pre-LN variants run with and without warm-up: failures and final training loss per setting.

    ``worse`` (without warm-up than with it) is ``"yes"`` when every run without warm-up failed and some
    run with it trained; ``"no"`` when every warm-up run failed and some run without trained; else
    :func:`rise_verdict` of the ok runs' final training loss with tolerance ``WORSE_REL`` x the warm-up
    loss, downgraded to ``"inconclusive"`` when more runs failed without warm-up (but not all) and the loss
    does not settle it. Both sides all failed: ``"inconclusive"``. Xiong 2020 predicts ``"yes"`` for
    Post-LN and ``"no"`` for Pre-LN.
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
            loss = t_ci(pd.to_numeric(ok["final_train_loss"], errors="coerce").to_numpy(dtype=float))
            side[bool(warm)] = {"n": len(s), "failed": int((s["status"] != "ok").sum()), "loss": loss["mean"]} | {
                "mean": loss["mean"], "ci": loss["ci"], "n_ok": loss["n"]
            }
        w, c = side[True], side[False]
        worse = _warmup_verdict(w, c)
        kind = g["kind"].iloc[0]
        n = int(min(w["n"], c["n"]))
        found.append(
            {
                "task": task,
                "variant": variant,
                "recipe": _recipe_label(["depth", *recipe], [depth, *values]),
                "kind": kind,
                "warm": w,
                "cold": c,
                "worse": worse,
                "agrees": None if worse == "inconclusive" else (worse == "yes") == (kind == "post"),
                "verdict": verdict_text(worse, kind == "post", n),
            }
        )
    return found


def grad_findings(probes: pd.DataFrame) -> list[dict[str, Any]]:
    """Post-LN/Pre-LN gradient norm at step 0: last / first feed-forward sublayer (mean over seeds per layer).

    Xiong 2020's Fig. 3 plots the gradient norm of the FFN weights layer by layer, so like is compared
    with like: when the units' block names mark feed-forward sublayers (``.ffn.``) only those count;
    otherwise every unit does. (The first attention sublayer is an outlier in any case: it acts on the
    raw embeddings, whose scale is set by the embedding init, not by the placement.)
    """
    df = probes[(probes["step"] == 0) & (probes["metric"] == "grad_norm")]
    df = df.assign(kind=df["variant"].map(lambda v: plots.is_ln_transformer(str(v))))
    found = []
    for (task, variant, depth), g in df[df["kind"].notna()].groupby(["task", "variant", "depth"], sort=True):
        ffn = g[g["block"].astype(str).str.contains(".ffn.", regex=False)]
        g = ffn if not ffn.empty else g
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
            "*Worse without warm-up: yes* = every run without warm-up failed (and some with it trained), or the "
            f"ok runs' mean final training loss is more than {WORSE_REL:.0%} above the warm-up runs' and more "
            f"than the two 95% CI half-widths above it; *no* = at most {WORSE_REL:.0%} above (or lower) with no "
            "more failures, or every warm-up run failed instead; *inconclusive* = in between (a rise within the "
            "seed spread, a side with one ok seed, or some but not all runs failing without warm-up).",
            "",
        ]
        for f in warm:
            w, c = f["warm"], f["cold"]
            claim = "needs warm-up" if f["kind"] == "post" else "does not need warm-up"
            out.append(
                f"- **{f['variant']}**{f['recipe']}, {f['kind'].title()}-LN, on {f['task']}, paper: {claim}. "
                f"With warm-up: final train loss {_num(w['loss'], '.4f')}, failed {w['failed']}/{w['n']}; "
                f"without: {_num(c['loss'], '.4f')}, failed {c['failed']}/{c['n']}. "
                f"Without warm-up is worse: **{f['worse']}** — {f['verdict']}."
            )
        out.append("")
    if grads:
        out += [
            "Claim (Fig. 3): at initialisation Post-LN's gradient norm grows toward the output layers, "
            f"Pre-LN's does not. *Grows* = gradient norm of the last feed-forward sublayer / the first one "
            f"> {GRAD_GROWTH:g} (Fig. 3 plots the FFN weights; all units where there are no FFN sublayers).",
            "",
        ]
        for f in grads:
            out.append(
                f"- **{f['variant']}** depth {f['depth']} on {f['task']}: last/first FFN gradient norm at step 0 = "
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
    """Write ``results_dir/REPORT.md`` (figures under ``plots/``) and the tidy probe table ``probes.csv``.

    With ``study``, only that study's runs: ``REPORT-<study>.md``, ``plots/<study>/`` and
    ``probes-<study>.csv``, so several studies can share one results directory.
    """
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
        lines += ["## Figures", "", FIGURE_NOTE, ""]
        lines += [f"![{p.stem}]({p.relative_to(root).as_posix()})" for p in figures]
        lines.append("")
    suffix = f"-{study}" if study else ""
    if not frames.probes.empty:
        probes_csv = root / f"probes{suffix}.csv"
        atomic_write_text(probes_csv, frames.probes.to_csv(index=False))
        lines += [f"Per-layer probes of these runs, as a tidy table (run_id, step, layer, metric, value ...): "
                  f"[{probes_csv.name}]({probes_csv.name}).", ""]
    lines += _degradation_section(board) + _transformer_section(board, frames.probes)
    path = root / f"REPORT{suffix}.md"
    atomic_write_text(path, "\n".join(lines))
    return path
