"""Embed an import's new texts: by token length within a window, several calls at once, each call cached as it lands.

Texts arrive as files are read (`add`). Once `window` texts wait (and at `finish`, or when reading
is about to be slow and the embedder has a run free: `keep_busy`) they are sorted
by token count and cut into calls of `batch_size` texts, so the texts of a call are of one length
and the local model pads little; with `bucketing` off, calls take texts in the order they came.
Up to `concurrency` calls run at once in worker threads (the local model's runs on separate cores,
a remote service's requests in flight). Each call's vectors are stored in the cache as soon as it
returns, from this thread (the cache's SQLite connection is this thread's), and kept by text key,
so the library keeps its own order whatever order calls finish in.

A failed call (after the embedder's own retries) stops the import with its EmbedderFailed, Ctrl-C
with KeyboardInterrupt; either way the calls already running are waited for and cached first:
nothing paid for is lost, and the next run starts from there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

import numpy as np

from host.importer.cache import ImportCache
from host.importer.embedding import GuardedEmbedder

DEFAULT_WINDOW = 512  # texts sorted together: a second of reading, and calls of nearly equal length


class EmbeddingQueue:
    def __init__(self, embedder: GuardedEmbedder, cache: ImportCache, *, batch_size: int, concurrency: int,
                 window: int = DEFAULT_WINDOW, bucketing: bool = True,
                 on_embedded: Callable[[int], None] = lambda count: None) -> None:
        if batch_size < 1 or concurrency < 1 or window < 1:
            raise ValueError("batch_size, concurrency and window must be at least 1")
        self.embedder = embedder
        self.cache = cache
        self.batch_size = batch_size
        self.concurrency = concurrency
        self.window = window
        self.bucketing = bucketing
        self.on_embedded = on_embedded
        self.vectors: dict[bytes, np.ndarray] = {}  # every text embedded by this queue, by text key
        self.seconds = 0.0  # from the first call sent to the last one back
        self._waiting: list[tuple[bytes, str, int]] = []
        self._queued: set[bytes] = set()
        self._calls: dict[Future[np.ndarray], list[bytes]] = {}
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="import-embed")
        self._started: float | None = None

    def add(self, key: bytes, text: str, token_count: int) -> None:
        """Queue a text (once per key); landed calls are cached meanwhile."""
        if key in self._queued:
            return
        self._queued.add(key)
        self._waiting.append((key, text, token_count))
        if len(self._waiting) >= self.window:
            self._send_waiting()
        self._collect(block=False)

    def keep_busy(self) -> None:
        """Reading is about to take a while (a page to OCR): send what waits if a run is free, rather than
        leave the embedder idle until a window fills."""
        self._collect(block=False)
        if self._waiting and len(self._calls) < self.concurrency:
            self._send_waiting()

    def finish(self) -> dict[bytes, np.ndarray]:
        """Send what waits, wait for every call, cache it; the vectors by text key."""
        self._send_waiting()
        while self._calls:
            self._collect(block=True)
        self._pool.shutdown()
        return self.vectors

    def abandon(self) -> None:
        """After a failure or Ctrl-C: drop the calls not started, stop the running ones' retries, wait for
        them and cache what landed."""
        self.embedder.stop()
        self._pool.shutdown(wait=True, cancel_futures=True)
        for call in [call for call in self._calls if call.done() and not call.cancelled()]:
            if call.exception() is None:
                self._store(call)

    def _send_waiting(self) -> None:
        waiting, self._waiting = self._waiting, []
        if self.bucketing:
            waiting.sort(key=lambda item: item[2])
        # Keep at most one window queued ahead of the workers: reading then waits for embedding.
        while len(self._calls) > self.concurrency:
            self._collect(block=True)
        if waiting and self._started is None:
            self._started = time.perf_counter()
        for start in range(0, len(waiting), self.batch_size):
            batch = waiting[start:start + self.batch_size]
            call = self._pool.submit(self.embedder.embed, [text for _, text, _ in batch])
            self._calls[call] = [key for key, _, _ in batch]

    def _collect(self, block: bool) -> None:
        """Cache the calls that have landed (waiting for one if `block`); raise the first failure."""
        if not self._calls:
            return
        done, _ = wait(list(self._calls), timeout=None if block else 0, return_when=FIRST_COMPLETED)
        for call in done:
            if call.exception() is not None:
                failure = call.exception()
                self.abandon()
                assert failure is not None
                raise failure
            self._store(call)

    def _store(self, call: Future[np.ndarray]) -> None:
        keys = self._calls.pop(call)
        vectors = call.result()
        self.cache.put_many(zip(keys, vectors, strict=True))
        self.vectors.update(zip(keys, vectors, strict=True))
        self.on_embedded(len(keys))
        if self._started is not None:
            self.seconds = time.perf_counter() - self._started
