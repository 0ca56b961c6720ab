"""The text index of a compiled folder, built beside the compile: here, or in a second process.

Splitting the records into words and numbering them (host/constraints/text_index.py) is Python's
per-word work, as heavy as reading the library file; in one process the two take turns on one
core. So a compile whose records reach `PROCESS_FROM` bytes hands the text index to a child
interpreter (`python -m host.store.text_process FOLDER`) that reads records.bin as the writer
appends to it (from the page cache: nothing is sent but how far the file is written) while the
parent goes on reading the library file; when the layout is known the parent sends its order and
the child writes text_index.bin and text_index.json into the folder. Below `PROCESS_FROM` (a child
costs ~0.2 s to start), or if the child cannot start or fails, the parent builds the index itself:
the files are the same either way (the same builder, fed the same records in the same order).

The child's protocol, on its standard input: lines `upto N` (records.bin holds at least N bytes),
then `finish` (rows kept in file order) or `finish FILE` (a .npy in the folder: stored row -> row
of the file, source_rows.npy). It answers `done` on its standard output once the files are written
and synced; at the end of its input without `finish` (the compile failed) it leaves quietly.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO, Any

import msgpack
import numpy as np

from host.constraints.text_index import TextIndexBuilder, save_text_index

PROCESS_FROM = 16 << 20  # bytes of records from which the text index is built by a child process
NOTIFY_EVERY = 1 << 20  # the child is told how far records.bin is written at most every this many bytes
RECORDS = "records.bin"
log = logging.getLogger("polymath_host.store")


class TextIndexer:
    """Builds the text index of the folder a StoreWriter fills (see the module docstring).

    The writer calls `records_written` as records.bin grows, `all_written` at its end (here, the
    records are split into words then, beside the layout's thread), `finish` once the layout's
    order is known, and `wait` before meta.json; `close` stops a child if the compile fails.
    """

    def __init__(self, folder: Path, *, process_from: int | None = None) -> None:
        self.folder = folder
        self.process_from = PROCESS_FROM if process_from is None else process_from
        self._child: subprocess.Popen[bytes] | None = None
        self._child_errors: IO[bytes] | None = None
        self._told = 0  # bytes of records.bin the child has been told of
        self._size = 0
        self._builder: TextIndexBuilder | None = None
        self._order_file: str | None = None
        self._failed = False  # a child failed: the rest is done here

    def records_written(self, size: int) -> None:
        """records.bin now holds `size` bytes, flushed."""
        if self._child is None and not self._failed and size >= self.process_from:
            self._start()
        if self._child is not None and size - self._told >= NOTIFY_EVERY:
            self._tell(f"upto {size}\n".encode())
            self._told = size

    def all_written(self, size: int) -> None:
        """records.bin is whole, `size` bytes."""
        self._size = size
        if self._child is not None:
            self._tell(f"upto {size}\n".encode())
        else:
            self._builder = self._tokenized()

    def finish(self, order_file: str | None) -> None:
        """Rows are stored as the folder's `order_file` (a .npy) says, or in file order (None)."""
        self._order_file = order_file
        if self._child is not None:
            self._tell(f"finish {order_file or ''}\n".encode())
        else:
            finish(self._builder or self._tokenized(), self.folder, order_file)
            self._builder = None

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
        if answer.strip() != b"done" or code:
            self._give_up(f"exited with {code}")
            finish(self._tokenized(), self.folder, self._order_file)
        self._close_errors()

    def close(self) -> None:
        """Stop a child still running (the compile failed or is abandoned)."""
        if self._child is not None:
            self._child.kill()
            self._child.wait()
            for stream in (self._child.stdin, self._child.stdout):
                if stream is not None:
                    stream.close()
            self._child = None
        self._close_errors()

    def _tokenized(self) -> TextIndexBuilder:
        builder = TextIndexBuilder()
        with (self.folder / RECORDS).open("rb") as handle:
            builder.add(_records(handle, self._size))
        return builder

    def _start(self) -> None:
        package_root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
        self._child_errors = tempfile.TemporaryFile()  # noqa: SIM115 - kept open for the child's life, closed by wait or close
        try:
            self._child = subprocess.Popen([sys.executable, "-m", "host.store.text_process", str(self.folder)],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._child_errors,
                                           env=env)
        except OSError as problem:
            self._give_up(f"could not start ({problem})")

    def _tell(self, message: bytes) -> None:
        child = self._child
        assert child is not None and child.stdin is not None
        try:
            child.stdin.write(message)
            child.stdin.flush()
        except OSError:  # it died: wait() finds out why, and builds the index here
            pass

    def _give_up(self, why: str) -> None:
        errors = b""
        if self._child_errors is not None:
            self._child_errors.seek(0)
            errors = self._child_errors.read()[-2000:]
        log.warning("the text index process %s; building the text index in this one instead%s", why,
                    f": {errors.decode(errors='replace').strip()}" if errors.strip() else "")
        self._failed = True

    def _close_errors(self) -> None:
        if self._child_errors is not None:
            self._child_errors.close()
            self._child_errors = None


def finish(builder: TextIndexBuilder, folder: Path, order_file: str | None) -> None:
    """Write the index `builder` holds, for rows stored as `order_file` says (None: file order)."""
    order = np.load(folder / order_file, allow_pickle=False) if order_file else None
    save_text_index(builder.finish(order), folder)


def _records(handle: IO[bytes], size: int, unpacker: Any = None) -> Any:
    """The records in the next `size - handle.tell()` bytes of records.bin, one at a time."""
    unpacker = unpacker or msgpack.Unpacker(max_buffer_size=1 << 30)
    while (left := size - handle.tell()) > 0:
        data = handle.read(min(left, 4 << 20))
        if not data:
            raise OSError(f"{handle.name}: ends before byte {size:,}")
        unpacker.feed(data)
        yield from unpacker


def serve_parent(folder: Path, commands: IO[bytes], answers: IO[bytes]) -> int:
    """The child's side of the protocol (module docstring)."""
    builder = TextIndexBuilder()
    unpacker = msgpack.Unpacker(max_buffer_size=1 << 30)
    with (folder / RECORDS).open("rb") as handle:
        while line := commands.readline():
            what, _, count = line.decode().partition(" ")
            if what == "upto":
                builder.add(_records(handle, int(count), unpacker))
            elif what == "finish":
                finish(builder, folder, count.strip() or None)
                answers.write(b"done\n")
                answers.flush()
                return 0
            else:
                return 2
    return 0  # the compile stopped: nothing to write


if __name__ == "__main__":
    import gc

    gc.disable()  # nothing here makes cycles; the collector would walk every record for nothing
    raise SystemExit(serve_parent(Path(sys.argv[1]), sys.stdin.buffer, sys.stdout.buffer))
