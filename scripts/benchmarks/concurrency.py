"""Step `concurrency`: requests/s and p50/p99 of a real server at 1, 4, 16 and 64 connections.

The measuring lives in scripts/bench_concurrency.py (wrk with distinct queries, the answer cache
off, exact and the default search, the one-at-a-time floor and an identity check in the same run).
"""

from __future__ import annotations

from typing import Any

import bench_concurrency

from .config import Config, label
from .http_load import wrk_missing
from .step import SERVER, Numbers, Results, Size, Step


def measure(size: Size) -> Numbers | None:
    if size.bits < 100_000:
        return None
    config = size.config
    return bench_concurrency.measure_concurrency(config.workdir, size.bits, seconds=config.http_seconds, seed=config.seed)


def report(results: Results, config: Config) -> list[str]:
    gathered: dict[str, Any] = {label(bits): entry["concurrency"] for bits, entry in results["sizes"].items()
                                if entry.get("concurrency")}
    return [bench_concurrency.report(gathered)] if gathered else []


STEP = Step("concurrency", "wrk at 1-64 connections, distinct queries: req/s, p50/p99, CPU ceiling (100k+)",
            SERVER, measure, report, wrk_missing)
