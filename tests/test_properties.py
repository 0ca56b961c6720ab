"""Property tests: the request parser and the budget rules, on inputs hypothesis makes up.

- `parse_query_args` with any field dict returns a well-formed QueryArgs or raises HTTPError 400
  with one short sentence; nothing else ever escapes (no TypeError, no 500).
- `apply_budget` and `rank`, exact, on random small libraries with access tags: the rows are the
  brute-force ranking of the visible bits cut by the budget rule (token sum <= count unless the
  single first bit was cut; no skipping ahead; bit budget exact).
- Approximate search (`Search(approximate=True)` with a small oversample) obeys the same budget
  rules on the bits it finds, and returns exactly the exact rows when the oversample covers the
  library.
- Over clustered libraries (rows stored sorted by cluster): exact rank is still the file-order
  brute-force ranking; a cluster search reading every cluster returns the exact rows; reading a
  few clusters it obeys the budget rules, the constraint and the threshold, and shows no hidden bit.

Vectors have small integer components, so every dot product is exact in float32 and the
reference ranking (ties by row) is unambiguous.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from librarian import TEST_MODEL, b64, exact_dot_products, reference_budget

from host.catalog.model_index import ModelIndex
from host.search.engine import Search, apply_budget, rank
from host.store.clusters import plan_layout
from host.store.compiled import Segment
from host.store.members import Member, SourceKey, tag_rows
from host.store.sign_codes import sign_codes
from host.web.errors import HTTPError
from host.web.query_args import COUNT_TYPES, QueryArgs, parse_query_args

DIMENSION = 8
TAGS = ("a", "b")
MAX_COUNT = 500
MAX_EMBEDDING_BYTES = 4096
PROPERTY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- the request parser -----------------------------------------------------------------------------

ARGUMENT_NAMES = ["version", "query_embedding", "query_embedding_model", "count", "count_type", "omit",
                  "access_token"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=8,
)
tricky_strings = st.sampled_from([
    "", " ", "0", "1", " 7 ", "-1", "+3", "1e3", "1.0", "0x10", "٣", "1_000", "9" * 5000, "-" + "9" * 4000,
    "token", "bit", "BIT", "*", "", "embedding,text", "embedding, *", "nope", "AAAA", "AAAAAAAAAAA=",
    "AAAA!", b64(np.ones(DIMENSION)), b64(np.ones(DIMENSION), "<f8"), b64(np.full(DIMENSION, np.nan)),
    "A" * 6000, "\x00", "\ud800".encode("utf-8", "surrogatepass").decode("utf-8", "replace"),
])
field_values = json_values | tricky_strings | st.lists(tricky_strings, max_size=3)
field_dicts = st.dictionaries(st.sampled_from(ARGUMENT_NAMES) | st.text(max_size=10), field_values, max_size=8)


@PROPERTY
@given(fields=field_dicts)
def test_the_parser_returns_arguments_or_one_400_sentence_and_nothing_else(fields: dict) -> None:
    try:
        args = parse_query_args(fields, max_count=MAX_COUNT, max_embedding_bytes=MAX_EMBEDDING_BYTES)
    except HTTPError as refused:
        assert refused.status == 400
        assert isinstance(refused.message, str) and refused.message.strip()
        assert "\n" not in refused.message and len(refused.message) <= 300, refused.message
        return
    assert isinstance(args, QueryArgs)
    assert args.version >= 1
    assert 1 <= args.count <= MAX_COUNT
    assert args.count_type in COUNT_TYPES
    assert args.query_embedding is None or (isinstance(args.query_embedding, bytes)
                                            and 0 < len(args.query_embedding) <= MAX_EMBEDDING_BYTES)
    assert args.model is None or (isinstance(args.model, str) and args.model == args.model.strip() and args.model)
    assert args.access_token is None or (isinstance(args.access_token, str) and args.access_token)


@PROPERTY
@given(count=st.integers(1, 10**6) | st.integers(1, 10**6).map(str), max_count=st.integers(1, 10**6))
def test_counts_within_max_count_are_taken_and_larger_ones_refused(count: int | str, max_count: int) -> None:
    try:
        args = parse_query_args({"count": count}, max_count=max_count, max_embedding_bytes=MAX_EMBEDDING_BYTES)
    except HTTPError as refused:
        assert refused.status == 400 and int(count) > max_count
    else:
        assert args.count == int(count) <= max_count
    assert parse_query_args({}, max_count=max_count, max_embedding_bytes=1).count == min(1000, max_count)


# ---- libraries built in memory ----------------------------------------------------------------------


@dataclass(frozen=True)
class Library:
    vectors: np.ndarray  # float32 (bits, DIMENSION), small integers
    token_counts: np.ndarray
    tags: tuple[str | None, ...]


def compiled(name: str, library: Library) -> Segment:
    """The arrays the store would write, without the disk: ranking reads nothing else."""
    bits = len(library.vectors)
    tags = ("", *sorted({tag for tag in library.tags if tag}))
    return Segment(
        name=name,
        embedding_model=TEST_MODEL,
        embeddings=np.ascontiguousarray(library.vectors, dtype=np.float32).reshape(bits, DIMENSION),
        token_counts=np.asarray(library.token_counts, dtype=np.int32),
        tag_ids=np.array([tags.index(tag or "") for tag in library.tags], dtype=np.uint16),
        tags=tags,
        ids=np.array([hashlib.sha256(f"{name}/{row}".encode()).digest() for row in range(bits)], dtype="S32"),
        sign_codes=sign_codes(np.asarray(library.vectors, dtype=np.float32).reshape(bits, DIMENSION)),
        records=np.zeros(0, dtype=np.uint8),
        record_offsets=np.zeros(bits + 1, dtype=np.int64),
        members=(Member(name, SourceKey(0, 0, ""), 0, bits, tag_rows=tag_rows(tags, library.tags)),),
    )


@st.composite
def libraries(draw: st.DrawFn, min_bits: int = 0, max_bits: int = 30, tagged: bool = True) -> Library:
    bits = draw(st.integers(min_bits, max_bits))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    vectors = rng.integers(-3, 4, size=(bits, DIMENSION)).astype(np.float32)
    token_counts = draw(st.lists(st.integers(0, 60), min_size=bits, max_size=bits))
    tag_choice = st.sampled_from((None, None, *TAGS)) if tagged else st.none()
    tags = tuple(draw(st.lists(tag_choice, min_size=bits, max_size=bits)))
    return Library(vectors, np.array(token_counts, dtype=np.int64), tags)


@st.composite
def indexes(draw: st.DrawFn, max_bits: int = 30, tagged: bool = True) -> tuple[ModelIndex, list[Library]]:
    members = draw(st.lists(libraries(max_bits=max_bits, tagged=tagged), min_size=1, max_size=3))
    if not any(len(member.vectors) for member in members):
        members.append(draw(libraries(min_bits=1, max_bits=max_bits, tagged=tagged)))
    built = tuple(compiled(f"lib{position}", member) for position, member in enumerate(members)
                  if len(member.vectors))
    return ModelIndex.of_segments(built), [member for member in members if len(member.vectors)]


queries = st.lists(st.integers(-3, 3), min_size=DIMENSION, max_size=DIMENSION).map(
    lambda values: np.array(values, dtype=np.float32))
grants = st.frozensets(st.sampled_from(TAGS))
count_types = st.sampled_from(COUNT_TYPES)


# ---- the reference -----------------------------------------------------------------------------------


def reference_rows(members: list[Library], query: np.ndarray, granted: frozenset[str]) -> list[int]:
    """Every visible row by descending exact dot product, ties by row."""
    vectors = np.concatenate([member.vectors for member in members])
    tags = [tag for member in members for tag in member.tags]
    scores = vectors.astype(np.float64) @ query.astype(np.float64)
    visible = [row for row in range(len(vectors)) if tags[row] is None or tags[row] in granted]
    return sorted(visible, key=lambda row: (-scores[row], row))


def all_tokens(members: list[Library]) -> np.ndarray:
    return np.concatenate([member.token_counts for member in members])


# ---- the budget rule alone ---------------------------------------------------------------------------


@PROPERTY
@given(tokens=st.lists(st.integers(0, 100), max_size=40), count=st.integers(1, 600), count_type=count_types)
def test_apply_budget_takes_a_prefix_within_the_budget(tokens: list[int], count: int, count_type: str) -> None:
    taken, cut_to = apply_budget(np.array(tokens, dtype=np.int64), count, count_type)  # type: ignore[arg-type]

    assert (taken, cut_to) == reference_budget(tokens, count, count_type)
    if count_type == "bit":
        assert taken == min(count, len(tokens)) and cut_to is None
    elif cut_to is None:
        assert sum(tokens[:taken]) <= count  # within the budget...
        assert taken == len(tokens) or sum(tokens[: taken + 1]) > count  # ...and nothing skipped ahead
    else:
        assert taken == 1 and tokens[0] > count and cut_to == count  # only the single first bit is cut


# ---- exact ranking -----------------------------------------------------------------------------------


@PROPERTY
@given(built=indexes(), query=queries, granted=grants, count=st.integers(1, 200), count_type=count_types,
       count_restricted=st.booleans())
def test_exact_rank_is_the_visible_brute_force_ranking_cut_by_the_budget(
    built: tuple[ModelIndex, list[Library]], query: np.ndarray, granted: frozenset[str], count: int,
    count_type: str, count_restricted: bool,
) -> None:
    index, members = built
    tokens = all_tokens(members)

    selection = rank(index, query, granted=granted, count=count, count_type=count_type,  # type: ignore[arg-type]
                     count_restricted=count_restricted)

    ranked = reference_rows(members, query, granted)
    taken, cut_to = reference_budget([int(tokens[row]) for row in ranked], count, count_type)
    assert selection.rows.tolist() == ranked[:taken]
    assert selection.first_bit_cut_to == cut_to
    vectors = np.concatenate([member.vectors for member in members])
    np.testing.assert_array_equal(selection.scores, exact_dot_products(vectors[selection.rows], query))
    returned_tokens = tokens[selection.rows]
    if count_type == "token" and cut_to is None:
        assert returned_tokens.sum() <= count
    if count_restricted:
        everything = reference_rows(members, query, frozenset(TAGS))
        all_taken, _ = reference_budget([int(tokens[row]) for row in everything], count, count_type)
        hidden = sum(1 for row in everything[:all_taken] if row not in set(ranked))
        assert selection.restricted == hidden


# ---- approximate search ------------------------------------------------------------------------------


def assert_obeys_the_budget(selection, index: ModelIndex, members: list[Library], query: np.ndarray,
                            granted: frozenset[str], count: int, count_type: str) -> None:
    """What any correct search must return, whichever bits it found."""
    tokens = all_tokens(members)
    vectors = np.concatenate([member.vectors for member in members])
    visible = set(reference_rows(members, query, granted))
    rows = selection.rows.tolist()
    assert len(set(rows)) == len(rows) and set(rows) <= visible, "a hidden or repeated bit"
    np.testing.assert_array_equal(selection.scores, exact_dot_products(vectors[rows], query))  # re-scored exactly
    assert all(earlier >= later for earlier, later in zip(selection.scores, selection.scores[1:]))
    if count_type == "bit":
        assert len(rows) == min(count, len(visible)) and selection.first_bit_cut_to is None
        return
    assert rows or not visible, "a token budget returns at least the first bit the caller may see"
    if not rows:
        return
    if selection.first_bit_cut_to is not None:
        assert len(rows) == 1 and tokens[rows[0]] > count and selection.first_bit_cut_to == count
        return
    used = int(tokens[rows].sum())
    assert used <= count
    if len(rows) < len(visible):  # it stopped at a bit that overflowed, ranked no better than the last
        last = selection.scores[-1]
        assert any(tokens[row] + used > count and vectors[row] @ query <= last for row in visible - set(rows))


@PROPERTY
@given(built=indexes(max_bits=40), query=queries, granted=grants, count=st.integers(1, 6),
       oversample=st.integers(1, 4))
def test_approximate_bit_budgets_obey_the_rules_with_a_small_oversample(
    built: tuple[ModelIndex, list[Library]], query: np.ndarray, granted: frozenset[str], count: int,
    oversample: int,
) -> None:
    index, members = built
    selection = rank(index, query, granted=granted, count=count, count_type="bit",
                     search=Search(approximate=True, oversample=oversample))
    assert_obeys_the_budget(selection, index, members, query, granted, count, "bit")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), bits=st.integers(1100, 1600), query=queries, granted=grants,
       count=st.integers(1, 400), oversample=st.integers(1, 8))
def test_approximate_token_budgets_obey_the_rules_on_libraries_big_enough_to_sample(
    seed: int, bits: int, query: np.ndarray, granted: frozenset[str], count: int, oversample: int
) -> None:
    """Token budgets start from 256 candidates, so only libraries over 512 bits are sampled at all."""
    rng = np.random.default_rng(seed)
    member = Library(rng.integers(-3, 4, size=(bits, DIMENSION)).astype(np.float32),
                     rng.integers(0, 40, size=bits), tuple(rng.choice([None, None, *TAGS], size=bits)))
    index = ModelIndex.of_segments((compiled("big", member),))
    selection = rank(index, query, granted=granted, count=count, count_type="token",
                     search=Search(approximate=True, oversample=oversample))
    assert_obeys_the_budget(selection, index, [member], query, granted, count, "token")


@PROPERTY
@given(built=indexes(), query=queries, granted=grants, count=st.integers(1, 200), count_type=count_types)
def test_approximate_search_covering_the_library_returns_the_exact_rows(
    built: tuple[ModelIndex, list[Library]], query: np.ndarray, granted: frozenset[str], count: int,
    count_type: str,
) -> None:
    index, _ = built
    kwargs = {"granted": granted, "count": count, "count_type": count_type}
    exact = rank(index, query, **kwargs)  # type: ignore[arg-type]
    approximate = rank(index, query, search=Search(approximate=True, oversample=index.bit_count), **kwargs)  # type: ignore[arg-type]

    assert approximate.rows.tolist() == exact.rows.tolist()
    np.testing.assert_array_equal(approximate.scores, exact.scores)
    assert approximate.first_bit_cut_to == exact.first_bit_cut_to
    assert math.isclose(len(exact.rows), len(approximate.rows))


# ---- clustered libraries (host/store/clusters.py) --------------------------------------------------------


def clustered(name: str, library: Library, clusters: int) -> Segment:
    """The arrays the store writes for a clustered library, without the disk: rows sorted by cluster."""
    plain = compiled(name, library)
    layout = plan_layout(plain.embeddings, plain.tag_ids == 0, clusters=clusters)
    order = layout.order
    return replace(plain, embeddings=plain.embeddings[order], token_counts=plain.token_counts[order],
                   tag_ids=plain.tag_ids[order], ids=plain.ids[order], sign_codes=sign_codes(plain.embeddings, order),
                   source_rows=order, centroids=layout.centroids, cluster_offsets=layout.offsets)


@st.composite
def clustered_indexes(draw: st.DrawFn, max_bits: int = 60) -> tuple[ModelIndex, list[Library]]:
    """Up to three libraries, each clustered (2-8 clusters) or stored in file order."""
    members = draw(st.lists(libraries(min_bits=1, max_bits=max_bits), min_size=1, max_size=3))
    built = tuple(clustered(f"lib{position}", member, draw(st.integers(2, 8))) if draw(st.booleans()) or position == 0
                  else compiled(f"lib{position}", member) for position, member in enumerate(members))
    return ModelIndex.of_segments(built), members


def in_file_order(index: ModelIndex, rows: np.ndarray) -> list[int]:
    """Global stored rows -> global rows of the files (what the reference ranks)."""
    return rows.tolist() if index.tie_keys is None else index.tie_keys[rows].tolist()


@PROPERTY
@given(built=clustered_indexes(), query=queries, granted=grants, count=st.integers(1, 200), count_type=count_types)
def test_exact_rank_over_clustered_libraries_is_the_file_order_brute_force_ranking(
    built: tuple[ModelIndex, list[Library]], query: np.ndarray, granted: frozenset[str], count: int,
    count_type: str,
) -> None:
    index, members = built
    tokens = all_tokens(members)

    selection = rank(index, query, granted=granted, count=count, count_type=count_type)  # type: ignore[arg-type]

    ranked = reference_rows(members, query, granted)
    taken, cut_to = reference_budget([int(tokens[row]) for row in ranked], count, count_type)
    assert in_file_order(index, selection.rows) == ranked[:taken]
    assert selection.first_bit_cut_to == cut_to


@PROPERTY
@given(built=clustered_indexes(), query=queries, granted=grants, count=st.integers(1, 200), count_type=count_types,
       threshold=st.none() | st.integers(-20, 20).map(float))
def test_a_cluster_search_reading_every_cluster_returns_the_exact_rows(
    built: tuple[ModelIndex, list[Library]], query: np.ndarray, granted: frozenset[str], count: int,
    count_type: str, threshold: float | None,
) -> None:
    index, _ = built
    assert index.clusters is not None
    kwargs = {"granted": granted, "count": count, "count_type": count_type, "similarity_threshold": threshold}
    exact = rank(index, query, **kwargs)  # type: ignore[arg-type]
    every = rank(index, query, search=Search(approximate=True, oversample=0, probes=index.clusters.count),
                 **kwargs)  # type: ignore[arg-type]

    assert every.rows.tolist() == exact.rows.tolist()
    np.testing.assert_array_equal(every.scores, exact.scores)
    assert every.first_bit_cut_to == exact.first_bit_cut_to


@PROPERTY
@given(built=clustered_indexes(max_bits=200), query=queries, granted=grants, count=st.integers(1, 8),
       count_type=count_types, probes=st.integers(1, 3), oversample=st.integers(0, 20))
def test_a_cluster_search_of_a_few_clusters_obeys_the_budget_rules(
    built: tuple[ModelIndex, list[Library]], query: np.ndarray, granted: frozenset[str], count: int,
    count_type: str, probes: int, oversample: int,
) -> None:
    index, members = built
    selection = rank(index, query, granted=granted, count=count, count_type=count_type,  # type: ignore[arg-type]
                     search=Search(approximate=True, oversample=oversample, probes=probes))
    as_in_files = replace(selection, rows=np.array(in_file_order(index, selection.rows), dtype=np.int64))
    assert_obeys_the_budget(as_in_files, index, members, query, granted, count, count_type)


@PROPERTY
@given(built=clustered_indexes(max_bits=200), query=queries, granted=grants, count=st.integers(1, 30),
       probes=st.integers(1, 3), seed=st.integers(0, 2**32 - 1), threshold=st.none() | st.integers(-10, 10).map(float))
def test_a_cluster_search_keeps_to_the_constraint_and_the_threshold(
    built: tuple[ModelIndex, list[Library]], query: np.ndarray, granted: frozenset[str], count: int, probes: int,
    seed: int, threshold: float | None,
) -> None:
    index, _ = built
    constraint = np.random.default_rng(seed).random(index.bit_count) < 0.6
    selection = rank(index, query, granted=granted, count=count, count_type="bit", constraint=constraint,
                     similarity_threshold=threshold, search=Search(approximate=True, oversample=0, probes=probes))

    visible = index.visible_rows(granted)
    allowed = constraint if visible is None else constraint & visible
    assert all(allowed[row] for row in selection.rows)
    assert threshold is None or bool(np.all(selection.scores >= np.float32(threshold)))
    assert all(earlier >= later for earlier, later in zip(selection.scores, selection.scores[1:]))
