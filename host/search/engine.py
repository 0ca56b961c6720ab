"""Ranking (SPEC §3): a fast float32 pass finds candidates, exact re-scoring orders them, hidden
rows are masked, the budget rule is applied (host/search/budget.py).

Three ways to find candidates, one result: the exact scan (one matrix-vector product over every
row), the cluster scan (the nearest clusters of clustered libraries, host/search/cluster_scan.py) and
the sign-code scan (approximate search over libraries stored without clusters). Whatever the
way, the similarities a caller sees are `exact_scores` and equal scores rank in file order.

A constraint (SPEC §10, host/constraints) arrives as a bool mask over the rows and is ANDed with
the caller's visibility mask, so it can only narrow what the caller sees. A similarity
threshold ends the ranked list at the first bit below it, before the budget is applied.

Everything here takes arrays and returns arrays: no HTTP, no files, no JSON. Working buffers
come from host/search/scratch.py (per thread), so a query allocates no large array of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from host.catalog.model_index import ModelIndex
from host.search.batching import BATCHER
from host.search.budget import (
    FIRST_GUESS_FOR_TOKENS,
    GROWTH,
    NEGATIVE_INFINITY,
    CountType,
    Filled,
    apply_budget,
    exact_scores,
    exact_scores_of,
    rounding_margin,
    select,
)
from host.search.cluster_scan import ClusterScan
from host.search.scratch import SCRATCH
from host.store.sign_codes import hamming_distances

__all__ = [
    "EXACT",
    "OVERSAMPLE",
    "PROBES",
    "CountType",
    "Search",
    "Selection",
    "apply_budget",
    "exact_scores",
    "random_query",
    "rank",
    "select",
    "similarities",
]

HIDDEN_DISTANCE = np.uint16(np.iinfo(np.uint16).max)  # never among the nearest codes
# A constraint matching at most this share of the rows is ranked by scoring those rows only
# (gathered), not the whole matrix. A gathered row costs ~9x a scanned one (100k bits: 8% of the
# rows gathered took as long as the full scan; scripts/benchmarks/constraints.py), so only below 5%.
SUBSET_SHARE = 0.05
PROBES = 1  # clusters a cluster scan reads at least: the pool (`oversample`, host.search.query.pool_for) decides
OVERSAMPLE = 250  # rows an approximate search considers at least, however small the library (~2 clusters at 10k)


@dataclass(frozen=True)
class Selection:
    """The returned rows in order, with their similarities (and, ranked otherwise, their rank scores)."""

    rows: np.ndarray  # global rows of the ModelIndex, best first
    scores: np.ndarray | None  # float32 dot products, same order; None when the query had no vector (keywords)
    first_bit_cut_to: int | None  # token budget the first bit was cut to, when it overflowed alone
    restricted: int  # bits held back from this caller (computed only when asked)
    ranks: np.ndarray | None = None  # float64 rank scores (BM25, fused) when the order is not by similarity
    notes: tuple[str, ...] = ()  # what the caller should know of how the answer was made
    keyword_scores: np.ndarray | None = None  # hybrid: each bit's keyword score, 0-1 (search/keywords.py)
    best_score: float | None = None  # the best rank score found, kept by the thresholds or not (None: nothing found)


def similarities(index: ModelIndex, query: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Dot product of `query` with every row (into `out` when given): the only full pass over the matrix.

    Queries asking at the same time share one pass (host/search/batching.py). These float32 scores only
    find candidates: a row's score here can depend on the kernel, the rows around it and the
    batch. Returned similarities and their order come from `exact_scores`.
    """
    scores = np.empty(index.bit_count, dtype=np.float32) if out is None else out
    return BATCHER.similarities(index, query, scores)


@dataclass(frozen=True)
class Search:
    """How to find the best rows: `exact` scans every float; `approximate` reads the nearest clusters
    of clustered libraries (at least `probes` clusters; through their 8-bit codes with `codes`), or
    the nearest sign codes of the others, until at least `oversample` visible rows are considered."""

    approximate: bool = False
    oversample: int = OVERSAMPLE  # rows considered at least; grown when the budget needs more
    probes: int = PROBES
    codes: bool = True  # clustered libraries read through their 8-bit codes (where they have them), not their floats


EXACT = Search()


class _ExactScan:
    """Every row scored: the matrix-vector product, then the budget over all rows."""

    def __init__(self, index: ModelIndex, query: np.ndarray) -> None:
        self.index = index
        self.query = query
        self.scores = similarities(index, query, SCRATCH.take("scores", index.bit_count, np.float32))
        self.margin = rounding_margin(index.dimension, index.max_norm, query)

    def fill(self, mask: np.ndarray | None, count: int, count_type: CountType, threshold: float | None,
             counts: np.ndarray | None = None) -> Filled:
        scores = self.scores
        if mask is not None:
            scores = SCRATCH.take("masked", len(self.scores), np.float32)
            scores.fill(NEGATIVE_INFINITY)
            np.copyto(scores, self.scores, where=mask)
        visible = self.index.bit_count if mask is None else int(np.count_nonzero(mask))
        rows, exact, cut_to, _ = select(scores, self.index.token_counts, visible, count, count_type,
                                        lambda rows: exact_scores(self.index.gather(rows), self.query), self.margin,
                                        threshold, self.index.tie_keys)
        return Filled(rows, exact, cut_to)


class _SubsetScan:
    """Only some rows scored (those a selective constraint allows): gathered, then the budget over
    them. Ties break by file order, as in the full scan."""

    def __init__(self, index: ModelIndex, query: np.ndarray, rows: np.ndarray) -> None:
        self.index = index
        self.query = query
        self.rows = rows
        self.vectors = index.gather(rows)
        self.scores = self.vectors @ query if len(rows) else np.zeros(0, dtype=np.float32)
        self.margin = rounding_margin(index.dimension, index.max_norm, query)

    def fill(self, mask: np.ndarray | None, count: int, count_type: CountType, threshold: float | None,
             counts: np.ndarray | None = None) -> Filled:
        keep = np.ones(len(self.rows), dtype=bool) if mask is None else mask[self.rows]
        scores = np.where(keep, self.scores, NEGATIVE_INFINITY)
        keys = None if self.index.tie_keys is None else self.index.tie_keys[self.rows]
        positions, exact, cut_to, _ = select(
            scores, self.index.token_counts[self.rows], int(np.count_nonzero(keep)), count, count_type,
            partial(exact_scores_of, self.vectors, self.query), self.margin, threshold, keys)
        return Filled(self.rows[positions], exact, cut_to)


class _SignCodeScan:
    """The nearest sign codes, re-scored exactly; the pool grows until the budget is filled."""

    def __init__(self, index: ModelIndex, query: np.ndarray, oversample: int) -> None:
        self.index = index
        self.query = query
        self.oversample = oversample
        self.margin = rounding_margin(index.dimension, index.max_norm, query)
        self.distances = np.concatenate([hamming_distances(lib.sign_codes, query) for lib in index.segments])

    def fill(self, mask: np.ndarray | None, count: int, count_type: CountType, threshold: float | None,
             counts: np.ndarray | None = None) -> Filled:
        distances = self.distances if mask is None else np.where(mask, self.distances, HIDDEN_DISTANCE)
        visible = self.index.bit_count if mask is None else int(np.count_nonzero(mask))
        wanted = count if count_type == "bit" else FIRST_GUESS_FOR_TOKENS
        pool = min(visible, max(self.oversample, GROWTH * wanted))
        # Equal distances go to the earlier row in file order, and candidates stay in row order, so
        # which bits fill the pool never depends on where hidden rows sit (they must influence nothing).
        order = np.arange(len(distances)) if self.index.tie_keys is None else self.index.tie_keys
        keys = distances.astype(np.int64) * len(distances) + order
        while True:
            if pool >= visible // 2:  # nothing left to save: scan exactly
                return _ExactScan(self.index, self.query).fill(mask, count, count_type, threshold)
            candidates = np.sort(np.argpartition(keys, pool)[:pool])
            vectors = self.index.gather(candidates)
            tie_keys = None if self.index.tie_keys is None else self.index.tie_keys[candidates]
            positions, exact, cut_to, full = select(
                vectors @ self.query, self.index.token_counts[candidates], pool, count, count_type,
                partial(exact_scores_of, vectors, self.query), self.margin, threshold, tie_keys)
            # Complete when the budget is full or the list reached the threshold within the pool.
            if full:
                return Filled(candidates[positions], exact, cut_to)
            pool = min(visible, pool * GROWTH)


class _Approximate:
    """The cluster scan, with an exact scan behind it for a pool that would hold most rows."""

    def __init__(self, index: ModelIndex, query: np.ndarray, search: Search) -> None:
        self.index, self.query = index, query
        self.clusters = ClusterScan(index, query, search.probes, search.oversample, codes=search.codes)
        self.exact: _ExactScan | None = None

    def fill(self, mask: np.ndarray | None, count: int, count_type: CountType, threshold: float | None,
             counts: np.ndarray | None = None) -> Filled:
        filled = self.clusters.fill(mask, count, count_type, threshold, counts)
        if filled is not None:
            return filled
        self.exact = self.exact or _ExactScan(self.index, self.query)
        return self.exact.fill(mask, count, count_type, threshold)


Scan = _ExactScan | _SubsetScan | _SignCodeScan | _Approximate


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
    a token or a tie. `constraint` (a bool mask over the rows, host.search.model_text.constraint_mask)
    is ANDed with that visibility: it narrows, never widens. `similarity_threshold` ends the
    list at the first bit scoring below it, before the budget. With `count_restricted`, the
    budget is filled a second time as if every tag were granted (same constraint and threshold),
    to tell how many bits were held back. The search mode changes how candidates are found,
    never the budget rules.
    """
    with SCRATCH.lent():  # the working buffers of this query: none of them outlives it
        return _rank(index, query, granted, count, count_type, count_restricted, search, constraint,
                     similarity_threshold)


def _rank(index: ModelIndex, query: np.ndarray, granted: frozenset[str], count: int, count_type: CountType,
          count_restricted: bool, search: Search, constraint: np.ndarray | None,
          similarity_threshold: float | None) -> Selection:
    visible = index.visible_rows(granted)
    scan: Scan
    if constraint is not None and np.count_nonzero(constraint) <= SUBSET_SHARE * index.bit_count:
        scan = _SubsetScan(index, query, np.flatnonzero(constraint))  # exact, and cheaper than either scan
    elif search.approximate and index.clusters is not None:
        scan = _Approximate(index, query, search)
    elif search.approximate:
        scan = _SignCodeScan(index, query, search.oversample)
    else:
        scan = _ExactScan(index, query)
    known = isinstance(scan, _Approximate) and constraint is None  # per-cluster counts of a grant are cached
    rows, scores, cut_to = scan.fill(narrowed(visible, constraint), count, count_type, similarity_threshold,
                                     index.cluster_visible_counts(granted) if known else None)
    restricted = 0
    if count_restricted and visible is not None:
        every_tag = frozenset(index.tags)
        everything = narrowed(index.visible_rows(every_tag), constraint)
        every = scan.fill(everything, count, count_type, similarity_threshold,
                          index.cluster_visible_counts(every_tag) if known else None)
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
