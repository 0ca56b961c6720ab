"""What the abusers did and saw: a count per action, what each kind measured, and every failure."""

from __future__ import annotations

import statistics
import threading
from dataclasses import dataclass, field
from typing import Any

FAILURES_KEPT = 20


@dataclass
class Tally:
    counts: dict[str, int] = field(default_factory=dict)
    observed: dict[str, list[float]] = field(default_factory=dict)  # values by what they measure (unit in the name)
    failures: list[str] = field(default_factory=list)  # the first FAILURES_KEPT
    failure_count: int = 0
    sockets_held: int = 0  # by the socket abusers, now and at most
    most_sockets_held: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, action: str, amount: int = 1) -> None:
        with self.lock:
            self.counts[action] = self.counts.get(action, 0) + amount

    def observe(self, what: str, value: float) -> None:
        with self.lock:
            self.observed.setdefault(what, []).append(value)

    def hold(self, sockets: int) -> None:
        """`sockets` more (or, negative, fewer) held open by an abuser."""
        with self.lock:
            self.sockets_held += sockets
            self.most_sockets_held = max(self.most_sockets_held, self.sockets_held)

    def fail(self, problem: str) -> None:
        with self.lock:
            self.failure_count += 1
            if len(self.failures) < FAILURES_KEPT:
                self.failures.append(problem)

    def summary(self) -> dict[str, Any]:
        with self.lock:
            return {
                "actions": dict(sorted(self.counts.items())),
                "observed (min / median / max)": {
                    what: [round(min(values), 2), round(statistics.median(values), 2), round(max(values), 2)]
                    for what, values in sorted(self.observed.items())},
                "most sockets held at once": self.most_sockets_held,
                "failures": self.failure_count,
                "first failures": list(self.failures),
            }
