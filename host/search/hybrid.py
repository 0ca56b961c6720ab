"""Hybrid ranking, as RAGFlow's retrieval scores chunks (SPEC §10): `w·vector + (1-w)·term`.

For every bit the caller may see (narrowed, as any query, by a constraint and a library list):

    vector_similarity = the exact similarity POST / reports (engine.exact_scores: the dot product
                        accumulated in float64, rounded to float32)
    term_similarity   = host.constraints' term score of the question, each library's statistics
                        taken over the bits the caller may see of it (never over hidden ones)
    similarity        = w·vector_similarity + (1-w)·term_similarity      (float64)

The answer is the `top_k` bits of highest similarity (ties go to the lower row, as in `rank`),
then only those at or above the threshold. There is no token budget: a hybrid query asks for a
number of bits (RAGFlow's `top_k`, then its pages).

One fast float32 pass over the candidates finds who can be in the top k; only those within the
float32 rounding margin of the k-th are scored exactly, so the answer is what scoring every
candidate exactly would give (tests/test_hybrid.py checks it against a brute-force reference).
Everything here takes arrays: no HTTP, no JSON.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from host.catalog.model_index import ModelIndex
from host.constraints import Node
from host.search.budget import best_rows, exact_scores, rounding_margin
from host.search.engine import SUBSET_SHARE, narrowed, similarities
from host.search.model_text import model_term_similarity


@dataclass(frozen=True)
class HybridQuery:
    """A question as a vector and as words, how to weigh the two, and how many bits to keep."""

    vector: np.ndarray  # float32, the model's dimension: the question embedded
    question: str  # the same question as text, for the term score
    vector_weight: float  # w, in [0, 1]
    top_k: int  # at most this many bits
    similarity_threshold: float | None = None  # only bits whose (hybrid) similarity is at least this
    constraint: Node | None = None  # host.constraints: only bits matching it
    libraries: frozenset[str] | None = None  # only bits of these libraries (names)


@dataclass(frozen=True)
class HybridSelection:
    """The kept rows, best first, with their three scores."""

    rows: np.ndarray  # global rows of the ModelIndex
    similarity: np.ndarray  # float64: w·vector + (1-w)·term
    vector_similarity: np.ndarray  # float32, as POST / reports it
    term_similarity: np.ndarray  # float64, in [0, 1]


EMPTY = HybridSelection(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.float32), np.zeros(0))


def rank_hybrid(
    index: ModelIndex, query: HybridQuery, visible: np.ndarray | None, narrowing: np.ndarray | None
) -> HybridSelection:
    """The hybrid answer over the rows `visible` (the caller's mask, None: all) and `narrowing` allow.

    Term statistics come from `visible` alone, so what narrows the candidates (a dataset or
    document filter) never changes a bit's score, and hidden bits never change anyone's.
    """
    allowed = narrowed(visible, narrowing)
    rows = np.arange(index.bit_count) if allowed is None else np.flatnonzero(allowed)
    if not len(rows) or query.top_k < 1:
        return EMPTY
    weight = float(query.vector_weight)
    if len(rows) <= SUBSET_SHARE * index.bit_count:
        vectors = index.gather(rows)
        fast = vectors @ query.vector

        def exact_vector(positions: np.ndarray) -> np.ndarray:
            return exact_scores(vectors[positions], query.vector)
    else:
        fast = similarities(index, query.vector)[rows]

        def exact_vector(positions: np.ndarray) -> np.ndarray:
            return exact_scores(index.gather(rows[positions]), query.vector)

    term = model_term_similarity(query.question, index, rows, visible)

    def exact_hybrid(positions: np.ndarray) -> np.ndarray:
        hybrid: np.ndarray = weight * exact_vector(positions).astype(np.float64) + (1 - weight) * term[positions]
        return hybrid

    fast_hybrid = weight * fast.astype(np.float64) + (1 - weight) * term
    margin = weight * rounding_margin(index.dimension, index.max_norm, query.vector)
    positions, scores = best_rows(fast_hybrid, min(query.top_k, len(rows)), exact_hybrid, margin,
                                  None if index.tie_keys is None else index.tie_keys[rows])
    if query.similarity_threshold is not None:
        kept = scores >= query.similarity_threshold
        positions, scores = positions[kept], scores[kept]
    return HybridSelection(rows[positions], scores, exact_vector(positions), term[positions])
