"""What a design is worth in compute: each design's fitted L(C) (:mod:`bench.analysis.scaling`) against a baseline's.

- **The compute multiplier** of a design at one size: the compute the baseline needs, on its fitted curve, to reach
  the loss the design's fitted curve has at the design's compute, divided by the design's compute,
  ``C_b(L_d(C_d)) / C_d``; above 1 the design is worth more compute than it spends (MUDDFormer's "the performance
  of Transformers trained with ~1.8x-2.4x compute", Xiao et al. 2025). Infinite where the design's loss is below
  the baseline's fitted floor E (the baseline never reaches it).
- **The exponent difference** α_d − α_b: whether the multiplier grows (> 0) or shrinks with scale.
- **The steps-to-target ratio** at each size both ran (Hyper-Connections' "converges 1.8 times faster", Zhu et al.
  2025: the tokens to reach the baseline's final loss): per seed, the target is the baseline run's final training
  loss (the trailing mean over :data:`SMOOTH` of its steps), and the ratio is the samples the baseline needs to
  reach it over the samples the design needs, both read on the same trailing mean of their training curves; NaN
  where the design never reached it. Runs recorded without training curves fall back to their recorded steps to
  the config's ``target_loss``.

Every interval comes from one bootstrap over seeds shared by all designs: the same resampled seeds refit every
design's curve, so a design and the baseline that share seeds are compared pair by pair.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from bench.analysis import scaling
from bench.runs.config import NOT_HASHED

# Columns of a leaderboard that are a loss a scaling fit can model (a quantity that falls toward a floor with compute).
LOSSES = ("final_val_loss", "final_train_loss")
FITTED = ("ok", "failed_to_learn")  # statuses whose final loss is an outcome of the budget (a diverged run has none)
_NOT_SIZE = {"variant", "seed", "study", "preset", *NOT_HASHED}  # config fields that are not a point of a ladder
SMOOTH = 0.05  # the trailing window that smooths a training-loss curve, as a share of the baseline run's steps


@dataclass(frozen=True)
class Curve:
    """A run's training loss at each recorded step, against the samples seen by then."""

    samples: np.ndarray
    loss: np.ndarray

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> Curve | None:
        """The training curve of a run JSON; None where it recorded none (a run JSON's head has no curves)."""
        train = (record.get("curves") or {}).get("train") or []
        if not train:
            return None
        cfg = record.get("config") or {}
        per_step = float(cfg.get("batch_size") or 1) * float(cfg.get("grad_accum") or 1)
        steps = np.array([float(p["step"]) for p in train])
        loss = np.array([float(p["loss"]) if p.get("loss") is not None else math.nan for p in train])
        return cls(steps * per_step, loss)

    def smoothed(self, window: int) -> np.ndarray:
        """The trailing mean of the loss over ``window`` recorded steps (NaN until the window is full)."""
        return pd.Series(self.loss).rolling(window, min_periods=window).mean().to_numpy()

    def samples_to(self, target: float, window: int) -> float:
        """The samples seen when the smoothed loss first reaches ``target``; NaN where it never does."""
        hit = np.flatnonzero(self.smoothed(window) <= target)
        return float(self.samples[hit[0]]) if hit.size else math.nan


@dataclass(frozen=True)
class Ladder:
    """One design's runs: per size (a key shared by the designs' runs of one size) its training compute and the
    final loss and steps to target of each seed (columns: the common seed list; NaN where a run is missing)."""

    design: str
    sizes: tuple[str, ...]
    compute: np.ndarray  # (sizes,) FLOPs
    loss: np.ndarray  # (sizes, seeds)
    steps_to_target: np.ndarray  # (sizes, seeds)
    keys: tuple[str, ...] = ()  # per size its key (:func:`size_keys`), where the ladder was read from runs
    curves: tuple[tuple[Curve | None, ...], ...] = ()  # per size and seed its training curve, where every run had one


@dataclass(frozen=True)
class ScalingFit:
    """The fits of every design, the multipliers against ``baseline`` and the bootstrap draws behind them."""

    baseline: str
    e_fixed: float | None
    n_seeds: int
    ladders: Mapping[str, Ladder]
    params: Mapping[str, np.ndarray]  # design -> (draws, 3) of (E, log A, α); row 0: the point fit
    resamples: np.ndarray  # (draws, seeds): the seed indices of each draw, shared by every design

    def lack_of_fit(self, design: str) -> scaling.LackOfFit:
        """Whether ``design``'s fitted curve misses its own sizes' mean losses beyond the seeds' scatter
        (:func:`bench.analysis.scaling.lack_of_fit`)."""
        lad = self.ladders[design]
        fitted = scaling.Curve(*self.params[design][0]).loss(lad.compute)
        return scaling.lack_of_fit(lad.loss, fitted, 2 if self.e_fixed is not None else 3)

    def fits(self) -> pd.DataFrame:
        """Per design: E, A, α with their intervals, α − α_baseline with its interval, and the lack-of-fit test of
        its curve (``misfit_F``, ``misfit_p``)."""
        rows = []
        base = self.params[self.baseline]
        for d, p in self.params.items():
            test = self.lack_of_fit(d)
            row: dict[str, Any] = {"design": d, "sizes": len(self.ladders[d].sizes), "seeds": self.n_seeds,
                                   "E_fixed": self.e_fixed is not None, "misfit_F": test.f, "misfit_p": test.p}
            for name, col in (("E", p[:, 0]), ("A", np.exp(p[:, 1])), ("alpha", p[:, 2]),
                              ("alpha_diff", p[:, 2] - base[:, 2])):
                row[name] = float(col[0])
                row[f"{name}_lo"], row[f"{name}_hi"] = scaling.interval(col[0], col[1:], self.n_seeds,
                                                                        positive=name in ("E", "A"))
            rows.append(row)
        return pd.DataFrame(rows)

    def misfits(self, *designs: str) -> str:
        """The designs among ``designs`` whose fitted curve misses its own points (:meth:`lack_of_fit`), in words for
        a note; "" where every curve follows its points. A multiplier reads two curves: where either misses, it says
        nothing the runs show."""
        missed = [(d, self.lack_of_fit(d)) for d in dict.fromkeys(designs)]
        missed = [(d, t) for d, t in missed if t.misfit]
        if not missed:
            return ""
        names, tests = ", ".join(d for d, _ in missed), ", ".join(f"{t.p:.2g}" for _, t in missed)
        return f"the fitted L(C) of {names} misses its own points beyond the seeds' scatter (lack of fit p {tests})"

    def multipliers(self) -> pd.DataFrame:
        """Per design and size: its compute and mean loss, the compute multiplier against the baseline and the
        steps-to-target ratio, each with its interval, and ``steps_ratio_short``: the design's seeds that never
        reached the target (where above 0, the ratio and its interval are upper bounds)."""
        base, rows = self.params[self.baseline], []
        base_ladder = self.ladders[self.baseline]
        for d, p in self.params.items():
            lad = self.ladders[d]
            for i, size in enumerate(lad.sizes):
                c = lad.compute[i]
                own = p[:, 0] + np.exp(p[:, 1] - p[:, 2] * math.log(c))  # the design's fitted loss at its compute
                mult = scaling.compute_for(base[:, 0], base[:, 1], base[:, 2], own) / c
                ratio, short = _steps_ratio(base_ladder, lad, size, self.resamples)
                row = {"design": d, "size": size, "compute": c, "loss": float(np.nanmean(lad.loss[i])),
                       "fitted_loss": float(own[0]), "multiplier": float(mult[0])}
                row["multiplier_lo"], row["multiplier_hi"] = scaling.interval(mult[0], mult[1:], self.n_seeds,
                                                                              positive=True)
                row["steps_ratio"] = float(ratio[0])
                row["steps_ratio_lo"], row["steps_ratio_hi"] = scaling.interval(ratio[0], ratio[1:], self.n_seeds,
                                                                                positive=True)
                row["steps_ratio_short"] = short  # seeds that never reached the target: the ratio is an upper bound
                rows.append(row)
        return pd.DataFrame(rows)


def _steps_ratio(base: Ladder, lad: Ladder, size: str, idx: np.ndarray) -> tuple[np.ndarray, int]:
    """Per resample: the baseline's mean samples to its final training loss ÷ the design's, seed by seed (module
    docstring; the recorded steps to the target loss where a ladder has no curves), and how many seeds of the design
    never reached the target. Such a seed counts its whole run, a lower bound on what it needs, so the ratio is then an
    upper bound. NaN where either did not run ``size``, or (recorded steps) a run never reached the target."""
    if size not in base.sizes:
        return np.full(len(idx), np.nan), 0
    i, j = base.sizes.index(size), lad.sizes.index(size)
    short = 0
    if base.curves and lad.curves:
        b, d = np.full(len(base.curves[i]), np.nan), np.full(len(base.curves[i]), np.nan)
        for s, (own, other) in enumerate(zip(base.curves[i], lad.curves[j], strict=True)):
            if own is None or other is None:
                continue
            window = max(1, round(SMOOTH * len(own.loss)))
            target = own.smoothed(window)[-1]
            b[s], d[s] = own.samples_to(target, window), other.samples_to(target, window)
            if math.isnan(d[s]):  # never reached: it needs more than its whole run
                short, d[s] = short + 1, float(other.samples[-1])
    else:
        b, d = base.steps_to_target[i], lad.steps_to_target[j]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(b[idx].mean(axis=1) / d[idx].mean(axis=1)), short


def steps_ratio_text(fit: ScalingFit) -> str:
    """What the steps-to-target ratio of ``fit`` is, in words (it reads training curves where the runs had them)."""
    if fit.ladders[fit.baseline].curves:
        return (f"the samples {fit.baseline} needs to reach its own final training loss (the trailing mean over "
                f"{SMOOTH:.0%} of its steps) over the samples the design needs to reach that loss, seed by seed")
    return f"{fit.baseline}'s mean steps to the runs' target loss over the design's"


def fit_ladders(ladders: Mapping[str, Ladder], baseline: str, e_fixed: float | None = None,
                draws: int = scaling.BOOTSTRAP, seed: int = 0) -> ScalingFit:
    """Fit every ladder, each on the same ``draws`` resamples of the seeds (row 0: all of them, the point fit).
    ValueError for an unknown baseline, a ladder of fewer than 3 sizes or of sizes equal in compute."""
    if baseline not in ladders:
        raise ValueError(f"scaling fit: the baseline {baseline!r} has no runs here; designs: {sorted(ladders)}")
    for d, lad in ladders.items():
        scaling.check_ladder(d, lad.compute.tolist())
    n_seeds = next(iter(ladders.values())).loss.shape[1]
    idx = scaling.resample(n_seeds, draws, np.random.default_rng(seed))
    params = {d: scaling.fit_batch(lad.compute, scaling.seed_means(lad.loss, idx), e_fixed)
              for d, lad in ladders.items()}
    if not np.isfinite(params[baseline][0]).all():
        why = f" (a mean loss at or below the fixed floor E = {e_fixed:.4g} nats?)" if e_fixed is not None else ""
        raise ValueError(f"scaling fit: the baseline {baseline!r}'s curve could not be fitted{why}")
    return ScalingFit(baseline, e_fixed, n_seeds, dict(ladders), params, idx)


def check_metric(metric: str) -> None:
    """A scaling fit models a loss: ValueError naming ``metric`` otherwise."""
    if metric not in LOSSES:
        raise ValueError(f"--metric {metric}: a scaling fit models a loss that falls toward an irreducible floor as "
                         f"compute grows, and {metric} is not one; choose {' or '.join(LOSSES)}")


def run_compute(board: pd.DataFrame) -> pd.Series:
    """Training FLOPs each run spent: ``train_flops`` where recorded, else steps × global batch × training FLOPs per
    sample."""
    derived = (pd.to_numeric(board["steps"], errors="coerce") * pd.to_numeric(board["batch_size"], errors="coerce")
               * pd.to_numeric(board["grad_accum"], errors="coerce").fillna(1)
               * pd.to_numeric(board["train_flops_per_sample"], errors="coerce"))
    if "train_flops" in board.columns:
        return pd.to_numeric(board["train_flops"], errors="coerce").fillna(derived)
    return derived


def size_keys(records: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Per run id, the key of its size: its configuration without the variant, seed, study and the fields that do
    not change what is trained. Runs of two designs with one key are the same size."""
    out = {}
    for r in records:
        cfg = {k: v for k, v in (r.get("config") or {}).items() if k not in _NOT_SIZE}
        out[str(r.get("run_id"))] = json.dumps(cfg, sort_keys=True, default=str)
    return out


def size_labels(keys: Sequence[str]) -> dict[str, str]:
    """A short label per size key: the fields whose values differ between the keys (``d_model=64 depth=6``)."""
    dicts = {k: json.loads(k) for k in keys}
    flat = {k: {**{f: v for f, v in d.items() if f != "model_args"}, **dict(d.get("model_args") or [])}
            for k, d in dicts.items()}
    fields = sorted({f for d in flat.values() for f in d})
    varying = [f for f in fields if len({json.dumps(d.get(f), default=str) for d in flat.values()}) > 1]
    return {k: " ".join(f"{f}={_short(d.get(f))}" for f in varying) or "one size" for k, d in flat.items()}


def _short(value: Any) -> str:
    """A value as a size label shows it: numbers in their shortest form (``2e+09``, ``64``)."""
    return f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def floor_of(records: Sequence[Mapping[str, Any]]) -> float | None:
    """The known irreducible loss (nats) of the runs' task where every run's task records one (``tinytext``: the
    entropy rate of its generating process, ``entropy_floor_bpc`` bits per byte), else None."""
    floors = {(r.get("task") or {}).get("entropy_floor_bpc") for r in records}
    floor = floors.pop() if len(floors) == 1 else None
    return None if floor is None else float(floor) * math.log(2)


def ladders_from(board: pd.DataFrame, records: Sequence[Mapping[str, Any]], metric: str) -> dict[str, Ladder]:
    """The ladder of every variant of ``board`` (its runs with a finite ``metric`` and status ok or
    failed_to_learn), seeds aligned across designs."""
    check_metric(metric)
    keys = size_keys(records)
    runs = board[board["status"].isin(FITTED)].assign(
        _loss=lambda f: pd.to_numeric(f[metric], errors="coerce"), _compute=run_compute,
        _size=lambda f: f["run_id"].map(keys),
        _steps=lambda f: pd.to_numeric(f["steps_to_target"], errors="coerce"))
    runs = runs[np.isfinite(runs["_loss"]) & runs["_size"].notna()]
    if runs.empty:
        raise ValueError(f"scaling fit: no finished run has a {metric} to fit")
    tasks = sorted(map(str, runs["task"].dropna().unique())) if "task" in runs.columns else []
    if len(tasks) > 1:  # one loss curve per task: sizes of two tasks on one ladder would fit neither
        raise ValueError(f"scaling fit: the runs span several tasks ({', '.join(tasks)}), and a ladder is one task's "
                         "sizes; choose one with --where task=T")
    if not np.isfinite(runs["_compute"]).all():
        bad = runs.loc[~np.isfinite(runs["_compute"]), "run_id"].iloc[0]
        raise ValueError(f"scaling fit: run {bad} recorded no training FLOPs (train_flops_per_sample is empty: it "
                         "ran without the flops measurement phase), so its compute is not known")
    seeds = sorted(runs["seed"].astype(int).unique())
    labels = size_labels(sorted(runs["_size"].unique()))
    by_id = {str(r.get("run_id")): r for r in records}
    curves = {rid: Curve.of(by_id.get(rid) or {}) for rid in runs["run_id"].astype(str)}
    out = {}
    for design, g in runs.groupby("variant", sort=False):
        sizes = sorted(g["_size"].unique(), key=lambda s: g.loc[g["_size"] == s, "_compute"].mean())
        loss, steps = np.full((len(sizes), len(seeds)), np.nan), np.full((len(sizes), len(seeds)), np.nan)
        drawn: list[list[Curve | None]] = [[None] * len(seeds) for _ in sizes]
        for i, s in enumerate(sizes):
            for _, r in g[g["_size"] == s].iterrows():
                at = seeds.index(int(r["seed"]))
                loss[i, at], steps[i, at], drawn[i][at] = r["_loss"], r["_steps"], curves[str(r["run_id"])]
        compute = np.array([g.loc[g["_size"] == s, "_compute"].mean() for s in sizes])
        out[str(design)] = Ladder(str(design), tuple(labels[s] for s in sizes), compute, loss, steps, tuple(sizes),
                                  tuple(map(tuple, drawn)))
    if not all(c is not None for c in curves.values()):  # one rule for every design: curves from all runs, or none
        out = {d: dataclasses.replace(lad, curves=()) for d, lad in out.items()}
    return out
