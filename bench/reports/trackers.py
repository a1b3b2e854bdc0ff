"""Experiment trackers: every recorded run also goes where a researcher's dashboards look.

A tracker receives a run when it is recorded — after its row and JSON are safely on disk, so a tracker that
fails loses nothing — and logs, from the run JSON: the configuration as parameters, the per-step training loss
and learning rate, every evaluation at its step, the final row metrics, and the run JSON plus a learning-curve
figure. In a sweep that is the moment each run ends (the driver is the one recorder); ``bench track`` logs runs
already in a results directory, so committed results can be browsed in the same dashboards.

Two backends, both real and optional extras of the package:

- ``tensorboard``: event files written by ``torch.utils.tensorboard``, one directory per run
  (``<uri>/<study>/<run_id>``; default ``<results>/tensorboard``). Logging a run again replaces its files.
- ``mlflow``: the MLflow tracking API, one MLflow run per resbench run in the experiment named after the study.
  The store is ``--tracker-uri``, else ``$MLFLOW_TRACKING_URI``, else SQLite at ``<results>/mlflow.db`` with
  artifacts under ``<results>/mlartifacts``. A run already logged (same run id and creation time) is skipped.

A missing package is bad input before anything runs: :func:`make_trackers` raises ValueError naming the install
command. A tracker that fails on one run prints a warning (with the ``bench track`` command that retries) and the
command goes on.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from bench.reports.plotdata import curves_frame
from bench.reports.plots import plot_learning_curves
from bench.runs.names import file_name, slug

# Leaderboard columns logged as final metrics: the numeric results, not the bookkeeping (params is a parameter).
FINAL_METRICS = (
    "final_train_loss", "final_train_acc", "final_val_loss", "final_val_acc", "best_val_acc", "steps_to_target",
    "time_to_target_s", "train_samples_per_s", "train_tokens_per_s", "step_time_ms", "peak_mem_mb",
    "fwd_flops_per_sample", "train_flops_per_sample", "achieved_tflops", "mfu", "wall_time_s",
)
# Row fields logged as tags (MLflow) / in the summary text (TensorBoard): what identifies and locates a run.
TAGS = ("run_id", "variant", "family", "depth", "task", "seed", "study", "status", "error", "git_sha",
        "torch_version", "device_name", "created_at", "config_hash", "params", "init")


class Tracker:
    """Logs recorded runs to one backend. ``uri`` is where (resolved, shown to the user)."""

    name = ""
    extra = ""  # the package extra that installs the backend: pip install 'resbench[<extra>]'

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def log(self, run_json: Mapping[str, Any], figure: Any = None) -> None:
        """Log one recorded run; ``figure`` is its learning-curve figure (None: none could be drawn)."""
        raise NotImplementedError


def _need(module: str, tracker: str, extra: str) -> None:
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise ValueError(f"the {tracker} tracker needs the {e.name or module} package: "
                         f"pip install 'resbench[{extra}]'") from e


def _numbers(point: Mapping[str, Any], skip: Iterable[str] = ("step",)) -> dict[str, float]:
    """The finite numeric entries of a curve point or row (a diverged step's null/inf/NaN is left out)."""
    out = {}
    for k, v in point.items():
        if k in skip or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if math.isfinite(v):
            out[k] = float(v)
    return out


def params(run_json: Mapping[str, Any]) -> dict[str, str]:
    """The run's configuration as flat string parameters (lists and tables as JSON), with the resolved model
    keyword arguments as ``model.<name>`` (the sizes actually built, not only those given)."""
    out = {k: v if isinstance(v, str) else json.dumps(v) for k, v in run_json.get("config", {}).items()}
    for k, v in (run_json.get("model_kwargs") or {}).items():
        out[f"model.{k}"] = v if isinstance(v, str) else json.dumps(v)
    return out


def curve_figure(run_json: Mapping[str, Any]) -> Any:
    """The run's learning curves (training loss, validation accuracy or loss) as a matplotlib figure; None when
    there is nothing to draw (no curve, or a run that diverged at its first step: no finite loss)."""
    curves = curves_frame([run_json])
    loss = curves.loc[(curves["split"] == "train") & (curves["metric"] == "loss"), "value"]
    if not (loss > 0).any():  # the loss axis is logarithmic
        return None
    evals = curves[curves["split"] == "eval"].dropna(subset=["value"])
    metric = "val_acc" if "val_acc" in set(evals["metric"]) else "val_loss"
    if metric == "val_loss" and not (evals.loc[evals["metric"] == metric, "value"] > 0).any():
        return None
    return plot_learning_curves(curves, val_metric=metric)


def _group(run_json: Mapping[str, Any]) -> str:
    return str(run_json.get("row", {}).get("study") or "runs")


class TensorBoardTracker(Tracker):
    """Event files via ``torch.utils.tensorboard.SummaryWriter``: scalars ``train/loss``, ``train/lr``,
    ``eval/<metric>`` at their steps and ``row/<column>`` (the final leaderboard metrics) at the last step; the
    hyper-parameters (HParams dashboard, with those metrics); text ``config`` and ``summary``; image ``curves``."""

    name, extra = "tensorboard", "tensorboard"

    def __init__(self, uri: str) -> None:
        _need("tensorboard", self.name, self.extra)
        super().__init__(uri)
        Path(uri).mkdir(parents=True, exist_ok=True)

    def run_dir(self, run_json: Mapping[str, Any]) -> Path:
        return Path(self.uri) / slug(_group(run_json)) / file_name(str(run_json["run_id"]), "run id")

    def log(self, run_json: Mapping[str, Any], figure: Any = None) -> None:
        from torch.utils.tensorboard import SummaryWriter  # the tensorboard extra: imported only when it is used

        row = run_json.get("row", {})
        where = self.run_dir(run_json)
        if where.exists():  # a rerun of the run (resumed sweep, `bench track` again): the latest attempt wins
            shutil.rmtree(where)
        curves = run_json.get("curves", {})
        last = max([p["step"] for split in ("train", "eval") for p in curves.get(split, [])], default=0)
        with SummaryWriter(log_dir=str(where)) as w:
            for point in curves.get("train", []):
                for k, v in _numbers(point).items():
                    w.add_scalar(f"train/{k}", v, point["step"])
            for point in curves.get("eval", []):
                for k, v in _numbers(point).items():
                    w.add_scalar(f"eval/{k}", v, point["step"])
            w.add_text("config", _markdown(params(run_json)), last)
            w.add_text("summary", _markdown({k: row.get(k) for k in TAGS}), last)
            if figure is not None:
                w.add_figure("curves", figure, last, close=False)  # the next tracker logs it too
            hparams = {k: v for k, v in run_json.get("config", {}).items() if isinstance(v, (int, float, str))}
            hparams |= {k: row[k] for k in ("family", "params", "init", "status") if row.get(k) is not None}
            finals = {f"row/{k}": v for k, v in _numbers(row).items() if k in FINAL_METRICS}
            # run_name "." keeps the HParams record (and its row/* scalars) in this run's own directory.
            w.add_hparams(hparams, finals, run_name=".", global_step=last)


def _markdown(mapping: Mapping[str, Any]) -> str:
    lines = ["| field | value |", "|---|---|"]
    lines += [f"| {k} | {'' if v is None else str(v).replace('|', '/')} |" for k, v in mapping.items()]
    return "\n".join(lines)


class MLflowTracker(Tracker):
    """One MLflow run per resbench run (run name = run id) in the experiment named after the study: parameters
    (the config, ``model.*``), tags (variant, status, git sha ...), metrics ``train/loss``, ``train/lr`` and
    ``eval/<metric>`` by step, the final row metrics under their leaderboard names, artifacts ``run.json`` and
    ``curves.png``; status FINISHED for an ok run, FAILED otherwise."""

    name, extra = "mlflow", "mlflow"

    def __init__(self, uri: str) -> None:
        _need("mlflow", self.name, self.extra)
        if uri.startswith("sqlite:"):
            _need("sqlalchemy", self.name, self.extra)
        super().__init__(uri)
        from mlflow.tracking import MlflowClient  # the mlflow extra: imported only when it is used

        self.artifacts = _local_artifacts(uri)
        try:  # open (and create) the store now, not mid-sweep
            self.client = MlflowClient(tracking_uri=uri)
            self.client.search_experiments(max_results=1)
        except Exception as e:  # the store's own error types: a bad URI, an unreachable server
            raise ValueError(f"cannot open the MLflow store {uri!r}: {type(e).__name__}: {e}") from e

    def experiment(self, name: str) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return str(found.experiment_id)
        location = (self.artifacts / slug(name)).as_uri() if self.artifacts else None
        return str(self.client.create_experiment(name, artifact_location=location))

    def logged(self, experiment_id: str, run_json: Mapping[str, Any]) -> bool:
        row = run_json.get("row", {})
        query = f"tags.`resbench.run_id` = '{run_json['run_id']}' and tags.`resbench.created_at` = " \
                f"'{row.get('created_at', '')}'"
        return bool(self.client.search_runs([experiment_id], filter_string=query, max_results=1))

    def log(self, run_json: Mapping[str, Any], figure: Any = None) -> None:
        from mlflow.entities import Metric, Param  # the mlflow extra: imported only when it is used

        row = run_json.get("row", {})
        exp = self.experiment(_group(run_json))
        if self.logged(exp, run_json):
            return
        tags = {f"resbench.{k}": str(row.get(k, run_json.get(k)) or "") for k in TAGS}
        tags["mlflow.note.content"] = _note(row)
        run = self.client.create_run(exp, run_name=str(run_json["run_id"]), tags=tags)
        rid = run.info.run_id
        metrics = []
        for split, prefix in (("train", "train/"), ("eval", "eval/")):
            for point in run_json.get("curves", {}).get(split, []):
                metrics += [Metric(prefix + k, v, 0, point["step"]) for k, v in _numbers(point).items()]
        last = max([m.step for m in metrics], default=0)
        metrics += [Metric(k, v, 0, last) for k, v in _numbers(row).items() if k in FINAL_METRICS]
        ps = [Param(k, v[:6000]) for k, v in params(run_json).items()]
        for i in range(0, len(ps), 100):  # the limits of one log_batch call: 100 params, 1000 metrics
            self.client.log_batch(rid, params=ps[i:i + 100])
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(rid, metrics=metrics[i:i + 1000])
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "run.json"
            path.write_text(json.dumps(run_json, indent=1, default=str), encoding="utf-8")
            self.client.log_artifact(rid, str(path))
        if figure is not None:
            self.client.log_figure(rid, figure, "curves.png")
        self.client.set_terminated(rid, "FINISHED" if row.get("status") == "ok" else "FAILED")


def _note(row: Mapping[str, Any]) -> str:
    return (f"resbench run {row.get('run_id')}: {row.get('variant')} depth {row.get('depth')} on {row.get('task')}, "
            f"seed {row.get('seed')}, status {row.get('status')}")


def _local_artifacts(uri: str) -> Path | None:
    """Beside a local SQLite store, artifacts go to ``mlartifacts/`` next to the database (MLflow's default is
    the current directory); other stores keep their own default."""
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///"):]).parent / "mlartifacts"
    return None


TRACKERS: dict[str, type[Tracker]] = {"tensorboard": TensorBoardTracker, "mlflow": MLflowTracker}


def default_uri(name: str, results_dir: str | Path) -> str:
    root = Path(results_dir).resolve()
    if name == "tensorboard":
        return str(root / "tensorboard")
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{root / 'mlflow.db'}"


def make_trackers(names: Sequence[str] | str | None, uris: Sequence[str] | str | None = None,
                  results_dir: str | Path = "results") -> list[Tracker]:
    """Open the named trackers (ValueError: an unknown name, a missing package, an unusable store). ``uris``:
    one plain URI when one tracker is named, else ``NAME=URI`` per tracker; unnamed ones get their default."""
    names = [names] if isinstance(names, str) else list(names or [])
    uris = [uris] if isinstance(uris, str) else list(uris or [])
    for n in names:
        if n not in TRACKERS:
            raise ValueError(f"unknown tracker {n!r}; choose from: {', '.join(TRACKERS)}")
    if len(set(names)) != len(names):
        raise ValueError(f"tracker named twice: {', '.join(names)}")
    given: dict[str, str] = {}
    for u in uris:
        name, sep, rest = u.partition("=")
        if sep and name in TRACKERS:
            given[name] = rest
        elif len(names) == 1:
            given[names[0]] = u
        else:
            raise ValueError(f"--tracker-uri {u!r}: with {len(names) or 'no'} trackers, write NAME=URI "
                             f"(e.g. tensorboard=runs/tb)")
    stray = set(given) - set(names)
    if stray:
        raise ValueError(f"--tracker-uri for {', '.join(sorted(stray))}, which no --tracker names")
    return [TRACKERS[n](given.get(n) or default_uri(n, results_dir)) for n in names]


def log_all(trackers: Sequence[Tracker], run_json: Mapping[str, Any], retry: str = "") -> int:
    """Log one recorded run to every tracker; a failure is a warning (the run is on disk). Returns failures."""
    if not trackers:
        return 0
    try:
        figure = curve_figure(run_json)  # drawn once for every tracker
    except Exception as e:  # a figure that cannot be drawn must not cost the run its logging (nor stop a sweep)
        figure = None
        print(f"warning: no curve figure for {run_json.get('run_id')}: {type(e).__name__}: {e}", file=sys.stderr)
    failed = 0
    for t in trackers:
        try:
            t.log(run_json, figure)
        except Exception as e:  # a tracker's own failure must not stop a sweep whose row is already written
            failed += 1
            hint = f"; retry with: {retry} --tracker {t.name}" if retry else ""
            print(f"warning: the {t.name} tracker could not log {run_json.get('run_id')}: "
                  f"{type(e).__name__}: {e}{hint}", file=sys.stderr)
    if figure is not None:
        plt.close(figure)
    return failed
