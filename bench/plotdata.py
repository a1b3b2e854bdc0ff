"""The data behind the figures and the report: tidy frames of a results directory and seed statistics.

The statistics follow :mod:`bench.stats` (mean over seeds, Student-t 95% CI); a CI is an interval
for the *mean*, and with n=3 seeds its half-width can exceed the metric's range (an accuracy CI of
0.75 ± 1.07). We clip every interval to the metric's valid range (:data:`DOMAINS`) before drawing it,
and the figures say so. The figures re-draw He et al. 2015, "Deep Residual Learning for Image
Recognition" (Fig. 1, 6), Srivastava et al. 2015, "Training Very Deep Networks" (Fig. 1) and Xiong et
al. 2020, "On Layer Normalization in the Transformer Architecture" (Fig. 2, 3).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from bench.results import ResultsStore

_NOT_METRICS = ("step", "epoch", "wall_s", "train_time_s", "lr")  # curve columns that are axes, not metrics
_META = ("run_id", "variant", "family", "depth", "task", "seed", "warmup_steps", "status", "study")
_POST_LN, _PRE_LN = re.compile(r"post[-_]?ln"), re.compile(r"pre[-_]?ln")
_INF = math.inf
# Valid range of each quantity we draw; a band or error bar never leaves it. Unknown names: unbounded.
DOMAINS: dict[str, tuple[float, float]] = {
    **dict.fromkeys(("val_acc", "train_acc", "final_train_acc", "final_val_acc", "best_val_acc"), (0.0, 1.0)),
    "train_error": (0.0, 1.0),
    **dict.fromkeys(("loss", "train_loss", "val_loss", "final_train_loss", "final_val_loss", "bpc"), (0.0, _INF)),
    "ppl": (1.0, _INF),  # perplexity = exp(loss) >= 1
    **dict.fromkeys(("train_samples_per_s", "train_tokens_per_s", "peak_mem_mb", "grad_norm"), (0.0, _INF)),
}


def domain(metric: str) -> tuple[float, float]:
    """The valid ``(low, high)`` range of a metric (``(-inf, inf)`` when we do not know it)."""
    return DOMAINS.get(metric, (-_INF, _INF))


def variant_key(variant: str, depth: Any) -> str:
    """The series name on depth axes: the variant without its depth suffix (``resnet56`` at depth 56 -> ``resnet``)."""
    try:
        suffix = str(int(depth))
    except (TypeError, ValueError):
        return variant
    return re.sub(rf"[-_]?{suffix}$", "", variant) if variant.endswith(suffix) and variant != suffix else variant


def is_ln_transformer(variant: str) -> str | None:
    """``"post"`` or ``"pre"`` when the variant's name says Post-LN / Pre-LN, else None."""
    return "post" if _POST_LN.search(variant) else "pre" if _PRE_LN.search(variant) else None


@dataclass
class Frames:
    """Everything the plots and the report read: the leaderboard and tidy curves/probes with run metadata."""

    leaderboard: pd.DataFrame
    curves: pd.DataFrame  # run meta + split ("train"|"eval"), step, metric, value
    probes: pd.DataFrame  # run meta + step, layer, block, metric, value


def _finite_or_nan(v: Any) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return math.nan
    return x if math.isfinite(x) else math.nan


def curves_frame(runs: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Tidy curves of run JSONs: one row per run, split, step and *recorded* metric.

    A metric recorded as null or non-finite (a diverged step) stays as a NaN row, so the line shows a
    gap there instead of joining its neighbours; a metric a point does not record gives no row at all
    (an evaluation that skips ``train_acc`` is not a gap in it).
    """
    rows = []
    for run in runs:
        meta = {k: run.get("row", {}).get(k) for k in _META} | {"run_id": run["run_id"]}
        for split in ("train", "eval"):
            for point in run.get("curves", {}).get(split, []):
                rows += [
                    meta | {"split": split, "step": point["step"], "metric": k, "value": _finite_or_nan(v)}
                    for k, v in point.items()
                    if k not in _NOT_METRICS
                ]
    return pd.DataFrame(rows, columns=[*_META, "split", "step", "metric", "value"])


def probes_frame(runs: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Tidy probe rows of run JSONs joined with each run's metadata (variant, depth, task, seed ...)."""
    rows = []
    for run in runs:
        meta = {k: run.get("row", {}).get(k) for k in _META} | {"run_id": run["run_id"]}
        rows += [meta | dict(r) for r in run.get("probes", [])]
    return pd.DataFrame(rows, columns=[*_META, "step", "layer", "block", "metric", "value"])


def load_frames(results_dir: str | Path, study: str | None = None) -> Frames:
    """Read ``results_dir``; with ``study``, keep only that study's runs (ValueError if it has none)."""
    store = ResultsStore(results_dir)
    board, runs = store.load_leaderboard(), store.load_runs()
    if study is not None:
        if not (board["study"] == study).any():
            raise ValueError(
                f"no runs of study {study!r} in {results_dir}; "
                f"studies: {sorted(board['study'].dropna().unique().tolist())}"
            )
        board = board[board["study"] == study].reset_index(drop=True)
        runs = [r for r in runs if r["run_id"] in set(board["run_id"])]
    return Frames(board, curves_frame(runs), probes_frame(runs))


def one_task(df: pd.DataFrame, task: str | None) -> tuple[pd.DataFrame, str]:
    """The rows of ``task`` (or of the only task there is); ValueError unless exactly one task remains."""
    if task is not None:
        df = df[df["task"] == task]
    tasks = sorted(df["task"].dropna().unique().tolist())
    if len(tasks) != 1:
        raise ValueError(f"the figure needs data of exactly one task; found {tasks or 'none'} (pass task=...)")
    return df, str(tasks[0])


def mean_ci(df: pd.DataFrame, keys: list[str], x: str, y: str, metric: str | None = None) -> pd.DataFrame:
    """Per ``keys + [x]``: mean of ``y`` over runs, its 95% t-CI half-width ``ci`` (NaN for one run) and the
    interval ``lo``/``hi`` clipped to ``domain(metric or y)``. A group whose values are all NaN keeps a NaN
    mean: a gap in the line, never a point interpolated over."""
    values = pd.to_numeric(df[y], errors="coerce").replace([np.inf, -np.inf], np.nan)
    out = df.assign(_y=values).groupby([*keys, x])["_y"].agg(["mean", "std", "count"]).reset_index()
    n = out["count"].to_numpy(dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["ci"] = np.where(n > 1, sps.t.ppf(0.975, np.maximum(n - 1, 1)) * out["std"] / np.sqrt(n), np.nan)
    low, high = domain(metric or y)
    half = out["ci"].fillna(0.0)
    out["lo"] = (out["mean"] - half).clip(low, high)
    out["hi"] = (out["mean"] + half).clip(low, high)
    return out.sort_values([*keys, x]).reset_index(drop=True)
