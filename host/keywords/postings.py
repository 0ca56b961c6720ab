"""A library's keyword postings: which rows hold each term, how often, and bounds to skip by.

Built at compile time from the words the text index has already numbered (the `text` and `title`
fields: BM25 scores a bit's text and title as one field), so no text is split twice. Each
distinct word is analyzed once (host/keywords/analyzer.py) into its term or nothing (a stop word);
then two counting passes over the rows, in stored order (in C where built, `_postings.c`, else
numpy), give:

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

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

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
    "FieldWords",
    "array_names",
    "build_postings",
    "compiled",
    "library_average",
    "numbered_fields",
    "saturation",
]
PREFIX = "keywords."
BLOCK = 128  # postings a block: the unit a search skips
MOST_FREQUENCY = np.iinfo(np.uint16).max
K1 = 1.2  # BM25's term frequency saturation and length normalisation (Lucene's and bm25s's defaults)
B = 0.75
ARRAYS = ("terms", "term_bytes", "term_offsets", "rows", "frequencies", "lengths", "tag_rows_of_term", "tag_rows",
          "tag_lengths", "block_offsets", "block_last", "block_bound")


def array_names() -> list[str]:
    """Every array of a library's postings, as stored in its text index."""
    return [PREFIX + name for name in ARRAYS]


@dataclass(frozen=True)
class FieldWords:
    """One field's words as the text index numbered them: each fed row's word numbers back to back."""

    vocabulary: Sequence[bytes]  # the field's distinct words, sorted; a word number indexes it
    words: np.ndarray  # int32 (or int64) word numbers, rows in the order fed
    lengths: np.ndarray  # int64, words of each fed row


def build_postings(fields: Sequence[FieldWords], order: np.ndarray | None, tag_ids: np.ndarray, tag_count: int,
                   language: str) -> dict[str, np.ndarray]:
    """The postings arrays (see the module docstring), by name with PREFIX. `order`: stored row ->
    fed row (None: the same); `tag_ids`: each stored row's tag, below `tag_count`."""
    rows = len(tag_ids)
    words_of = analyzer(language)
    term_of_word = [words_of.vocabulary_terms([word.decode("utf-8", "surrogatepass") for word in field.vocabulary])
                    for field in fields]
    terms = sorted({term for terms in term_of_word for term in terms if term is not None},
                   key=lambda term: term.encode("utf-8", "surrogatepass"))
    number = {term: position for position, term in enumerate(terms)}
    maps = [np.array([-1 if term is None else number[term] for term in field_terms], dtype=np.int32)
            for field_terms in term_of_word]
    tag_ids = np.ascontiguousarray(tag_ids, dtype=np.uint16)
    if compiled is not None and len(fields) == 2 and all(field.words.dtype == np.int32 for field in fields):
        arrays = _counted_in_c(fields, maps, order, tag_ids, tag_count, len(terms))
    else:
        arrays = _counted_in_numpy(fields, maps, order, tag_ids, tag_count, len(terms), rows)
    encoded = [term.encode("utf-8", "surrogatepass") for term in terms]
    term_bytes = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(term) for term in encoded], out=term_bytes[1:])
    arrays["terms"] = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    arrays["term_bytes"] = term_bytes
    arrays["tag_rows"] = np.bincount(tag_ids, minlength=tag_count).astype(np.int64)
    arrays["tag_lengths"] = np.bincount(tag_ids, weights=arrays["lengths"], minlength=tag_count).astype(np.int64)
    average = library_average(arrays["tag_rows"], arrays["tag_lengths"])
    arrays.update(_blocks(arrays["term_offsets"], arrays["rows"], arrays["frequencies"], arrays["lengths"], average))
    return {PREFIX + name: arrays[name] for name in ARRAYS}


def _counted_in_c(fields: Sequence[FieldWords], maps: list[np.ndarray], order: np.ndarray | None, tag_ids: np.ndarray,
                  tag_count: int, terms: int) -> dict[str, np.ndarray]:
    assert compiled is not None
    rows = len(tag_ids)
    (text, title), (text_map, title_map) = fields, maps
    text_lengths, title_lengths = (np.ascontiguousarray(field.lengths, dtype=np.int64) for field in fields)
    ordering = None if order is None else np.ascontiguousarray(order, dtype=np.int64)
    rows_of_term = np.empty(terms, dtype=np.int64)
    tag_rows = np.empty((terms, tag_count), dtype=np.int32)
    lengths = np.empty(rows, dtype=np.int32)
    compiled.count(text.words, text_lengths, text_map, title.words, title_lengths, title_map, ordering, tag_ids,
                   tag_count, rows_of_term, tag_rows, lengths)
    term_offsets = np.zeros(terms + 1, dtype=np.int64)
    np.cumsum(rows_of_term, out=term_offsets[1:])
    posting_rows = np.empty(int(term_offsets[-1]), dtype=np.int32)
    frequencies = np.empty(len(posting_rows), dtype=np.uint16)
    compiled.place(text.words, text_lengths, text_map, title.words, title_lengths, title_map, ordering, tag_ids,
                   tag_count, term_offsets, posting_rows, frequencies)
    return {"term_offsets": term_offsets, "rows": posting_rows, "frequencies": frequencies, "lengths": lengths,
            "tag_rows_of_term": tag_rows}


def _counted_in_numpy(fields: Sequence[FieldWords], maps: list[np.ndarray], order: np.ndarray | None,
                      tag_ids: np.ndarray, tag_count: int, terms: int, rows: int) -> dict[str, np.ndarray]:
    """The same arrays as `_counted_in_c`: every (term, stored row) of both fields, sorted and counted."""
    stored_of_fed = np.arange(rows, dtype=np.int64)
    if order is not None:
        stored_of_fed[np.asarray(order, dtype=np.int64)] = np.arange(rows, dtype=np.int64)
    keys = []
    for field, mapping in zip(fields, maps):
        term = mapping[field.words] if len(mapping) else np.zeros(0, dtype=np.int32)
        row = np.repeat(stored_of_fed, np.asarray(field.lengths, dtype=np.int64))
        kept = term >= 0
        keys.append(term[kept].astype(np.int64) * max(rows, 1) + row[kept])
    joined = np.sort(np.concatenate(keys)) if keys else np.zeros(0, dtype=np.int64)
    lengths = np.bincount(joined % max(rows, 1), minlength=rows).astype(np.int32) if rows else np.zeros(0, np.int32)
    distinct, counts = np.unique(joined, return_counts=True)
    posting_terms, posting_rows = distinct // max(rows, 1), distinct % max(rows, 1)
    term_offsets = np.zeros(terms + 1, dtype=np.int64)
    np.cumsum(np.bincount(posting_terms, minlength=terms), out=term_offsets[1:])
    tag_rows = np.bincount(posting_terms * tag_count + tag_ids[posting_rows].astype(np.int64),
                           minlength=terms * tag_count).astype(np.int32).reshape(terms, tag_count)
    return {"term_offsets": term_offsets, "rows": posting_rows.astype(np.int32),
            "frequencies": np.minimum(counts, MOST_FREQUENCY).astype(np.uint16), "lengths": lengths,
            "tag_rows_of_term": tag_rows}


def library_average(tag_rows: np.ndarray, tag_lengths: np.ndarray) -> float:
    """A library's average row length over every tag: what its block bounds were taken at."""
    rows = int(tag_rows.sum())
    return float(int(tag_lengths.sum()) / rows) if rows else 1.0


def saturation(frequencies: np.ndarray, lengths: np.ndarray, average: float) -> np.ndarray:
    """BM25's `f / (f + k1 (1 - b + b length / average))`, float64: a posting's score per unit of weight."""
    frequency = frequencies.astype(np.float64)
    return frequency / (frequency + K1 * (1.0 - B + B * lengths.astype(np.float64) / average))


def _blocks(term_offsets: np.ndarray, rows: np.ndarray, frequencies: np.ndarray, lengths: np.ndarray,
            average: float) -> dict[str, np.ndarray]:
    """Each term's postings cut into blocks of BLOCK (the last one shorter), and each block's bound."""
    counts = np.diff(term_offsets)
    blocks_of_term = (counts + BLOCK - 1) // BLOCK
    block_offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(blocks_of_term, out=block_offsets[1:])
    # Where each block starts among the postings: its term's start plus BLOCK times its place.
    owner = np.repeat(np.arange(len(counts)), blocks_of_term)
    place = np.arange(int(block_offsets[-1]), dtype=np.int64) - block_offsets[owner]
    starts = term_offsets[owner] + place * BLOCK
    ends = np.minimum(starts + BLOCK, term_offsets[owner + 1])
    if not len(starts):
        return {"block_offsets": block_offsets, "block_last": np.zeros(0, np.int32), "block_bound": np.zeros(0, np.float32)}
    most = np.maximum.reduceat(saturation(frequencies, lengths[rows], average), starts)
    bound = most.astype(np.float32)
    rounded_down = bound.astype(np.float64) < most
    bound[rounded_down] = np.nextafter(bound[rounded_down], np.float32(np.inf))
    return {"block_offsets": block_offsets, "block_last": rows[ends - 1].astype(np.int32), "block_bound": bound}


def numbered_fields(text: tuple[Sequence[bytes], np.ndarray, np.ndarray],
                    title: tuple[Sequence[bytes], np.ndarray, np.ndarray]) -> list[FieldWords]:
    """The two fields BM25 reads, from their word indexes' `numbered()` (host/constraints/word_index.py)."""
    return [FieldWords(*text), FieldWords(*title)]
