"""The k best rows of one library by Okapi BM25, given the query's terms and a caller's statistics.

A row's score is the sum over the query's terms it holds, in the order given, of

    weight(t) * f / (f + k1 * (1 - b + b * length / average))

in double precision, where f is how often the row holds t (text and title), `length` its terms,
`average` the caller's average length and weight(t) the term's idf times how often the query says
it (host/search/keywords.py computes both from the caller's statistics). This is Lucene's BM25
(bm25s's default), with k1 = 1.2 and b = 0.75.

The compiled search (`_postings.c`: block-max MaxScore) skips postings that cannot enter the k
best: its cost follows the query, not the library. Without it, numpy scores every posting of the
query's terms. Both return the same rows and the same scores, bit for bit; ties go to the lower
key (file order).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from host.keywords import postings
from host.keywords.index import KeywordIndex
from host.keywords.postings import BLOCK, K1, B


def top(index: KeywordIndex, terms: Sequence[int], weights: Sequence[float], average: float, k: int,
        allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The (up to) k best stored rows holding any of `terms` (numbers in `index`), best first (ties:
    the earlier in file order), and their scores (float64). `allowed`: bool per stored row (None: all)."""
    if not terms or k < 1:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    weight_array = np.ascontiguousarray(weights, dtype=np.float64)
    compiled = postings.compiled
    if compiled is not None:
        rows = np.empty(k, dtype=np.int64)
        scores = np.empty(k, dtype=np.float64)
        lists = [(*index.postings(term), BLOCK) for term in terms]
        scale = max(1.0, float(average) / index.average)
        found = compiled.top(lists, weight_array, index.lengths, K1, B, float(average), scale,
                             None if allowed is None else allowed.view(np.uint8), index.stored_rows, k, rows, scores)
        return rows[:found], scores[:found]
    return _top_in_numpy(index, terms, weight_array, float(average), k, allowed)


def _top_in_numpy(index: KeywordIndex, terms: Sequence[int], weights: np.ndarray, average: float, k: int,
                  allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Every posting scored; the sums run in the terms' order, as the compiled search's do."""
    row_lists, parts = [], []
    for term, weight in zip(terms, weights):
        term_postings = index.postings(term)
        frequencies = term_postings.frequencies.astype(np.float64)
        norm = K1 * (1.0 - B + B * index.lengths[term_postings.rows].astype(np.float64) / average)
        row_lists.append(term_postings.rows)
        parts.append(weight * frequencies / (frequencies + norm))
    every_row = np.concatenate(row_lists).astype(np.int64)
    candidates = np.unique(every_row)
    # np.bincount adds the weights in the order given, term after term: the compiled order.
    sums = np.bincount(np.searchsorted(candidates, every_row), weights=np.concatenate(parts), minlength=len(candidates))
    stored = candidates if index.stored_rows is None else index.stored_rows[candidates].astype(np.int64)
    if allowed is not None:
        kept = allowed[stored]
        candidates, stored, sums = candidates[kept], stored[kept], sums[kept]
    best = np.lexsort((candidates, -sums))[:k]  # candidates are file rows: ties in file order
    return stored[best], sums[best]


def scores_of(index: KeywordIndex, terms: Sequence[int], weights: Sequence[float], average: float,
              rows: np.ndarray) -> np.ndarray:
    """The BM25 score of each of `rows` (file order; 0 where a row holds none of `terms`): the score
    `top` gives it, bit for bit (the same parts, summed in the same order)."""
    found = np.zeros(len(rows), dtype=np.float64)
    if not terms or not len(rows):
        return found
    compiled = postings.compiled
    if compiled is not None:
        compiled.scores([(*index.postings(term), BLOCK) for term in terms], np.ascontiguousarray(weights, dtype=np.float64),
                        index.lengths, K1, B, float(average), np.ascontiguousarray(rows, dtype=np.int32), found)
        return found
    norm = K1 * (1.0 - B + B * index.lengths[rows].astype(np.float64) / average)
    for term, weight in zip(terms, weights):
        held = index.postings(term)
        at = np.searchsorted(held.rows, rows)
        hit = at < len(held.rows)
        hit[hit] = held.rows[at[hit]] == rows[hit]
        frequency = held.frequencies[at[hit]].astype(np.float64)
        found[hit] += weight * frequency / (frequency + norm[hit])
    return found
