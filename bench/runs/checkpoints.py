"""Checkpoints: a run's final weights, and what rebuilds its model, kept beside its row.

``bench run --save-checkpoint`` (a study: ``save_checkpoint = true`` in its ``[base]``) keeps the trained model of
a run that ended ``ok`` as ``RESULTS/checkpoints/<run_id>.pt``, so what is measured *after* training — a lesion
study (Veit et al. 2016), a loss-landscape slice (Li et al. 2018) — can rebuild it later, in another process.

A checkpoint is one ``torch.save`` of plain data: the format tag, the run id, the run's config hash, the variant,
the keyword arguments its model was built with, and the ``state_dict``. It is read with
``torch.load(weights_only=True)`` — tensors and containers only, never arbitrary pickled objects — and refused
when it does not belong to the run asked for: its run id or config hash must match the run JSON's config (a
checkpoint copied from another results directory, or left by a run of another configuration under the same
name, would otherwise be evaluated as if it were this run's).

The run's process serialises the checkpoint to bytes (:func:`snapshot`) and returns them with its run JSON; the
sweep's driver, the one writer of the results directory, writes them (:func:`save`) before the run's row, so a
row that says a checkpoint exists never points at a file not yet written.
"""

from __future__ import annotations

import io
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import variants
from bench.runs import plugins
from bench.runs.config import RunConfig, config_from_dict
from bench.runs.results import ResultsStore
from bench.runs.tasks import get as get_task
from bench.runs.train import resolve_device, task_options

FORMAT = "resbench-checkpoint/1"
KEY = "_checkpoint"  # where run_config leaves the serialised checkpoint in the run JSON it returns


def checkpoint_path(results_dir: str | Path, run_id: str) -> Path:
    return Path(results_dir) / "checkpoints" / f"{run_id}.pt"


def snapshot(cfg: RunConfig, model: torch.nn.Module, model_kwargs: dict[str, Any]) -> bytes:
    """The checkpoint of ``model`` trained under ``cfg``, serialised (weights on the CPU)."""
    state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    payload = {
        "format": FORMAT, "run_id": cfg.run_id, "config_hash": cfg.config_hash(), "variant": cfg.variant,
        "model_kwargs": dict(model_kwargs), "state_dict": state,
    }  # fmt: skip
    buf = io.BytesIO()
    torch.save(payload, buf)
    return buf.getvalue()


def save(results_dir: str | Path, run_id: str, data: bytes) -> Path:
    """Write a serialised checkpoint atomically (temporary file + rename); return its path."""
    path = checkpoint_path(results_dir, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{run_id}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a results directory is shared like the rest of it
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


@dataclass
class Trained:
    """A run's trained model rebuilt from its checkpoint, with its task (data on ``device``) and run JSON."""

    run: dict[str, Any]
    config: RunConfig
    model: torch.nn.Module
    task: Any
    path: Path


def read(results_dir: str | Path, run_id: str) -> tuple[dict[str, Any], RunConfig, dict[str, Any]]:
    """``(run JSON, config, checkpoint payload)`` of a recorded run; ValueError (bad input) when the run is
    unknown, has no checkpoint, or its checkpoint is not this run's."""
    run = ResultsStore(results_dir).load_run(run_id)  # unknown id: ValueError naming the runs directory
    run_id = str(run["run_id"])
    cfg = config_from_dict(run["config"])
    path = checkpoint_path(results_dir, run_id)
    if not path.is_file():
        raise ValueError(
            f"run {run_id} has no checkpoint ({path} does not exist): rerun it with --save-checkpoint "
            "(`python -m bench run ... --save-checkpoint --results-dir ...`; in a study file, save_checkpoint = true "
            "in [base]); a run keeps one only if it ended ok"
        )
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # any unreadable file is the same bad input
        raise ValueError(f"{path} is not a readable resbench checkpoint: {type(exc).__name__}: {exc}") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(f"{path} is not a resbench checkpoint (format {FORMAT!r})")
    if payload.get("run_id") != run_id or payload.get("config_hash") != cfg.config_hash():
        raise ValueError(
            f"{path} belongs to another configuration: it was written by run {payload.get('run_id')} (config hash "
            f"{payload.get('config_hash')}), but run {run_id}'s config hashes to {cfg.config_hash()}; rerun "
            f"{run_id} with --save-checkpoint to replace it"
        )
    return run, cfg, payload


def load(results_dir: str | Path, run_id: str, device: str = "cpu") -> Trained:
    """Rebuild a recorded run's trained model (eval mode, on ``device``) and its task; see :func:`read`."""
    run, cfg, payload = read(results_dir, run_id)
    dev = resolve_device(device)
    task = get_task(cfg.task, device=dev, seed=cfg.seed, options=task_options(cfg))
    with plugins.blame(cfg.variant):
        model = variants.create(cfg.variant, **payload["model_kwargs"])
    try:
        model.load_state_dict(payload["state_dict"], strict=True)
    except RuntimeError as exc:
        raise ValueError(f"checkpoint of {cfg.run_id} does not fit the model {cfg.variant} builds now "
                         f"(was the variant's code changed?): {exc}") from None
    model.to(dev).eval()
    return Trained(run, cfg, model, task, checkpoint_path(results_dir, cfg.run_id))
