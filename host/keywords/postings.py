"""A library's keyword postings: which rows hold each term, how often, and bounds to skip by.

Built at compile time from the text index's word indexes of the `text` and `title` fields (BM25
scores a bit's text and title as one field): no text is split twice. Each distinct word is
analyzed once (host/keywords/analyzer.py) into its term or nothing (a stop word); a term's postings
are then the position lists of its words merged by row (in C where built, `_postings.c`: two
passes that read the positions in order; else numpy), giving:

    keywords.terms, keywords.term_bytes    the sorted terms (UTF-8, concatenated; SortedStrings)
    keywords.term_offsets                  (terms + 1,) int64: where each term's postings start
    keywords.rows                          int32: each term's rows, ascending
    keywords.frequencies                   uint16: how often the row holds the term (saturating)
    keywords.lengths                       (rows,) int32: each row's terms (text and title)
    keywords.tag_rows_of_term              (terms, tags) int32: rows of each tag holding the term
    keywords.tag_rows, keywords.tag_lengths (tags,) int64: rows of each tag, and their terms
    keywords.block_offsets                 (terms + 1,) int64: where each term's blocks start
    keywords.block_last                    int32: the last row of each block of BLOCK postings
    keywords.block_bound                   float32: the highest `f / (f + k1 (1 - b + b length / A))` in
                                           the block, rounded up, A the library's average length

The per-tag counts are what makes statistics a caller's own (host/search/keywords.py): N, the rows
holding a term and the total length are summed over the tags a caller may see, so a private bit
never moves a public score. The block bounds let a search skip a block whose best possible score
cannot enter the answer (host/keywords/top.py). They are taken at the library's own average
length A; a caller whose average A' differs (some tags hidden) multiplies them by max(1, A'/A),
which bounds the block at A' too: a larger average only shortens every norm by at most A/A'.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from host.constraints.sorted_strings import SortedStrings
from host.constraints.word_index import WordIndex
from host.keywords.analyzer import analyzer

try:
    import host.keywords._postings as compiled
except ImportError:  # installed without a C compiler
    compiled = None  # type: ignore[assignment]

BUILT = compiled is not None
__all__ = [
    "ARRAYS",
    "BLOCK",
    "BUILT",
    "K1",
    "PREFIX",
    "B",
    "TermPlan",
    "array_names",
    "build_postings",
    "compiled",
    "library_average",
    "plan_terms",
    "saturation",
]
PREFIX = "keywords."
BLOCK = 128  # postings a block: the unit a search skips
MOST_FREQUENCY = np.iinfo(np.uint16).max
K1 = 1.2  # BM25's term frequency saturation and length normalisation (Lucene's and bm25s's defaults)
B = 0.75
NUMPY_POSITIONS = 1 << 24  # positions keyed at a time by the numpy build (8 bytes each)
ARRAYS = ("terms", "term_bytes", "term_offsets", "rows", "frequencies", "lengths", "tag_rows_of_term", "tag_rows",
          "tag_lengths", "block_offsets", "block_last", "block_bound")


def array_names() -> list[str]:
    """Every array of a library's postings, as stored in its text index."""
    return [PREFIX + name for name in ARRAYS]


@dataclass(frozen=True)
class TermPlan:
    """A library's terms (sorted) and the words each is made of, from its fields' vocabularies alone:
    what can be known before the rows' stored order is (a compile plans it while the layout runs)."""

    terms: list[str]
    term_words: np.ndarray  # (terms + 1,) int64: where each term's words start below
    word_fields: np.ndarray  # uint8: the field of each of a term's words
    word_numbers: np.ndarray  # int64: its number in that field's vocabulary


def plan_terms(vocabularies: Sequence[SortedStrings], language: str) -> TermPlan:
    """Each distinct word of the fields analyzed once into its term; the terms sorted (code point
    order, which is UTF-8's byte order) and numbered; each term's words grouped."""
    words_of = analyzer(language)
    term_of_word = [words_of.vocabulary_terms(vocabulary_strings(vocabulary)) for vocabulary in vocabularies]
    terms = sorted({term for terms in term_of_word for term in terms if term is not None})
    number = {term: position for position, term in enumerate(terms)}
    # Each term's words, as (field, word) pairs grouped by term.
    pair_terms, pair_fields, pair_words = [], [], []
    for position, field_terms in enumerate(term_of_word):
        numbered = np.array([-1 if term is None else number[term] for term in field_terms], dtype=np.int64)
        held = np.flatnonzero(numbered >= 0)
        pair_terms.append(numbered[held])
        pair_words.append(held.astype(np.int64))
        pair_fields.append(np.full(len(held), position, dtype=np.uint8))
    by_term = np.argsort(np.concatenate(pair_terms), kind="stable")
    word_fields, word_numbers = np.concatenate(pair_fields)[by_term], np.concatenate(pair_words)[by_term]
    term_words = np.zeros(len(terms) + 1, dtype=np.int64)
    np.cumsum(np.bincount(np.concatenate(pair_terms), minlength=len(terms)), out=term_words[1:])
    return TermPlan(terms, term_words, word_fields, word_numbers)


def build_postings(fields: Sequence[WordIndex], plan: TermPlan, tag_ids: np.ndarray, tag_count: int) -> dict[str, np.ndarray]:
    """The postings arrays (see the module docstring), by name with PREFIX, of the rows whose text and
    title word indexes are `fields` (rows as stored), their words' terms planned by `plan_terms`;
    `tag_ids`: each row's tag, below `tag_count`."""
    rows, terms = len(tag_ids), plan.terms
    tag_ids = np.ascontiguousarray(tag_ids, dtype=np.uint16)
    grouping = (plan.term_words, plan.word_fields, plan.word_numbers)
    if compiled is not None:
        arrays = _merged_in_c(fields, grouping, tag_ids, tag_count, len(terms))
    else:
        arrays = _merged_in_numpy(fields, grouping, tag_ids, tag_count, len(terms), rows)
    encoded = [term.encode("utf-8", "surrogatepass") for term in terms]
    term_bytes = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(term) for term in encoded], out=term_bytes[1:])
    arrays["terms"] = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    arrays["term_bytes"] = term_bytes
    return {PREFIX + name: arrays[name] for name in ARRAYS}


def vocabulary_strings(vocabulary: SortedStrings) -> list[str]:
    """A word index's vocabulary as str, decoded at once when it is ASCII (most are)."""
    data, offsets = np.asarray(vocabulary.data), np.asarray(vocabulary.offsets)
    if not len(data) or int(data.max()) < 0x80:
        joined = data.tobytes().decode("ascii")
        bounds = offsets.tolist()
        return [joined[start:stop] for start, stop in itertools.pairwise(bounds)]
    return [word.decode("utf-8", "surrogatepass") for word in vocabulary]


def _merged_in_c(fields: Sequence[WordIndex], grouping: tuple[np.ndarray, np.ndarray, np.ndarray], tag_ids: np.ndarray,
                 tag_count: int, terms: int) -> dict[str, np.ndarray]:
    assert compiled is not None
    rows = len(tag_ids)
    lists = [(field.positions, np.ascontiguousarray(field.term_offsets, dtype=np.int64), field.shift) for field in fields]
    rows_of_term = np.empty(terms, dtype=np.int64)
    tag_rows = np.empty((terms, tag_count), dtype=np.int32)
    lengths = np.empty(rows, dtype=np.int32)
    compiled.count(lists, *grouping, tag_ids, tag_count, rows_of_term, tag_rows, lengths)
    arrays = _sized(rows_of_term, lengths, tag_ids, tag_count)
    compiled.place(lists, *grouping, tag_ids, tag_count, lengths, K1, B, library_average(arrays["tag_rows"],
                   arrays["tag_lengths"]), BLOCK, arrays["term_offsets"], arrays["rows"], arrays["frequencies"],
                   arrays["block_offsets"], arrays["block_last"], arrays["block_bound"])
    arrays["tag_rows_of_term"] = tag_rows
    return arrays


def _sized(rows_of_term: np.ndarray, lengths: np.ndarray, tag_ids: np.ndarray, tag_count: int) -> dict[str, np.ndarray]:
    """The arrays whose sizes the first pass decides, the per-tag sums filled, the postings and blocks empty."""
    term_offsets = np.zeros(len(rows_of_term) + 1, dtype=np.int64)
    np.cumsum(rows_of_term, out=term_offsets[1:])
    block_offsets = np.zeros(len(rows_of_term) + 1, dtype=np.int64)
    np.cumsum((rows_of_term + BLOCK - 1) // BLOCK, out=block_offsets[1:])
    postings, blocks = int(term_offsets[-1]), int(block_offsets[-1])
    return {
        "term_offsets": term_offsets, "lengths": lengths, "block_offsets": block_offsets,
        "rows": np.empty(postings, dtype=np.int32), "frequencies": np.empty(postings, dtype=np.uint16),
        "block_last": np.empty(blocks, dtype=np.int32), "block_bound": np.empty(blocks, dtype=np.float32),
        "tag_rows": np.bincount(tag_ids, minlength=tag_count).astype(np.int64),
        "tag_lengths": np.bincount(tag_ids, weights=lengths, minlength=tag_count).astype(np.int64),
    }


def _merged_in_numpy(fields: Sequence[WordIndex], grouping: tuple[np.ndarray, np.ndarray, np.ndarray],
                     tag_ids: np.ndarray, tag_count: int, terms: int, rows: int) -> dict[str, np.ndarray]:
    """The same arrays as `_merged_in_c`: each term's (row, frequency) from its words' positions, a
    range of terms at a time (keys of 8 bytes: at most NUMPY_POSITIONS positions at once)."""
    term_words, word_fields, word_numbers = grouping
    width = max(rows, 1)
    found_terms, found_rows, found_counts = [], [], []
    first = 0
    while first < terms:
        last, held = first, 0
        while last < terms and (last == first or held < NUMPY_POSITIONS):
            for pair in range(int(term_words[last]), int(term_words[last + 1])):
                field = fields[word_fields[pair]]
                held += field.occurrences(int(word_numbers[pair]), int(word_numbers[pair]) + 1)
            last += 1
        keys = []
        for term in range(first, last):
            for pair in range(int(term_words[term]), int(term_words[term + 1])):
                field = fields[word_fields[pair]]
                word = int(word_numbers[pair])
                keys.append(term * width + (field.positions_of(word, word + 1).astype(np.int64) >> field.shift))
        distinct, counts = np.unique(np.concatenate(keys) if keys else np.zeros(0, np.int64), return_counts=True)
        found_terms.append(distinct // width)
        found_rows.append(distinct % width)
        found_counts.append(counts)
        first = last
    posting_terms = np.concatenate(found_terms) if found_terms else np.zeros(0, np.int64)
    posting_rows = np.concatenate(found_rows) if found_rows else np.zeros(0, np.int64)
    counts = np.concatenate(found_counts) if found_counts else np.zeros(0, np.int64)
    lengths = np.minimum(np.bincount(posting_rows, weights=counts, minlength=rows), np.iinfo(np.int32).max)
    arrays = _sized(np.bincount(posting_terms, minlength=terms), lengths.astype(np.int32), tag_ids, tag_count)
    arrays["rows"][:] = posting_rows
    arrays["frequencies"][:] = np.minimum(counts, MOST_FREQUENCY)
    arrays["tag_rows_of_term"] = np.bincount(posting_terms * tag_count + tag_ids[posting_rows].astype(np.int64),
                                             minlength=terms * tag_count).astype(np.int32).reshape(terms, tag_count)
    average = library_average(arrays["tag_rows"], arrays["tag_lengths"])
    _fill_blocks(arrays, average)
    return arrays


def library_average(tag_rows: np.ndarray, tag_lengths: np.ndarray) -> float:
    """A library's average row length over every tag: what its block bounds were taken at."""
    rows, length = int(tag_rows.sum()), int(tag_lengths.sum())
    return length / rows if rows and length else 1.0


def saturation(frequencies: np.ndarray, lengths: np.ndarray, average: float) -> np.ndarray:
    """BM25's `f / (f + k1 (1 - b + b length / average))`, float64: a posting's score per unit of weight."""
    frequency = frequencies.astype(np.float64)
    return frequency / (frequency + K1 * (1.0 - B + B * lengths.astype(np.float64) / average))


def _fill_blocks(arrays: dict[str, np.ndarray], average: float) -> None:
    """Each block's last row and bound (the C `place` computes the same)."""
    term_offsets, block_offsets = arrays["term_offsets"], arrays["block_offsets"]
    counts = np.diff(block_offsets)
    owner = np.repeat(np.arange(len(counts)), counts)
    starts = term_offsets[owner] + (np.arange(int(block_offsets[-1]), dtype=np.int64) - block_offsets[owner]) * BLOCK
    if not len(starts):
        return
    ends = np.minimum(starts + BLOCK, term_offsets[owner + 1])
    rows = arrays["rows"]
    most = np.maximum.reduceat(saturation(arrays["frequencies"], arrays["lengths"][rows], average), starts)
    bound = most.astype(np.float32)
    rounded_down = bound.astype(np.float64) < most
    bound[rounded_down] = np.nextafter(bound[rounded_down], np.float32(np.inf))
    arrays["block_bound"][:] = bound
    arrays["block_last"][:] = rows[ends - 1]
