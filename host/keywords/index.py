"""A library's keyword postings, opened: term lookups, per-tag counts, and one term's postings.

The arrays are host/keywords/postings.py's, memory-mapped from the compiled folder (or built in
memory); nothing is read until a query asks for a term.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

import numpy as np

from host.constraints.sorted_strings import SortedStrings
from host.keywords.postings import ARRAYS, BLOCK, PREFIX, library_average

REMEMBERED_TERMS = 1 << 16  # term lookups a library keeps


class TermPostings(NamedTuple):
    """One term's postings in one library and the bounds of their blocks (what top.py reads)."""

    rows: np.ndarray  # int32, ascending
    frequencies: np.ndarray  # uint16
    block_last: np.ndarray  # int32
    block_bound: np.ndarray  # float32


@dataclass(frozen=True)
class KeywordIndex:
    """One library's postings (see host/keywords/postings.py)."""

    language: str
    rows: int
    terms: np.ndarray  # uint8, the sorted terms' UTF-8 bytes back to back
    term_bytes: np.ndarray  # (terms + 1,) int64
    term_offsets: np.ndarray  # (terms + 1,) int64
    posting_rows: np.ndarray
    frequencies: np.ndarray
    lengths: np.ndarray  # (rows,) int32, file order
    stored_rows: np.ndarray | None  # (rows,) int32: each file row's stored row; None: the same
    public_rows_of_term: np.ndarray  # (terms,) int32
    tag_term_offsets: np.ndarray  # (terms + 1,) int64: each term's counts of the other tags, sparse
    tag_term_tags: np.ndarray  # uint16
    tag_term_rows: np.ndarray  # int32
    tag_rows: np.ndarray  # (tags,) int64
    tag_lengths: np.ndarray  # (tags,) int64
    block_offsets: np.ndarray
    block_last: np.ndarray
    block_bound: np.ndarray
    _found: dict[str, int | None] = field(default_factory=dict, repr=False, compare=False)

    @cached_property
    def average(self) -> float:
        """The average row length the block bounds were taken at (every tag's rows)."""
        return library_average(self.tag_rows, self.tag_lengths)

    @property
    def term_count(self) -> int:
        return len(self.term_bytes) - 1

    @property
    def vocabulary(self) -> SortedStrings:
        return SortedStrings(self.terms, self.term_bytes)

    def find(self, term: str) -> int | None:
        """The number of `term` in this library, or None when no row holds it: a binary search (~25 µs
        in a million terms), remembered for the next query that says it."""
        known = self._found.get(term, self)
        if known is not self:
            return known  # type: ignore[return-value]
        found = self.vocabulary.find(term.encode("utf-8", "surrogatepass"))
        if len(self._found) >= REMEMBERED_TERMS:
            self._found.clear()  # a plain dict, emptied when full: threads may race here, to no harm
        self._found[term] = found
        return found

    def postings(self, term: int) -> TermPostings:
        start, stop = int(self.term_offsets[term]), int(self.term_offsets[term + 1])
        first, last = int(self.block_offsets[term]), int(self.block_offsets[term + 1])
        return TermPostings(self.posting_rows[start:stop], self.frequencies[start:stop], self.block_last[first:last],
                            self.block_bound[first:last])

    @property
    def tag_count(self) -> int:
        return len(self.tag_rows)

    def rows_holding(self, term: int, tags: np.ndarray | None) -> int:
        """Rows holding `term` among those of `tags` (ascending tag ids of this library; None: every tag)."""
        start, stop = int(self.tag_term_offsets[term]), int(self.tag_term_offsets[term + 1])
        counts = self.tag_term_rows[start:stop]
        if tags is None:
            return int(self.public_rows_of_term[term]) + int(counts.sum())
        public = int(self.public_rows_of_term[term]) if len(tags) and tags[0] == 0 else 0
        if start == stop:
            return public
        return public + int(counts[np.isin(self.tag_term_tags[start:stop], tags)].sum())


def open_keyword_index(load: Callable[[str], np.ndarray], rows: int, language: str) -> KeywordIndex:
    """The index over arrays fetched by their stored names; ValueError when they disagree."""
    arrays = {name: load(PREFIX + name) for name in ARRAYS}
    index = KeywordIndex(language=language, rows=rows, terms=arrays["terms"], term_bytes=arrays["term_bytes"],
                         term_offsets=arrays["term_offsets"], posting_rows=arrays["rows"],
                         frequencies=arrays["frequencies"], lengths=arrays["lengths"],
                         stored_rows=arrays["stored_rows"] if len(arrays["stored_rows"]) else None,
                         public_rows_of_term=arrays["public_rows_of_term"],
                         tag_term_offsets=arrays["tag_term_offsets"], tag_term_tags=arrays["tag_term_tags"],
                         tag_term_rows=arrays["tag_term_rows"], tag_rows=arrays["tag_rows"],
                         tag_lengths=arrays["tag_lengths"], block_offsets=arrays["block_offsets"],
                         block_last=arrays["block_last"], block_bound=arrays["block_bound"])
    terms = index.term_count
    postings = len(index.posting_rows)
    blocks = (np.diff(index.term_offsets) + BLOCK - 1) // BLOCK if terms >= 0 else np.zeros(0, np.int64)
    if (
        terms < 0
        or int(index.term_bytes[-1]) != len(index.terms)
        or index.term_offsets.shape != (terms + 1,)
        or int(index.term_offsets[0]) != 0
        or int(index.term_offsets[-1]) != postings
        or index.frequencies.shape != (postings,)
        or index.lengths.shape != (rows,)
        or (index.stored_rows is not None and index.stored_rows.shape != (rows,))
        or index.public_rows_of_term.shape != (terms,)
        or index.tag_term_offsets.shape != (terms + 1,)
        or int(index.tag_term_offsets[-1]) != len(index.tag_term_tags)
        or index.tag_term_rows.shape != index.tag_term_tags.shape
        or index.block_offsets.shape != (terms + 1,)
        or not np.array_equal(np.diff(index.block_offsets), blocks)
        or not len(index.block_last) == len(index.block_bound) == int(index.block_offsets[-1])
        or index.tag_lengths.shape != index.tag_rows.shape
        or index.posting_rows.dtype != np.dtype("<i4")
        or index.frequencies.dtype != np.dtype("<u2")
    ):
        raise ValueError("keyword postings are inconsistent")
    return index
