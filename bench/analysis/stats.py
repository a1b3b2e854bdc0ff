"""Seed statistics for the leaderboard: means with t confidence intervals, target rules, comparisons.

Rules (the report and the plots rely on them):

- **Which runs count.** A metric is aggregated over the runs with ``status == "ok"`` whose value is
  finite; runs that diverged, ended at the task's chance level (``failed_to_learn``), ran out of memory or raised
  are counted per group in ``n_failed`` and never averaged in (their last loss is not a result). A cost figure
  (:data:`~bench.runs.schema.COST_COLUMNS`) counts whatever the run's status, where it was measured
  (:func:`counted_rows`): a step costs the same whether training then learned. ``n_runs`` counts every run.
- **Confidence intervals.** ``std`` is the sample standard deviation (ddof=1) and the 95% CI
  half-width is ``t.ppf(0.975, n-1) · std / sqrt(n)`` (Student's t, seeds assumed independent).
  With ``n == 1`` there is no spread estimate: ``std``, ``ci``, ``ci_low`` and ``ci_high`` are NaN.
- **Steps/time to target.** A run that never reaches the target has *no* value (NaN) — never its last
  step or its total time. For ``steps_to_target`` and ``time_to_target_s`` every run of the group counts
  (whatever its status), ``n`` is the number that reached the target (``reached`` k of ``n_runs``) and
  mean/median/CI are over those runs only.
- **Seeds pool only with seeds.** Runs are grouped by their whole configuration but the seed: the
  ``config_hash`` column (:meth:`bench.runs.config.RunConfig.config_hash`) is always a grouping key besides
  the ``by`` columns shown, so two configurations that differ only in, say, warm-up never share a mean.
  :func:`differing_fields` names the configuration fields that differ between the groups of a frame and
  :func:`with_config_columns` adds them as columns, so a table can show what tells its rows apart.
- **A figure measured once is one observation.** A sweep measures throughput, memory and FLOPs once per model
  configuration and copies the figures into its other seeds' rows (:data:`bench.runs.schema.COST_COLUMNS`; the
  row's ``cost_source`` names the run that measured): :func:`observations` counts each measurement once, so
  copies never narrow a CI nor feed a test (``n = 1``: no spread, no p-value).
- **Cost figures are per machine.** Throughput, memory, FLOPs and MFU describe the machine that measured them
  (the row's ``machine`` fingerprint, :func:`bench.runs.env.machine_fingerprint`): where a frame holds runs of more
  than one machine, each cost metric gets one row per group and machine (:func:`aggregate_long`'s ``machine``
  column; ``unrecorded`` for rows from before the fingerprint), never one mean over machines. Convergence metrics
  still pool every seed of a configuration, whatever machine ran it (their ``machine`` is empty). One machine: no
  ``machine`` column, nothing changes.
- **Comparing two groups** unpaired (:func:`two_groups`, behind ``bench compare`` and the claims where the runs do
  not pair by seed, and :func:`compare`): ``diff = mean(variant) - mean(baseline)``; Welch's t-test (unequal
  variances, two-sided), the 95% Welch CI of ``diff`` (``diff ± t(0.975, ν)·√(s²/n + s_base²/n_base)``, ν the
  Welch–Satterthwaite degrees of freedom) and each side's CI need at least :data:`MIN_RUNS` counted runs a side
  (one run has no spread); two constant sides (a parameter count, say) make no test: the difference is known
  exactly, its CI has width 0, no p-value, and ``test`` says :data:`EQUAL` (a difference of 0) or :data:`EXACT`.
  Runs that pair by seed are compared by :func:`bench.analysis.pairing.difference` instead.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import special  # Student's t as scipy.stats computes it, without importing scipy.stats (~0.7 s)

from bench.runs.config import FIELD_DEFAULTS, LEGACY, NOT_HASHED, RUN_ID_PATTERN
from bench.runs.primary import primaries
from bench.runs.schema import COST_COLUMNS

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
TARGETS: tuple[str, ...] = ("target_acc", "target_loss")  # the config columns that set a target to reach
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
MIN_RUNS = 2  # counted runs a side needs for a CI, a t-test, a decided claim: one run has no spread
CONFIG_KEY = "config_hash"
MACHINE_KEY = "machine"
UNRECORDED = "unrecorded"  # the machine of a row recorded before rows carried one
_INF = math.inf
# Valid range of each quantity we draw; a band or error bar never leaves it. Unknown names: unbounded.
DOMAINS: dict[str, tuple[float, float]] = {
    **dict.fromkeys(("val_acc", "train_acc", "final_train_acc", "final_val_acc", "best_val_acc"), (0.0, 1.0)),
    **dict.fromkeys(("train_error", "val_error"), (0.0, 1.0)),
    **dict.fromkeys(("loss", "train_loss", "val_loss", "final_train_loss", "final_val_loss", "bpc"), (0.0, _INF)),
    "ppl": (1.0, _INF),  # perplexity = exp(loss) >= 1
    **dict.fromkeys(("train_samples_per_s", "train_tokens_per_s", "peak_mem_mb"), (0.0, _INF)),
    **dict.fromkeys(("grad_norm", "weight_grad_norm"), (0.0, _INF)),
}
# Leaderboard columns that record a run's configuration, in display order (``device`` there is the device the
# run resolved to, not its configured ``auto``; ``init`` is the initialisation scheme's name). Not ``steps`` and
# ``epochs``: there they are what a run *made* (fewer when it diverged); the configured ones are in its JSON.
BOARD_CONFIG_COLUMNS: tuple[str, ...] = (
    "variant", "depth", "task", "batch_size", "optimizer", "lr", "schedule", "warmup_steps", "precision", "init",
    "study",
)  # fmt: skip


# Error columns derived from the accuracy ones (1 - that accuracy): a classifier's primary metric.
DERIVED = {"train_error": "final_train_acc", "val_error": "final_val_acc"}


def with_derived(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with the :data:`DERIVED` error columns (where it has the accuracy they come from)."""
    return df.assign(**{name: 1.0 - pd.to_numeric(df[acc], errors="coerce")
                        for name, acc in DERIVED.items() if acc in df.columns})


def primary_metrics(df: pd.DataFrame) -> list[str]:
    """The primary metrics of the tasks of ``df``'s runs (:mod:`bench.runs.primary`), in order of first
    appearance, those ``df`` holds values of (``with_derived``'s error columns included): ``bench compare``'s
    default; the validation loss where it holds none of them."""
    found = [p.final for p in primaries(df["task"])] if "task" in df.columns else []
    return [m for m in found if m in df.columns and df[m].notna().any()] or ["final_val_loss"]


def headline_metrics(df: pd.DataFrame) -> list[str]:
    """What a leaderboard of ``df``'s runs shows by default: each task's primary metric and its training
    counterpart, then throughput (tokens/s where any task is a language model) and peak memory."""
    found = primaries(df["task"]) if "task" in df.columns else []
    throughput = "train_tokens_per_s" if any(p.final == "final_val_loss" for p in found) else "train_samples_per_s"
    return list(dict.fromkeys([m for p in found for m in (p.final, p.train)] + [throughput, "peak_mem_mb"]))


def domain(metric: str) -> tuple[float, float]:
    """The valid ``(low, high)`` range of a metric (``(-inf, inf)`` when we do not know it)."""
    return DOMAINS.get(metric, (-_INF, _INF))


def t_quantile(q: Any, dof: Any) -> Any:
    """Student's t quantile: ``scipy.stats.t.ppf(q, dof)``, the same function (``scipy.special.stdtrit``)."""
    return special.stdtrit(dof, q)


def t_tail(x: Any, dof: Any) -> Any:
    """P(T > x) of Student's t: ``scipy.stats.t.sf(x, dof)``, the same function (``scipy.special.stdtr`` at -x)."""
    return special.stdtr(dof, -np.asarray(x, dtype=float))


def t_halfwidth(std: Any, n: Any, level: float = 0.95) -> Any:
    """The Student-t CI half-width of a mean, ``t.ppf(0.5 + level/2, n-1) · std / √n`` (NaN where ``n < 2``);
    elementwise on arrays. The one CI formula of the tables, the claims and the figures."""
    std, n = np.asarray(std, dtype=float), np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(n > 1, t_quantile(0.5 + level / 2, np.maximum(n - 1, 1)) * std / np.sqrt(n), math.nan)
    return float(out) if out.ndim == 0 else out


def counted_rows(rows: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The runs whose ``metric`` counts (module docstring): status ``ok``, or any status for a target metric (a run
    that never reached it has no value) and for a cost figure (what a step costs does not depend on how training
    went: a run that diverged or ended at chance measured its throughput and memory as well as one that learned)."""
    if metric in TARGET_METRICS or metric in COST_COLUMNS:
        return rows
    return rows[rows["status"] == "ok"]


def observations(rows: pd.DataFrame, metric: str, column: str | None = None) -> np.ndarray:
    """The finite values of ``metric`` in ``rows`` (read from ``column``, default the metric's own), one per
    measurement: for a cost column (:data:`~bench.runs.schema.COST_COLUMNS`) the rows that share a ``cost_source``
    hold copies of one figure and count once (rows without one each measured their own)."""
    values = pd.to_numeric(rows[column or metric], errors="coerce")
    if metric in COST_COLUMNS and "cost_source" in rows.columns:
        source = rows["cost_source"].astype(object)
        own = source.isna() | (source.astype(str) == "")
        values = values[own | ~source.duplicated()]
    out = values.to_numpy(dtype=float)
    return out[np.isfinite(out)]


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
    ci = t_halfwidth(std, n, level)
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
    from_id = df["run_id"].astype(str).str.extract(RUN_ID_PATTERN, expand=False)
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
    split = several_machines(df) and MACHINE_KEY not in by
    if split:
        df = df.assign(**{MACHINE_KEY: machines_of(df)})
    out: list[dict[str, Any]] = []
    for key, group in df.groupby(by, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        base = dict(zip(by, key, strict=True)) | {
            "n_runs": len(group),
            "n_failed": int((group["status"] != "ok").sum()),
        }
        for metric in metrics:
            if not (split and metric in COST_COLUMNS):
                out.append(base | {"metric": metric} | t_ci(observations(counted_rows(group, metric), metric)))
                continue
            for machine, part in group.groupby(MACHINE_KEY, sort=True):  # a cost figure: one row per machine
                out.append(base | {"metric": metric, MACHINE_KEY: machine, "n_runs": len(part),
                                   "n_failed": int((part["status"] != "ok").sum())}
                           | t_ci(observations(counted_rows(part, metric), metric)))
    return pd.DataFrame(out, columns=[*by, *([MACHINE_KEY] if split else []), *AGG_COLUMNS])


def machines_of(df: pd.DataFrame) -> pd.Series:
    """Each row's machine fingerprint, :data:`UNRECORDED` where it has none."""
    if MACHINE_KEY not in df.columns:
        return pd.Series(UNRECORDED, index=df.index, dtype=object)
    machine = df[MACHINE_KEY].astype(object)
    return machine.where(machine.notna() & (machine.astype(str) != ""), UNRECORDED).astype(str)


# The bands of load per CPU (the 1-minute load average over the CPUs, recorded beside each cost figure:
# bench.runs.env.machine_load) within which cost figures of one machine pool: a throughput measured beside other
# work is another measurement condition, so figures measured in different bands are kept apart like machines.
LOAD_BANDS = (0.5, 1.0, 2.0, 4.0)


def targeted(board: pd.DataFrame) -> pd.Series | None:
    """Per row: did its run set a target (:data:`TARGETS`)? Only then is steps (or time) to target a measurement;
    without one it is empty by construction, not "never reached". None where ``board`` records no target column."""
    cols = [c for c in TARGETS if c in board.columns]
    return board[cols].notna().any(axis=1) if cols else None


def load_band(load_1m: Any, cpus: Any) -> str | None:
    """The :data:`LOAD_BANDS` band of a load (``load/CPU 1-2``), None where either figure is missing."""
    try:
        per_cpu = float(load_1m) / float(cpus)
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    if not math.isfinite(per_cpu):
        return None
    edges = (0.0, *LOAD_BANDS, _INF)
    low, high = next((lo, hi) for lo, hi in itertools.pairwise(edges) if per_cpu < hi)
    return f"load/CPU {low:g}-{high:g}" if high < _INF else f"load/CPU >={low:g}"


def load_bands(board: pd.DataFrame, runs: Sequence[Mapping[str, Any]] | None) -> pd.Series:
    """Each row's load band (:func:`load_band`): that of the run that measured its cost figures (its
    ``cost_source``, else the row's own run), None where the load was not recorded. Where the rows' cost figures
    were measured with different numbers of CPU threads (``threads``), the band names them too (``load/CPU 0-0.5,
    2 threads``): a figure timed on more threads is another measurement condition, never pooled with the others."""
    if board.empty or "run_id" not in board.columns:
        return pd.Series(None, index=board.index, dtype=object)
    source = board["cost_source"].astype(object) if "cost_source" in board.columns else board["run_id"]
    source = source.where(source.notna() & (source.astype(str) != ""), board["run_id"])
    loads = {r.get("run_id"): (r.get("measurements") or {}).get("load") or {} for r in runs or ()}
    bands = [load_band(loads.get(s, {}).get("load_1m"), loads.get(s, {}).get("cpus")) for s in source]
    if "threads" in board.columns:
        own = pd.to_numeric(board["threads"], errors="coerce")
        threads = source.map(dict(zip(board["run_id"], own, strict=True))).fillna(own)
        if threads.dropna().nunique() > 1:
            bands = [", ".join(filter(None, [b, None if math.isnan(t) else f"{t:g} thread{'s' * (t != 1)}"])) or None
                     for b, t in zip(bands, threads, strict=True)]
    return pd.Series(bands, index=board.index, dtype=object)


def with_load_bands(board: pd.DataFrame, runs: Sequence[Mapping[str, Any]] | None) -> pd.DataFrame:
    """``board`` whose ``machine`` also names the load band its cost figures were measured in (``3f2a1b0c at
    load/CPU 2-4``; the band of the run that measured them, its ``cost_source``), where the rows' figures were
    measured in more than one band; else ``board`` as it is. Cost figures are then pooled and compared within one
    machine and band only (:func:`several_machines`); convergence metrics still pool every seed."""
    bands = load_bands(board, runs)
    if bands.dropna().nunique() < 2:
        return board
    machine = machines_of(board)
    shown = [m if b is None else f"{m} at {b}" for m, b in zip(machine, bands, strict=True)]
    return board.assign(**{MACHINE_KEY: shown})


UNRECORDED_LOAD = "load unrecorded"


def cost_by_band(rows: pd.DataFrame, metric: str, bands: pd.Series) -> list[tuple[str, dict[str, float]]]:
    """The leaderboard's cost cell of one configuration (on one machine) whose figures of ``metric`` were measured
    in more than one load band: ``(band, t_ci statistics)`` per band, in band order (an unrecorded load last, as
    :data:`UNRECORDED_LOAD`), so a cell never averages two loads. Empty where ``metric`` is no cost figure or its
    measured values share one band: the cell then pools them. ``bands``: :func:`load_bands` of ``rows``."""
    if metric not in COST_COLUMNS or metric not in rows.columns:
        return []
    counted = counted_rows(rows, metric)
    measured = counted[np.isfinite(pd.to_numeric(counted[metric], errors="coerce").to_numpy(dtype=float))]
    if bands.loc[measured.index].dropna().nunique() < 2:
        return []
    band = bands.loc[measured.index].fillna(UNRECORDED_LOAD)
    order = sorted(band.unique(), key=lambda b: (b == UNRECORDED_LOAD, b))  # "0-0.5" < "0.5-1" < ... < ">=4"
    return [(b, t_ci(observations(measured[band == b], metric))) for b in order]


BandCells = list[tuple[str, dict[str, float]]]  # a configuration's figures of one metric, per load band (cost_by_band)


def banded_cells(board: pd.DataFrame, runs: Sequence[Mapping[str, Any]] | None,
                 metrics: Sequence[str] = COST_COLUMNS) -> Iterator[tuple[pd.DataFrame, str, BandCells]]:
    """Per configuration of ``board`` (its configuration hash) on one machine, in the order of those keys, and per
    one of ``metrics`` it measured in more than one load band: ``(its rows, the metric, its cells)``, the cells of
    :func:`cost_by_band`; nothing where the board's figures share one band."""
    bands = load_bands(board, runs)
    if bands.dropna().nunique() < 2:
        return
    configs = with_config_hash(board).assign(**{MACHINE_KEY: machines_of(board)})
    keys = [CONFIG_KEY] if CONFIG_KEY in configs.columns else []
    for _, group in configs.groupby([*keys, MACHINE_KEY], sort=True, dropna=False):
        for metric in metrics:
            cells = cost_by_band(group, metric, bands.loc[group.index])
            if cells:
                yield group, metric, cells


def split_by_load_band(board: pd.DataFrame, runs: Sequence[Mapping[str, Any]] | None) -> bool:
    """Whether some configuration of ``board`` (on one machine) measured a cost figure in more than one load band:
    the leaderboard's cells then name the bands (:func:`cost_by_band`)."""
    return next(banded_cells(board, runs), None) is not None


LOAD_BAND_KEY = "load_band"  # the column of a figure's board that names each row's band (with_mixed_load_bands)


def with_mixed_load_bands(board: pd.DataFrame, runs: Sequence[Mapping[str, Any]] | None) -> pd.DataFrame:
    """The board a cost figure draws: :func:`with_load_bands` (its ``machine`` naming the band, a line, bar or point per
    band; the band alone in :data:`LOAD_BAND_KEY`) where some configuration measured a cost figure in more than one
    load band (:func:`split_by_load_band`), else ``board`` as it is."""
    if not split_by_load_band(board, runs):
        return board
    return with_load_bands(board, runs).assign(**{LOAD_BAND_KEY: load_bands(board, runs)})


def unbanded_machines(df: pd.DataFrame) -> pd.Series:
    """:func:`machines_of` without the load band :func:`with_mixed_load_bands` added: the machine a figure's
    convergence value pools the seeds of, whatever band their cost figures were measured in."""
    machine = machines_of(df)
    if LOAD_BAND_KEY not in df.columns:
        return machine
    return pd.Series([m.removesuffix(f" at {b}") if isinstance(b, str) else m
                      for m, b in zip(machine, df[LOAD_BAND_KEY], strict=True)], index=df.index, dtype=object)


def several_machines(df: pd.DataFrame) -> bool:
    """Whether ``df``'s rows were measured on more than one machine (an unrecorded one counts as a machine)."""
    return MACHINE_KEY in df.columns and machines_of(df).nunique() > 1


def aggregate(
    df: pd.DataFrame, by: Sequence[str] = DEFAULT_BY, metrics: Sequence[str] = DEFAULT_METRICS
) -> pd.DataFrame:
    """One row per group: ``*by, n_runs, n_failed`` and ``<metric>_{mean,std,n,ci,ci_low,ci_high,median}``.

    The wide form of :func:`aggregate_long` (same rules); for a target metric ``<metric>_n`` is the
    number of runs that reached the target.
    """
    long = aggregate_long(df, by, metrics)
    by = group_keys(long, by)
    stats = ("mean", "std", "n", "ci", "ci_low", "ci_high", "median")
    cost = long[long["metric"].isin(COST_COLUMNS)] if MACHINE_KEY in long.columns else long.iloc[:0]
    if cost.empty:  # one machine (or no cost metric): one row per group
        wide = long.drop_duplicates(by)[[*by, "n_runs", "n_failed"]].reset_index(drop=True)
        for metric in metrics:
            part = long[long["metric"] == metric].reset_index(drop=True)
            for stat in stats:
                wide[f"{metric}_{stat}"] = part[stat].to_numpy()
        return wide
    # Several machines: one row per group and machine; its cost cells are that machine's, its convergence cells
    # the group's over every machine (and n_runs, n_failed the group's).
    wide = cost.drop_duplicates([*by, MACHINE_KEY])[[*by, MACHINE_KEY]]
    one = cost[cost["metric"] == cost["metric"].iloc[0]]  # its machines' rows partition each group's runs
    counts = one.groupby(by, dropna=False, sort=False)[["n_runs", "n_failed"]].sum().reset_index()
    wide = wide.merge(counts, on=by, how="left")
    for metric in metrics:
        keys = [*by, MACHINE_KEY] if metric in COST_COLUMNS else by
        part = long[long["metric"] == metric][[*keys, *stats]]
        wide = wide.merge(part.rename(columns={s: f"{metric}_{s}" for s in stats}), on=keys, how="left")
    return wide.reset_index(drop=True)


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
    rows = counted_rows(df[mask], metric)
    for col in ("task", "depth", CONFIG_KEY):
        if col in rows.columns and col not in by and rows[col].nunique() > 1:
            what = "configurations (config_hash " if col == CONFIG_KEY else f"{col}s ("
            raise ValueError(
                f"{value!r} spans several {what}{sorted(rows[col].unique().tolist())}); filter the frame or add "
                f"{'the fields they differ in (differing_fields)' if col == CONFIG_KEY else repr(col)} to by"
            )
    values = pd.to_numeric(rows[metric], errors="coerce").to_numpy(dtype=float)
    return values[np.isfinite(values)]


@dataclass(frozen=True)
class TwoGroups:
    """A variant's runs against a baseline's on one metric: each side's count, mean and 95% CI half-width, and
    ``diff`` with the test that produced its interval (``test``): Welch's (``diff = mean - mean_base``) where both
    sides have :data:`MIN_RUNS` runs and some spread, or the paired t over the seeds both sides ran
    (:func:`bench.analysis.pairing.difference`: ``diff`` the mean of the per-seed differences over ``pairs`` seeds)."""

    n: int
    mean: float
    ci: float
    n_base: int
    mean_base: float
    ci_base: float
    diff: float
    t: float = math.nan
    dof: float = math.nan
    p: float = math.nan
    ci_diff: float = math.nan  # diff's CI half-width at level (Welch: t(0.975, dof) · √(s²/n + s_base²/n_base))
    test: str = ""  # what produced the interval and p: WELCH, PAIRED, EQUAL/EXACT (no spread), "" (too few runs)
    pairs: int = 0  # paired: the seeds both sides ran, each a pair
    p_exact: float = math.nan  # paired, few pairs: the exact sign-flip p of the per-seed differences
    level: float = 0.95  # the confidence level of ci_diff

    @property
    def enough(self) -> bool:
        """Both sides have the runs a spread needs."""
        return min(self.n, self.n_base) >= MIN_RUNS

    @property
    def low(self) -> float:
        return self.diff - self.ci_diff

    @property
    def high(self) -> float:
        return self.diff + self.ci_diff


WELCH = "Welch"
PAIRED = "paired t"
# No spread to test against: two constant sides, or the same difference at every seed. The difference is known exactly
# (its interval has width 0, there is no p-value): EQUAL where it is 0 (to within rounding), EXACT otherwise.
EQUAL = "equal"
EXACT = "exact"
ROUNDING = 64 * float(np.finfo(float).eps)  # a spread or difference below this × the values' size is rounding


def without_spread(out: TwoGroups, scale: float) -> TwoGroups:
    """``out`` as a difference known exactly (:data:`EQUAL` / :data:`EXACT`): no interval, no p of any test, and a
    difference within the rounding of values of size ``scale`` set to 0 (no ``+2.2e-17`` where nothing differs)."""
    if abs(out.diff) <= ROUNDING * scale:
        return dataclasses.replace(out, diff=0.0, ci_diff=0.0, test=EQUAL, p_exact=math.nan)
    return dataclasses.replace(out, ci_diff=0.0, test=EXACT, p_exact=math.nan)


def two_groups(values: Sequence[float] | np.ndarray, baseline: Sequence[float] | np.ndarray,
               level: float = 0.95) -> TwoGroups:
    """``values`` (a variant's runs) against ``baseline``'s, unpaired (Welch), non-finite values left out (module
    docstring); the interval at ``level``."""
    x, base = (np.asarray(v, dtype=float) for v in (values, baseline))
    x, base = x[np.isfinite(x)], base[np.isfinite(base)]
    s, b = t_ci(x), t_ci(base)
    out = TwoGroups(int(s["n"]), s["mean"], s["ci"], int(b["n"]), b["mean"], b["ci"], s["mean"] - b["mean"],
                    level=level)
    if not out.enough:  # fewer than two runs a side: no spread, no interval, no test
        return out
    va, vb = x.var(ddof=1) / x.size, base.var(ddof=1) / base.size
    scale = float(max(np.abs(x).max(), np.abs(base).max()))
    if math.sqrt(va + vb) <= ROUNDING * scale:  # two constant sides: the difference is known, there is nothing to test
        return without_spread(out, scale)
    dof = (va + vb) ** 2 / (va**2 / (x.size - 1) + vb**2 / (base.size - 1))
    t = float((x.mean() - base.mean()) / math.sqrt(va + vb))  # Welch's t (scipy.stats.ttest_ind, equal_var=False)
    return dataclasses.replace(out, t=t, dof=float(dof), p=float(2 * t_tail(abs(t), dof)), test=WELCH,
                               ci_diff=float(t_quantile(0.5 + level / 2, dof) * math.sqrt(va + vb)))


def compare(
    df: pd.DataFrame,
    a: Any,
    b: Any,
    metric: str,
    by: str | Sequence[str] = "variant",
    n_boot: int = 10_000,
    seed: int = 0,
) -> dict[str, Any]:
    """Compare group ``a`` (the variant) with group ``b`` (the baseline), values of the ``by`` column(s), on
    ``metric`` over ok runs: :func:`two_groups` (``diff = mean_a - mean_b``, Welch's t, degrees of freedom and
    two-sided p) and a percentile bootstrap 95% CI of ``diff`` from ``n_boot`` resamples of each side drawn with
    ``numpy.random.default_rng(seed)`` (so it is reproducible). Raises ``ValueError`` unless each side has at
    least :data:`MIN_RUNS` runs.
    """
    by = [by] if isinstance(by, str) else list(by)
    df = with_config_hash(df)
    _check_columns(df, [*by, "status", metric])
    xa, xb = _side(df, by, a, metric), _side(df, by, b, metric)
    if min(xa.size, xb.size) < MIN_RUNS:
        raise ValueError(
            f"at least {MIN_RUNS} seeds per side are needed to compare {metric}; "
            f"got {xa.size} for {a!r} and {xb.size} for {b!r}"
        )
    g = two_groups(xa, xb)
    rng = np.random.default_rng(seed)
    boot = xa[rng.integers(0, xa.size, size=(n_boot, xa.size))].mean(axis=1) - xb[
        rng.integers(0, xb.size, size=(n_boot, xb.size))
    ].mean(axis=1)
    low, high = np.percentile(boot, [2.5, 97.5])
    return {
        "metric": metric, "a": a, "b": b, "n_a": g.n, "n_b": g.n_base, "mean_a": g.mean, "mean_b": g.mean_base,
        "diff": g.diff, "t": g.t, "dof": g.dof, "p": g.p, "boot_ci_low": float(low), "boot_ci_high": float(high),
        "n_boot": n_boot, "seed": seed,
    }  # fmt: skip


def mean_ci(df: pd.DataFrame, keys: list[str], x: str, y: str, metric: str | None = None) -> pd.DataFrame:
    """Per ``keys + [x]``: mean of ``y`` over runs, its 95% t-CI half-width ``ci`` (NaN for one run) and the
    interval ``lo``/``hi`` clipped to ``domain(metric or y)`` (what a figure draws). A group whose values are all
    NaN keeps a NaN mean: a gap in the line, never a point interpolated over."""
    values = pd.to_numeric(df[y], errors="coerce").replace([np.inf, -np.inf], np.nan)
    out = df.assign(_y=values).groupby([*keys, x])["_y"].agg(["mean", "std", "count"]).reset_index()
    out["ci"] = t_halfwidth(out["std"].to_numpy(dtype=float), out["count"].to_numpy(dtype=float))
    low, high = domain(metric or y)
    half = out["ci"].fillna(0.0)
    out["lo"] = (out["mean"] - half).clip(low, high)
    out["hi"] = (out["mean"] + half).clip(low, high)
    return out.sort_values([*keys, x]).reset_index(drop=True)


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
    with defaults that keep earlier runs' meaning (and run ids), e.g. ``world_size`` 1; a field of ``LEGACY``
    takes the value the runs before it had (``init_stream`` global)."""
    if config:
        config = {**FIELD_DEFAULTS, **LEGACY, **config}
    flat = {k: _plain(v) for k, v in config.items() if k != "model_args" and k not in NOT_HASHED}
    args = config.get("model_args") or ()
    for key, value in dict(args).items() if isinstance(args, Mapping) else args:
        flat[f"model_args.{key}" if key in config else key] = _plain(value)
    return flat


def config_table(board: pd.DataFrame, runs: Sequence[Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """The configuration fields of each run of ``board`` (same index): its config columns, and, from the run
    JSONs (``ResultsStore.load_runs()``, matched by run id), every other RunConfig field and model argument.
    A leaderboard value wins over the JSON's; the JSON fills what the leaderboard lacks. Seeds and measurement
    knobs (:data:`NOT_HASHED`) are left out: they are not part of a configuration.

    Where the run JSONs are read and a run has none (its file lost), what its row does not hold is *unknown*, not
    missing: the run takes the value the other runs of its configuration (same ``config_hash``) record, where they
    agree, which is the value it trained with, since the hash covers every field. So a lost file neither splits its
    configuration nor makes a field look as if it varied inside one (:func:`differing_fields`)."""
    return _config_cells(board, runs)[0]


def _config_cells(board: pd.DataFrame, runs: Sequence[Mapping[str, Any]] | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`config_table`, and which of its cells are still unknown: those of a run without a recorded config
    whose configuration's other runs record no value of the field (or disagree on it)."""
    columns = [c for c in BOARD_CONFIG_COLUMNS if c in board.columns]
    table = pd.DataFrame({c: board[c].map(_plain) for c in columns}, index=board.index)
    if not runs or "run_id" not in board.columns:
        return table, pd.DataFrame(False, index=table.index, columns=table.columns)
    wanted = set(board["run_id"])  # a study's table of a folder of many studies flattens its own runs only
    configs = {r.get("run_id"): _flat_config(r.get("config") or {}) for r in runs if r.get("run_id") in wanted}
    flat = [configs.get(run_id, {}) for run_id in board["run_id"]]
    for key in dict.fromkeys(k for f in flat for k in f):
        from_json = pd.Series([f.get(key) for f in flat], index=board.index, dtype=object)
        table[key] = table[key].where(table[key].notna(), from_json) if key in table else from_json
    unrecorded = pd.Series([not f for f in flat], index=board.index)
    unknown = table.isna() & unrecorded.to_numpy()[:, None]
    hashes = with_config_hash(board).get(CONFIG_KEY)
    if hashes is None or not unknown.to_numpy().any():
        return table, unknown
    for col in table.columns[unknown.any()]:
        known = ~unknown[col] & hashes.notna()
        groups = table.loc[known, col].groupby(hashes[known], dropna=False)
        agreed = groups.nunique(dropna=False) == 1
        fill = groups.first()[agreed]  # the value the configuration's recorded runs agree on (NaN where none)
        settled = unknown[col] & hashes.isin(agreed.index[agreed])
        table[col] = table[col].where(~settled, hashes.map(fill))
        unknown[col] = unknown[col] & ~settled
    return table, unknown


def differing_fields(
    board: pd.DataFrame, runs: Sequence[Mapping[str, Any]] | None = None, exclude: Sequence[str] = ()
) -> list[str]:
    """The configuration fields (:func:`config_table`) whose value differs between the configurations of
    ``board``, in display order: the columns a table of it needs so that no two rows look alike.

    A field that varies *within* one configuration (same ``config_hash``) is not part of it and never counts. A value
    nobody recorded (a run whose JSON is lost, in a configuration none of whose other runs records the field) counts
    neither way: it cannot make a field vary inside its configuration, which would hide the field from every row
    (and merge rows that differ in it), nor make every field its run lacks look different. Such a run's row shows
    the fields the others need, blank; if it then looks like another configuration's, ``bench compare`` says so.
    """
    table, unknown = _config_cells(board, runs)
    hashes = with_config_hash(board).get(CONFIG_KEY)
    out = []
    for col in table.columns:
        values = table[col][~unknown[col]]
        if col in exclude or values.nunique(dropna=False) < 2:
            continue
        if hashes is not None and (values.groupby(hashes[values.index], dropna=False).nunique(dropna=False) > 1).any():
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
