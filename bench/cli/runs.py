"""Commands about single runs: ``run``, ``show``, ``upgrade``, ``merge``, ``data download``, ``perf overhead``,
``perf scaling``, ``track``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pandas as pd

from bench import api
from bench.cli.parser import config_from_args
from bench.runs import plugins
from bench.runs.identity import migrate
from bench.runs.merge import describe as describe_merge
from bench.runs.merge import merge
from bench.runs.perf import overhead
from bench.runs.results import ALIASES, ResultsStore
from bench.runs.runner import measurement_failures
from bench.runs.scalars import scalar_table
from bench.runs.tasks.datasets import download
from bench.runs.upgrade import record_init_streams, rename_presets, upgrade
from bench.sweeps.scaling import scaling

# Said of a throughput the training loop measured (no timing phase ran): its first steps are in it.
LOOP_NOTE = ", the training loop's average: not timed apart, its first steps included"


def cmd_upgrade(ns: argparse.Namespace) -> int:
    renamed = migrate(ns.results_dir, dry_run=ns.dry_run)
    if renamed:  # runs recorded when a run's id held its preset
        verb = "would give" if ns.dry_run else "gave"
        dropped = [each for each in renamed if not each.kept]
        print(f"{ns.results_dir}: {verb} {len(renamed) - len(dropped)} run(s) their configuration's id; "
              f"{len(dropped)} repeated a run recorded before them and {'would be' if ns.dry_run else 'were'} dropped; "
              f"every old id resolves ({ALIASES})")
        for repeat in dropped:
            print(f"  {repeat.old}: the same configuration and seed as {repeat.new}, dropped")
    presets = rename_presets(ns.results_dir, dry_run=ns.dry_run)
    if presets:
        names = sorted(set(presets.values()))
        print(f"{ns.results_dir}: {'would give' if ns.dry_run else 'gave'} {len(presets)} run(s) their preset's new "
              f"name ({', '.join(f'{old} -> {new}' for old, new in names)})")
    streams = record_init_streams(ns.results_dir, dry_run=ns.dry_run)
    if streams:
        print(f"{ns.results_dir}: {'would record' if ns.dry_run else 'recorded'} init_stream global (torch's one "
              f"stream after the seed, what they drew from) in {len(streams)} run(s); their ids stay")
    changes = upgrade(ns.results_dir, dry_run=ns.dry_run)
    levels = [c for c in changes if c.chance_loss is not None]
    moved = [c for c in changes if c.status_after != c.status_before]
    skipped = [c for c in changes if c.note]
    machines = [c for c in changes if c.machine]
    verb = "would change" if ns.dry_run else "changed"
    print(f"{ns.results_dir}: {len(levels)} run(s) given their task's chance level; {verb} the status of "
          f"{len(moved)}; {len(skipped)} left as recorded; {len(machines)} given their machine fingerprint "
          f"({', '.join(sorted({c.machine for c in machines})) or 'none'})")
    for c in moved:
        print(f"  {c.run_id}: {c.status_before} -> {c.status_after} (chance level {c.chance_loss:.4g} nats)")
    for c in skipped:
        print(f"  {c.run_id}: left as recorded: {c.note}")
    return 0


def cmd_merge(ns: argparse.Namespace) -> int:
    print(describe_merge(merge(ns.sources, ns.out), ns.out))
    return 0


def cmd_run(ns: argparse.Namespace) -> int:
    cfg = config_from_args(ns)
    result = api.run(cfg=cfg, results_dir=ns.results_dir, progress=not ns.quiet, tracker=ns.tracker or [],
                     tracker_uri=ns.tracker_uri or [], force=ns.force)
    if not ns.quiet:
        print(summary(dict(result.record), ns.results_dir))
    return 0


def summary(result: dict[str, Any], results_dir: str) -> str:
    """What a finished run reports: its outcome, its metrics, its cost (or why a cost was not measured)."""
    r = result["row"]

    def fmt(v: Any, spec: str = ".4f") -> str:
        return "n/a" if v is None or v == "" else format(v, spec)

    failed = measurement_failures(result)
    lines = [
        f"{r['run_id']}: {r['variant']} (depth {r['depth']}, {r['params']:,} parameters) on {r['task']}, "
        f"{r['steps']} steps ({fmt(r['epochs'], '.1f')} epochs) on {r['device_name']} [{r['precision']}] "
        f"-> status {r['status']}{': ' + r['error'] if r['error'] else ''}.",
        f"Final train loss {fmt(r['final_train_loss'])}, train acc {fmt(r['final_train_acc'])}; "
        f"val loss {fmt(r['final_val_loss'])}, val acc {fmt(r['final_val_acc'])} (best {fmt(r['best_val_acc'])}).",
        f"Throughput {fmt(r['train_samples_per_s'], ',.0f')} samples/s "
        f"(median step {fmt(r['step_time_ms'], '.2f')} ms"
        f"{LOOP_NOTE if r.get('throughput_method') == 'training_loop' else ''}), "
        f"peak memory {fmt(r['peak_mem_mb'], '.1f')} MiB ({r['mem_method'] or 'not measured'}), "
        f"{fmt(r['fwd_flops_per_sample'], '.3g')} forward / {fmt(r['train_flops_per_sample'], '.3g')} training "
        f"FLOPs per sample, {fmt(r['achieved_tflops'], '.3g')} TFLOP/s "
        f"(MFU {fmt(r['mfu'], '.2%')}); wall time {fmt(r['wall_time_s'], '.1f')} s.",
        *(f"{phase.capitalize()} not measured: {reason}." for phase, reason in failed.items()),
        f"Row appended to {Path(results_dir) / 'leaderboard.csv'}; details in "
        f"{Path(results_dir) / 'runs' / (r['run_id'] + '.json')}.",
    ]
    if r["target_acc"] is not None:
        reached = f"at step {r['steps_to_target']} ({fmt(r['time_to_target_s'], '.1f')} s)"
        lines.insert(2, f"Target val acc {r['target_acc']}: {reached if r['steps_to_target'] else 'not reached'}.")
    return " ".join(lines)


def cmd_show(ns: argparse.Namespace) -> int:
    run = ResultsStore(ns.results_dir).load_run(ns.run_id)
    if ns.json:
        print(json.dumps(run, indent=1))
        return 0
    for key, value in (run.get("row") or {}).items():  # a run JSON without its row (edited by hand) shows the rest
        print(f"{key:>20}: {value}")
    evals = run.get("curves", {}).get("eval")
    if evals:
        print("\nevaluations:")
        print(pd.DataFrame(evals).to_string(index=False))
    if run.get("residual_scalars"):  # runs recorded before the scalars were have none
        print("\nlearned residual scalars (mean over each tensor's entries) at each evaluation:")
        print(scalar_table(run["residual_scalars"]))
    return 0


def cmd_data(ns: argparse.Namespace) -> int:
    path = download(ns.name, ns.data_dir, url=ns.url, progress=not ns.quiet)
    print(f"{ns.name}: verified archive at {path}")
    return 0


def cmd_overhead(ns: argparse.Namespace) -> int:
    cfg = config_from_args(ns)
    with plugins.blame(cfg.variant):
        res = overhead(cfg, steps=ns.perf_steps, repeats=ns.repeats)
    print(
        f"{cfg.variant} on {cfg.task}, batch {cfg.batch_size}, {res['device']}: "
        f"harness {res['harness_ms']:.2f} ms/step, "
        f"minimal loop {res['minimal_ms']:.2f} ms/step (medians of {ns.repeats} alternating repeats of "
        f"{ns.perf_steps} steps); throughput ratio harness/minimal = {res['ratio']:.3f} "
        f"(per-repeat ratios {', '.join(f'{r:.3f}' for r in res['ratios'])})"
    )
    return 0


def cmd_scaling(ns: argparse.Namespace) -> int:
    cfg = config_from_args(ns)
    df = scaling(cfg, ns.nproc, ns.keep)
    print(f"{cfg.variant} on {cfg.task}, global batch {cfg.batch_size}: throughput of one DDP job per process count "
          "(each measured in its own torchrun; cores split evenly on the CPU)")
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


def cmd_track(ns: argparse.Namespace) -> int:
    logged, failed = api.track(ns.results_dir, tracker=ns.tracker or [], tracker_uri=ns.tracker_uri or [],
                               study=ns.study, progress=not ns.quiet)
    where = ", ".join(ns.tracker or [])
    print(f"{logged} runs of {ns.results_dir} logged to {where}" + (f"; {failed} failed (warnings above)"
                                                                     if failed else ""))
    return 1 if failed else 0
