"""``bench sweep ... --until-decided [--max-seeds N]``: seeds added in rounds to the configurations whose claims are
still open, until every claim is decided or the cap is reached, by the sequential rule of
:mod:`bench.analysis.sequential` (looks fixed before the first run, Bonferroni across them).

Round 1 runs the study's grid as a sweep does. After each round the study's compare claims on leaderboard metrics
are judged at the looks' level (1 − α/K, paired by seed where the runs pair), on the runs of the look's seeds; for
every verdict still *inconclusive*, both compared configurations get the seeds of the next look (the grid's, then
the smallest seeds neither has run: :func:`seed_sequence`, so the two sides stay paired), and the next round runs
them. A decided claim gets no more seeds. The looks and what each round ran are kept in
``studies/<study>.looks.json`` of the results folder: ``bench report`` reads the verdicts at their level and says at
which look each was decided. Rerunning the command resumes (recorded runs are skipped, the same rounds follow from
the same data); a different ``--max-seeds`` for a study already run under other looks is refused, since the looks
must be fixed in advance.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.analysis.claims import Claim, Result, evaluate_claims
from bench.analysis.sequential import Looks, looks_file, read_looks
from bench.runs.config import RunConfig, config_from_dict
from bench.runs.results import ResultsStore, atomic_write_text


def judged(claims: Sequence[Claim]) -> list[Claim]:
    """The claims seeds can decide: compare claims on a leaderboard metric (a probe's or an analysis table's claims
    are judged by the report as recorded)."""
    return [c for c in claims if c.kind == "compare" and c.table == "leaderboard" and not c.probe]


def plan(root: Path, study: str, start: int, cap: int) -> Looks:
    """The looks of a study run ``--until-decided``: the ones recorded in ``root`` (ValueError when ``cap`` would
    change them), else new ones from ``start`` seeds to ``cap``."""
    new = Looks.plan(start, cap)
    old = read_looks(root, study)
    if old is not None and old.seeds != new.seeds:
        raise ValueError(f"study {study!r} was run --until-decided with looks at {', '.join(map(str, old.seeds))} "
                         f"seeds (--max-seeds {old.seeds[-1]}); its looks are fixed: rerun it with --max-seeds "
                         f"{old.seeds[-1]}, or into another --results-dir")
    return old or new


def seed_sequence(first: Sequence[int], n: int) -> list[int]:
    """The seeds a configuration has at a look of ``n`` seeds: the grid's (``first``, ascending), then the smallest
    seeds not among them. Both compared configurations get the same ones: their runs stay paired."""
    out = sorted(set(first))[:n]
    extra = (s for s in range(n + len(out)) if s not in out)
    return out + [next(extra) for _ in range(n - len(out))]


def open_results(claims: Sequence[Claim], store: ResultsStore, study: str, level: float, seeds: Sequence[int]
                 ) -> list[Result]:
    """The verdicts of ``claims`` at ``level`` that are still inconclusive, on the study's recorded runs of the look's
    ``seeds``: a look reads the data it was planned on, so a rerun of the command (runs of later rounds already
    recorded) takes the same rounds."""
    board = store.load_leaderboard()
    board = board[(board["study"] == study) & board["seed"].isin(list(seeds))].reset_index(drop=True)
    if board.empty:
        return []
    ids = set(board["run_id"])
    runs = [r for r in store.load_runs() if r.get("run_id") in ids]
    return [r for r in evaluate_claims(claims, board, None, runs, level) if r.verdict == "inconclusive" and r.groups]


def next_round(results: Sequence[Result], store: ResultsStore, seeds: Sequence[int], preset: str | None
               ) -> list[RunConfig]:
    """The runs of both compared configurations of each open verdict with the next look's new ``seeds`` (those
    recorded already are skipped by the sweep's resume)."""
    templates: dict[str, RunConfig] = {}
    for r in results:
        for run_id in (i for g in r.groups for i in g.run_ids):
            run = store.load_run(run_id)
            if isinstance(run.get("config"), dict):
                cfg = config_from_dict(run["config"])
                templates.setdefault(cfg.config_hash(), cfg)
    return [dataclasses.replace(cfg, seed=s, preset=preset)
            for cfg in sorted(templates.values(), key=lambda c: c.run_id) for s in seeds]


def until_decided(claims: Sequence[Claim], configs: Sequence[RunConfig], store: ResultsStore, study: str,
                  preset: str | None, cap: int, run: Callable[[list[RunConfig]], object],
                  say: Callable[[str], None] = print) -> Looks:
    """Run ``configs`` (round 1), then rounds of more seeds for the open claims (module docstring); returns the
    looks, rounds recorded."""
    chosen = judged(claims)
    if not chosen:
        raise ValueError(f"study {study!r} declares no compare claim on a leaderboard metric: --until-decided has "
                         "nothing to decide")
    seeds_of: dict[str, set[int]] = {}
    for cfg in configs:
        seeds_of.setdefault(cfg.config_hash(), set()).add(cfg.seed)
    start = min((len(s) for s in seeds_of.values()), default=0)
    looks = plan(store.root, study, start, cap)
    first = sorted({cfg.seed for cfg in configs})  # the grid's seeds
    rounds: list[dict[str, object]] = []
    todo = list(configs)
    for k, n in enumerate(looks.seeds, 1):
        say(f"round {k} of at most {len(looks.seeds)}: {len(todo)} run(s), to {n} seeds a configuration")
        if todo:
            run(todo)
        still = open_results(chosen, store, study, looks.level, seed_sequence(first, n))
        rounds.append({"round": k, "seeds": n, "runs": len(todo), "open": len(still)})
        _save(store.root, study, dataclasses.replace(looks, rounds=rounds))
        if not still or k == len(looks.seeds):
            say(f"{'every claim decided' if not still else f'{len(still)} verdict(s) still open at the cap'} after "
                f"round {k} (each interval at {100 * looks.level:.4g}%)")
            break
        todo = next_round(still, store, seed_sequence(first, looks.seeds[k])[n:], preset)  # the look's new seeds
    return dataclasses.replace(looks, rounds=rounds)


def _save(root: Path, study: str, looks: Looks) -> None:
    atomic_write_text(looks_file(root, study), json.dumps(looks.to_json(), indent=1) + "\n")

