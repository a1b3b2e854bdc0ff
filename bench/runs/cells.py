"""The text of ``leaderboard.csv``: each value as its cell, and a cell a spreadsheet would run as a formula written
so that it does not (docs/security.md, "A CSV cell never runs as a formula").

Many people open the leaderboard in a spreadsheet, which runs a cell starting with ``=``, ``+``, ``-`` or ``@`` (or a
tab or carriage return) as a formula. Such a text cell is written with a leading ``'`` (OWASP's rule for CSV
injection) and read back unchanged (:func:`unescape_cell`); number columns hold numbers only and are never changed.

This module imports nothing but the standard library and the leaderboard's schema.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from bench.runs.schema import COLUMNS, INTEGER_COLUMNS, NUMBER_COLUMNS


def cell_text(value: Any) -> str:
    """A value as its leaderboard cell: None and a value that is not finite empty (null in the run JSON), a float by
    its repr."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):  # as the run JSON: null
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


# A cell a spreadsheet would run as a formula starts with one of these (OWASP's list for CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
TEXT_COLUMNS = tuple(c for c in COLUMNS if c not in (*INTEGER_COLUMNS, *NUMBER_COLUMNS))


def _formula_like(cell: str) -> bool:
    return cell.lstrip("'").startswith(_FORMULA_START)


def escape_cell(cell: str) -> str:
    """A text cell as ``leaderboard.csv`` holds it: one that a spreadsheet would run as a formula (it starts with
    ``=``, ``+``, ``-``, ``@``, a tab or a carriage return, after any quotes) gets a leading ``'``, which a
    spreadsheet shows as text; :func:`unescape_cell` gives the cell back unchanged."""
    return "'" + cell if _formula_like(cell) else cell


def unescape_cell(cell: str) -> str:
    """The text :func:`escape_cell` was given."""
    return cell[1:] if cell.startswith("'") and _formula_like(cell) else cell


def file_cells(row: Mapping[str, Any]) -> list[str]:
    """A row's cells as ``leaderboard.csv`` holds them: text a spreadsheet would run escaped (:func:`escape_cell`)."""
    return [escape_cell(cell_text(row.get(c))) if c in TEXT_COLUMNS else cell_text(row.get(c)) for c in COLUMNS]


def plain_cells(row: Mapping[str, Any]) -> list[str]:
    """A row's cells as its values are (what pandas reads in ``ResultsStore.load_leaderboard``)."""
    return [cell_text(row.get(c)) for c in COLUMNS]


def csv_text(rows: Iterable[Mapping[str, Any]], cells: Callable[[Mapping[str, Any]], list[str]] = file_cells) -> str:
    """The leaderboard's text of ``rows`` (their cells as ``ResultsStore.rows`` gives them), each row's ``cells``
    as the file holds them unless told otherwise."""
    return "".join(csv_line(line) for line in (COLUMNS, *(cells(row) for row in rows)))


def csv_line(cells: Iterable[str]) -> str:
    """One line of the leaderboard. Written with CRLF as the line's end, the writer quotes a cell holding a carriage
    return as it quotes one holding a newline (a bare CR ends a line for every reader); the line then ends with LF
    alone, as every line of the file does."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\r\n").writerow(cells)
    return buf.getvalue()[:-2] + "\n"
