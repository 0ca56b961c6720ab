"""Hybrid ranking: meaning and keywords together, by a convex combination of normalized scores.

The pool is the best POOL (or more, for a larger budget) bits by similarity and the best as many
by BM25, both over the bits the caller may see and a constraint allows. Every bit of the pool gets
both scores (its exact similarity, its BM25 score: 0 without a keyword), each min-max normalized
over the pool, then

    score = (1 - w) * similarity' + w * bm25'          w = keyword_weight, 0.5 by default

and the pool is ranked by it (ties: the higher similarity, then file order).

Chosen by measurement (docs/quality.md, scripts/bench_quality.py): on CISI and CACM, nDCG@10 of
this fusion at w = 0.5 was 0.458 / 0.565 where reciprocal-rank fusion (k = 60) of the same two
rankings gave 0.446 / 0.541, vector search alone 0.419 / 0.389 and BM25 alone 0.377 / 0.491; over
pools of 20 to 5,000 it stayed within 0.450-0.459 / 0.552-0.569. The weight's default is the
neutral one: both collections did well near it (0.4-0.5), and it was not fitted to either.

A similarity threshold keeps only bits whose similarity reaches it, whichever list found them,
and a score threshold only bits whose fused score does: both filter the ranked pool, they never
change a bit's score or its place among the others.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from host.catalog.model_index import ModelIndex
from host.search.budget import FIRST_GUESS_FOR_TOKENS, GROWTH, CountType, apply_budget, exact_scores
from host.search.engine import Search, rank
from host.search.keywords import Weighted, keyword_scores, keyword_top

POOL = 50  # bits taken from each ranking at least: the answer of a small budget never depends on its size
DEFAULT_KEYWORD_WEIGHT = 0.5


@dataclass(frozen=True)
class Fused:
    """Rows best first, their similarities (float32), their fused scores and keyword scores normalized
    over the pool (float64, in [0, 1]), the first bit's cut."""

    rows: np.ndarray
    similarities: np.ndarray
    scores: np.ndarray
    keyword_scores: np.ndarray
    cut_to: int | None


def fuse(similarity: np.ndarray, keyword: np.ndarray, keyword_weight: float) -> tuple[np.ndarray, np.ndarray]:
    """The fused score of each bit of a pool (its two scores min-max normalized over the pool, weighed),
    and its keyword score so normalized."""
    keyword_part = _normalized(keyword)
    return (1.0 - keyword_weight) * _normalized(similarity.astype(np.float64)) + keyword_weight * keyword_part, keyword_part


def _normalized(scores: np.ndarray) -> np.ndarray:
    """`scores` mapped onto [0, 1] by the pool's lowest and highest; all 1 when they are all equal."""
    low, high = (float(scores.min()), float(scores.max())) if len(scores) else (0.0, 0.0)
    if high <= low:
        return np.ones(len(scores), dtype=np.float64)
    normalized: np.ndarray = (scores - low) / (high - low)
    return normalized


def rank_fused(index: ModelIndex, vector: np.ndarray, weighted: Weighted, *, granted: frozenset[str],
               allowed: np.ndarray | None, constraint: np.ndarray | None, count: int, count_type: CountType,
               keyword_weight: float, similarity_threshold: float | None, search: Search,
               score_threshold: float | None = None) -> Fused:
    """The rows that fill the budget by the fused score (see the module docstring).

    `allowed` is the caller's visible rows narrowed by `constraint` (both None: every row); the
    vector side applies the same through `rank`, so both lists draw from the same bits. Bits whose
    fused score is below `score_threshold` are left out before the budget.
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
        keyword = np.concatenate([keyword_scores(index, weighted, nearest.rows), keyword_found[alone]])
        fused, keyword_part = fuse(similarities, keyword, keyword_weight)
        keys = rows if index.tie_keys is None else index.tie_keys[rows]
        order = np.lexsort((keys, -similarities, -fused))
        if similarity_threshold is not None:
            order = order[similarities[order] >= np.float32(similarity_threshold)]
        if score_threshold is not None:
            order = order[fused[order] >= score_threshold]
        rows, similarities, fused, keyword_part = rows[order], similarities[order], fused[order], keyword_part[order]
        taken, cut_to = apply_budget(index.token_counts[rows], count, count_type)
        if exhausted or taken < len(rows) or (count_type == "bit" and taken >= count):
            return Fused(rows[:taken], similarities[:taken], fused[:taken], keyword_part[:taken], cut_to)
        depth *= GROWTH
