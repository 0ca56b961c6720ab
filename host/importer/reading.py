"""Read and chunk the files of an import, in this process or in a second one, in the files' order.

`read_file` is one file's work: its bytes, its cache key (`file_chunks.file_key`) and, unless the
cache already holds its chunks (`known` keys), its chunks. What is wrong with the file (unreadable,
not UTF-8, a parser's own error on a damaged file) comes back as one line in `FileRead.problem`;
what would be wrong with every file (a missing extra, a token counter that fails) is raised, and
stops the import.

`read_files` yields each file's `FileRead` in order. With a picklable token counter (the local
model offers one) and enough files it runs `read_file` in a second process, so that reading,
parsing and chunking go on while this process embeds: that process ignores Ctrl-C (this one
stops it) and is gone when the generator is closed.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections import deque
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from host.importer.embedding import EmbedderFailed
from host.importer.errors import ImporterError, MissingExtra
from host.importer.file_chunks import FileChunks, chunk_file, file_key
from host.importer.sources import SourceFile

SECOND_PROCESS_FROM = 16  # files to parse: fewer are read here (starting a process costs about a second)
READ_AHEAD = 8  # files the second process may have read ahead of the embedder


@dataclass(frozen=True)
class ReadSettings:
    """What a file's chunks depend on besides its bytes (see `file_key`)."""

    base_url: str | None
    chunk_tokens: int
    model: str
    include_drafts: bool = False  # a page marked as a draft is read all the same


@dataclass
class FileRead:
    source: SourceFile
    key: bytes | None = None  # None when the file could not be read
    chunks: FileChunks | None = None  # None: in the cache under `key` (or the file failed)
    problem: str | None = None  # "path: what is wrong", when the file failed


def read_file(source: SourceFile, settings: ReadSettings, count_tokens: Callable[[str], int],
              known: frozenset[bytes] | set[bytes]) -> FileRead:
    """One file read and chunked (or found in the cache by its key); its problem as one line."""
    try:
        data = source.load()
        key = _key(source, data, settings)
        if key in known:
            return FileRead(source, key)
        return FileRead(source, key, chunk_file(source, data, count_tokens, settings.base_url, settings.chunk_tokens,
                                                settings.include_drafts))
    except (MissingExtra, EmbedderFailed):
        raise
    except OSError as problem:
        return FileRead(source, problem=f"{source.name}: cannot be read ({problem.strerror or problem})")
    except ImporterError as problem:
        return FileRead(source, problem=f"{source.name}: {problem}")
    except Exception as problem:  # a parser's own error on a damaged file: that file fails, not the import
        said = " ".join(str(problem).split())  # a parser's message may run over several lines
        return FileRead(source, problem=f"{source.name}: cannot be read ({type(problem).__name__}: {said})")


def read_files(files: Sequence[SourceFile], settings: ReadSettings, count_tokens: Callable[[str], int],
               known: set[bytes], second_process: bool | None = None,
               counter_for_process: Callable[[str], int] | None = None) -> Generator[FileRead, None, None]:
    """Every file's `FileRead`, in order. `second_process`: True, False, or None: a second process when
    `counter_for_process` (a picklable counter) is given and at least SECOND_PROCESS_FROM files are new."""
    if counter_for_process is None or second_process is False:
        for source in files:
            yield read_file(source, settings, count_tokens, known)
        return
    # First only hash the files (no parsing): an unchanged re-run then never starts a process.
    cached = {index: key for index, source in enumerate(files) if (key := _cached_key(source, settings, known))}
    new = [source for index, source in enumerate(files) if index not in cached]
    if second_process is None and len(new) < SECOND_PROCESS_FROM:
        for index, source in enumerate(files):
            yield FileRead(source, cached[index]) if index in cached else read_file(source, settings, count_tokens, known)
        return
    context = multiprocessing.get_context("spawn")  # never fork a process that runs ONNX Runtime's threads
    with ProcessPoolExecutor(1, mp_context=context, initializer=_start_reader,
                             initargs=(settings, counter_for_process, frozenset(known))) as pool:
        # A few files ahead of the embedder, no more: the chunks of a large folder are not all held
        # here at once, and Ctrl-C waits for one file at most.
        ahead: deque[Future[FileRead]] = deque()
        to_read = iter(new)
        try:
            for index, source in enumerate(files):
                if index in cached:
                    yield FileRead(source, cached[index])
                    continue
                while len(ahead) < READ_AHEAD and (upcoming := next(to_read, None)) is not None:
                    ahead.append(pool.submit(_read_in_reader, upcoming))
                try:
                    read = ahead.popleft().result()
                except BrokenProcessPool:
                    raise ImporterError(f"the process reading the files stopped while reading {source.name} (out of "
                                        "memory, or a parser crashed): run the import again without that file; "
                                        "what was embedded is cached") from None
                yield read
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def _cached_key(source: SourceFile, settings: ReadSettings, known: set[bytes]) -> bytes | None:
    """The file's key if the cache holds its chunks (None too when it cannot be read: `read_file` says why)."""
    try:
        key = _key(source, source.load(), settings)
    except OSError:
        return None
    return key if key in known else None


def _key(source: SourceFile, data: bytes, settings: ReadSettings) -> bytes:
    return file_key(source, data, settings.base_url, settings.chunk_tokens, settings.model, settings.include_drafts)


_reader: tuple[ReadSettings, Callable[[str], int], frozenset[bytes]] | None = None  # set in the second process


def _start_reader(settings: ReadSettings, count_tokens: Callable[[str], int], known: frozenset[bytes]) -> None:
    global _reader
    # Ctrl-C reaches the whole process group: the importer handles it, and stops this process.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _reader = (settings, count_tokens, known)


def _read_in_reader(source: SourceFile) -> FileRead:
    assert _reader is not None, "the second process was started without its settings"
    return read_file(source, *_reader)
