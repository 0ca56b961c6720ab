"""The Prometheus text format: samples with escaped labels, and latency histograms.

Shared by the edge's request metrics (host/web/metrics.py) and the embedders' (host/embedders/
stats.py), so both write the same format the same way. Not thread-safe: callers hold their lock.
"""

from __future__ import annotations

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

Labels = tuple[tuple[str, str], ...]


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def sample(name: str, labels: Labels, value: float, number_format: str = "g") -> str:
    """One line: `name{label="value",...} number`."""
    number = format(value, number_format)
    if not labels:
        return f"{name} {number}"
    label_text = ",".join(f'{key}="{escape(text)}"' for key, text in labels)
    return f"{name}{{{label_text}}} {number}"


def heading(name: str, kind: str, help_text: str) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]


class Histogram:
    """Counts of observations at or under each bucket bound, their sum and their number."""

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

    def render(self, name: str, labels: Labels = ()) -> list[str]:
        lines = [sample(f"{name}_bucket", (*labels, ("le", str(bound))), observed)
                 for bound, observed in zip(LATENCY_BUCKETS, self.buckets, strict=True)]
        lines.append(sample(f"{name}_bucket", (*labels, ("le", "+Inf")), self.count))
        lines.append(sample(f"{name}_sum", labels, self.total, ".6f"))
        lines.append(sample(f"{name}_count", labels, self.count))
        return lines
