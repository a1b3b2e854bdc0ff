"""The results store: ``leaderboard.csv`` (one row per run) and ``runs/<run_id>.json``.

Writes are atomic (write a temp file in the same directory, fsync, ``os.replace``) and the
leaderboard's read-modify-write happens under a file lock, so concurrent ``bench run`` processes
never lose or tear a row and an interrupted write leaves the previous file intact.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from filelock import FileLock

# The fixed column order of leaderboard.csv; results/README.md documents each column.
COLUMNS: tuple[str, ...] = (
    "run_id", "variant", "family", "depth", "params", "task", "seed", "epochs", "steps", "batch_size",
    "optimizer", "lr", "schedule", "warmup_steps", "device", "device_name", "precision",
    "status", "error",
    "final_train_loss", "final_train_acc", "final_val_loss", "final_val_acc", "best_val_acc",
    "target_acc", "steps_to_target", "time_to_target_s",
    "train_samples_per_s", "train_tokens_per_s", "step_time_ms", "peak_mem_mb", "mem_method",
    "flops_per_sample", "achieved_tflops", "mfu", "wall_time_s",
    "study", "torch_version", "git_sha", "created_at",
)  # fmt: skip

STATUSES = ("ok", "diverged", "oom", "error")


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so readers see the old or the new file, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # mkstemp creates 0600; results are meant to be shared
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _csv_text(rows: Iterable[Mapping[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for row in rows:
        w.writerow([_cell(row.get(c)) for c in COLUMNS])
    return buf.getvalue()


class ResultsStore:
    """One results directory: ``leaderboard.csv``, ``runs/``, ``plots/``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.leaderboard = self.root / "leaderboard.csv"
        self.runs_dir = self.root / "runs"
        self.plots_dir = self.root / "plots"
        self._lock = FileLock(str(self.root / ".leaderboard.lock"))

    def append(self, row: Mapping[str, Any], run_json: Mapping[str, Any]) -> Path:
        """Write the run JSON, then add (or replace, same run_id) its leaderboard row, atomically."""
        unknown = set(row) - set(COLUMNS)
        if unknown:
            raise ValueError(f"row has columns outside the leaderboard schema: {sorted(unknown)}")
        self.root.mkdir(parents=True, exist_ok=True)
        run_path = self.runs_dir / f"{row['run_id']}.json"
        atomic_write_text(run_path, json.dumps(run_json, indent=1, default=_json_default, allow_nan=False) + "\n")
        with self._lock:
            rows = [r for r in self._read_rows() if r["run_id"] != row["run_id"]]
            rows.append({c: _cell(row.get(c)) for c in COLUMNS})
            atomic_write_text(self.leaderboard, _csv_text(rows))
        return run_path

    def _read_rows(self) -> list[dict[str, str]]:
        if not self.leaderboard.exists():
            return []
        with self.leaderboard.open(encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            if tuple(reader.fieldnames or ()) != COLUMNS:
                raise ValueError(
                    f"{self.leaderboard} has columns {reader.fieldnames}, not resbench's schema; "
                    "move it away or use another --results-dir"
                )
            return list(reader)

    def load_leaderboard(self) -> pd.DataFrame:
        """The leaderboard as a DataFrame in the fixed column order (empty frame if none yet)."""
        if not self.leaderboard.exists():
            return pd.DataFrame(columns=list(COLUMNS))
        with self._lock:
            self._read_rows()  # validates the header
            return pd.read_csv(self.leaderboard)

    def load_run(self, run_id: str) -> dict[str, Any]:
        path = self.runs_dir / f"{run_id}.json"
        if not path.exists():
            matches = sorted(self.runs_dir.glob(f"{run_id}*.json")) if self.runs_dir.exists() else []
            if len(matches) != 1:
                hint = f"; {len(matches)} runs start with it" if matches else ""
                raise ValueError(f"no run {run_id!r} in {self.runs_dir}{hint}")
            path = matches[0]
        return json.loads(path.read_text(encoding="utf-8"))

    def load_runs(self) -> list[dict[str, Any]]:
        """Every run JSON, sorted by run_id."""
        if not self.runs_dir.exists():
            return []
        return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(self.runs_dir.glob("*.json"))]


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot store {type(obj).__name__} in a run JSON")
