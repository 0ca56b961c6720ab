"""Approximate search over clustered segments (an inverted file): the nearest clusters, scored.

A clustered segment (host/store/clusters.py) stores each cluster's rows back to back. A query ranks the
centroids, takes the nearest clusters until they hold enough rows the caller may see (at least
`probes` clusters and `oversample` visible rows, and GROWTH times the bits the budget wants),
scores those contiguous slices of the one memory-mapped matrix, and fills the budget from them
exactly as an exact scan would (host/search/budget.py: margin candidates re-scored exactly, ties in file
order). If that pool cannot fill the budget, it grows; once it would hold half the visible rows,
an exact scan is cheaper and the caller is told to run one.

A model is scanned through its libraries' 8-bit codes (`Search.codes`, host/search/query.py;
host/store/codes.py) where the compiled scan is built, or where its floats exceed --populate-bytes:
a quarter of the bytes of its floats, so that a store larger than memory keeps what queries scan
in memory; otherwise through its floats. Candidates within `CODE_ERRORS` typical code errors of
the k-th best (the compiled scan's weight rounding included; as well as the float32 rounding margin)
are re-scored exactly from the floats, so every similarity returned is exact, and so is the order
among the rows scanned.

Invariants: hidden rows are masked inside the slices and never counted, so they decide nothing
(not which clusters are read, not a place, not a tie); the clusters read depend only on the
query, the centroids and the rows the caller may see.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from host.catalog.model_index import ClusterTable, ModelIndex
from host.search.budget import (
    FIRST_GUESS_FOR_TOKENS,
    GROWTH,
    NEGATIVE_INFINITY,
    CountType,
    Filled,
    exact_scores,
    exact_scores_of,
    rounding_margin,
    select,
)
from host.search.products import row_dots
from host.search.scratch import SCRATCH
from host.store import kernels
from host.store.codes import BLOCK_VALUES as CODE_VALUES
from host.store.codes import CodedQuery

COUNT_CHUNK = 64  # clusters whose visible rows are counted at a time, under a constraint
# Typical code errors (host/store/codes.py) a candidate may fall short of the k-th code score and
# still be re-scored: 4 leaves a swap out of the exact top 10 about once in 30,000 near ties.
CODE_ERRORS = 4.0


class ClusterScan:
    """The nearest clusters of one query: ranked once, read as the budget needs."""

    def __init__(self, index: ModelIndex, query: np.ndarray, probes: int, oversample: int, *,
                 codes: bool = True) -> None:
        assert index.clusters is not None
        self.index = index
        self.table: ClusterTable = index.clusters
        self.query = query
        self.probes = max(1, probes)
        self.oversample = oversample
        self.margin = rounding_margin(index.dimension, index.max_norm, query)
        self.coded = [CodedQuery(query, segment.code_scale)
                      if codes and segment.codes is not None and segment.code_scale is not None else None
                      for segment in index.segments]
        errors = [coded.typical_error for coded in self.coded if coded is not None]
        if errors:
            self.margin += CODE_ERRORS * max(errors)
        similarities = SCRATCH.take("centroid_similarities", self.table.count, np.float32)
        if kernels.compiled is not None:  # their codes: a quarter of the bytes, in one call
            CodedQuery(query, self.table.centroid_scale).scores(self.table.centroid_codes, [(0, self.table.count)],
                                                               similarities)
        else:
            row_dots(self.table.centroids, query, similarities)
        self.similarities = similarities
        self.order = _nearest_first(similarities, self._likely_needed())

    def _likely_needed(self) -> int:
        """Clusters the first pool will probably take (twice what the average size says, and 16 at
        least): only those are sorted; `_CountsInOrder` asks for the full order if it needs more."""
        table = self.table
        average = max(1, (int(table.stops[-1]) - int(table.starts[0])) // table.count)
        return max(16, self.probes, 2 * -(-self.oversample // average))

    def fill(self, mask: np.ndarray | None, count: int, count_type: CountType, threshold: float | None,
             counts: np.ndarray | None = None) -> Filled | None:
        """The budget filled from the nearest clusters; None when an exact scan would be cheaper.

        `mask` is what the caller may see (None: everything); `counts`, if known, its rows per cluster.
        """
        visible = self.index.bit_count if mask is None else int(np.count_nonzero(mask))
        wanted = count if count_type == "bit" else FIRST_GUESS_FOR_TOKENS
        target = max(self.oversample, GROWTH * wanted)
        probes = self.probes
        in_order = _CountsInOrder(self, mask, counts)
        loose = sum(in_order.loose_counts)
        while True:
            chosen, pooled = in_order.enough(probes, target - loose)
            pooled += loose
            if 2 * pooled >= visible and len(chosen) < self.table.count:
                return None
            rows, scores = self._pool(np.sort(chosen), mask)
            keys = rows if self.index.tie_keys is None else self.index.tie_keys[rows]
            positions, exact, cut_to, full = select(
                scores, self.index.token_counts[rows], pooled, count, count_type,
                partial(self._exact_scores, rows), self.margin, threshold, keys)
            if full or len(chosen) == self.table.count:
                return Filled(rows[positions], exact, cut_to)
            probes, target = len(chosen) * GROWTH, target * GROWTH

    def full_order(self) -> np.ndarray:
        """Every cluster, nearest first (ties to the lower cluster)."""
        if len(self.order) < self.table.count:
            self.order = _nearest_first(self.similarities, self.table.count)
        return self.order

    def _exact_scores(self, rows: np.ndarray, positions: np.ndarray) -> np.ndarray:
        if len(self.index.segments) == 1:
            return exact_scores_of(self.index.segments[0].embeddings, self.query, rows[positions])
        return exact_scores(self.index.gather(rows[positions]), self.query)

    def _pool(self, clusters: np.ndarray, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Rows of `clusters` and of the loose segments, their fast scores (-inf where hidden)."""
        table, index = self.table, self.index
        ranges = [(start, stop) for start, stop in
                  [*zip(table.starts[clusters].tolist(), table.stops[clusters].tolist()), *table.loose] if stop > start]
        sizes = [stop - start for start, stop in ranges]
        total = sum(sizes)
        rows = SCRATCH.take("pool_rows", total, np.int64)
        scores = SCRATCH.take("pool_scores", total, np.float32)
        owners = ([0] * len(ranges) if len(index.segments) == 1 else
                  (np.searchsorted(index.offsets, [start for start, _ in ranges], side="right") - 1).tolist())
        block = None
        first = position = 0
        while first < len(ranges):  # the ranges of one segment at a time (sorted: each segment's are together)
            owner, last = owners[first], first + 1
            while last < len(ranges) and owners[last] == owner:
                last += 1
            segment, base = index.segments[owner], int(index.offsets[owner])
            local = [(start - base, stop - base) for start, stop in ranges[first:last]]
            size = sum(sizes[first:last])
            coded, part = self.coded[owner], slice(position, position + size)
            if coded is not None and segment.codes is not None:  # the codes, numbering their rows as they go
                if block is None and coded.compiled is None:
                    block = SCRATCH.take("code_block", CODE_VALUES - CODE_VALUES % index.dimension, np.float32)
                coded.scores(segment.codes, local, scores[part], None if block is None else
                             block.reshape(-1, index.dimension), rows[part], base)
            else:
                _number_rows(ranges[first:last], sizes[first:last], rows[part])
                at = position
                for start, stop in local:
                    row_dots(segment.embeddings[start:stop], self.query, scores[at : at + stop - start])
                    at += stop - start
            first, position = last, position + size
        if mask is not None:
            np.copyto(scores, NEGATIVE_INFINITY, where=~mask[rows])
        return rows, scores


def _number_rows(ranges: list[tuple[int, int]], sizes: list[int], out: np.ndarray) -> None:
    """`out` = the rows of `ranges` one after the other: ones, each range's first row in place of the
    one at its start, summed (a few steps however many ranges: a query at 10M reads fifty)."""
    if not ranges:
        return
    out.fill(1)
    starts = np.cumsum([0, *sizes[:-1]])
    jumps = np.array([start for start, _ in ranges], dtype=np.int64)
    jumps[1:] -= np.array([stop - 1 for _, stop in ranges[:-1]], dtype=np.int64)
    out[starts] = jumps
    np.cumsum(out, out=out)


def _nearest_first(similarities: np.ndarray, needed: int) -> np.ndarray:
    """The clusters of the `needed` + 1 highest centroid `similarities` (every one tied with the last
    too), highest first, ties to the lower cluster. A stable sort of every centroid took 23 µs for
    316 (100k bits) and ~1 ms for 10,000 (10M); a partition and a sort of the few a query reads, 8 µs
    and 0.2 ms; the compiled loop (a heap, then an insertion sort of the few) one call in place of five."""
    if len(similarities) < 4 * needed:
        order: np.ndarray = np.argsort(-similarities, kind="stable")
        return order
    compiled = kernels.compiled
    if compiled is not None:
        nearest = np.empty(len(similarities), dtype=np.int64)
        found = compiled.highest_first(similarities, needed, SCRATCH.take("nearest_heap", needed + 1, np.float32),
                                       nearest)
        return nearest[:found]
    distances = -similarities
    boundary = np.partition(distances, needed)[needed]
    nearest = np.flatnonzero(distances <= boundary)  # in cluster order: a stable sort keeps ties so
    return nearest[np.argsort(distances[nearest], kind="stable")]


class _CountsInOrder:
    """Visible rows of each cluster in the query's order, counted only as far as needed."""

    def __init__(self, scan: ClusterScan, mask: np.ndarray | None, counts: np.ndarray | None) -> None:
        self.scan, self.table, self.mask = scan, scan.table, mask
        if counts is None and mask is None:
            counts = self.table.sizes
        self.counts = counts
        self.running = None if counts is None else np.cumsum(counts[scan.order])
        self.counted = np.zeros(0, dtype=np.int64)  # running totals of the first clusters, under a mask
        self.loose_counts = [stop - start if mask is None else int(np.count_nonzero(mask[start:stop]))
                             for start, stop in self.table.loose]

    def enough(self, probes: int, rows: int) -> tuple[np.ndarray, int]:
        """The fewest nearest clusters (at least `probes`) holding `rows` visible rows, and that count."""
        clusters = self.table.count
        if self.counts is not None:
            assert self.running is not None
            if len(self.running) < clusters and (len(self.running) < probes or self.running[-1] < rows):
                self.running = np.cumsum(self.counts[self.scan.full_order()])  # past the clusters sorted
            running = self.running
        else:
            while len(self.counted) < clusters and (len(self.counted) < probes or
                                                     (self.counted[-1] if len(self.counted) else 0) < rows):
                self._count_more(max(COUNT_CHUNK, len(self.counted)))
            running = self.counted
        taken = int(running.searchsorted(rows, side="left")) + 1 if rows > 0 else 1
        taken = min(max(probes, taken), clusters, len(running))
        return self.scan.order[:taken], int(running[taken - 1])

    def _count_more(self, how_many: int) -> None:
        assert self.mask is not None
        mask, table = self.mask, self.table
        order = self.scan.order if len(self.scan.order) >= len(self.counted) + how_many else self.scan.full_order()
        more = order[len(self.counted) : len(self.counted) + how_many]
        counts = [int(np.count_nonzero(mask[start:stop]))
                  for start, stop in zip(table.starts[more].tolist(), table.stops[more].tolist())]
        base = int(self.counted[-1]) if len(self.counted) else 0
        self.counted = np.concatenate([self.counted, base + np.cumsum(counts, dtype=np.int64)])
