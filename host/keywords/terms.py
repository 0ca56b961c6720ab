"""A library's terms: each distinct word of its text and title vocabularies analyzed once.

The result is the sorted terms (UTF-8 bytes, concatenated, as SortedStrings reads them) and, for
each field, every word number's term number (-1 for a stop word). A word of ASCII digits is its own
term (no stemmer changes one), so those never become Python strings: a library of a million
numbered bits has a million numbers in its vocabulary, and they are sorted and numbered as fixed-width
bytes by numpy (1M numbered bits: 2.9 -> 0.6 s). Every other word goes through the analyzer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from host.constraints.sorted_strings import SortedStrings
from host.keywords.analyzer import analyzer

WIDEST_FIXED = 64  # bytes: terms longer than this are sorted as Python strings (a rare, wordy vocabulary)
DIGITS = (ord("0"), ord("9"))


@dataclass(frozen=True)
class Terms:
    data: np.ndarray  # uint8: the sorted terms' UTF-8 bytes, back to back
    offsets: np.ndarray  # (terms + 1,) int64
    maps: list[np.ndarray]  # per field: int32 term of each word number, -1 for a stop word

    @property
    def count(self) -> int:
        return len(self.offsets) - 1


def vocabulary_terms(vocabularies: Sequence[SortedStrings], language: str) -> Terms:
    """The terms of the words of `vocabularies` (each sorted, as a word index keeps it)."""
    words_of = analyzer(language)
    digit_words, other_words, other_terms = [], [], []
    for vocabulary in vocabularies:
        data, offsets = np.asarray(vocabulary.data), np.asarray(vocabulary.offsets, dtype=np.int64)
        digits = _all_digits(data, offsets)
        others = np.flatnonzero(~digits)
        strings = _decoded(data, offsets, others)
        digit_words.append(np.flatnonzero(digits))
        other_words.append(others)
        other_terms.append(words_of.vocabulary_terms(strings))
    encoded = [[None if term is None else term.encode("utf-8", "surrogatepass") for term in terms] for terms in other_terms]
    widest = max([_widest(vocabulary, words) for vocabulary, words in zip(vocabularies, digit_words)]
                 + [len(term) for terms in encoded for term in terms if term is not None] + [1])
    if widest > WIDEST_FIXED:
        return _sorted_in_python(vocabularies, digit_words, other_words, encoded)
    width = f"S{widest}"
    pieces, owners = [], []
    for field, (vocabulary, digits, others, terms) in enumerate(zip(vocabularies, digit_words, other_words, encoded)):
        pieces.append(_fixed(np.asarray(vocabulary.data), np.asarray(vocabulary.offsets, dtype=np.int64), digits, widest))
        owners.append((field, digits))
        held = [at for at, term in enumerate(terms) if term is not None]
        pieces.append(np.array([terms[at] for at in held], dtype=width))
        owners.append((field, others[held]))
    distinct, inverse = _distinct(np.concatenate(pieces))
    maps = [np.full(len(vocabulary), -1, dtype=np.int32) for vocabulary in vocabularies]
    start = 0
    for (field, words), piece in zip(owners, pieces):
        maps[field][words] = inverse[start : start + len(piece)]
        start += len(piece)
    lengths = np.strings.str_len(distinct).astype(np.int64)
    offsets = np.zeros(len(distinct) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    grid = distinct.view(np.uint8).reshape(len(distinct), widest)
    return Terms(grid[np.arange(widest) < lengths[:, np.newaxis]], offsets, maps)


def _distinct(combined: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(combined, return_inverse=True), by a stable sort: the pieces are mostly sorted runs
    (a vocabulary's digit words), which timsort merges in one pass where np.unique sorts them again."""
    order = np.argsort(combined, kind="stable")
    ordered = combined[order]
    first = np.ones(len(ordered), dtype=bool)
    first[1:] = ordered[1:] != ordered[:-1]
    inverse = np.empty(len(combined), dtype=np.int64)
    inverse[order] = np.cumsum(first) - 1
    return ordered[first], inverse


def _all_digits(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Which words (none empty) are ASCII digits only."""
    words = len(offsets) - 1
    if not words:
        return np.zeros(0, dtype=bool)
    other = ((data < DIGITS[0]) | (data > DIGITS[1])).astype(np.int32)
    found: np.ndarray = np.add.reduceat(other, offsets[:-1]) == 0
    return found


def _decoded(data: np.ndarray, offsets: np.ndarray, words: np.ndarray) -> list[str]:
    """The words at these numbers as str (ASCII decoded at once)."""
    bounds = offsets.tolist()
    if not len(data) or int(data.max()) < 0x80:
        joined = data.tobytes().decode("ascii")
        return [joined[bounds[word] : bounds[word + 1]] for word in words.tolist()]
    return [data[bounds[word] : bounds[word + 1]].tobytes().decode("utf-8", "surrogatepass") for word in words.tolist()]


def _widest(vocabulary: SortedStrings, words: np.ndarray) -> int:
    lengths = np.diff(np.asarray(vocabulary.offsets, dtype=np.int64))[words]
    return int(lengths.max()) if len(lengths) else 0


def _fixed(data: np.ndarray, offsets: np.ndarray, words: np.ndarray, width: int) -> np.ndarray:
    """The bytes of these words as a fixed-width bytes array (NUL-padded; no word holds a NUL)."""
    starts, lengths = offsets[words], offsets[words + 1] - offsets[words]
    grid = np.zeros((len(words), width), dtype=np.uint8)
    total = int(lengths.sum())
    row = np.repeat(np.arange(len(words)), lengths)
    column = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    grid[row, column] = data[np.repeat(starts, lengths) + column]
    fixed: np.ndarray = grid.view(f"S{width}").reshape(len(words))
    return fixed


def _sorted_in_python(vocabularies: Sequence[SortedStrings], digit_words: list[np.ndarray], other_words: list[np.ndarray],
                      encoded: list[list[bytes | None]]) -> Terms:
    """`vocabulary_terms` for a vocabulary with a term too wide for fixed-width bytes."""
    field_terms: list[list[tuple[int, bytes]]] = []
    for vocabulary, digits, others, terms in zip(vocabularies, digit_words, other_words, encoded):
        pairs = [(word, vocabulary[word]) for word in digits.tolist()]
        pairs += [(word, term) for word, term in zip(others.tolist(), terms) if term is not None]
        field_terms.append(pairs)
    ordered = sorted({term for pairs in field_terms for _, term in pairs})
    number = {term: position for position, term in enumerate(ordered)}
    maps = []
    for vocabulary, pairs in zip(vocabularies, field_terms):
        mapping = np.full(len(vocabulary), -1, dtype=np.int32)
        if pairs:
            mapping[[word for word, _ in pairs]] = [number[term] for _, term in pairs]
        maps.append(mapping)
    offsets = np.zeros(len(ordered) + 1, dtype=np.int64)
    np.cumsum([len(term) for term in ordered], out=offsets[1:])
    return Terms(np.frombuffer(b"".join(ordered), dtype=np.uint8), offsets, maps)

