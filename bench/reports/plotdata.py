"""The data behind the figures and the report: tidy frames of a results directory and seed statistics.

The statistics follow :mod:`bench.analysis.stats` (mean over seeds, Student-t 95% CI); a CI is an interval
for the *mean*, and with n=3 seeds its half-width can exceed the metric's range (an accuracy CI of
0.75 ± 1.07). We clip every interval to the metric's valid range (:data:`DOMAINS`) before drawing it,
and the figures say so. The figures re-draw He et al. 2015, "Deep Residual Learning for Image
Recognition" (Fig. 1, 6), Srivastava et al. 2015, "Training Very Deep Networks" (Fig. 1) and Xiong et
al. 2020, "On Layer Normalization in the Transformer Architecture" (Fig. 2, 3).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import seaborn as sns

from bench.analysis.stats import DOMAINS, config_table, differing_fields, domain, mean_ci  # noqa: F401  (re-exported for the figures)
from bench.runs import registry_index
from bench.runs.reading import read_runs, remembered
from bench.runs.results import ResultsStore

_NOT_METRICS = ("step", "epoch", "wall_s", "train_time_s", "lr")  # curve columns that are axes, not metrics
_META = ("run_id", "variant", "family", "depth", "task", "seed", "warmup_steps", "status", "study")
def _registered(name: str) -> dict[str, Any] | None:
    """``variants.describe(name)``, or None for a name the registry does not know (a plugin not loaded now); only
    where the registry is imported (:func:`bench.runs.registry_index.loaded_registry`)."""
    registry = registry_index.loaded_registry()
    try:
        return None if registry is None else registry.describe(name)
    except ValueError:
        return None


def _base_of(info: Mapping[str, Any]) -> tuple[str, list[tuple[str, Any]]] | None:
    """The registered variant a depth preset ``info`` specialises, and the other keywords it sets differently.

    Candidates: same family, axes and keywords, no depth pinned, and the same default for every keyword
    ``info`` does not pin. The one differing from ``info`` on the fewest keywords wins (ties: sorted name).
    """
    fixed, defaults = info["fixed"], info["defaults"]
    best: tuple[int, str, list[tuple[str, Any]]] | None = None
    registry = registry_index.loaded_registry()
    for name in registry.list_variants(family=info["family"]) if registry is not None else ():
        other = _registered(name)
        if (
            other is None
            or "depth" in other.get("fixed", {})
            or (other["family"], other["axes"]) != (info["family"], info["axes"])
            or other["defaults"].keys() != defaults.keys()
            or any(other["defaults"][k] != v for k, v in defaults.items() if k not in fixed)
        ):
            continue
        extra = sorted((k, v) for k, v in fixed.items() if k != "depth" and other["defaults"][k] != v)
        if best is None or len(extra) < best[0]:
            best = (len(extra), name, extra)
    return None if best is None else (best[1], best[2])


def variant_key(variant: str, depth: Any = None) -> str:
    """The series name on depth axes, from the registry (``variants.describe``), never from the name's spelling.

    A preset that pins ``depth`` (``resnet56``, ``highway_mlp20``, ``rezero_resnet56``) joins the series of the
    variant it specialises (:func:`_base_of`: ``resnet``, ``highway_mlp``, ``rezero``); keywords it sets
    differently from that base are appended, sorted, so different designs never share a series
    (``preact_resnet164`` -> ``preact (block=bottleneck, shortcut=B)``, ``densenet_bc100_k12`` ->
    ``densenet (bc=True)``). Any other name — one that does not pin depth, a preset without a base, a name the
    registry does not know (a plugin not loaded now) — is its own series. ``depth`` is accepted for callers of
    the earlier signature; the key does not depend on it.

    Where the registry is not imported (a command that only reads), the series comes from its static index
    (:mod:`bench.runs.registry_index`, written by :func:`registry_entries`).
    """
    if registry_index.loaded_registry() is None:
        indexed = registry_index.entry(variant)
        return str(indexed["series"]) if indexed is not None else variant
    info = _registered(variant)
    found = _base_of(info) if info is not None and "depth" in info.get("fixed", {}) else None
    if found is None:
        return variant
    base, extra = found
    return f"{base} ({', '.join(f'{k}={v}' for k, v in extra)})" if extra else base


def is_ln_transformer(variant: str) -> str | None:
    """``"post"`` or ``"pre"`` for a Post-LN / Pre-LN Transformer in Xiong et al. 2020's sense, else None.

    Read from ``variants.describe(variant)["axes"]``: the combinator is ``"add"``, the body names
    ``attention``, and the placement is exactly ``"post"`` or ``"pre"``; so DeepNorm (scaled shortcut),
    ReZero (no norm) and Mix-LN (mixed placement) are None, as is a name the registry does not know.
    """
    info = _registered(variant) if registry_index.loaded_registry() is not None else registry_index.entry(variant)
    axes = info.get("axes", {}) if info else {}
    if axes.get("combinator") != "add" or "attention" not in str(axes.get("body", "")):
        return None
    placement = axes.get("placement")
    return placement if placement in ("post", "pre") else None


def registry_entries() -> dict[str, dict[str, Any]]:
    """What :mod:`bench.runs.registry_index` holds of each registered variant, asked of the imported registry:
    family, paper, axes, :func:`variant_key` and the fields its registration fixes."""
    registry = registry_index.loaded_registry()
    if registry is None:
        raise RuntimeError("import variants first: the index is written from the registry itself")
    out = {}
    for name in registry.list_variants():
        info = registry.describe(name)
        out[name] = {"family": info["family"], "paper": info.get("paper"), "axes": dict(info.get("axes", {})),
                     "series": variant_key(name), "fixes": sorted(info.get("fixed", {}))}
    return out


def with_key(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with the columns a figure encodes its series by:

    - ``series``: the :func:`variant_key` of each row's variant (looked up once per name): what the colour shows;
    - ``key``: ``series`` followed by the row's ``config`` label (:func:`config_labels`) where it has one, so
      series never pool the seeds of several configurations;
    - ``style``: the rest of the row's configuration, ``depth 56`` and/or its ``config`` label, what line style and
      marker show (``""`` when there is neither).
    """
    # Each text is made once per distinct value and mapped onto the rows (a probe table has millions of them).
    series = _mapped(df["variant"], lambda v: variant_key(str(v)))
    config = df["config"].fillna("").astype(str) if "config" in df.columns else pd.Series("", index=df.index)
    depth = _mapped(df["depth"], _depth_text) if "depth" in df.columns else pd.Series("", index=df.index)
    depth = depth.astype(object)
    style = depth.where(config == "", depth + ", " + config).where(depth != "", config)
    key = series + _mapped(config, lambda c: f" ({c})" if c else "").astype(config.dtype)  # str where pandas has it
    return df.assign(series=series, key=key, style=style.astype(object))


def _mapped(values: pd.Series, text: Any) -> pd.Series:
    """``text(v)`` of each of ``values``, called once per distinct value (missing values included)."""
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return pd.Series([text(u) for u in uniques], dtype=object).take(codes).set_axis(values.index)


def _depth_text(depth: Any) -> str:
    """``depth 56`` (``""`` for a run without a depth)."""
    try:
        d = float(depth)
    except (TypeError, ValueError):
        return ""
    return "" if math.isnan(d) else f"depth {int(d) if d.is_integer() else d}"


Colour = tuple[float, float, float]
# Two qualitative palettes of well-separated colours: tab10 first, then seaborn's "dark" (the same ten hues, darker):
# the smallest CIE76 distance between any two of the 20 is 17 (tested; 2.3 is a just-noticeable difference).
# Beyond 20 variants, evenly spaced husl hues: distinct, but nearer each other.
_PALETTES: tuple[Colour, ...] = tuple(map(tuple, [*sns.color_palette("tab10"), *sns.color_palette("dark")]))  # type: ignore[arg-type]

def palette(variants: Iterable[str]) -> dict[str, Colour]:
    """``{variant: colour}`` for one study: its distinct variants (series keys, :func:`variant_key`), sorted, take
    the colours of :data:`_PALETTES` in turn (evenly spaced husl hues past 20). Built once per study
    (:func:`make_all`) and passed to each figure, so a variant has one colour in all of them and no two variants
    share one."""
    names = sorted({str(v) for v in variants})
    extra = len(names) - len(_PALETTES)
    colours = [*_PALETTES, *(tuple(c) for c in sns.color_palette("husl", extra))] if extra > 0 else list(_PALETTES)
    return dict(zip(names, colours, strict=False))  # type: ignore[arg-type]


def palette_of(*frames: pd.DataFrame) -> dict[str, Colour]:
    """:func:`palette` of the variant series of every row of ``frames`` (any task): what a figure drawn on its own
    uses when it is not given the study's mapping."""
    return palette(variant_key(str(v)) for df in frames if len(df) for v in df["variant"].unique())


@dataclass
class Frames:
    """Everything the plots and the report read: the leaderboard and tidy curves/probes with run metadata, and the
    run JSONs they come from."""

    leaderboard: pd.DataFrame  # with load_1m, load_cpus, other_cpu: the machine load when its costs were measured
    curves: pd.DataFrame  # run meta + split ("train"|"eval"), step, metric, value
    probes: pd.DataFrame  # run meta + step, layer, block, kind, metric, value
    runs: Sequence[Mapping[str, Any]] = field(default_factory=list, repr=False)


def _finite_or_nan(v: Any) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return math.nan
    return x if math.isfinite(x) else math.nan


def curves_frame(runs: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Tidy curves of run JSONs: one row per run, split, step and *recorded* metric; ``train_time_s`` is the
    training time (timed steps only, no evaluation) up to an evaluation, NaN on training-step rows.

    A metric recorded as null or non-finite (a diverged step) stays as a NaN row, so the line shows a
    gap there instead of joining its neighbours; a metric a point does not record gives no row at all
    (an evaluation that skips ``train_acc`` is not a gap in it).
    """
    rows = []
    for run in runs:
        meta = {k: run.get("row", {}).get(k) for k in _META} | {"run_id": run["run_id"]}
        for split in ("train", "eval"):
            for point in run.get("curves", {}).get(split, []):
                at = {"split": split, "step": point["step"], "train_time_s": _finite_or_nan(point.get("train_time_s"))}
                rows += [
                    meta | at | {"metric": k, "value": _finite_or_nan(v)}
                    for k, v in point.items()
                    if k not in _NOT_METRICS
                ]
    return pd.DataFrame(rows, columns=[*_META, "split", "step", "train_time_s", "metric", "value"])


def probes_frame(runs: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Tidy probe rows of run JSONs joined with each run's metadata (variant, depth, task, seed ...).

    ``kind`` (:mod:`bench.runs.probes`) is NaN in rows recorded before probes carried it."""
    rows = []
    for run in runs:
        meta = {k: run.get("row", {}).get(k) for k in _META} | {"run_id": run["run_id"]}
        rows += [meta | dict(r) for r in run.get("probes", [])]
    return pd.DataFrame(rows, columns=[*_META, "step", "layer", "block", "kind", "metric", "value"])


def load_frames(results_dir: str | Path, study: str | None = None) -> Frames:
    """Read ``results_dir``; with ``study``, keep only that study's runs (ValueError if it has none). Made once per
    command (:func:`bench.runs.reading.remembered`): the report and its figures read the same frames."""
    return remembered(("frames", str(Path(results_dir).resolve()), study), lambda: _load_frames(results_dir, study))


def _load_frames(results_dir: str | Path, study: str | None) -> Frames:
    store = ResultsStore(results_dir)
    board = store.load_leaderboard()
    if study is None:
        runs = read_runs(results_dir)
        store.warn_missing(board, runs)
        return frames_of(board, runs)
    if not (board["study"] == study).any():
        raise ValueError(
            f"no runs of study {study!r} in {results_dir}; "
            f"studies: {sorted(board['study'].dropna().unique().tolist())}"
        )
    board = board[board["study"] == study].reset_index(drop=True)
    runs = read_runs(results_dir, set(board["run_id"]))  # the study's run JSONs alone parsed
    store.warn_missing(board, runs)
    return frames_of(board, runs)


def frames_of(board: pd.DataFrame, runs: Sequence[Mapping[str, Any]]) -> Frames:
    """The :class:`Frames` of a leaderboard and its run JSONs, each row labelled with its configuration
    (:func:`config_labels`)."""
    label = config_labels(board, runs)
    board, curves, probes = (f.assign(config=[label.get(r, "") for r in f["run_id"]])
                             for f in (with_load(board, runs), curves_frame(runs), probes_frame(runs)))
    return Frames(board, curves, probes, list(runs))


def with_load(board: pd.DataFrame, runs: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """``board`` with the machine load recorded when each row's cost figures were measured (its run JSON's
    ``measurements.load``, :func:`bench.runs.env.machine_load`): ``load_1m``, ``load_cpus``, ``other_cpu``; NaN for
    a run that recorded none."""
    load = {r.get("run_id"): (r.get("measurements") or {}).get("load") or {} for r in runs}
    return board.assign(**{column: [_finite_or_nan(load.get(run_id, {}).get(key)) for run_id in board["run_id"]]
                           for column, key in (("load_1m", "load_1m"), ("load_cpus", "cpus"),
                                               ("other_cpu", "other_cpu"))})


# What every figure already tells apart (colour by variant, style by depth, one task per figure).
_DRAWN = ("variant", "depth", "task", "study", "preset")


def config_labels(board: pd.DataFrame, runs: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Run id -> the configuration fields that differ between the runs' configurations and no figure encodes
    (``init=xavier, warmup_steps=50``), so series pool only the seeds of one configuration; empty when none
    differ."""
    runs = list(runs)
    fields = [f for f in differing_fields(board, runs) if f not in _DRAWN]
    if not fields or board.empty:
        return {}
    table = config_table(board, runs)
    text = table[fields].apply(lambda r: ", ".join(f"{f}={v}" for f, v in r.items()), axis=1)
    return dict(zip(board["run_id"], text, strict=True))


def one_task(df: pd.DataFrame, task: str | None) -> tuple[pd.DataFrame, str]:
    """The rows of ``task`` (or of the only task there is); ValueError unless exactly one task remains."""
    if task is not None:
        df = df[df["task"] == task]
    tasks = sorted(df["task"].dropna().unique().tolist())
    if len(tasks) != 1:
        raise ValueError(f"the figure needs data of exactly one task; found {tasks or 'none'} (pass task=...)")
    return df, str(tasks[0])


def grad_norm_init_data(probes: pd.DataFrame, task: str | None = None) -> tuple[pd.DataFrame, str, str]:
    """The data of the step-0 gradient-norm figure (Xiong et al. 2020, Fig. 3): ``(stats, metric, task)``.

    ``metric`` is ``weight_grad_norm`` (the weight matrices of each unit's branch, Xiong's quantity) when any
    run of the task recorded it, else ``grad_norm`` (whole-unit norm, runs recorded before the weight-only
    probe); one figure never mixes the two, so runs lacking the chosen metric are left out. ``stats`` is
    :func:`mean_ci` over runs per ``kind`` (``""`` where rows carry none), series ``key``, ``depth`` and
    ``index``: the unit's position among the units *of its kind* in its run (0 = nearest the input), so a
    Transformer's n-th feed-forward sublayer sits at x = n whatever the attention sublayers in between.
    """
    df = probes[(probes["step"] == 0) & probes["metric"].isin(("weight_grad_norm", "grad_norm"))]
    df, task = one_task(df, task)
    metric = "weight_grad_norm" if (df["metric"] == "weight_grad_norm").any() else "grad_norm"
    df = with_key(df[df["metric"] == metric])
    df = df.assign(kind=df["kind"].map(lambda k: "" if pd.isna(k) else str(k)))
    df = df.assign(index=df.groupby(["run_id", "kind"])["layer"].rank(method="dense").astype(int) - 1)
    return mean_ci(df, ["kind", "series", "key", "style"], "index", "value", metric), metric, task
