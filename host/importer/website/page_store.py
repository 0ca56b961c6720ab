"""Every answer a crawl got, kept with the import cache: what makes re-runs conditional and crawls resumable.

Two tables in the import cache's SQLite file (`<out>.embeddings-cache.sqlite`; beside its
`vectors` and `files`, which `cache.ImportCache` owns):
- `web_crawls`: one row per crawl (its start URL): the number of its current run, and whether that
  run finished.
- `web_answers`: per crawl and URL, the last answer a run got: status, redirect target, Content-Type,
  ETag, Last-Modified, X-Robots-Tag and, for a page or a sitemap, its body.

A run that finds its crawl unfinished is the same run resumed: an answer that run already got is
taken as it is, without a request. Otherwise it is a new run, and each URL is asked for with the
validators of its last answer (If-None-Match, If-Modified-Since): a 304 is that answer again.
Answers are committed every second or so and whenever the crawl stops (finished, failed or
interrupted), so an interruption loses at most the pages in flight. When a run finishes, answers
no run since has seen (pages gone from the site) are dropped.

Failures (a 5xx after retries, no answer) are never stored: the next run asks again.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

from host.importer.website.fetching import Answer

SCHEMA = """
CREATE TABLE IF NOT EXISTS web_crawls (
    crawl TEXT PRIMARY KEY,
    run INTEGER NOT NULL,
    finished INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS web_answers (
    crawl TEXT NOT NULL,
    url TEXT NOT NULL,
    run INTEGER NOT NULL,
    status INTEGER NOT NULL,
    location TEXT,
    content_type TEXT NOT NULL,
    etag TEXT,
    last_modified TEXT,
    robots_tag TEXT NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (crawl, url)
) WITHOUT ROWID;
"""
COMMIT_SECONDS = 1.0


class PageStore:
    """The answers of one crawl (`crawl`: its start URL) in the SQLite file `path` (None: in memory, for
    an import without a cache); the crawl's threads share it (one connection, one lock)."""

    def __init__(self, path: Path | None, crawl: str, say: Callable[[str], None] = print) -> None:
        self.path = path
        self.crawl = crawl
        self._connection = _open(path, say)
        self._lock = threading.Lock()
        self._closed = False
        self._last_commit = time.monotonic()
        row = self._connection.execute("SELECT run, finished FROM web_crawls WHERE crawl = ?", (crawl,)).fetchone()
        self.resumed = row is not None and not row[1]
        self.run: int = row[0] if self.resumed else (row[0] + 1 if row else 1)
        with self._connection:
            self._connection.execute("INSERT OR REPLACE INTO web_crawls (crawl, run, finished) VALUES (?, ?, 0)",
                                     (crawl, self.run))

    def last(self, url: str) -> tuple[Answer, bool] | None:
        """The last answer kept for `url`, and whether this run got it (a resumed run's); None if none is kept."""
        with self._lock:
            row = self._connection.execute(
                "SELECT run, status, location, content_type, etag, last_modified, robots_tag, body FROM web_answers "
                "WHERE crawl = ? AND url = ?", (self.crawl, url)).fetchone()
        if row is None:
            return None
        run, status, location, content_type, etag, last_modified, robots_tag, body = row
        return Answer(url, status, content_type, bytes(body), location, etag, last_modified, robots_tag), run == self.run

    def keep(self, answer: Answer) -> None:
        """`answer` as this run's for its URL (a 304 is kept as the answer it confirmed)."""
        with self._lock:
            self._connection.execute(
                "INSERT OR REPLACE INTO web_answers (crawl, url, run, status, location, content_type, etag, "
                "last_modified, robots_tag, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (self.crawl, answer.url, self.run, answer.status, answer.location, answer.content_type, answer.etag,
                 answer.last_modified, answer.robots_tag, answer.body))
            if time.monotonic() - self._last_commit >= COMMIT_SECONDS:
                self._commit()

    def commit(self) -> None:
        with self._lock:
            self._commit()

    def _commit(self) -> None:
        self._connection.commit()
        self._last_commit = time.monotonic()

    def body(self, url: str) -> bytes | None:
        with self._lock:
            row = self._connection.execute("SELECT body FROM web_answers WHERE crawl = ? AND url = ?",
                                           (self.crawl, url)).fetchone()
        return bytes(row[0]) if row else None

    def finish(self) -> None:
        """This run is complete: the next one asks again, conditionally; answers it did not see are dropped."""
        with self._lock, self._connection:
            self._connection.execute("DELETE FROM web_answers WHERE crawl = ? AND run <> ?", (self.crawl, self.run))
            self._connection.execute("UPDATE web_crawls SET finished = 1 WHERE crawl = ?", (self.crawl,))

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._connection.commit()
                self._connection.close()
                self._closed = True


def _open(path: Path | None, say: Callable[[str], None]) -> sqlite3.Connection:
    if path is None:
        return _connect(":memory:")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return _connect(path)
    except sqlite3.DatabaseError as problem:
        say(f"warning: import cache {path} is unreadable ({problem}); starting a new one")
        path.unlink(missing_ok=True)
        return _connect(path)


def _connect(path: Path | str) -> sqlite3.Connection:
    connection = sqlite3.connect(path, timeout=30.0, check_same_thread=False)  # used under PageStore's lock
    try:
        connection.executescript(SCHEMA)
        connection.execute("SELECT count(*) FROM web_answers").fetchone()
    except sqlite3.DatabaseError:
        connection.close()
        raise
    return connection
