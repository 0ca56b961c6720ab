"""The host's embedders: model id -> Embedder, and the path a request takes to a vector.

`build_embedders` makes the registry from `serve`'s settings. `Embedders.embed_query` is what a
text query awaits: the vector comes from an LRU cache keyed by (model, text), or from the
model's embedder run in that model's own small thread pool (never on the event loop), within a
time limit. Identical texts asked at the same time are embedded once.

Invariants:
- at most `concurrency` `embed` calls run at once per model; more wait in that pool's queue;
- a caller waits at most `timeout` seconds (queue + embedding), then gets `EmbedderTimeout`;
  work nobody waits for any more is cancelled if it has not started;
- cached vectors are read-only arrays, shared by every caller; the cache holds at most
  `cache_entries` texts of at most MAX_CACHED_TEXT_CHARS characters each;
- only `EmbedderError` (and its `EmbedderTimeout`) and `NoEmbedder` come out of the async calls.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
from cachetools import LRUCache

from host.embedders import minilm
from host.embedders.base import Embedder
from host.embedders.errors import EmbedderError, EmbedderTimeout, NoEmbedder
from host.embedders.openai_http import OpenAIEmbedder
from host.embedders.stats import EmbeddingStats

EMBEDDER_CHOICES = ("auto", "none")
OPENAI_URL = "https://api.openai.com/v1"
MAX_CACHED_TEXT_CHARS = 2000  # longer texts are not kept as cache keys: they rarely repeat, and would fill memory
log = logging.getLogger("host.embedders")
T = TypeVar("T")


@dataclass
class _Flight:
    """One query text being embedded, and how many callers wait for it."""

    task: asyncio.Task[np.ndarray]
    waiters: int = 0


@dataclass
class _Model:
    embedder: Embedder
    pool: ThreadPoolExecutor
    flights: dict[str, _Flight] = field(default_factory=dict)


class Embedders:
    """The embedders a host keeps, by library model id, with the async query path."""

    def __init__(
        self,
        embedders: Iterable[Embedder] = (),
        *,
        concurrency: int = 2,
        timeout: float = 10.0,
        cache_entries: int = 1024,
        stats: EmbeddingStats | None = None,
    ) -> None:
        """`concurrency`: embed calls at once per model. `timeout`: seconds a caller waits.
        `cache_entries`: query vectors kept (0 turns the cache off)."""
        if concurrency < 1 or timeout <= 0 or cache_entries < 0:
            raise ValueError("concurrency and timeout must be positive, cache_entries not negative")
        self.timeout = timeout
        self.stats = stats or EmbeddingStats()
        self._cache: LRUCache[tuple[str, str], np.ndarray] | None = LRUCache(cache_entries) if cache_entries else None
        self._models: dict[str, _Model] = {}
        for embedder in embedders:
            if embedder.model in self._models:
                raise ValueError(f"two embedders for model {embedder.model!r}")
            pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="embedder")
            self._models[embedder.model] = _Model(embedder, pool)

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(self._models)

    def __contains__(self, model: object) -> bool:
        return model in self._models

    def __len__(self) -> int:
        return len(self._models)

    def get(self, model: str) -> Embedder:
        """The embedder of `model`; NoEmbedder if the host has none."""
        try:
            return self._models[model].embedder
        except KeyError:
            raise NoEmbedder(model) from None

    def start_loading(self) -> list[Future[None]]:
        """Load the local models in the background now, so the first text query does not wait
        for it (a failure is logged here and raised again on first use)."""
        futures = []
        for state in self._models.values():
            load: Callable[[], None] | None = getattr(state.embedder, "load", None)
            if load is not None:
                future = state.pool.submit(load)
                future.add_done_callback(_log_failed_load(state.embedder.model))
                futures.append(future)
        return futures

    # ------------------------------------------------------------------ async: requests

    async def embed_query(self, model: str, text: str) -> np.ndarray:
        """The read-only float32 vector of one query text."""
        state = self._state(model)
        key = (model, text)
        cached = self._cache.get(key) if self._cache is not None else None
        if cached is not None:
            self.stats.count("cache_hits", model)
            return cached
        self.stats.count("cache_misses", model)
        flight = state.flights.get(text)
        if flight is None:  # nobody is embedding this text yet: start it
            task = asyncio.ensure_future(self._in_pool(state, lambda: self._embed(state.embedder, [text])[0]))
            flight = state.flights[text] = _Flight(task)
            task.add_done_callback(lambda done: self._landed(state, key, done))
        flight.waiters += 1
        try:
            return await self._within_limit(model, asyncio.shield(flight.task))
        finally:
            flight.waiters -= 1
            if flight.waiters == 0 and not flight.task.done():
                flight.task.cancel()  # nobody waits any more: drop it if it has not started
                if state.flights.get(text) is flight:  # a later caller starts afresh
                    del state.flights[text]

    async def embed_texts(self, model: str, texts: Sequence[str], timeout: float | None = None) -> np.ndarray:
        """float32 (len(texts), dimension) for several texts (/v1/embeddings): cached rows are
        reused, the others embedded in one call, within `timeout` seconds (default: the registry's)."""
        state = self._state(model)
        if not texts:  # reading an HTTP embedder's dimension may ask its service: not on the event loop
            dimension = await self._within_limit(model, self._in_pool(state, lambda: state.embedder.dimension), timeout)
            return np.empty((0, dimension), dtype=np.float32)
        rows: list[np.ndarray | None] = [self._cache.get((model, text)) if self._cache is not None else None
                                         for text in texts]
        missing = sorted({text for text, row in zip(texts, rows, strict=True) if row is None})
        self.stats.count("cache_hits", model, len(texts) - sum(row is None for row in rows))
        self.stats.count("cache_misses", model, sum(row is None for row in rows))
        if missing:
            work = self._in_pool(state, lambda: self._embed(state.embedder, missing))
            fresh = await self._within_limit(model, work, timeout)
            by_text = dict(zip(missing, fresh, strict=True))
            for text, vector in by_text.items():
                self._remember((model, text), vector)
            rows = [by_text[text] if row is None else row for text, row in zip(texts, rows, strict=True)]
        return np.stack([row for row in rows if row is not None])

    async def count_tokens(self, model: str, texts: Sequence[str], timeout: float | None = None) -> list[int]:
        """The model tokenizer's count of each text (no special tokens), off the event loop. (An
        HTTP embedder asks its service for each text it has not embedded alone before.)"""
        state = self._state(model)
        counter = state.embedder.count_tokens
        work = self._in_pool(state, lambda: [counter(text) for text in texts])
        return await self._within_limit(model, work, timeout)

    # ------------------------------------------------------------------ sync: the importer

    def embed_many(
        self, model: str, texts: Sequence[str], batch_size: int = 64,
        progress: Callable[[int, int], None] | None = None,
    ) -> np.ndarray:
        """float32 (len(texts), dimension) in batches of `batch_size`, in the calling thread, no
        cache, no time limit; `progress(done, total)` after each batch. For `polymath-host import`."""
        embedder = self.get(model)
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        parts = []
        for start in range(0, len(texts), batch_size):
            parts.append(self._embed(embedder, texts[start : start + batch_size]))
            if progress is not None:
                progress(min(start + batch_size, len(texts)), len(texts))
        if not parts:
            return np.empty((0, embedder.dimension), dtype=np.float32)
        return np.concatenate(parts)

    def close(self) -> None:
        """Stop the worker threads (running calls finish; queued ones are dropped)."""
        for state in self._models.values():
            state.pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ internals

    def _state(self, model: str) -> _Model:
        try:
            return self._models[model]
        except KeyError:
            raise NoEmbedder(model) from None

    def _embed(self, embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
        """`embedder.embed`, timed, its output checked, any failure an EmbedderError."""
        started = time.perf_counter()
        try:
            vectors = embedder.embed(texts)
        except EmbedderError:
            self.stats.count("errors", embedder.model)
            raise
        except Exception as error:  # a bug or a library failure: one line, never a traceback to a client
            self.stats.count("errors", embedder.model)
            log.exception("embedder of %s failed", embedder.model)
            raise EmbedderError(f"embedding with {embedder.model} failed ({type(error).__name__})") from error
        self.stats.observe(embedder.model, time.perf_counter() - started, len(texts))
        if vectors.dtype != np.float32 or vectors.shape != (len(texts), embedder.dimension):
            self.stats.count("errors", embedder.model)
            raise EmbedderError(f"embedder of {embedder.model} returned {vectors.dtype} {vectors.shape} "
                                f"for {len(texts)} texts of dimension {embedder.dimension}")
        return vectors

    async def _in_pool(self, state: _Model, work: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(state.pool, work)

    async def _within_limit(self, model: str, awaitable: Awaitable[T], timeout: float | None = None) -> T:
        limit = self.timeout if timeout is None else timeout
        try:
            return await asyncio.wait_for(awaitable, limit)
        except TimeoutError:
            self.stats.count("timeouts", model)
            raise EmbedderTimeout(f"embedding with {model} took longer than {limit:g} s") from None

    def _landed(self, state: _Model, key: tuple[str, str], task: asyncio.Task[np.ndarray]) -> None:
        flight = state.flights.get(key[1])
        if flight is not None and flight.task is task:
            del state.flights[key[1]]
        if not task.cancelled() and task.exception() is None:
            self._remember(key, task.result())

    def _remember(self, key: tuple[str, str], vector: np.ndarray) -> None:
        vector.flags.writeable = False
        if self._cache is not None and len(key[1]) <= MAX_CACHED_TEXT_CHARS:
            self._cache[key] = vector


def build_embedders(
    embedder: str = "auto",
    embedder_url: str | None = None,
    embedder_model: str | None = None,
    embedder_library_model: str | None = None,
    embedder_dimension: int | None = None,
    *,
    cache_dir: Path | None = None,
    precision: str = "fp32",
    device: str = "cpu",
    concurrency: int = 2,
    timeout: float = 10.0,
    cache_entries: int = 1024,
    stats: EmbeddingStats | None = None,
) -> Embedders:
    """The registry `serve` keeps. `embedder`: "auto" (the local MiniLM embedder when the `embed`
    extra is installed, else none, said in one log line) or "none" (text queries off).
    `embedder_model` NAME adds the OpenAI-compatible embedder at `embedder_url` (default OpenAI's
    API), serving `embedder_library_model` (default `openai.com:NAME`) with vectors of
    `embedder_dimension` (default: learned from its first answer). `cache_dir`: where the local
    model keeps its built graphs (default: the user's cache); `precision` (fp32, int8) and `device`
    (cpu, cuda): how it runs. ValueError: bad settings."""
    if embedder not in EMBEDDER_CHOICES:
        raise ValueError(f"embedder must be one of {', '.join(EMBEDDER_CHOICES)}, not {embedder!r}")
    remote = embedder_url is not None or embedder_model is not None or embedder_library_model is not None
    if embedder == "none":
        if remote:
            raise ValueError("embedder 'none' turns text queries off: do not also give an embedder URL or model")
        log.info("text queries are off (embedder none)")
        return Embedders(concurrency=concurrency, timeout=timeout, cache_entries=cache_entries, stats=stats)
    minilm.check_choice(precision, device)
    chosen: dict[str, Embedder] = {}
    problem = minilm.missing_requirement()
    if problem is None:
        chosen[minilm.MODEL] = minilm.MiniLMEmbedder(cache_dir=cache_dir, precision=precision, device=device)
    else:
        log.info("no text queries for %s: %s", minilm.MODEL, problem)
    if remote:
        if not embedder_model:
            raise ValueError("an embedder URL needs the remote model NAME too (embedder_model)")
        http = OpenAIEmbedder(embedder_url or OPENAI_URL, embedder_model, model=embedder_library_model,
                              dimension=embedder_dimension, timeout=timeout)
        if http.model in chosen:
            log.info("%s is served by %s instead of the local embedder", http.model, http.service)
        chosen[http.model] = http
        log.info("text queries for %s go to %s (model %s)", http.model, http.service, http.remote_model)
    return Embedders(chosen.values(), concurrency=concurrency, timeout=timeout, cache_entries=cache_entries,
                     stats=stats)


def _log_failed_load(model: str) -> Callable[[Future[None]], None]:
    def report(future: Future[None]) -> None:
        if not future.cancelled() and future.exception() is not None:
            log.error("loading the embedder of %s failed: %s", model, future.exception())
    return report
