"""Counters and a latency histogram of the embedders, for /metrics (Prometheus text format).

Kept apart from `host.web`'s metrics so the core never imports the HTTP edge: the edge appends
`EmbeddingStats.render_lines()` to its own output. Thread-safe: worker threads record latencies
while the event loop records cache hits.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Collection

from host.service.prometheus import Histogram, heading, sample

COUNTERS = {
    "cache_hits": "polymath_embed_cache_hits_total",
    "cache_misses": "polymath_embed_cache_misses_total",
    "texts": "polymath_embed_texts_total",
    "errors": "polymath_embed_errors_total",
    "timeouts": "polymath_embed_timeouts_total",
}
HELP = {
    "cache_hits": "Query texts whose vector came from the cache, by model.",
    "cache_misses": "Query texts that had to be embedded, by model.",
    "texts": "Texts embedded, by model.",
    "errors": "Embedding calls that failed, by model.",
    "timeouts": "Embeddings that took longer than their time limit, by model.",
}
HISTOGRAM = "polymath_embed_seconds"


class EmbeddingStats:
    """Per model id: cache hits and misses of query texts, texts embedded, failures, timeouts,
    and the seconds each `embed` call took in its worker thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = defaultdict(int)  # (counter, model) -> count
        self._latency: dict[str, Histogram] = defaultdict(Histogram)

    def count(self, counter: str, model: str, amount: int = 1) -> None:
        if counter not in COUNTERS:
            raise KeyError(f"unknown embedding counter {counter!r}")
        with self._lock:
            self._counts[(counter, model)] += amount

    def observe(self, model: str, seconds: float, texts: int) -> None:
        """One finished `embed` call of `texts` texts."""
        with self._lock:
            self._latency[model].observe(seconds)
            self._counts[("texts", model)] += texts

    def value(self, counter: str, model: str) -> int:
        with self._lock:
            return self._counts.get((counter, model), 0)

    def calls(self, model: str) -> int:
        with self._lock:
            return self._latency[model].count if model in self._latency else 0

    def render_lines(self, models: Collection[str] | None = None) -> list[str]:
        """Prometheus text-format lines (no trailing newline), counters then the histogram; with
        `models`, only theirs (the edge passes the models anyone may see)."""
        with self._lock:
            lines = []
            for counter, name in COUNTERS.items():
                lines += heading(name, "counter", HELP[counter])
                lines += [sample(name, (("model", model),), amount)
                          for (kind, model), amount in sorted(self._counts.items())
                          if kind == counter and (models is None or model in models)]
            lines += heading(HISTOGRAM, "histogram", "Seconds each embedding call took, by model.")
            for model, histogram in sorted(self._latency.items()):
                if models is None or model in models:
                    lines += histogram.render(HISTOGRAM, (("model", model),))
            return lines
