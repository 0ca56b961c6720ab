#!/usr/bin/env python3
"""Figures of the local all-MiniLM-L6-v2 embedder (host/embedders/minilm.py), in one run.

- load time (files read and checked, graph built, ONNX Runtime session started);
- latency of one short query text (p50/p99 over repeated, uncached calls);
- throughput in texts/s at batch sizes 1, 8 and 64 over the sample library's passages;
- agreement with the sample libraries' stored vectors (made by sentence-transformers on torch):
  cosine min/mean/max over every bit, top-10 lists of every bit's text and of free-text queries,
  token counts equal to every bit's `token_count`.

Usage: python scripts/embedder_figures.py [--threads N] [--repeat N]   (needs the `embed` extra)
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from host.embedders.minilm import MODEL, MiniLMEmbedder  # noqa: E402  (after the path is set)

LIBRARIES = (ROOT / "libraries" / "sample.json", ROOT / "libraries" / "access" / "unpublished" / "drafts.json")
QUERIES = (
    "a great fish swallowed the prophet", "love your enemies", "in the beginning God created the heaven",
    "the Lord is my shepherd", "charity suffereth long", "vanity of vanities", "the prodigal son",
    "thrown into a den of lions", "a virtuous woman", "the road to Damascus", "shipwreck on an island",
    "where were you when I laid the foundations of the earth",
)


def read_bits() -> tuple[list[str], np.ndarray, list[int]]:
    texts, vectors, counts = [], [], []
    for path in LIBRARIES:
        for bit in json.loads(path.read_text(encoding="utf-8"))["bits"]:
            texts.append(bit["text"])
            vectors.append(np.frombuffer(base64.b64decode(bit["embedding"]), dtype="<f4"))
            counts.append(bit["token_count"])
    return texts, np.stack(vectors), counts


def resident_mib() -> float:
    """This process's resident memory (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def top10(matrix: np.ndarray, query: np.ndarray) -> list[int]:
    return [int(i) for i in np.argsort(-(matrix.astype(np.float64) @ query.astype(np.float64)), kind="stable")[:10]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads (0: one per core)")
    parser.add_argument("--repeat", type=int, default=200, help="calls for the one-query latency")
    args = parser.parse_args()

    began = time.perf_counter()
    import onnx  # noqa: F401  (imported here to time the imports apart from the load)
    import onnxruntime  # type: ignore[import-untyped]  # noqa: F401
    import tokenizers  # noqa: F401

    print(f"imports of onnxruntime, onnx, tokenizers: {time.perf_counter() - began:.2f} s")
    with tempfile.TemporaryDirectory() as cache:
        for label, options in (("no cache", {"cache": False}), ("first load, cache empty", {"cache_dir": Path(cache)}),
                               ("graph from the cache", {"cache_dir": Path(cache)})):
            started = time.perf_counter()
            MiniLMEmbedder(**options).load()
            print(f"{MODEL}: load {time.perf_counter() - started:.2f} s ({label})")
        before = resident_mib()
        embedder = MiniLMEmbedder(cache_dir=Path(cache), threads=args.threads)
        embedder.load()
        print(f"resident memory of one loaded embedder: +{resident_mib() - before:.0f} MiB (threads={args.threads})")

    # Wall time and this process's CPU time: on a shared machine the CPU time is the steadier figure.
    latencies, cpu = [], []
    for n in range(args.repeat):
        text = f"{QUERIES[n % len(QUERIES)]} {n}"  # a new text each time: no cache anywhere
        began, began_cpu = time.perf_counter(), time.process_time()
        embedder.embed([text])
        latencies.append(time.perf_counter() - began)
        cpu.append(time.process_time() - began_cpu)
    latencies.sort()
    print(f"one query ({len(latencies)} calls): p50 {statistics.median(latencies) * 1000:.2f} ms, "
          f"p99 {latencies[int(len(latencies) * 0.99) - 1] * 1000:.2f} ms; "
          f"CPU time p50 {statistics.median(cpu) * 1000:.2f} ms")

    texts, stored, counts = read_bits()
    host = None
    for batch_size in (1, 8, 64):
        embedder.batch_size, embedder.batch_tokens = batch_size, 1 << 30  # exactly batch_size texts a run
        began, began_cpu = time.perf_counter(), time.process_time()
        vectors = embedder.embed(texts)
        seconds, cpu_seconds = time.perf_counter() - began, time.process_time() - began_cpu
        host = vectors if host is None else host
        print(f"batch {batch_size:>2}: {len(texts) / seconds:6.1f} texts/s, {len(texts) / cpu_seconds:6.1f} per CPU "
              f"second ({len(texts)} passages, {sum(counts)} tokens); max |difference| from batch 1: "
              f"{np.abs(vectors - host).max():.2e}")
    assert host is not None
    embedder.batch_size, embedder.batch_tokens = 64, 512  # the defaults
    began, began_cpu = time.perf_counter(), time.process_time()
    embedder.embed(texts)
    print(f"default batching (64 texts, 512 tokens a run): {len(texts) / (time.perf_counter() - began):6.1f} texts/s, "
          f"{len(texts) / (time.process_time() - began_cpu):6.1f} per CPU second")
    short = [f"{QUERIES[n % len(QUERIES)]} {n}" for n in range(512)]
    for batch_size in (1, 8, 64):
        embedder.batch_size, embedder.batch_tokens = batch_size, 1 << 30
        began, began_cpu = time.perf_counter(), time.process_time()
        embedder.embed(short)
        print(f"short queries, batch {batch_size:>2}: {len(short) / (time.perf_counter() - began):6.1f} texts/s, "
              f"{len(short) / (time.process_time() - began_cpu):6.1f} per CPU second")

    cosine = np.sum(host.astype(np.float64) * stored, axis=1) / np.linalg.norm(host.astype(np.float64), axis=1)
    print(f"cosine to the stored vectors over {len(texts)} bits: min {cosine.min():.9f}, mean {cosine.mean():.9f}, "
          f"max {cosine.max():.9f}; max |component difference| {np.abs(host - stored).max():.2e}")
    same_bits = sum(top10(stored, host[row]) == top10(stored, stored[row]) for row in range(len(texts)))
    print(f"top-10 of each bit's text: identical lists for {same_bits}/{len(texts)} bits")
    queries = embedder.embed(list(QUERIES))
    same_queries = sum(top10(host, q) == top10(stored, q) for q in queries)
    overlap = sum(len(set(top10(host, q)) & set(top10(stored, q))) for q in queries)
    print(f"top-10 of {len(QUERIES)} free-text queries, host vs stored bit vectors: identical lists "
          f"{same_queries}/{len(QUERIES)}, overlap {overlap}/{10 * len(QUERIES)}")
    counted = sum(embedder.count_tokens(text) == count for text, count in zip(texts, counts, strict=True))
    print(f"token counts equal to token_count: {counted}/{len(texts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
