"""What every scan does with its candidates: exact re-scoring, the k best, the budget rule.

A scan (host/search/engine.py, host/search/cluster_scan.py) finds candidates with fast float32 scores; the
functions here turn them into the answer a caller sees: every row that could be in the exact top
k is re-scored exactly (`exact_scores`: float64 accumulation rounded to float32), equal scores
rank in file order, and the budget (SPEC §3) and similarity threshold cut the list.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal, NamedTuple

import numpy as np

from host.search.scratch import SCRATCH
from host.store import kernels

CountType = Literal["token", "bit"]
FIRST_GUESS_FOR_TOKENS = 64  # candidates taken before the token budget is known to be filled
GROWTH = 4
FLOAT32_ROUNDING = 2.0**-23  # twice float32's unit roundoff
HEAP_UP_TO = 4096  # the largest k the compiled loop finds in a heap; numpy partitions for larger ones
RESCORE_BLOCK = 256  # rows converted to float64 at a time (a 3 MB buffer at 1536 dimensions)
NEGATIVE_INFINITY = np.float32(-np.inf)


def exact_scores(vectors: np.ndarray, query: np.ndarray) -> np.ndarray:
    """The similarity a client sees: the dot product accumulated in float64, rounded to float32.

    The same value for a bit wherever it sits and whatever else the library holds (private bits
    included), in every search mode: the float32 pass is only a filter in front of it. The compiled
    loop (host/store/kernels.py) sums in another order than BLAS: the float64 sums differ in their
    last bits, so a similarity may differ by one float32 unit between a host built with it and one
    without, as between two BLAS libraries; on one host every path takes the same one.
    """
    compiled = kernels.compiled
    if compiled is not None:
        scores = np.empty(len(vectors), dtype=np.float32)
        compiled.exact_dots(np.ascontiguousarray(vectors, dtype=np.float32),
                            np.ascontiguousarray(query, dtype=np.float32), scores)
        return scores
    query64 = query.astype(np.float64)
    dimension = len(query)
    block = SCRATCH.take("rescore", min(len(vectors), RESCORE_BLOCK) * dimension, np.float64)
    if len(vectors) <= RESCORE_BLOCK:  # a query's few candidates: one block, as below, in fewer steps
        rows64 = block.reshape(len(vectors), dimension)
        np.copyto(rows64, vectors)
        product: np.ndarray = (rows64 @ query64).astype(np.float32)
        return product
    scores = np.empty(len(vectors), dtype=np.float32)
    for start in range(0, len(vectors), RESCORE_BLOCK):
        part = vectors[start : start + RESCORE_BLOCK]
        rows64 = block[: len(part) * dimension].reshape(len(part), dimension)
        np.copyto(rows64, part)
        scores[start : start + len(part)] = rows64 @ query64
    return scores


def rounding_margin(dimension: int, max_norm: float, query: np.ndarray) -> float:
    """How far a float32 score may be from its exact value, twice over (the gap a candidate may
    fall short of the k-th fast score and still be in the exact top k): |s - exact| <= d·u·|e|·|q|."""
    query64 = query.astype(np.float64)
    return 2 * (dimension + 4) * FLOAT32_ROUNDING * max_norm * math.sqrt(float(query64 @ query64))


Rescore = Callable[[np.ndarray], np.ndarray]  # rows -> their exact scores


class Filled(NamedTuple):
    """A budget filled by a scan: rows best first, their exact scores, the first bit's cut."""

    rows: np.ndarray
    scores: np.ndarray
    cut_to: int | None


def exact_scores_of(vectors: np.ndarray, query: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The exact scores of some of `vectors`: a `Rescore` once the first two are bound. The compiled
    loop reads the rows where they are (a query's dozen candidates: no 72 KB gathered first)."""
    compiled = kernels.compiled
    if compiled is not None and vectors.dtype == np.float32 and vectors.flags.c_contiguous:
        scores = np.empty(len(rows), dtype=np.float32)
        compiled.exact_dots(vectors, np.ascontiguousarray(query, dtype=np.float32), scores,
                            np.ascontiguousarray(rows, dtype=np.int64))
        return scores
    return exact_scores(vectors[rows], query)


def apply_budget(token_counts: np.ndarray, count: int, count_type: CountType) -> tuple[int, int | None]:
    """How many of the ranked bits fit, and the budget the first one is cut to if it alone overflows.

    `token`: bits are added while the running sum stays <= count; the first bit that would
    overflow ends the list (no skipping ahead).
    """
    if count_type == "bit":
        return min(count, len(token_counts)), None
    fitting = int(np.searchsorted(np.cumsum(token_counts), count, side="right"))
    if fitting == 0 and len(token_counts):
        return 1, count
    return fitting, None


def best_rows(scores: np.ndarray, k: int, rescore: Rescore, margin: float,
              keys: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The k best positions by exact score, ties by key (`keys[position]`, else the position), and
    their exact scores.

    `scores` are fast float32 scores (-inf for hidden rows). Every row of the exact top k has a
    fast score within `margin` of the k-th fast score, so only those are re-scored exactly.
    """
    candidates = _margin_candidates(scores, k, margin)
    exact = rescore(candidates)
    order = np.lexsort((candidates if keys is None else keys[candidates], -exact))[:k]
    return candidates[order], exact[order]


def _margin_candidates(scores: np.ndarray, k: int, margin: float) -> np.ndarray:
    """Positions of the scores at or above the k-th best minus `margin` (every finite one when k
    covers them all). The compiled loop keeps the k best in a heap (host/store/kernels.py): one call
    where numpy takes six steps, each dearer with cold caches; it is asked only for small k."""
    if k >= len(scores):
        above = SCRATCH.take("above", len(scores), np.bool_)
        np.greater(scores, NEGATIVE_INFINITY, out=above)
        return np.flatnonzero(above)
    compiled = kernels.compiled
    if compiled is not None and k <= HEAP_UP_TO and scores.dtype == np.float32 and scores.flags.c_contiguous:
        positions = SCRATCH.take("candidates", len(scores), np.int64)
        found = compiled.margin_candidates(scores, k, margin, SCRATCH.take("heap", k, np.float32), positions)
        return positions[:found]
    above = SCRATCH.take("above", len(scores), np.bool_)
    work = SCRATCH.take("partition", len(scores), scores.dtype)
    np.copyto(work, scores)
    work.partition(len(scores) - k)
    np.greater_equal(scores, work[len(scores) - k] - np.float32(margin), out=above)
    return np.flatnonzero(above)


def select(
    scores: np.ndarray, token_counts: np.ndarray, visible: int, count: int, count_type: CountType,
    rescore: Rescore, margin: float, threshold: float | None = None, keys: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, int | None, bool]:
    """Rows (best first) that fill the budget, their exact scores, the first bit's cut, and whether
    the list is complete.

    Hidden rows carry a score of -inf; equal exact scores rank by `keys` (else by position). The
    list ends at the first bit whose exact score is below `threshold` (before the budget sees
    it). `full` is False only when every visible row fit.
    """
    k = min(visible, count if count_type == "bit" else FIRST_GUESS_FOR_TOKENS)
    while True:
        rows, exact = (best_rows(scores, k, rescore, margin, keys) if k
                       else (np.zeros(0, np.int64), np.zeros(0, np.float32)))
        below_threshold = threshold is not None and bool(len(exact)) and bool(exact[-1] < threshold)
        if below_threshold:
            above = int(np.searchsorted(-exact, -np.float32(threshold), side="right"))
            rows, exact = rows[:above], exact[:above]
        taken, cut_to = apply_budget(token_counts[rows], count, count_type)
        full = below_threshold or taken < len(rows) or (count_type == "bit" and taken >= count)
        if full or k >= visible:
            return rows[:taken], exact[:taken], cut_to, full
        k = min(visible, k * GROWTH)
