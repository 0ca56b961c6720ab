"""Step `http_query`: the cache-miss extra of a query over HTTP beside faiss IVFFlat (issue 20).

The measuring lives in scripts/bench_http_query.py (one keep-alive connection, each body asked
twice, faiss timed between the slices of HTTP queries in the same run; the host with default
settings and at the fewest probes reaching recall@10 >= 0.99).
"""

from __future__ import annotations

from typing import Any

import bench_http_query

from .config import Config
from .step import SERVER, Numbers, Results, Size, Step


def measure(size: Size) -> Numbers | None:
    if size.bits < 100_000:
        return None
    config = size.config
    return bench_http_query.measure_http_query(config.workdir, size.bits, queries_measured=100 if config.quick else 400,
                                               seed=config.seed)


def report(results: Results, config: Config) -> list[str]:
    gathered: list[Any] = [entry["http_query"] for entry in results["sizes"].values() if entry.get("http_query")]
    return [bench_http_query.report(measured) for measured in gathered]


STEP = Step("http_query", "a top-10 query over HTTP: the cache-miss extra beside faiss IVFFlat, recall@10 (100k+)",
            SERVER, measure, report)
