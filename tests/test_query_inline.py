"""Which queries `POST /` answers on the event loop's own thread (host/web/query_endpoint.py): those
that read little. The answers are the same either way: every end-to-end test of `POST /` on small
libraries now goes through the inline path, and larger budgets, constraints and exact scans of
large libraries through the worker thread."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from librarian import make_library, unit_vectors, write_library

from host.catalog.model_index import ModelIndex
from host.library.format import parse_library
from host.search.batching import BATCHER
from host.search.query import SearchPolicy
from host.store.compiled import SourceKey, file_sha256, open_segment, write_compiled
from host.web import query_endpoint
from host.web.query_args import QueryArgs, parse_query_args
from host.web.query_endpoint import INLINE_BITS, INLINE_TOKENS, runs_inline


def compiled_index(folder: Path, bits: int, dimension: int, cluster_from: int) -> ModelIndex:
    path = write_library(folder / "lib.json", make_library(unit_vectors(bits, dimension)))
    stat = path.stat()
    key = SourceKey(size=stat.st_size, mtime_ns=stat.st_mtime_ns, sha256=file_sha256(path))
    write_compiled(parse_library(json.loads(path.read_text())), folder / "compiled", key, "lib", cluster_from=cluster_from)
    return ModelIndex.of_segments((open_segment(folder / "compiled"),))


def arguments(**fields: object) -> QueryArgs:
    return parse_query_args(fields, max_count=100_000, max_embedding_bytes=1 << 20)


@pytest.fixture(scope="module")
def clustered(tmp_path_factory: pytest.TempPathFactory) -> ModelIndex:
    index = compiled_index(tmp_path_factory.mktemp("clustered"), 2000, 8, cluster_from=100)
    assert index.clusters is not None
    return index


APPROXIMATE = SearchPolicy(mode="approximate").for_bits(2000)
EXACT = SearchPolicy(mode="exact").for_bits(2000)


def test_a_small_budget_over_a_cluster_scan_is_answered_inline(clustered: ModelIndex) -> None:
    assert runs_inline(clustered, arguments(count=10, count_type="bit"), APPROXIMATE, None)
    assert runs_inline(clustered, arguments(count=INLINE_TOKENS), APPROXIMATE, None)
    assert runs_inline(clustered, arguments(), APPROXIMATE, None)  # the default budget, 1,000 tokens


def test_a_large_budget_a_constraint_or_a_choice_of_large_libraries_goes_to_a_worker_thread(
        clustered: ModelIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not runs_inline(clustered, arguments(count=INLINE_BITS + 1, count_type="bit"), APPROXIMATE, None)
    assert not runs_inline(clustered, arguments(count=INLINE_TOKENS + 1), APPROXIMATE, None)
    assert not runs_inline(clustered, arguments(count=10, count_type="bit", constraint="title:bit"), APPROXIMATE, None)
    monkeypatch.setattr(query_endpoint, "INLINE_CHOSEN_ROWS", clustered.bit_count - 1)
    assert not runs_inline(clustered, arguments(count=10, count_type="bit"), APPROXIMATE, frozenset({"lib"}))
    monkeypatch.setattr(query_endpoint, "INLINE_CHOSEN_ROWS", clustered.bit_count)  # a small library chosen: its rows
    assert runs_inline(clustered, arguments(count=10, count_type="bit"), APPROXIMATE, frozenset({"lib"}))


def test_exact_scans_run_inline_only_below_the_size_from_which_they_share_passes(tmp_path: Path,
                                                                                 clustered: ModelIndex) -> None:
    small_budget = arguments(count=10, count_type="bit")
    assert clustered.bit_count < BATCHER.batch_from
    assert runs_inline(clustered, small_budget, EXACT, None)
    large = compiled_index(tmp_path, BATCHER.batch_from, 8, cluster_from=10**9)
    assert large.clusters is None
    assert not runs_inline(large, small_budget, SearchPolicy(mode="exact").for_bits(large.bit_count), None)
    # Approximate over a library stored without clusters reads its sign codes: a worker thread too.
    assert not runs_inline(large, small_budget, SearchPolicy(mode="approximate").for_bits(large.bit_count), None)


def test_a_cluster_scan_reading_too_many_values_goes_to_a_worker_thread(clustered: ModelIndex) -> None:
    wide = SearchPolicy(mode="approximate", oversample=10**9).for_bits(2000)  # every row, and then some
    assert not runs_inline(clustered, arguments(count=10, count_type="bit"), wide, None)
