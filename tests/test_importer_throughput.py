"""How an import keeps the embedder busy, and that none of it changes the library it writes.

Files are read and chunked in a second process when the embedder can count tokens there; new
texts are embedded in calls of similar length (sorted within a window), several calls at once;
each call's vectors are cached as they land, under the embedder's precision. Every test compares
the library with the one the plain way (in this process, one call at a time, no sorting) writes:
it must be the very same bytes.
"""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from importer_support import FACTS, HashingEmbedder, count_words, write_corpus

from host.importer import ImportOptions, import_library
from host.importer.embedding import vector_space

BUDGET = 40
PLAIN = {"concurrency": 1, "bucketing": False, "second_process": False}


class CountsElsewhere(HashingEmbedder):
    """Offers a picklable token counter: the importer may read and chunk in a second process."""

    def token_counter(self) -> Any:
        return count_words


class RecordsCalls(HashingEmbedder):
    """Remembers each call's texts, and how many calls ran at once (each takes a little while)."""

    def __init__(self, seconds: float = 0.0) -> None:
        super().__init__()
        self.calls: list[list[str]] = []
        self.seconds = seconds
        self.running = self.most_running = 0
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            self.calls.append(list(texts))
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        time.sleep(self.seconds)
        try:
            return super().embed(texts)
        finally:
            with self._lock:
                self.running -= 1


class Int8(HashingEmbedder):
    precision = "int8"


def run(site: Path, out: Path, embedder: Any = None, **options: Any) -> Any:
    settings = {"base_url": "https://example.com/", "chunk_tokens": BUDGET, "batch_size": 3,
                "cache": out.with_name(out.name + ".cache.sqlite"), **options}
    return import_library([site], out, embedder or HashingEmbedder(), ImportOptions(**settings), say=lambda _: None)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = write_corpus(tmp_path / "site")
    for number in range(20):  # enough files for the second process to be worth starting
        (site / "posts" / f"note-{number:02d}.md").write_text(
            f"# Note {number}\n\n" + " ".join(f"word{number}x{n}" for n in range(number * 7 + 3)) + ".\n")
    return site


@pytest.fixture
def plain(site: Path, tmp_path: Path) -> bytes:
    out = tmp_path / "plain" / "site.json"
    run(site, out, **PLAIN)
    return out.read_bytes()


def test_reading_in_a_second_process_writes_the_same_library(site, tmp_path, plain):
    embedder = CountsElsewhere()
    out = tmp_path / "second" / "site.json"
    report = run(site, out, embedder, second_process=True)
    assert out.read_bytes() == plain
    assert embedder.counted == []  # every count was made in the other process
    assert report.files_read == 26 and not multiprocessing.active_children()


def test_the_second_process_starts_by_itself_for_many_new_files_only(site, tmp_path):
    embedder = CountsElsewhere()
    out = tmp_path / "auto" / "site.json"
    run(site, out, embedder)
    assert embedder.counted == []  # 26 new files: read in a second process
    (site / "garden.html").write_text((site / "garden.html").read_text().replace("obsidian", "granite"))
    run(site, out, embedder)
    assert any("granite" in text for text in embedder.counted)  # one changed file: read here, no process started


def test_a_bad_file_read_in_the_second_process_is_one_line_and_the_rest_is_imported(site, tmp_path):
    (site / "broken.pdf").write_bytes(b"%PDF-1.4\nthis is not really a PDF")
    (site / "latin1.md").write_bytes("caf\xe9".encode("latin-1"))
    said: list[str] = []
    report = import_library([site], tmp_path / "out.json", CountsElsewhere(),
                            ImportOptions(chunk_tokens=BUDGET, second_process=True), say=said.append)
    assert len(said) == 2 and said[0].startswith(f"error: {site / 'broken.pdf'}: not a readable PDF")
    assert said[1] == f"error: {site / 'latin1.md'}: not UTF-8 text (byte 3 is 0xe9)"
    assert report.failed == [line.removeprefix("error: ") for line in said]
    assert FACTS["html"] in (tmp_path / "out.json").read_text()


def test_calls_take_texts_of_similar_length_and_the_library_keeps_its_order(site, tmp_path, plain):
    embedder = RecordsCalls()
    out = tmp_path / "sorted" / "site.json"
    run(site, out, embedder, window=1000, second_process=False)
    lengths = [count_words(text) for call in embedder.calls for text in call]
    assert lengths == sorted(lengths)  # one window: every call shorter than the next
    assert out.read_bytes() == plain


def test_without_bucketing_calls_take_texts_in_reading_order(site, tmp_path):
    embedder = RecordsCalls()
    run(site, tmp_path / "out.json", embedder, bucketing=False, second_process=False)
    lengths = [count_words(text) for call in embedder.calls for text in call]
    assert lengths != sorted(lengths)


def test_several_calls_run_at_once_and_the_library_is_the_same(site, tmp_path, plain):
    embedder = RecordsCalls(seconds=0.02)
    out = tmp_path / "concurrent" / "site.json"
    run(site, out, embedder, concurrency=4)
    assert embedder.most_running > 1
    assert out.read_bytes() == plain


def test_a_library_records_the_precision_it_was_embedded_with(site, tmp_path):
    run(site, tmp_path / "int8.json", Int8())
    assert json.loads((tmp_path / "int8.json").read_text())["details"] == {"embedding_precision": "int8"}
    run(site, tmp_path / "plain.json")
    assert "details" not in json.loads((tmp_path / "plain.json").read_text())  # an embedder without precisions


def test_vectors_of_each_precision_are_cached_apart(site, tmp_path):
    out = tmp_path / "site.json"
    first = run(site, out, Int8())
    assert vector_space(Int8()) == "test:hashing-64#int8" and vector_space(HashingEmbedder()) == "test:hashing-64"
    switched = HashingEmbedder()
    again = run(site, out, switched)  # an int8 vector never passes for the other precision's
    assert again.reused == 0 and again.embedded_texts == first.embedded_texts
    back = Int8()  # switching back costs nothing: each precision's vectors stay until its own next run
    assert run(site, out, back).reused == first.bits and back.embedded == []


class InterruptedElsewhere(CountsElsewhere):
    """Ctrl-C arrives during the second call to the embedder, while the other process may still read."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        if self.calls == 2:
            raise KeyboardInterrupt
        return super().embed(texts)


def test_ctrl_c_stops_the_second_process_and_keeps_what_was_embedded(site, tmp_path, plain):
    out = tmp_path / "site.json"
    interrupted = InterruptedElsewhere()
    with pytest.raises(KeyboardInterrupt):
        run(site, out, interrupted, second_process=True, window=3)
    assert not out.exists() and not multiprocessing.active_children()
    paid_for = set(interrupted.embedded)  # the first call's texts, and any call that was already running
    assert len(paid_for) >= 3
    resumed = HashingEmbedder()
    run(site, out, resumed)
    texts = {bit["text"] for bit in json.loads(plain)["bits"]}
    assert sorted(resumed.embedded) == sorted(texts - paid_for)  # nothing embedded twice
    assert out.read_bytes() == plain
