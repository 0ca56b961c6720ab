"""Step `approximate`: the approximate search as served (nearest clusters), from 10k bits.

Its latency against exact on the same queries, recall@10 against exact (and by pool size), how
hard the queries are for sign codes (the approximate search of libraries stored without
clusters), and a profile of where rank() spends its time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from host.catalog.model_index import ModelIndex
from host.search import cluster_scan, engine
from host.search.engine import EXACT, Search, rank
from host.search.query import SearchPolicy
from host.store.sign_codes import hamming_distances

from .config import COUNT, Config, label
from .libraries import matrix_of, near_queries
from .measure import EVERYONE, host_search, interleaved
from .report import ms, ratio, say, table
from .step import INDEX, Numbers, Results, Size, Step

PHASES = ("cluster scoring", "select (clusters)", "hamming", "pool selection", "select", "gather", "other")


def server_search(bits: int) -> Search:
    """The approximate search `serve` uses by default for a library of this size."""
    return SearchPolicy(mode="approximate").for_bits(bits)


def measure(size: Size) -> Numbers | None:
    """Latency and recall of the server's default approximate search against exact, on the same queries."""
    if size.bits < 10_000:
        return None
    say(f"{label(size.bits)}: approximate latency and recall")
    index, config = size.index, size.config
    bits = index.bit_count
    count = config.approximate_queries(bits)
    queries = near_queries(matrix_of(index), count, size.rng)
    approximate = server_search(bits)
    exact_top = [host_search(index, EXACT, 10, "bit")(q).rows for q in queries]
    exact_full = [host_search(index)(q).rows for q in queries]
    latency = interleaved({"approximate": host_search(index, approximate), "exact": host_search(index)},
                          queries, config.repetitions(bits), config.budget)
    identical = np.mean([np.array_equal(host_search(index, approximate)(q).rows, rows) for q, rows in zip(queries, exact_full)])
    default_recall = np.mean([len(np.intersect1d(host_search(index, approximate, 10, "bit")(q).rows, truth)) / 10
                              for q, truth in zip(queries, exact_top)])
    pools = {}
    for oversample in config.oversamples:
        search = Search(approximate=True, oversample=oversample)
        recalls, times = [], []
        deadline = time.perf_counter() + config.budget
        for query, truth in zip(queries, exact_top):
            started = time.perf_counter()
            found = host_search(index, search, 10, "bit")(query).rows
            times.append(time.perf_counter() - started)
            recalls.append(len(np.intersect1d(found, truth)) / len(truth))
            if time.perf_counter() > deadline and len(recalls) >= 20:
                break
        pools[oversample] = {"recall_at_10": float(np.mean(recalls)), "min_recall": float(np.min(recalls)),
                             "queries": len(recalls), "p50_bit10": float(np.median(times)),
                             "falls_back_to_exact": max(oversample, 40) >= bits // 2}
    return {"queries": count, "oversample": approximate.oversample, "latency": latency, "recall_at_10": float(default_recall),
            "identical_1500_token_results": float(identical), "sweep": pools,
            "difficulty": difficulty(index, queries[:20]), "profile": profile_approximate(index, queries[:32], config)}


def difficulty(index: ModelIndex, queries: np.ndarray) -> dict[str, float]:
    """How hard the queries are for sign codes: near-ties around the 10th bit, and how deep in
    Hamming order the true top 10 lie (the pool an approximate search needs to find them all)."""
    embeddings, codes = matrix_of(index), index.libraries[0].sign_codes
    gaps, crowd, depth = [], [], []
    for query in queries:
        scores = embeddings @ query
        top = np.argpartition(scores, len(scores) - 11)[-11:]
        top = top[np.argsort(-scores[top])]
        gaps.append(float(scores[top[9]] - scores[top[10]]))
        crowd.append(int(np.count_nonzero(scores >= scores[top[9]] - 0.02)))
        distances = hamming_distances(codes, query).astype(np.int64)
        # position in (distance, row) order of the deepest of the true top 10
        order = np.arange(len(distances))
        deepest = max(int(np.count_nonzero((distances < distances[row]) | ((distances == distances[row]) & (order < row))))
                      for row in top[:10])
        depth.append(deepest + 1)
    return {"gap_10_11_p50": float(np.median(gaps)), "within_0.02_of_10th_p50": float(np.median(crowd)),
            "pool_needed_p50": float(np.percentile(depth, 50)), "pool_needed_p90": float(np.percentile(depth, 90)),
            "pool_needed_max": float(max(depth))}


@contextlib.contextmanager
def timing_calls(phases: dict[str, float]) -> Iterator[None]:
    """Accumulate the time spent in the engine's building blocks while rank() runs, whatever its shape."""
    originals = {"cluster scoring": (cluster_scan, "row_dots"), "select (clusters)": (cluster_scan, "select"),
                 "hamming": (engine, "hamming_distances"), "pool selection": (np, "argpartition"),
                 "select": (engine, "select"), "gather": (ModelIndex, "gather")}
    saved = {name: getattr(owner, attribute) for name, (owner, attribute) in originals.items()}

    def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                phases[name] = phases.get(name, 0.0) + time.perf_counter() - started
        return wrapper
    try:
        for name, (owner, attribute) in originals.items():
            setattr(owner, attribute, timed(name, saved[name]))
        yield
    finally:
        for name, (owner, attribute) in originals.items():
            setattr(owner, attribute, saved[name])


def profile_approximate(index: ModelIndex, queries: np.ndarray, config: Config) -> dict[str, float]:
    """The server's default approximate rank() taken apart (1500 tokens): median seconds per phase.
    `other` is the rest: masks, sort keys, the re-scoring product, Python."""
    search = server_search(index.bit_count)
    samples: dict[str, list[float]] = {}
    deadline = time.perf_counter() + config.budget
    for query in queries:
        phases: dict[str, float] = {}
        with timing_calls(phases):
            started = time.perf_counter()
            rank(index, query, granted=EVERYONE, count=COUNT, count_type="token", search=search)
            total = time.perf_counter() - started
        phases["other"] = total - sum(phases.values())
        phases["rank_total"] = total
        for name, seconds in phases.items():
            samples.setdefault(name, []).append(seconds)
        if time.perf_counter() > deadline:
            break
    return {name: float(np.median(values)) for name, values in samples.items()}


def report(results: Results, config: Config) -> list[str]:
    rows, recall_rows, profile_rows, hard_rows = [], [], [], []
    for bits, entry in results["sizes"].items():
        approximate = entry.get("approximate")
        if not approximate:
            continue
        latency = approximate["latency"]
        floor = entry.get("latency", {}).get("floor", {}).get("p50")
        rows.append([label(bits), approximate["oversample"], ms(latency["approximate"]["p50"]),
                     ms(latency["approximate"]["p99"]), ms(latency["exact"]["p50"]), ratio(latency["approximate"]["p50"], floor),
                     f"{approximate['recall_at_10']:.4f}", f"{approximate['identical_1500_token_results']:.3f}",
                     approximate["queries"]])
        for oversample, pool in approximate["sweep"].items():
            recall_rows.append([label(bits), oversample, f"{pool['recall_at_10']:.4f}", f"{pool['min_recall']:.1f}",
                                ms(pool["p50_bit10"]), pool["queries"], "yes" if pool["falls_back_to_exact"] else "no"])
        profile = approximate["profile"]
        profile_rows.append([label(bits), *(ms(profile.get(p, 0.0)) for p in PHASES), ms(profile["rank_total"])])
        hard = approximate["difficulty"]
        hard_rows.append([label(bits), f"{hard['gap_10_11_p50']:.4f}", f"{hard['within_0.02_of_10th_p50']:.0f}",
                          f"{hard['pool_needed_p50']:.0f}", f"{hard['pool_needed_p90']:.0f}", f"{hard['pool_needed_max']:.0f}"])
    if not rows:
        return []
    return [
        table("Approximate search as served by default (nearest clusters: at least --probes, "
              "and max(1000, bits/250) rows), ms",
              ["bits", "oversample", "p50", "p99", "exact p50", "approx/floor", "recall@10", "same 1500-token result",
               "queries"], rows, "Targets: recall@10 >= 0.99; 1M in <= 50 ms p50. "
              "Below 10k bits (libraries kept in file order) `auto` serves exact."),
        table("Recall@10 against exact by oversample (count=10 bits)",
              ["bits", "oversample", "recall@10", "worst query", "p50 ms", "queries", "falls back to exact"], recall_rows),
        table("How hard the queries are for sign codes (20 queries)",
              ["bits", "score gap #10-#11", "bits within 0.02 of #10", "pool for all top 10: p50", "p90", "max"], hard_rows,
              "The pool is the position, in Hamming-distance order, of the deepest of the exact top 10."),
        table("Where the default approximate rank() spends its time (median ms per query, 1500 tokens)",
              ["bits", *PHASES, "rank() total"], profile_rows,
              "Measured by timing the engine's own calls inside rank(): the clusters' dot products and their "
              "select; for libraries without clusters hamming_distances, np.argpartition and select; "
              "ModelIndex.gather; `other` is the rest (ranking centroids, masks, the re-scoring product, Python)."),
    ]


STEP = Step("approximate", "cluster search as served: p50/p99, recall@10 against exact, a profile of where time goes", INDEX,
            measure, report)
