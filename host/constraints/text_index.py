"""The per-library text index: built once at compile time, memory-mapped like the embeddings.

Two structures per field, both plain numpy arrays written beside the library's other arrays: a
word index for every field of `INDEXED_FIELDS` (host/constraints/word_index.py) and a value
dictionary for each info field of `INFO_FIELDS` (host/constraints/value_index.py); their arrays
are named `text_index.<field>.<part>`.

On disk the arrays are packed into one file, `text_index.bin` (each array 64-byte aligned),
described by `text_index.json` (name, dtype, shape, offset): one memory map and two fsyncs per
library instead of forty. The compiled store packs a library's keyword postings
(host/keywords/postings.py) into the same file, under names of their own (`open_packed`).
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from host.constraints.sorted_strings import SortedStrings
from host.constraints.value_index import VALUE_ARRAYS, ValueIndex, ValueIndexBuilder
from host.constraints.word_index import TOKENIZE_CHUNK, WORD_ARRAYS, WordIndex, WordIndexBuilder
from host.constraints.words import INDEXED_FIELDS, INFO_FIELDS, field_value

PREFIX = "text_index."
BLOB = "text_index.bin"
LAYOUT = "text_index.json"
ALIGNMENT = 64
DTYPES = ("|u1", "<u2", "<i4", "<i8", "<f4", "<f8")


def array_names() -> list[str]:
    """Every array a text index consists of (without the `.npy`)."""
    names = [f"{PREFIX}{field}.{part}" for field in INDEXED_FIELDS for part in WORD_ARRAYS]
    return names + [f"{PREFIX}{field}.{part}" for field in INFO_FIELDS for part in VALUE_ARRAYS]


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


def open_packed(folder: Path) -> tuple[frozenset[str], Callable[[str], np.ndarray]]:
    """The arrays packed in a compiled folder's text_index.bin: their names, and how to map one by
    name (ValueError when its entry is bad); raises ValueError (or OSError) when the file is unusable."""
    layout = json.loads((folder / LAYOUT).read_text())
    size = (folder / BLOB).stat().st_size
    if size != layout["bytes"]:
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

    return frozenset(layout["arrays"]), load


def open_text_index(folder: Path, rows: int) -> TextIndex:
    """Memory-map a compiled folder's text index; raises ValueError (or OSError) when it is unusable."""
    names, load = open_packed(folder)
    if not set(array_names()) <= names:
        raise ValueError(f"{folder / BLOB} lacks some of the text index's arrays")
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
