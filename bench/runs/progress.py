"""Progress of a long command: a tqdm bar on a terminal; where no one watches a terminal (a log file, CI, a job
scheduler's output) a plain line every ``every_s`` seconds and one at the end; nothing when disabled (``--quiet``).

:class:`LiveLine` is a sweep's status line: on a terminal it stays at the bottom, redrawn in place, with the
lines of finished runs printed above it; elsewhere it is silent (the per-run lines say it all).
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from tqdm import tqdm


class Progress:
    """Position ``n`` of ``total`` ``unit``s, reported through :meth:`update` (absolute, with extra fields shown
    after it, e.g. ``loss=2.31``). ``mode`` is ``bar``, ``lines`` or ``off``."""

    def __init__(self, total: int | None, desc: str, enabled: bool = True, unit: str = "step",
                 every_s: float = 30.0, stream: TextIO | None = None, scale_bytes: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total, self.desc, self.unit, self.every_s, self.scale = total, desc, unit, every_s, scale_bytes
        self.mode = "off" if not enabled else "bar" if _isatty(self.stream) else "lines"
        self.n = 0
        self.info: dict[str, Any] = {}
        self.t0 = self.last = time.perf_counter()
        self.printed_at = -1
        self.bar = tqdm(total=total, desc=desc, unit=unit, unit_scale=scale_bytes, leave=False, file=self.stream,
                        disable=self.mode != "bar")

    def update(self, n: int, **info: Any) -> None:
        self.bar.update(n - self.n)
        self.n = n
        if info:
            self.info = info
            self.bar.set_postfix(info, refresh=False)
        now = time.perf_counter()
        if self.mode == "lines" and (now - self.last >= self.every_s or n == self.total):
            self._line(now)

    def close(self) -> None:
        if self.mode == "lines" and self.printed_at != self.n:
            self._line(time.perf_counter())
        self.bar.close()

    def _line(self, now: float) -> None:
        self.last, self.printed_at = now, self.n
        count = self._amount(self.n) + (f"/{self._amount(self.total)}" if self.total else "")
        pct = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        extra = "".join(f", {k} {v}" for k, v in self.info.items())
        unit = self.unit if self.scale else f" {self.unit}"
        print(f"{self.desc}: {count}{unit}{pct}{extra}, {now - self.t0:.0f} s", file=self.stream, flush=True)

    def _amount(self, n: int | None) -> str:
        return tqdm.format_sizeof(n or 0) if self.scale else str(n)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LiveLine:
    """One line redrawn in place at the bottom of a terminal (carriage return + erase-line), with :meth:`print`
    putting ordinary lines above it. Off (``show`` does nothing, ``print`` prints) when ``stream`` is not a
    terminal or ``enabled`` is false."""

    ERASE = "\r\x1b[K"

    def __init__(self, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.on = enabled and _isatty(self.stream)
        self.text = ""

    def show(self, text: str) -> None:
        """Replace the status line with ``text`` (no newline)."""
        self.text = text
        if self.on:
            self.stream.write(self.ERASE + text)
            self.stream.flush()

    def print(self, line: str) -> None:
        """``line`` above the status line, which is redrawn under it."""
        if self.on and self.text:
            self.stream.write(self.ERASE + line + "\n" + self.text)
            self.stream.flush()
        else:
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        """Erase the status line (the summary that follows replaces it)."""
        if self.on and self.text:
            self.stream.write(self.ERASE)
            self.stream.flush()
        self.text = ""


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or file-like stream without a terminal
        return False
