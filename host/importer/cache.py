"""What an import already computed, kept next to the output so that a re-run redoes only what changed.

A SQLite file (`<out>.embeddings-cache.sqlite` by default) with two tables:
- `vectors`: (model, SHA-256 of a chunk's text) -> its float32 vector. `model` is the embedder's
  vector space (`embedding.vector_space`: the model id, `#int8` added for the local model's int8).
  Each call's vectors are stored as soon as they are embedded, so an interrupted run loses nothing
  it paid for. A vector of the wrong dimension (the model id now served by another model) counts
  as absent.
- `files`: a key naming everything a file's chunks depend on (its bytes, its path and kind, the
  base URL, the budget, the model, and the importer's own code and parser versions: see
  `pipeline.file_key`) -> those chunks, so an unchanged file is neither parsed nor counted again.
After a successful run, entries the library no longer uses are dropped, so the cache stays the size
of the library. A cache that cannot be read is started afresh: it only ever saves work, never
decides what is published.

The cache is never a library (`.sqlite`, not `.json`), so the host never loads or serves it.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

SCHEMA = """
CREATE TABLE IF NOT EXISTS vectors (
    model TEXT NOT NULL,
    text_sha256 BLOB NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model, text_sha256)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS files (
    key BLOB PRIMARY KEY,
    chunks TEXT NOT NULL
) WITHOUT ROWID;
"""
_LOOKUP_BATCH = 500  # keys per SELECT: well under SQLite's limit on bound parameters


def text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


class ImportCache:
    """Vectors of one model by text hash, and files' chunks by file key. `path=None` remembers nothing."""

    def __init__(self, path: Path | None, model: str, dimension: int, say: Callable[[str], None] = print) -> None:
        self.model = model
        self.dimension = dimension
        self._connection: sqlite3.Connection | None = None
        if path is not None:
            self._connection = self._open(path, say)

    @staticmethod
    def _open(path: Path, say: Callable[[str], None]) -> sqlite3.Connection:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return _connect(path)
        except sqlite3.DatabaseError as problem:
            say(f"warning: embedding cache {path} is unreadable ({problem}); starting a new one")
            path.unlink(missing_ok=True)
            return _connect(path)

    def get_many(self, keys: Iterable[bytes]) -> dict[bytes, np.ndarray]:
        found: dict[bytes, np.ndarray] = {}
        if self._connection is None:
            return found
        wanted = list(keys)
        for start in range(0, len(wanted), _LOOKUP_BATCH):
            batch = wanted[start:start + _LOOKUP_BATCH]
            marks = ",".join("?" * len(batch))
            rows = self._connection.execute(
                f"SELECT text_sha256, vector FROM vectors WHERE model = ? AND text_sha256 IN ({marks})",
                [self.model, *batch],
            )
            for key, blob in rows:
                if len(blob) == 4 * self.dimension:
                    found[bytes(key)] = np.frombuffer(blob, dtype="<f4")
        return found

    def put_many(self, items: Iterable[tuple[bytes, np.ndarray]]) -> None:
        if self._connection is None:
            return
        with self._connection:  # one transaction per batch
            self._connection.executemany(
                "INSERT OR REPLACE INTO vectors (model, text_sha256, vector) VALUES (?, ?, ?)",
                [(self.model, key, np.asarray(vector, dtype="<f4").tobytes()) for key, vector in items],
            )

    def file_keys(self) -> set[bytes]:
        """The keys of every file whose chunks are stored."""
        if self._connection is None:
            return set()
        return {bytes(key) for (key,) in self._connection.execute("SELECT key FROM files")}

    def get_file(self, key: bytes) -> str | None:
        """The chunks stored for a file key (as `put_file` was given them), or None."""
        if self._connection is None:
            return None
        row = self._connection.execute("SELECT chunks FROM files WHERE key = ?", (key,)).fetchone()
        return str(row[0]) if row else None

    def put_file(self, key: bytes, chunks: str) -> None:
        """Stored at the next `commit` (one transaction for all the files of a run, not one each)."""
        if self._connection is not None:
            self._connection.execute("INSERT OR REPLACE INTO files (key, chunks) VALUES (?, ?)", (key, chunks))

    def commit(self) -> None:
        if self._connection is not None:
            self._connection.commit()

    def keep_only(self, text_keys: Iterable[bytes], file_keys: Iterable[bytes]) -> None:
        """Drop this model's vectors whose text key is not in `text_keys`, and files not in `file_keys`."""
        if self._connection is None:
            return
        with self._connection:
            self._connection.execute("CREATE TEMP TABLE IF NOT EXISTS used (key BLOB PRIMARY KEY)")
            self._connection.execute("DELETE FROM used")
            self._connection.executemany("INSERT OR IGNORE INTO used VALUES (?)", ((key,) for key in text_keys))
            self._connection.execute(
                "DELETE FROM vectors WHERE model = ? AND text_sha256 NOT IN (SELECT key FROM used)", (self.model,)
            )
            self._connection.execute("DELETE FROM used")
            self._connection.executemany("INSERT OR IGNORE INTO used VALUES (?)", ((key,) for key in file_keys))
            self._connection.execute("DELETE FROM files WHERE key NOT IN (SELECT key FROM used)")

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _connect(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path)
    try:
        connection.executescript(SCHEMA)
        connection.execute("SELECT count(*) FROM vectors").fetchone()  # reads the pages: finds a damaged file now
        connection.execute("SELECT count(*) FROM files").fetchone()
    except sqlite3.DatabaseError:
        connection.close()
        raise
    return connection
