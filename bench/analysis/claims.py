"""Paper claims as data: the vocabulary study files state them in, and their evaluation on measured runs.

A study file (``bench/studies/<name>.toml``) lists its claims in a ``[[claims]]`` array; ``bench report``
checks each one against that study's runs. No claim lives in Python and no variant name appears here: the
groups compared are filters on recorded fields. Fields of a claim:

- ``id`` (unique in the study), ``paper`` (source with figure/table), ``text`` (the claim in words).
- ``table``: what the claim is about: ``leaderboard`` (default, the runs' rows), or the summary table of the
  analysis the study runs (:data:`TABLES`: ``lesion``, ``gradcorr``, ``landscape``; see :mod:`bench.analysis.analyses`),
  whose rows are models (or a model and a number of deleted units) and whose columns are its ``metric``.
- ``kind``: ``compare`` (default), ``slope`` or ``value``.
- ``metric``: a leaderboard column (``final_train_loss``); ``train_error`` / ``val_error`` (1 - the final
  accuracy); or a probe quantity ``probe:<probe metric>:<unit kind>:<position>``, e.g.
  ``probe:weight_grad_norm:ffn:last``: the per-layer probe of the units of that kind (``attn``, ``ffn``,
  ``conv``, ...; ``*`` = every unit) at probe step ``step`` (default 0, initialisation), taken at the
  ``first`` unit, the ``last`` one, or as ``last_over_first``. Every quantity is one value per run.
- ``where = {field = value | [values]}``: the runs the claim is about. A field is a leaderboard column,
  a run-config field or model argument (``init``; ``preset`` is the preset that first asked for a run: two presets
  that repeat a configuration share its runs), or a variant axis (``family``, ``combinator``, ``placement``,
  ``body``, ``norm``) as the run recorded it (its JSON's ``axes``; for runs recorded before runs kept them, as
  ``variants.describe`` derives them now).
- ``for_each``: a field; one verdict per value of it. ``count_above``: per group, also count the runs whose
  value is above this (e.g. seeds that failed to train, training error > 0.5).
- ``compare``: the field whose values ``a`` (baseline) and ``b`` are compared (``"min"``/``"max"``: the
  smallest/largest value present); ``expect`` how ``b`` relates to ``a``: ``greater``, ``less``,
  ``not_greater``, ``not_less`` or ``similar``; ``threshold`` the margin (>= 0, default 0), a fraction of
  ``|mean(a)|`` with ``relative = true``.
- ``slope``: ``x`` (a field) and ``expect_range = [low, high]`` for the least-squares slope of log(metric)
  against log(x) over the runs.
- ``value``: one group's mean against the constant ``threshold``; ``expect`` as for ``compare``; with ``similar``
  (a published figure reproduced), ``tolerance`` is how far from it still counts as the same figure.
- ``multiplier``: variant ``b`` against the baseline variant ``a`` on their scaling fits of the loss ``metric``
  (:mod:`bench.analysis.multiplier`: each variant's runs over its ladder of sizes; E held at the task's floor
  where known): ``quantity`` ``multiplier`` (default: the compute multiplier, one verdict per size of ``b``),
  ``steps_ratio`` (``a``'s steps to the target loss over ``b``'s, per size) or ``alpha_diff`` (α_b − α_a, one
  verdict), and ``expect_range = [low, high]``: the bootstrap interval inside the range agrees, wholly outside it
  disagrees, else (or where the fit is refused: fewer than 3 sizes ...) inconclusive.

Rules of the verdicts (``agrees`` / ``disagrees`` / ``inconclusive``):

- **Which runs count.** For a leaderboard metric the runs with status ``ok`` and a finite value; for a probe
  quantity every run that recorded it (a probe at step s was taken before any later divergence). A cost figure
  (throughput, memory, FLOPs) a sweep measured once and copied into its other seeds' rows counts once: a group of
  such copies has n = 1 and its claim is inconclusive.
- **Seeds pool only with seeds.** Within a claim (and ``for_each`` value), runs are split by every
  configuration field that varies inside one compared group, so a group's mean is always over the seeds of
  one configuration; a group whose runs still differ in ``config_hash`` (in a field recorded nowhere else)
  is inconclusive. A configuration under which one compared group has no runs at all (a preset that runs other
  designs) is left out when another configuration has runs in every group. Fields that differ *between* the
  groups but are fixed within each (an init that comes with a variant, say) are reported as confounds; where the
  claim compares one axis (placement, norm), so are the other axes (designs that also differ in norm).
- **compare.** The difference b − a and its 95% confidence interval ``[lo, hi]``: **paired by seed** where the two
  groups differ in the compared field only (no confound, below) and share at least two seeds (each once a group):
  the mean of the per-seed differences ``d`` over the n shared seeds, ``mean(d) ± t(0.975, n−1)·sd(d)/√n``
  (:mod:`bench.analysis.pairing`: a run whose partner seed is missing is left out; few pairs also give the exact
  sign-flip p); else **Welch's**, ``diff = mean(b) - mean(a)``, ``diff ± t(0.975, ν)·√(s_a²/n_a + s_b²/n_b)`` (ν
  the Welch–Satterthwaite degrees of freedom). A figure timed on the wall clock (throughput, step time, time to the
  target, a run's evaluation or whole time: :data:`bench.analysis.timed.TIMED`) never pairs, and its verdict's note
  says that its difference is confounded with the load. Each verdict names its test and n. Two constant groups: a
  width of 0; fewer than two counted runs in a group: no interval, *inconclusive*. A study run ``--until-decided``
  reads its intervals at its looks' level instead of 95% (:mod:`bench.analysis.sequential`). With the margin ``m``
  (``threshold``):
  ``greater`` agrees when ``lo > m`` and disagrees when ``hi <= m``; ``less`` agrees when ``hi < -m`` and disagrees
  when ``lo >= -m``; ``not_greater`` (b is no more than ``m`` above a: non-inferiority) agrees when ``hi <= m`` and
  disagrees when ``lo > m``; ``not_less`` agrees when ``lo >= -m`` and disagrees when ``hi < -m``; ``similar``
  (equivalence, two one-sided tests at 2.5% each) agrees when ``-m <= lo`` and ``hi <= m``, disagrees when the
  interval lies wholly outside ``[-m, m]``; anything else is *inconclusive*. A point estimate inside the margin
  never agrees on its own: absence of evidence is not evidence of absence. If every run of one group failed
  (status not ``ok``: diverged, out of memory, an error, or ``failed_to_learn``, a run that ended at the task's
  chance level) while the other group trained, the failed group is the worse one — lower is better for
  ``*_loss`` and ``*_error``, higher for ``*_acc``; other metrics cannot rank a failure, which leaves the claim
  inconclusive; two groups that both failed decide nothing (and never agree). If only some runs failed but
  more (as a fraction) in one group, an answer that does not also make that group the worse one is downgraded to
  inconclusive. For ``steps_to_target`` and ``time_to_target_s`` (lower is better) a run that set a target and never
  reached it counts as a failed run does, whatever its status (one that reached it and diverged later did reach it):
  it has no value, and would otherwise drop out of its group, leaving the runs that reached the target to speak for
  the design alone.
- **Cost figures per machine.** A claim on a cost figure (throughput, memory, FLOPs, MFU) over runs of several
  machines (the rows' ``machine`` fingerprints) gets one verdict per machine: they are never pooled.
- **slope.** The slope's 95% CI (Student t, n - 2 dof) inside ``expect_range``: agrees; entirely outside:
  disagrees; else (or with fewer than three runs or two x values) inconclusive. Non-positive values cannot
  enter a log and are left out (and counted in the note).
- **value.** One group's mean and its 95% CI ``[lo, hi]`` (Student t) against the constant ``threshold`` T:
  ``greater`` agrees when ``lo > T`` and disagrees when ``hi <= T`` (``less``, ``not_greater``, ``not_less``
  alike: the whole interval on one side of T decides); ``similar`` (a published figure reproduced) agrees when the
  whole interval lies within ``tolerance`` of T, disagrees when it lies wholly outside ``[T - tolerance, T +
  tolerance]``, and is inconclusive otherwise.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from bench.analysis.multiplier import LOSSES, fit_ladders, floor_of, ladders_from
from bench.analysis.pairing import difference, seeded
from bench.analysis.sequential import TESTS as _TESTS
from bench.analysis.sequential import above, within
from bench.analysis.stats import (
    CONFIG_KEY,
    DERIVED,
    MACHINE_KEY,
    MIN_RUNS,
    PAIRED,
    TARGET_METRICS,
    config_table,
    counted_rows,
    machines_of,
    observations,
    several_machines,
    t_ci,
    t_quantile,
    targeted,
    with_config_hash,
    with_load_bands,
)
from bench.analysis.timed import TIMED
from bench.runs import registry_index
from bench.runs.results import COLUMNS
from bench.runs.schema import COST_COLUMNS

KINDS = ("compare", "slope", "value", "multiplier")
QUANTITIES = ("multiplier", "steps_ratio", "alpha_diff")  # what a multiplier claim reads of the scaling fit
EXPECTS = ("greater", "less", "not_greater", "not_less", "similar")
POSITIONS = ("first", "last", "last_over_first")
AXES = ("family", "combinator", "placement", "body", "norm")
_COMMON = ("id", "paper", "text", "kind", "metric", "step", "where", "for_each", "count_above", "table")
# What a claim may be about besides the leaderboard: the summary tables of the analyses a study runs after (or
# instead of) its training runs (bench.analysis.analyses), and the columns each has.
TABLES: dict[str, tuple[str, ...]] = {
    "lesion": ("error", "loss", "error_increase"),
    "gradcorr": ("neighbor_corr", "corr_length"),
    "landscape": ("loss_center", "edge_rise", "nonconvex_fraction", "roughness"),
    "cost": ("step_overhead", "mem_overhead", "params_overhead", "flops_overhead"),
}
_FIELDS = {
    "compare": (*_COMMON, "compare", "a", "b", "expect", "threshold", "relative"),
    "slope": (*_COMMON, "x", "expect_range"),
    "value": (*_COMMON, "expect", "threshold", "tolerance"),
    "multiplier": ("id", "paper", "text", "kind", "metric", "where", "a", "b", "quantity", "expect_range"),
}
_REQUIRED = {
    "multiplier": ("a", "b", "expect_range"),
    "compare": ("compare", "a", "b", "expect"),
    "slope": ("x", "expect_range"),
    "value": ("expect", "threshold"),
}


@dataclass(frozen=True)
class Claim:
    """One parsed, validated claim (see the module docstring for the fields)."""

    id: str
    paper: str
    text: str
    metric: str
    kind: str = "compare"
    where: dict[str, Any] = field(default_factory=dict)
    for_each: str | None = None
    count_above: float | None = None
    step: int = 0
    compare: str | None = None
    a: Any = None
    b: Any = None
    expect: str | None = None
    threshold: float = 0.0
    relative: bool = False
    tolerance: float = 0.0  # value / similar: how far from the threshold still counts as the same figure
    x: str | None = None
    expect_range: tuple[float, float] | None = None
    table: str = "leaderboard"  # or the summary table of an analysis (TABLES)
    quantity: str = "multiplier"  # multiplier: what it reads of the scaling fit (QUANTITIES)

    @property
    def probe(self) -> tuple[str, str, str] | None:
        """``(probe metric, unit kind, position)`` of a probe quantity, else None."""
        if not self.metric.startswith("probe:"):
            return None
        _, name, kind, position = self.metric.split(":")
        return name, kind, position


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _scalar(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool))


def _metric_error(metric: str) -> str | None:
    if metric.startswith("probe:"):
        parts = metric.split(":")
        if len(parts) != 4 or not parts[1] or not parts[2]:
            return f"probe metric {metric!r} is not probe:<probe metric>:<unit kind>:<position>"
        if parts[3] not in POSITIONS:
            return f"probe metric {metric!r}: unknown position {parts[3]!r}; positions: {', '.join(POSITIONS)}"
        return None
    if metric in DERIVED or metric in COLUMNS:
        return None
    return (f"unknown metric {metric!r}: not a leaderboard column, one of {', '.join(DERIVED)}, "
            "nor probe:<probe metric>:<unit kind>:<position>")  # fmt: skip


def _errors(t: Mapping[str, Any]) -> Iterable[str]:
    """Every problem of a claim table whose kind, field names and required fields are already checked."""
    for name in ("id", "paper", "text", "metric"):
        if not isinstance(t[name], str) or not t[name].strip():
            yield f"{name} must be a non-empty string, got {t[name]!r}"
    table = t.get("table", "leaderboard")
    if table != "leaderboard":
        if table not in TABLES:
            yield f"unknown table {table!r}; tables: leaderboard, {', '.join(TABLES)}"
        elif t["metric"] not in TABLES[table]:
            yield f"unknown metric {t['metric']!r} of table {table!r}; its metrics: {', '.join(TABLES[table])}"
    elif isinstance(t["metric"], str) and (problem := _metric_error(t["metric"])):
        yield problem
    if "step" in t and not str(t["metric"]).startswith("probe:"):
        yield "step is for probe metrics only"
    if "step" in t and not (isinstance(t["step"], int) and not isinstance(t["step"], bool) and t["step"] >= 0):
        yield f"step must be an integer >= 0, got {t['step']!r}"
    where = t.get("where", {})
    if not isinstance(where, dict):
        yield f"where must be a table of field = value or [values], got {where!r}"
    else:
        for key, v in where.items():
            if not (_scalar(v) or (isinstance(v, list) and v and all(_scalar(x) for x in v))):
                yield f"where.{key} must be a value or a non-empty list of values, got {v!r}"
    for name in ("for_each", "compare", "x"):
        if name in t and (not isinstance(t[name], str) or not t[name]):
            yield f"{name} must be a field name, got {t[name]!r}"
    if "for_each" in t and t["for_each"] in (t.get("compare"), t.get("x")):
        yield f"for_each and {'compare' if 'compare' in t else 'x'} name the same field {t['for_each']!r}"
    if "count_above" in t and not _number(t["count_above"]):
        yield f"count_above must be a number, got {t['count_above']!r}"
    if "expect" in t:
        allowed = EXPECTS if t.get("kind", "compare") == "compare" else (*_TESTS, "similar") \
            if t.get("kind") == "value" else tuple(_TESTS)
        if t["expect"] not in allowed:
            yield f"unknown expect {t['expect']!r}; expect: {', '.join(allowed)}"
    if "threshold" in t and not _number(t["threshold"]):
        yield f"threshold must be a number, got {t['threshold']!r}"
    elif t.get("kind", "compare") == "compare" and t.get("threshold", 0) < 0:
        yield f"threshold is a margin and must be >= 0, got {t['threshold']!r}"
    if "tolerance" in t and (not _number(t["tolerance"]) or t["tolerance"] < 0 or t.get("expect") != "similar"):
        yield f"tolerance is for expect = \"similar\" and must be a number >= 0, got {t['tolerance']!r}"
    if "relative" in t and not isinstance(t["relative"], bool):
        yield f"relative must be true or false, got {t['relative']!r}"
    for name in ("a", "b"):
        if name in t and not _scalar(t[name]):
            yield f'{name} must be a single value (or "min"/"max"), got {t[name]!r}'
    if "a" in t and t.get("a") == t.get("b"):
        yield f"a and b are the same value {t['a']!r}"
    if t.get("kind") == "multiplier" and t.get("quantity", "multiplier") not in QUANTITIES:
        yield f"unknown quantity {t['quantity']!r}; quantities: {', '.join(QUANTITIES)}"
    if t.get("kind") == "multiplier" and t.get("metric") not in LOSSES:
        yield f"a multiplier claim fits a loss: metric must be {' or '.join(LOSSES)}, got {t.get('metric')!r}"
    if "expect_range" in t:
        r = t["expect_range"]
        if not (isinstance(r, list) and len(r) == 2 and all(_number(v) for v in r) and r[0] < r[1]):
            yield f"expect_range must be [low, high] with low < high, got {r!r}"


def parse_claim(table: Any, label: str = "claim") -> Claim:
    """A :class:`Claim` from one ``[[claims]]`` table; ``ValueError`` naming the claim and the field otherwise."""
    if not isinstance(table, dict):
        raise ValueError(f"{label}: a claim is a table ([[claims]] ...), got {table!r}")
    if isinstance(table.get("id"), str) and table["id"]:
        label = f"{label.rsplit(' #', 1)[0]} {table['id']!r}"
    kind = table.get("kind", "compare")
    if kind not in KINDS:
        raise ValueError(f"{label}: unknown kind {kind!r}; kinds: {', '.join(KINDS)}")
    unknown = sorted(set(table) - set(_FIELDS[kind]))
    if unknown:
        raise ValueError(f"{label}: unknown field(s) {unknown} for kind {kind!r}; fields: {', '.join(_FIELDS[kind])}")
    missing = [f for f in ("id", "paper", "text", "metric", *_REQUIRED[kind]) if f not in table]
    if missing:
        raise ValueError(f"{label}: missing field(s) {missing}")
    problems = list(_errors(table))
    if problems:
        raise ValueError(f"{label}: {'; '.join(problems)}")
    t = dict(table)
    if "expect_range" in t:
        t["expect_range"] = tuple(float(v) for v in t["expect_range"])
    for name in ("threshold", "count_above", "tolerance"):
        if name in t:
            t[name] = float(t[name])
    return Claim(**t)


def parse_claims(tables: Any, source: str = "study") -> list[Claim]:
    """Every claim of a study's ``claims`` array, validated; ids must be unique."""
    if not isinstance(tables, list):
        raise ValueError(f"{source}: claims must be an array of tables ([[claims]]), got {tables!r}")
    claims = [parse_claim(t, f"{source}: claim #{i + 1}") for i, t in enumerate(tables)]
    ids = [c.id for c in claims]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ValueError(f"{source}: claim id(s) {dup} used more than once")
    return claims


# --- evaluation ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """The runs of one compared group (or one x value): counts and the t-CI of their mean at ``level``."""

    label: str
    n_runs: int
    n_failed: int  # status other than ok
    n: int  # runs counted (see "Which runs count")
    mean: float
    ci: float
    n_above: int | None = None  # counted runs whose value is above the claim's count_above
    run_ids: tuple[str, ...] = ()  # the group's runs (what --until-decided adds seeds to)
    std: float = math.nan  # the seed-to-seed standard deviation of the counted runs' values (ddof 1)
    level: float = 0.95  # of ``ci``: a value claim's group under --until-decided is read at its looks' level


@dataclass(frozen=True)
class Result:
    """The verdict of one claim in one context (a ``for_each`` value and/or a configuration split)."""

    claim: Claim
    context: str
    verdict: str  # agrees | disagrees | inconclusive
    groups: tuple[Group, ...] = ()
    diff: float = math.nan  # compare: b - a (paired: the mean per-seed difference); value: mean - threshold; slope
    threshold: float = math.nan  # compare: the margin (relative already applied)
    spread: float = math.nan  # compare: the CI half-width of diff; value: the mean's; slope: the slope's
    note: str = ""
    test: str = ""  # compare: what the interval and p come from (stats.PAIRED, stats.WELCH), "" where neither ran
    pairs: int = 0  # compare, paired: the seeds both groups ran
    p: float = math.nan  # compare: the two-sided p of the difference
    p_exact: float = math.nan  # compare, paired, few pairs: the exact sign-flip p
    level: float = 0.95  # the confidence level of the interval (below 0.95 never; above it under --until-decided)

    @property
    def compared(self) -> int:
        """How many seeds the verdict read: its pairs, else the smaller group's counted runs."""
        if self.test == PAIRED:
            return self.pairs
        return min((g.n for g in self.groups), default=0)


@functools.cache
def _registry_axes(variant: str) -> dict[str, Any]:
    """The axes ``variants.describe`` derives now (its static index where the registry is not imported,
    :mod:`bench.runs.registry_index`): only for runs recorded before run JSONs kept their own."""
    registry = registry_index.loaded_registry()
    try:
        info = registry.describe(variant) if registry is not None else registry_index.entry(variant)
    except ValueError:  # not registered in this process (a plugin not loaded): its axes are unknown
        return {}
    if info is None:
        return {}
    return {"family": info.get("family"), **info.get("axes", {})}


def claim_frame(
    board: pd.DataFrame, runs: Sequence[Mapping[str, Any]] | None = None, axes: Iterable[str] = AXES
) -> pd.DataFrame:
    """The leaderboard with what claims filter on: config fields and model arguments from the run JSONs, the
    variant ``axes`` each run recorded (where the leaderboard lacks them; from the registry for runs recorded
    before run JSONs kept them) and the derived metrics."""
    frame = with_config_hash(board.reset_index(drop=True))
    table = config_table(frame, runs)
    # consolidated (.copy()): the columns inserted below would otherwise fragment it (pandas warns past 100 blocks)
    frame = frame.assign(**{c: table[c] for c in table.columns}).copy()
    recorded = {r.get("run_id"): r["axes"] for r in runs or () if isinstance(r.get("axes"), dict)}

    def axes_of(run_id: Any, variant: Any) -> dict[str, Any]:
        return recorded[run_id] if run_id in recorded else _registry_axes(str(variant))

    for axis in axes:
        found = pd.Series([axes_of(r, v).get(axis) for r, v in zip(frame["run_id"], frame["variant"], strict=True)],
                          index=frame.index, dtype=object)
        frame[axis] = frame[axis].where(frame[axis].notna(), found) if axis in frame else found
    for name, acc in DERIVED.items():
        if acc in frame:
            frame[name] = 1.0 - pd.to_numeric(frame[acc], errors="coerce")
    # the preset that first asked for each run: a claim may filter on it, though it is no part of a configuration
    presets = {r.get("run_id"): (r.get("config") or {}).get("preset") for r in runs or ()}
    if "preset" not in frame and any(presets.values()):
        frame["preset"] = frame["run_id"].map(presets).astype(object)
    return frame


def probe_quantity(probes: pd.DataFrame, metric: str, kind: str, position: str, step: int = 0) -> pd.Series:
    """Per run id: the probe ``metric`` of the units of ``kind`` (``*``: all) at ``step``, at the first
    (lowest ``layer``) or last unit, or last / first (NaN unless two units and a non-zero first)."""
    if probes is None or probes.empty or (kind != "*" and "kind" not in probes.columns):
        return pd.Series(dtype=float)
    rows = probes[(pd.to_numeric(probes["step"], errors="coerce") == step) & (probes["metric"] == metric)]
    if kind != "*":
        rows = rows[rows["kind"] == kind]
    per_layer = rows.assign(value=pd.to_numeric(rows["value"], errors="coerce")).groupby(["run_id", "layer"])["value"]
    out = {}
    for run_id, v in per_layer.mean().groupby(level="run_id"):
        first, last = float(v.iloc[0]), float(v.iloc[-1])
        ok = len(v) > 1 and first != 0
        out[run_id] = first if position == "first" else last if position == "last" else last / first if ok else math.nan
    return pd.Series(out, dtype=float)


def _orientation(metric: str) -> str | None:
    if metric in DERIVED or metric in TARGET_METRICS or metric.endswith(("_loss", "_error")):
        return "lower"
    return "higher" if metric.endswith("_acc") else None


def _fmt(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return "none" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


def _matches(column: pd.Series, value: Any) -> pd.Series:
    """Rows whose value equals ``value`` (or is in it, a list); numbers compare as numbers (20 == 20.0)."""
    values = value if isinstance(value, list) else [value]
    mask = pd.Series(False, index=column.index)
    for v in values:
        if _number(v):
            mask |= pd.to_numeric(column, errors="coerce") == v
        else:
            # astype: an empty column of pandas 3's str dtype maps to str, which | with bool deprecates
            mask |= column.map(lambda c, v=v: c == v or str(c) == str(v)).astype(bool)
    return mask


def _present(column: pd.Series) -> list[Any]:
    values = list(dict.fromkeys(v for v in column if v is not None and not (isinstance(v, float) and math.isnan(v))))
    try:
        return sorted(values)
    except TypeError:
        return sorted(values, key=str)


def _counted_rows(rows: pd.DataFrame, claim: Claim) -> pd.DataFrame:
    """The rows that count (module docstring: "Which runs count"): every run that recorded a probe quantity."""
    return rows if claim.probe else counted_rows(rows, claim.metric)


def _counted(rows: pd.DataFrame, claim: Claim) -> np.ndarray:
    """The values that count: a cost figure measured once and copied into the other seeds' rows counts once
    (:func:`bench.analysis.stats.observations`)."""
    return observations(_counted_rows(rows, claim), claim.metric, "_value")


def _group(label: str, rows: pd.DataFrame, claim: Claim, level: float = 0.95) -> Group:
    values = _counted(rows, claim)
    s = t_ci(values, level)
    above = int((values[np.isfinite(values)] > claim.count_above).sum()) if claim.count_above is not None else None
    return Group(label, len(rows), int((rows["status"] != "ok").sum()), int(s["n"]), s["mean"], s["ci"], above,
                 tuple(map(str, rows["run_id"])) if "run_id" in rows else (), s["std"], level)


def _test(d: float, tol: float, half: float, enough: bool) -> str:
    """Is ``d`` above the margin ``tol``, judged by its CI ``d ± half``? *yes* when the whole interval is above it,
    *no* when the whole interval is at or below it, else *inconclusive* (and without the runs for a CI):
    :func:`bench.analysis.sequential.above`."""
    return str(above(d, tol, half)) if enough else "inconclusive"


def _within(d: float, tol: float, half: float, enough: bool) -> str:
    """Equivalence (two one-sided tests): *agrees* when the CI ``d ± half`` lies inside ``[-tol, tol]``,
    *disagrees* when it lies wholly outside, else *inconclusive*: :func:`bench.analysis.sequential.within`."""
    return str(within(d, tol, half)) if enough else "inconclusive"


def _answer(test: str, want: str) -> str:
    return "inconclusive" if test == "inconclusive" else "agrees" if test == want else "disagrees"


def _unreached(rows: pd.DataFrame) -> int:
    """How many of ``rows`` set a target (every row, where the frame records no target) and never reached it (no
    value)."""
    set_one = targeted(rows)
    return int(((True if set_one is None else set_one) & rows["_value"].isna()).sum())


@dataclass(frozen=True)
class _Losses:
    """What counts against a group in a compare claim, in words: failed runs (status not ``ok``), or for a target
    metric runs that never reached the target, whatever their status (a run has no value then, and would otherwise
    drop out of its group, leaving the runs that did reach it to speak for the design)."""

    lost: tuple[int, int]  # per group (a, b): its runs counted as failures
    all_: str  # every run of both groups lost
    one: str  # every run of one group lost
    more: str  # more runs lost in one group (its label follows)
    similar: str  # similar values, but more runs lost in one group

    @staticmethod
    def of(claim: Claim, ga: Group, gb: Group, rows: tuple[pd.DataFrame, pd.DataFrame]) -> _Losses:
        """``claim``'s losses of groups ``ga`` and ``gb``, whose runs are ``rows``."""
        if claim.metric in TARGET_METRICS and not claim.probe:
            return _Losses((_unreached(rows[0]), _unreached(rows[1])), "no run of either group reached the target: two "
                           "failures never agree", "no run of one group reached the target: it counts as the worse",
                           "more runs never reached the target with", "similar values, but more runs never reached the "
                           "target in one group")  # fmt: skip
        return _Losses((ga.n_failed, gb.n_failed), "every run of both groups failed (diverged, failed to learn, ...): "
                       "two failures never agree", "every run of one group failed: it counts as the worse",
                       "more runs failed with", "similar values, but more runs failed in one group")  # fmt: skip


def _compare(claim: Claim, context: str, part: pd.DataFrame, level: float = 0.95, pairs: bool = True) -> Result:
    """A compare claim's verdict in one context: paired by seed where ``pairs`` (the groups differ in the compared
    field only) and their seeds pair up (:func:`bench.analysis.pairing.difference`), else Welch's."""
    field_, present = str(claim.compare), _present(part[str(claim.compare)])
    a, b = ({"min": present[0], "max": present[-1]}.get(v, v) if present else v for v in (claim.a, claim.b))
    rows_a, rows_b = (part[_matches(part[field_], v)] for v in (a, b))
    ga, gb = (_group(f"{field_}={_fmt(v)}", rows, claim) for v, rows in ((a, rows_a), (b, rows_b)))
    tol = claim.threshold * abs(ga.mean) if claim.relative else claim.threshold
    (vb, sb), (va, sa) = (seeded(_counted_rows(rows, claim), claim.metric, "_value")
                          for rows in (rows_b, rows_a))  # b: the variant
    pair = difference(vb, va, sb if pairs else None, sa if pairs else None, level)
    diff, spread = pair.diff, pair.ci_diff  # the interval of the difference: diff ± spread
    done: dict[str, Any] = {"groups": (ga, gb), "diff": diff, "threshold": tol, "spread": spread, "test": pair.test,
                            "pairs": pair.pairs, "p": pair.p, "p_exact": pair.p_exact, "level": level}
    if _matches(pd.Series([a]), b).iloc[0]:
        return Result(claim, context, "inconclusive", note=f"only {field_}={_fmt(a)} is present", **done)
    empty = [g.label for g in (ga, gb) if g.n_runs == 0]
    if empty:
        return Result(claim, context, "inconclusive", note=f"{_NO_RUNS}{' or '.join(empty)}", **done)
    orient = None if claim.probe else _orientation(claim.metric)
    worse, note = None, ""  # the group the failures make worse: "a" or "b"
    losses = _Losses.of(claim, ga, gb, (rows_a, rows_b))
    lost_a, lost_b = losses.lost
    if ga.n == 0 or gb.n == 0:
        all_failed = [g.n == 0 and lost == g.n_runs for g, lost in ((ga, lost_a), (gb, lost_b))]
        if all(all_failed):
            return Result(claim, context, "inconclusive", note=losses.all_, **done)
        if ga.n == gb.n == 0 or not any(all_failed):
            return Result(claim, context, "inconclusive", note="no counted runs in a group", **done)
        if orient is None:
            return Result(claim, context, "inconclusive", note=f"every run failed in a group; {claim.metric} "
                          "cannot rank a failure", **done)  # fmt: skip
        worse, note = ("a" if all_failed[0] else "b"), losses.one
        sign, want = _TESTS.get(str(claim.expect), (1, ""))
        test = "yes" if ((worse == "b") == (orient == "lower")) == (sign > 0) else "no"
        verdict = "disagrees" if claim.expect == "similar" else _answer(test, want)
        return Result(claim, context, verdict, note=note, **done)
    enough = pair.enough
    if orient is not None and lost_a / ga.n_runs != lost_b / gb.n_runs:
        worse = "a" if lost_a / ga.n_runs > lost_b / gb.n_runs else "b"
    if claim.expect == "similar":
        verdict = _within(diff, tol, spread, enough)
        if worse and verdict == "agrees":
            verdict, note = "inconclusive", losses.similar
        return Result(claim, context, verdict, note=note, **done)
    sign, want = _TESTS[str(claim.expect)]
    test = _test(sign * diff, tol, spread, enough)
    if worse is not None and test != ("yes" if ((worse == "b") == (orient == "lower")) == (sign > 0) else "no"):
        if test != "inconclusive":
            note = f"{losses.more} {(ga if worse == 'a' else gb).label}, which the values do not bear out"
        test = "inconclusive"
    return Result(claim, context, _answer(test, want), note=note, **done)


def _value(claim: Claim, context: str, part: pd.DataFrame, level: float = 0.95, pairs: bool = True) -> Result:
    g = _group("all", part, claim, level)
    diff = g.mean - claim.threshold
    note = "" if g.n else "no counted runs"
    if claim.expect == "similar":  # a paper's figure reproduced: the mean's whole CI within the tolerance of it
        verdict = _within(diff, claim.tolerance, g.ci, g.n >= MIN_RUNS)
        return Result(claim, context, verdict, (g,), diff, claim.tolerance, g.ci, note, level=level)
    sign, want = _TESTS[str(claim.expect)]  # one group against a constant: the mean's whole CI on one side of it
    test = _test(sign * diff, 0.0, g.ci, g.n >= MIN_RUNS)
    return Result(claim, context, _answer(test, want), (g,), diff, claim.threshold, g.ci, note, level=level)


def _slope(claim: Claim, context: str, part: pd.DataFrame, level: float = 0.95, pairs: bool = True) -> Result:
    x = str(claim.x)
    groups = tuple(_group(f"{x}={_fmt(v)}", part[_matches(part[x], v)], claim) for v in _present(part[x]))
    counted = part if claim.probe else counted_rows(part, claim.metric)  # the rows its groups count
    xs, ys = pd.to_numeric(counted[x], errors="coerce").to_numpy(float), counted["_value"].to_numpy(float)
    finite = np.isfinite(xs) & np.isfinite(ys)
    keep = finite & (xs > 0) & (ys > 0)
    note = f"{int((finite & ~keep).sum())} non-positive value(s) left out of the log" if (finite & ~keep).any() else ""
    n = int(keep.sum())
    if n < 3 or len(set(xs[keep])) < 2:
        note = "; ".join(filter(None, [note, f"{n} run(s) at {len(set(xs[keep]))} {x} value(s): too few for a slope"]))
        return Result(claim, context, "inconclusive", groups, note=note)
    slope, stderr = least_squares_slope(np.log(xs[keep]), np.log(ys[keep]))
    half = float(t_quantile(0.975, n - 2) * stderr)
    low, high = slope - half, slope + half
    r0, r1 = claim.expect_range or (-math.inf, math.inf)
    verdict = "agrees" if r0 <= low and high <= r1 else "disagrees" if high < r0 or low > r1 else "inconclusive"
    return Result(claim, context, verdict, groups, float(slope), math.nan, half, note)


def least_squares_slope(xs: np.ndarray, ys: np.ndarray) -> tuple[float, float]:
    """The least-squares slope of ``ys`` on ``xs`` and its standard error, computed as ``scipy.stats.linregress``
    computes them (three points or more, two x values or more), without importing scipy.stats."""
    ssxm, ssxym, _, ssym = np.cov(xs, ys, bias=True).flat
    # r, clipped: rounding can carry it past ±1
    r = float(np.clip(ssxym / np.sqrt(ssxm * ssym), -1.0, 1.0)) if ssym != 0.0 else math.nan if ssxym == 0 else 0.0
    return float(ssxym / ssxm), float(np.sqrt((1 - r**2) * ssym / ssxm / (len(xs) - 2)))


_NO_RUNS = "no runs with "
_CONFOUNDED = "the groups also differ in "  # a confound: the groups' runs are compared unpaired


def _splits(part: pd.DataFrame, side: str | None, fields: Sequence[str]) -> list[tuple[str, pd.DataFrame, str]]:
    """``(label, runs, note)`` per configuration context: ``part`` split by every field that varies inside one
    compared group (``side`` value). The note names the confounds (fields that differ between the groups
    only), or says that a group still spans several configurations: a difference no recorded field shows."""
    keys = part[side].map(_fmt) if side else pd.Series("", index=part.index)

    columns = list(dict.fromkeys([*(f for f in fields if f != side), *([CONFIG_KEY] if CONFIG_KEY in part else [])]))
    varies = _varies_within(part[columns], keys)
    varying = [f for f in fields if f != side and varies[f]]
    if not varying:
        if CONFIG_KEY in part and varies[CONFIG_KEY]:
            return [("", part, "a group spans several configurations (config_hash) that differ in no recorded "
                     "field; their seeds cannot be pooled (the run JSONs name the difference)")]  # fmt: skip
        confounds = [f for f in fields if f not in (side, "variant") and part[f].nunique(dropna=False) > 1]
        return [("", part, f"{_CONFOUNDED}{', '.join(confounds)}" if confounds else "")]
    out = []
    for values, sub in part.groupby(varying, dropna=False, sort=True):
        values = values if isinstance(values, tuple) else (values,)
        label = ", ".join(f"{f}={_fmt(v)}" for f, v in zip(varying, values, strict=True))
        out += [(", ".join(filter(None, [label, inner])), s, n) for inner, s, n in _splits(sub, side, fields)]
    return out


def _varies_within(frame: pd.DataFrame, keys: pd.Series) -> dict[str, bool]:
    """Per column of ``frame``: whether it takes several values inside one group of ``keys`` (a missing value is a
    value), as ``groupby(keys).nunique(dropna=False) > 1`` says, counted on integer codes (a claim's frame has a
    column per configuration field)."""
    group = pd.factorize(keys, use_na_sentinel=False)[0].astype(np.int64)
    groups = len(np.unique(group))
    out = {}
    for column in frame.columns:
        values = pd.factorize(frame[column], use_na_sentinel=False)[0].astype(np.int64)
        out[column] = len(np.unique(group * (int(values.max(initial=0)) + 1) + values)) > groups
    return out


def evaluate_claims(
    claims: Sequence[Claim],
    board: pd.DataFrame,
    probes: pd.DataFrame | None = None,
    runs: Sequence[Mapping[str, Any]] | None = None,
    level: float = 0.95,
) -> list[Result]:
    """Every claim's verdicts on ``board`` (a leaderboard frame), ``probes`` (the tidy probe frame of
    :func:`bench.reports.plotdata.probes_frame`) and the run JSONs (``ResultsStore.load_runs()``, for config fields
    the leaderboard lacks). A field a claim needs that no run records gives an inconclusive result. ``level``: of
    the compare and value claims' intervals (a study run ``--until-decided`` reads them at its looks' level,
    :class:`bench.analysis.sequential.Looks`)."""
    named = {f for c in claims for f in (*c.where, c.for_each, c.compare, c.x)}
    # a claim that compares one axis checks the others for confounds (_evaluate): every axis is then read
    axes = AXES if any((c.compare or c.x) in AXES for c in claims) else [a for a in AXES if a in named]
    frame = with_load_bands(claim_frame(board, runs, axes), runs)  # cost: one load band
    fields = [c for c in config_table(frame, runs).columns if c not in AXES]
    return [r for claim in claims for r in (_multiplier(claim, frame, board, runs or []) if claim.kind == "multiplier"
                                            else _evaluate(claim, frame, fields, probes, level))]


def _multiplier(claim: Claim, frame: pd.DataFrame, board: pd.DataFrame, runs: Sequence[Mapping[str, Any]]
                ) -> list[Result]:
    """A multiplier claim: design ``b``'s ``quantity`` against baseline ``a`` from their scaling fits
    (:mod:`bench.analysis.multiplier`, E held at the task's floor where known), one verdict per size of ``b`` (the
    exponent difference: one); its bootstrap interval inside ``expect_range`` agrees, wholly outside disagrees."""
    df = frame
    for key, value in claim.where.items():
        df = df[_matches(df[key], value)] if key in df else df.iloc[:0]
    ids = set(df.loc[df["variant"].isin([claim.a, claim.b]), "run_id"])
    mine = [r for r in runs if r.get("run_id") in ids]
    try:  # the leaderboard's own rows: the frame's config fields replace its columns (a budget run's steps: None)
        fit = fit_ladders(ladders_from(board[board["run_id"].isin(ids)], mine, claim.metric), str(claim.a),
                          floor_of(mine))
    except ValueError as exc:
        return [Result(claim, "", "inconclusive", note=str(exc))]
    if str(claim.b) not in fit.ladders:
        return [Result(claim, "", "inconclusive", note=f"{_NO_RUNS}{claim.b}")]
    low, high = claim.expect_range or (-math.inf, math.inf)
    # a curve the runs do not follow: nothing to read off it (the steps ratio reads the training curves, not the fit)
    misfit = fit.misfits(str(claim.a), str(claim.b)) if claim.quantity != "steps_ratio" else ""
    if claim.quantity == "alpha_diff":
        f = fit.fits().set_index("design").loc[str(claim.b)]
        rows: list[tuple[str, Any, Any, Any, Any]] = [("", f["alpha_diff"], f["alpha_diff_lo"], f["alpha_diff_hi"], 0)]
    else:
        m = fit.multipliers().query("design == @claim.b")
        short = m["steps_ratio_short"] if claim.quantity == "steps_ratio" else [0] * len(m)
        rows = [(f"size {s}", v, lo, hi, n) for s, v, lo, hi, n in
                zip(m["size"], m[claim.quantity], m[f"{claim.quantity}_lo"], m[f"{claim.quantity}_hi"], short,
                    strict=True)]
    out = []
    for context, value, lo, hi, short_seeds in rows:
        known = not (math.isnan(lo) or math.isnan(hi))
        verdict = "inconclusive" if not known or misfit else \
            "disagrees" if hi < low else "inconclusive" if short_seeds else \
            "agrees" if low <= lo and hi <= high else "disagrees" if lo > high else "inconclusive"
        note = (f"{claim.quantity} {value:.3g} [{lo:.3g}, {hi:.3g}], 95% bootstrap over {fit.n_seeds} seed(s)" if known
                else f"{claim.quantity} {value:.3g}, no interval") + f"; expected in [{low:g}, {high:g}]"
        if misfit:
            note += f"; {misfit}: not a reading of the runs"
        if short_seeds:  # a seed that never reached the target counts its whole run: only the upper end is known
            note += (f"; {short_seeds} of {fit.n_seeds} seed(s) of {claim.b} never reached the target, so the ratio "
                     "and its interval are upper bounds")
        out.append(Result(claim, context, verdict, diff=float(value), note=note))
    return out


def _evaluate(claim: Claim, frame: pd.DataFrame, fields: Sequence[str], probes: pd.DataFrame | None,
              level: float = 0.95) -> list[Result]:
    if claim.probe:
        per_run = probe_quantity(probes if probes is not None else pd.DataFrame(), *claim.probe, step=claim.step)
        values = frame["run_id"].map(per_run).astype(float)
    else:
        values = pd.to_numeric(frame[claim.metric], errors="coerce") if claim.metric in frame else math.nan
    df = frame.assign(_value=values)
    needed = [*claim.where, *(f for f in (claim.for_each, claim.compare, claim.x) if f)]
    missing = [f for f in dict.fromkeys(needed) if f not in df or df[f].isna().all()]
    if missing:
        return [Result(claim, "", "inconclusive", note=f"field(s) {missing} not recorded for these runs")]
    for key, value in claim.where.items():
        df = df[_matches(df[key], value)]
    if df.empty:
        return [Result(claim, "", "inconclusive", note="no runs match its where")]
    if df["_value"].isna().all() if claim.probe else claim.metric not in frame:  # e.g. results from before it
        return [Result(claim, "", "inconclusive", note=f"{claim.metric} not recorded for these runs")]
    contexts = [("", df)]
    if claim.for_each:
        contexts = [(f"{claim.for_each}={_fmt(v)}", df[_matches(df[claim.for_each], v)])
                    for v in _present(df[claim.for_each])]  # fmt: skip
    side = claim.compare or claim.x
    rest = [f for f in fields if f not in (claim.for_each, "seed")]
    if side in AXES:  # two designs compared on one axis differ in it alone: another axis apart is a confound
        rest += [a for a in AXES if a not in (side, claim.for_each) and a in df]
    if claim.metric in COST_COLUMNS and several_machines(df):  # a cost figure is never pooled across machines
        machine = machines_of(df)
        contexts = [(", ".join(filter(None, [label, f"{MACHINE_KEY}={m}"])), part[machine.loc[part.index] == m])
                    for label, part in contexts for m in sorted(set(machine.loc[part.index]))]
    run = {"compare": _compare, "slope": _slope, "value": _value}[claim.kind]
    out = []
    for label, part in contexts:
        mine = []
        for inner, sub, note in _splits(part, side, rest):
            context = ", ".join(filter(None, [label, inner]))
            if note.startswith("a group spans"):
                mine.append(Result(claim, context, "inconclusive", note=note))
                continue
            result = run(claim, context, sub, level, pairs=not note.startswith(_CONFOUNDED))
            notes = [result.note, note, margin_warning(result), timed_words(result)]
            mine.append(dataclasses.replace(result, note="; ".join(filter(None, notes))))
        # A configuration under which a compared group was never run (a preset of other designs) asks nothing of
        # this claim: it is left out where another configuration has runs in every group.
        answered = [r for r in mine if not r.note.startswith(_NO_RUNS)]
        out += answered if answered else mine
    return out


# The expectations an absolute margin makes easier to meet: a difference up to the margin is granted.
GRANTING = ("not_greater", "not_less", "similar")
# The share of the values' |mean| above which a granting margin that also exceeds the seeds' spread is too wide for
# its verdict to say much: a margin above the spread is what a similarity or non-inferiority claim needs (else no
# number of seeds shows it), so the spread alone decides nothing; a margin of a tenth of the values grants a
# difference that large.
SHARE = 0.1
_RELATIVE = "for a margin relative to the values, set relative = true (margin x |mean(a)|)"
MARGIN_WARNING = "warning: the margin"  # how every warning of margin_warning begins


def margin_warned(r: Result) -> bool:
    """Whether ``r``'s note carries a :func:`margin_warning` (its verdict reads the margin more than the data)."""
    return MARGIN_WARNING in r.note


def margin_warning(r: Result) -> str:
    """A warning where a compare claim's absolute margin dwarfs what it compares: where the margin exceeds the values
    themselves (0.01 on losses near 0.001: every difference between them is smaller), or, for an expectation the
    margin makes easier to meet (:data:`GRANTING`), where it exceeds both the values' spread (the larger of the two
    groups' seed-to-seed standard deviations) and :data:`SHARE` of their |mean| (0.05 on losses near 0.085 that move
    0.005 from seed to seed grants a difference of more than half the values, ten times what seeds alone make). Names
    the relative margin, ``relative = true`` (the margin times ``|mean(a)|``)."""
    c = r.claim
    if c.kind != "compare" or c.relative or not r.groups or not all(math.isfinite(g.mean) for g in r.groups):
        return ""  # a group without values: failures decide
    scale = max(abs(g.mean) for g in r.groups)
    if math.isfinite(scale) and r.threshold > scale:
        return (f"{MARGIN_WARNING} {r.threshold:g} exceeds the values compared (|mean| at most {scale:.3g}): every "
                f"difference between them is smaller, so the verdict reads the margin, not the data; {_RELATIVE}")
    stds = [g.std for g in r.groups]
    if c.expect not in GRANTING or not all(math.isfinite(v) for v in stds) or not scale > 0:
        return ""
    spread = max(stds)
    if not (r.threshold > spread and r.threshold >= SHARE * scale):
        return ""
    times = f", {r.threshold / spread:.3g} times" if spread > 0 else ", above"
    return (f"{MARGIN_WARNING} {r.threshold:g} is {r.threshold / scale:.0%} of the values compared (|mean| at most "
            f"{scale:.3g}){times} their spread (seed-to-seed standard deviation at most {spread:.3g}): the claim "
            f"grants a difference that large, beyond what seeds alone move the values, so an agreement says little; "
            f"{_RELATIVE}")


TIMED_WORDS = ("timed by separate runs, each at its own moment on the wall clock: the difference is confounded with "
               "the load on the machine then (`bench cost` times designs side by side)")


def timed_words(r: Result) -> str:
    """What a compare claim's difference of a timed figure (:data:`bench.analysis.timed.TIMED`: never paired) is, where
    both groups have values: the same caution as the note under ``bench compare``'s table."""
    timed = r.claim.kind == "compare" and r.claim.metric in TIMED and not r.claim.probe
    return TIMED_WORDS if timed and len(r.groups) == 2 and all(g.n for g in r.groups) else ""


def describe(claim: Claim) -> str:
    """The test a claim makes, in words: ``train_error where variant=plain: depth=max vs min: greater by more
    than 0.01``."""
    where = ", ".join(f"{k}={'|'.join(map(_fmt, v if isinstance(v, list) else [v]))}" for k, v in claim.where.items())
    scope = f"{f' where {where}' if where else ''}{f', for each {claim.for_each}' if claim.for_each else ''}"
    metric = f"{claim.metric}{f' at step {claim.step}' if claim.probe else ''}"
    if claim.kind == "slope":
        low, high = claim.expect_range or (math.nan, math.nan)
        return f"log-log slope of {metric} vs {claim.x}{scope}: in [{low:g}, {high:g}]"
    if claim.kind == "multiplier":
        low, high = claim.expect_range or (math.nan, math.nan)
        return f"{claim.quantity} of {claim.b} vs {claim.a} ({metric}{scope}): 95% interval in [{low:g}, {high:g}]"
    if claim.kind == "value" and claim.expect == "similar":
        return f"{metric}{scope}: mean {claim.threshold:g} ± {claim.tolerance:g}, its whole 95% CI"
    if claim.kind == "value":
        return f"{metric}{scope}: mean {str(claim.expect).replace('_', ' ')} than {claim.threshold:g}"
    margin = f"{claim.threshold:g}{' x |mean(a)|' if claim.relative else ''}"
    how = f"within ±{margin}, the whole 95% CI of the difference" if claim.expect == "similar" else \
        f"{claim.expect} by more than {margin}"
    return f"{metric}{scope}: {claim.compare}={_fmt(claim.b)} vs {_fmt(claim.a)}: {how.replace('_', ' ')}"
