"""A library's keyword postings: which rows hold each term, how often, and bounds to skip by.

Built at compile time from the words the text index has numbered in the `text` and `title` fields
(BM25 scores a bit's text and title as one field): no text is split twice. Each distinct word is
analyzed once (host/keywords/analyzer.py) into its term or nothing (a stop word); then two passes
over the rows (in C where built, `_postings.c`, else numpy) give the arrays below. Rows are
numbered in *file* order: the postings are built while the compile still lays the vectors out, so
their time hides behind it, and a stored (laid out) library maps them through `stored_rows`.

    keywords.terms, keywords.term_bytes    the sorted terms (UTF-8, concatenated; SortedStrings)
    keywords.term_offsets                  (terms + 1,) int64: where each term's postings start
    keywords.rows                          int32: each term's rows (file order), ascending
    keywords.frequencies                   uint16: how often the row holds the term (saturating)
    keywords.lengths                       (rows,) int32: each row's terms (text and title), file order
    keywords.stored_rows                   (rows,) int32: each row's stored row (empty: the same)
    keywords.public_rows_of_term           (terms,) int32: public rows (tag 0) holding each term
    keywords.tag_term_offsets              (terms + 1,) int64: where each term's counts of other tags start
    keywords.tag_term_tags, tag_term_rows  uint16, int32: those tags (ascending) and their rows holding the term
    keywords.tag_rows, keywords.tag_lengths (tags,) int64: rows of each tag, and their terms
    keywords.block_offsets                 (terms + 1,) int64: where each term's blocks start
    keywords.block_last                    int32: the last row of each block of BLOCK postings
    keywords.block_bound                   float32: the highest `f / (f + k1 (1 - b + b length / A))` in
                                           the block, rounded up, A the library's average length

The per-tag counts are what makes statistics a caller's own (host/search/keywords.py): N, the rows
holding a term and the total length are summed over the tags a caller may see, so a private bit
never moves a public score. The counts of tags other than the public one are kept sparse (only the
terms a tag's rows hold): a segment packing many publishers' libraries has one tag per publisher's
private tag (host/library/visibility.py), and a dense table of terms x tags would not fit.

The block bounds let a search skip a block whose best possible score cannot enter the answer
(host/keywords/top.py). They are taken at the library's own average length A; a caller whose
average A' differs (some tags hidden) multiplies them by max(1, A'/A), which bounds the block at A' too:
a larger average only shortens every norm by at most A/A'.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from host.constraints.sorted_strings import SortedStrings
from host.keywords.terms import vocabulary_terms

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
    "FieldWords",
    "array_names",
    "build_postings",
    "compiled",
    "library_average",
    "saturation",
    "stored_rows",
]
PREFIX = "keywords."
BLOCK = 128  # postings a block: the unit a search skips
MOST_FREQUENCY = np.iinfo(np.uint16).max
K1 = 1.2  # BM25's term frequency saturation and length normalisation (Lucene's and bm25s's defaults)
B = 0.75
ARRAYS = ("terms", "term_bytes", "term_offsets", "rows", "frequencies", "lengths", "stored_rows", "public_rows_of_term",
          "tag_term_offsets", "tag_term_tags", "tag_term_rows", "tag_rows", "tag_lengths", "block_offsets", "block_last",
          "block_bound")


def array_names() -> list[str]:
    """Every array of a library's postings, as stored in its text index."""
    return [PREFIX + name for name in ARRAYS]


@dataclass(frozen=True)
class FieldWords:
    """One field's words as the text index numbered them (host/constraints/word_index.py `numbered`)."""

    vocabulary: SortedStrings  # the field's distinct words, sorted: a word number indexes it
    words: np.ndarray  # int32 (or int64) word numbers, the rows' words back to back in file order
    lengths: np.ndarray  # int64, words of each row


def build_postings(fields: Sequence[FieldWords], tag_ids: np.ndarray, tag_count: int, language: str) -> dict[str, np.ndarray]:
    """The postings arrays (see the module docstring), by name with PREFIX, of rows in file order whose
    text and title are `fields`; `tag_ids`: each row's tag (file order), below `tag_count`. Their
    `stored_rows` is empty (rows stored as in the file) until `stored_rows` fills it."""
    rows = len(tag_ids)
    terms = vocabulary_terms([field.vocabulary for field in fields], language)
    tag_ids = np.ascontiguousarray(tag_ids, dtype=np.uint16)
    if compiled is not None and all(field.words.dtype == np.int32 for field in fields):
        arrays = _counted_in_c(fields, terms.maps, tag_ids, tag_count, terms.count)
    else:
        arrays = _counted_in_numpy(fields, terms.maps, tag_ids, tag_count, terms.count, rows)
    arrays.update(tagged_counts(arrays["term_offsets"], arrays["rows"], tag_ids))
    arrays["terms"], arrays["term_bytes"] = terms.data, terms.offsets
    arrays["stored_rows"] = np.zeros(0, dtype=np.int32)
    return {PREFIX + name: arrays[name] for name in ARRAYS}


def stored_rows(order: np.ndarray) -> np.ndarray:
    """Each file row's stored row, from a layout's `order` (stored row -> file row): the postings'
    `stored_rows` of a library stored in that order."""
    stored = np.empty(len(order), dtype=np.int32)
    stored[order] = np.arange(len(order), dtype=np.int32)
    return stored


def _counted_in_c(fields: Sequence[FieldWords], maps: list[np.ndarray], tag_ids: np.ndarray, tag_count: int,
                  terms: int) -> dict[str, np.ndarray]:
    assert compiled is not None
    (text, title), (text_map, title_map) = fields, maps
    text_lengths, title_lengths = (np.ascontiguousarray(field.lengths, dtype=np.int64) for field in fields)
    rows_of_term = np.empty(terms, dtype=np.int64)
    # The loops count two classes, public (0) and the rest (1): the other tags' counts are sparse (`tagged_counts`).
    public_or_not = np.minimum(tag_ids, 1).astype(np.uint16)
    classes = np.empty((terms, 2), dtype=np.int32)
    lengths = np.empty(len(tag_ids), dtype=np.int32)
    compiled.count(text.words, text_lengths, text_map, title.words, title_lengths, title_map, public_or_not, 2,
                   rows_of_term, classes, lengths)
    arrays = _sized(rows_of_term, lengths, tag_ids, tag_count)
    compiled.place(text.words, text_lengths, text_map, title.words, title_lengths, title_map, public_or_not, 2,
                   lengths, K1, B, library_average(arrays["tag_rows"], arrays["tag_lengths"]), BLOCK,
                   arrays["term_offsets"], arrays["rows"], arrays["frequencies"], arrays["block_offsets"],
                   arrays["block_last"], arrays["block_bound"])
    arrays["public_rows_of_term"] = np.ascontiguousarray(classes[:, 0])
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


def _counted_in_numpy(fields: Sequence[FieldWords], maps: list[np.ndarray], tag_ids: np.ndarray, tag_count: int,
                      terms: int, rows: int) -> dict[str, np.ndarray]:
    """The same arrays as `_counted_in_c`: every (term, row) of both fields, sorted and counted."""
    width = max(rows, 1)
    keys = []
    for field, mapping in zip(fields, maps):
        term = mapping[field.words] if len(mapping) else np.zeros(0, dtype=np.int32)
        row = np.repeat(np.arange(rows, dtype=np.int64), np.asarray(field.lengths, dtype=np.int64))
        kept = term >= 0
        keys.append(term[kept].astype(np.int64) * width + row[kept])
    distinct, counts = np.unique(np.concatenate(keys), return_counts=True)
    posting_terms, posting_rows = distinct // width, distinct % width
    lengths = np.minimum(np.bincount(posting_rows, weights=counts, minlength=rows), np.iinfo(np.int32).max)
    arrays = _sized(np.bincount(posting_terms, minlength=terms), lengths.astype(np.int32), tag_ids, tag_count)
    arrays["rows"][:] = posting_rows
    arrays["frequencies"][:] = np.minimum(counts, MOST_FREQUENCY)
    arrays["public_rows_of_term"] = np.bincount(posting_terms[tag_ids[posting_rows] == 0], minlength=terms).astype(np.int32)
    _fill_blocks(arrays, library_average(arrays["tag_rows"], arrays["tag_lengths"]))
    return arrays


def tagged_counts(term_offsets: np.ndarray, rows: np.ndarray, tag_ids: np.ndarray) -> dict[str, np.ndarray]:
    """For the tags other than the public one, how many rows of each tag hold each term, sparse: the
    counts of term t are [tag_term_offsets[t], tag_term_offsets[t + 1]) of `tag_term_tags` (ascending)
    and `tag_term_rows`. Only the postings of tagged rows are read: none in a public library."""
    terms = len(term_offsets) - 1
    tagged = np.flatnonzero(tag_ids[rows] != 0) if np.any(tag_ids) else np.zeros(0, np.int64)
    term = np.searchsorted(term_offsets, tagged, side="right") - 1
    keys, counts = np.unique(term * 65536 + tag_ids[rows[tagged]].astype(np.int64), return_counts=True)
    offsets = np.zeros(terms + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys // 65536, minlength=terms), out=offsets[1:])
    return {"tag_term_offsets": offsets, "tag_term_tags": (keys % 65536).astype(np.uint16),
            "tag_term_rows": counts.astype(np.int32)}


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
