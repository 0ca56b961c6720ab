"""The word index of one field: where every word occurs, for the query language and term scores.

Built at compile time for every field of `INDEXED_FIELDS` (text, title, url, description,
image_url), for the query language (`label:term`, phrases, prefixes) and for term scores. Its
arrays (stored in the library's text index, host/constraints/text_index.py):
    `<field>.words`, `<field>.word_offsets`   the sorted vocabulary (UTF-8, concatenated)
    `<field>.term_offsets`                     where each word's positions start (CSR)
    `<field>.positions`                        every occurrence as `row << shift | word number`,
                                               sorted within each word
    `<field>.layout`                           [shift]
A word's rows are `positions >> shift`; a phrase is words at consecutive positions; a prefix's
words are one contiguous range of the sorted vocabulary, so its positions are one slice.
Positions are int32 whenever `rows << shift` fits, which it does for any ordinary library (a
100k-bit library of texts under 512 words uses 26 bits).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import host.constraints.numbering as numbering
from host.constraints.numbering import Numbering
from host.constraints.sorted_strings import SortedStrings
from host.constraints.words import ROW_BREAK, fold, words

TOKENIZE_CHUNK = 4096  # rows tokenized at a time: their word strings are freed once numbered
FINISH_WORDS = 1 << 20  # words whose positions are keyed at a time when finishing a word index
NARROW_BLOCK = 1 << 16  # positions narrowed to int32 at a time
WORD_ARRAYS = ("words", "word_offsets", "term_offsets", "positions", "layout")


@dataclass(frozen=True)
class WordIndex:
    """Where every word of one field occurs (see the module docstring)."""

    vocabulary: SortedStrings
    term_offsets: np.ndarray  # (words + 1,) int64
    positions: np.ndarray  # int32 or int64 keys `row << shift | word number`
    shift: int
    rows: int

    @property
    def low_mask(self) -> int:
        return (1 << self.shift) - 1

    def term_range(self, word: str, *, prefix: bool = False) -> tuple[int, int]:
        """The vocabulary range of `word` (empty when absent), or of every word it begins."""
        key = word.encode("utf-8", "surrogatepass")
        if prefix:
            return self.vocabulary.prefix_range(key)
        found = self.vocabulary.find(key)
        return (0, 0) if found is None else (found, found + 1)

    def positions_of(self, lo: int, hi: int) -> np.ndarray:
        """Positions of the words lo..hi-1 of the vocabulary: one slice, sorted only when hi = lo + 1."""
        return self.positions[int(self.term_offsets[lo]) : int(self.term_offsets[hi])]

    def occurrences(self, lo: int, hi: int) -> int:
        return int(self.term_offsets[hi] - self.term_offsets[lo])


_WORD_OR_BREAK = re.compile(rf"\w+|{ROW_BREAK}")


class WordIndexBuilder:
    """The word index of one field, fed the rows' texts chunk by chunk (see the module docstring).

    Memory: 4 bytes per word while feeding, 8 at `finish` (int32 term ids and positions, grouped
    by word by the compiled counting sort; without it, one sort of 8-byte keys in place).
    """

    def __init__(self) -> None:
        self.numbering = Numbering(ROW_BREAK)  # number 0 marks the end of a row, never a word
        self.lengths: list[np.ndarray] = []
        self.numbers: list[np.ndarray] = []
        self._prepared: tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]] | None = None

    def add(self, texts: Sequence[str]) -> None:
        """The next rows' texts. A chunk is numbered in one call over its joined text: calls per
        text cost more than the splitting itself."""
        if not any(texts):  # a field the rows do not have (an absent info field): rows of no word
            self.lengths.append(np.zeros(len(texts), dtype=np.int64))
            return
        joined = ROW_BREAK.join(texts)
        if joined.count(ROW_BREAK) != len(texts) - 1:  # a text with a NUL in it: text by text
            for text in texts:
                self._add_numbers(self.numbering.number_strings([*words(text), ROW_BREAK]))
        elif joined.isascii():
            self._add_numbers(self.numbering.number_ascii_words(joined + ROW_BREAK))
        else:
            found = _WORD_OR_BREAK.findall(ROW_BREAK.join(map(fold, texts)) + ROW_BREAK)
            self._add_numbers(self.numbering.number_strings(found))

    def _add_numbers(self, numbers: np.ndarray) -> None:
        """`numbers`: of the words of whole rows, each row followed by ROW_BREAK's (0)."""
        breaks = np.flatnonzero(numbers == 0)
        self.lengths.append(np.diff(breaks, prepend=-1) - 1)
        self.numbers.append(numbers[numbers != 0] if len(breaks) < len(numbers) else numbers[:0])

    def prepare(self) -> None:
        """Everything of `finish` that does not depend on where rows will be stored (done once)."""
        if self._prepared is not None:
            return
        lengths = np.concatenate(self.lengths) if self.lengths else np.zeros(0, dtype=np.int64)
        data, offsets, renumber = self.numbering.sorted_keys(skip_first=True)
        self.numbering = Numbering()
        # int32 for the compiled counting sort; else int64: `finish` keys each word in place (8 bytes
        # a word then, not 4 now and 8 more then). Filled from the last chunk of numbers back, each
        # let go of once placed.
        term_ids = np.empty(sum(map(len, self.numbers)), dtype=np.int32 if numbering.compiled else np.int64)
        renumber = renumber.astype(term_ids.dtype)
        stop = len(term_ids)
        while self.numbers:
            chunk = self.numbers.pop()
            np.take(renumber, chunk, out=term_ids[stop - len(chunk) : stop])
            stop -= len(chunk)
        self.lengths = []
        term_offsets = np.zeros(len(offsets), dtype=np.int64)
        np.cumsum(np.bincount(term_ids, minlength=len(offsets) - 1), out=term_offsets[1:])
        self._prepared = (lengths, term_ids, {"words": data, "word_offsets": offsets, "term_offsets": term_offsets})

    def numbered(self) -> tuple[SortedStrings, np.ndarray, np.ndarray]:
        """The field's words as numbered (after `prepare`, before `finish`): the sorted vocabulary,
        each word's number in it (the rows' words back to back, in the order fed) and each row's
        count of words. Keyword postings (host/keywords/postings.py) are built from these."""
        self.prepare()
        assert self._prepared is not None
        lengths, term_ids, arrays = self._prepared
        return SortedStrings(arrays["words"], arrays["word_offsets"]), term_ids, lengths

    def finish(self, order: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The arrays; with `order` (stored row -> row fed), rows are numbered as stored."""
        self.prepare()
        assert self._prepared is not None
        lengths, term_ids, arrays = self._prepared
        self._prepared = None
        rows = len(lengths)
        longest = int(lengths.max()) if rows else 0
        shift = max(longest - 1, 0).bit_length()
        dtype = np.int32 if (rows << shift) <= np.iinfo(np.int32).max else np.int64
        compiled = numbering.compiled
        if compiled is not None and term_ids.dtype == np.int32:  # a counting sort: one pass over the words
            positions = np.empty(len(term_ids), dtype=dtype)
            compiled.positions_by_word(term_ids, lengths, None if order is None else np.ascontiguousarray(order, np.int64),
                                       arrays["term_offsets"], shift, positions)
        else:
            positions = _sorted_positions(term_ids.astype(np.int64, copy=False), lengths, order, shift, dtype)
        return {**arrays, "positions": positions, "layout": np.array([shift], dtype=np.int64)}


def _sorted_positions(term_ids: np.ndarray, lengths: np.ndarray, order: np.ndarray | None, shift: int,
                      dtype: type[np.signedinteger[Any]]) -> np.ndarray:
    """`positions_by_word` in numpy: one sort by (word, position). The keys grow with the position
    already, so a sort of the combined number leaves each word's positions in order. The keys are
    the term ids' own array (int64), filled in place: the sort holds 8 bytes a word, no more."""
    rows = len(lengths)
    key_bits = max(int(rows << shift).bit_length(), 1)
    stored_row = None
    if order is not None:
        stored_row = np.empty(len(order), dtype=np.int64)
        stored_row[order] = np.arange(len(order))
    combined = term_ids
    np.left_shift(combined, key_bits, out=combined)
    ends = np.cumsum(lengths)
    first = 0
    while first < rows:  # the rows of about FINISH_WORDS words at a time (one at least): small temporaries
        start = int(ends[first] - lengths[first])
        last = max(first + 1, int(np.searchsorted(ends, start + FINISH_WORDS, side="right")))
        chunk_lengths = lengths[first:last]
        stop = int(ends[last - 1])
        row_of_word = np.repeat(np.arange(first, last, dtype=np.int64), chunk_lengths)
        if stored_row is not None:
            row_of_word = stored_row[row_of_word]
        in_row = np.arange(stop - start, dtype=np.int64) - np.repeat(np.cumsum(chunk_lengths) - chunk_lengths,
                                                                    chunk_lengths)
        combined[start:stop] |= (row_of_word << shift) | in_row
        first = last
    combined.sort()
    np.bitwise_and(combined, (1 << key_bits) - 1, out=combined)
    return narrowed_in_place(combined) if dtype == np.int32 else combined


def narrowed_in_place(values: np.ndarray) -> np.ndarray:
    """`values` (int64, each within int32) as int32, written over the first half of their own buffer
    (no second array). A block writes below where the blocks after it read; numpy copies the first
    block, whose bytes overlap, through a temporary."""
    narrow: np.ndarray = values.view(np.int32)[: len(values)]
    for start in range(0, len(values), NARROW_BLOCK):
        narrow[start : start + NARROW_BLOCK] = values[start : start + NARROW_BLOCK]
    return narrow


def build_word_index(texts: Sequence[str]) -> dict[str, np.ndarray]:
    """The word index arrays of one field, given each row's text (see the module docstring)."""
    builder = WordIndexBuilder()
    for start in range(0, len(texts), TOKENIZE_CHUNK):
        builder.add(texts[start : start + TOKENIZE_CHUNK])
    return builder.finish()
