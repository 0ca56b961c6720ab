"""Micro-batching of full scans: queries that wait for the same matrix are scored in one product.

An exact query reads the whole matrix once (586 MB at 100k bits of 1536 dimensions): alone, it
is bound by memory bandwidth. Queries that arrive while a scan runs wait for it to finish, then
are scored together, as one matrix-matrix product that reads the matrix once for all of them
(16 queries cost ~3x one, not 16x, on the 2-core machine of docs/performance.md). Nobody waits
on purpose: a query that finds no scan running starts one at once, alone; company only forms
while a scan runs, so a batch never waits longer than the scan before it.

The product gives each query the same fast float32 scores it would get alone, up to float32
rounding. Those scores only choose candidates (host/budget.py re-scores every row within the
rounding margin exactly), so every answer is identical to one-at-a-time ranking.

One batcher per process (`BATCHER`); every thread of the process (the server's thread pool)
shares it, so with `serve --workers N` each worker batches its own requests. A batch's product
may be split over `threads` threads by rows (`configure`): one product at a time per process
uses the cores without queries fighting over them.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from host.index import ModelIndex
from host.products import rows_dots_many

MAX_BATCH = 64  # queries scored together at most
BATCH_FROM = 4_096  # bits from which batching pays (below, one product takes tens of microseconds)
SPLIT_FROM = 32_768  # bits from which a product is split over the batcher's threads


@dataclass
class _Ticket:
    """One query waiting for its scores: `out` is filled, then `done` is set."""

    query: np.ndarray
    out: np.ndarray
    done: threading.Event = field(default_factory=threading.Event)
    lead: bool = False  # woken to run the next batch rather than with its scores
    failure: BaseException | None = None


class ScanBatcher:
    """Scores of every row for queries arriving together, one product per batch."""

    def __init__(self, max_batch: int = MAX_BATCH, batch_from: int = BATCH_FROM, threads: int = 1) -> None:
        self.max_batch = max_batch
        self.batch_from = batch_from
        self.threads = 1
        self._helpers: ThreadPoolExecutor | None = None
        self.configure(threads=threads)
        self._lock = threading.Lock()
        self._waiting: dict[int, deque[_Ticket]] = {}  # per ModelIndex (by identity)
        self._running: set[int] = set()
        self.batches = 0  # products run (for the metrics and the benchmark)
        self.batched_queries = 0

    def configure(self, *, threads: int | None = None, max_batch: int | None = None) -> None:
        """Threads per product (1: the calling thread alone) and the largest batch; 1 turns batching off."""
        if max_batch is not None:
            self.max_batch = max(1, max_batch)
        if threads is not None and max(1, threads) != self.threads:
            if self._helpers is not None:
                self._helpers.shutdown(wait=False)
            self.threads = max(1, threads)
            self._helpers = (ThreadPoolExecutor(self.threads - 1, thread_name_prefix="scan")
                             if self.threads > 1 else None)

    def similarities(self, index: ModelIndex, query: np.ndarray, out: np.ndarray) -> np.ndarray:
        """`out` filled with the dot product of `query` and every row of `index` (float32)."""
        if index.bit_count < self.batch_from or self.max_batch <= 1:
            return self._score(index, query[np.newaxis, :], [out])
        key = id(index)
        ticket = _Ticket(query, out)
        with self._lock:
            self._waiting.setdefault(key, deque()).append(ticket)
            ticket.lead = key not in self._running
            if ticket.lead:
                self._running.add(key)
        if not ticket.lead:
            ticket.done.wait()
        if ticket.lead:
            self._run_batch(index, key)
        if ticket.failure is not None:
            raise ticket.failure
        return out

    def _run_batch(self, index: ModelIndex, key: int) -> None:
        """Score the waiting queries (this thread's first among them), then hand the lead on."""
        with self._lock:
            waiting = self._waiting[key]
            batch = [waiting.popleft() for _ in range(min(len(waiting), self.max_batch))]
        try:
            self._score(index, np.stack([ticket.query for ticket in batch]), [ticket.out for ticket in batch])
        except BaseException as problem:  # every waiting caller hears of it, not only this thread
            for ticket in batch:
                ticket.failure = problem
        finally:
            with self._lock:
                self.batches += 1
                self.batched_queries += len(batch)
                following = self._waiting[key][0] if self._waiting[key] else None
                if following is None:
                    self._running.discard(key)
                    del self._waiting[key]
                else:
                    following.lead = True
            for ticket in batch:
                ticket.lead = False
                ticket.done.set()
            if following is not None:
                following.done.set()


    def _score(self, index: ModelIndex, queries: np.ndarray, outs: list[np.ndarray]) -> np.ndarray:
        """`score_rows`, its rows split over this batcher's threads (this one does the first part)."""
        helpers = self._helpers
        if helpers is None or index.bit_count < SPLIT_FROM:
            return score_rows(index, queries, outs)
        bounds = np.linspace(0, index.bit_count, self.threads + 1).astype(np.int64).tolist()
        parts = [helpers.submit(score_rows, index, queries, outs, start, stop)
                 for start, stop in itertools.pairwise(bounds[1:])]
        score_rows(index, queries, outs, bounds[0], bounds[1])
        for part in parts:
            part.result()
        return outs[0]


def score_rows(index: ModelIndex, queries: np.ndarray, outs: list[np.ndarray], first: int = 0,
               last: int | None = None) -> np.ndarray:
    """Fast scores of rows [first, last) of `index` (all by default) for each query (`queries[i]`
    into `outs[i]`), reading those rows once (host/products.py)."""
    last = index.bit_count if last is None else last
    for library, offset in zip(index.libraries, index.offsets[:-1].tolist()):
        start, stop = max(first, offset), min(last, offset + library.bit_count)
        if start < stop:
            rows_dots_many(library.embeddings[start - offset : stop - offset], queries,
                           [out[start:stop] for out in outs])
    return outs[0]


BATCHER = ScanBatcher()
