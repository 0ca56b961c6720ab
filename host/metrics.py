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
        self._buckets = [0] * len(LATENCY_BUCKETS)
        self._latency_sum = 0.0
        self._latency_count = 0

    def count(self, name: str, amount: float = 1, **labels: str) -> None:
        with self._lock:
            self._counters[(name, tuple(sorted(labels.items())))] += amount

    def gauge(self, name: str, value: float) -> None:
        with self._lock:
            self._gauges[name] = value

    def observe_query_seconds(self, seconds: float) -> None:
        with self._lock:
            self._latency_sum += seconds
            self._latency_count += 1
            for position, bound in enumerate(LATENCY_BUCKETS):
                if seconds <= bound:
                    self._buckets[position] += 1

    def render(self) -> str:
        with self._lock:
            lines = []
            for (name, labels), value in sorted(self._counters.items()):
                label_text = ",".join(f'{key}="{_escape(value_)}"' for key, value_ in labels)
                lines.append(f"{name}{{{label_text}}} {value:g}" if labels else f"{name} {value:g}")
            lines += [f"{name} {value:g}" for name, value in sorted(self._gauges.items())]
            for bound, observed in zip(LATENCY_BUCKETS, self._buckets):
                lines.append(f'polymath_query_seconds_bucket{{le="{bound}"}} {observed}')
            lines.append(f'polymath_query_seconds_bucket{{le="+Inf"}} {self._latency_count}')
            lines.append(f"polymath_query_seconds_sum {self._latency_sum:.6f}")
            lines.append(f"polymath_query_seconds_count {self._latency_count}")
        return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
