"""A constraint's syntax tree -> a bool mask over the rows of a library (or of a model's libraries).

Vectorised: each term is a few slices of the memory-mapped postings scattered into the mask,
each phrase a handful of binary searches over the rarest word's positions, each comparison one
pass over the rows' value ids. Python loops run per tree node and per word of a phrase, never
per bit.

Phrases are checked with positional postings rather than by re-reading candidate texts: a
phrase costs binary searches over its rarest word's positions (no record decoded), and no
candidate set can make it slow (measured in scripts/benchmarks/constraints.py).

A constraint only ever narrows: the caller ANDs the mask with the visibility mask, so no
constraint (NOT included) can bring a hidden bit back.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from host.constraints.errors import ConstraintError
from host.constraints.sorted_strings import SortedStrings
from host.constraints.syntax import And, Compare, Everything, Node, Not, Or, Words
from host.constraints.text_index import TextIndex
from host.constraints.value_index import ValueIndex, as_number
from host.constraints.word_index import WordIndex
from host.constraints.words import fold, words

MAX_PREFIX_TERMS = 1024  # words one prefix may stand for inside a phrase (Lucene's clause limit)
# Membership of phrase candidates in a word's positions: binary search when the candidates are
# few next to the positions, else a byte map of the positions (one scatter, one gather: 4x faster
# than searching for a phrase of two common words), while the map stays this small.
SEARCH_WHEN_FEWER = 1 / 16
MAX_MAP_BYTES = 1 << 28


@dataclass(frozen=True)
class RowLibraries:
    """Which library each row of a text index is served as (a segment of many library files):
    `owners[row]` indexes `names`; -1 is a row served as none (it matches no `library` condition)."""

    names: Sequence[str]
    owners: np.ndarray


def evaluate(node: Node, index: TextIndex, library: str | RowLibraries) -> np.ndarray:
    """Rows of a text index that satisfy `node`, as a bool mask; `library` is the name of the one
    library its rows are, or which library each row is (`RowLibraries`)."""
    if isinstance(node, Words):
        if node.label == "library":
            phrase = node
            return _library_mask(index, library, lambda name: _sequence_in(phrase, _name_words(name)))
        return words_mask(index.words[node.label], node.words, prefix=node.prefix)
    if isinstance(node, Compare):
        if node.field == "library":
            comparison = node
            return _library_mask(index, library,
                                 lambda name: compare_strings(_folded(name), comparison.operator, comparison.value))
        return compare_mask(index.values[node.field], node.operator, node.value)
    if isinstance(node, And | Or):
        mask = evaluate(node.children[0], index, library)
        for child in node.children[1:]:
            if isinstance(node, And):
                mask &= evaluate(child, index, library)
            else:
                mask |= evaluate(child, index, library)
        return mask
    if isinstance(node, Not):
        return ~evaluate(node.child, index, library)
    if isinstance(node, Everything):
        return np.ones(index.rows, dtype=bool)
    raise TypeError(f"not a constraint node: {node!r}")


def _library_mask(index: TextIndex, library: str | RowLibraries, matches: Callable[[str], bool]) -> np.ndarray:
    """Rows whose library's name `matches`: each name asked once, whatever the number of rows."""
    if isinstance(library, str):
        return np.full(index.rows, matches(library))
    per_name = np.fromiter(map(matches, library.names), dtype=bool, count=len(library.names))
    owned: np.ndarray = np.append(per_name, False)[library.owners]  # -1, a row served as none: the False
    return owned


@functools.lru_cache(maxsize=1 << 16)
def _name_words(name: str) -> list[str]:
    return words(name)


@functools.lru_cache(maxsize=1 << 16)
def _folded(name: str) -> str:
    return fold(name)


def evaluate_libraries(node: Node, libraries: Sequence[tuple[TextIndex, str | RowLibraries]]) -> np.ndarray:
    """The mask over several libraries' rows laid end to end (a ModelIndex's global rows)."""
    if not libraries:
        return np.zeros(0, dtype=bool)
    return np.concatenate([evaluate(node, index, name) for index, name in libraries])


# ---- words and phrases ------------------------------------------------------------------------


def words_mask(index: WordIndex, sequence: Sequence[str], *, prefix: bool = False) -> np.ndarray:
    """Rows holding the words in sequence (the last one a prefix when `prefix`)."""
    mask = np.zeros(index.rows, dtype=bool)
    starts = phrase_starts(index, sequence, prefix=prefix)
    if len(starts):
        mask[starts >> index.shift] = True
    return mask


def phrase_starts(index: WordIndex, sequence: Sequence[str], *, prefix: bool = False) -> np.ndarray:
    """Positions (`row << shift | word number`) where the sequence starts; unsorted, may repeat."""
    ranges = [index.term_range(word, prefix=prefix and number == len(sequence) - 1)
              for number, word in enumerate(sequence)]
    if any(lo == hi for lo, hi in ranges):
        return np.zeros(0, dtype=index.positions.dtype)
    if len(sequence) == 1:  # a word, or a prefix: one contiguous slice of positions
        return index.positions_of(*ranges[0])
    lo, hi = ranges[-1]
    if hi - lo > MAX_PREFIX_TERMS:
        raise ConstraintError(
            f"the prefix '{sequence[-1]}*' stands for more than {MAX_PREFIX_TERMS} words in a phrase; make it longer"
        )
    lists = [index.positions_of(lo, hi) for lo, hi in ranges]
    if hi - lo > 1:
        lists[-1] = np.sort(lists[-1])
    # Start from the rarest word; every other word must sit at its offset from there.
    order = sorted(range(len(lists)), key=lambda number: len(lists[number]))
    anchor = order[0]
    low = index.low_mask
    found = lists[anchor]
    # Drop occurrences whose phrase would begin before their row or run past the row's slot.
    within = (found & low) >= anchor
    within &= (found & low) - anchor + (len(sequence) - 1) <= low
    starts = found[within] - anchor
    for number in order[1:]:
        if not len(starts):
            break
        starts = starts[_members(starts + number, lists[number], index.rows << index.shift)]
    return starts


def _members(targets: np.ndarray, positions: np.ndarray, space: int) -> np.ndarray:
    """Which targets are among `positions` (sorted, distinct, all below `space`): bool per target."""
    if len(targets) < SEARCH_WHEN_FEWER * len(positions) or space > MAX_MAP_BYTES:
        at = np.searchsorted(positions, targets)
        hit = at < len(positions)
        hit[hit] = positions[at[hit]] == targets[hit]
        return hit
    present = np.zeros(space, dtype=bool)
    present[positions] = True
    # A phrase start near the end of the last row may look past `space`: those are misses.
    inside = targets < space
    hit = np.zeros(len(targets), dtype=bool)
    hit[inside] = present[targets[inside]]
    return hit


def _sequence_in(node: Words, haystack: list[str]) -> bool:
    """Whether `node`'s words occur in sequence in `haystack` (for the one-value `library`)."""
    size = len(node.words)
    for start in range(len(haystack) - size + 1):
        window = haystack[start : start + size]
        if window[:-1] == list(node.words[:-1]) and (
            window[-1].startswith(node.words[-1]) if node.prefix else window[-1] == node.words[-1]
        ):
            return True
    return False


# ---- comparisons on whole values --------------------------------------------------------------


def compare_mask(index: ValueIndex, operator: str, value: str) -> np.ndarray:
    """Rows whose folded value stands in `operator` to `value` (already folded); see
    metadata_condition.py for the meaning of each operator."""
    ids = index.value_ids
    values = index.values
    key = value.encode("utf-8", "surrogatepass")
    if operator in ("contains", "not contains", "end with"):
        hit: np.ndarray = containing(values, key, suffix=operator == "end with")[ids]
        return ~hit if operator == "not contains" else hit
    if operator == "start with":
        lo, hi = values.prefix_range(key)
        return (ids >= lo) & (ids < hi)
    if operator in ("empty", "not empty"):
        empty = values.find(b"")
        hit = ids == empty if empty is not None else np.zeros(len(ids), dtype=bool)
        return ~hit if operator == "not empty" else hit
    by_string = _ordered(ids, values, operator, key)
    number = as_number(value)
    if np.isnan(number):
        return by_string
    row_numbers = index.numbers[ids]
    # NaN (a value that is no number) compares False; those rows keep the string comparison.
    with np.errstate(invalid="ignore"):
        by_number = _numeric(row_numbers, operator, number)
    combined: np.ndarray = np.where(np.isnan(row_numbers), by_string, by_number)
    return combined


def _ordered(ids: np.ndarray, values: SortedStrings, operator: str, key: bytes) -> np.ndarray:
    # Values are sorted, so each order comparison is one boundary in the dictionary.
    if operator in ("=", "≠"):
        found = values.find(key)
        equal: np.ndarray = ids == found if found is not None else np.zeros(len(ids), dtype=bool)
        return equal if operator == "=" else ~equal
    boundary = values.bound(key, right=operator in (">", "≤"))
    above: np.ndarray = ids >= boundary
    return above if operator in (">", "≥") else ~above


def _numeric(numbers: np.ndarray, operator: str, number: float) -> np.ndarray:
    compare = {"=": np.equal, "≠": np.not_equal, ">": np.greater, "≥": np.greater_equal,
               "<": np.less, "≤": np.less_equal}[operator]
    result: np.ndarray = compare(numbers, number)
    return result


def containing(values: SortedStrings, needle: bytes, *, suffix: bool = False) -> np.ndarray:
    """Which distinct values hold `needle` (end with it, with `suffix`): bool per value.

    One vectorised scan of the concatenated values for the needle's rarest byte, then a check
    of its other bytes at the candidates only, then that the match lies inside one value.
    """
    data, offsets = values.data, values.offsets
    hit = np.zeros(len(values), dtype=bool)
    if not needle:
        hit[:] = True
        return hit
    size = len(needle)
    if len(data) < size:
        return hit
    needle_bytes = np.frombuffer(needle, dtype=np.uint8)
    anchor = int(np.argmin(values.byte_counts[needle_bytes]))
    starts = np.flatnonzero(data == needle_bytes[anchor]) - anchor
    starts = starts[(starts >= 0) & (starts + size <= len(data))]
    for number in range(size):
        if number != anchor and len(starts):
            starts = starts[data[starts + number] == needle_bytes[number]]
    owner = np.searchsorted(offsets, starts, side="right") - 1
    ends = offsets[owner + 1]
    inside = starts + size == ends if suffix else starts + size <= ends
    hit[owner[inside]] = True
    return hit


def compare_strings(field: str, operator: str, value: str) -> bool:
    """One folded value against a folded `value`, with the semantics of compare_mask."""
    if operator == "contains":
        return value in field
    if operator == "not contains":
        return value not in field
    if operator == "start with":
        return field.startswith(value)
    if operator == "end with":
        return field.endswith(value)
    if operator == "empty":
        return field == ""
    if operator == "not empty":
        return field != ""
    left, right = as_number(field), as_number(value)
    if np.isnan(left) or np.isnan(right):
        return _compare(field, operator, value)
    return _compare(left, operator, right)


def _compare(left: str | float, operator: str, right: str | float) -> bool:
    if operator in ("=", "≠"):
        return (left == right) == (operator == "=")
    smaller, larger = (left, right) if operator in ("<", "≤") else (right, left)
    return smaller < larger or (operator in ("≤", "≥") and smaller == larger)  # type: ignore[operator]
