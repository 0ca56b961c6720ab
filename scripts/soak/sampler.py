"""The sampler: the resident memory (RSS and PSS) of the server and its workers, every second."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import psutil

from host.service.harness import RunningHost

from .server import server_processes


def memory_now(server: RunningHost) -> tuple[int, int]:
    """RSS and PSS in bytes, summed over the server and its workers (PSS counts shared pages once)."""
    rss = pss = 0
    for process in server_processes(server):
        try:
            memory = process.memory_full_info()
        except psutil.Error:
            continue
        rss += memory.rss
        pss += getattr(memory, "pss", memory.rss)
    return rss, pss


@dataclass
class Sampler:
    server: RunningHost
    stop: threading.Event
    interval: float = 1.0
    samples: list[tuple[int, int]] = field(default_factory=list)  # (rss, pss) each interval

    def run(self) -> None:
        self.samples.append(memory_now(self.server))
        while not self.stop.wait(self.interval) and len(self.samples) < 100_000:
            self.samples.append(memory_now(self.server))

    @property
    def peak_rss(self) -> int:
        return max((rss for rss, _ in self.samples), default=0)

    @property
    def peak_pss(self) -> int:
        return max((pss for _, pss in self.samples), default=0)
