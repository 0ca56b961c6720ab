"""Prometheus text-format counters and a latency histogram, kept in-process."""

from __future__ import annotations

import threading
from collections import defaultdict

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = defaultdict(float)
        self._gauges: dict[str, float] = {}
        self._histograms = {name: _Histogram() for name in ("polymath_query_seconds", "polymath_request_seconds")}

    def count(self, name: str, amount: float = 1, **labels: str) -> None:
        with self._lock:
            self._counters[(name, tuple(sorted(labels.items())))] += amount

    def gauge(self, name: str, value: float) -> None:
        with self._lock:
            self._gauges[name] = value

    def observe_query_seconds(self, seconds: float) -> None:
        with self._lock:
            self._histograms["polymath_query_seconds"].observe(seconds)

    def observe_request_seconds(self, seconds: float) -> None:
        with self._lock:
            self._histograms["polymath_request_seconds"].observe(seconds)

    def render(self) -> str:
        with self._lock:
            lines = []
            for (name, labels), value in sorted(self._counters.items()):
                label_text = ",".join(f'{key}="{_escape(value_)}"' for key, value_ in labels)
                lines.append(f"{name}{{{label_text}}} {value:g}" if labels else f"{name} {value:g}")
            lines += [f"{name} {value:g}" for name, value in sorted(self._gauges.items())]
            for name, histogram in self._histograms.items():
                lines += histogram.render(name)
        return "\n".join(lines) + "\n"


class _Histogram:
    def __init__(self) -> None:
        self.buckets = [0] * len(LATENCY_BUCKETS)
        self.total = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        self.total += seconds
        self.count += 1
        for position, bound in enumerate(LATENCY_BUCKETS):
            if seconds <= bound:
                self.buckets[position] += 1

    def render(self, name: str) -> list[str]:
        lines = [f'{name}_bucket{{le="{bound}"}} {observed}' for bound, observed in zip(LATENCY_BUCKETS, self.buckets)]
        lines.append(f'{name}_bucket{{le="+Inf"}} {self.count}')
        lines.append(f"{name}_sum {self.total:.6f}")
        lines.append(f"{name}_count {self.count}")
        return lines


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
