"""Micro-batching (issue 15): concurrent exact queries share one pass over the matrix, and every
caller gets exactly the answer it would get alone.

Real threads against a real compiled library: the answers are compared with the same queries
ranked one at a time, with different budgets, grants, constraints and thresholds in one batch.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from librarian import TEST_MODEL, make_bit, write_library

from host.catalog.generations import load_catalog
from host.catalog.model_index import ModelIndex
from host.search.batching import BATCHER, STEP_ROWS, score_rows
from host.search.engine import Selection, rank

BITS = 40_000  # over BATCH_FROM and SPLIT_FROM: batched, and split over threads when configured
DIMENSION = 16


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> ModelIndex:
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((BITS, DIMENSION)).astype(np.float32)
    vectors[100:110] = vectors[7]  # ties
    bits = [make_bit(row, vector, int(rng.integers(5, 60)), **({"access_tag": "team"} if row % 4 == 0 else {}))
            for row, vector in enumerate(vectors)]
    folder = tmp_path_factory.mktemp("batching") / "libraries"
    write_library(folder / "big.json", {"version": 1, "embedding_model": TEST_MODEL, "bits": bits})
    return load_catalog(folder).models[TEST_MODEL]


def questions(index: ModelIndex, count: int) -> list[dict[str, Any]]:
    """Queries of every kind, so that one batch mixes budgets, grants, constraints and thresholds."""
    rng = np.random.default_rng(4)
    asked = []
    for number in range(count):
        query = rng.standard_normal(DIMENSION).astype(np.float32) if number % 5 else index.gather(np.array([7]))[0]
        asked.append({
            "query": query,
            "granted": frozenset({"team"}) if number % 3 == 0 else frozenset(),
            "count": [10, 500, 3, 40][number % 4],
            "count_type": ["bit", "token"][number % 2],
            "constraint": (np.arange(index.bit_count) % 3 != 1) if number % 7 == 0 else None,
            "similarity_threshold": 1.5 if number % 6 == 0 else None,
            "count_restricted": number % 8 == 0,
        })
    return asked


def answer(index: ModelIndex, question: dict[str, Any]) -> Selection:
    arguments = dict(question)
    return rank(index, arguments.pop("query"), **arguments)


@pytest.fixture(params=[1, 2], ids=["one thread per product", "products split over two threads"])
def product_threads(request: pytest.FixtureRequest) -> Iterator[int]:
    BATCHER.configure(threads=request.param)
    yield request.param
    BATCHER.configure(threads=1)


def test_queries_ranked_together_get_the_answers_they_get_alone(index: ModelIndex, product_threads: int) -> None:
    asked = questions(index, 96)
    alone = [answer(index, question) for question in asked]
    together: list[Selection | None] = [None] * len(asked)
    start = threading.Barrier(8)
    steps, scored = BATCHER.steps, BATCHER.step_queries

    def ask(first: int) -> None:
        start.wait()
        for number in range(first, len(asked), 8):
            together[number] = answer(index, asked[number])

    threads = [threading.Thread(target=ask, args=(first,)) for first in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    for one, other in zip(alone, together):
        assert other is not None
        assert other.rows.tolist() == one.rows.tolist()
        assert other.scores.tobytes() == one.scores.tobytes()
        assert (other.first_bit_cut_to, other.restricted) == (one.first_bit_cut_to, one.restricted)
    steps_each = -(-index.bit_count // (STEP_ROWS * product_threads))
    assert BATCHER.step_queries - scored == len(asked) * steps_each, "every query went round the matrix once"
    assert BATCHER.steps - steps < len(asked) * steps_each, "eight threads asking at once never shared a step"


def test_a_batch_product_scores_each_query_as_a_product_alone_would_up_to_rounding(index: ModelIndex) -> None:
    queries = np.random.default_rng(5).standard_normal((5, DIMENSION)).astype(np.float32)
    outs = [np.empty(index.bit_count, dtype=np.float32) for _ in queries]

    score_rows(index, queries, outs)

    matrix = index.gather(np.arange(index.bit_count)).astype(np.float64)
    for query, out in zip(queries, outs):
        np.testing.assert_allclose(out, matrix @ query.astype(np.float64), rtol=0, atol=1e-5)


def test_a_failing_batch_fails_every_caller_in_it_and_the_next_batch_still_runs(index: ModelIndex) -> None:
    wrong = np.ones(DIMENSION + 1, dtype=np.float32)  # a query of the wrong dimension cannot be scored

    with pytest.raises(ValueError):
        rank(index, wrong, granted=frozenset(), count=3, count_type="bit")

    right = rank(index, np.ones(DIMENSION, dtype=np.float32), granted=frozenset(), count=3, count_type="bit")
    assert len(right.rows) == 3
