"""Read and chunk the files of an import, in this process or in a second one, in the files' order.

`read_file` is one file's work: its bytes, its cache key (`file_chunks.file_key`) and, unless the
cache already holds its chunks (`known` keys), its chunks, as `FileRead`s: usually one, but a file
whose reader works slowly (OCR) gives a part at each slow step (`final` false) so that what it read
so far is embedded meanwhile. What is wrong with the file (unreadable, not UTF-8, a parser's own
error on a damaged file) comes back as one line in the last `FileRead.problem` (the parts before it
then count for nothing); what would be wrong with every file (a missing extra, a token counter that
fails) is raised, and stops the import.

`read_files` yields every file's `FileRead`s in order. With a picklable token counter (the local
model offers one) and enough files it runs `read_file` in a second process, so that reading,
parsing and chunking go on while this process embeds. That process is sent the files to read a
few ahead and sends back each part as it is made, over pipes; a thread of its own takes each file
as soon as it is sent (a file may carry its bytes: an export's post, a web page), so that neither
side ever waits on a full pipe while the other does. It ignores Ctrl-C (this one stops it, after
the page it is reading) and is gone when the generator is closed.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import queue
import signal
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from host.importer.embedding import EmbedderFailed
from host.importer.errors import ImporterError, MissingExtra
from host.importer.file_chunks import FileChunks, chunk_file, file_key
from host.importer.sources import SourceFile

SECOND_PROCESS_FROM = 16  # files to parse: fewer are read here (starting a process costs about a second)
READ_AHEAD = 8  # files the second process may have been sent ahead of the embedder
STOP_SECONDS = 120.0  # on closing, how long the second process may take to finish the page it reads


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

    @property
    def final(self) -> bool:
        """The file's last part: more follow only after a part its reader gave before a slow step."""
        return self.chunks is None or not self.chunks.more


def read_file(source: SourceFile, settings: ReadSettings, count_tokens: Callable[[str], int],
              known: frozenset[bytes] | set[bytes]) -> Iterator[FileRead]:
    """One file read and chunked (or found in the cache by its key), part by part; its problem as one line."""
    try:
        data = source.load()
        key = _key(source, data, settings)
        if key in known:
            yield FileRead(source, key)
            return
        for part in chunk_file(source, data, count_tokens, settings.base_url, settings.chunk_tokens,
                               settings.include_drafts):
            yield FileRead(source, key, part)
    except (MissingExtra, EmbedderFailed):
        raise
    except OSError as problem:
        yield FileRead(source, problem=f"{source.name}: cannot be read ({problem.strerror or problem})")
    except ImporterError as problem:
        yield FileRead(source, problem=f"{source.name}: {problem}")
    except Exception as problem:  # a parser's own error on a damaged file: that file fails, not the import
        said = " ".join(str(problem).split())  # a parser's message may run over several lines
        yield FileRead(source, problem=f"{source.name}: cannot be read ({type(problem).__name__}: {said})")


def read_files(files: Sequence[SourceFile], settings: ReadSettings, count_tokens: Callable[[str], int],
               known: set[bytes], second_process: bool | None = None,
               counter_for_process: Callable[[str], int] | None = None) -> Generator[FileRead, None, None]:
    """Every file's `FileRead`s, in order. `second_process`: True, False, or None: a second process when
    `counter_for_process` (a picklable counter) is given and at least SECOND_PROCESS_FROM files are new."""
    if counter_for_process is None or second_process is False:
        for source in files:
            yield from read_file(source, settings, count_tokens, known)
        return
    # First only hash the files (no parsing): an unchanged re-run then never starts a process.
    cached = {index: key for index, source in enumerate(files) if (key := _cached_key(source, settings, known))}
    new = [source for index, source in enumerate(files) if index not in cached]
    if second_process is None and len(new) < SECOND_PROCESS_FROM:
        for index, source in enumerate(files):
            if index in cached:
                yield FileRead(source, cached[index])
            else:
                yield from read_file(source, settings, count_tokens, known)
        return
    reader = _SecondReader(settings, counter_for_process, frozenset(known))
    try:
        # A few files ahead of the embedder, no more: the chunks of a large folder are not all held
        # here at once, and Ctrl-C waits for one page at most.
        to_read = iter(new)
        for index, source in enumerate(files):
            if index in cached:
                yield FileRead(source, cached[index])
                continue
            while reader.unfinished < READ_AHEAD and (upcoming := next(to_read, None)) is not None:
                reader.ask(upcoming)
            while True:
                read = reader.receive(source)
                yield read
                if read.final:
                    break
    finally:
        reader.close()


def _cached_key(source: SourceFile, settings: ReadSettings, known: set[bytes]) -> bytes | None:
    """The file's key if the cache holds its chunks (None too when it cannot be read: `read_file` says why)."""
    try:
        key = _key(source, source.load(), settings)
    except OSError:
        return None
    return key if key in known else None


def _key(source: SourceFile, data: bytes, settings: ReadSettings) -> bytes:
    return file_key(source, data, settings.base_url, settings.chunk_tokens, settings.model, settings.include_drafts)


@dataclass(frozen=True)
class _Raised:
    """An error that stops the import (a missing extra, a failing token counter), sent from the second process."""

    problem: BaseException


class _SecondReader:
    """The second process: sent files (`ask`), it sends back their `FileRead`s in order (`receive`)."""

    def __init__(self, settings: ReadSettings, count_tokens: Callable[[str], int], known: frozenset[bytes]) -> None:
        context = multiprocessing.get_context("spawn")  # never fork a process that runs ONNX Runtime's threads
        requests_in, self._requests = context.Pipe(duplex=False)
        self._results, results_out = context.Pipe(duplex=False)
        self._stop = context.Event()
        self._process = context.Process(target=_serve, name="import-reader", daemon=True,
                                        args=(requests_in, results_out, self._stop, settings, count_tokens, known))
        self._process.start()
        requests_in.close()  # the child's ends: this process keeps only its own, so either side sees the other go
        results_out.close()
        self.unfinished = 0  # files asked for whose last part has not come back

    def ask(self, source: SourceFile) -> None:
        with contextlib.suppress(OSError):  # it is gone: `receive` says so, naming the file it was reading
            self._requests.send(source)
        self.unfinished += 1

    def receive(self, source: SourceFile) -> FileRead:
        """The next part read (of `source`, the file being waited for)."""
        ready = wait([self._results, self._process.sentinel])
        try:
            if self._results not in ready and not self._results.poll():
                raise EOFError
            message = self._results.recv()
        except EOFError:
            raise ImporterError(f"the process reading the files stopped while reading {source.name} (out of "
                                "memory, or a parser crashed): run the import again without that file; "
                                "what was embedded is cached") from None
        if isinstance(message, _Raised):
            raise message.problem
        assert isinstance(message, FileRead) and message.source == source, "parts came back out of order"
        self.unfinished -= message.final
        return message

    def close(self) -> None:
        """Stop the process after the part it is reading, and wait for it (what it still sends is dropped)."""
        self._stop.set()
        self._requests.close()
        while self._process.is_alive():
            ready = wait([self._results, self._process.sentinel], timeout=STOP_SECONDS)
            if not ready:
                self._process.terminate()
                break
            if self._results in ready:
                try:
                    self._results.recv()
                except (EOFError, OSError):
                    break
        self._process.join()
        self._results.close()


def _serve(requests: Connection, results: Connection, stop: Any, settings: ReadSettings,
           count_tokens: Callable[[str], int], known: frozenset[bytes]) -> None:
    """The second process: read each file asked for and send back its parts, until told to stop."""
    # Ctrl-C reaches the whole process group: the importer handles it, and stops this process.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    asked: queue.SimpleQueue[SourceFile | None] = queue.SimpleQueue()
    threading.Thread(target=_take_requests, args=(requests, asked), name="import-requests", daemon=True).start()
    try:
        while not stop.is_set():
            source = asked.get()
            if source is None:  # the importer closed its end: nothing more to read
                return
            for read in read_file(source, settings, count_tokens, known):
                results.send(read)
                if stop.is_set():
                    return
    except (BrokenPipeError, ConnectionResetError):  # the importer is gone
        return
    except (MissingExtra, EmbedderFailed) as problem:
        _send_quietly(results, _Raised(problem))
    except Exception as problem:  # a fault of the importer's own: stop the import, saying what it was
        said = " ".join(str(problem).split())
        _send_quietly(results, _Raised(ImporterError(f"reading the files failed: {type(problem).__name__}: {said}")))


def _take_requests(requests: Connection, asked: queue.SimpleQueue[SourceFile | None]) -> None:
    """Every file asked for, taken off the pipe as soon as it comes: the importer may be sending more while
    this process sends it parts, and a pipe full both ways would stop both."""
    try:
        while True:
            asked.put(requests.recv())
    except (EOFError, OSError):
        asked.put(None)


def _send_quietly(results: Connection, message: _Raised) -> None:
    with contextlib.suppress(OSError):  # the importer is gone: nobody to tell
        results.send(message)
