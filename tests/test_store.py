"""The compiled store: a library file is parsed once, then opened as memory-mapped arrays.

Every test works on real files under tmp_path: a source `lib.json` loaded as `serve` and `build`
load it (host/catalog/generations.py), its segment in `.compiled/segments/` and the plan naming it.
"""

from __future__ import annotations

import copy
import json
import mmap
import os
from pathlib import Path

import numpy as np
import pytest
from librarian import TEST_MODEL, b64, make_bit, make_library, unit_vectors, write_library

from host.catalog.generations import load_catalog
from host.catalog.libraries import Library
from host.catalog.plan import SEGMENTS, read_plan
from host.library.canonical import canonical_id
from host.library.format import parse_library
from host.library.problems import LibraryFormatError
from host.store.compiled import StoreError, compile_library, file_sha256, open_segment

COMPILED_FILES = {  # at least these; the store may add more arrays
    "embeddings.npy", "token_counts.npy", "tag_ids.npy", "ids.npy",
    "records.bin", "record_offsets.npy", "meta.json",
}


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return write_library(tmp_path / "lib.json", make_library(unit_vectors(3), [5, 7, 9]))


def compiled_folder(source: Path) -> Path:
    """The folder of the segment serving `source`, as the plan says."""
    cache = source.parent / ".compiled"
    return cache / SEGMENTS / read_plan(cache)[source.stem].segment


def load(source: Path, **options) -> tuple[Library, bool]:
    """`source` loaded as a host loads its folder: the library, and whether it was compiled now. A
    problem with the file is raised, as the first line the catalog reports."""
    said: list[str] = []
    catalog = load_catalog(source.parent, progress=said.append, **options)
    if catalog.problems:
        raise LibraryFormatError(catalog.problems[0].removeprefix(f"{source}: "))
    library = catalog.library(source.stem)
    assert library is not None
    return library, any(line.startswith("compiled ") for line in said)


def keep_stat_but_garble(source: Path) -> None:
    """Overwrite the source with same-size non-JSON, then put its mtime back."""
    before = source.stat()
    source.write_bytes(b"\xff" * before.st_size)
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))


def touch_later(path: Path) -> None:
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))


# ---- compiling --------------------------------------------------------------------------------


def test_first_load_compiles_every_file_of_the_folder(source):
    library, compiled_now = load(source)

    assert compiled_now
    folder = compiled_folder(source)
    assert {path.name for path in folder.iterdir()} >= COMPILED_FILES
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["bits"] == 3 and meta["dimension"] == 8 and meta["embedding_model"] == TEST_MODEL
    [member] = meta["members"]
    assert member["source"]["sha256"] == file_sha256(source) and (member["first"], member["stop"]) == (0, 3)
    assert member["source"]["size"] == source.stat().st_size
    assert library.name == "lib" and library.bit_count == 3 and library.dimension == 8


def test_compiled_library_gives_back_what_the_file_held(source):
    parsed = parse_library(json.loads(source.read_text()))

    segment = load(source)[0].segment

    np.testing.assert_array_equal(segment.embeddings, parsed.embeddings)
    assert segment.token_counts.tolist() == [5, 7, 9]
    assert [segment.record(row) for row in range(3)] == parsed.records
    assert [segment.bit_id(row) for row in range(3)] == parsed.ids


def test_records_give_back_the_texts_and_infos_the_file_held(tmp_path):
    library = make_library(unit_vectors(2, 8))
    library["bits"][0]["text"] = "日本語 🎉 \u0000 \\ \"quoted\""
    library["bits"][0]["info"] = {"url": "https://example.com/ü", "title": "x" * 70_000, "empty": ""}
    source = write_library(tmp_path / "lib.json", library)

    compiled, _ = load(source)

    assert [compiled.record(row) for row in range(2)] == parse_library(json.loads(source.read_text())).records


def test_bit_id_keeps_trailing_zero_bytes(tmp_path):
    # numpy's S32 drops trailing NUL bytes on read; an id ending in 00 must still round-trip.
    library = make_library(unit_vectors(1))
    bit = library["bits"][0]
    bit["text"] = next(text for text in (f"text {n}" for n in range(100_000))
                       if canonical_id(bit["info"]["url"], text).endswith("00"))
    source = write_library(tmp_path / "lib.json", library)

    compiled, _ = load(source)

    assert compiled.segment.bit_id(0) == canonical_id(bit["info"]["url"], bit["text"])


def test_access_tags_are_stored_and_public_bits_stay_visible(tmp_path):
    library = make_library(unit_vectors(3))
    library["bits"][1]["access_tag"] = "staff"
    source = write_library(tmp_path / "lib.json", library)

    compiled, _ = load(source)

    assert compiled.segment.tags == ("", "staff") and compiled.tags == ("", "staff")
    assert compiled.segment.visible_rows(frozenset()).tolist() == [True, False, True]
    assert compiled.segment.visible_rows(frozenset({"staff"})).tolist() == [True, True, True]
    assert compiled.visible_bit_count(frozenset({"other"})) == 2


def public_digest(tmp_path: Path, library: dict, name: str) -> str:
    folder = tmp_path / f"{name}.compiled"
    return compile_library(write_library(tmp_path / f"{name}.json", library), folder, name=name).public_digest


def test_the_public_digest_changes_with_every_public_part_and_with_nothing_private(tmp_path):
    library = make_library(unit_vectors(2_500, 8, seed=4), [row % 40 for row in range(2_500)])  # several blocks
    library["details"] = {"message": "hello"}
    digest = public_digest(tmp_path, library, "public")
    with_private = copy.deepcopy(library)
    for row, vector in enumerate(unit_vectors(30, 8, seed=5)):
        with_private["bits"].insert(row * 70, make_bit(10_000 + row, vector, access_tag="staff"))
    assert public_digest(tmp_path, with_private, "with-private") == digest

    changes = {
        "text": lambda bit: bit.update(text=bit["text"] + "!"),
        "token count": lambda bit: bit.update(token_count=bit["token_count"] + 1),
        "vector": lambda bit: bit.update(embedding=b64(unit_vectors(1, 8, seed=6)[0])),
        "info": lambda bit: bit["info"].update(title="another"),
        "tag": lambda bit: bit.update(access_tag="staff"),
    }
    for what, change in changes.items():
        changed = copy.deepcopy(library)
        change(changed["bits"][1_234])
        assert public_digest(tmp_path, changed, what.replace(" ", "-")) != digest, what
    library["details"] = {"message": "goodbye"}
    assert public_digest(tmp_path, library, "message") != digest


def test_folder_access_tag_is_compiled_into_every_bit(source):
    member = compile_library(source, source.parent / "compiled", name="lib", access_tag="unpublished")
    segment = open_segment(source.parent / "compiled")
    assert member.tag_rows == {"unpublished": 3} and member.access_tag == "unpublished"
    assert not segment.visible_rows(frozenset()).any() and segment.visible_rows(frozenset({"unpublished"})).all()


def test_details_survive_compilation(tmp_path):
    source = write_library(tmp_path / "lib.json",
                           make_library(unit_vectors(2), details={"message": "hi", "counts": {"bits": 2}}))
    assert load(source)[0].details == {"message": "hi", "counts": {"bits": 2}}


def test_a_library_with_no_bits_compiles_and_opens(tmp_path):
    source = write_library(tmp_path / "lib.json", {"version": 1, "embedding_model": TEST_MODEL, "bits": []})
    library, compiled_now = load(source)
    assert compiled_now and library.bit_count == 0
    assert load(source)[1] is False


# ---- memory mapping -----------------------------------------------------------------------------


def is_memory_mapped(array: np.ndarray) -> bool:
    """True when some array in the `.base` chain is a view of an `mmap.mmap`."""
    base = array.base
    while base is not None:
        if isinstance(base, mmap.mmap):
            return True
        base = getattr(base, "base", None)
    return False


def test_embeddings_are_a_read_only_memory_map_of_c_contiguous_float32(source):
    embeddings = load(source)[0].segment.embeddings

    assert embeddings.dtype == np.float32
    assert embeddings.flags.c_contiguous
    assert not embeddings.flags.writeable
    assert is_memory_mapped(embeddings)


def test_reopened_embeddings_are_memory_mapped_too(source):
    load(source)
    library, compiled_now = load(source)
    assert not compiled_now
    assert is_memory_mapped(library.segment.embeddings)


# ---- reopening without recompiling --------------------------------------------------------------


def test_unchanged_source_is_opened_without_reading_it(source):
    load(source)
    keep_stat_but_garble(source)  # parsing this now would fail: so nothing parses it

    library, compiled_now = load(source)

    assert not compiled_now
    assert library.segment.token_counts.tolist() == [5, 7, 9]


def test_touched_but_identical_source_is_not_recompiled(source):
    load(source)
    embeddings = compiled_folder(source) / "embeddings.npy"
    written = embeddings.stat()
    touch_later(source)

    library, compiled_now = load(source)

    assert not compiled_now
    assert embeddings.stat().st_ino == written.st_ino and embeddings.stat().st_mtime_ns == written.st_mtime_ns
    assert library.source_key.mtime_ns == source.stat().st_mtime_ns
    assert read_plan(source.parent / ".compiled")["lib"].source.mtime_ns == source.stat().st_mtime_ns


def test_after_a_touch_the_new_mtime_is_remembered(source):
    load(source)
    touch_later(source)
    load(source)
    keep_stat_but_garble(source)

    assert load(source)[1] is False


def test_changed_source_is_recompiled(source):
    load(source)
    write_library(source, make_library(unit_vectors(4, seed=1), [1, 2, 3, 4]))
    touch_later(source)

    library, compiled_now = load(source)

    assert compiled_now
    assert library.bit_count == 4 and library.segment.token_counts.tolist() == [1, 2, 3, 4]


def test_same_size_change_with_a_new_mtime_is_recompiled(source):
    load(source)
    library = json.loads(source.read_text())
    library["bits"][0]["token_count"] = 6  # 5 -> 6: same number of bytes
    before = source.stat().st_size
    write_library(source, library)
    assert source.stat().st_size == before
    touch_later(source)

    compiled, compiled_now = load(source)

    assert compiled_now and compiled.segment.token_counts.tolist() == [6, 7, 9]


def test_source_that_became_invalid_is_reported_and_its_last_version_keeps_serving(source):
    load(source)
    source.write_text('{"version": 1, "bits": ')
    touch_later(source)

    catalog = load_catalog(source.parent)

    assert catalog.problems[0].startswith(f"{source}: not valid JSON")
    assert catalog.problems[0].endswith("; still serving its previous version")
    assert catalog.library("lib").bit_count == 3


# ---- corrupt compiled folders ------------------------------------------------------------------


def truncate(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def edit_meta(folder: Path, **changes) -> None:
    meta = json.loads((folder / "meta.json").read_text())
    meta.update(changes)
    (folder / "meta.json").write_text(json.dumps(meta))


CORRUPTIONS = {
    "truncated embeddings.npy": lambda folder: truncate(folder / "embeddings.npy", 150),
    "truncated records.bin": lambda folder: truncate(folder / "records.bin", 10),
    "meta.json claims more bits": lambda folder: edit_meta(folder, bits=4),
    "meta.json claims another dimension": lambda folder: edit_meta(folder, dimension=16),
    "meta.json from another store format": lambda folder: edit_meta(folder, store_format=999),
    "meta.json is not JSON": lambda folder: (folder / "meta.json").write_text("{"),
    "meta.json lacks its members": lambda folder: edit_meta(folder, members=None),
    "meta.json's members miss rows": lambda folder: edit_meta(
        folder, members=[{**json.loads((folder / "meta.json").read_text())["members"][0], "stop": 2}]),
    "ids.npy missing": lambda folder: (folder / "ids.npy").unlink(),
    "tag id out of range": lambda folder: np.save(folder / "tag_ids.npy", np.array([0, 9, 0], np.uint16)),
}


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_corrupt_compiled_folder_is_refused_when_opened(source, corrupt):
    load(source)
    corrupt(compiled_folder(source))

    with pytest.raises(StoreError):
        open_segment(compiled_folder(source))


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_corrupt_compiled_folder_is_rebuilt_not_trusted(source, corrupt):
    load(source)
    corrupt(compiled_folder(source))

    library, compiled_now = load(source)

    assert compiled_now
    assert library.bit_count == 3 and library.segment.token_counts.tolist() == [5, 7, 9]
    assert library.record(2)["info"]["url"] == "https://example.com/2"
    open_segment(compiled_folder(source))  # the rebuilt folder is whole


# ---- tidiness and limits -------------------------------------------------------------------------


def test_no_temporary_folders_are_left_behind(source):
    load(source)
    write_library(source, make_library(unit_vectors(2)))
    touch_later(source)
    load(source)  # recompiled over an existing folder
    CORRUPTIONS["truncated records.bin"](compiled_folder(source))
    load(source)  # rebuilt after corruption
    touch_later(source)
    load(source)  # the plan rewritten for the new mtime

    segments = compiled_folder(source).parent
    assert [path.name for path in segments.iterdir()] == [compiled_folder(source).name]
    inside = list(compiled_folder(source).iterdir())
    assert {path.name for path in inside} >= COMPILED_FILES
    assert not [path.name for path in inside if path.is_dir() or path.name.startswith(".") or "tmp" in path.name]


def test_file_over_the_size_limit_is_a_clear_error_not_an_empty_library(source):
    size = source.stat().st_size

    with pytest.raises(LibraryFormatError) as refused:
        load(source, max_bytes=size - 1)

    assert str(refused.value) == f"file is {size:,} bytes, over the {size - 1:,}-byte limit (raise --max-library-bytes)"
    assert not (source.parent / ".compiled" / SEGMENTS).exists() or not any((source.parent / ".compiled" / SEGMENTS).iterdir())


def test_file_at_the_size_limit_loads(source):
    assert load(source, max_bytes=source.stat().st_size)[0].bit_count == 3


def test_invalid_json_source_says_so(tmp_path):
    source = tmp_path / "lib.json"
    source.write_text("{not json")
    with pytest.raises(LibraryFormatError, match=r"^not valid JSON: "):
        load(source)


def test_format_problems_propagate_without_compiling(tmp_path):
    library = make_library(unit_vectors(2))
    del library["bits"][1]["text"]
    source = write_library(tmp_path / "lib.json", library)

    with pytest.raises(LibraryFormatError, match=r"^bits\[1\]\.text"):
        load(source)
    assert not (tmp_path / ".compiled" / SEGMENTS).exists() or not any((tmp_path / ".compiled" / SEGMENTS).iterdir())
