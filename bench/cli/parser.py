"""The command line's parser: one function per command, each naming the module and function that carries it out.

This module imports nothing heavy (the standard library and the field tables of :mod:`bench.runs.config`,
:mod:`bench.sweeps.options` and :mod:`bench.analysis.options`): ``python -m bench --help``, a typo in an option and
every usage error answer at once, and only the command that runs loads torch (:func:`bench.cli.main`).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import os
from collections.abc import Callable
from typing import Any

from bench.analysis.options import OPTIONS
from bench.runs.config import (
    COMPILE_MODES,
    DEFAULT_RESULTS,
    GROUPS,
    PLUGIN_ENTRY_POINTS,
    PLUGINS_ENV_VAR,
    RESULTS_ENV_VAR,
    RunConfig,
    build,
)
from bench.runs.constraints import CONSTRAINTS, from_text
from bench.sweeps.options import SweepOptions, flag

Sub = Any  # argparse's _SubParsersAction


def parse_model_arg(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``--model-arg``: the value as a Python literal, else as a bare word (``shortcut=B``)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"--model-arg takes KEY=VALUE, got {text!r}")
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        value = raw  # a bare word is a string: shortcut=B
    return key, value


def add_config_arguments(p: argparse.ArgumentParser) -> None:
    """One option per RunConfig field, documented by the field's reason and default, in one ``--help`` section per
    group of the config (:data:`bench.runs.config.GROUPS`: model, data, optimisation, measurement, run)."""
    sections = {name: p.add_argument_group(f"{name} ({(fields.__doc__ or '').split(': ', 1)[-1].rstrip('.')})")
                for name, fields in GROUPS.items()}
    for group, f in ((g, f) for g, fields in GROUPS.items() for f in dataclasses.fields(fields)):
        if f.name in ("study", "preset", "world_size"):  # set by sweeps, and from torchrun's WORLD_SIZE
            continue
        add = sections[group].add_argument
        opt = "--" + f.name.replace("_", "-")
        meta, typ, accepts = f.metadata, str(f.type), CONSTRAINTS[f.name]
        accepted = f"; {accepts.describe()}" if accepts.kind in ("int", "float") else ""
        kw: dict[str, Any] = {"dest": f.name, "help": f"{meta['help']} (default: {f.default}{accepted})",
                              "default": argparse.SUPPRESS}
        if f.name == "model_args":
            add("--model-arg", action="append", type=parse_model_arg, metavar="KEY=VALUE", **kw)
            continue
        if typ == "bool":
            add(opt, action=argparse.BooleanOptionalAction, **kw)
            continue
        if "choices" in meta:
            kw["choices"] = meta["choices"]
        if "nargs" in meta:
            kw["nargs"] = meta["nargs"]
        if f.name == "variant":
            kw["required"] = True
        add(opt, metavar=f.name.upper() if "choices" not in meta else None, **kw)


def add_sweep_options(p: argparse.ArgumentParser) -> None:
    """One option per :class:`~bench.sweeps.options.SweepOptions` field (``dest`` = the field's name)."""
    for f in dataclasses.fields(SweepOptions):
        meta, typ = f.metadata, str(f.type)
        default = f"(default: {f.default})" if not meta.get("repeat") else ""
        kw: dict[str, Any] = {"dest": f.name, "help": f"{meta['help']} {default}".strip(), "default": argparse.SUPPRESS}
        if meta.get("executor"):
            kw["help"] = f"{meta['executor']} executor: {kw['help']}"
        if f.name == "resume":
            p.add_argument(flag(f), action=argparse.BooleanOptionalAction, **kw)
        elif typ == "bool":
            p.add_argument(flag(f), action="store_true", **kw)
        elif meta.get("repeat"):
            p.add_argument(flag(f), action="append", metavar=meta.get("metavar"), **kw)
        else:
            p.add_argument(flag(f), type=int if typ == "int" else str, metavar=meta.get("metavar"), **kw)


def _results(q: argparse.ArgumentParser) -> None:
    q.add_argument("--results-dir", default=DEFAULT_RESULTS,
                   help=f"results directory (default: {DEFAULT_RESULTS}, or ${RESULTS_ENV_VAR})")


def _handler(q: argparse.ArgumentParser, target: str) -> None:
    """The command's function, ``module:function`` under ``bench.cli``, loaded when the command runs; every command
    takes ``--plugin``."""
    _plugin_option(q)
    q.set_defaults(handler=target)


def _trackers(p: argparse.ArgumentParser, required: bool = False) -> None:
    p.add_argument("--tracker", action="append", choices=("tensorboard", "mlflow"), required=required,
                   help="also log each recorded run there: config as parameters, per-step loss and lr, every "
                        "evaluation, the final metrics, run JSON and curve figure (repeatable; needs the extra: "
                        "pip install 'resbench[tensorboard]' / 'resbench[mlflow]')")
    p.add_argument("--tracker-uri", action="append", metavar="URI|NAME=URI",
                   help="the TensorBoard log directory (default: RESULTS/tensorboard) or the MLflow tracking URI "
                        "(default: $MLFLOW_TRACKING_URI, else sqlite:///RESULTS/mlflow.db); NAME=URI when two "
                        "trackers are named")


def _plugin_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plugin", action="append", dest="plugins", metavar="FILE.py|MODULE",
                   help="load your own variants from this Python file or importable module (repeatable; also "
                        f"${PLUGINS_ENV_VAR}, {os.pathsep}-separated, and installed '{PLUGIN_ENTRY_POINTS}' "
                        "entry points)")
    p.add_argument("--trust-plugins", action="store_true",
                   help="also import the plugins named by a study stored in a results folder (RESULTS/studies/), "
                        "each checked against the content hash its sweep recorded; without it a results folder "
                        "never makes resbench import code (docs/security.md)")


# -- one function per command -------------------------------------------------------------------------------------


def _list(sub: Sub) -> None:
    q = sub.add_parser("list", help="list registered variants: name, family, parameters at the default size")
    q.add_argument("pattern", nargs="?", default="*", help="fnmatch pattern, e.g. 'resnet*' (default: all)")
    q.add_argument("--catalogue", action="store_true",
                   help="print the Markdown catalogue of the variants instead: paper, parameters, axes and where each "
                        "formula is written (docs/variants.md is this output)")
    _handler(q, "models:cmd_list")


def _show_variant(sub: Sub) -> None:
    q = sub.add_parser("show-variant", help="a variant's formula: the file and line of each axis's forward "
                       "(layer, unit, join, body, norm)")
    q.add_argument("name", help="a registered variant name")
    q.add_argument("--shape", help="build it as `bench cost --shape` does (its parameters as `diff --shape` counts "
                                   "them): gpt2_small, gpt2_medium, resnet50_224, study_quick, cifar_resnet110 or "
                                   "digits (default: the variant's defaults, 3-channel images for a CIFAR net)")
    _handler(q, "models:cmd_show_variant")


def _run(sub: Sub) -> None:
    q = sub.add_parser("run", help="train one variant on one task and record one leaderboard row")
    add_config_arguments(q)
    _results(q)
    q.add_argument("--quiet", action="store_true",
                   help="no progress (a bar on a terminal, else a line every 30 s) and no summary")
    q.add_argument("--force", action="store_true",
                   help="train a run already recorded in runs/<run_id>.json again and replace it (default: show it)")
    _trackers(q)
    _handler(q, "runs:cmd_run")


def _leaderboard(sub: Sub) -> None:
    q = sub.add_parser("leaderboard", help="the leaderboard over seeds: one 'mean ± 95%% CI (n)' cell per metric")
    _results(q)
    q.add_argument("--metrics", nargs="+", metavar="COL",
                   help="leaderboard columns, or train_error / val_error, to show (default: each task's primary "
                        "metric and its training counterpart, throughput and peak memory)")
    q.add_argument("--study", help="only the runs of this study")
    q.add_argument("--sort", help="a metric (its mean) or a column of the full table to sort by")
    q.add_argument("--ascending", action="store_true", help="sort ascending (default: descending)")
    q.add_argument("--csv", metavar="FILE", help="also write the full table (mean, std, n, CI, median) as CSV")
    q.add_argument("--json", metavar="FILE", help="also write the full table as JSON records")
    _handler(q, "tables:cmd_leaderboard")


def _compare(sub: Sub) -> None:
    q = sub.add_parser("compare", help="metrics per configuration against a baseline variant: the difference and "
                       "its 95%% CI (paired by seed where the runs pair, else Welch), p, Holm")
    _results(q)
    q.add_argument("--baseline", required=True, help="the variant every other row is compared with, e.g. preln")
    q.add_argument("--metrics", "--metric", nargs="+", metavar="COL", dest="metrics",
                   help="leaderboard columns, or train_error / val_error (default: each task's primary metric)")
    q.add_argument("--study", help="only the runs of this study")
    q.add_argument("--baseline-study", metavar="S",
                   help="take the baseline's runs from this study of the results directory (default: --study's, "
                        "else any study whose configuration matches)")
    q.add_argument("--where", action="append", metavar="COL=VALUE", help="only runs with this value (repeatable)")
    q.add_argument("--format", choices=("markdown", "csv", "latex"), default="markdown", help="(default: markdown)")
    _handler(q, "tables:cmd_compare")


def _scaling_fit(sub: Sub) -> None:
    q = sub.add_parser("scaling-fit", help="fit each design's loss against training compute, L(C) = E + A*C^-alpha, "
                       "over its ladder of sizes, and its compute multiplier against a baseline (95%% bootstrap "
                       "intervals over seeds)")
    _results(q)
    q.add_argument("--baseline", required=True, help="the design every other is compared with, e.g. preln")
    q.add_argument("--metric", default="final_val_loss", help="the loss to fit: final_val_loss (default) or "
                   "final_train_loss")
    q.add_argument("--study", help="only the runs of this study")
    q.add_argument("--where", action="append", metavar="COL=VALUE", help="only runs with this value (repeatable)")
    q.add_argument("--free-floor", action="store_true", help="fit E too where the task's floor is known "
                   "(tinytext's entropy rate); by default it is held there")
    q.add_argument("--draws", type=_positive(int), default=400, help="bootstrap resamples of the seeds "
                   "(default: 400)")
    q.add_argument("--format", choices=("markdown", "csv"), default="markdown", help="(default: markdown)")
    _handler(q, "scaling:cmd_scaling_fit")


def _show(sub: Sub) -> None:
    q = sub.add_parser("show", help="one run: its row and evaluation curve")
    q.add_argument("run_id", help="run id, or a unique prefix of one")
    q.add_argument("--json", action="store_true", help="print the whole run JSON")
    _results(q)
    _handler(q, "runs:cmd_show")


def _upgrade(sub: Sub) -> None:
    q = sub.add_parser("upgrade", help="bring results recorded by an earlier resbench up to this one's rules: fill "
                       "each run's chance level from its task and mark the runs that ended at it failed_to_learn "
                       "(numbers kept), each row's machine fingerprint from its run's environment, and each run "
                       "recorded when its id held its preset its configuration's id (old ids keep resolving)")
    q.add_argument("--dry-run", action="store_true", help="print what would change, write nothing")
    _results(q)
    _handler(q, "runs:cmd_upgrade")


def _probe(sub: Sub) -> None:
    q = sub.add_parser("probe", help="per-layer gradient/activation probes of a model at initialisation")
    add_config_arguments(q)
    q.add_argument("--csv", help="also write the tidy table (layer, metric, value) to this CSV file")
    _handler(q, "models:cmd_probe")


def _diff(sub: Sub) -> None:
    q = sub.add_parser("diff", help="what differs between two built models: axes, init stds, norms, parameters")
    q.add_argument("a", help="a variant name")
    q.add_argument("b", help="another variant name")
    q.add_argument("--depth", type=int, help="depth of both, 1..2000 (default: the shape's, else each variant's own)")
    q.add_argument("--shape", help="build both as `bench cost --shape` does: gpt2_small, gpt2_medium, resnet50_224, "
                                   "study_quick, cifar_resnet110 or digits (default: each variant's defaults, "
                                   "3-channel images for a CIFAR net)")
    q.add_argument("--model-arg", action="append", type=parse_model_arg, metavar="KEY=VALUE",
                   help="a keyword argument given to both builders (repeatable)")
    q.add_argument("--seed", type=int, default=0, help="torch seed before building each model (default 0)")
    q.add_argument("--param-tolerance", type=float, default=0.01,
                   help="relative parameter-count difference still counted as equal (default 0.01)")
    q.add_argument("--all", action="store_true", help="show every compared quantity, not only the differences")
    q.add_argument("--study", help="also load the plugins this study file names (a path or a study name)")
    _results(q)
    _handler(q, "models:cmd_diff")


def _plot_and_report(sub: Sub) -> None:
    q = sub.add_parser("plot", help="write the seaborn figures of a results directory to DIR/plots/")
    _results(q)
    q.add_argument("--study", help="only the runs of this study (figures go to DIR/plots/STUDY/; without it, each "
                                   "study's figures go to its own folder)")
    _jobs(q)
    _handler(q, "figures:cmd_plot")
    q = sub.add_parser("report", help="write DIR/REPORT.md: aggregated tables, figures, paper claims vs measured")
    _results(q)
    q.add_argument("--study", help="only the runs of this study")
    _jobs(q)
    _handler(q, "figures:cmd_report")


def _jobs(q: argparse.ArgumentParser) -> None:
    q.add_argument("--jobs", type=_positive_int, metavar="N",
                   help="processes drawing the figures (default: the cores free now, as --threads picks; the "
                        "figures are the same files whatever N)")
    q.add_argument("--no-cache", dest="cached", action="store_false",
                   help="draw every figure, even one whose data and drawing code are those its PNG was drawn from")


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"a whole number of processes, 1 or more; got {text!r}")
    return n


def _merge(sub: Sub) -> None:
    q = sub.add_parser("merge", help="merge results folders (from several machines) into one: a row per run id, "
                       "identical copies dropped, conflicting ones refused; run JSONs and study files copied")
    q.add_argument("sources", nargs="+", metavar="DIR", help="results folders to merge")
    q.add_argument("-o", "--out", required=True, metavar="DIR",
                   help="the merged results folder (its own runs are kept; merging again changes nothing)")
    _handler(q, "runs:cmd_merge")


def _site(sub: Sub) -> None:
    q = sub.add_parser("site", help="write a static results site (works offline from file://): studies with their "
                       "claims' verdicts, sortable leaderboards, interactive figures, a page per run")
    _results(q)
    q.add_argument("-o", "--out", required=True, metavar="SITE", help="the folder the site is written to")
    _handler(q, "figures:cmd_site")


def _sweeps(sub: Sub) -> None:
    for name, target, helptext in (
        ("sweep", "file", "run a study file (TOML grid of variants x depths x seeds)"),
        ("reproduce", "name", "run a shipped study, then plot and report (e.g. degradation)"),
    ):
        q = sub.add_parser(name, help=helptext)
        q.add_argument(target, help="study TOML file" if target == "file" else "shipped study name")
        add_sweep_options(q)
        _results(q)
        _handler(q, f"sweeps:cmd_{name}")


def _track(sub: Sub) -> None:
    q = sub.add_parser("track", help="log the runs of a results directory to TensorBoard and/or MLflow")
    _results(q)
    q.add_argument("--study", help="only the runs of this study")
    q.add_argument("--quiet", action="store_true", help="no progress bar")
    _trackers(q, required=True)
    _handler(q, "runs:cmd_track")


def _data(sub: Sub) -> None:
    q = sub.add_parser("data", help="dataset utilities")
    dsub = q.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    d = dsub.add_parser("download", help="fetch and verify an official dataset archive (cifar10, cifar100)")
    d.add_argument("name", choices=("cifar10", "cifar100"))
    d.add_argument("--data-dir", help="where to put it (default: $RESBENCH_DATA or ~/.cache/resbench)")
    d.add_argument("--url", help="fetch from this URL instead of the official one (a mirror)")
    d.add_argument("--quiet", action="store_true", help="no progress bar")
    _handler(d, "runs:cmd_data")
    t = dsub.add_parser("tokenize", help="text files (or .jsonl, or directories of them) into token shards for the "
                                         "tokens task, streaming")
    t.add_argument("inputs", nargs="+", metavar="INPUT", help="text or .jsonl files, or directories (every file below)")
    t.add_argument("--out", required=True, metavar="ROOT", help="where the shards go (a new or empty directory)")
    t.add_argument("--tokenizer", required=True, metavar="bytes|gpt2|PATH",
                   help="bytes (vocabulary 256), gpt2 (tiktoken's GPT-2 BPE, 50257; its files must already be on this "
                        "machine: docs/data.md), or a Hugging Face tokenizer.json")
    t.add_argument("--val-fraction", type=float, default=0.1,
                   help="the last fraction of the input (by bytes) that becomes the validation split (default 0.1)")
    t.add_argument("--format", choices=("nanogpt", "llmc"), default="nanogpt",
                   help="nanogpt: train.bin and val.bin, raw uint16; llmc: <name>_train_NNNNNN.bin shards with llm.c's "
                        "256-int32 header (default nanogpt)")
    t.add_argument("--shard-tokens", type=int, default=100_000_000, help="llmc: tokens per shard (default 1e8)")
    t.add_argument("--name", help="llmc: the shards' name prefix (default: ROOT's directory name)")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    _handler(t, "data:cmd_tokenize")
    si = dsub.add_parser("synth-imagefolder", help="write a synthetic ImageNet-format dataset (JPEG/PNG class folders, "
                                                   "or WebDataset shards) to check the pipeline without a download")
    si.add_argument("root", metavar="ROOT", help="a new or empty directory")
    si.add_argument("--classes", type=int, default=10, help="(default 10)")
    si.add_argument("--train-per-class", type=int, default=100, help="(default 100)")
    si.add_argument("--val-per-class", type=int, default=20, help="(default 20)")
    si.add_argument("--size", type=int, default=160, help="shorter side of the images, up to 1.5x (default 160)")
    si.add_argument("--format", choices=("folders", "webdataset"), default="folders",
                    help="class folders, or train-NNNNNN.tar/val-NNNNNN.tar shards (default folders)")
    si.add_argument("--shard-samples", type=int, default=1000, help="webdataset: samples per shard (default 1000)")
    si.add_argument("--seed", type=int, default=0, help="(default 0)")
    si.add_argument("--jobs", type=int, help="encoding processes (default: one per CPU)")
    si.add_argument("--quiet", action="store_true", help="no progress bar")
    _handler(si, "data:cmd_synth_imagefolder")
    st = dsub.add_parser("synth-tokens", help="write synthetic token shards (learnable documents) for the tokens task")
    st.add_argument("root", metavar="ROOT", help="a new or empty directory")
    st.add_argument("--train-tokens", type=int, default=20_000_000, help="(default 2e7)")
    st.add_argument("--val-tokens", type=int, default=1_048_576, help="(default 1048576)")
    st.add_argument("--vocab-size", type=int, default=50257, help="(default 50257, GPT-2's)")
    st.add_argument("--format", choices=("nanogpt", "llmc"), default="llmc", help="(default llmc)")
    st.add_argument("--shard-tokens", type=int, default=100_000_000, help="llmc: tokens per shard (default 1e8)")
    st.add_argument("--seed", type=int, default=0, help="(default 0)")
    st.add_argument("--quiet", action="store_true", help="no progress bar")
    _handler(st, "data:cmd_synth_tokens")


def _perf(sub: Sub) -> None:
    q = sub.add_parser("perf", help="harness self-checks")
    psub = q.add_subparsers(dest="perf_command", required=True, metavar="CHECK")
    o = psub.add_parser("overhead", help="harness training throughput vs a minimal PyTorch loop, side by side")
    add_config_arguments(o)
    o.add_argument("--timed-steps", dest="perf_steps", type=int, default=30,
                   help="steps per timed repeat (default 30)")
    o.add_argument("--repeats", type=int, default=7, help="alternating repeats; medians reported (default 7)")
    _handler(o, "runs:cmd_overhead")
    sc = psub.add_parser("scaling", help="throughput on 1, 2, ... processes (torchrun + DDP) and scaling efficiency")
    add_config_arguments(sc)
    sc.add_argument("--nproc", type=int, nargs="+", default=[1, 2], metavar="N",
                    help="process counts (1 is always measured: efficiency = throughput(N) / (N x throughput(1)))")
    sc.add_argument("--keep", metavar="DIR", help="keep each count's results directory under DIR (default: a "
                                                   "temporary directory, removed)")
    _handler(sc, "runs:cmd_scaling")
    lo = psub.add_parser("loader", help="a disk-reading task's input pipeline alone (decode, augment, copy to the "
                                        "device), samples or tokens per second for each worker count")
    lo.add_argument("--task", choices=("imagefolder", "tokens"), required=True)
    lo.add_argument("--data-path", required=True, metavar="ROOT", help="as for bench run")
    lo.add_argument("--workers", type=int, nargs="+", default=[0, 2, 4, 8], metavar="N",
                    help="worker counts to measure (default 0 2 4 8)")
    lo.add_argument("--batch-size", type=int, default=256, help="(default 256)")
    lo.add_argument("--batches", type=int, default=50, help="timed batches per worker count, at least: the window "
                    "spans whole rounds of the workers, 3 at least (default 50)")
    lo.add_argument("--image-size", type=int, default=224, help="imagefolder: training crop (default 224)")
    lo.add_argument("--subset-per-class", type=int, help="imagefolder: as for bench run")
    lo.add_argument("--skip-bad-images", action="store_true", help="imagefolder: as for bench run")
    lo.add_argument("--seq-len", type=int, default=1024, help="tokens: window length (default 1024)")
    lo.add_argument("--vocab-size", type=int, default=50257, help="tokens: (default 50257)")
    lo.add_argument("--prefetch", type=int, default=2, help="batches each worker prepares ahead (default 2)")
    lo.add_argument("--device", default="auto", help="where batches are copied: cpu, cuda, mps, auto (default auto)")
    lo.add_argument("--seed", type=int, default=0, help="(default 0)")
    _handler(lo, "data:cmd_perf_loader")


def _positive(typ: Callable[[str], float | int]) -> Callable[[str], float | int]:
    def parse(text: str) -> float | int:
        try:
            value = typ(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    return parse


def _analyses(sub: Sub) -> None:
    """``lesion``, ``gradcorr`` and ``landscape``: their defaults are the study files' (:data:`OPTIONS`)."""
    les, grad, land = OPTIONS["lesion"], OPTIONS["gradcorr"], OPTIONS["landscape"]
    pos_int, pos_float = _positive(int), _positive(float)

    def common(q: argparse.ArgumentParser) -> None:
        _results(q)
        q.add_argument("--name", help="file-name stem of what is written under RESULTS/analysis/ and RESULTS/plots/ "
                                      "(default: the command and the run id)")

    def trained(q: argparse.ArgumentParser, batch: int) -> None:
        q.add_argument("run_ids", nargs="+", metavar="RUN_ID",
                       help="recorded run(s) with a checkpoint (`bench run ... --save-checkpoint`); a unique prefix "
                            "is enough")
        q.add_argument("--device", default="cpu", help="where to evaluate: cpu, cuda, mps, auto (default: cpu)")
        q.add_argument("--batch-size", type=pos_int, default=batch, help=f"evaluation batch (default: {batch})")

    q = sub.add_parser("lesion", help="delete residual units of trained runs one at a time and k at once; validation "
                                      "error (Veit et al. 2016)")
    trained(q, les["batch_size"][2])
    q.add_argument("--drop", type=pos_int, nargs="+", default=les["drop"][2], metavar="K",
                   help=f"numbers of units deleted at once, random draws (default: {les['drop'][2]})")
    q.add_argument("--draws", type=pos_int, default=les["draws"][2], help="random draws per K (default: 10)")
    q.add_argument("--seed", type=int, default=0, help="seed of the draws (default: 0)")
    common(q)
    _handler(q, "analyses:cmd_lesion")

    q = sub.add_parser("gradcorr", help="input-gradient correlation along a line of inputs at initialisation, vs "
                                        "depth (Balduzzi et al. 2017)")
    q.add_argument("--variant", nargs="+", default=grad["variants"][2], metavar="V",
                   help=f"variants on one figure (default: {' '.join(grad['variants'][2])})")
    q.add_argument("--depth", type=pos_int, nargs="+", default=grad["depths"][2], metavar="N",
                   help=f"depths (default: {' '.join(map(str, grad['depths'][2]))})")
    q.add_argument("--seed", type=int, nargs="+", default=[0], metavar="S", help="initialisation seeds (default: 0)")
    q.add_argument("--task", default="digits", help="task whose inputs the line crosses (default: digits)")
    q.add_argument("--points", type=pos_int, default=grad["points"][2], help="points on the line (default: 256)")
    q.add_argument("--span", type=pos_float, default=grad["span"][2],
                   help="the line runs over x0 + t·d, t in [-span, span] (default: 1)")
    q.add_argument("--max-lag", type=pos_int, default=grad["max_lag"][2], help="largest ACF lag (default: 32)")
    common(q)
    _handler(q, "analyses:cmd_gradcorr")

    q = sub.add_parser("landscape", help="loss on filter-normalised random directions through trained weights "
                                         "(Li et al. 2018)")
    trained(q, land["batch_size"][2])
    q.add_argument("--dims", type=int, choices=(1, 2), default=1, help="a 1-D line or a 2-D plane (default: 1)")
    q.add_argument("--points", type=pos_int, default=land["points"][2],
                   help="grid points per direction, odd so the trained weights are on it (default: 21)")
    q.add_argument("--span", type=pos_float, default=land["span"][2], help="coordinates in [-span, span] (default: 1)")
    q.add_argument("--samples", type=pos_int, default=land["samples"][2],
                   help="training samples the loss is evaluated on (fixed subset, no augmentation; default: 512)")
    q.add_argument("--seed", type=int, default=0, help="seed of the directions (default: 0)")
    common(q)
    _handler(q, "analyses:cmd_landscape")


# `bench cost`'s shapes and the batch each is timed at (bench.runs.shapes.SHAPES, which imports torch; a test keeps
# the two equal)
COST_BATCHES = {"gpt2_small": 1, "gpt2_medium": 1, "resnet50_224": 1, "study_quick": 16, "cifar_resnet110": 8,
                "digits": 128}


def _cost(sub: Sub) -> None:
    q = sub.add_parser("cost", help="what designs cost at a reference shape (GPT-2 small, ResNet-50 ...) relative to "
                       "a baseline: parameters, exact training FLOPs, step time and memory, timed in turn")
    q.add_argument("--designs", nargs="+", required=True, metavar="DESIGN",
                   help="registered variants (a plugin's too, with --plugin) that build at the shape")
    q.add_argument("--shape", default="gpt2_small",
                   help=f"{', '.join(COST_BATCHES)} (default: gpt2_small)")
    q.add_argument("--baseline", metavar="VARIANT",
                   help="what every ratio is relative to (default: the shape's: preln, resnet50 or resnet)")
    q.add_argument("--depth", type=int, help="build every model at this depth instead of the shape's (1..2000; the "
                                             "variant's own rule applies, e.g. 6n+2)")
    q.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="also time each step under torch.compile, beside eager (default: on an accelerator, not on a "
                        "CPU, where compiling a large model takes minutes)")
    q.add_argument("--compile-mode", choices=COMPILE_MODES, default="default",
                   help="torch.compile's mode: reduce-overhead replays each step as CUDA graphs, "
                        "max-autotune-no-cudagraphs searches kernels (default: default)")
    q.add_argument("--no-timing", dest="measure_time", action="store_false",
                   help="count parameters and FLOPs only (meta device: seconds at any shape)")
    q.add_argument("--batch", type=_positive(int), help="samples of the timed step (default: the shape's: "
                   + ", ".join(f"{name} {b}" for name, b in COST_BATCHES.items()) + ")")
    q.add_argument("--repeats", type=_positive(int), default=3,
                   help="alternating timed rounds, each a turn of steps of the baseline then of each design "
                        "(default: 3)")
    q.add_argument("--device", default="cpu", help="where to time (default: cpu)")
    q.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="the timed steps' arithmetic: fp32, or bf16 autocast as the papers train on accelerators "
                        "(default: fp32)")
    q.add_argument("--profile", action="store_true",
                   help="instead of the table: where each design's extra step time goes, operator by operator "
                        "(torch.profiler over --repeats steps of it and of the baseline)")
    q.add_argument("--top", type=_positive(int), default=12, help="operators a profile lists (default: 12)")
    q.add_argument("--format", choices=("markdown", "csv"), default="markdown")
    q.add_argument("--out", metavar="FILE", help="also write the table there, with the command that made it")
    _handler(q, "models:cmd_cost")


def _recipes(sub: Sub) -> None:
    q = sub.add_parser("recipes", help="list the named training recipes and their settings")
    _handler(q, "models:cmd_recipes")


COMMANDS = (_list, _show_variant, _run, _leaderboard, _compare, _show, _upgrade, _probe, _diff, _plot_and_report,
            _site, _merge, _sweeps, _track, _data, _perf, _analyses, _cost, _recipes,
            _scaling_fit)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description="resbench: residual-design benchmarks")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    return p


def config_from_args(ns: argparse.Namespace, study: str | None = None) -> RunConfig:
    """The RunConfig of a command line: the options given (their text read by each field's constraint,
    :func:`bench.runs.constraints.from_text`), a named recipe's values under them (:func:`bench.runs.config.build`).
    ValueError names the field and what it accepts."""
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    given = {k: from_text(CONSTRAINTS, k, v) if isinstance(v, (str, list)) else v
             for k, v in vars(ns).items() if k in fields}
    if study is not None:
        given["study"] = study
    return build(given)


def options_from_args(ns: argparse.Namespace) -> SweepOptions:
    """The :class:`~bench.sweeps.options.SweepOptions` of a ``sweep``/``reproduce`` command line."""
    names = {f.name for f in dataclasses.fields(SweepOptions)}
    return SweepOptions(**{k: v for k, v in vars(ns).items() if k in names})
