"""Shared scans: every exact query in flight reads the matrix in the same pass.

An exact query reads the whole matrix once (586 MB at 100k bits of 1536 dimensions): alone, it
is bound by memory bandwidth, and concurrent queries each streaming it by themselves make a
queue, not a multiplier. Here one pass goes round the matrix step by step (`STEP_ROWS` rows at a
time) for as long as queries want it, and each step scores its rows for every query aboard at
once (host/search/products.py: per-row dot products for a few queries, one matrix-matrix product for
more: 16 queries cost ~3x one, not 16x, on the machine of docs/performance.md). A query boards
at the next step, wherever the pass is, and leaves when it has been round once: it never waits
for company, nor for a pass to finish, only for the step under way (a millisecond or two).

The pass is driven by the thread of one query aboard; when that query has been round, it hands
the pass to another query's thread and returns with its scores, so no caller works for others
longer than its own pass. Boarding is capped (`max_batch` queries per step); the others wait at
the gangway for a seat.

The products give each query the same fast float32 scores it would get alone, up to float32
rounding. Those scores only choose candidates (host/search/budget.py re-scores every row within the
rounding margin exactly), so every answer is identical to one-at-a-time ranking.

One batcher per process (`BATCHER`); every thread of the process (the server's thread pool)
shares it, so with `serve --workers N` each worker shares passes among its own requests. A step
may be split over `threads` threads by rows (`configure`).
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from host.catalog.model_index import ModelIndex
from host.search.products import rows_dots_many

MAX_BATCH = 64  # queries scored together in one step at most
BATCH_FROM = 4_096  # bits from which sharing pays (below, one product takes tens of microseconds)
STEP_ROWS = 8_192  # rows per step and per thread: a boarding query waits one step at most (~3 ms at 1536 dims)


@dataclass(eq=False)
class _Ticket:
    """One query aboard (or waiting to board) a pass: `out` is filled, then `done` is set."""

    query: np.ndarray
    out: np.ndarray
    steps_left: int
    done: threading.Event = field(default_factory=threading.Event)
    drives: bool = False  # woken to drive the pass rather than with its scores
    failure: BaseException | None = None


@dataclass(eq=False)
class _Pass:
    """The pass going round one ModelIndex: where it is, who is aboard, who waits to board."""

    steps: int
    rows_per_step: int
    position: int = 0  # the next step
    aboard: list[_Ticket] = field(default_factory=list)
    boarding: deque[_Ticket] = field(default_factory=deque)


class ScanBatcher:
    """Scores of every row for the queries in flight, one shared pass per ModelIndex."""

    def __init__(self, max_batch: int = MAX_BATCH, batch_from: int = BATCH_FROM, threads: int = 1) -> None:
        self.max_batch = max_batch
        self.batch_from = batch_from
        self.threads = 1
        self._helpers: ThreadPoolExecutor | None = None
        self.configure(threads=threads)
        self._lock = threading.Lock()
        self._passes: dict[int, _Pass] = {}  # per ModelIndex (by identity), while queries want it
        self.steps = 0  # steps run and the queries they scored (the metrics: queries per step = sharing)
        self.step_queries = 0

    def configure(self, *, threads: int | None = None, max_batch: int | None = None) -> None:
        """Threads per step (1: the driving thread alone) and the most queries per step; 1 turns sharing off."""
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
        if query.shape != (index.dimension,):  # refused alone, before it could spoil a shared step
            raise ValueError(f"a query of shape {query.shape} against vectors of dimension {index.dimension}")
        if index.bit_count < self.batch_from or self.max_batch <= 1:
            self._score(index, query[np.newaxis, :], [out], 0, index.bit_count)
            return out
        key = id(index)
        with self._lock:
            shared = self._passes.get(key)
            if shared is None:
                rows_per_step = STEP_ROWS * self.threads
                shared = self._passes[key] = _Pass(-(-index.bit_count // rows_per_step), rows_per_step)
            ticket = _Ticket(query, out, shared.steps)
            ticket.drives = not shared.aboard and not shared.boarding
            shared.boarding.append(ticket)
        if not ticket.drives:
            ticket.done.wait()
        if ticket.drives:
            self._drive(index, key, shared, ticket)
        if ticket.failure is not None:
            raise ticket.failure
        return out

    def _drive(self, index: ModelIndex, key: int, shared: _Pass, mine: _Ticket) -> None:
        """Run steps until `mine` has been round, then hand the pass to another query aboard."""
        while True:
            with self._lock:
                while shared.boarding and len(shared.aboard) < self.max_batch:
                    shared.aboard.append(shared.boarding.popleft())
                aboard = list(shared.aboard)
                step = shared.position
                shared.position = (step + 1) % shared.steps
            start = step * shared.rows_per_step
            stop = min(start + shared.rows_per_step, index.bit_count)
            failure = None
            try:
                self._score(index, np.stack([ticket.query for ticket in aboard]), [ticket.out for ticket in aboard],
                            start, stop)
            except BaseException as problem:  # everyone aboard hears of it, not only this thread
                failure = problem
            finished = []
            for ticket in aboard:
                ticket.steps_left -= 1
                if failure is not None:
                    ticket.failure = failure
                if ticket.steps_left == 0 or failure is not None:
                    finished.append(ticket)
            with self._lock:
                self.steps += 1
                self.step_queries += len(aboard)
                shared.aboard = [ticket for ticket in shared.aboard if ticket not in finished]
                successor = None
                if mine in finished:
                    if not shared.aboard and shared.boarding:
                        shared.aboard.append(shared.boarding.popleft())
                    if shared.aboard:
                        successor = shared.aboard[0]
                        successor.drives = True
                    else:
                        del self._passes[key]
            for ticket in finished:
                if ticket is not mine:
                    ticket.done.set()
            if mine in finished:
                if successor is not None:
                    successor.done.set()
                return

    def _score(self, index: ModelIndex, queries: np.ndarray, outs: list[np.ndarray], start: int, stop: int) -> None:
        """`score_rows` over rows [start, stop), split over this batcher's threads (this one does the first part)."""
        helpers = self._helpers
        if helpers is None or stop - start <= STEP_ROWS:
            score_rows(index, queries, outs, start, stop)
            return
        bounds = np.linspace(start, stop, self.threads + 1).astype(np.int64).tolist()
        parts = [helpers.submit(score_rows, index, queries, outs, first, last)
                 for first, last in itertools.pairwise(bounds[1:])]
        score_rows(index, queries, outs, bounds[0], bounds[1])
        for part in parts:
            part.result()


def score_rows(index: ModelIndex, queries: np.ndarray, outs: list[np.ndarray], first: int = 0,
               last: int | None = None) -> np.ndarray:
    """Fast scores of rows [first, last) of `index` (all by default) for each query (`queries[i]`
    into `outs[i]`), reading those rows once (host/search/products.py)."""
    last = index.bit_count if last is None else last
    for segment, offset in zip(index.segments, index.offsets[:-1].tolist()):
        start, stop = max(first, offset), min(last, offset + segment.bit_count)
        if start < stop:
            rows_dots_many(segment.embeddings[start - offset : stop - offset], queries,
                           [out[start:stop] for out in outs])
    return outs[0]


BATCHER = ScanBatcher()
