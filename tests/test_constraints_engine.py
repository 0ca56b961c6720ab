"""rank() with a constraint and a similarity threshold: the brute-force answer, never more visible."""

from __future__ import annotations

import hashlib

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from librarian import TEST_MODEL, reference_budget

from host.catalog.model_index import ModelIndex
from host.search.engine import SUBSET_SHARE, Search, rank
from host.store.compiled import Segment
from host.store.members import Member, SourceKey, tag_rows
from host.store.sign_codes import sign_codes

DIMENSION = 8
TAGS = ("team", "board")
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def in_memory(name: str, vectors: np.ndarray, tokens: np.ndarray, tags: list[str | None]) -> Segment:
    """Only what ranking reads; rank() never looks at records or the text index."""
    bits = len(vectors)
    names = ("", *sorted({tag for tag in tags if tag}))
    return Segment(
        name=name, embedding_model=TEST_MODEL,
        embeddings=np.ascontiguousarray(vectors, dtype=np.float32).reshape(bits, DIMENSION),
        token_counts=tokens.astype(np.int32),
        tag_ids=np.array([names.index(tag or "") for tag in tags], dtype=np.uint16), tags=names,
        ids=np.array([hashlib.sha256(f"{name}/{row}".encode()).digest() for row in range(bits)], dtype="S32"),
        sign_codes=sign_codes(np.asarray(vectors, dtype=np.float32).reshape(bits, DIMENSION)),
        records=np.zeros(0, dtype=np.uint8), record_offsets=np.zeros(bits + 1, dtype=np.int64),
        members=(Member(name, SourceKey(0, 0, ""), 0, bits, tag_rows=tag_rows(names, tags)),),
    )


@st.composite
def cases(draw: st.DrawFn) -> tuple[ModelIndex, np.ndarray, np.ndarray, list[str | None]]:
    bits = draw(st.integers(1, 60))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    vectors = rng.integers(-3, 4, size=(bits, DIMENSION)).astype(np.float32)  # exact dot products
    tokens = rng.integers(0, 40, size=bits)
    tags = [draw(st.sampled_from([None, None, *TAGS])) for _ in range(bits)]
    split = draw(st.integers(0, bits))
    libraries = tuple(in_memory(f"lib{number}", vectors[part], tokens[part], tags[part.start:part.stop])
                      for number, part in enumerate((slice(0, split), slice(split, bits))) if part.stop > part.start)
    return ModelIndex.of_segments(libraries), vectors, tokens, tags


queries = st.lists(st.integers(-3, 3), min_size=DIMENSION, max_size=DIMENSION).map(lambda q: np.array(q, np.float32))
grants = st.sets(st.sampled_from(TAGS)).map(frozenset)


def reference(vectors: np.ndarray, tokens: np.ndarray, tags: list[str | None], query: np.ndarray,
              granted: frozenset[str], constraint: np.ndarray, count: int, count_type: str,
              threshold: float | None) -> tuple[list[int], int | None]:
    scores = vectors @ query
    allowed = [row for row in range(len(vectors)) if (tags[row] is None or tags[row] in granted) and constraint[row]]
    ranked = sorted(allowed, key=lambda row: (-scores[row], row))
    if threshold is not None:  # the list stops at the first bit below the threshold...
        ranked = [row for row in ranked if scores[row] >= threshold]
    taken, cut_to = reference_budget([int(tokens[row]) for row in ranked], count, count_type)  # ...before the budget
    return ranked[:taken], cut_to


@SETTINGS
@given(case=cases(), query=queries, granted=grants, count=st.integers(1, 120),
       count_type=st.sampled_from(["token", "bit"]), threshold=st.one_of(st.none(), st.integers(-12, 12)),
       density=st.sampled_from([SUBSET_SHARE / 2, 0.5, 1.0]), seed=st.integers(0, 1000))
def test_rank_with_a_constraint_and_threshold_is_the_brute_force_answer(
    case: tuple, query: np.ndarray, granted: frozenset[str], count: int, count_type: str, threshold: int | None,
    density: float, seed: int,
) -> None:
    index, vectors, tokens, tags = case
    # Sparse constraints take the gathered path, dense ones the full scan: both are drawn.
    constraint = np.random.default_rng(seed).random(len(vectors)) < density
    limit = None if threshold is None else float(threshold)

    selection = rank(index, query, granted=granted, count=count, count_type=count_type,  # type: ignore[arg-type]
                     constraint=constraint, similarity_threshold=limit, count_restricted=True)

    rows, cut_to = reference(vectors, tokens, tags, query, granted, constraint, count, count_type, limit)
    assert selection.rows.tolist() == rows
    assert selection.first_bit_cut_to == cut_to
    np.testing.assert_array_equal(selection.scores, vectors[selection.rows] @ query)
    everything, _ = reference(vectors, tokens, tags, query, frozenset(TAGS), constraint, count, count_type, limit)
    assert selection.restricted == sum(1 for row in everything if row not in set(rows))


@SETTINGS
@given(case=cases(), query=queries, granted=grants, count=st.integers(1, 60), seed=st.integers(0, 1000),
       approximate=st.booleans())
def test_a_constraint_never_widens_what_the_caller_sees(
    case: tuple, query: np.ndarray, granted: frozenset[str], count: int, seed: int, approximate: bool
) -> None:
    index, vectors, _, tags = case
    everything_allowed = np.ones(len(vectors), dtype=bool)  # even a constraint that allows all (NOT nothing)
    some = np.random.default_rng(seed).random(len(vectors)) < 0.5
    search = Search(approximate=True, oversample=2) if approximate else Search()
    for constraint in (everything_allowed, some, ~some):
        selection = rank(index, query, granted=granted, count=count, count_type="bit", constraint=constraint,
                         search=search)
        for row in selection.rows.tolist():
            assert tags[row] is None or tags[row] in granted
            assert constraint[row]
    unconstrained = rank(index, query, granted=granted, count=count, count_type="bit", search=search)
    with_all = rank(index, query, granted=granted, count=count, count_type="bit", constraint=everything_allowed,
                    search=search)
    assert with_all.rows.tolist() == unconstrained.rows.tolist()


def test_the_cached_visibility_mask_is_never_written_to() -> None:
    vectors = np.eye(DIMENSION, dtype=np.float32)
    index = ModelIndex.of_segments((in_memory("lib", vectors, np.full(DIMENSION, 5), ["team", *[None] * 7]),))
    before = index.visible_rows(frozenset()).copy()
    rank(index, vectors[1], granted=frozenset(), count=3, count_type="bit", constraint=np.zeros(DIMENSION, bool))
    np.testing.assert_array_equal(index.visible_rows(frozenset()), before)


def test_a_threshold_above_every_score_returns_nothing_even_for_a_token_budget() -> None:
    vectors = np.eye(DIMENSION, dtype=np.float32)
    index = ModelIndex.of_segments((in_memory("lib", vectors, np.full(DIMENSION, 50), [None] * DIMENSION),))
    assert rank(index, vectors[0], granted=frozenset(), count=10, count_type="token",
                similarity_threshold=1.5).rows.tolist() == []
    cut = rank(index, vectors[0], granted=frozenset(), count=10, count_type="token", similarity_threshold=0.5)
    assert cut.rows.tolist() == [0] and cut.first_bit_cut_to == 10  # the first bit, cut to the budget
