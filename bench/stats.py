"""Seed statistics for the leaderboard: means with t confidence intervals, target rules, comparisons.

Rules (the report and the plots rely on them):

- **Which runs count.** A metric is aggregated over the runs with ``status == "ok"`` whose value is
  finite; runs that diverged, ran out of memory or raised are counted per group in ``n_failed`` and
  never averaged in (their last loss is not a result). ``n_runs`` counts every run of the group.
- **Confidence intervals.** ``std`` is the sample standard deviation (ddof=1) and the 95% CI
  half-width is ``t.ppf(0.975, n-1) · std / sqrt(n)`` (Student's t, seeds assumed independent).
  With ``n == 1`` there is no spread estimate: ``std``, ``ci``, ``ci_low`` and ``ci_high`` are NaN.
- **Steps/time to target.** A run that never reaches the target has *no* value (NaN) — never its last
  step or its total time. For ``steps_to_target`` and ``time_to_target_s`` every run of the group counts
  (whatever its status), ``n`` is the number that reached the target (``reached`` k of ``n_runs``) and
  mean/median/CI are over those runs only.
- **Seeds pool only with seeds.** Runs are grouped by their whole configuration but the seed: the
  ``config_hash`` column (:meth:`bench.config.RunConfig.config_hash`) is always a grouping key besides
  the ``by`` columns shown, so two configurations that differ only in, say, warm-up never share a mean.
  :func:`differing_fields` names the configuration fields that differ between the groups of a frame and
  :func:`with_config_columns` adds them as columns, so a table can show what tells its rows apart.
- **Comparisons** (Welch's t-test, bootstrap CI of the mean difference) need at least 3 seeds per side.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from bench.config import FIELD_DEFAULTS, NOT_HASHED

DEFAULT_BY: tuple[str, ...] = ("variant", "depth", "task")
DEFAULT_METRICS: tuple[str, ...] = (
    "final_train_loss",
    "final_train_acc",
    "final_val_loss",
    "final_val_acc",
    "best_val_acc",
    "steps_to_target",
    "time_to_target_s",
    "train_samples_per_s",
    "step_time_ms",
    "peak_mem_mb",
)
TARGET_METRICS: tuple[str, ...] = ("steps_to_target", "time_to_target_s")
AGG_COLUMNS: tuple[str, ...] = (
    "metric",
    "n_runs",
    "n_failed",
    "n",
    "mean",
    "std",
    "ci",
    "ci_low",
    "ci_high",
    "median",
)
MIN_SEEDS_TO_COMPARE = 3
CONFIG_KEY = "config_hash"
# A run id ends in ``-<config_hash>-s<seed>`` (RunConfig.run_id): a frame without the column gets it from there.
_RUN_ID_HASH = re.compile(r"-([0-9a-f]{8})-s\d+$")
# Leaderboard columns that record a run's configuration, in display order (``device`` there is the device the
# run resolved to, not its configured ``auto``; ``init`` is the initialisation scheme's name). Not ``steps`` and
# ``epochs``: there they are what a run *made* (fewer when it diverged); the configured ones are in its JSON.
BOARD_CONFIG_COLUMNS: tuple[str, ...] = (
    "variant", "depth", "task", "batch_size", "optimizer", "lr", "schedule", "warmup_steps", "precision", "init",
    "study",
)  # fmt: skip


def t_ci(values: Sequence[float] | np.ndarray, level: float = 0.95) -> dict[str, float]:
    """``n, mean, std (ddof=1), ci (half-width), ci_low, ci_high, median`` of finite ``values``."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    n = int(v.size)
    nan = math.nan
    if n == 0:
        return {"n": 0, "mean": nan, "std": nan, "ci": nan, "ci_low": nan, "ci_high": nan, "median": nan}
    mean = float(v.mean())
    std = float(v.std(ddof=1)) if n > 1 else nan
    ci = float(sps.t.ppf(0.5 + level / 2, n - 1) * std / math.sqrt(n)) if n > 1 else nan
    return {
        "n": n,
        "mean": mean,
        "std": std,
        "ci": ci,
        "ci_low": mean - ci,
        "ci_high": mean + ci,
        "median": float(np.median(v)),
    }


def first_reach(steps: Sequence[float], values: Sequence[float], target: float, higher_is_better: bool = True) -> float:
    """The first step at which ``values`` reaches ``target`` (``>=``, or ``<=`` for losses); NaN if never.

    This is the steps-to-target rule (and time-to-target when ``steps`` are wall-clock seconds): a
    curve that never gets there is *not reached*, not "reached at its last point". Non-finite values
    (a diverged evaluation) never count as reaching the target.
    """
    if len(steps) != len(values):
        raise ValueError(f"steps and values differ in length ({len(steps)} vs {len(values)})")
    for s, v in zip(steps, values, strict=True):
        v = float(v)
        if math.isfinite(v) and (v >= target if higher_is_better else v <= target):
            return float(s)
    return math.nan


def _check_columns(df: pd.DataFrame, columns: Sequence[str]) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"leaderboard frame lacks columns {missing}")


def with_config_hash(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with a ``config_hash`` column: the recorded one, where missing the one in the run id; unchanged
    when it has neither column (a hand-built frame: then nothing but the ``by`` columns can tell configs apart)."""
    if "run_id" not in df.columns:
        return df
    from_id = df["run_id"].astype(str).str.extract(_RUN_ID_HASH, expand=False)
    if CONFIG_KEY not in df.columns:
        return df.assign(**{CONFIG_KEY: from_id})
    return df.assign(**{CONFIG_KEY: df[CONFIG_KEY].where(df[CONFIG_KEY].notna(), from_id)})


def group_keys(df: pd.DataFrame, by: Sequence[str], by_config: bool = True) -> list[str]:
    """The columns runs are grouped by: ``by``, plus ``config_hash`` (when ``df`` has it and ``by_config``)."""
    by = list(by)
    return [*by, CONFIG_KEY] if by_config and CONFIG_KEY in df.columns and CONFIG_KEY not in by else by


def aggregate_long(
    df: pd.DataFrame,
    by: Sequence[str] = DEFAULT_BY,
    metrics: Sequence[str] = DEFAULT_METRICS,
    by_config: bool = True,
) -> pd.DataFrame:
    """One row per group and metric: ``*by, [config_hash,] metric, n_runs, n_failed, n, mean, std, ci, ...``.

    See the module docstring for which runs count (status ``ok`` only, except the target metrics). Groups are
    configurations (``config_hash``, from the column or the run id) within ``by``, never several configs pooled
    as if they were seeds; ``by_config=False`` pools them (only for a caller that has already made sure ``by``
    holds every field they differ in).
    """
    df = with_config_hash(df)
    by = group_keys(df, by, by_config)
    _check_columns(df, [*by, "status", *metrics])
    out: list[dict[str, Any]] = []
    for key, group in df.groupby(by, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        ok = group[group["status"] == "ok"]
        base = dict(zip(by, key, strict=True)) | {
            "n_runs": len(group),
            "n_failed": int((group["status"] != "ok").sum()),
        }
        for metric in metrics:
            source = group if metric in TARGET_METRICS else ok
            values = pd.to_numeric(source[metric], errors="coerce").to_numpy(dtype=float)
            out.append(base | {"metric": metric} | t_ci(values))
    return pd.DataFrame(out, columns=[*by, *AGG_COLUMNS])


def aggregate(
    df: pd.DataFrame, by: Sequence[str] = DEFAULT_BY, metrics: Sequence[str] = DEFAULT_METRICS
) -> pd.DataFrame:
    """One row per group: ``*by, n_runs, n_failed`` and ``<metric>_{mean,std,n,ci,ci_low,ci_high,median}``.

    The wide form of :func:`aggregate_long` (same rules); for a target metric ``<metric>_n`` is the
    number of runs that reached the target.
    """
    long = aggregate_long(df, by, metrics)
    by = group_keys(long, by)
    wide = long.drop_duplicates(by)[[*by, "n_runs", "n_failed"]].reset_index(drop=True)
    for metric in metrics:
        part = long[long["metric"] == metric].reset_index(drop=True)
        for stat in ("mean", "std", "n", "ci", "ci_low", "ci_high", "median"):
            wide[f"{metric}_{stat}"] = part[stat].to_numpy()
    return wide


def target_summary(df: pd.DataFrame, by: Sequence[str] = DEFAULT_BY, metric: str = "steps_to_target") -> pd.DataFrame:
    """``*by, reached, n_runs, median, mean`` of a target metric: reached = runs with a value (k of n_runs)."""
    if metric not in TARGET_METRICS:
        raise ValueError(f"target_summary is for {TARGET_METRICS}, got {metric!r}")
    agg = aggregate_long(df, by, (metric,)).rename(columns={"n": "reached"})
    return agg[[*group_keys(agg, by), "reached", "n_runs", "median", "mean"]]


def _side(df: pd.DataFrame, by: Sequence[str], value: Any, metric: str) -> np.ndarray:
    key = value if isinstance(value, tuple) else (value,)
    if len(key) != len(by):
        raise ValueError(f"{value!r} does not match by={tuple(by)}")
    mask = np.ones(len(df), dtype=bool)
    for col, v in zip(by, key, strict=True):
        mask &= (df[col] == v).to_numpy()
    rows = df[mask & (df["status"] == "ok").to_numpy()]
    for col in ("task", "depth", CONFIG_KEY):
        if col in rows.columns and col not in by and rows[col].nunique() > 1:
            what = "configurations (config_hash " if col == CONFIG_KEY else f"{col}s ("
            raise ValueError(
                f"{value!r} spans several {what}{sorted(rows[col].unique().tolist())}); filter the frame or add "
                f"{'the fields they differ in (differing_fields)' if col == CONFIG_KEY else repr(col)} to by"
            )
    values = pd.to_numeric(rows[metric], errors="coerce").to_numpy(dtype=float)
    return values[np.isfinite(values)]


def compare(
    df: pd.DataFrame,
    a: Any,
    b: Any,
    metric: str,
    by: str | Sequence[str] = "variant",
    n_boot: int = 10_000,
    seed: int = 0,
) -> dict[str, Any]:
    """Compare group ``a`` with group ``b`` (values of the ``by`` column(s)) on ``metric`` over ok runs.

    Returns means, ``diff = mean_a - mean_b``, Welch's t statistic, degrees of freedom and two-sided
    p-value (unequal variances), and a percentile bootstrap 95% CI of ``diff`` from ``n_boot``
    resamples of each side drawn with ``numpy.random.default_rng(seed)`` (so it is reproducible).
    Raises ``ValueError`` unless each side has at least 3 seeds.
    """
    by = [by] if isinstance(by, str) else list(by)
    df = with_config_hash(df)
    _check_columns(df, [*by, "status", metric])
    xa, xb = _side(df, by, a, metric), _side(df, by, b, metric)
    if min(xa.size, xb.size) < MIN_SEEDS_TO_COMPARE:
        raise ValueError(
            f"at least {MIN_SEEDS_TO_COMPARE} seeds per side are needed to compare {metric}; "
            f"got {xa.size} for {a!r} and {xb.size} for {b!r}"
        )
    welch = sps.ttest_ind(xa, xb, equal_var=False)
    va, vb = xa.var(ddof=1) / xa.size, xb.var(ddof=1) / xb.size
    dof = (va + vb) ** 2 / (va**2 / (xa.size - 1) + vb**2 / (xb.size - 1)) if va + vb > 0 else math.nan
    rng = np.random.default_rng(seed)
    boot = xa[rng.integers(0, xa.size, size=(n_boot, xa.size))].mean(axis=1) - xb[
        rng.integers(0, xb.size, size=(n_boot, xb.size))
    ].mean(axis=1)
    low, high = np.percentile(boot, [2.5, 97.5])
    return {
        "metric": metric,
        "a": a,
        "b": b,
        "n_a": int(xa.size),
        "n_b": int(xb.size),
        "mean_a": float(xa.mean()),
        "mean_b": float(xb.mean()),
        "diff": float(xa.mean() - xb.mean()),
        "t": float(welch.statistic),
        "dof": float(dof),
        "p": float(welch.pvalue),
        "boot_ci_low": float(low),
        "boot_ci_high": float(high),
        "n_boot": n_boot,
        "seed": seed,
    }


def _plain(value: Any) -> Any:
    """A hashable, comparable form of a config value: null -> None, lists -> tuples, numpy scalars -> Python."""
    if isinstance(value, Mapping):
        return tuple(sorted((k, _plain(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    if hasattr(value, "item"):
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def _flat_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A run JSON's ``config`` as flat fields; each model argument is a field of its own name (``init``), or
    ``model_args.<name>`` where that name is also a RunConfig field. A RunConfig field the JSON lacks (it was
    written before the field existed) is the field's default, which is what the run used: fields are added
    with defaults that keep earlier runs' meaning (and run ids), e.g. ``world_size`` 1."""
    if config:
        config = {**FIELD_DEFAULTS, **config}
    flat = {k: _plain(v) for k, v in config.items() if k != "model_args" and k not in NOT_HASHED}
    args = config.get("model_args") or ()
    for key, value in dict(args).items() if isinstance(args, Mapping) else args:
        flat[f"model_args.{key}" if key in config else key] = _plain(value)
    return flat


def config_table(board: pd.DataFrame, runs: Sequence[Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """The configuration fields of each run of ``board`` (same index): its config columns, and, from the run
    JSONs (``ResultsStore.load_runs()``, matched by run id), every other RunConfig field and model argument.
    A leaderboard value wins over the JSON's; the JSON fills what the leaderboard lacks. Seeds and measurement
    knobs (:data:`NOT_HASHED`) are left out: they are not part of a configuration."""
    columns = [c for c in BOARD_CONFIG_COLUMNS if c in board.columns]
    table = pd.DataFrame({c: board[c].map(_plain) for c in columns}, index=board.index)
    if not runs or "run_id" not in board.columns:
        return table
    configs = {r.get("run_id"): _flat_config(r.get("config") or {}) for r in runs}
    flat = [configs.get(run_id, {}) for run_id in board["run_id"]]
    for key in dict.fromkeys(k for f in flat for k in f):
        from_json = pd.Series([f.get(key) for f in flat], index=board.index, dtype=object)
        table[key] = table[key].where(table[key].notna(), from_json) if key in table else from_json
    return table


def differing_fields(
    board: pd.DataFrame, runs: Sequence[Mapping[str, Any]] | None = None, exclude: Sequence[str] = ()
) -> list[str]:
    """The configuration fields (:func:`config_table`) whose value differs between the configurations of
    ``board``, in display order: the columns a table of it needs so that no two rows look alike.

    A field that varies *within* one configuration (same ``config_hash``) is not part of it and never counts.
    """
    table = config_table(board, runs)
    hashes = with_config_hash(board).get(CONFIG_KEY)
    out = []
    for col in table.columns:
        values = table[col]
        if col in exclude or values.nunique(dropna=False) < 2:
            continue
        if hashes is not None and (values.groupby(hashes, dropna=False).nunique(dropna=False) > 1).any():
            continue
        out.append(col)
    return out


def with_config_columns(
    board: pd.DataFrame, runs: Sequence[Mapping[str, Any]] | None, fields: Sequence[str]
) -> pd.DataFrame:
    """``board`` with ``fields`` (from :func:`config_table`) as columns, filled from the run JSONs where the
    leaderboard lacks them; a field no run records is a column of None."""
    table = config_table(board, runs)
    missing = pd.Series(None, index=board.index, dtype=object)
    return board.assign(**{f: table.get(f, missing) for f in fields})


def by_configuration(
    board: pd.DataFrame, runs: Sequence[Mapping[str, Any]] | None, base: Sequence[str] = DEFAULT_BY
) -> tuple[pd.DataFrame, list[str]]:
    """``board`` with the configuration fields that differ between its configurations as columns, and the
    columns to name its groups by: ``base`` and those fields (aggregation adds ``config_hash`` itself)."""
    fields = differing_fields(board, runs, exclude=base)
    return with_config_columns(board, runs, fields), [*base, *fields]
