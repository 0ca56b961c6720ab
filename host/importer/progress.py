"""The progress bar on stderr: a website's pages crawled (no total: a crawl finds its pages as it goes),
files read (and scanned pages read by OCR, and chunks embedded meanwhile), then chunks embedded with
chunks/s (tqdm).

Shown only on a terminal and without --quiet, so logs and pipes get the summary lines alone.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from host.importer.errors import require


class BarProgress:
    def __init__(self, stream: TextIO = sys.stderr, refresh_seconds: float = 0.1) -> None:
        self._tqdm = require("tqdm", "the progress bar").tqdm
        self._stream = stream
        self._refresh_seconds = refresh_seconds
        self._bar: Any = None
        self._files = 0
        self._embedding = False
        self._embedded = 0  # chunks embedded while files are still read
        self._scanned = 0  # scanned pages read by OCR

    def _replace(self, **options: Any) -> None:
        self.close()
        self._bar = self._tqdm(file=self._stream, leave=False, dynamic_ncols=True, mininterval=self._refresh_seconds,
                               **options)

    def crawling(self, site: str) -> None:
        self._replace(total=None, unit=" pages", desc=f"crawling {site}")

    def page_crawled(self) -> None:
        self._bar.update(1)

    def reading(self, files: int) -> None:
        self._files = files
        self._replace(total=files, unit=" files", desc="reading")

    def file_read(self) -> None:
        self._bar.update(1)

    def page_scanned(self) -> None:
        self._scanned += 1
        self._reading_postfix()

    def embedding(self, chunks: int, done: int = 0) -> None:
        self._embedding = True
        self._replace(total=chunks, initial=done, unit=" chunks", desc=f"embedding ({self._files} files)",
                      smoothing=0.1)

    def chunks_embedded(self, count: int) -> None:
        if self._embedding:
            self._bar.update(count)
        else:
            self._embedded += count
            self._reading_postfix()

    def _reading_postfix(self) -> None:
        said = [f"{self._scanned} scanned pages read"] if self._scanned else []
        said += [f"{self._embedded} chunks embedded"] if self._embedded else []
        self._bar.set_postfix_str(", ".join(said), refresh=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def wants_bar(quiet: bool, stream: TextIO = sys.stderr) -> bool:
    return not quiet and stream.isatty()
