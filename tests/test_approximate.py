"""Approximate search against exact search: sign-bit codes (libraries stored in file order) and
the nearest clusters (libraries stored clustered, host/store/clusters.py), re-scored exactly.

Known answers: each real ada-002 bit queried with its own embedding, and clustered synthetic bits
queried with a slightly perturbed copy of themselves. The mode changes how candidates are found,
never which bits a budget admits.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from librarian import TEST_MODEL, make_library, write_library

from host.catalog.generations import load_catalog
from host.catalog.model_index import ModelIndex
from host.library.embeddings import ADA_002
from host.library.format import parse_library
from host.search.engine import EXACT, Search, rank
from host.store.compiled import SourceKey, file_sha256, open_segment, write_compiled

NOBODY: frozenset[str] = frozenset()


def top(index: ModelIndex, query: np.ndarray, search: Search, count: int = 10, count_type: str = "bit") -> list[int]:
    return rank(index, query, granted=NOBODY, count=count, count_type=count_type, search=search).rows.tolist()


@pytest.fixture(scope="module")
def ada_index(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> ModelIndex:
    folder = tmp_path_factory.mktemp("ada") / "libraries"
    folder.mkdir()
    for fixture in fixtures_dir.glob("*.json"):
        shutil.copy(fixture, folder / fixture.name)
    return load_catalog(folder).models[ADA_002]


@pytest.fixture(scope="module", params=["file order", "clustered"])
def clustered_index(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> ModelIndex:
    """4,000 unit vectors in 40 clusters, dimension 256, 20-200 tokens each: stored in file order
    (approximate search reads sign codes) or clustered (it reads the nearest clusters)."""
    rng = np.random.default_rng(7)
    centers = rng.standard_normal((40, 256)).astype(np.float32)
    vectors = centers[rng.integers(0, 40, 4000)] + 0.8 * rng.standard_normal((4000, 256)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    tokens = rng.integers(20, 200, 4000).tolist()
    folder = tmp_path_factory.mktemp("clustered") / "libraries"
    path = write_library(folder / "clusters.json", make_library(vectors, tokens))
    if request.param == "file order":
        return load_catalog(folder).models[TEST_MODEL]
    stat = path.stat()
    key = SourceKey(size=stat.st_size, mtime_ns=stat.st_mtime_ns, sha256=file_sha256(path))
    compiled = folder / ".compiled" / "clusters"
    write_compiled(parse_library(json.loads(path.read_text())), compiled, key, "clusters", cluster_from=1000)
    index = ModelIndex.of_segments((open_segment(compiled),))
    assert index.clusters is not None and index.clusters.count == 63  # sqrt(4000)
    return index


def own_embeddings(index: ModelIndex) -> np.ndarray:
    return index.gather(np.arange(index.bit_count))


def test_on_real_ada_bits_a_small_pool_finds_each_bit_first_and_nearly_all_of_the_exact_top_10(ada_index):
    small_pool = Search(approximate=True, oversample=40)  # 40 of 116: well below the exact fallback
    embeddings = own_embeddings(ada_index)
    found = []
    for row, vector in enumerate(embeddings):
        exact, approximate = top(ada_index, vector, EXACT), top(ada_index, vector, small_pool)
        assert approximate[0] == exact[0] == row
        found.append(len(set(exact) & set(approximate)) / 10)
    assert np.mean(found) >= 0.99


def test_on_real_ada_bits_the_default_pool_gives_exactly_the_exact_answer(ada_index):
    for vector in own_embeddings(ada_index)[::7]:
        assert top(ada_index, vector, Search(approximate=True), 1500, "token") == top(ada_index, vector, EXACT, 1500, "token")


def test_on_clustered_bits_approximate_top_10_matches_exact(clustered_index):
    rng = np.random.default_rng(8)
    embeddings = own_embeddings(clustered_index)
    # 10% of the library: codes or clusters really do the work (4 of 63 clusters, ~250 bits, at least)
    search = Search(approximate=True, oversample=400, probes=4)
    recalls = []
    for row in rng.choice(len(embeddings), 60, replace=False):
        query = embeddings[row] + 0.05 * rng.standard_normal(256).astype(np.float32)
        query /= np.linalg.norm(query)
        exact, approximate = top(clustered_index, query, EXACT), top(clustered_index, query, search)
        assert approximate[0] == exact[0] == row
        recalls.append(len(set(exact) & set(approximate)) / 10)
    assert np.mean(recalls) >= 0.99


@pytest.mark.parametrize(("count", "count_type"), [(1, "bit"), (25, "bit"), (50, "token"), (1500, "token"), (5, "token")])
def test_switching_modes_never_changes_what_a_budget_admits(clustered_index, count, count_type):
    query = own_embeddings(clustered_index)[123]
    exact = rank(clustered_index, query, granted=NOBODY, count=count, count_type=count_type)
    approximate = rank(clustered_index, query, granted=NOBODY, count=count, count_type=count_type,
                       search=Search(approximate=True, oversample=400))

    assert approximate.rows.tolist() == exact.rows.tolist()
    assert approximate.first_bit_cut_to == exact.first_bit_cut_to
    np.testing.assert_allclose(approximate.scores, exact.scores, rtol=1e-5)
