"""Prometheus text-format counters, gauges and latency histograms, kept in-process.

Every family is declared once below with its help text, so `/metrics` carries `# HELP` and
`# TYPE` lines. Label values come from clients (a method name, a status), so each family keeps at
most `MAX_SERIES` label sets: past that, new ones are counted under `other`, and no request can
grow memory or the page. `/metrics` is as public as every other path: it counts only what anyone
may see.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass

from host.service.prometheus import Histogram, Labels, heading, sample

MAX_SERIES = 200
OTHER = "other"


@dataclass(frozen=True)
class Family:
    kind: str  # counter | gauge | histogram
    help: str


FAMILIES = {
    "polymath_requests_total": Family("counter", "HTTP requests answered, by method and status."),
    "polymath_errors_total": Family("counter", "Requests refused with an error body, by status."),
    "polymath_queries_total": Family("counter", "Queries answered, by answer format."),
    "polymath_query_cache_hits_total": Family("counter", "Queries answered from the answer cache."),
    "polymath_query_seconds": Family("histogram", "Time to answer a query, in seconds."),
    "polymath_request_seconds": Family("histogram", "Time to answer any request, in seconds."),
    "polymath_public_libraries_loaded": Family("gauge", "Libraries with at least one public bit."),
    "polymath_public_bits_loaded": Family("gauge", "Public bits loaded."),
    "polymath_public_generation": Family("gauge", "Goes up each time what anyone may see changes."),
    "polymath_library_problems": Family("gauge", "Library files outside access/ folders that could not be loaded."),
}


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, dict[Labels, float]] = defaultdict(dict)
        self._gauges: dict[str, float] = {}
        self._histograms = {name: Histogram() for name, family in FAMILIES.items() if family.kind == "histogram"}

    def count(self, name: str, amount: float = 1, **labels: str) -> None:
        assert FAMILIES[name].kind == "counter", name
        with self._lock:
            series = self._counters[name]
            key = tuple(sorted(labels.items()))
            if key not in series and len(series) >= MAX_SERIES:
                key = tuple((label, OTHER) for label, _ in key)
            series[key] = series.get(key, 0.0) + amount

    def gauge(self, name: str, value: float) -> None:
        assert FAMILIES[name].kind == "gauge", name
        with self._lock:
            self._gauges[name] = value

    def observe(self, name: str, seconds: float) -> None:
        with self._lock:
            self._histograms[name].observe(seconds)

    def render(self) -> str:
        lines = []
        with self._lock:
            for name, family in FAMILIES.items():
                lines += heading(name, family.kind, family.help)
                if family.kind == "counter":
                    lines += [sample(name, labels, value) for labels, value in sorted(self._counters[name].items())]
                elif family.kind == "gauge" and name in self._gauges:
                    lines.append(sample(name, (), self._gauges[name]))
                elif family.kind == "histogram":
                    lines += self._histograms[name].render(name)
        return "\n".join(lines) + "\n"
