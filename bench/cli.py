"""The command line: ``python -m bench COMMAND`` (list, run, leaderboard, compare, show, probe, diff, plot, report,
sweep, reproduce, track, data, perf, lesion, gradcorr, landscape, recipes).

Bad input (unknown variant, task or option, invalid depth, missing or corrupt dataset, a plugin that
fails to load or whose model fails a forward on the task) prints one line starting with ``error:`` and
exits with status 2, having written nothing.

Every command takes ``--plugin FILE.py|MODULE`` (repeatable) and also loads ``$RESBENCH_PLUGINS`` and the
installed ``resbench.variants`` entry points (:mod:`bench.plugins`); what a command loaded is unloaded
when it returns.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import plugins
from .config import RECIPES, RunConfig

DEFAULT_RESULTS = os.environ.get("RESBENCH_RESULTS", "results")
EXIT_USAGE = 2
# What `bench leaderboard` aggregates over seeds (the full set is in REPORT.md and the CSV itself).
LEADERBOARD_METRICS = ("final_train_acc", "final_val_acc", "best_val_acc", "train_samples_per_s", "peak_mem_mb")


class UsageError(ValueError):
    """Bad command-line input."""


# -- RunConfig <-> argparse -------------------------------------------------------------------

_TYPES = {"str": str, "int": int, "float": float}


def _parse_model_arg(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"--model-arg takes KEY=VALUE, got {text!r}")
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        value = raw  # a bare word is a string: shortcut=B
    return key, value


def add_config_arguments(p: argparse.ArgumentParser) -> None:
    """One option per RunConfig field, documented by the field's reason and default."""
    for f in dataclasses.fields(RunConfig):
        if f.name in ("study", "preset", "world_size"):  # set by sweeps, and from torchrun's WORLD_SIZE
            continue
        flag = "--" + f.name.replace("_", "-")
        meta, typ = f.metadata, str(f.type)
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc,operator]
        help_ = f"{meta['help']} (default: {default})"
        kw: dict[str, Any] = {"dest": f.name, "help": help_, "default": argparse.SUPPRESS}
        if f.name == "model_args":
            p.add_argument("--model-arg", action="append", type=_parse_model_arg, metavar="KEY=VALUE", **kw)
            continue
        if typ == "bool":
            p.add_argument(flag, action=argparse.BooleanOptionalAction, **kw)
            continue
        if "choices" in meta:
            kw["choices"] = meta["choices"]
        if "nargs" in meta:
            kw["nargs"] = meta["nargs"]
            kw["type"] = str if "str" in typ else float
        else:
            kw["type"] = _TYPES[typ.split(" ")[0]]
        if f.name == "variant":
            kw["required"] = True
        p.add_argument(flag, metavar=f.name.upper() if "choices" not in meta else None, **kw)


def config_from_args(ns: argparse.Namespace, study: str | None = None) -> RunConfig:
    """Recipe values first, then every option the user gave explicitly."""
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    given = {k: v for k, v in vars(ns).items() if k in fields}
    recipe = given.get("recipe")
    base: dict[str, Any] = {}
    if recipe is not None:
        if recipe not in RECIPES:
            raise UsageError(f"unknown recipe {recipe!r}; choose one of: {', '.join(sorted(RECIPES))}")
        base = dict(RECIPES[recipe])
        if "epochs" in given:
            base.pop("steps", None)  # the user chose the run length in epochs instead of the recipe's steps
    for name in ("betas", "milestones", "measure", "model_args"):
        if name in given:
            given[name] = tuple(given[name])
    if study is not None:
        given["study"] = study
    return RunConfig(**{**base, **given})


# -- commands ---------------------------------------------------------------------------------


def cmd_list(ns: argparse.Namespace) -> int:
    import variants

    names = variants.list_variants(ns.pattern)
    if not names:
        raise UsageError(f"no variant matches {ns.pattern!r}; try `python -m bench list` for all")
    width = max(len(n) for n in names)
    for name in names:
        with plugins.blame(name):  # counted on the meta device, without allocating (gpt2_small, resnet1202)
            desc = variants.describe(name)
        owner = plugins.plugin_of(name)
        where = f"  plugin {owner.spec}" if owner is not None else ""
        print(f"{name:<{width}}  {desc['family']:<14} {desc['params']:>13,}{where}")
    return 0


def cmd_run(ns: argparse.Namespace) -> int:
    from . import api

    cfg = config_from_args(ns)
    result = api.run(cfg=cfg, results_dir=ns.results_dir, progress=not ns.quiet, tracker=ns.tracker or [],
                     tracker_uri=ns.tracker_uri or [])
    if not ns.quiet:
        print(summary(dict(result.record), ns.results_dir))
    return 0


def summary(result: dict[str, Any], results_dir: str) -> str:
    r = result["row"]

    def fmt(v: Any, spec: str = ".4f") -> str:
        return "n/a" if v is None or v == "" else format(v, spec)

    lines = [
        f"{r['run_id']}: {r['variant']} (depth {r['depth']}, {r['params']:,} parameters) on {r['task']}, "
        f"{r['steps']} steps ({fmt(r['epochs'], '.1f')} epochs) on {r['device_name']} [{r['precision']}] "
        f"-> status {r['status']}{': ' + r['error'] if r['error'] else ''}.",
        f"Final train loss {fmt(r['final_train_loss'])}, train acc {fmt(r['final_train_acc'])}; "
        f"val loss {fmt(r['final_val_loss'])}, val acc {fmt(r['final_val_acc'])} (best {fmt(r['best_val_acc'])}).",
        f"Throughput {fmt(r['train_samples_per_s'], ',.0f')} samples/s "
        f"(median step {fmt(r['step_time_ms'], '.2f')} ms), "
        f"peak memory {fmt(r['peak_mem_mb'], '.1f')} MiB ({r['mem_method'] or 'not measured'}), "
        f"{fmt(r['fwd_flops_per_sample'], '.3g')} forward / {fmt(r['train_flops_per_sample'], '.3g')} training "
        f"FLOPs per sample, {fmt(r['achieved_tflops'], '.3g')} TFLOP/s "
        f"(MFU {fmt(r['mfu'], '.2%')}); wall time {fmt(r['wall_time_s'], '.1f')} s.",
        f"Row appended to {Path(results_dir) / 'leaderboard.csv'}; details in "
        f"{Path(results_dir) / 'runs' / (r['run_id'] + '.json')}.",
    ]
    if r["target_acc"] is not None:
        reached = f"at step {r['steps_to_target']} ({fmt(r['time_to_target_s'], '.1f')} s)"
        lines.insert(2, f"Target val acc {r['target_acc']}: {reached if r['steps_to_target'] else 'not reached'}.")
    return " ".join(lines)


def _board(ns: argparse.Namespace) -> tuple[Any, list[Any]]:
    """The leaderboard (only ``--study``'s runs when given) and the run JSONs."""
    from .results import ResultsStore

    store = ResultsStore(ns.results_dir)
    board = store.load_leaderboard()
    if getattr(ns, "study", None) and not board.empty:
        if ns.study not in set(board["study"].dropna()):
            studies = ", ".join(sorted(map(str, board["study"].dropna().unique()))) or "none"
            raise UsageError(f"no runs of study {ns.study!r} in {ns.results_dir}; studies there: {studies}")
        board = board[board["study"] == ns.study].reset_index(drop=True)
    return board, store.load_runs()


def _cell(mean: float, ci: float, n: float) -> str:
    """``mean ± CI (n)``: the 95% t half-width over the counted runs; one run has no CI."""
    import math

    if not n:
        return "—"
    if n == 1 or not math.isfinite(ci):
        return f"{mean:.4g} ({int(n)})"
    return f"{mean:.4g} ± {ci:.2g} ({int(n)})"


def cmd_leaderboard(ns: argparse.Namespace) -> int:
    from .stats import aggregate, by_configuration

    df, runs = _board(ns)
    if df.empty:
        print(f"no runs in {ns.results_dir}")
        return 0
    metrics = list(ns.metrics or LEADERBOARD_METRICS)
    unknown = [m for m in metrics if m not in df.columns]
    if unknown:
        raise UsageError(f"unknown metric(s) {unknown}; leaderboard columns: {', '.join(df.columns)}")
    # Seeds pool only with seeds: one row per configuration, showing the fields in which configurations differ.
    named, by = by_configuration(df, runs)
    full = aggregate(named, by=by, metrics=metrics)
    if ns.sort:
        key = ns.sort if ns.sort in full.columns else f"{ns.sort}_mean"
        if key not in full.columns:
            raise UsageError(f"cannot sort by {ns.sort!r}; choose a metric ({', '.join(metrics)}) or one of: "
                             f"{', '.join(map(str, full.columns))}")
        full = full.sort_values(key, ascending=ns.ascending, kind="stable")
    for path, write in ((ns.csv, lambda p: full.to_csv(p, index=False)),
                        (ns.json, lambda p: full.to_json(p, orient="records", indent=1))):
        if path:
            write(path)
            print(f"full table ({len(full.columns)} columns) written to {path}")
    compact = full[[*by, "n_runs", "n_failed"]].copy()
    for m in metrics:
        compact[m] = [_cell(*v) for v in zip(full[f"{m}_mean"], full[f"{m}_ci"], full[f"{m}_n"], strict=True)]
    import pandas as pd

    with pd.option_context("display.max_rows", None, "display.max_columns", None, "display.width", 250):
        print(compact.to_string(index=False))
    return 0


def cmd_compare(ns: argparse.Namespace) -> int:
    from .comparison import compare_table, render

    df, runs = _board(ns)
    for cond in ns.where or []:
        key, sep, value = cond.partition("=")
        if not sep or key not in df.columns:
            raise UsageError(f"--where wants COLUMN=VALUE with a leaderboard column, got {cond!r}")
        df = df[df[key].astype(str) == value].reset_index(drop=True)
    if df.empty:
        raise UsageError(f"no runs to compare in {ns.results_dir}{' after --where' if ns.where else ''}")
    try:
        table = compare_table(df, runs, ns.baseline, ns.metric or ["final_val_loss"])
    except ValueError as e:
        raise UsageError(str(e)) from e
    print(render(table, ns.format), end="" if ns.format == "csv" else "\n")
    return 0


def cmd_show(ns: argparse.Namespace) -> int:
    import json

    from .results import ResultsStore

    run = ResultsStore(ns.results_dir).load_run(ns.run_id)
    if ns.json:
        print(json.dumps(run, indent=1))
        return 0
    for key, value in run["row"].items():
        print(f"{key:>20}: {value}")
    evals = run["curves"]["eval"]
    if evals:
        print("\nevaluations:")
        import pandas as pd

        print(pd.DataFrame(evals).to_string(index=False))
    return 0


def cmd_probe(ns: argparse.Namespace) -> int:
    from .probes import format_probe_table, probe, probe_table
    from .train import setup

    cfg = config_from_args(ns)
    with plugins.blame(cfg.variant):
        s = setup(dataclasses.replace(cfg, steps=1, measure=()))
    plugins.check_forward(cfg.variant, s.model, s.task)
    x, y = next(iter(s.task.train_eval_batches(cfg.batch_size)))
    s.model.train()
    df = probe_table(probe(s.model, x, y, s.task.loss, 0))
    print(f"{cfg.variant} on {cfg.task} at initialisation (seed {cfg.seed}, batch {len(x)}):")
    print(format_probe_table(df))
    if ns.csv:
        df.to_csv(ns.csv, index=False)
        print(f"tidy table written to {ns.csv}")
    return 0


def cmd_diff(ns: argparse.Namespace) -> int:
    from .fairness import diff_models, format_diff

    model_args = dict(ns.model_arg or [])
    with plugins.blame(ns.a, ns.b):
        rows = diff_models(ns.a, ns.b, ns.depth, model_args, seed=ns.seed,
                           param_tolerance=ns.param_tolerance)
    print(f"{ns.a} vs {ns.b}" + (f", depth {ns.depth}" if ns.depth is not None else "")
          + "".join(f", {k}={v!r}" for k, v in model_args.items()) + f", seed {ns.seed} (built on the CPU):")
    print(format_diff(ns.a, ns.b, rows, show_all=ns.all))
    return 0


def cmd_plot(ns: argparse.Namespace) -> int:
    from .plots import make_all

    paths = make_all(ns.results_dir, ns.study)
    if not paths:
        print(f"nothing to plot in {ns.results_dir} (no runs yet)")
    for p in paths:
        print(p)
    return 0


def cmd_report(ns: argparse.Namespace) -> int:
    from .report import write_report

    print(write_report(ns.results_dir, ns.study))
    return 0


def _run_study(path: Path, ns: argparse.Namespace, verb: str, report: bool = False) -> None:
    """Run a study file's grid (under ``--preset``) on the chosen executor: :func:`bench.api.sweep`."""
    from . import api

    api.sweep(path, preset=ns.preset, executor=ns.executor, jobs=ns.jobs, gpus_per_run=ns.gpus_per_run,
              address=ns.address, cpus_per_run=ns.cpus_per_run, retries=ns.retries,
              results_dir=ns.results_dir, resume=ns.resume, measure_every_run=ns.measure_every_run,
              add_variants=ns.add_variant or [], progress=not ns.quiet, report=report,
              tracker=ns.tracker or [], tracker_uri=ns.tracker_uri or [], command=_resume_command(ns), verb=verb)


def _resume_command(ns: argparse.Namespace) -> str:
    """The command line that resumes this sweep (and reruns its failed runs): this one, without --no-resume."""
    import shlex

    args = ["python", "-m", "bench", ns.command, ns.file if ns.command == "sweep" else ns.name]
    args += ["--preset", ns.preset] if ns.preset else []
    for name in ns.add_variant or []:
        args += ["--add-variant", name]
    for spec in ns.plugins or []:
        args += ["--plugin", spec]
    args += ["--results-dir", str(ns.results_dir)]
    args += ["--executor", ns.executor] if ns.executor != "local" else []
    args += ["--jobs", str(ns.jobs)] if ns.jobs != 1 else []
    args += ["--gpus-per-run", str(ns.gpus_per_run)] if ns.gpus_per_run != 1 else []
    args += ["--address", ns.address] if ns.address else []
    args += ["--cpus-per-run", str(ns.cpus_per_run)] if ns.cpus_per_run != 1 else []
    args += ["--retries", str(ns.retries)] if ns.retries else []
    args += ["--measure-every-run"] if ns.measure_every_run else []
    for name in ns.tracker or []:
        args += ["--tracker", name]
    for uri in ns.tracker_uri or []:
        args += ["--tracker-uri", uri]
    args += ["--quiet"] if ns.quiet else []
    return shlex.join(args)


def cmd_sweep(ns: argparse.Namespace) -> int:
    _run_study(Path(ns.file), ns, "study")
    return 0


def cmd_reproduce(ns: argparse.Namespace) -> int:
    from .study import study_path

    _run_study(study_path(ns.name), ns, "reproducing", report=True)  # the figures and REPORT.md too
    return 0


def cmd_data(ns: argparse.Namespace) -> int:
    from .datasets import download

    path = download(ns.name, ns.data_dir, url=ns.url, progress=not ns.quiet)
    print(f"{ns.name}: verified archive at {path}")
    return 0


def cmd_perf(ns: argparse.Namespace) -> int:
    from .perf import overhead

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
    from .scaling import scaling

    cfg = config_from_args(ns)
    df = scaling(cfg, ns.nproc, ns.keep)
    print(f"{cfg.variant} on {cfg.task}, global batch {cfg.batch_size}: throughput of one DDP job per process count "
          "(each measured in its own torchrun; cores split evenly on the CPU)")
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


def cmd_track(ns: argparse.Namespace) -> int:
    from . import api

    logged, failed = api.track(ns.results_dir, tracker=ns.tracker or [], tracker_uri=ns.tracker_uri or [],
                               study=ns.study, progress=not ns.quiet)
    where = ", ".join(ns.tracker or [])
    print(f"{logged} runs of {ns.results_dir} logged to {where}" + (f"; {failed} failed (warnings above)"
                                                                     if failed else ""))
    return 1 if failed else 0


def cmd_recipes(ns: argparse.Namespace) -> int:
    for name, values in sorted(RECIPES.items()):
        print(f"{name}: " + ", ".join(f"{k}={v}" for k, v in values.items()))
    return 0


# -- parser -----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description="resbench: residual-design benchmarks")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def results(q: argparse.ArgumentParser) -> None:
        q.add_argument("--results-dir", default=DEFAULT_RESULTS,
                       help=f"results directory (default: {DEFAULT_RESULTS}, or $RESBENCH_RESULTS)")

    q = sub.add_parser("list", help="list registered variants: name, family, parameters at the default size")
    q.add_argument("pattern", nargs="?", default="*", help="fnmatch pattern, e.g. 'resnet*' (default: all)")
    q.set_defaults(fn=cmd_list)

    q = sub.add_parser("run", help="train one variant on one task and record one leaderboard row")
    add_config_arguments(q)
    results(q)
    q.add_argument("--quiet", action="store_true",
                   help="no progress (a bar on a terminal, else a line every 30 s) and no summary")
    add_tracker_options(q)
    q.set_defaults(fn=cmd_run)

    q = sub.add_parser("leaderboard", help="the leaderboard over seeds: one 'mean ± 95%% CI (n)' cell per metric")
    results(q)
    q.add_argument("--metrics", nargs="+", metavar="COL",
                   help=f"leaderboard columns to show (default: {' '.join(LEADERBOARD_METRICS)})")
    q.add_argument("--study", help="only the runs of this study")
    q.add_argument("--sort", help="a metric (its mean) or a column of the full table to sort by")
    q.add_argument("--ascending", action="store_true", help="sort ascending (default: descending)")
    q.add_argument("--csv", metavar="FILE", help="also write the full table (mean, std, n, CI, median) as CSV")
    q.add_argument("--json", metavar="FILE", help="also write the full table as JSON records")
    q.set_defaults(fn=cmd_leaderboard)

    q = sub.add_parser("compare", help="metrics per configuration against a baseline variant: Welch tests, Holm")
    results(q)
    q.add_argument("--baseline", required=True, help="the variant every other row is compared with, e.g. preln")
    q.add_argument("--metric", nargs="+", metavar="COL", help="leaderboard columns (default: final_val_loss)")
    q.add_argument("--study", help="only the runs of this study")
    q.add_argument("--where", action="append", metavar="COL=VALUE", help="only runs with this value (repeatable)")
    q.add_argument("--format", choices=("markdown", "csv", "latex"), default="markdown", help="(default: markdown)")
    q.set_defaults(fn=cmd_compare)

    q = sub.add_parser("show", help="one run: its row and evaluation curve")
    q.add_argument("run_id", help="run id, or a unique prefix of one")
    q.add_argument("--json", action="store_true", help="print the whole run JSON")
    results(q)
    q.set_defaults(fn=cmd_show)

    q = sub.add_parser("probe", help="per-layer gradient/activation probes of a model at initialisation")
    add_config_arguments(q)
    q.add_argument("--csv", help="also write the tidy table (layer, metric, value) to this CSV file")
    q.set_defaults(fn=cmd_probe)

    q = sub.add_parser("diff", help="what differs between two built models: axes, init stds, norms, parameters")
    q.add_argument("a", help="a variant name")
    q.add_argument("b", help="another variant name")
    q.add_argument("--depth", type=int, help="depth of both (default: each variant's own)")
    q.add_argument("--model-arg", action="append", type=_parse_model_arg, metavar="KEY=VALUE",
                   help="a keyword argument given to both builders (repeatable)")
    q.add_argument("--seed", type=int, default=0, help="torch seed before building each model (default 0)")
    q.add_argument("--param-tolerance", type=float, default=0.01,
                   help="relative parameter-count difference still counted as equal (default 0.01)")
    q.add_argument("--all", action="store_true", help="show every compared quantity, not only the differences")
    q.set_defaults(fn=cmd_diff)

    q = sub.add_parser("plot", help="write the seaborn figures of a results directory to DIR/plots/")
    results(q)
    q.add_argument("--study", help="only the runs of this study (figures go to DIR/plots/STUDY/)")
    q.set_defaults(fn=cmd_plot)

    q = sub.add_parser("report", help="write DIR/REPORT.md: aggregated tables, figures, paper claims vs measured")
    results(q)
    q.add_argument("--study", help="only the runs of this study")
    q.set_defaults(fn=cmd_report)

    for name, fn, target, helptext in (
        ("sweep", cmd_sweep, "file", "run a study file (TOML grid of variants x depths x seeds)"),
        ("reproduce", cmd_reproduce, "name", "run a shipped study, then plot and report (e.g. degradation)"),
    ):
        q = sub.add_parser(name, help=helptext)
        q.add_argument(target, help="study TOML file" if target == "file" else "shipped study name")
        q.add_argument("--preset", help="a preset of the study, e.g. quick (default: the full grid)")
        q.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True,
                       help="skip runs whose run_id already has an ok row, so that rerunning an interrupted or "
                            "killed sweep runs only the runs without one (default: on)")
        q.add_argument("--executor", default="local", metavar="NAME",
                       help="where the runs execute: local (this machine, each run in a process of its own) or ray "
                            "(tasks on a Ray cluster; pip install 'resbench[ray]') (default: local)")
        q.add_argument("--address", metavar="ADDR",
                       help="ray executor: the cluster to connect to (host:port of `ray start --head`, ray://..., "
                            "or auto); default: a local Ray started on this machine")
        q.add_argument("--cpus-per-run", type=int, default=1, metavar="C",
                       help="ray executor: CPUs each run's task asks for (its torch threads) (default: 1)")
        q.add_argument("--retries", type=int, default=0, metavar="K",
                       help="ray executor: reruns of a task whose worker or node died (default: 0, a killed row)")
        q.add_argument("--jobs", type=int, default=1, metavar="N",
                       help="local executor: runs at a time; the CPU cores are split between them, and on CUDA "
                            "each gets its own GPU(s) (default: 1)")
        q.add_argument("--gpus-per-run", type=int, default=1, metavar="G",
                       help="local executor on CUDA: GPUs given to each run through CUDA_VISIBLE_DEVICES; 0 lets "
                            "every run see every GPU; ray executor: GPUs each run's task asks for (default: 1)")
        q.add_argument("--measure-every-run", action="store_true",
                       help="measure throughput, memory and FLOPs in every run, not once per model configuration "
                            "(the first seed's figures reused in the other seeds' rows; column cost_source)")
        q.add_argument("--add-variant", action="append", metavar="NAME",
                       help="also run this registered variant (e.g. a plugin's), appended to the study's grid of "
                            "variants; the study's confound guard applies to it (repeatable)")
        q.add_argument("--quiet", action="store_true",
                       help="no progress: no bars, no line per run (the summary and failed runs are printed)")
        add_tracker_options(q)
        results(q)
        q.set_defaults(fn=fn)

    q = sub.add_parser("track", help="log the runs of a results directory to TensorBoard and/or MLflow")
    results(q)
    q.add_argument("--study", help="only the runs of this study")
    q.add_argument("--quiet", action="store_true", help="no progress bar")
    add_tracker_options(q, required=True)
    q.set_defaults(fn=cmd_track)

    q = sub.add_parser("data", help="dataset utilities")
    dsub = q.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    d = dsub.add_parser("download", help="fetch and verify an official dataset archive (cifar10, cifar100)")
    d.add_argument("name", choices=("cifar10", "cifar100"))
    d.add_argument("--data-dir", help="where to put it (default: $RESBENCH_DATA or ~/.cache/resbench)")
    d.add_argument("--url", help="fetch from this URL instead of the official one (a mirror)")
    d.add_argument("--quiet", action="store_true", help="no progress bar")
    d.set_defaults(fn=cmd_data)

    q = sub.add_parser("perf", help="harness self-checks")
    psub = q.add_subparsers(dest="perf_command", required=True, metavar="CHECK")
    o = psub.add_parser("overhead", help="harness training throughput vs a minimal PyTorch loop, side by side")
    add_config_arguments(o)
    o.add_argument("--timed-steps", dest="perf_steps", type=int, default=30,
                   help="steps per timed repeat (default 30)")
    o.add_argument("--repeats", type=int, default=7, help="alternating repeats; medians reported (default 7)")
    o.set_defaults(fn=cmd_perf)
    sc = psub.add_parser("scaling", help="throughput on 1, 2, ... processes (torchrun + DDP) and scaling efficiency")
    add_config_arguments(sc)
    sc.add_argument("--nproc", type=int, nargs="+", default=[1, 2], metavar="N",
                    help="process counts (1 is always measured: efficiency = throughput(N) / (N x throughput(1)))")
    sc.add_argument("--keep", metavar="DIR", help="keep each count's results directory under DIR (default: a "
                                                   "temporary directory, removed)")
    sc.set_defaults(fn=cmd_scaling)

    from .cli_analysis import add_commands

    add_commands(sub, results)  # lesion, gradcorr, landscape

    q = sub.add_parser("recipes", help="list the named training recipes and their settings")
    q.set_defaults(fn=cmd_recipes)
    for leaf in (*sub.choices.values(), *dsub.choices.values(), *psub.choices.values()):
        if leaf.get_default("fn") is not None:  # `data` and `perf` only dispatch to their actions
            add_plugin_option(leaf)
    return p


def add_tracker_options(p: argparse.ArgumentParser, required: bool = False) -> None:
    p.add_argument("--tracker", action="append", choices=("tensorboard", "mlflow"), required=required,
                   help="also log each recorded run there: config as parameters, per-step loss and lr, every "
                        "evaluation, the final metrics, run JSON and curve figure (repeatable; needs the extra: "
                        "pip install 'resbench[tensorboard]' / 'resbench[mlflow]')")
    p.add_argument("--tracker-uri", action="append", metavar="URI|NAME=URI",
                   help="the TensorBoard log directory (default: RESULTS/tensorboard) or the MLflow tracking URI "
                        "(default: $MLFLOW_TRACKING_URI, else sqlite:///RESULTS/mlflow.db); NAME=URI when two "
                        "trackers are named")


def add_plugin_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plugin", action="append", dest="plugins", metavar="FILE.py|MODULE",
                   help="load your own variants from this Python file or importable module (repeatable; also "
                        f"${plugins.ENV_VAR}, {os.pathsep}-separated, and installed '{plugins.ENTRY_POINT_GROUP}' "
                        "entry points)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    before = plugins.loaded()
    try:
        plugins.load_all(getattr(ns, "plugins", None) or [])
        return int(ns.fn(ns))
    except ValueError as exc:  # UsageError, TaskError, variants' ValueErrors, RunConfig validation, plugins
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted: nothing half-written was left (writes are atomic)", file=sys.stderr)
        return 130
    finally:  # what this command loaded goes with it (main called twice in one process starts afresh)
        for plugin in plugins.loaded():
            if plugin not in before:
                plugins.unload(plugin)
