"""Micro-batching through a real server (issue 15): `serve --workers 2 --scan-threads 2`, many
clients at once, distinct queries, no answer cache: every answer byte-identical to the same query
asked alone. Each worker process has its own batcher, shared by its threads."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import numpy as np
from librarian import TEST_MODEL, b64, make_bit, write_library

BITS = 6_000  # over BATCH_FROM (4,096): exact queries are batched
DIMENSION = 16


def test_concurrent_clients_of_two_workers_get_the_answers_they_get_alone(run_host, tmp_path: Path) -> None:
    rng = np.random.default_rng(21)
    vectors = rng.standard_normal((BITS, DIMENSION)).astype(np.float32)
    write_library(tmp_path / "libraries" / "big.json", {"version": 1, "embedding_model": TEST_MODEL, "bits": [
        make_bit(row, vector, int(rng.integers(5, 80))) for row, vector in enumerate(vectors)]})
    host = run_host(tmp_path / "libraries", "--workers", "2", "--scan-threads", "2", "--search", "exact",
                    "--answer-cache-bytes", "0")
    bodies = [{"query_embedding": b64(rng.standard_normal(DIMENSION)), "count": [600, 25][number % 2],
               "count_type": ["token", "bit"][number % 2], "omit": ""} for number in range(64)]

    with httpx.Client(base_url=host.url, timeout=60) as client:
        alone = [client.post("/", json=body).content for body in bodies]
    together: list[bytes | None] = [None] * len(bodies)
    start = threading.Barrier(16)

    def ask(first: int) -> None:
        with httpx.Client(base_url=host.url, timeout=60) as client:
            start.wait()
            for number in range(first, len(bodies), 16):
                together[number] = client.post("/", json=bodies[number]).content

    threads = [threading.Thread(target=ask, args=(first,)) for first in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert all(answer.startswith(b'{"version":1') for answer in alone)
    assert together == alone


def test_metrics_tell_how_many_queries_share_a_step(run_host, tmp_path: Path) -> None:
    rng = np.random.default_rng(22)
    vectors = rng.standard_normal((BITS, DIMENSION)).astype(np.float32)
    write_library(tmp_path / "libraries" / "big.json", {"version": 1, "embedding_model": TEST_MODEL, "bits": [
        make_bit(row, vector, 20) for row, vector in enumerate(vectors)]})
    host = run_host(tmp_path / "libraries", "--search", "exact", "--answer-cache-bytes", "0")
    body = {"query_embedding": b64(rng.standard_normal(DIMENSION)), "count": 5, "count_type": "bit"}

    with httpx.Client(base_url=host.url, timeout=60) as client:
        for _ in range(3):
            assert client.post("/", json=body).status_code == 200
        metrics = client.get("/metrics").text

    values = dict(line.split() for line in metrics.splitlines() if line.startswith("polymath_scan_step"))
    assert "# TYPE polymath_scan_steps_total counter" in metrics
    # Alone, each query rides one full pass: one step of up to 8,192 rows each, one query per step.
    assert float(values["polymath_scan_steps_total"]) == 3
    assert float(values["polymath_scan_step_queries_total"]) == 3
