"""Hybrid ranking (RAGFlow's `w·vector + (1-w)·term`) against a brute-force reference.

No seed of this project carries a worked RAGFlow example (../shared/seeds/ holds only the library
format note), so the formula is checked on real Polymath libraries (../shared/fixtures/) against
a plain-Python computation of every bit's score.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from constraint_reference import term_scores as reference_term_scores
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from librarian import exact_dot_products, make_library, unit_vectors, write_library

from access import ANONYMOUS, Grant
from host.catalog.generations import load_catalog
from host.catalog.model_index import ModelIndex
from host.constraints import parse_constraint
from host.search.hybrid import HybridQuery, rank_hybrid
from host.search.query import run_hybrid_query

FIXTURE = "polymath-v0-sample-content.json"  # 100 real ada-002 bits with titles


@pytest.fixture(scope="module")
def fixture_index(fixtures_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> ModelIndex:
    folder = tmp_path_factory.mktemp("hybrid") / "libraries"
    folder.mkdir()
    shutil.copy(fixtures_dir / FIXTURE, folder / FIXTURE)
    (index,) = load_catalog(folder).models.values()
    return index


def records_of(index: ModelIndex) -> list[dict]:
    return [library.record(row) for library in index.libraries for row in range(library.bit_count)]


def brute_force(index: ModelIndex, query: HybridQuery, visible: list[bool], allowed: list[bool]) -> list[tuple]:
    """Every allowed visible bit scored one at a time, sorted, cut to top_k, then thresholded."""
    records = records_of(index)
    vectors = np.concatenate([np.asarray(library.embeddings) for library in index.libraries])
    vector = exact_dot_products(vectors, query.vector)
    rows = [row for row in range(len(records)) if visible[row] and allowed[row]]
    term = dict(zip(rows, reference_term_scores(query.question, records, visible, rows)))
    scored = [(row, query.vector_weight * float(vector[row]) + (1 - query.vector_weight) * term[row],
               float(vector[row]), term[row]) for row in rows]
    scored.sort(key=lambda item: (-item[1], item[0]))
    kept = scored[: query.top_k]
    if query.similarity_threshold is not None:
        kept = [item for item in kept if item[1] >= query.similarity_threshold]
    return kept


def answer(index: ModelIndex, query: HybridQuery, grant: Grant = ANONYMOUS) -> list[tuple]:
    selection = run_hybrid_query(index, query, grant)
    return list(zip(selection.rows.tolist(), selection.similarity.tolist(), selection.vector_similarity.tolist(),
                    selection.term_similarity.tolist()))


def assert_same(got: list[tuple], expected: list[tuple]) -> None:
    assert [item[0] for item in got] == [item[0] for item in expected]
    np.testing.assert_allclose([item[1:] for item in got], [item[1:] for item in expected], rtol=0, atol=1e-12)


def question_and_vector(index: ModelIndex, row: int, seed: int) -> tuple[str, np.ndarray]:
    """Words from one bit's title and text, and a vector near another bit's: the two halves disagree."""
    record = records_of(index)[row]
    question = f"{record['info'].get('title', '')} {' '.join(record['text'].split()[:6])}"
    near = np.asarray(index.libraries[0].embeddings[(row * 7 + 3) % index.bit_count], np.float64)
    near += np.random.default_rng(seed).normal(0, 0.01, len(near))
    return question, (near / np.linalg.norm(near)).astype(np.float32)


@pytest.mark.parametrize("weight", [0.0, 0.3, 0.7, 1.0])
@pytest.mark.parametrize("threshold", [None, 0.2, 0.5])
def test_similarity_is_w_vector_plus_one_minus_w_term_on_a_real_fixture(
    fixture_index: ModelIndex, weight: float, threshold: float | None
) -> None:
    for row in (0, 17, 42):
        question, vector = question_and_vector(fixture_index, row, seed=row)
        query = HybridQuery(vector, question, weight, top_k=30, similarity_threshold=threshold)

        got = answer(fixture_index, query)

        everything = [True] * fixture_index.bit_count
        assert_same(got, brute_force(fixture_index, query, everything, everything))
        for _, similarity, vector_score, term_score in got:
            assert similarity == weight * vector_score + (1 - weight) * term_score


def test_the_sdk_defaults_find_the_bit_whose_words_were_asked(fixture_index: ModelIndex) -> None:
    """RAGFlow's defaults (w 0.3, threshold 0.2): the words of bit 42 put it first, though the vector points elsewhere."""
    question, vector = question_and_vector(fixture_index, 42, seed=1)

    got = answer(fixture_index, HybridQuery(vector, question, 0.3, top_k=1024, similarity_threshold=0.2))

    assert got[0][0] == 42 and got[0][3] > 0.9  # every word and pair of its title and first words but one
    assert answer(fixture_index, HybridQuery(vector, question, 1.0, top_k=1))[0][0] == (42 * 7 + 3) % 100


def test_narrowing_never_changes_a_bits_scores(fixture_index: ModelIndex) -> None:
    question, vector = question_and_vector(fixture_index, 17, seed=2)
    constraint = parse_constraint("NOT text:the")
    everything = [True] * fixture_index.bit_count
    wide = dict((row, rest) for row, *rest in answer(fixture_index, HybridQuery(vector, question, 0.3, top_k=100)))

    narrow = answer(fixture_index, HybridQuery(vector, question, 0.3, top_k=100, constraint=constraint))

    allowed = [" the " not in f" {' '.join(record['text'].lower().split())} " for record in records_of(fixture_index)]
    assert 0 < len(narrow) < len(wide)
    assert_same(narrow, brute_force(fixture_index, HybridQuery(vector, question, 0.3, top_k=100), everything, allowed))
    for row, *scores in narrow:
        assert scores == wide[row]


def test_a_library_list_narrows_to_those_libraries(tmp_path: Path) -> None:
    folder = tmp_path / "libraries"
    write_library(folder / "a.json", make_library(unit_vectors(6, seed=1)))
    other = make_library(unit_vectors(6, seed=2))
    for bit in other["bits"]:
        bit["info"]["url"] += "/b"  # not the same bits as a.json's (which would be served once)
    write_library(folder / "b.json", other)
    (index,) = load_catalog(folder).models.values()
    query = HybridQuery(unit_vectors(1, seed=3)[0], "bit number", 0.5, top_k=50, libraries=frozenset({"b"}))

    rows = run_hybrid_query(index, query, ANONYMOUS).rows

    assert sorted(rows.tolist()) == list(range(6, 12))
    assert run_hybrid_query(index, HybridQuery(query.vector, "x", 0.5, top_k=0), ANONYMOUS).rows.tolist() == []


private_rows = st.lists(st.booleans(), min_size=20, max_size=20)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hidden=private_rows, weight=st.sampled_from([0.0, 0.3, 1.0]), row=st.integers(0, 99))
def test_bits_hidden_from_a_caller_change_nothing_they_are_answered(
    fixture_index: ModelIndex, hidden: list[bool], weight: float, row: int
) -> None:
    """The term statistics of a caller who sees only some bits are those of exactly those bits."""
    question, vector = question_and_vector(fixture_index, row, seed=row)
    visible = [not hidden[position % 20] for position in range(fixture_index.bit_count)]
    query = HybridQuery(vector, question, weight, top_k=15, similarity_threshold=0.1)
    mask = np.array(visible)

    selection = rank_hybrid(fixture_index, query, mask, None)

    got = list(zip(selection.rows.tolist(), selection.similarity.tolist(), selection.vector_similarity.tolist(),
                   selection.term_similarity.tolist()))
    assert_same(got, brute_force(fixture_index, query, visible, [True] * fixture_index.bit_count))
