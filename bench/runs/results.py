"""The results store: ``leaderboard.csv`` (one row per run) and ``runs/<run_id>.json``.

Writes are atomic (write a temp file in the same directory, fsync, ``os.replace``) and the
leaderboard's read-modify-write happens under a file lock, so concurrent ``bench run`` processes
never lose or tear a row and an interrupted write leaves the previous file intact.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from filelock import FileLock

from bench.runs.cells import TEXT_COLUMNS, cell_text, csv_text, plain_cells, unescape_cell
from bench.runs.names import RULE, file_name, versioned
from bench.runs.schema import (
    COLUMNS,
    INTEGER_COLUMNS,
    LEGACY_SCHEMAS,
    NUMBER_COLUMNS,
    STATUSES,  # noqa: F401  (read from here by the commands)
    UNFINISHED,
    new_row,
)
from bench.runs.validate import row_problem, run_problem, value_problem

_noticed: set[Path] = set()  # leaderboards whose migration this process has already reported


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so readers see the old or the new file, never half of one."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so readers see the old or the new file, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # mkstemp creates 0600; results are meant to be shared
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_writable(folder: Path, what: str, option: str) -> None:
    """ValueError naming ``folder`` when it is a file, cannot be created or may not be written: checked before
    anything is computed or written, so a command refused for it leaves nothing half-done. Creates nothing."""
    try:
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"{what} {folder} is an existing file; pass another {option}")
        existing = folder
        while not existing.exists():  # the folder is created on first write: judge its nearest ancestor
            existing = existing.parent
        if not existing.is_dir():
            raise ValueError(f"cannot create {what} {folder}: {existing} is a file")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise ValueError(f"{what} {existing} is not writable; pass another {option}")
    except OSError as exc:  # e.g. a parent directory that may not be searched
        raise ValueError(f"cannot use {what} {folder}: {exc.strerror or exc}") from None


def _refuse_link(path: Path) -> None:
    if path.is_symlink():
        raise ValueError(f"{path} is a symbolic link: resbench reads a results folder's files only as the regular "
                         "files it wrote (a link could lead anywhere); replace it with the file itself")


def _checked_row(row: Mapping[str, Any]) -> None:
    """ValueError before anything is written when ``row`` has a column outside the schema or a name that is not one
    (:func:`bench.runs.validate.row_problem`)."""
    new_row(**row)
    why = row_problem(row)
    if why is not None:
        raise ValueError(f"a row's {why}" + ("" if why.startswith("config_hash") else f"; {RULE}"))


class ResultsStore:
    """One results directory: ``leaderboard.csv``, ``runs/``, ``plots/``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.leaderboard = self.root / "leaderboard.csv"
        self.runs_dir = self.root / "runs"
        self.plots_dir = self.root / "plots"
        self._lock = FileLock(str(self.root / ".leaderboard.lock"))

    def _read_lock(self) -> FileLock | contextlib.nullcontext[None]:
        """The leaderboard's lock for a read, or none where the folder may not be written (a folder someone shared
        read-only, a download): no one can write there to tear a read, and the lock file cannot be made."""
        if self.root.is_dir() and not os.access(self.root, os.W_OK):
            return contextlib.nullcontext()
        return self._lock

    def run_path(self, run_id: str) -> Path:
        """``runs/<run_id>.json``; a run id that is not a safe file name (:mod:`bench.runs.names`) raises."""
        return self.runs_dir / f"{file_name(run_id, 'run id')}.json"

    def preflight(self) -> None:
        """Refuse bad input before anything runs; creates nothing.

        Raises ValueError naming the path when the results directory is a file, cannot be created or
        is not writable, or when its leaderboard has a foreign header or a damaged line (then the line
        and how to repair it): found after training, the run's work would be thrown away.
        """
        check_writable(self.root, "results directory", "--results-dir")
        try:
            if self.runs_dir.exists() and not self.runs_dir.is_dir():
                raise ValueError(f"{self.runs_dir} is a file, but run JSONs go into a directory of that name; "
                                 "move it away or pass another --results-dir")
        except OSError as exc:  # e.g. a parent directory that may not be searched
            raise ValueError(f"cannot use results directory {self.root}: {exc.strerror or exc}") from None
        self._read_rows()

    def append(self, row: Mapping[str, Any], run_json: Mapping[str, Any]) -> Path:
        """Write the run JSON, then add (or replace, same run_id) its leaderboard row, atomically; return where the
        JSON went.

        A rerun that did not train to its end (:data:`UNFINISHED`: killed, out of memory, raised) never replaces a run
        recorded ``ok``: the recorded row and run JSON stay as they are, the attempt's JSON is kept in
        :meth:`failed_path` and one line on stderr says so. Any other row replaces the row of its run id: an ``ok``
        one, and a run that trained to its end and diverged or learned nothing (that is a result, of the code of
        now). A leaderboard in an earlier schema is rewritten in the current one, its rows migrated.
        """
        _checked_row(row)  # refuses a column outside the schema, or a name that is not one, before anything is written
        self.root.mkdir(parents=True, exist_ok=True)
        run_path = self.run_path(row["run_id"])
        text = json.dumps(run_json, indent=1, default=_json_default, allow_nan=False) + "\n"
        with self._lock:
            damaged: ValueError | None = None
            try:
                rows = self._read_rows()
            except ValueError as exc:  # the run's JSON is written all the same: rebuild() gives it its row once the
                damaged, rows = exc, []  # leaderboard is repaired, so the run's work is not lost
            kept = self.failed_path(row["run_id"], text) \
                if cell_text(row.get("status")) in UNFINISHED and self._recorded_ok(rows, row["run_id"]) else None
            if kept is not None:
                _refuse_link(kept.parent)
            atomic_write_text(kept or run_path, text)
            if damaged is not None:
                raise damaged
            if kept is None:
                rows = [r for r in rows if r["run_id"] != row["run_id"]]
                rows.append({c: cell_text(row.get(c)) for c in COLUMNS})
                atomic_write_text(self.leaderboard, csv_text(rows))
        if kept is None:
            return run_path
        print(f"warning: run {row['run_id']} ended {cell_text(row.get('status')) or 'without a status'} this time; its "
              f"earlier ok run is kept as it was ({self.leaderboard}, {run_path}) and this attempt's run JSON is in "
              f"{kept}", file=sys.stderr)
        return kept

    def failed_path(self, run_id: str, text: str) -> Path:
        """Where a failed attempt at a run recorded ``ok`` is kept: ``runs/failed/<run_id>-<sha12>.json``, by the
        sha256 of its run JSON ``text`` (two attempts never overwrite each other), out of what is read as the runs."""
        return self.runs_dir / "failed" / versioned(file_name(run_id, "run id"), text.encode("utf-8"), ".json")

    def _recorded_ok(self, rows: Sequence[Mapping[str, str]], run_id: str) -> bool:
        """Whether ``run_id`` is recorded ``ok``: by its leaderboard row, else (no row: a write cut short between the
        two files) by the row its run JSON holds; a JSON that cannot be read records nothing."""
        for r in rows:
            if r["run_id"] == run_id:
                return r["status"] == "ok"
        try:
            recorded = json.loads(self.run_path(run_id).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return False
        row = recorded.get("row") if isinstance(recorded, dict) else None
        return isinstance(row, dict) and row.get("status") == "ok"

    def replace(self, updates: Mapping[str, tuple[Mapping[str, Any], Mapping[str, Any]]]) -> None:
        """Replace the rows (and run JSONs) of recorded runs, ``run_id -> (row, run JSON)``, in one locked rewrite;
        an id that has no row raises before anything is written."""
        for row, _ in updates.values():
            _checked_row(row)
        with self._lock:
            rows = self._read_rows()
            missing = sorted(set(updates) - {r["run_id"] for r in rows})
            if missing:
                raise ValueError(f"no recorded run(s) {missing} in {self.leaderboard}")
            for run_id, (_, run_json) in updates.items():
                atomic_write_text(self.run_path(run_id),
                                  json.dumps(run_json, indent=1, default=_json_default, allow_nan=False) + "\n")
            rows = [{c: cell_text(updates[r["run_id"]][0].get(c)) for c in COLUMNS} if r["run_id"] in updates else r
                    for r in rows]
            atomic_write_text(self.leaderboard, csv_text(rows))

    def rebuild(self) -> list[str]:
        """Give each run JSON in ``runs/`` whose run has no leaderboard row its row again, from the row the JSON holds
        (a leaderboard emptied, cut short or replaced by hand, a driver killed between the two writes); returns the
        run ids given back, said on stderr. A run recorded in its JSON is never one to train again. A JSON holding
        no row is left as it is; a damaged one is refused naming it (:func:`read_run_json`)."""
        if not self.runs_dir.is_dir() or self.runs_dir.is_symlink():
            return []
        with self._lock:
            rows = self._read_rows()
            have = {r["run_id"] for r in rows}
            runs = [read_run_json(p) for p in sorted(self.runs_dir.glob("*.json")) if p.stem not in have]
            lost = [{c: cell_text(r["row"].get(c)) for c in COLUMNS} | {"run_id": r["run_id"]}
                    for r in runs if r.get("row")]
            if not lost:
                return []
            for row in lost:
                _checked_row(row)
            atomic_write_text(self.leaderboard, csv_text([*rows, *lost]))
        ids = [r["run_id"] for r in lost]
        print(f"note: {self.leaderboard} had no row for {len(ids)} run(s) recorded in {self.runs_dir}: their rows were "
              f"rebuilt from their run JSONs ({', '.join(ids[:5])}{' ...' if len(ids) > 5 else ''})", file=sys.stderr)
        return ids

    def rows(self) -> list[dict[str, str]]:
        """Every row as the text the leaderboard holds, in the current schema (an earlier one mapped onto it)."""
        with self._read_lock():
            return self._read_rows()

    def write_all(self, rows: Iterable[Mapping[str, Any]], run_jsons: Mapping[str, Mapping[str, Any]]) -> None:
        """Replace the whole leaderboard with ``rows`` after writing ``run_id -> run JSON`` (``bench merge``)."""
        for row in rows:
            _checked_row(row)
        self.root.mkdir(parents=True, exist_ok=True)
        for run_id, run_json in run_jsons.items():
            atomic_write_text(self.run_path(run_id),
                              json.dumps(run_json, indent=1, default=_json_default, allow_nan=False) + "\n")
        with self._lock:
            atomic_write_text(self.leaderboard, csv_text({c: cell_text(r.get(c)) for c in COLUMNS} for r in rows))

    def _read_rows(self) -> list[dict[str, str]]:
        """Every row, in the current schema; a foreign header or a damaged line raises ValueError (how to fix it)."""
        path = self.leaderboard
        _refuse_link(path)
        if not path.exists():
            return []
        if not path.is_file():
            raise ValueError(f"{path} is not a file; move it away or use another --results-dir")
        header: tuple[str, ...] | None = None
        rows: list[dict[str, str]] = []
        lines: dict[str, tuple[int, dict[str, str]]] = {}  # run id -> the line it was first found on, and its row
        start = 1
        try:  # utf-8-sig: a leaderboard a spreadsheet saved starts with a byte-order mark (and ends lines with CRLF)
            with path.open(encoding="utf-8-sig", newline="") as f:
                reader = csv.reader(f, strict=True)
                while True:
                    start = reader.line_num + 1  # the line this record starts on (a quoted field may span lines)
                    fields = next(reader, None)
                    if fields is None:
                        break
                    if not fields:
                        continue  # a blank line holds no run
                    if header is None:
                        header = self._check_header(tuple(fields))
                    elif len(fields) != len(header):
                        raise self._damaged(start, len(header), f"{len(fields)} fields, not {len(header)}")
                    else:
                        row = self._checked(dict(zip(header, fields, strict=True)), start)
                        if self._first(row, start, lines):
                            rows.append(row)
        except csv.Error as exc:
            raise self._damaged(start, len(header or COLUMNS), str(exc)) from None
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}); "
                             "move it away or use another --results-dir") from None
        if header is None or header == COLUMNS:
            return rows
        note, migrate = LEGACY_SCHEMAS[header]
        if path.resolve() not in _noticed:
            _noticed.add(path.resolve())
            print(f"note: {path} has an earlier leaderboard schema, read as the current one ({note}); "
                  "the next run written there rewrites it in the current schema", file=sys.stderr)
        return [migrate(r) for r in rows]

    def _check_header(self, header: tuple[str, ...]) -> tuple[str, ...]:
        if header != COLUMNS and header not in LEGACY_SCHEMAS:
            raise ValueError(
                f"{self.leaderboard} has columns {list(header)}, not resbench's schema; "
                "move it away or use another --results-dir"
            )
        return header

    def _checked(self, row: dict[str, str], line: int) -> dict[str, str]:
        """``row`` with its text cells unescaped (:func:`bench.runs.cells.escape_cell`) when its names are names
        (:func:`bench.runs.validate.row_problem`: the run id names ``runs/<run_id>.json``) and its number columns hold
        numbers; else the damaged-line error naming the column and the cell."""
        row = {c: unescape_cell(v) if c in TEXT_COLUMNS else v for c, v in row.items()}
        why = row_problem(row)
        if why is not None:
            use = "it names the file of the run's JSON" if why.startswith("run_id") else \
                "runs are pooled by their configuration's hash" if why.startswith("config_hash") else \
                "a row's names become file names and commands"
            raise self._damaged(line, None, f"{why}, but {use}")
        for column, kind in (*((c, int) for c in INTEGER_COLUMNS), *((c, float) for c in NUMBER_COLUMNS)):
            cell = row.get(column, "")
            if cell:
                try:
                    kind(cell)
                except ValueError:
                    what = "an integer" if kind is int else "a number"
                    raise self._damaged(line, None, f"column {column} holds {cell!r}, not {what}") from None
        return row

    def _first(self, row: dict[str, str], line: int, lines: dict[str, tuple[int, dict[str, str]]]) -> bool:
        """Whether ``row`` is the first of its run id; a line repeating an earlier one exactly is said and left out
        (one run counts once, never as two seeds), and a different row under the same id is a damaged line naming
        both lines."""
        first = lines.setdefault(row["run_id"], (line, row))
        if first[0] == line:
            return True
        if first[1] != row:
            raise self._damaged(line, None, f"run {row['run_id']} is also on line {first[0]}, with other values; one "
                                            "run has one row")
        print(f"warning: {self.leaderboard} line {line} repeats line {first[0]} (run {row['run_id']}): counted once; "
              f"delete line {line} to silence this", file=sys.stderr)
        return False

    def _counted(self, rows: list[dict[str, str]]) -> list[dict[str, str]]:
        """The rows whose values are as resbench writes them (:func:`bench.runs.validate.value_problem`); each other
        row is named with its field on stderr and left out of what is computed from the leaderboard."""
        kept = []
        for row in rows:
            why = value_problem(row)
            if why is None:
                kept.append(row)
            else:
                print(f"warning: {self.leaderboard}: run {row['run_id']} left out ({why}); fix or delete its row",
                      file=sys.stderr)
        return kept

    def _damaged(self, line: int, n_fields: int | None, reason: str) -> ValueError:
        rule = f" (each row must have {n_fields} comma-separated fields; a quote opened in a field must be closed)" \
            if n_fields is not None else ""
        return ValueError(f"{self.leaderboard} line {line} is damaged ({reason}); fix or delete line {line} of "
                          f"{self.leaderboard}{rule}")

    def load_leaderboard(self) -> pd.DataFrame:
        """The leaderboard as a DataFrame in the fixed column order (empty frame if none yet).

        An earlier schema is mapped onto the current one; a damaged file raises ValueError naming the line.
        """
        if not self.leaderboard.exists():
            return pd.DataFrame(columns=list(COLUMNS))
        with self._read_lock():
            rows = self._counted(self._read_rows())
        # pandas reads text this module wrote from validated rows: its parser errors cannot reach the user.
        # A hash is text even when its hex digits read as a number ("00012e45" is not 12e45).
        return pd.read_csv(io.StringIO(csv_text(rows, plain_cells)), dtype={"config_hash": str})

    def load_board_and_runs(self) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
        """:meth:`load_leaderboard` and :meth:`load_runs` together; a row whose run JSON is missing is named on stderr
        (its curves, probes and configuration are then unknown: the row alone is shown)."""
        board, runs = self.load_leaderboard(), self.load_runs()
        self.warn_missing(board, runs)
        return board, runs

    def warn_missing(self, board: pd.DataFrame, runs: Sequence[Mapping[str, Any]]) -> None:
        """Name on stderr the rows of ``board`` that have no run JSON among ``runs`` (their curves, probes and
        configuration are then unknown: the row alone is shown)."""
        missing = sorted(set(board["run_id"]) - {r["run_id"] for r in runs})
        if missing:
            print(f"warning: {len(missing)} row(s) of {self.leaderboard} have no run JSON in {self.runs_dir} "
                  f"({', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}): restore them from where the "
                  "folder came from", file=sys.stderr)

    def load_run(self, run_id: str) -> dict[str, Any]:
        """The run JSON of ``run_id``: its own file, else the run an old id moved to (:data:`ALIASES`), else the one
        run whose id starts with it."""
        path = self.run_path(run_id)
        moved = read_aliases(self.root).get(run_id) if not path.exists() else None
        if moved is not None:
            path = self.run_path(moved)
        if not path.exists():
            matches = sorted(self.runs_dir.glob(f"{run_id}*.json")) if self.runs_dir.exists() else []
            if len(matches) != 1:
                hint = f"; {len(matches)} runs start with it" if matches else ""
                raise ValueError(f"no run {run_id!r} in {self.runs_dir}{hint}")
            path = matches[0]
        return read_run_json(path)

    def run_files(self) -> list[Path]:
        """The run JSON files, sorted; ValueError where ``runs/`` is a link or a file."""
        _refuse_link(self.runs_dir)
        if not self.runs_dir.exists():
            return []
        if not self.runs_dir.is_dir():
            raise ValueError(f"{self.runs_dir} is a file, but it is where run JSONs are; move it away")
        return sorted(self.runs_dir.glob("*.json"))

    def load_runs(self) -> list[dict[str, Any]]:
        """Every run JSON, sorted by run_id; a damaged one raises ValueError naming its file."""
        return [read_run_json(p) for p in self.run_files()]


# Old run id -> the id of the run it is now (bench.runs.identity: runs renamed to their configuration's id).
ALIASES = "aliases.json"


def read_aliases(root: Path) -> dict[str, str]:
    """The run ids of ``root`` that moved (old id -> id; {} where none did)."""
    path = root / ALIASES
    if not path.is_file():
        return {}
    try:
        aliases = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} cannot be read ({exc}); restore it from where it came from") from None
    return {str(k): str(v) for k, v in aliases.items()} if isinstance(aliases, dict) else {}


def read_run_json(path: Path) -> dict[str, Any]:
    """One run JSON, checked whole (:func:`bench.runs.validate.run_problem`); ValueError naming the file and the field
    when it is not readable JSON of a run (a truncated write by another tool, a file edited by hand, a link), with
    what to do."""
    _refuse_link(path)
    try:
        run = json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constant)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"run JSON {path} cannot be read ({exc}); restore it, or delete it and its leaderboard row "
                         "and rerun that run") from None
    if not isinstance(run, dict) or "run_id" not in run:
        raise ValueError(f"{path} is not a run JSON of resbench (no run_id); move it out of {path.parent}")
    why = run_problem(run, path.stem if path.suffix == ".json" else None)
    if why is not None:
        raise ValueError(f"run JSON {path} is damaged: {why}; restore it, or delete it and its leaderboard row and "
                         "rerun that run")
    return run


def _no_constant(name: str) -> Any:
    """JSON has no NaN or Infinity (resbench writes null): a file holding one was not written by resbench."""
    raise json.JSONDecodeError(f"{name} is not JSON (resbench writes null for a value that is not finite)", name, 0)


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot store {type(obj).__name__} in a run JSON")
