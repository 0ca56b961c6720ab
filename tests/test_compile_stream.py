"""Compiling as a stream (host/library/stream.py, host/store/writer.py): a library file is read chunk
by chunk, never whole, and gives exactly what parsing the whole file gives.

Real files throughout; chunks are made tiny so that every value of a small file straddles one.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from librarian import TEST_MODEL, b64, make_library, unit_vectors, write_library

from host.catalog.generations import load_catalog
from host.library import stream
from host.library.format import library_problems, parse_library
from host.library.problems import LibraryFormatError
from host.library.stream import stream_library
from host.store import text_process, writer
from host.store.compiled import SourceKey, compile_library, file_sha256, open_segment, write_compiled
from host.store.progress import CompileProgress

PROJECT = Path(__file__).resolve().parents[1]


class Kept:
    """A BitSink that keeps every block."""

    def __init__(self) -> None:
        self.blocks: list = []

    def add(self, block) -> None:
        self.blocks.append(block)


def mixed_library(bits: int = 1_300, dimension: int = 8) -> dict:
    """Clustered from 1,000 bits (cluster_from below), with private bits, duplicates and non-ASCII text."""
    library = make_library(unit_vectors(bits, dimension, seed=3), [10 + row % 50 for row in range(bits)])
    for row, bit in enumerate(library["bits"]):
        if row % 7 == 0:
            bit["access_tag"] = "staff"
        if row % 11 == 0:
            bit["text"] = f"Zürich café {row} — naïve «quotes» 東京 \U0001f600"
    library["bits"].append(dict(library["bits"][5]))  # a duplicate: the first copy wins
    library["details"] = {"message": "hello", "counts": {"bits": bits}}
    return library


def folder_files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


@pytest.mark.parametrize(("chunk", "dimension"), [(97, 8), (4096, 8), (stream.CHUNK, 8), (stream.CHUNK, 6)],
                         ids=["97-byte chunks", "4k chunks", "default chunks", "base64 without padding"])
def test_a_streamed_compile_is_byte_identical_to_compiling_the_parsed_file(tmp_path, monkeypatch, chunk, dimension):
    monkeypatch.setattr(stream, "CHUNK", chunk)
    source = write_library(tmp_path / "lib.json", mixed_library(dimension=dimension))

    key = compile_library(source, tmp_path / "streamed", name="lib", cluster_from=1_000).source
    write_compiled(parse_library(json.loads(source.read_text())), tmp_path / "whole", key, "lib", cluster_from=1_000)

    assert key == SourceKey(source.stat().st_size, source.stat().st_mtime_ns, file_sha256(source))
    assert folder_files(tmp_path / "streamed") == folder_files(tmp_path / "whole")
    compiled = open_segment(tmp_path / "streamed")
    assert compiled.bit_count == 1_300 and compiled.centroids is not None and compiled.tags == ("", "staff")


def test_records_read_whole_or_a_block_at_a_time_are_put_in_the_same_order(tmp_path, monkeypatch):
    source = write_library(tmp_path / "lib.json", mixed_library())
    monkeypatch.setattr(writer, "RECORDS_WHOLE_MAX", 1 << 40)
    monkeypatch.setattr(writer, "RECORDS_WHOLE_SHARE", 1)  # read whole...
    compile_library(source, tmp_path / "whole", name="lib", cluster_from=1_000)
    monkeypatch.setattr(writer, "RECORDS_WHOLE_MAX", 0)  # ...and read with pread, a block at a time
    monkeypatch.setattr(writer, "ROW_BLOCK", 100)
    compile_library(source, tmp_path / "blocks", name="lib", cluster_from=1_000)
    assert folder_files(tmp_path / "whole") == folder_files(tmp_path / "blocks")
    records = open_segment(tmp_path / "blocks")
    assert records.bit_count == 1_300 and "Zürich" in "".join(records.record(row)["text"] for row in range(1_300))


def test_the_text_index_built_by_a_second_process_is_the_one_built_here(tmp_path, monkeypatch):
    monkeypatch.setattr(text_process, "PROCESS_FROM", 0)  # a child for any library...
    monkeypatch.setattr(text_process, "NOTIFY_EVERY", 4096)  # ...told of the records a few at a time
    source = write_library(tmp_path / "lib.json", mixed_library())
    key = compile_library(source, tmp_path / "child", name="lib", cluster_from=1_000).source

    monkeypatch.setattr(text_process, "PROCESS_FROM", 1 << 40)
    compile_library(source, tmp_path / "here", name="lib", cluster_from=1_000)

    assert key.sha256 == file_sha256(source)
    assert folder_files(tmp_path / "child") == folder_files(tmp_path / "here")


def test_a_text_index_process_that_fails_is_replaced_and_its_words_stay_out_of_the_log(tmp_path, monkeypatch,
                                                                                      caplog):
    source = write_library(tmp_path / "lib.json", mixed_library())
    compile_library(source, tmp_path / "here", name="lib", cluster_from=1_000)
    # A child that dies quoting a record, as a traceback might: the log says what kind of error, not the text.
    failing = tmp_path / "failing-python"
    failing.write_text("#!/bin/sh\necho 'Traceback (most recent call last):' >&2\n"
                       "echo \"KeyError: 'Zürich café 11 secret words'\" >&2\nexit 3\n")
    failing.chmod(0o755)
    monkeypatch.setattr(text_process, "PROCESS_FROM", 0)
    monkeypatch.setattr(text_process.sys, "executable", str(failing))

    compile_library(source, tmp_path / "fallback", name="lib", cluster_from=1_000)

    assert folder_files(tmp_path / "fallback") == folder_files(tmp_path / "here")
    warnings = [record.getMessage() for record in caplog.records if "text index process" in record.getMessage()]
    assert warnings == ["the text index process exited with 3; building the text index in this one instead (KeyError)"]


def test_streaming_gives_the_bits_and_problems_of_the_whole_file(tmp_path, monkeypatch):
    monkeypatch.setattr(stream, "CHUNK", 64)
    library = make_library(unit_vectors(4))
    library["sort"] = "newest"
    del library["bits"][1]["text"]
    library["bits"][3]["embedding"] = b64(np.ones(7))
    source = write_library(tmp_path / "lib.json", library)

    streamed = stream_library(source, Kept())

    assert streamed.problems == library_problems(json.loads(source.read_text()))
    assert streamed.problem_count == 3


def test_vectors_decoded_a_block_at_once_are_checked_as_each_alone(tmp_path):
    # 6 values = 24 bytes = 32 base64 characters without padding: a block's texts are decoded joined.
    library = make_library(unit_vectors(2_100, 6, seed=5))
    bits = library["bits"]
    bits[10]["embedding"] = bits[10]["embedding"][:30] + "=="  # right length, but 22 bytes
    bits[1_500]["embedding"], bits[1_501]["embedding"] = (  # one short, one long: the same length joined
        bits[1_500]["embedding"][:-4], bits[1_501]["embedding"] + bits[1_500]["embedding"][-4:])
    bits[2_000]["embedding"] = bits[2_000]["embedding"][:31] + "é"
    source = write_library(tmp_path / "lib.json", library)

    kept = Kept()
    streamed = stream_library(source, kept)

    assert streamed.problems == library_problems(json.loads(source.read_text()))
    assert [problem.split(":")[0] for problem in streamed.problems] == [
        "bits[10].embedding", "bits[1500].embedding", "bits[1501].embedding", "bits[2000].embedding"]
    assert kept.blocks == []  # a file with problems hands nothing on


def test_embeddings_written_other_ways_are_read_as_the_full_checks_read_them(tmp_path):
    # 6 values: 32 base64 characters, decoded a block at a time from their JSON, quotes and all.
    vectors = unit_vectors(2_100, 6, seed=8)
    library = make_library(vectors)
    escaped = next(row for row, bit in enumerate(library["bits"]) if "/" in bit["embedding"])
    text = json.dumps(library)
    plain = library["bits"][escaped]["embedding"]
    text = text.replace(f'"{plain}"', json.dumps(plain).replace("/", "\\/"))  # JSON's escaped slash: the same string
    number = library["bits"][1_000]["embedding"]
    text = text.replace(f'"{number}"', "1" * (len(number) + 2))  # as wide as the string, but a number
    source = tmp_path / "lib.json"
    source.write_text(text)

    streamed = stream_library(source, Kept())
    assert streamed.problems == library_problems(json.loads(text))
    assert [problem.split(":")[0] for problem in streamed.problems] == ["bits[1000].embedding"]

    text = text.replace("1" * (len(number) + 2), f'"{number}"')
    source.write_text(text)
    kept = Kept()
    assert stream_library(source, kept).problems == []
    assert np.array_equal(np.concatenate([block.vectors for block in kept.blocks]), vectors)


@pytest.mark.parametrize("layout", ["bits first", "version 0"])
def test_files_that_cannot_be_streamed_are_read_whole_with_the_same_result(tmp_path, layout):
    library = make_library(unit_vectors(3))
    if layout == "bits first":
        library = {"bits": library.pop("bits"), **library}
    else:
        library = {"version": 0, "embedding_model": TEST_MODEL,
                   "content": {f"id{row}": bit for row, bit in enumerate(library["bits"])}}
    source = write_library(tmp_path / "lib.json", library)
    kept = Kept()

    streamed = stream_library(source, kept)

    expected = parse_library(json.loads(source.read_text()))
    assert streamed.problems == [] and streamed.sha256 == file_sha256(source)
    assert [record for block in kept.blocks for record in block.records] == expected.records


def good_and_cut(tmp_path: Path) -> tuple[Path, bytes]:
    source = write_library(tmp_path / "libraries" / "lib.json", make_library(unit_vectors(40), [10] * 40))
    return source, source.read_bytes()


def test_a_file_cut_short_names_the_byte_where_it_ends(tmp_path):
    source, whole = good_and_cut(tmp_path)
    cut = whole.index(b'"text"', len(whole) // 2) + 20  # inside a bit's text
    source.write_bytes(whole[:cut])

    with pytest.raises(LibraryFormatError) as refused:
        compile_library(source, tmp_path / "compiled", name="lib")

    bit = whole[:cut].count(b'"text"') - 1
    assert str(refused.value) == (f"not valid JSON: the file ends at byte {cut:,}, inside bits[{bit}] "
                                  "(was it cut short?)")
    assert not (tmp_path / "compiled").exists()


def test_a_broken_byte_is_named_by_its_offset(tmp_path):
    source, whole = good_and_cut(tmp_path)
    broken = whole.index(b'"token_count"', len(whole) // 2) - 2  # the ", " before it
    source.write_bytes(whole[:broken] + b";" + whole[broken + 1 :])

    with pytest.raises(LibraryFormatError, match=f"^not valid JSON: Expecting ',' delimiter at byte {broken:,}$"):
        compile_library(source, tmp_path / "compiled", name="lib")


def test_a_cut_short_replacement_leaves_the_previous_version_serving(tmp_path):
    source, whole = good_and_cut(tmp_path)
    root = source.parent
    first = load_catalog(root)
    source.write_bytes(whole[: len(whole) * 2 // 3])

    second = load_catalog(root, previous=first)
    restarted = load_catalog(root)  # a worker starting now serves the last good compile too

    for catalog in (second, restarted):
        assert [library.bit_count for library in catalog.libraries] == [40]
        (problem,) = catalog.problems
        assert problem.startswith(f"{source}: not valid JSON: the file ends at byte {len(whole) * 2 // 3:,}, inside bits[")
        assert problem.endswith("; still serving its previous version")


def test_a_touched_file_is_not_compiled_again(tmp_path):
    source, _ = good_and_cut(tmp_path)
    said: list[str] = []
    load_catalog(source.parent, progress=said.append)
    stat = source.stat()
    source.touch()
    assert source.stat().st_mtime_ns != stat.st_mtime_ns

    catalog = load_catalog(source.parent, progress=said.append)

    assert said[-1].endswith("none compiled") and catalog.libraries[0].source_key.mtime_ns == source.stat().st_mtime_ns


# ---- memory ------------------------------------------------------------------------------------------------

MEMORY_CHILD = """
import json, resource, sys
from pathlib import Path
from host.store.compiled import compile_library
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
compile_library(Path(sys.argv[1]), Path(sys.argv[2]), name="big")
print(json.dumps({"before": before, "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def write_big_library(path: Path, bits: int, dimension: int) -> None:
    rng = np.random.default_rng(1)
    with path.open("w") as handle:
        handle.write(f'{{"version":1,"embedding_model":"test:unit-{dimension}","bits":[')
        for start in range(0, bits, 4096):
            vectors = rng.standard_normal((min(4096, bits - start), dimension), dtype=np.float32)
            handle.write(("," if start else "") + ",".join(
                f'{{"text":"bit {start + row}","embedding":"{base64.b64encode(vector.tobytes()).decode()}",'
                f'"token_count":5,"info":{{"url":"https://example.com/{start + row}"}}}}'
                for row, vector in enumerate(vectors)))
        handle.write("]}")


def test_compiling_holds_far_less_than_the_file_or_its_vectors(tmp_path):
    bits, dimension = 60_000, 512  # 123 MB of vectors in a 166 MB file
    source = tmp_path / "big.json"
    write_big_library(source, bits, dimension)
    child = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(source), str(tmp_path / "compiled")],
                           capture_output=True, text=True, cwd=PROJECT, timeout=600, check=True)
    memory = json.loads(child.stdout.splitlines()[-1])

    vectors = bits * dimension * 4
    # Reading the whole file would hold it and its objects (~2x the file); a stream holds blocks.
    assert memory["peak"] - memory["before"] < 0.5 * vectors, (memory, vectors)
    assert open_segment(tmp_path / "compiled").bit_count == bits


# ---- progress ----------------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Log:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def test_progress_shows_nothing_for_a_short_compile_then_a_line_every_ten_seconds():
    clock, log = Clock(), Log()
    progress = CompileProgress("big", 4_000_000_000, stream=log, clock=clock)  # type: ignore[arg-type]

    progress.read(1_000_000_000)
    clock.now += 1.5
    progress.read(2_000_000_000)
    quiet = log.text
    clock.now += 11
    progress.read(3_000_000_000)
    clock.now += 1
    progress.step("assigning", 0.5)
    clock.now += 10
    progress.step("assigning", 0.9)

    assert quiet == ""
    assert log.text.splitlines() == ["compiling big: reading 3.0 of 4.0 GB, 75% (12 s)",
                                     "compiling big: assigning, 90% (24 s)"]


def test_the_compile_command_is_build_under_its_other_name(tmp_path):
    source, _ = good_and_cut(tmp_path)
    result = subprocess.run([sys.executable, "-m", "host", "compile", str(source.parent)], capture_output=True,
                            text=True, cwd=PROJECT, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert "compiled lib: 40 bits" in result.stderr
    assert load_catalog(source.parent).library("lib").bit_count == 40


def test_the_reader_leaves_no_thread_behind(tmp_path):
    import threading

    source, _ = good_and_cut(tmp_path)
    stream_library(source, Kept())
    with pytest.raises(LibraryFormatError):
        source.write_text('{"version": 1, "bits": [')
        stream_library(source, Kept())
    assert not [thread for thread in threading.enumerate() if thread.name.startswith("library-read")]

