"""The value dictionary of one info field: each row's whole folded value, for metadata conditions.

Built at compile time for each info field (`INFO_FIELDS`), for RAGFlow's metadata_condition
(`=`, `<`, `start with`, `contains` ... on whole folded values). Its arrays (stored in the
library's text index, host/constraints/text_index.py):
    `<field>.values`, `<field>.value_offsets`  the distinct folded values, sorted
    `<field>.value_ids`                        (rows,) int32 index of each row's value
    `<field>.numbers`                          (distinct,) float64: the value as a number, or NaN
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from host.constraints.numbering import Numbering
from host.constraints.sorted_strings import SortedStrings
from host.constraints.words import ROW_BREAK, fold

VALUE_ARRAYS = ("values", "value_offsets", "value_ids", "numbers")


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
