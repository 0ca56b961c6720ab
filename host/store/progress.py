"""How far a compile has got, on stderr: a bar on a terminal, a line every few seconds in a log.

Nothing is shown for a compile that ends within `QUIET_SECONDS` (most libraries), so starting a
host with small libraries prints what it always printed. Needs nothing beyond the standard library.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

QUIET_SECONDS = 2.0  # a compile shorter than this shows nothing
REDRAW_SECONDS = 0.2  # a terminal's bar is redrawn at most this often
LOG_SECONDS = 10.0  # without a terminal, one line this often
WIDTH = 30


class CompileProgress:
    """The progress of compiling one library file: reading it (by bytes), then each later step."""

    def __init__(self, name: str, total_bytes: int, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.total_bytes = max(total_bytes, 1)
        self.stream = stream or sys.stderr
        self.clock = clock
        self.started = clock()
        self.terminal = self.stream.isatty()
        self.shown = False
        self._last = self.started

    def read(self, done_bytes: int) -> None:
        self.step(f"reading {done_bytes / 1e9:.1f} of {self.total_bytes / 1e9:.1f} GB", done_bytes / self.total_bytes)

    def step(self, what: str, fraction: float) -> None:
        now = self.clock()
        if now - self.started < QUIET_SECONDS or now - self._last < (REDRAW_SECONDS if self.terminal else LOG_SECONDS):
            return
        self._last = now
        self.shown = True
        fraction = min(max(fraction, 0.0), 1.0)
        elapsed = f"{now - self.started:.0f} s"
        if self.terminal:
            filled = round(fraction * WIDTH)
            bar = "#" * filled + "-" * (WIDTH - filled)
            self.stream.write(f"\rcompiling {self.name} [{bar}] {fraction:4.0%} {what} ({elapsed})\033[K")
        else:
            self.stream.write(f"compiling {self.name}: {what}, {fraction:.0%} ({elapsed})\n")
        self.stream.flush()

    def close(self) -> None:
        """End the bar's line (the caller then prints what was compiled)."""
        if self.shown and self.terminal:
            self.stream.write("\r\033[K")
            self.stream.flush()
