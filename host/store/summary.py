"""What a compile learns of the bits as they pass: sign codes, the largest norm, each dimension's
lowest and highest value (for the 8-bit codes) and the public digest.

`StoreWriter` hands every block here beside the parse (host/store/writer.py): `take` on a thread
of its own, `take_vectors` (the vectors' digest, a third of the work) on the thread that writes
them. This work is numpy and hashing of large buffers, which let go of the GIL, so it runs on the
second core while the first parses the next block of the library file.

The public digest is taken column by column over the public bits in file order (their ids, token
counts, vectors, record lengths and records, each column a SHA-256 of its own, joined at the end):
a few large updates a block instead of four small ones a bit, and the same value however the bits
were split into blocks. A segment packing several library files (host/store/members.py) keeps one
digest per member: each block belongs to one member, and both threads take blocks in order.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from host.store.sign_codes import pack_signs, words_for

COLUMNS = ("ids", "token_counts", "vectors", "record_lengths", "records")


class RunningSummary:
    """Sign codes, largest norm, value range and public digest of the blocks taken, in order."""

    def __init__(self) -> None:
        self.signs: list[np.ndarray] = []
        self.largest_norm = 0.0
        self.low: np.ndarray | None = None  # each dimension's smallest and largest value so far
        self.high: np.ndarray | None = None
        self._public: list[dict[str, Any]] = []  # per member, each column's digest so far

    def begin_member(self) -> int:
        """Start the digest of the next member (before any of its blocks is taken); its number."""
        self._public.append({column: hashlib.sha256() for column in COLUMNS})
        return len(self._public) - 1

    def take(self, vectors: np.ndarray, ids: list[bytes], token_counts: list[int], public: list[int] | None,
             lengths: np.ndarray, records: bytes, member: int = 0) -> None:
        """The next block but the digest of its vectors (`take_vectors`): its vectors (float32, rows x
        dimension), and per bit its 32-byte id, token count and packed record's size (`lengths`,
        int64; `records`: the packed records back to back); `public`: the rows of public bits
        (`public_rows`); `member`: whose public digest they count in."""
        self.signs.append(pack_signs(vectors))
        self.largest_norm = max(self.largest_norm, largest_norm(vectors))
        low, high = vectors.min(axis=0), vectors.max(axis=0)
        self.low = low if self.low is None else np.minimum(self.low, low)
        self.high = high if self.high is None else np.maximum(self.high, high)
        column = self._public[member]
        if public is None:
            column["ids"].update(b"".join(ids))
            column["token_counts"].update(np.asarray(token_counts, "<i8").data)
            column["record_lengths"].update(np.ascontiguousarray(lengths, "<i8").data)
            column["records"].update(records)
        elif public:
            column["ids"].update(b"".join([ids[row] for row in public]))
            column["token_counts"].update(np.asarray([token_counts[row] for row in public], "<i8").data)
            column["record_lengths"].update(np.ascontiguousarray(lengths[public], "<i8").data)
            ends = np.cumsum(lengths).tolist()
            column["records"].update(b"".join([records[ends[row] - int(lengths[row]) : ends[row]] for row in public]))

    def take_vectors(self, vectors: np.ndarray, public: list[int] | None, member: int = 0) -> None:
        """The next block's share of the public digest that is its vectors: a third of the summary's
        work, which StoreWriter runs on a thread of its own, in block order as `take`."""
        if public is None or public:
            self._public[member]["vectors"].update((vectors if public is None else vectors[public]).data)

    def sign_codes(self, dimension: int) -> np.ndarray:
        signs = np.concatenate(self.signs) if self.signs else np.zeros((0, words_for(dimension)), dtype="<u8")
        self.signs = []
        return signs

    def public_digest(self, message: Any, member: int = 0) -> str:
        """sha256(the library's message, or a NUL if it has none + sha256(the columns' digests)) of a member."""
        columns = hashlib.sha256(b"".join(self._public[member][column].digest() for column in COLUMNS))
        digest = hashlib.sha256(message.encode() if isinstance(message, str) else b"\0")
        digest.update(columns.digest())
        return digest.hexdigest()


def largest_norm(vectors: np.ndarray) -> float:
    """The largest row norm, exact (float64) for the rows that could be it, float32 for the others."""
    if not len(vectors):
        return 0.0
    squares = np.vecdot(vectors, vectors)
    # float32 sums of squares are within a relative 1e-6 of exact at any dimension stored here.
    near = np.flatnonzero(squares >= squares.max() * (1 - 1e-4))
    rows64 = vectors[near].astype(np.float64)
    return float(np.sqrt(np.einsum("ij,ij->i", rows64, rows64).max()))


def public_rows(tags: list[str | None]) -> list[int] | None:
    """The rows of public bits (no access tag) among `tags`; None where every bit is public."""
    if tags.count(None) == len(tags):
        return None
    return [row for row, tag in enumerate(tags) if not tag]
