"""The per-library text index: built once at compile time, memory-mapped like the embeddings.

Two structures per field, both plain numpy arrays written beside the library's other arrays:

- A word index for every field of `INDEXED_FIELDS` (text, title, url, description, image_url),
  for the query language (`label:term`, phrases, prefixes) and for term scores:
      `<field>.words`, `<field>.word_offsets`   the sorted vocabulary (UTF-8, concatenated)
      `<field>.term_offsets`                     where each word's positions start (CSR)
      `<field>.positions`                        every occurrence as `row << shift | word number`,
                                                 sorted within each word
      `<field>.layout`                           [shift]
  A word's rows are `positions >> shift`; a phrase is words at consecutive positions; a prefix's
  words are one contiguous range of the sorted vocabulary, so its positions are one slice.
- A value dictionary for each info field (`INFO_FIELDS`), for RAGFlow's metadata_condition
  (`=`, `<`, `start with`, `contains` ... on whole folded values):
      `<field>.values`, `<field>.value_offsets`  the distinct folded values, sorted
      `<field>.value_ids`                        (rows,) int32 index of each row's value
      `<field>.numbers`                          (distinct,) float64: the value as a number, or NaN

On disk the arrays are packed into one file, `text_index.bin` (each array 64-byte aligned),
described by `text_index.json` (name, dtype, shape, offset): one memory map and two fsyncs per
library instead of forty. Positions are int32 whenever `rows << shift` fits, which it does for
any ordinary library (a 100k-bit library of texts under 512 words uses 26 bits).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import numpy as np

import host.constraints.numbering as numbering
from host.constraints.numbering import Numbering
from host.constraints.words import INDEXED_FIELDS, INFO_FIELDS, field_value, fold, words

PREFIX = "text_index."
BLOB = "text_index.bin"
LAYOUT = "text_index.json"
ALIGNMENT = 64
DTYPES = ("|u1", "<i4", "<i8", "<f8")
TOKENIZE_CHUNK = 4096  # rows tokenized at a time: their word strings are freed once numbered
FINISH_WORDS = 1 << 20  # words whose positions are keyed at a time when finishing a word index
NARROW_BLOCK = 1 << 16  # positions narrowed to int32 at a time
WORD_ARRAYS = ("words", "word_offsets", "term_offsets", "positions", "layout")
VALUE_ARRAYS = ("values", "value_offsets", "value_ids", "numbers")


def array_names() -> list[str]:
    """Every array a text index consists of (without the `.npy`)."""
    names = [f"{PREFIX}{field}.{part}" for field in INDEXED_FIELDS for part in WORD_ARRAYS]
    return names + [f"{PREFIX}{field}.{part}" for field in INFO_FIELDS for part in VALUE_ARRAYS]


# ---- sorted strings ---------------------------------------------------------------------------


class SortedStrings(Sequence[bytes]):
    """Distinct UTF-8 strings in ascending byte order (which is code point order), concatenated.

    Indexing returns bytes; lookups are binary searches (a few dozen small reads), so nothing is
    decoded or copied when a library is opened.
    """

    def __init__(self, data: np.ndarray, offsets: np.ndarray) -> None:
        self.data = data
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, index: int) -> bytes: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[bytes]: ...
    def __getitem__(self, index: int | slice) -> bytes | Sequence[bytes]:
        if isinstance(index, slice):
            return [self[position] for position in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        return self.data[int(self.offsets[index]) : int(self.offsets[index + 1])].tobytes()

    def __iter__(self) -> Iterator[bytes]:
        return (self[position] for position in range(len(self)))

    @functools.cached_property
    def byte_counts(self) -> np.ndarray:
        """How often each byte value occurs (for substring search: anchor on the rarest byte)."""
        return np.bincount(self.data, minlength=256)

    def bound(self, key: bytes, *, right: bool = False) -> int:
        """Where `key` would be inserted: before equal strings, or after them with `right`."""
        return (bisect.bisect_right if right else bisect.bisect_left)(self, key)

    def find(self, key: bytes) -> int | None:
        position = self.bound(key)
        return position if position < len(self) and self[position] == key else None

    def prefix_range(self, prefix: bytes) -> tuple[int, int]:
        """The range [lo, hi) of strings that start with `prefix` (contiguous, since sorted)."""
        if not prefix:
            return 0, len(self)
        # UTF-8 never holds the byte 0xFF, so the last byte can always be incremented.
        return self.bound(prefix), self.bound(prefix[:-1] + bytes([prefix[-1] + 1]))


# ---- word index -------------------------------------------------------------------------------


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


ROW_BREAK = "\0"  # between two rows' texts: a token of its own (it is not a word character)
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


# ---- value dictionary ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ValueIndex:
    """Each row's whole folded value of one info field, dictionary-encoded (sorted)."""

    values: SortedStrings
    value_ids: np.ndarray  # (rows,) int32
    numbers: np.ndarray  # (distinct values,) float64, NaN where the value is not a number


def as_number(value: str) -> float:
    """`float(value)` as RAGFlow compares metadata, or NaN (never a number: NaN itself)."""
    first = value.lstrip()[:1]
    if first and not (first.isdecimal() or first in "+-.iInN"):  # what float() cannot start with: no exception
        return float("nan")
    try:
        number = float(value)
    except ValueError:
        return float("nan")
    return number


class ValueIndexBuilder:
    """The value dictionary of one info field, fed the rows' values chunk by chunk."""

    def __init__(self) -> None:
        self.numbering = Numbering()
        self.numbers: list[np.ndarray] = []
        self._prepared: dict[str, np.ndarray] | None = None

    def add(self, values: Sequence[str]) -> None:
        if values and not any(values):  # a field the rows do not have: one value, ""
            self.numbers.append(np.full(len(values), self.numbering.number_strings([""])[0], dtype=np.int32))
            return
        joined = ROW_BREAK.join(values)
        if joined.isascii() and joined.count(ROW_BREAK) == len(values) - 1 and values:
            folded = joined.lower().split(ROW_BREAK)  # fold() of ASCII text is lower()
        else:
            folded = [fold(value) for value in values]
        self.numbers.append(self.numbering.number_strings(folded))

    def prepare(self) -> None:
        """Everything of `finish` that does not depend on where rows will be stored (done once)."""
        if self._prepared is not None:
            return
        data, offsets, renumber = self.numbering.sorted_keys()
        self.numbering = Numbering()
        numbers = np.concatenate(self.numbers) if self.numbers else np.zeros(0, dtype=np.int32)
        self.numbers = []
        self._prepared = {"values": data, "value_offsets": offsets, "value_ids": renumber.astype(np.int32)[numbers],
                          "numbers": sorted_as_numbers(SortedStrings(data, offsets))}

    def finish(self, order: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The arrays; with `order` (stored row -> row fed), values are listed as stored."""
        self.prepare()
        assert self._prepared is not None
        arrays, self._prepared = self._prepared, None
        if order is not None:
            arrays["value_ids"] = arrays["value_ids"][order]
        return arrays


def sorted_as_numbers(values: SortedStrings) -> np.ndarray:
    """`as_number` of each of `values`: only those whose first character could begin a number are
    tried, and sorted values that begin alike are neighbours, so most are never looked at."""
    numbers = np.full(len(values), np.nan)
    # ASCII up to '9' (spaces, signs, the point, digits), 'i'/'n' (inf, nan; folded values are
    # lower case, but `as_number` decides), and everything beyond ASCII (other digits and spaces).
    for low, high in ((b"", b":"), (b"I", b"J"), (b"N", b"O"), (b"i", b"j"), (b"n", b"o"), ("\x80".encode(), None)):
        first = values.bound(low)
        last = len(values) if high is None else values.bound(high)
        numbers[first:last] = [as_number(values[place].decode("utf-8", "surrogatepass")) for place in range(first, last)]
    return numbers


def build_value_index(values: Sequence[str]) -> dict[str, np.ndarray]:
    builder = ValueIndexBuilder()
    builder.add(values)
    return builder.finish()


# ---- the whole index ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TextIndex:
    """Every field's word index and every info field's value dictionary, for one library."""

    rows: int
    words: Mapping[str, WordIndex]
    values: Mapping[str, ValueIndex]


class TextIndexBuilder:
    """A library's text index, fed its records a chunk at a time in any row order, finished in another."""

    def __init__(self) -> None:
        self.words = {field: WordIndexBuilder() for field in INDEXED_FIELDS}
        self.values = {field: ValueIndexBuilder() for field in INFO_FIELDS}

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        iterator = iter(records)
        while chunk := list(itertools.islice(iterator, TOKENIZE_CHUNK)):
            self.add_columns({field: _field_values(chunk, field) for field in INDEXED_FIELDS})

    def add_columns(self, columns: Mapping[str, Sequence[str]]) -> None:
        """The next rows, as each field's string of every row ("" where a row has none)."""
        for field in INDEXED_FIELDS:
            texts = columns[field]
            for start in range(0, len(texts), TOKENIZE_CHUNK):
                chunk = texts[start : start + TOKENIZE_CHUNK]
                self.words[field].add(chunk)
                if field in self.values:
                    self.values[field].add(chunk)

    def prepare(self) -> None:
        """What `finish` can do before the rows' order is known (vocabularies, value dictionaries)."""
        for word_builder in self.words.values():
            word_builder.prepare()
        for value_builder in self.values.values():
            value_builder.prepare()

    def finish(self, order: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The arrays by file name (without `.npy`); with `order` (stored row -> row fed), for rows as stored."""
        arrays: dict[str, np.ndarray] = {}
        for field in INDEXED_FIELDS:
            for part, array in self.words.pop(field).finish(order).items():
                arrays[f"{PREFIX}{field}.{part}"] = array
            if field in self.values:
                for part, array in self.values.pop(field).finish(order).items():
                    arrays[f"{PREFIX}{field}.{part}"] = array
        return arrays


def _field_values(records: list[dict[str, Any]], field: str) -> list[str]:
    """`field_value(record, field, "")` of every record: a compiled bit's record (a string text,
    an info of strings) is read directly; any other shape goes through `field_value`."""
    try:
        if field == "text":
            texts = [record["text"] for record in records]
        else:
            texts = [record["info"].get(field, "") for record in records]
        if all(type(text) is str for text in texts):
            return texts
    except (KeyError, TypeError, AttributeError):
        pass
    return [field_value(record, field, "") for record in records]


def build_text_index(records: Iterable[dict[str, Any]]) -> dict[str, np.ndarray]:
    """The arrays of a library's text index, by file name (without `.npy`), from its records.

    `records` are the parsed bits' `{"text", "info"}` maps, in row order, read once, a chunk at a
    time. The result is what the store writer saves beside the other arrays and `open_text_index`
    reads back.
    """
    builder = TextIndexBuilder()
    builder.add(records)
    return builder.finish()


def save_text_index(arrays: Mapping[str, np.ndarray], folder: Path) -> None:
    """Write `arrays` (from build_text_index) into `folder` as text_index.bin + text_index.json, synced."""
    layout: dict[str, dict[str, Any]] = {}
    offset = 0
    with (folder / BLOB).open("wb") as handle:
        for name, array in arrays.items():
            array = np.ascontiguousarray(array)
            dtype = array.dtype.newbyteorder("<")
            if dtype.str not in DTYPES:
                raise ValueError(f"{name}: dtype {dtype.str} cannot be stored")
            padding = -offset % ALIGNMENT
            handle.write(b"\0" * padding)
            offset += padding
            layout[name] = {"dtype": dtype.str, "shape": list(array.shape), "offset": offset}
            handle.write(array.astype(dtype, copy=False).tobytes())
            offset += array.nbytes
        handle.flush()
        os.fsync(handle.fileno())
    with (folder / LAYOUT).open("w") as handle:
        json.dump({"bytes": offset, "arrays": layout}, handle)
        handle.flush()
        os.fsync(handle.fileno())


def open_text_index(folder: Path, rows: int) -> TextIndex:
    """Memory-map a compiled folder's text index; raises ValueError (or OSError) when it is unusable."""
    layout = json.loads((folder / LAYOUT).read_text())
    size = (folder / BLOB).stat().st_size
    if size != layout["bytes"] or set(layout["arrays"]) != set(array_names()):
        raise ValueError(f"{folder / BLOB} does not match {LAYOUT}")
    blob = np.memmap(folder / BLOB, dtype=np.uint8, mode="r") if size else np.zeros(0, dtype=np.uint8)

    def load(name: str) -> np.ndarray:
        entry = layout["arrays"][name]
        dtype, shape, offset = np.dtype(entry["dtype"]), tuple(entry["shape"]), int(entry["offset"])
        count = int(np.prod(shape))
        if entry["dtype"] not in DTYPES or offset % ALIGNMENT or offset + count * dtype.itemsize > size:
            raise ValueError(f"{folder / LAYOUT}: bad entry for {name}")
        # np.asarray drops the memmap subclass (whose operators are slower) but keeps the mapping.
        array: np.ndarray = np.asarray(blob[offset : offset + count * dtype.itemsize]).view(dtype).reshape(shape)
        return array

    return assemble_text_index(load, rows)


def text_index_in_memory(records: Sequence[dict[str, Any]]) -> TextIndex:
    """A text index built and used in memory (libraries made without a compiled folder)."""
    arrays = build_text_index(records)
    return assemble_text_index(lambda name: arrays[name], len(records))


def assemble_text_index(load: Callable[[str], np.ndarray], rows: int) -> TextIndex:
    """The index over arrays fetched by full name; raises ValueError when they disagree."""

    def array(name: str) -> np.ndarray:
        return load(PREFIX + name)

    word_indexes = {}
    for field in INDEXED_FIELDS:
        vocabulary = SortedStrings(array(f"{field}.words"), array(f"{field}.word_offsets"))
        term_offsets, positions = array(f"{field}.term_offsets"), array(f"{field}.positions")
        shift = int(array(f"{field}.layout")[0])
        if (
            len(term_offsets) != len(vocabulary) + 1
            or int(term_offsets[-1]) != len(positions)
            or int(vocabulary.offsets[-1]) != len(vocabulary.data)
            or positions.dtype not in (np.dtype("<i4"), np.dtype("<i8"))
        ):
            raise ValueError(f"text index of {field} is inconsistent")
        word_indexes[field] = WordIndex(vocabulary, term_offsets, positions, shift, rows)
    value_indexes = {}
    for field in INFO_FIELDS:
        values = SortedStrings(array(f"{field}.values"), array(f"{field}.value_offsets"))
        value_ids, numbers = array(f"{field}.value_ids"), array(f"{field}.numbers")
        if value_ids.shape != (rows,) or numbers.shape != (len(values),) or value_ids.dtype != np.dtype("<i4"):
            raise ValueError(f"value index of {field} is inconsistent")
        value_indexes[field] = ValueIndex(values, value_ids, numbers)
    return TextIndex(rows, word_indexes, value_indexes)
