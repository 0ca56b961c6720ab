"""Step `latency`: in-process exact rank() (1500 tokens) against the numpy floor and faiss, per size."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import numpy as np

from .config import Config, label
from .libraries import matrix_of, near_queries
from .measure import faiss_search, floor_search, host_search, interleaved
from .report import ms, ratio, say, table
from .step import INDEX, Numbers, Results, Size, Step

NOTES_FLOOR_P50 = {1_000: 0.16e-3, 10_000: 1.3e-3, 100_000: 27e-3, 1_000_000: 263e-3}  # PERFORMANCE-NOTES


def measure(size: Size) -> Numbers:
    say(f"{label(size.bits)}: exact latency vs floor")
    index, config = size.index, size.config
    embeddings = matrix_of(index)
    bits = len(embeddings)
    queries = near_queries(embeddings, 64, size.rng)
    functions: dict[str, Callable[[np.ndarray], Any]] = {"host_exact": host_search(index), "floor": floor_search(embeddings)}
    if bits <= config.faiss_max:
        faiss = faiss_search(embeddings)
        if faiss is not None:
            functions["faiss_flat_ip"] = faiss
    result: Numbers = interleaved(functions, queries, config.repetitions(bits), config.budget)
    result["bits_returned_p50"] = float(np.median([len(host_search(index)(q).rows) for q in queries[:16]]))
    functions.clear()
    gc.collect()
    return result


def report(results: Results, config: Config) -> list[str]:
    rows = []
    for bits, entry in results["sizes"].items():
        latency = entry.get("latency")
        if latency:
            host, floor, faiss = latency["host_exact"], latency["floor"], latency.get("faiss_flat_ip")
            rows.append([label(bits), ms(host["p50"]), ms(host["p99"]), ms(floor["p50"]), ms(floor["p99"]),
                         ratio(host["p50"], floor["p50"]), ratio(host["min"], floor["min"]),
                         ms(faiss["p50"]) if faiss else "-", ratio(faiss["p50"], floor["p50"]) if faiss else "-",
                         host["n"], ms(NOTES_FLOOR_P50.get(bits))])
    if not rows:
        return []
    return [table("Exact ranking in-process (host.search.engine.rank, 1500 tokens) vs the floor, ms",
                  ["bits", "host p50", "host p99", "floor p50", "floor p99", "host/floor p50", "host/floor min",
                   "faiss p50", "faiss/floor", "samples", "notes' floor p50"], rows,
                  "floor = `E @ q` + `np.argpartition` top 10 on the same memory-mapped matrix; "
                  "measured interleaved, same queries; `min` (the fastest of each) is the least noisy ratio on a "
                  "shared machine. Target: host/floor <= 1.2 at 100k.")]


STEP = Step("latency", "in-process p50/p99 of host.search.engine.rank (exact, 1500 tokens) vs the floor and faiss", INDEX,
            measure, report)
