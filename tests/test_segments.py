"""Many library files, few segments (issue 36, item 1): what changes when one file changes, and merges.

Real files and real compiles: a folder of small libraries is compiled into one segment; a file
added, changed or deleted afterwards is compiled alone (or dropped) without touching the others; the
rows of a replaced file serve no one until a merge writes its segment again; merges keep every
answer the same, bit for bit, and never undo a change made while they ran.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from librarian import TEST_MODEL, b64, make_bit, unit_vectors, write_library

from access import ANONYMOUS, Grant
from host.catalog.generations import Catalog, load_catalog
from host.catalog.merging import TIER_FACTOR, SegmentUse, merge, merges_due, segment_uses
from host.catalog.plan import SEGMENTS, read_plan
from host.search.query import Query, SearchPolicy, run_query

VECTORS = unit_vectors(200, seed=7)
EXACT = SearchPolicy(mode="exact")


def writer(first: int, bits: int = 4, *, tag: str | None = None, text: str = "") -> dict:
    found = [make_bit(first + row, VECTORS[first + row], 5, **({"access_tag": tag} if tag else {}))
             for row in range(bits)]
    for bit in found:
        bit["text"] = f"{text} {bit['text']}".strip()
    return {"version": 1, "embedding_model": TEST_MODEL, "bits": found}


def folder_of(tmp_path: Path, count: int) -> Path:
    root = tmp_path / "libraries"
    for number in range(count):
        write_library(root / f"pub{number % 3}" / f"lib{number:02d}.json", writer(number * 4))
    return root


def answer(catalog: Catalog, query: np.ndarray, grant: Grant = ANONYMOUS, **fields: object) -> list[tuple[str, float]]:
    """The top bits by id with their scores (ids and scores do not depend on where rows are stored)."""
    index = catalog.models[TEST_MODEL]
    selection = run_query(index, Query(query, 12, "bit", **fields), grant, EXACT)  # type: ignore[arg-type]
    scores = selection.scores if selection.ranks is None else selection.ranks
    return [(index.locate(row)[0].bit_id(index.locate(row)[1]), float(score))
            for row, score in zip(selection.rows.tolist(), scores.tolist())]


def segments_of(catalog: Catalog) -> dict[str, str]:
    return {library.name: library.segment.name for library in catalog.libraries}


def test_a_folder_of_small_files_is_one_segment_whatever_their_number(tmp_path: Path) -> None:
    catalog = load_catalog(folder_of(tmp_path, 30))
    assert len(catalog.libraries) == 30 and len(catalog.segments) == 1
    assert len(catalog.models[TEST_MODEL].segments) == 1


def test_a_changed_file_is_compiled_alone_and_its_old_rows_serve_no_one(tmp_path: Path) -> None:
    root = folder_of(tmp_path, 12)
    first = load_catalog(root)
    query = VECTORS[20]
    write_library(root / "pub2" / "lib05.json", writer(20, text="changed"))  # lib05 held bits 20-23

    second = load_catalog(root, previous=first)

    before, after = segments_of(first), segments_of(second)
    assert [name for name in after if after[name] != before[name]] == ["pub2/lib05"]
    assert second.library("pub2/lib05").segment.bit_count == 4
    index = second.models[TEST_MODEL]
    assert index.has_unserved and index.visible_count(frozenset()) == 48
    texts = [index.locate(row)[0].record(index.locate(row)[1])["text"] for row in
             run_query(index, Query(query, 12, "bit"), ANONYMOUS, EXACT).rows.tolist()]
    assert texts[0].startswith("changed bit number 20 ")
    assert not any(text.startswith("bit number 20 ") for text in texts)  # the old copy serves no one


def test_a_deleted_file_goes_without_anything_compiled(tmp_path: Path) -> None:
    root = folder_of(tmp_path, 6)
    first = load_catalog(root)
    (root / "pub1" / "lib04.json").unlink()
    said: list[str] = []

    second = load_catalog(root, previous=first, progress=said.append)

    assert said == ["5 libraries in 1 segment, none compiled"]
    assert "pub1/lib04" not in segments_of(second)
    assert second.models[TEST_MODEL].visible_count(frozenset()) == 20


def test_a_merge_keeps_every_answer_and_drops_the_rows_no_one_is_served(tmp_path: Path) -> None:
    root = folder_of(tmp_path, 9)
    catalog = load_catalog(root)
    for number in (1, 4, 7):  # three edits, one at a time: three small segments
        write_library(root / f"pub{number % 3}" / f"lib{number:02d}.json", writer(number * 4, text=f"edit {number}"))
        catalog = load_catalog(root, previous=catalog)
    write_library(root / "pub0" / "access" / "team" / "plans.json", writer(100, tag=None))
    catalog = load_catalog(root, previous=catalog)
    assert len(catalog.segments) == 5
    queries = [VECTORS[4], VECTORS[29], VECTORS[101]]
    before = [answer(catalog, query) for query in queries] + [answer(catalog, VECTORS[101], Grant("x", frozenset({"team"})))]
    plan = read_plan(root / ".compiled")

    merged = merge(root / ".compiled", [segment.name for segment in catalog.segments],
                   {segment.name: segment for segment in catalog.segments}, plan)
    after_merge = load_catalog(root, previous=catalog)

    assert merged is not None and [segment.name for segment in after_merge.segments] == [merged]
    assert not after_merge.models[TEST_MODEL].has_unserved and after_merge.segments[0].bit_count == 40
    assert [answer(after_merge, query) for query in queries] + [
        answer(after_merge, VECTORS[101], Grant("x", frozenset({"team"})))] == before
    assert sorted(path.name for path in (root / ".compiled" / SEGMENTS).iterdir()) == [merged]


def test_a_file_changed_while_a_merge_ran_keeps_its_newer_version(tmp_path: Path) -> None:
    root = folder_of(tmp_path, 4)
    catalog = load_catalog(root)
    write_library(root / "pub1" / "lib01.json", writer(4, text="second"))
    catalog = load_catalog(root, previous=catalog)
    plan, segments = read_plan(root / ".compiled"), {segment.name: segment for segment in catalog.segments}
    write_library(root / "pub1" / "lib01.json", writer(4, text="third"))  # published while the merge runs
    newer = load_catalog(root, previous=catalog)

    merge(root / ".compiled", list(segments), segments, plan)
    merged = load_catalog(root, previous=newer)

    assert merged.library("pub1/lib01").record(0)["text"].startswith("third")
    assert merged.library("pub1/lib01").segment is newer.library("pub1/lib01").segment


def test_segments_of_a_tier_merge_once_enough_gather_and_mostly_unserved_ones_alone() -> None:
    kind = (TEST_MODEL, "english")
    small = [SegmentUse(f"s{number}", kind, 10, 10) for number in range(TIER_FACTOR - 1)]
    assert merges_due([SegmentUse("big", kind, 100_000, 99_000), *small]) == []
    assert merges_due([*small, SegmentUse("one-more", kind, 40, 40)]) == [sorted([*(use.name for use in small), "one-more"])]
    assert merges_due([SegmentUse("big", kind, 100_000, 40_000)]) == [["big"]]  # 60% of its rows serve no one
    other = [SegmentUse(f"o{number}", ("other:model", "english"), 10, 10) for number in range(TIER_FACTOR - 1)]
    assert merges_due([*small, *other]) == []  # never across models


def test_what_a_segment_serves_is_counted_from_the_plan(tmp_path: Path) -> None:
    root = folder_of(tmp_path, 3)
    catalog = load_catalog(root)
    (root / "pub0" / "lib00.json").unlink()
    catalog = load_catalog(root, previous=catalog)
    segments = {segment.name: segment for segment in catalog.segments}
    (use,) = segment_uses(read_plan(root / ".compiled"), segments)
    assert (use.rows, use.served) == (12, 8)


@pytest.mark.parametrize("broken", ["{", '{"version": 1, "bits": []}', ""])
def test_broken_files_among_many_are_each_named_once_and_the_rest_serve(tmp_path: Path, broken: str) -> None:
    root = folder_of(tmp_path, 20)
    for number in (3, 11, 17):
        (root / f"pub{number % 3}" / f"lib{number:02d}.json").write_text(broken)

    catalog = load_catalog(root)

    assert len(catalog.libraries) == 17 and len(catalog.problems) == 3
    assert sorted(problem.split(":")[0] for problem in catalog.problems) == sorted(
        str(root / f"pub{number % 3}" / f"lib{number:02d}.json") for number in (3, 11, 17))
    assert catalog.models[TEST_MODEL].visible_count(frozenset()) == 68
    assert b64(VECTORS[0])  # the vectors are real: a query answers from the 17
    assert len(answer(catalog, VECTORS[0])) == 12


def test_a_serving_host_merges_the_segments_edits_leave_and_answers_the_same(tmp_path: Path) -> None:
    import httpx
    from conftest import start_host, stop_host

    root = folder_of(tmp_path, 9)
    host = start_host(root, "--watch-interval", "0.2")
    try:
        def top_text(first: int) -> str:
            answer = httpx.post(f"{host.url}/", json={"query_embedding": b64(VECTORS[first]), "count": 1,
                                                       "count_type": "bit"}).json()
            return str(answer["bits"][0]["text"])

        for number in range(TIER_FACTOR):  # one edit at a time: a small segment each
            write_library(root / f"pub{number % 3}" / f"lib{number:02d}.json", writer(number * 4, text=f"edit {number}"))
            host.wait_until(lambda number=number: top_text(number * 4).startswith(f"edit {number} "), timeout=15,
                            what=f"edit {number} served")
        host.wait_until(lambda: "merged" in host.log() and len(list((root / ".compiled" / SEGMENTS).iterdir())) <= 2,
                        timeout=30, what="the edits' segments merged")
        for number in range(TIER_FACTOR + 2):
            edited = f"edit {number} " if number < TIER_FACTOR else ""
            assert top_text(number * 4).startswith(f"{edited}bit number {number * 4} ")
    finally:
        stop_host(host)


def test_a_bad_file_is_read_and_named_once_until_it_changes(tmp_path: Path) -> None:
    root = folder_of(tmp_path, 4)
    broken = root / "pub0" / "lib03.json"
    broken.write_text('{"version": 1, "bits": [')
    first = load_catalog(root)
    assert [line.startswith(f"{broken}: not valid JSON") for line in first.new_problems] == [True]

    again = load_catalog(root, previous=first)  # another worker, or the next reload

    assert again.problems == first.problems and again.new_problems == ()
    write_library(broken, writer(200 - 4))  # mended
    mended = load_catalog(root, previous=again)
    assert mended.problems == () and mended.library("pub0/lib03") is not None
