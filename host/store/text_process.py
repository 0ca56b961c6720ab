"""The text index of a compiled folder, built beside the compile: here, or in a second process.

Splitting the records into words and numbering them (host/constraints/text_index.py) is Python's
per-word work, as heavy as reading the library file; in one process the two take turns on one
core. So a compile whose records reach `PROCESS_FROM` bytes hands the text index to a child
interpreter (`python -m host.store.text_process FOLDER FD`) that reads records.bin as the writer
appends to it (from the page cache: nothing is sent but how far the file is written; FD is a
descriptor the parent opened, since records.bin is replaced by its rewrite in layout order) while the
parent goes on reading the library file; when the layout is known the parent sends its order and
the child writes text_index.bin and text_index.json into the folder. Below `PROCESS_FROM` (a child
costs ~0.2 s to start), or if the child cannot start or fails, the parent builds the index itself:
the files are the same either way (the same builder, fed the same records in the same order).

The child's protocol, on its standard input: lines `upto BYTES ROWS` (records.bin holds at least
BYTES bytes: its first ROWS records, whole), `whole LANGUAGE` (no more records: what does not
depend on the rows' order is done then, the keyword terms analyzed in LANGUAGE among it, and the
child answers `ready`), then `finish` (rows kept in file order) or `finish FILE` (a .npy in the
folder: stored row -> row of the file, source_rows.npy; the folder's tag_ids.npy is written). It
answers `done` once the files are written and synced; at the end of its input without `finish`
(the compile failed) it leaves quietly. The parent asks BLAS for one thread fewer while the
child is busy (`busy`), so that the two do not take turns on the cores.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

import msgspec
import numpy as np

from host.constraints.text_index import TextIndexBuilder, save_text_index
from host.constraints.words import INFO_FIELDS
from host.keywords.postings import PREFIX as POSTINGS
from host.keywords.postings import FieldWords, build_postings, stored_rows
from host.library.language import DEFAULT_LANGUAGE

PROCESS_FROM = 16 << 20  # bytes of records from which the text index is built by a child process
NOTIFY_EVERY = 1 << 20  # the child is told how far records.bin is written at most every this many bytes
RECORDS = "records.bin"
KEYWORD_FIELDS = ("text", "title")  # what BM25 reads of a bit (host/keywords/postings.py)
TAGS = ".file_tags.npy"  # each row's tag, file order: written by the writer before `whole`, removed after
FEED_ROWS = 16_384  # records decoded at a time when reading records.bin here
log = logging.getLogger("polymath_host.store")


class TextIndexer:
    """Builds the text index of the folder a StoreWriter fills (see the module docstring).

    The writer calls `records_written` as records.bin grows, `all_written` at its end (here, the
    records are split into words then, beside the layout's thread), `finish` once the layout's
    order is known, and `wait` before meta.json; `close` stops a child if the compile fails.
    """

    def __init__(self, folder: Path, lengths: Sequence[int], *, process_from: int | None = None) -> None:
        self.folder = folder
        self.lengths = lengths  # each record's size, as the writer appends them
        # Opened now: records.bin is rewritten in the layout's order later, and a child that fails
        # is replaced by reading the records as they were written, in file order.
        self._records = (folder / RECORDS).open("rb")
        self.process_from = PROCESS_FROM if process_from is None else process_from
        self._child: subprocess.Popen[bytes] | None = None
        self._child_errors: IO[bytes] | None = None
        self._told = 0  # bytes of records.bin the child has been told of
        self._size = 0
        self._builder: TextIndexBuilder | None = None
        self._postings: Postings | None = None
        self._order_file: str | None = None
        self._language = DEFAULT_LANGUAGE
        self._failed = False  # a child failed: the rest is done here
        self._ready = False  # the child said `ready`
        self._working_here = False  # this process is splitting the records into words

    def records_written(self, size: int, flush: Callable[[], object]) -> None:
        """records.bin now holds `size` bytes once `flush` is called: it is, before a child reads them."""
        if self._child is None and not self._failed and size >= self.process_from:
            flush()
            self._start()
        if self._child is not None and size - self._told >= NOTIFY_EVERY:
            flush()
            self._tell(f"upto {size} {len(self.lengths)}\n".encode())
            self._told = size

    def all_written(self, size: int, language: str) -> None:
        """records.bin is whole, `size` bytes; the keywords are analyzed in `language`
        (host/keywords/analyzer.py)."""
        self._size = size
        self._language = language
        if self._child is not None:
            self._tell(f"upto {size} {len(self.lengths)}\nwhole {language}\n".encode())
            return
        self._working_here = True
        try:
            self._builder = self._tokenized()
            self._postings = prepare(self._builder, self.folder, language)
        finally:
            self._working_here = False

    def busy(self) -> bool:
        """Whether a child is still working before it can finish (until it says `ready`)."""
        child = self._child
        if child is None or self._ready:
            return self._working_here
        assert child.stdout is not None
        if select.select([child.stdout], [], [], 0)[0]:
            child.stdout.readline()  # `ready`, or the end of a child that failed: busy no more
            self._ready = True
        return not self._ready

    def finish(self, order_file: str | None) -> None:
        """Rows are stored as the folder's `order_file` (a .npy) says, or in file order (None)."""
        self._order_file = order_file
        if self._child is not None:
            self._tell(f"finish {order_file or ''}\n".encode())
        else:
            builder = self._builder or self._tokenized()
            finish(builder, self._postings or prepare(builder, self.folder, self._language), self.folder, order_file)
            self._builder = self._postings = None

    def wait(self) -> None:
        """Until the index is written; a child that failed is replaced by building it here."""
        child = self._child
        if child is None:
            return
        assert child.stdin is not None and child.stdout is not None
        answer = b""
        try:
            child.stdin.close()
            answer = child.stdout.read()
        except OSError:
            pass
        code = child.wait()
        child.stdout.close()
        self._child = None
        if answer.split()[-1:] != [b"done"] or code:
            self._give_up(f"exited with {code}")
            builder = self._tokenized()
            finish(builder, prepare(builder, self.folder, self._language), self.folder, self._order_file)
        self._close_errors()
        self._records.close()

    def close(self) -> None:
        """Stop a child still running (the compile failed or is abandoned)."""
        if self._child is not None:
            self._child.kill()
            self._child.wait()
            for stream in (self._child.stdin, self._child.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):  # what was not sent to a dead child: a broken pipe
                        stream.close()
            self._child = None
        self._close_errors()
        self._records.close()

    def _tokenized(self) -> TextIndexBuilder:
        builder = TextIndexBuilder()
        sizes = np.asarray(self.lengths, dtype=np.int64)
        self._records.seek(0)
        for first in range(0, len(sizes), FEED_ROWS):
            count = len(sizes[first : first + FEED_ROWS])
            builder.add_columns(columns(read_records(self._records, int(sizes[first : first + count].sum()), count)))
        return builder

    def _start(self) -> None:
        package_root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
        self._child_errors = tempfile.TemporaryFile()  # noqa: SIM115 - kept open for the child's life, closed by wait or close
        # The child reads this very file through a descriptor of its own: by the time it has started,
        # records.bin may already have been replaced by its rewrite in the layout's order.
        records = os.open(self.folder / RECORDS, os.O_RDONLY)
        try:
            self._child = subprocess.Popen(
                [sys.executable, "-m", "host.store.text_process", str(self.folder), str(records)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._child_errors, env=env, pass_fds=(records,))
        except OSError as problem:
            self._give_up(f"could not start ({problem})")
        finally:
            os.close(records)

    def _tell(self, message: bytes) -> None:
        child = self._child
        assert child is not None and child.stdin is not None
        try:
            child.stdin.write(message)
            child.stdin.flush()
        except OSError:  # it died: wait() finds out why, and builds the index here
            pass

    def _give_up(self, why: str) -> None:
        # Only the kind of error the child ended with: its message may quote a record, which may be
        # a private bit's text, and logs are no place for that.
        failure = ""
        if self._child_errors is not None:
            self._child_errors.seek(0)
            lines = self._child_errors.read()[-2000:].decode(errors="replace").strip().splitlines()
            failure = lines[-1].partition(":")[0].strip()[:100] if lines else ""
        log.warning("the text index process %s; building the text index in this one instead%s", why,
                    f" ({failure})" if failure else "")
        self._failed = True

    def _close_errors(self) -> None:
        if self._child_errors is not None:
            self._child_errors.close()
            self._child_errors = None


Postings = dict[str, np.ndarray]


def prepare(builder: TextIndexBuilder, folder: Path, language: str) -> Postings:
    """What can be done before the rows' order is known, while the parent lays the vectors out: the
    vocabularies sorted, and the keyword postings of the text and title, rows in file order
    (analyzed in `language`; the folder's TAGS file gives each row's tag)."""
    builder.prepare()
    tag_ids = np.load(folder / TAGS, allow_pickle=False)
    fields = [FieldWords(*builder.words[field].numbered()) for field in KEYWORD_FIELDS]
    return build_postings(fields, tag_ids, int(tag_ids.max()) + 1 if len(tag_ids) else 1, language)


def finish(builder: TextIndexBuilder, postings: Postings, folder: Path, order_file: str | None) -> None:
    """Write the index `builder` holds, for rows stored as `order_file` says (None: file order), and
    the keyword postings, mapped to the stored rows."""
    order = np.load(folder / order_file, allow_pickle=False) if order_file else None
    if order is not None:
        postings = {**postings, f"{POSTINGS}stored_rows": stored_rows(order)}
    save_text_index({**builder.finish(order), **postings}, folder)


class Record(msgspec.Struct, gc=False):
    """A record of records.bin (host/store/writer.py writes `{"text", "info"}` maps)."""

    text: str
    info: dict[str, str]


_DECODE_RECORDS = msgspec.msgpack.Decoder(list[Record]).decode


def read_records(handle: IO[bytes], size: int, count: int) -> list[Record]:
    """The next `count` records, `size` bytes of records.bin: decoded at once, as the msgpack array
    they make behind an array header (4x faster than an unpacker's maps)."""
    data = handle.read(size)
    if len(data) != size:
        raise OSError(f"{handle.name}: ends before the {count:,} records expected")
    return _DECODE_RECORDS(b"\xdd" + count.to_bytes(4, "big") + data)


def columns(records: list[Record]) -> dict[str, list[str]]:
    """Each field's string of every record, as TextIndexBuilder.add_columns takes them."""
    infos = [record.info for record in records]
    found = {"text": [record.text for record in records]}
    for field in INFO_FIELDS:
        found[field] = [info.get(field, "") for info in infos]
    return found


def serve_parent(folder: Path, records: IO[bytes], commands: IO[bytes], answers: IO[bytes]) -> int:
    """The child's side of the protocol (module docstring), reading `records` (records.bin as written)."""
    builder = TextIndexBuilder()
    postings: Postings | None = None
    done_bytes = done_rows = 0
    with records as handle:
        while line := commands.readline():
            what, _, rest = line.decode().strip().partition(" ")
            if what == "upto":
                size, rows = map(int, rest.split())
                if rows > done_rows:
                    builder.add_columns(columns(read_records(handle, size - done_bytes, rows - done_rows)))
                    done_bytes, done_rows = size, rows
            elif what == "whole":
                postings = prepare(builder, folder, rest.strip())
                answers.write(b"ready\n")
                answers.flush()
            elif what == "finish":
                finish(builder, postings or prepare(builder, folder, DEFAULT_LANGUAGE), folder, rest.strip() or None)
                answers.write(b"done\n")
                answers.flush()
                return 0
            else:
                return 2
    return 0  # the compile stopped: nothing to write


if __name__ == "__main__":
    import gc

    gc.disable()  # nothing here makes cycles; the collector would walk every record for nothing
    raise SystemExit(serve_parent(Path(sys.argv[1]), os.fdopen(int(sys.argv[2]), "rb"), sys.stdin.buffer,
                                  sys.stdout.buffer))
