"""Ranking and budgets (SPEC §3), checked against a brute-force reference on real compiled libraries."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from librarian import TEST_MODEL, brute_force_ranking, make_bit, reference_budget, unit_vectors, write_library

from host.catalog.generations import load_catalog
from host.catalog.model_index import ModelIndex
from host.search.engine import random_query, rank

DIMENSION = 8
NOBODY = frozenset()
E0 = np.eye(DIMENSION, dtype=np.float32)[0]


# ---- building known libraries ------------------------------------------------------------------


def load_index(folder: Path, libraries: dict[str, dict[str, Any]]) -> ModelIndex:
    """Write each library as `<folder>/libraries/<name>.json`, compile them, return the model's index."""
    for name, content in libraries.items():
        write_library(folder / "libraries" / f"{name}.json", content)
    catalog = load_catalog(folder / "libraries", cache_dir=folder / "compiled")
    assert not catalog.problems
    return catalog.models[TEST_MODEL]


def library(vectors: np.ndarray, token_counts: list[int] | None = None, *, first: int = 0,
            tags: list[str | None] | None = None) -> dict[str, Any]:
    """A library file whose bits are numbered from `first` (so bits of different files differ)."""
    counts = token_counts or [10] * len(vectors)
    tags = tags or [None] * len(vectors)
    bits = [make_bit(first + row, vector, tokens, **({"access_tag": tag} if tag else {}))
            for row, (vector, tokens, tag) in enumerate(zip(vectors, counts, tags))]
    return {"version": 1, "embedding_model": TEST_MODEL, "bits": bits}


def descending(count: int) -> np.ndarray:
    """Unit vectors whose similarity to E0 strictly decreases with their position."""
    angles = np.linspace(0, np.pi / 2, count, endpoint=False)
    vectors = np.zeros((count, DIMENSION), dtype=np.float32)
    vectors[:, 0], vectors[:, 1] = np.cos(angles), np.sin(angles)
    return vectors


def in_order(folder: Path, token_counts: list[int]) -> ModelIndex:
    """One library ranked against E0 exactly in file order, with the given token counts."""
    return load_index(folder, {"ordered": library(descending(len(token_counts)), token_counts)})


def bit_ids(index: ModelIndex, rows: np.ndarray) -> list[str]:
    ids = []
    for row in rows.tolist():
        owner, local = index.locate(row)
        ids.append(owner.bit_id(local))
    return ids


# ---- ranking -------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_ranking_matches_brute_force_across_libraries_of_one_model(tmp_path: Path, seed: int) -> None:
    vectors = unit_vectors(40, DIMENSION, seed=seed)
    query = unit_vectors(1, DIMENSION, seed=1000 + seed)[0]
    # Three files of one model: global rows run through them in name order.
    index = load_index(tmp_path, {
        "a": library(vectors[:15]),
        "b": library(vectors[15:22], first=15),
        "c": library(vectors[22:], first=22),
    })

    selection = rank(index, query, granted=NOBODY, count=len(vectors), count_type="bit")

    assert selection.rows.tolist() == brute_force_ranking(vectors, query)
    np.testing.assert_allclose(selection.scores, vectors[selection.rows] @ query, rtol=0, atol=1e-6)
    assert selection.scores.dtype == np.float32
    assert selection.first_bit_cut_to is None


def test_global_rows_run_through_the_libraries_in_name_order(tmp_path: Path) -> None:
    vectors = unit_vectors(6, DIMENSION, seed=9)
    index = load_index(tmp_path, {"b": library(vectors[2:], first=2), "a": library(vectors[:2])})

    assert [index.library_of(row).name for row in range(6)] == ["a", "a", "b", "b", "b", "b"]
    assert [index.locate(row)[0].record(index.locate(row)[1])["info"]["url"] for row in range(6)] == [
        f"https://example.com/{row}" for row in range(6)]


def test_equal_similarities_are_ordered_by_row(tmp_path: Path) -> None:
    a, b = unit_vectors(2, DIMENSION, seed=5)
    index = load_index(tmp_path, {
        "first": library(np.array([b, a, a])),
        "second": library(np.array([a, b, a]), first=3),
    })

    selection = rank(index, a, granted=NOBODY, count=6, count_type="bit")

    # Rows 1, 2, 3, 5 all hold `a`; rows 0 and 4 hold `b`.
    assert selection.rows.tolist() == [1, 2, 3, 5, 0, 4]
    assert selection.rows.tolist() == brute_force_ranking(np.array([b, a, a, a, b, a]), a)


def test_a_bit_budget_cutting_through_a_tie_keeps_the_lowest_rows(tmp_path: Path) -> None:
    a, b = unit_vectors(2, DIMENSION, seed=6)
    index = load_index(tmp_path, {"ties": library(np.array([b, a, b, a, a]))})

    selection = rank(index, a, granted=NOBODY, count=2, count_type="bit")

    assert selection.rows.tolist() == [1, 3]


# ---- bit budget -----------------------------------------------------------------------------------


TWELVE = unit_vectors(12, DIMENSION, seed=2)


@pytest.fixture(scope="module")
def twelve(tmp_path_factory: pytest.TempPathFactory) -> ModelIndex:
    """Twelve bits of 500 tokens each."""
    return load_index(tmp_path_factory.mktemp("twelve"), {"twelve": library(TWELVE, [500] * 12)})


@pytest.mark.parametrize(("count", "expected"), [(1, 1), (7, 7), (12, 12), (13, 12), (10_000, 12)])
def test_bit_budget_returns_the_first_count_bits(twelve: ModelIndex, count: int, expected: int) -> None:
    vectors, index = TWELVE, twelve
    query = unit_vectors(1, DIMENSION, seed=3)[0]

    selection = rank(index, query, granted=NOBODY, count=count, count_type="bit")

    assert selection.rows.tolist() == brute_force_ranking(vectors, query)[:expected]
    assert selection.first_bit_cut_to is None  # token counts do not matter to a bit budget


# ---- token budget ---------------------------------------------------------------------------------


def test_token_budget_stops_at_first_overflowing_bit(tmp_path: Path) -> None:
    index = in_order(tmp_path, [3, 4, 10, 1, 1])

    selection = rank(index, E0, granted=NOBODY, count=8, count_type="token")

    # 3 + 4 = 7; the 10-token bit overflows and ends the list, though the 1-token bits would fit.
    assert selection.rows.tolist() == [0, 1]
    assert selection.first_bit_cut_to is None


def test_token_budget_takes_a_bit_that_fits_exactly(tmp_path: Path) -> None:
    index = in_order(tmp_path, [3, 4, 1, 1])

    assert rank(index, E0, granted=NOBODY, count=8, count_type="token").rows.tolist() == [0, 1, 2]
    assert rank(index, E0, granted=NOBODY, count=7, count_type="token").rows.tolist() == [0, 1]


def test_token_budget_counts_zero_token_bits_as_free(tmp_path: Path) -> None:
    index = in_order(tmp_path, [0, 5, 0, 2])

    assert rank(index, E0, granted=NOBODY, count=5, count_type="token").rows.tolist() == [0, 1, 2]


def test_token_budget_larger_than_the_library_returns_everything(tmp_path: Path) -> None:
    index = in_order(tmp_path, [10, 20, 30])

    selection = rank(index, E0, granted=NOBODY, count=1000, count_type="token")

    assert selection.rows.tolist() == [0, 1, 2]
    assert selection.first_bit_cut_to is None


def test_a_first_bit_over_the_token_budget_is_returned_cut_to_it(tmp_path: Path) -> None:
    index = in_order(tmp_path, [50, 1, 1])

    selection = rank(index, E0, granted=NOBODY, count=20, count_type="token")

    assert selection.rows.tolist() == [0]
    assert selection.first_bit_cut_to == 20


def test_a_first_bit_that_fits_is_not_cut(tmp_path: Path) -> None:
    index = in_order(tmp_path, [20, 50])

    selection = rank(index, E0, granted=NOBODY, count=20, count_type="token")

    assert selection.rows.tolist() == [0]
    assert selection.first_bit_cut_to is None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_token_budget_matches_the_reference_rule(tmp_path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    vectors = unit_vectors(60, DIMENSION, seed=seed)
    token_counts = rng.integers(0, 40, size=60).tolist()
    query = unit_vectors(1, DIMENSION, seed=500 + seed)[0]
    index = load_index(tmp_path, {"a": library(vectors[:30], token_counts[:30]),
                                  "b": library(vectors[30:], token_counts[30:], first=30)})
    order = brute_force_ranking(vectors, query)

    for count in (1, 37, 250, 10_000):
        selection = rank(index, query, granted=NOBODY, count=count, count_type="token")
        taken, cut_to = reference_budget([token_counts[row] for row in order], count)
        assert selection.rows.tolist() == order[:taken] and selection.first_bit_cut_to == cut_to


def test_candidates_grow_until_many_small_bits_fill_the_budget(tmp_path: Path) -> None:
    vectors = unit_vectors(8000, DIMENSION, seed=11)
    query = unit_vectors(1, DIMENSION, seed=12)[0]
    index = load_index(tmp_path, {"a": library(vectors[:6000], [1] * 6000),
                                  "b": library(vectors[6000:], [1] * 2000, first=6000)})

    selection = rank(index, query, granted=NOBODY, count=5000, count_type="token")

    assert selection.rows.tolist() == brute_force_ranking(vectors, query)[:5000]


def test_candidates_grow_past_hidden_rows(tmp_path: Path) -> None:
    vectors = unit_vectors(3000, DIMENSION, seed=13)
    query = unit_vectors(1, DIMENSION, seed=14)[0]
    hidden = [row % 3 != 0 for row in range(3000)]
    tags = ["team" if flag else None for flag in hidden]
    index = load_index(tmp_path, {"mixed": library(vectors, [1] * 3000, tags=tags)})

    selection = rank(index, query, granted=NOBODY, count=1500, count_type="token")

    visible = [not flag for flag in hidden]
    assert selection.rows.tolist() == brute_force_ranking(vectors, query, visible)[:1500]


# ---- restricted bits --------------------------------------------------------------------------------


@dataclass(frozen=True)
class MixedAndPublic:
    """The same public bits twice: once interleaved with bits tagged `team` or `board`, once alone."""

    mixed: ModelIndex
    public: ModelIndex
    vectors: np.ndarray  # of the mixed library, by row
    token_counts: list[int]
    is_public: list[bool]


@pytest.fixture(scope="module")
def mixed_and_public(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], MixedAndPublic]:
    built: dict[int, MixedAndPublic] = {}

    def build(seed: int) -> MixedAndPublic:
        if seed not in built:
            folder = tmp_path_factory.mktemp(f"mixed-{seed}")
            rng = np.random.default_rng(seed)
            vectors = unit_vectors(45, DIMENSION, seed=seed)
            token_counts = rng.integers(1, 30, size=45).tolist()
            tags = [("team", "board")[row % 2] if row % 3 == 1 else None for row in range(45)]
            mixed_file = library(vectors, token_counts, tags=tags)
            public_file = {**mixed_file, "bits": [bit for bit, tag in zip(mixed_file["bits"], tags) if tag is None]}
            built[seed] = MixedAndPublic(
                mixed=load_index(folder / "mixed", {"lib": mixed_file}),
                public=load_index(folder / "public", {"lib": public_file}),
                vectors=vectors,
                token_counts=token_counts,
                is_public=[tag is None for tag in tags],
            )
        return built[seed]

    return build


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("count", "count_type"), [(1, "bit"), (10, "bit"), (100, "bit"), (5, "token"), (120, "token")])
def test_restricted_bits_never_change_what_an_anonymous_caller_gets(
    mixed_and_public: Callable[[int], MixedAndPublic], seed: int, count: int, count_type: str
) -> None:
    libraries = mixed_and_public(seed)
    mixed, public = libraries.mixed, libraries.public
    query = unit_vectors(1, DIMENSION, seed=100 + seed)[0]

    with_hidden = rank(mixed, query, granted=NOBODY, count=count, count_type=count_type)  # type: ignore[arg-type]
    without = rank(public, query, granted=NOBODY, count=count, count_type=count_type)  # type: ignore[arg-type]

    assert bit_ids(mixed, with_hidden.rows) == bit_ids(public, without.rows)
    assert with_hidden.scores.tolist() == without.scores.tolist()
    assert with_hidden.first_bit_cut_to == without.first_bit_cut_to
    assert all(mixed.tag_ids[row] == 0 for row in with_hidden.rows)


@pytest.mark.parametrize("dimension", [384, 1536])
def test_a_bits_similarity_does_not_depend_on_the_rows_around_it(tmp_path: Path, dimension: int) -> None:
    # BLAS blocks a matrix-vector product by shape: in float32 a row's dot product can change in its
    # last bits when rows are added after it. What a caller sees must not (private bits are such rows).
    vectors = unit_vectors(203, dimension, seed=7)
    query = unit_vectors(1, dimension, seed=8)[0]
    whole = load_index(tmp_path / "whole", {"lib": library(vectors)})
    prefix = load_index(tmp_path / "prefix", {"lib": library(vectors[:150])})

    from_whole = rank(whole, query, granted=NOBODY, count=203, count_type="bit")
    from_prefix = rank(prefix, query, granted=NOBODY, count=150, count_type="bit")

    in_prefix = from_whole.rows < 150
    assert from_whole.rows[in_prefix].tolist() == from_prefix.rows.tolist()
    assert from_whole.scores[in_prefix].tolist() == from_prefix.scores.tolist()


def test_a_grant_reveals_exactly_its_own_tag(mixed_and_public: Callable[[int], MixedAndPublic]) -> None:
    libraries = mixed_and_public(0)
    mixed, vectors = libraries.mixed, libraries.vectors
    query = unit_vectors(1, DIMENSION, seed=100)[0]
    team = mixed.tags.index("team")

    selection = rank(mixed, query, granted=frozenset({"team", "not-in-any-library"}), count=45, count_type="bit")

    visible = [mixed.tag_ids[row] in (0, team) for row in range(45)]
    assert selection.rows.tolist() == brute_force_ranking(vectors, query, visible)
    assert any(mixed.tag_ids[row] == team for row in selection.rows)


@pytest.mark.parametrize(("count", "count_type"), [(1, "bit"), (12, "bit"), (100, "bit"), (3, "token"), (150, "token")])
def test_restricted_count_is_how_many_hidden_bits_the_budget_would_have_held(
    mixed_and_public: Callable[[int], MixedAndPublic], count: int, count_type: str
) -> None:
    libraries = mixed_and_public(1)
    mixed, vectors, token_counts, public = libraries.mixed, libraries.vectors, libraries.token_counts, libraries.is_public
    query = unit_vectors(1, DIMENSION, seed=7)[0]
    everything = brute_force_ranking(vectors, query)
    would_return = everything[: reference_budget([token_counts[row] for row in everything], count, count_type)[0]]

    selection = rank(mixed, query, granted=NOBODY, count=count, count_type=count_type,  # type: ignore[arg-type]
                     count_restricted=True)

    assert selection.restricted == sum(not public[row] for row in would_return)


def test_restricted_count_leaves_out_the_tags_a_caller_holds(mixed_and_public: Callable[[int], MixedAndPublic]) -> None:
    mixed = mixed_and_public(2).mixed
    query = unit_vectors(1, DIMENSION, seed=8)[0]
    board = mixed.tags.index("board")

    selection = rank(mixed, query, granted=frozenset({"team"}), count=45, count_type="bit", count_restricted=True)
    everyone = rank(mixed, query, granted=frozenset({"team", "board"}), count=45, count_type="bit",
                    count_restricted=True)

    assert selection.restricted == int(np.count_nonzero(mixed.tag_ids == board)) > 0
    assert everyone.restricted == 0


def test_restricted_count_is_zero_unless_asked(mixed_and_public: Callable[[int], MixedAndPublic]) -> None:
    mixed = mixed_and_public(0).mixed

    selection = rank(mixed, E0, granted=NOBODY, count=45, count_type="bit")

    assert selection.restricted == 0


def test_a_library_with_only_hidden_bits_returns_nothing(tmp_path: Path) -> None:
    vectors = unit_vectors(4, DIMENSION, seed=1)
    index = load_index(tmp_path, {"private": library(vectors, tags=["team"] * 4)})

    for count_type in ("bit", "token"):
        selection = rank(index, E0, granted=NOBODY, count=10, count_type=count_type, count_restricted=True)  # type: ignore[arg-type]
        assert selection.rows.tolist() == []
        assert selection.first_bit_cut_to is None
        assert selection.restricted == (4 if count_type == "bit" else 1)


def test_a_bit_in_two_libraries_is_ranked_once(tmp_path: Path) -> None:
    vectors = unit_vectors(3, DIMENSION, seed=4)
    same = library(vectors)
    index = load_index(tmp_path, {"a": same, "b": same})

    selection = rank(index, vectors[0], granted=NOBODY, count=10, count_type="bit")

    assert selection.rows.tolist() == brute_force_ranking(vectors, vectors[0])
    assert len(set(bit_ids(index, selection.rows))) == 3


# ---- random queries ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dimension", [1, 8, 1536])
def test_random_query_is_a_unit_vector_of_the_dimension(dimension: int) -> None:
    vector = random_query(dimension)

    assert vector.shape == (dimension,)
    assert vector.dtype == np.float32
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)


def test_random_queries_differ_unless_seeded_alike() -> None:
    assert not np.array_equal(random_query(8), random_query(8))
    same = random_query(8, np.random.default_rng(42)), random_query(8, np.random.default_rng(42))
    assert np.array_equal(*same)
