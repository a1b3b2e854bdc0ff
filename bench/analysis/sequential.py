"""Seeds until a claim is decided, with the error rate kept: a fixed number of looks, Bonferroni across them.

``bench sweep ... --until-decided`` runs a study's grid, judges its claims, and adds seeds in rounds to the
configurations of the claims still open, until every claim is decided or the cap is reached. Looking at the data
after every round and stopping when an interval clears the margin would, at 95% each time, decide a claim that is
false far more often than 5% of the time (four looks: about 10%, :func:`simulate` shows it). The rule that keeps it:

- **The looks are fixed before the first run**: at the study's own number of seeds n_1, then every n_1 more, and at
  the cap (``--max-seeds``): ``n_1 < n_2 < ... < n_K`` (:meth:`Looks.plan`).
- **Each look reads its interval at level 1 − α/K** (α = 0.05): a wrong decision at some look has probability at
  most the sum over the K looks of α/K = α (the union bound, whatever the correlation between looks). A claim
  decided at one look gets no more seeds; one still open at the last is *inconclusive*.

Two-sided, each side of an interval at 1 − α/(2K): with K = 4 looks, 0.625% a side, as strict as the 1% (two-sided)
record rule of the modded-nanogpt speedrun. The verdict rules themselves are those of :mod:`bench.analysis.claims`
(:func:`above`, :func:`within` are the tests it applies), so :func:`simulate` checks the rule as claims apply it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.analysis.pairing import paired_interval
from bench.runs.names import LOOKS_SUFFIX

ALPHA = 0.05


def above(d: Any, tol: Any, half: Any) -> Any:
    """Is ``d`` above the margin ``tol``, judged by the interval ``d ± half``? ``"yes"`` when the whole interval is
    above it, ``"no"`` when it is all at or below it, else ``"inconclusive"`` (also where ``half`` is NaN);
    elementwise."""
    d, tol, half = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (d, tol, half)))
    known = np.isfinite(d) & np.isfinite(half)
    with np.errstate(invalid="ignore"):
        out = np.where(known & (d - half > tol), "yes", np.where(known & (d + half <= tol), "no", "inconclusive"))
    return str(out) if out.ndim == 0 else out


def within(d: Any, tol: Any, half: Any) -> Any:
    """Equivalence (two one-sided tests): ``"agrees"`` when ``d ± half`` lies inside ``[-tol, tol]``,
    ``"disagrees"`` when it lies wholly outside, else ``"inconclusive"``; elementwise."""
    d, tol, half = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (d, tol, half)))
    known = np.isfinite(d) & np.isfinite(half)
    with np.errstate(invalid="ignore"):
        out = np.where(known & (np.abs(d) + half <= tol), "agrees",
                       np.where(known & (np.abs(d) - half > tol), "disagrees", "inconclusive"))
    return str(out) if out.ndim == 0 else out


# expect -> (sign of the difference tested, the answer of "is it above the margin?" that agrees): claims' table
TESTS = {"greater": (1, "yes"), "less": (-1, "yes"), "not_greater": (1, "no"), "not_less": (-1, "no")}


def verdicts(diff: Any, half: Any, margin: float, expect: str) -> Any:
    """The verdict of a compare claim (``expect``, margin ``margin``) on the interval ``diff ± half``; elementwise."""
    if expect == "similar":
        return within(diff, margin, half)
    sign, want = TESTS[expect]
    test = above(sign * np.asarray(diff, dtype=float), margin, half)
    return np.where(test == "inconclusive", "inconclusive", np.where(test == want, "agrees", "disagrees"))


@dataclass(frozen=True)
class Looks:
    """The seeds at which a study's claims are judged, ``n_1 < ... < n_K``, and the family-wise error rate."""

    seeds: tuple[int, ...]
    alpha: float = ALPHA
    rounds: list[dict[str, Any]] = field(default_factory=list, compare=False)  # what each round ran, as it ran

    @classmethod
    def plan(cls, start: int, cap: int, alpha: float = ALPHA) -> Looks:
        """Looks at ``start`` seeds, every ``start`` more, and at ``cap``; ValueError for a cap below the start."""
        if start < 2:
            raise ValueError(f"--until-decided needs a study with at least 2 seeds per configuration, got {start}")
        if cap < start:
            raise ValueError(f"--max-seeds must be at least the study's {start} seeds, got {cap}")
        return cls((*range(start, cap, start), cap), alpha)

    @property
    def level(self) -> float:
        """The confidence level every look's interval is read at: 1 − α/K."""
        return 1 - self.alpha / len(self.seeds)

    def look(self, n: int) -> int:
        """The look (1-based) a comparison over ``n`` seeds (pairs) is at: the last whose seeds it has; 0: none."""
        return sum(n >= s for s in self.seeds)

    def to_json(self) -> dict[str, Any]:
        return {"rule": "fixed looks, Bonferroni", "alpha": self.alpha, "seeds": list(self.seeds),
                "level": self.level, "rounds": self.rounds}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Looks:
        """The looks :meth:`to_json` wrote; ValueError where they are not looks :meth:`plan` can make (seeds: a
        non-empty increasing list of integers from 2; alpha: a number in (0, 1); rounds: a list)."""
        seeds, alpha, rounds = data["seeds"], data.get("alpha", ALPHA), data.get("rounds", [])
        if (not isinstance(seeds, list) or not seeds or any(type(n) is not int or n < 2 for n in seeds)
                or seeds != sorted(set(seeds))):
            raise ValueError(f'"seeds" must be an increasing list of integers from 2, got {seeds!r}')
        if type(alpha) not in (int, float) or not 0 < alpha < 1:
            raise ValueError(f'"alpha" must be a number in (0, 1), got {alpha!r}')
        if not isinstance(rounds, list):
            raise ValueError(f'"rounds" must be a list, got {type(rounds).__name__}')
        return cls(tuple(seeds), float(alpha), list(rounds))


def looks_file(root: Path, study: str) -> Path:
    """Where a study's looks and rounds are kept in its results folder (beside the study file its sweep left)."""
    return Path(root) / "studies" / (study + LOOKS_SUFFIX)


def read_looks(root: Path, study: str) -> Looks | None:
    """The looks a study was run under with ``--until-decided``, None for a study run once."""
    path = looks_file(root, study)
    if not path.is_file():
        return None
    try:
        return Looks.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path} cannot be read ({exc}); restore it, or delete it to judge the study as run once") \
            from None


def simulate(looks: Looks, effect: float = 0.0, *, studies: int = 1000, margin: float = 0.0, expect: str = "less",
             level: float | None = None, seed: int = 0) -> dict[str, Any]:
    """``studies`` simulated studies of one compare claim under ``looks``: per-seed differences drawn from
    N(effect, 1), each study judged at every look (at ``level``, default the looks' own) and stopped at the first
    verdict. Returns the share of each verdict and the mean look a decided verdict took. Vectorised: no training."""
    rng = np.random.default_rng(seed)
    d = rng.normal(effect, 1.0, size=(studies, looks.seeds[-1]))
    final = np.full(studies, "inconclusive", dtype=object)
    at = np.zeros(studies, dtype=int)
    for k, n in enumerate(looks.seeds, 1):
        mean, half = paired_interval(d[:, :n], looks.level if level is None else level)
        verdict = verdicts(mean, half, margin, expect)
        fresh = (at == 0) & (verdict != "inconclusive")
        final[fresh], at[fresh] = verdict[fresh], k
    decided = at > 0
    return {"agrees": float(np.mean(final == "agrees")), "disagrees": float(np.mean(final == "disagrees")),
            "inconclusive": float(np.mean(final == "inconclusive")),
            "mean_look": float(at[decided].mean()) if decided.any() else math.nan}
