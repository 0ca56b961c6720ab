"""Ranking (SPEC §3): one matrix-vector product, hidden rows masked, the budget rule applied.

A constraint (SPEC §10, host/constraints) arrives as a bool mask over the rows and is ANDed with
the caller's visibility mask, so it can only narrow what the caller sees. A similarity
threshold ends the ranked list at the first bit below it, before the budget is applied.

Everything here takes arrays and returns arrays: no HTTP, no files, no JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal, NamedTuple

import numpy as np

from host.index import ModelIndex
from host.sign_codes import hamming_distances

CountType = Literal["token", "bit"]
FIRST_GUESS_FOR_TOKENS = 64  # candidates taken before the token budget is known to be filled
GROWTH = 4
HIDDEN_DISTANCE = np.uint16(np.iinfo(np.uint16).max)  # never among the nearest codes
# A constraint matching at most this share of the rows is ranked by scoring those rows only
# (gathered), not the whole matrix. A gathered row costs ~9x a scanned one (100k bits: 8% of the
# rows gathered took as long as the full scan; scripts/benchmarks/constraints.py), so only below 5%.
SUBSET_SHARE = 0.05
FLOAT32_ROUNDING = 2.0**-23  # twice float32's unit roundoff
RESCORE_BLOCK = 1024  # rows converted to float64 at a time


@dataclass(frozen=True)
class Selection:
    """The returned rows in order, with their similarities."""

    rows: np.ndarray  # global rows of the ModelIndex, best first
    scores: np.ndarray  # float32 dot products, same order
    first_bit_cut_to: int | None  # token budget the first bit was cut to, when it overflowed alone
    restricted: int  # bits held back from this caller (computed only when asked)


def similarities(index: ModelIndex, query: np.ndarray) -> np.ndarray:
    """Dot product of `query` with every row: the only full pass over the matrix.

    These float32 scores only find candidates: BLAS blocks a product differently for different
    shapes, so a row's score here can depend on the rows around it. Returned similarities and
    their order come from `exact_scores`.
    """
    if len(index.libraries) == 1:
        scores: np.ndarray = index.libraries[0].embeddings @ query
        return scores
    return np.concatenate([library.embeddings @ query for library in index.libraries])


def exact_scores(vectors: np.ndarray, query: np.ndarray) -> np.ndarray:
    """The similarity a client sees: the dot product accumulated in float64, rounded to float32.

    The same value for a bit wherever it sits and whatever else the library holds (private bits
    included), in every search mode: the float32 pass is only a filter in front of it.
    """
    query64 = query.astype(np.float64)
    scores = np.empty(len(vectors), dtype=np.float32)
    for start in range(0, len(vectors), RESCORE_BLOCK):
        scores[start : start + RESCORE_BLOCK] = vectors[start : start + RESCORE_BLOCK].astype(np.float64) @ query64
    return scores


def rounding_margin(dimension: int, max_norm: float, query: np.ndarray) -> float:
    """How far a float32 score may be from its exact value, twice over (the gap a candidate may
    fall short of the k-th fast score and still be in the exact top k): |s - exact| <= d·u·|e|·|q|."""
    return 2 * (dimension + 4) * FLOAT32_ROUNDING * max_norm * float(np.linalg.norm(query.astype(np.float64)))


Rescore = Callable[[np.ndarray], np.ndarray]  # rows -> their exact scores


def _exact_scores_of(vectors: np.ndarray, query: np.ndarray, rows: np.ndarray) -> np.ndarray:
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


def best_rows(scores: np.ndarray, k: int, rescore: Rescore, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """The k best rows by exact score, ties by row, and their exact scores.

    `scores` are fast float32 scores (-inf for hidden rows). Every row of the exact top k has a
    fast score within `margin` of the k-th fast score, so only those are re-scored exactly.
    """
    if k >= len(scores):
        candidates = np.flatnonzero(scores > -np.inf)
    else:
        threshold = np.partition(scores, len(scores) - k)[len(scores) - k]
        candidates = np.flatnonzero(scores >= threshold - margin)
    exact = rescore(candidates)
    order = np.lexsort((candidates, -exact))[:k]
    return candidates[order], exact[order]


def select(
    scores: np.ndarray, token_counts: np.ndarray, visible: int, count: int, count_type: CountType,
    rescore: Rescore, margin: float, threshold: float | None = None,
) -> tuple[np.ndarray, np.ndarray, int | None, bool]:
    """Rows (best first) that fill the budget, their exact scores, the first bit's cut, and whether
    the list is complete.

    Hidden rows carry a score of -inf. The list ends at the first bit whose exact score is below
    `threshold` (before the budget sees it). `full` is False only when every visible row fit.
    """
    k = min(visible, count if count_type == "bit" else FIRST_GUESS_FOR_TOKENS)
    while True:
        rows, exact = best_rows(scores, k, rescore, margin) if k else (np.zeros(0, np.int64), np.zeros(0, np.float32))
        below_threshold = threshold is not None and bool(len(exact)) and bool(exact[-1] < threshold)
        if below_threshold:
            above = int(np.searchsorted(-exact, -np.float32(threshold), side="right"))
            rows, exact = rows[:above], exact[:above]
        taken, cut_to = apply_budget(token_counts[rows], count, count_type)
        full = below_threshold or taken < len(rows) or (count_type == "bit" and taken >= count)
        if full or k >= visible:
            return rows[:taken], exact[:taken], cut_to, full
        k = min(visible, k * GROWTH)


@dataclass(frozen=True)
class Search:
    """How to find the best rows: `exact` scans every float; `approximate` scans sign codes first."""

    approximate: bool = False
    oversample: int = 1000  # nearest codes re-scored exactly; grown when the budget needs more


EXACT = Search()


class _Filled(NamedTuple):
    rows: np.ndarray
    scores: np.ndarray
    cut_to: int | None


class _ExactScan:
    """Every row scored exactly: the matrix-vector product, then the budget over all rows."""

    def __init__(self, index: ModelIndex, query: np.ndarray) -> None:
        self.index = index
        self.query = query
        self.scores = similarities(index, query)
        self.margin = rounding_margin(index.dimension, index.max_norm, query)

    def fill(self, mask: np.ndarray | None, count: int, count_type: CountType, threshold: float | None) -> _Filled:
        scores = self.scores if mask is None else np.where(mask, self.scores, np.float32(-np.inf))
        visible = self.index.bit_count if mask is None else int(np.count_nonzero(mask))
        rows, exact, cut_to, _ = select(scores, self.index.token_counts, visible, count, count_type,
                                        lambda rows: exact_scores(self.index.gather(rows), self.query), self.margin,
                                        threshold)
        return _Filled(rows, exact, cut_to)


class _SubsetScan:
    """Only some rows scored (those a selective constraint allows): gathered, then the budget over
    them. Candidates stay in row order, so ties break as in the full scan."""

    def __init__(self, index: ModelIndex, query: np.ndarray, rows: np.ndarray) -> None:
        self.index = index
        self.query = query
        self.rows = rows
        self.vectors = index.gather(rows)
        self.scores = self.vectors @ query if len(rows) else np.zeros(0, dtype=np.float32)
        self.margin = rounding_margin(index.dimension, index.max_norm, query)

    def fill(self, mask: np.ndarray | None, count: int, count_type: CountType, threshold: float | None) -> _Filled:
        keep = np.ones(len(self.rows), dtype=bool) if mask is None else mask[self.rows]
        scores = np.where(keep, self.scores, np.float32(-np.inf))
        positions, exact, cut_to, _ = select(
            scores, self.index.token_counts[self.rows], int(np.count_nonzero(keep)), count, count_type,
            partial(_exact_scores_of, self.vectors, self.query), self.margin, threshold)
        return _Filled(self.rows[positions], exact, cut_to)


class _SignCodeScan:
    """The nearest sign codes, re-scored exactly; the pool grows until the budget is filled."""

    def __init__(self, index: ModelIndex, query: np.ndarray, oversample: int) -> None:
        self.index = index
        self.query = query
        self.oversample = oversample
        self.margin = rounding_margin(index.dimension, index.max_norm, query)
        self.distances = np.concatenate([hamming_distances(lib.sign_codes, query) for lib in index.libraries])

    def fill(self, mask: np.ndarray | None, count: int, count_type: CountType, threshold: float | None) -> _Filled:
        distances = self.distances if mask is None else np.where(mask, self.distances, HIDDEN_DISTANCE)
        visible = self.index.bit_count if mask is None else int(np.count_nonzero(mask))
        wanted = count if count_type == "bit" else FIRST_GUESS_FOR_TOKENS
        pool = min(visible, max(self.oversample, GROWTH * wanted))
        # Equal distances go to the lower row, and candidates stay in row order, so which bits
        # fill the pool never depends on where hidden rows sit (they must influence nothing).
        keys = distances.astype(np.int64) * len(distances) + np.arange(len(distances))
        while True:
            if pool >= visible // 2:  # nothing left to save: scan exactly
                return _ExactScan(self.index, self.query).fill(mask, count, count_type, threshold)
            candidates = np.sort(np.argpartition(keys, pool)[:pool])
            vectors = self.index.gather(candidates)
            positions, exact, cut_to, full = select(
                vectors @ self.query, self.index.token_counts[candidates], pool, count, count_type,
                partial(_exact_scores_of, vectors, self.query), self.margin, threshold)
            # Complete when the budget is full or the list reached the threshold within the pool.
            if full:
                return _Filled(candidates[positions], exact, cut_to)
            pool = min(visible, pool * GROWTH)


def rank(
    index: ModelIndex,
    query: np.ndarray,
    *,
    granted: frozenset[str],
    count: int,
    count_type: CountType,
    count_restricted: bool = False,
    search: Search = EXACT,
    constraint: np.ndarray | None = None,
    similarity_threshold: float | None = None,
) -> Selection:
    """Rank the bits `granted` may see against `query` and fill the budget.

    Bits the caller may not see are excluded before selection, so they never take a place,
    a token or a tie. `constraint` (a bool mask over the rows, host.constraints.constraint_mask)
    is ANDed with that visibility: it narrows, never widens. `similarity_threshold` ends the
    list at the first bit scoring below it, before the budget. With `count_restricted`, the
    budget is filled a second time as if every tag were granted (same constraint and threshold),
    to tell how many bits were held back. The search mode changes how candidates are found,
    never the budget rules.
    """
    visible = index.visible_rows(granted)
    scan: _ExactScan | _SubsetScan | _SignCodeScan
    if constraint is not None and np.count_nonzero(constraint) <= SUBSET_SHARE * index.bit_count:
        scan = _SubsetScan(index, query, np.flatnonzero(constraint))  # exact, and cheaper than either scan
    elif search.approximate:
        scan = _SignCodeScan(index, query, search.oversample)
    else:
        scan = _ExactScan(index, query)
    rows, scores, cut_to = scan.fill(narrowed(visible, constraint), count, count_type, similarity_threshold)
    restricted = 0
    if count_restricted and visible is not None:
        everything = narrowed(index.visible_rows(frozenset(index.tags)), constraint)
        every = scan.fill(everything, count, count_type, similarity_threshold)
        restricted = int(np.count_nonzero(~visible[every.rows]))
    return Selection(rows=rows, scores=scores, first_bit_cut_to=cut_to, restricted=restricted)


def narrowed(visible: np.ndarray | None, constraint: np.ndarray | None) -> np.ndarray | None:
    """The rows both masks allow (None stands for every row). The cached visibility mask is
    never written to: `&` makes a new array."""
    if constraint is None:
        return visible
    return constraint if visible is None else visible & constraint


def random_query(dimension: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """A random unit vector: without a query embedding, a random sample of the library."""
    vector = (rng or np.random.default_rng()).standard_normal(dimension).astype(np.float32)
    return vector / np.linalg.norm(vector)
