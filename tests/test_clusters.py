"""The clustered layout (issue 14): libraries stored sorted by cluster, searched cluster by cluster.

Real files throughout: library JSON written to disk, compiled with `write_compiled` (with a small
`cluster_from`, so that test-sized libraries get a layout) and opened memory-mapped. What must
hold: the layout is a deterministic permutation; nothing a caller sees depends on it in exact
mode (the answers render to the same bytes as from the file-order store); the cluster search
returns the exact answer when it reads every cluster, finds the nearest bits when it reads a few,
and never shows a hidden bit; private bits never shape the layout a public caller is searched by.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from librarian import TEST_MODEL, make_bit, write_library

from access import Grant
from host.catalog.model_index import ModelIndex
from host.library.format import parse_library
from host.library.omit import parse_omit
from host.results.answers import build_result
from host.results.published import publish_library
from host.search.engine import EXACT, Search, rank
from host.search.query import Query, SearchPolicy, run_query
from host.store import clusters
from host.store.clusters import CLUSTER_FROM, plan_layout
from host.store.compiled import Segment, SourceKey, StoreError, file_sha256, open_segment, write_compiled
from host.web.responses import render_json

DIMENSION = 32
NOBODY: frozenset[str] = frozenset()


def blobs(count: int, seed: int, centres: int = 12) -> np.ndarray:
    """Unit vectors around a few centres: data with clusters to find."""
    rng = np.random.default_rng(seed)
    middles = rng.standard_normal((centres, DIMENSION)).astype(np.float32)
    vectors = middles[rng.integers(0, centres, count)] + 0.7 * rng.standard_normal((count, DIMENSION)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def library_file(path: Path, vectors: np.ndarray, *, tags: list[str | None] | None = None, first: int = 0) -> Path:
    """A library file of `vectors`, its bits numbered from `first` (bits of two files differ)."""
    tags = tags or [None] * len(vectors)
    counts = [10 + row % 50 for row in range(len(vectors))]
    bits = [make_bit(first + row, vector, count, **({"access_tag": tag} if tag else {}))
            for row, (vector, count, tag) in enumerate(zip(vectors, counts, tags))]
    return write_library(path, {"version": 1, "embedding_model": TEST_MODEL, "bits": bits})


def compile_file(path: Path, cluster_from: int, folder: Path | None = None) -> Segment:
    """Compile `path` as the store does, with clusters from `cluster_from` bits."""
    folder = folder or path.parent / ".compiled" / path.stem
    stat = path.stat()
    key = SourceKey(size=stat.st_size, mtime_ns=stat.st_mtime_ns, sha256=file_sha256(path))
    write_compiled(parse_library(json.loads(path.read_text())), folder, key, path.stem, cluster_from=cluster_from)
    return open_segment(folder)


def index_of(*libraries: Segment) -> ModelIndex:
    return ModelIndex.of_segments(libraries)


def rendered(index: ModelIndex, query: np.ndarray, **arguments: Any) -> bytes:
    """The bytes a client gets: the selection rendered as `POST /` renders it, with embeddings."""
    selection = rank(index, query, granted=arguments.pop("granted", NOBODY), **arguments)
    return render_json(build_result(index, selection, parse_omit("")))


def top(index: ModelIndex, query: np.ndarray, search: Search, granted: frozenset[str] = NOBODY,
        count: int = 10) -> list[str]:
    rows = rank(index, query, granted=granted, count=count, count_type="bit", search=search).rows
    return [index.locate(int(row))[0].bit_id(index.locate(int(row))[1]) for row in rows]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModelIndex, ModelIndex, np.ndarray]:
    """One file (1,200 bits, a third private, some vectors repeated for ties) compiled twice:
    in file order and clustered."""
    folder = tmp_path_factory.mktemp("pair")
    vectors = blobs(1200, seed=1)
    vectors[600:640] = vectors[0]  # 41 bits with one vector: ties that only file order can break
    tags = ["team" if row % 3 == 1 else None for row in range(1200)]
    path = library_file(folder / "lib.json", vectors, tags=tags)
    plain = compile_file(path, cluster_from=10**9, folder=folder / "plain")
    clustered = compile_file(path, cluster_from=100, folder=folder / "clustered")
    assert plain.centroids is None and clustered.centroids is not None
    return index_of(plain), index_of(clustered), vectors


# ---- the layout -------------------------------------------------------------------------------------


def test_a_layout_is_a_permutation_sorted_by_cluster_with_file_order_within_each() -> None:
    vectors = blobs(900, seed=2)

    layout = plan_layout(vectors, np.ones(900, dtype=bool))

    assert sorted(layout.order.tolist()) == list(range(900))
    assert layout.offsets[0] == 0 and layout.offsets[-1] == 900 and np.all(np.diff(layout.offsets) >= 0)
    np.testing.assert_allclose(np.linalg.norm(layout.centroids, axis=1), 1, rtol=1e-5)
    for cluster in range(layout.clusters):
        members = layout.order[layout.offsets[cluster] : layout.offsets[cluster + 1]]
        assert np.all(np.diff(members) > 0)  # file order within a cluster
        nearest = np.argmax(vectors[members] @ layout.centroids.T, axis=1)
        assert np.all(nearest == cluster)


def test_the_same_file_compiles_to_the_same_bytes(tmp_path: Path) -> None:
    path = library_file(tmp_path / "lib.json", blobs(700, seed=3))

    compile_file(path, cluster_from=100, folder=tmp_path / "one")
    compile_file(path, cluster_from=100, folder=tmp_path / "two")

    for name in ("embeddings.npy", "source_rows.npy", "centroids.npy", "cluster_offsets.npy", "records.bin",
                 "text_index.bin", "sign_codes.npy", "ids.npy"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name


def test_private_rows_never_move_a_public_row_or_a_centroid() -> None:
    vectors = blobs(1000, seed=4)
    public = np.arange(1000) % 4 != 0

    with_private = plan_layout(vectors, public)
    public_only = plan_layout(vectors[public], np.ones(int(public.sum()), dtype=bool))

    np.testing.assert_array_equal(with_private.centroids, public_only.centroids)
    cluster_of = np.repeat(np.arange(with_private.clusters), np.diff(with_private.offsets))
    labels = np.empty(1000, dtype=np.int64)
    labels[with_private.order] = cluster_of
    public_labels = np.empty(int(public.sum()), dtype=np.int64)
    public_labels[public_only.order] = np.repeat(np.arange(public_only.clusters), np.diff(public_only.offsets))
    np.testing.assert_array_equal(labels[public], public_labels)


def test_a_clustered_library_holds_every_bit_of_the_file_and_publishes_them_in_file_order(tmp_path: Path) -> None:
    path = library_file(tmp_path / "lib.json", blobs(500, seed=5))
    parsed = parse_library(json.loads(path.read_text()))

    library = compile_file(path, cluster_from=100)

    assert library.source_rows is not None and library.source_rows.tolist() != list(range(500))
    file_rows = library.stored_rows_in_file_order
    np.testing.assert_array_equal(library.embeddings[file_rows], parsed.embeddings)
    assert [library.bit_id(row) for row in file_rows.tolist()] == parsed.ids
    assert [library.record(row) for row in file_rows.tolist()] == parsed.records
    assert library.token_counts[file_rows].tolist() == parsed.token_counts.tolist()
    published = publish_library(ModelIndex.of_segments((library,)).libraries[0], NOBODY)
    assert [bit["text"] for bit in published["bits"]] == [record["text"] for record in parsed.records]


def test_a_damaged_layout_is_refused(tmp_path: Path) -> None:
    path = library_file(tmp_path / "lib.json", blobs(300, seed=6))
    library = compile_file(path, cluster_from=100)
    folder = tmp_path / ".compiled" / "lib"
    assert library.source_rows is not None
    damaged = library.source_rows.copy()
    damaged[0] = damaged[1]
    np.save(folder / "source_rows.npy", damaged)

    with pytest.raises(StoreError, match="not a permutation"):
        open_segment(folder)


# ---- exact search is unchanged ------------------------------------------------------------------


@pytest.mark.parametrize("granted", [NOBODY, frozenset({"team"})])
@pytest.mark.parametrize(("count", "count_type"), [(1, "bit"), (10, "bit"), (60, "bit"), (300, "token"), (5, "token")])
def test_exact_answers_render_to_the_same_bytes_as_from_the_file_order_store(
    pair: tuple[ModelIndex, ModelIndex, np.ndarray], granted: frozenset[str], count: int, count_type: str
) -> None:
    plain, clustered, vectors = pair
    rng = np.random.default_rng(count)
    queries = [vectors[0], *(vectors[rng.integers(0, 1200, 6)] + 0.1 * rng.standard_normal((6, DIMENSION)))]

    for query in np.asarray(queries, dtype=np.float32):
        arguments = {"granted": granted, "count": count, "count_type": count_type}
        assert rendered(clustered, query, **arguments) == rendered(plain, query, **arguments)


def test_exact_ties_break_in_file_order_on_a_clustered_store(pair: tuple[ModelIndex, ModelIndex, np.ndarray]) -> None:
    _, clustered, vectors = pair

    ids = top(clustered, vectors[0], EXACT, granted=frozenset({"team"}), count=41)

    assert ids == [make_bit_id(clustered, row) for row in [0, *range(600, 640)]]


def make_bit_id(index: ModelIndex, file_row: int) -> str:
    segment = index.segments[0]
    stored = int(np.flatnonzero(segment.source_rows == file_row)[0]) if segment.source_rows is not None else file_row
    return segment.bit_id(stored)


# ---- the cluster search ---------------------------------------------------------------------------


def test_reading_every_cluster_gives_the_exact_answer(pair: tuple[ModelIndex, ModelIndex, np.ndarray]) -> None:
    _, clustered, vectors = pair
    assert clustered.clusters is not None
    everything = Search(approximate=True, oversample=0, probes=clustered.clusters.count)
    rng = np.random.default_rng(9)

    for query in vectors[rng.integers(0, 1200, 20)] + 0.2 * rng.standard_normal((20, DIMENSION)).astype(np.float32):
        for granted, count, count_type in [(NOBODY, 25, "bit"), (frozenset({"team"}), 400, "token")]:
            arguments: dict[str, Any] = {"granted": granted, "count": count, "count_type": count_type}
            assert (rendered(clustered, query, search=everything, **arguments)
                    == rendered(clustered, query, search=EXACT, **arguments))


def test_a_few_nearest_clusters_hold_the_nearest_bits(pair: tuple[ModelIndex, ModelIndex, np.ndarray]) -> None:
    _, clustered, vectors = pair
    few = Search(approximate=True, oversample=0, probes=3)
    rng = np.random.default_rng(10)
    recalls = []

    for row in rng.choice(1200, 60, replace=False):
        query = vectors[row] + 0.05 * rng.standard_normal(DIMENSION).astype(np.float32)
        exact, approximate = top(clustered, query, EXACT), top(clustered, query, few)
        recalls.append(len(set(exact) & set(approximate)) / 10)

    assert np.mean(recalls) >= 0.95


def test_cluster_search_shows_no_hidden_bit_and_keeps_to_constraint_and_threshold(
    pair: tuple[ModelIndex, ModelIndex, np.ndarray],
) -> None:
    _, clustered, vectors = pair
    search = Search(approximate=True, oversample=0, probes=2)
    constraint = np.asarray(clustered.token_counts % 2 == 0)  # half the bits, too many for a subset scan
    query = vectors[5]

    selection = rank(clustered, query, granted=NOBODY, count=50, count_type="bit", search=search,
                     constraint=constraint, similarity_threshold=0.3)

    assert len(selection.rows) > 0
    assert all(clustered.tag_ids[row] == 0 and constraint[row] for row in selection.rows)
    assert np.all(selection.scores >= np.float32(0.3))
    exact = rank(clustered, query, granted=NOBODY, count=50, count_type="bit", constraint=constraint,
                 similarity_threshold=0.3)
    assert set(selection.rows.tolist()) <= set(np.flatnonzero(constraint & (clustered.tag_ids == 0)).tolist())
    assert len(selection.rows) <= len(exact.rows)


def test_private_bits_never_change_what_an_anonymous_caller_gets_from_cluster_search(tmp_path: Path) -> None:
    vectors = blobs(1500, seed=11)
    tags: list[str | None] = ["board" if row % 5 == 2 else None for row in range(1500)]
    mixed = compile_file(library_file(tmp_path / "mixed.json", vectors, tags=tags), cluster_from=100)
    public_rows = [row for row in range(1500) if tags[row] is None]
    public_file = json.loads((tmp_path / "mixed.json").read_text())
    public_file["bits"] = [public_file["bits"][row] for row in public_rows]
    public = compile_file(write_library(tmp_path / "public.json", public_file), cluster_from=100)
    search = Search(approximate=True, oversample=0, probes=2)
    rng = np.random.default_rng(12)

    for query in vectors[rng.integers(0, 1500, 15)] + 0.1 * rng.standard_normal((15, DIMENSION)).astype(np.float32):
        for count, count_type in [(10, "bit"), (200, "token")]:
            arguments: dict[str, Any] = {"count": count, "count_type": count_type, "search": search}
            assert rendered(index_of(mixed), query, **arguments) == rendered(index_of(public), query, **arguments)


def test_a_library_stored_without_clusters_is_always_read_beside_the_clustered_one(tmp_path: Path) -> None:
    vectors = blobs(1000, seed=13)
    big = compile_file(library_file(tmp_path / "a.json", vectors[:900]), cluster_from=100)
    small = compile_file(library_file(tmp_path / "b.json", vectors[900:], first=900), cluster_from=10**9)
    index = index_of(big, small)
    assert index.clusters is not None and index.clusters.loose == ((900, 1000),)
    few = Search(approximate=True, oversample=0, probes=1)

    for row in range(900, 1000, 7):  # bits of the small library are always found
        assert top(index, vectors[row], few, count=1) == top(index, vectors[row], EXACT, count=1)


def test_auto_search_reads_clusters_from_the_size_at_which_libraries_are_clustered() -> None:
    """Below CLUSTER_FROM a library keeps file order and exact search is a few milliseconds; from
    it, the cluster scan is faster with the same answers (docs/performance.md), so `auto` uses it."""
    policy = SearchPolicy()

    assert not policy.for_bits(CLUSTER_FROM - 1).approximate
    assert policy.for_bits(CLUSTER_FROM).approximate
    assert not SearchPolicy(mode="exact").for_bits(10 * CLUSTER_FROM).approximate


def test_k_means_stops_once_a_round_moves_fewer_rows_than_settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """On these blobs a few rows still change cluster at every round (centroids that share a blob
    trade its rows slowly): k-means stops once a round moves fewer than SETTLED of the sample's
    rows, and runs every round while more move."""
    rounds: list[int] = []
    nearest = clusters.nearest_centroids
    monkeypatch.setattr(clusters, "nearest_centroids", lambda *args, **kwargs: rounds.append(1) or nearest(*args, **kwargs))
    sample = blobs(3_000, seed=4, centres=6)

    def trained(settled: float) -> tuple[np.ndarray, int]:
        monkeypatch.setattr(clusters, "SETTLED", settled)
        rounds.clear()
        return clusters.train_centroids(sample, 6, np.random.default_rng(clusters.SEED)), len(rounds)

    _, every_round = trained(1e-9)  # only a round that moves no row would end it
    centroids, settled_rounds = trained(0.01)
    assert every_round == clusters.ITERATIONS
    assert settled_rounds < clusters.ITERATIONS

    labels = nearest(sample, centroids)  # one more round moves fewer than 1% of the rows too
    means = np.array([sample[labels == cluster].sum(axis=0) for cluster in range(6)])
    assert np.mean(nearest(sample, means / np.linalg.norm(means, axis=1, keepdims=True)) != labels) < 0.01


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
@pytest.mark.parametrize("question", ["bit number", "number 600 7", "word641_3 bit", "word5_3 word605_3"])
@pytest.mark.parametrize("granted", [NOBODY, frozenset({"team"})], ids=["anonymous", "team"])
def test_keyword_and_hybrid_answers_are_the_same_clustered_or_not(
        pair: tuple[ModelIndex, ModelIndex, np.ndarray], mode: str, question: str, granted: frozenset[str]) -> None:
    answers = []
    for index in pair[:2]:
        query = Query(pair[2][3] if mode == "hybrid" else None, 20, "bit", text=question, mode=mode)  # type: ignore[arg-type]
        selection = run_query(index, query, Grant("someone" if granted else None, granted), SearchPolicy(mode="exact"))
        answers.append([(index.locate(int(row))[0].bit_id(index.locate(int(row))[1]), score)
                        for row, score in zip(selection.rows.tolist(), selection.ranks.tolist())])
    assert answers[0] == answers[1] and len(answers[0]) > 1
