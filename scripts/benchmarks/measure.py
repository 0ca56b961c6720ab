"""Timing and the searches compared: the host's rank(), the numpy floor, faiss IndexFlatIP."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from host.catalog.model_index import ModelIndex
from host.search.engine import EXACT, CountType, Search, Selection, rank

from .config import COUNT
from .report import summary

EVERYONE: frozenset[str] = frozenset()  # the synthetic libraries have no private bits


def cpu_seconds(pids: list[int]) -> float:
    """CPU time (user + system) these processes have used: what a server spent, whatever the load."""
    import psutil

    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
        except psutil.Error:
            continue
    return total


def interleaved(functions: dict[str, Callable[[np.ndarray], Any]], queries: np.ndarray, repetitions: int,
                budget: float) -> dict[str, dict[str, float]]:
    """Time each function on the same queries, in rotating order, bounded by count and time."""
    times: dict[str, list[float]] = {name: [] for name in functions}
    names = list(functions)
    for function in functions.values():  # warm-up, untimed
        function(queries[0])
    deadline = time.perf_counter() + budget
    for repetition in range(repetitions):
        query = queries[repetition % len(queries)]
        for name in names[repetition % len(names):] + names[:repetition % len(names)]:
            started = time.perf_counter()
            functions[name](query)
            times[name].append(time.perf_counter() - started)
        if time.perf_counter() > deadline and repetition >= 4:
            break
    return {name: summary(values) for name, values in times.items()}


def floor_search(embeddings: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """The least any exact search over the matrix can do: `E @ q` and a partition for the top 10."""
    def search(query: np.ndarray) -> np.ndarray:
        scores = embeddings @ query
        top = np.argpartition(scores, len(scores) - 10)[-10:]
        return top[np.argsort(-scores[top])]
    return search


def host_search(index: ModelIndex, search: Search = EXACT, count: int = COUNT,
                count_type: CountType = "token") -> Callable[[np.ndarray], Selection]:
    """host.search.engine.rank as the server calls it, for everyone, with this budget."""
    def run(query: np.ndarray) -> Selection:
        return rank(index, query, granted=EVERYONE, count=count, count_type=count_type, search=search)
    return run


def faiss_search(embeddings: np.ndarray) -> Callable[[np.ndarray], Any] | None:
    """faiss IndexFlatIP top 10 over a copy of the matrix; None without faiss (the `bench` extra)."""
    try:
        import faiss  # type: ignore[import-not-found]
    except ImportError:
        return None
    flat = faiss.IndexFlatIP(embeddings.shape[1])
    flat.add(np.ascontiguousarray(embeddings))
    return lambda query: flat.search(query[np.newaxis, :], 10)
