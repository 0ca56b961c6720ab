"""8-bit codes (host/store/codes.py): what approximate search scans in a clustered library, and how
far a code score may be from the exact one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from librarian import brute_force_ranking, make_library, unit_vectors, write_library

from host.catalog.model_index import ModelIndex
from host.library.format import parse_library
from host.search.cluster_scan import ClusterScan
from host.search.engine import Search, rank
from host.store.codes import CodedQuery, code_scale, encode
from host.store.compiled import SourceKey, open_segment, write_compiled


def test_every_value_is_within_half_a_step_of_its_level():
    rows = np.random.default_rng(0).standard_normal((500, 24)).astype(np.float32)
    scale = code_scale(rows.min(axis=0), rows.max(axis=0))

    levels = scale[0] + scale[1] * encode(rows, scale).astype(np.float32)

    assert np.all(np.abs(levels - rows) <= scale[1] / 2 * (1 + 1e-5))


def test_a_dimension_that_never_varies_has_one_level():
    rows = np.ones((3, 4), dtype=np.float32)
    scale = code_scale(rows.min(axis=0), rows.max(axis=0))
    assert encode(rows, scale).tolist() == [[0] * 4] * 3 and np.all(scale[0] == 1)


def test_code_scores_stay_within_the_bound_and_are_typically_much_closer():
    rows = unit_vectors(2000, 64, seed=2)
    scale = code_scale(rows.min(axis=0), rows.max(axis=0))
    codes = encode(rows, scale)
    errors = []
    for query in unit_vectors(20, 64, seed=3):
        coded = CodedQuery(query, scale)
        scores = np.empty(len(rows), dtype=np.float32)
        coded.scores(codes, [(0, len(codes))], scores, np.empty((2048, 64), dtype=np.float32))
        error = scores - (rows.astype(np.float64) @ query)
        assert np.all(np.abs(error) <= 0.5 * np.abs(query) @ scale[1] + 1e-5)  # the bound, never crossed
        errors.append(np.std(error) / coded.typical_error)
    assert 0.7 < np.mean(errors) < 1.3  # the typical error is what the scan's margin is made of


def clustered_vectors(count: int, dimension: int, seed: int) -> np.ndarray:
    """Bits around 20 centres, as real collections gather around subjects."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((20, dimension))
    vectors = centres[rng.integers(0, 20, count)] + 0.3 * rng.standard_normal((count, dimension))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def clustered(tmp_path: Path) -> ModelIndex:
    path = write_library(tmp_path / "lib.json", make_library(clustered_vectors(3000, 16, seed=4)))
    write_compiled(parse_library(json.loads(path.read_text())), tmp_path / "compiled", SourceKey(0, 0, ""), "lib",
                   cluster_from=1000)
    return ModelIndex.of_segments((open_segment(tmp_path / "compiled"),))


def test_a_clustered_library_is_scanned_through_its_codes_and_answers_with_exact_similarities(tmp_path):
    index = clustered(tmp_path)
    library = index.segments[0]
    query = np.asarray(index.gather(np.array([1234]))[0]) + 0.05 * np.random.default_rng(5).standard_normal(16)
    query = (query / np.linalg.norm(query)).astype(np.float32)

    scan = ClusterScan(index, query, probes=4, oversample=500)
    found = rank(index, query, granted=frozenset(), count=10, count_type="bit",
                 search=Search(approximate=True, oversample=500, probes=4))

    assert library.codes is not None and library.codes.shape == (3000, 16) and scan.coded[0] is not None
    exact = (np.asarray(index.gather(found.rows), np.float64) @ query).astype(np.float32)
    assert found.scores.tolist() == exact.tolist()
    stored = np.asarray(library.embeddings)
    assert found.rows.tolist() == brute_force_ranking(stored, query)[:10]
