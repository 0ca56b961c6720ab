"""Hybrid ranking: meaning and keywords together, by a convex combination of absolute scores.

The pool is the best POOL (or more, for a larger budget) bits by similarity and the best as many
by BM25, both over the bits the caller may see and a constraint allows. Every bit of the pool gets
both scores (its exact similarity; its keyword score, host/search/keywords.py's `keyword_score`:
min(1, BM25 / |w|), 0 without a keyword), and

    score = (1 - w) * clip(similarity, 0, 1) + w * keyword score      w = keyword_weight, 0.5 by default

and the pool is ranked by it (ties: the higher similarity, then file order). Neither part depends
on the other bits of the answer, so neither does the score: it means the same in every query, and
a fixed threshold can say "nothing here". Measured with scripts/bench_quality.py (docs/quality.md):
on CISI and CACM, nDCG@10 0.462 / 0.555 against 0.446 / 0.541 for reciprocal-rank fusion of the
same two rankings, and with a threshold that keeps the best answer of 90% of the collection's own
questions, 100% / 97.5% of 80 questions about something else turned away. The min-max fusion
before it (each side normalized over the pool: its best bit near 1 in every answer) ranked a
little better (0.465 / 0.568) and turned away 45% / 54%. The weight's default is the neutral one.

A similarity threshold keeps only bits whose similarity reaches it, whichever list found them,
and a score threshold only bits whose score does: both filter the ranked pool, they never change
a bit's score or its place among the others.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from host.catalog.model_index import ModelIndex
from host.search.budget import FIRST_GUESS_FOR_TOKENS, GROWTH, CountType, apply_budget, exact_scores
from host.search.engine import Search, rank
from host.search.keywords import Weighted, keyword_score, keyword_scores, keyword_top

POOL = 50  # bits taken from each ranking at least: the answer of a small budget never depends on its size
DEFAULT_KEYWORD_WEIGHT = 0.5


@dataclass(frozen=True)
class Fused:
    """Rows best first, their similarities (float32), their fused and keyword scores (float64, in
    [0, 1]), the first bit's cut, and the best fused score of the pool before any threshold."""

    rows: np.ndarray
    similarities: np.ndarray
    scores: np.ndarray
    keyword_scores: np.ndarray
    cut_to: int | None
    best: float | None = None


def fuse(similarity: np.ndarray, keyword: np.ndarray, keyword_weight: float) -> np.ndarray:
    """The fused score of each bit: its similarity (clipped to 0-1) and its keyword score (already
    0-1, `keyword_score`), weighed."""
    meaning = np.clip(similarity.astype(np.float64), 0.0, 1.0)
    fused: np.ndarray = (1.0 - keyword_weight) * meaning + keyword_weight * keyword
    return fused


def rank_fused(index: ModelIndex, vector: np.ndarray, weighted: Weighted, *, granted: frozenset[str],
               allowed: np.ndarray | None, constraint: np.ndarray | None, count: int, count_type: CountType,
               keyword_weight: float, similarity_threshold: float | None, search: Search,
               score_threshold: float | None = None) -> Fused:
    """The rows that fill the budget by the fused score (see the module docstring).

    `allowed` is the caller's visible rows narrowed by `constraint` (both None: every row); the
    vector side applies the same through `rank`, so both lists draw from the same bits. Bits whose
    fused score is below `score_threshold` are left out before the budget; the pool grows only while
    a bit outside it could still reach the threshold.
    """
    depth = max(POOL, count if count_type == "bit" else FIRST_GUESS_FOR_TOKENS)
    while True:
        nearest = rank(index, vector, granted=granted, count=depth, count_type="bit", search=search,
                       constraint=constraint)
        assert nearest.scores is not None  # ranked by the vector
        keyword_rows, keyword_found = keyword_top(index, weighted, depth, allowed)
        # Every bit at least `similarity_threshold` similar is in the nearest list once it reaches below it.
        nearest_done = len(nearest.rows) < depth or (
            similarity_threshold is not None and bool(nearest.scores[-1] < similarity_threshold))
        exhausted = nearest_done and (len(keyword_rows) < depth or similarity_threshold is not None)
        near = set(nearest.rows.tolist())  # a set: np.isin takes 45 µs for two lists of 50
        alone = np.fromiter((row not in near for row in keyword_rows.tolist()), dtype=bool, count=len(keyword_rows))
        only_keywords = keyword_rows[alone]
        their_similarity = exact_scores(index.gather(only_keywords), vector) if len(only_keywords) else np.zeros(0, np.float32)
        rows = np.concatenate([nearest.rows, only_keywords]).astype(np.int64)
        similarities = np.concatenate([nearest.scores, their_similarity]).astype(np.float32)
        bm25 = np.concatenate([keyword_scores(index, weighted, nearest.rows), keyword_found[alone]])
        keyword_part = keyword_score(weighted, bm25)
        fused = fuse(similarities, keyword_part, keyword_weight)
        if score_threshold is not None and not exhausted:
            # No bit outside the pool is more similar than the last nearest or holds more keywords than
            # the last keyword bit: none can score above this, so none can reach a threshold above it.
            ceiling = fuse(nearest.scores[-1:] if not nearest_done else np.zeros(1, np.float32),
                           keyword_score(weighted, keyword_found[-1:]) if len(keyword_rows) >= depth else np.zeros(1),
                           keyword_weight)
            exhausted = bool(ceiling[0] < score_threshold)
        keys = rows if index.tie_keys is None else index.tie_keys[rows]
        order = np.lexsort((keys, -similarities, -fused))
        best = float(fused[order[0]]) if len(order) else None
        if similarity_threshold is not None:
            order = order[similarities[order] >= np.float32(similarity_threshold)]
        if score_threshold is not None:
            order = order[fused[order] >= score_threshold]
        rows, similarities, fused, keyword_part = rows[order], similarities[order], fused[order], keyword_part[order]
        taken, cut_to = apply_budget(index.token_counts[rows], count, count_type)
        if exhausted or taken < len(rows) or (count_type == "bit" and taken >= count):
            return Fused(rows[:taken], similarities[:taken], fused[:taken], keyword_part[:taken], cut_to, best)
        depth *= GROWTH
