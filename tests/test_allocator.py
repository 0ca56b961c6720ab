"""The process's memory settings (host/service/allocator.py): the garbage collector paused while a
library compiles, and back as it was afterwards, however the pauses overlap."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest
from librarian import make_library, unit_vectors, write_library

from host.service.allocator import garbage_collector_paused
from host.store import compiled


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_overlapping_pauses_resume_the_collector_when_the_last_ends(collector_on) -> None:
    first_in, second_done = threading.Event(), threading.Event()

    def second() -> None:
        first_in.wait()
        with garbage_collector_paused():
            assert not gc.isenabled()
        second_done.set()

    thread = threading.Thread(target=second)
    thread.start()
    with garbage_collector_paused():
        first_in.set()
        second_done.wait()
        assert not gc.isenabled()  # the other thread's pause ended, this one's has not
    thread.join()
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off(collector_on) -> None:
    gc.disable()
    with garbage_collector_paused():
        pass
    assert not gc.isenabled()


def test_a_compile_pauses_the_collector_and_resumes_it_even_when_it_fails(collector_on, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    real_stream = compiled.stream_library

    def watched(*args, **kwargs):
        seen.append(gc.isenabled())
        return real_stream(*args, **kwargs)

    monkeypatch.setattr(compiled, "stream_library", watched)
    source = write_library(tmp_path / "lib.json", make_library(unit_vectors(5)))
    compiled.compile_library(source, tmp_path / "out", name="lib")
    source.write_text("{ not json")
    with pytest.raises(compiled.LibraryFormatError):
        compiled.compile_library(source, tmp_path / "out", name="lib")
    assert seen == [False, False]
    assert gc.isenabled()
