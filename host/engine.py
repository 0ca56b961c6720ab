"""Ranking (SPEC §3): one matrix-vector product, hidden rows masked, the budget rule applied.

A constraint (SPEC §10, host/constraints) arrives as a bool mask over the rows and is ANDed with
the caller's visibility mask, so it can only narrow what the caller sees. A similarity
threshold ends the ranked list at the first bit below it, before the budget is applied.

Everything here takes arrays and returns arrays: no HTTP, no files, no JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np

from host.catalog import ModelIndex
from host.sign_codes import hamming_distances

CountType = Literal["token", "bit"]
FIRST_GUESS_FOR_TOKENS = 64  # candidates taken before the token budget is known to be filled
GROWTH = 4
HIDDEN_DISTANCE = np.uint16(np.iinfo(np.uint16).max)  # never among the nearest codes
# A constraint matching at most this share of the rows is ranked by scoring those rows only
# (gathered), not the whole matrix. A gathered row costs ~9x a scanned one (100k bits: 8% of the
# rows gathered took as long as the full scan; scripts/bench_constraints.py), so only below 5%.
SUBSET_SHARE = 0.05


@dataclass(frozen=True)
class Selection:
    """The returned rows in order, with their similarities."""

    rows: np.ndarray  # global rows of the ModelIndex, best first
    scores: np.ndarray  # float32 dot products, same order
    first_bit_cut_to: int | None  # token budget the first bit was cut to, when it overflowed alone
    restricted: int  # bits held back from this caller (computed only when asked)


def similarities(index: ModelIndex, query: np.ndarray) -> np.ndarray:
    """Dot product of `query` with every row: the only full pass over the matrix."""
    if len(index.libraries) == 1:
        return index.libraries[0].embeddings @ query
    return np.concatenate([library.embeddings @ query for library in index.libraries])


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


def best_rows(scores: np.ndarray, k: int) -> np.ndarray:
    """The rows of the k highest scores (and any tied with the k-th), best first, ties by row."""
    if k >= len(scores):
        candidates = np.flatnonzero(scores > -np.inf)
    else:
        threshold = np.partition(scores, len(scores) - k)[len(scores) - k]
        candidates = np.flatnonzero(scores >= threshold)
    return candidates[np.lexsort((candidates, -scores[candidates]))]


def select(
    scores: np.ndarray, token_counts: np.ndarray, visible: int, count: int, count_type: CountType
) -> tuple[np.ndarray, int | None, bool]:
    """Rows (best first) that fill the budget, the first bit's cut, and whether the budget is full.

    Hidden rows carry a score of -inf. `full` is False only when every visible row fit.
    """
    k = min(visible, count if count_type == "bit" else FIRST_GUESS_FOR_TOKENS)
    while True:
        rows = best_rows(scores, k) if k else np.zeros(0, dtype=np.int64)
        taken, cut_to = apply_budget(token_counts[rows], count, count_type)
        full = taken < len(rows) or (count_type == "bit" and taken >= count)
        if full or k >= visible:
            return rows[:taken], cut_to, full
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


def above_threshold(mask: np.ndarray | None, scores: np.ndarray, threshold: float | None) -> np.ndarray | None:
    """`mask` narrowed to scores >= threshold: in descending order the list stops at the first
    bit below it, so those bits can be dropped before the budget sees them."""
    if threshold is None:
        return mask
    above = scores >= np.float32(threshold)
    return above if mask is None else mask & above


class _ExactScan:
    """Every row scored exactly: the matrix-vector product, then the budget over all rows."""

    def __init__(self, index: ModelIndex, query: np.ndarray) -> None:
        self.index = index
        self.scores = similarities(index, query)

    def fill(
        self, mask: np.ndarray | None, count: int, count_type: CountType, threshold: float | None = None
    ) -> _Filled:
        mask = above_threshold(mask, self.scores, threshold)
        scores = self.scores if mask is None else np.where(mask, self.scores, np.float32(-np.inf))
        visible = self.index.bit_count if mask is None else int(np.count_nonzero(mask))
        rows, cut_to, _ = select(scores, self.index.token_counts, visible, count, count_type)
        return _Filled(rows, scores[rows], cut_to)


class _SubsetScan:
    """Only some rows scored exactly (those a selective constraint allows): gathered, then the
    budget over them. Candidates stay in row order, so ties break as in the full scan."""

    def __init__(self, index: ModelIndex, query: np.ndarray, rows: np.ndarray) -> None:
        self.index = index
        self.rows = rows
        self.scores = index.gather(rows) @ query if len(rows) else np.zeros(0, dtype=np.float32)

    def fill(
        self, mask: np.ndarray | None, count: int, count_type: CountType, threshold: float | None = None
    ) -> _Filled:
        keep = np.ones(len(self.rows), dtype=bool) if mask is None else mask[self.rows]
        keep = above_threshold(keep, self.scores, threshold)
        assert keep is not None
        scores = np.where(keep, self.scores, np.float32(-np.inf))
        positions, cut_to, _ = select(
            scores, self.index.token_counts[self.rows], int(np.count_nonzero(keep)), count, count_type
        )
        return _Filled(self.rows[positions], scores[positions], cut_to)


class _SignCodeScan:
    """The nearest sign codes, re-scored exactly; the pool grows until the budget is filled."""

    def __init__(self, index: ModelIndex, query: np.ndarray, oversample: int) -> None:
        self.index = index
        self.query = query
        self.oversample = oversample
        self.distances = np.concatenate([hamming_distances(lib.sign_codes, query) for lib in index.libraries])

    def fill(
        self, mask: np.ndarray | None, count: int, count_type: CountType, threshold: float | None = None
    ) -> _Filled:
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
            scores = self.index.gather(candidates) @ self.query
            above = above_threshold(None, scores, threshold)
            kept = pool if above is None else int(np.count_nonzero(above))
            if above is not None:
                scores = np.where(above, scores, np.float32(-np.inf))
            positions, cut_to, full = select(scores, self.index.token_counts[candidates], kept, count, count_type)
            # A pool that reached below the threshold holds the list's end as far as this search sees.
            if full or kept < pool:
                return _Filled(candidates[positions], scores[positions], cut_to)
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
    mask = narrowed(visible, constraint)
    everything = narrowed(index.visible_rows(frozenset(index.tags)), constraint) if count_restricted else None
    scan: _ExactScan | _SubsetScan | _SignCodeScan
    if constraint is not None and np.count_nonzero(constraint) <= SUBSET_SHARE * index.bit_count:
        scan = _SubsetScan(index, query, np.flatnonzero(constraint))  # exact, and cheaper than either scan
    elif search.approximate:
        scan = _SignCodeScan(index, query, search.oversample)
    else:
        scan = _ExactScan(index, query)
    rows, scores, cut_to = scan.fill(mask, count, count_type, similarity_threshold)
    restricted = 0
    if count_restricted and visible is not None:
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
