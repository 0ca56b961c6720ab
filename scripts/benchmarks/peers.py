"""Step `peers`: the host beside faiss (Flat, IVFFlat, HNSW) and usearch, at 100k bits and up.

The measuring lives in scripts/bench_index.py (each engine in a fresh process, on the same
queries, timed beside the host's own search in that process; one full scan by several kernels;
the compile). This step runs it on the run's synthetic library; the script alone sweeps more.
"""

from __future__ import annotations

from typing import Any

import bench_index

from .config import Config, label
from .step import SERVER, Numbers, Results, Size, Step


def measure(size: Size) -> Numbers | None:
    if size.bits < 100_000:
        return None
    config = size.config
    queries = 50 if config.quick else 200
    budget = 3.0 if config.quick else 20.0
    peers = bench_index.PEERS if size.bits <= config.faiss_max or not config.quick else ("ours", "faiss-ivf", "kernels")
    numbers: dict[str, Any] = {"peers": bench_index.measure_peers(config.workdir, size.bits, peers=peers, queries=queries,
                                                                  budget=budget, seed=config.seed)}
    if not config.quick:
        numbers["compile"] = bench_index.measure_compile(config.workdir, size.bits, config.seed)
    return numbers


def report(results: Results, config: Config) -> list[str]:
    gathered: dict[str, Any] = {"peers": {}, "compile": {}}
    for bits, entry in results["sizes"].items():
        measured = entry.get("peers")
        if measured:
            gathered["peers"][label(bits)] = measured["peers"]
            if "compile" in measured:
                gathered["compile"][label(bits)] = measured["compile"]
    text = bench_index.report(gathered)
    return [text] if text else []


STEP = Step("peers", "faiss Flat/IVFFlat/HNSW and usearch beside the host: build, memory, p50, recall@10 (100k+)",
            SERVER, measure, report)
