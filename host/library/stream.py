"""Reading a library file as a stream: its bits block by block, never the whole file in memory.

The file is decoded in chunks (UTF-8, incrementally), and each top-level value and each bit is
parsed by the standard library's C scanner (`json.JSONDecoder.raw_decode`) as soon as it is
complete: memory holds one chunk and one block of bits whatever the file's size, and the bits go
through the same checks as a whole parsed file (host/library/format.py), so every message is the
one `parse_library` and `library_problems` give. The file's SHA-256 is taken on the same pass.

What cannot be streamed is read whole, as before (bounded by `WHOLE_FILE_LIMIT`): a version 0
file (its order is in `sort.ids`, which may come last) and a file whose `bits` come before its
`version` or `embedding_model` (the checks of a bit need the model). Our importer and Polymath's
write both before the bits.

A broken file is named with the byte where it breaks: `not valid JSON: <what> at byte N`, and a
file cut short says where it ends, so a publisher can tell a half-copied file from a bad one.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import re
import sys
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from host.library.bit_checks import BLOCK, BitBlock, BitChecker, WholeBit
from host.library.format import BitSink, LibraryHeader, check_bits_into, check_top_level
from host.library.json_text import parse_json
from host.library.problems import LibraryFormatError, Problems

CHUNK = 8 << 20  # bytes read at a time
WHOLE_FILE_LIMIT = 2 << 30  # the largest file read whole (json.loads holds ~2x the file)
CUT_SHORT_SLACK = 16  # a parse failing this close to the end of the text read so far may just need more text
WHITESPACE = " \t\n\r"
Progress = Callable[[int], None]  # bytes of the file read so far
# Between two bits: `}`, then a comma and the next `{`, with any whitespace (checked after a `}`).
BETWEEN_BITS = re.compile(r"[ \t\n\r]*,[ \t\n\r]*\{")
FAST_MISSES = 4  # blocks in a row that need the full parse before the fast path is left off for the file
_DECODE_BITS = msgspec.json.Decoder(list[WholeBit]).decode
_DECODE_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


_DECODE = json.JSONDecoder(parse_constant=_refuse_constant).raw_decode


class StreamedFile:
    """A library file's text, decoded chunk by chunk, with the place reached (`pos`) in it."""

    def __init__(self, handle: BinaryIO, size: int) -> None:
        self.handle = handle
        self.size = size
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.digest = hashlib.sha256()
        self.text = ""
        self.pos = 0
        self.bytes_before = 0  # bytes of the file before text[0]
        self.chars_before = 0  # characters of the file before text[0]
        self.read_bytes = 0
        self.at_end = False
        self.bom_checked = False
        self.reserve = 1 << 16  # text kept ahead of a value before parsing it: twice the longest so far
        # Reading and hashing the next chunk (both release the GIL) go on beside the parse.
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="library-read")
        self._next: Future[bytes] = self._reader.submit(self._read_chunk)

    def _read_chunk(self) -> bytes:
        chunk = self.handle.read(CHUNK)
        self.digest.update(chunk)
        return chunk

    def close(self) -> None:
        self._next.cancel()
        self._reader.shutdown(wait=True)

    def sha256(self) -> str:
        while self.more():  # what is left is only whitespace, or was not needed: hash it too
            pass
        return self.digest.hexdigest()

    def more(self) -> bool:
        """Read the next chunk (dropping what was parsed); False at the end of the file."""
        if self.at_end:
            return False
        chunk = self._next.result()
        if chunk:
            self._next = self._reader.submit(self._read_chunk)
        self.bytes_before += self._bytes_of(self.pos)
        self.chars_before += self.pos
        try:
            decoded = self.decoder.decode(chunk, final=not chunk)
        except UnicodeDecodeError as problem:
            raise LibraryFormatError(f"not valid JSON: not UTF-8 text (at byte {self.read_bytes + problem.start:,})") from None
        if not self.bom_checked and (decoded or not chunk):
            self.bom_checked = True
            if decoded.startswith("\ufeff"):  # utf-8-sig, as the whole-file reader accepts
                decoded = decoded[1:]
                self.bytes_before += 3
        self.read_bytes += len(chunk)
        self.text = self.text[self.pos :] + decoded if self.pos < len(self.text) else decoded
        self.pos = 0
        self.at_end = not chunk
        return bool(chunk)

    def _bytes_of(self, pos: int) -> int:
        """How many bytes of the file text[:pos] came from (all of a chunk's text is usually ASCII)."""
        if self.text.isascii():  # O(1): Python knows
            return pos
        return len(self.text[:pos].encode("utf-8", "surrogatepass"))

    def offset(self, pos: int | None = None) -> int:
        """The byte offset in the file of text position `pos` (default: the place reached)."""
        return self.bytes_before + self._bytes_of(self.pos if pos is None else pos)

    def next_char(self) -> str:
        """The next character that is not whitespace ("" at the end of the file), not consumed."""
        while True:
            text, pos = self.text, self.pos
            while pos < len(text) and text[pos] in WHITESPACE:
                pos += 1
            self.pos = pos
            if pos < len(text):
                return text[pos]
            if not self.more():
                return ""

    def expect(self, characters: str, what: str) -> str:
        """Consume the next character, one of `characters`; a clear error otherwise."""
        found = self.next_char()
        if not found or found not in characters:
            self.fail(f"expecting {what}")
        self.pos += 1
        return found

    def value(self, where: str) -> Any:
        """The JSON value at the place reached, parsed once all of it has been read."""
        while True:
            self.next_char()
            if len(self.text) - self.pos < self.reserve and not self.at_end:
                self.more()  # a parse cut short by the chunk's end costs a parse and an error: read on first
            try:
                value, end = _DECODE(self.text, self.pos)
            except json.JSONDecodeError as problem:
                if self._may_need_more(problem) and self.more():
                    continue
                if self.at_end and self._may_need_more(problem):
                    raise LibraryFormatError(
                        f"not valid JSON: the file ends at byte {self.size:,}, inside {where} (was it cut short?)") from None
                self.fail(problem.msg, problem.pos)
            except RecursionError:
                raise LibraryFormatError("not valid JSON: nested too deeply") from None
            except ValueError as problem:
                if "integer string conversion" in str(problem):
                    raise LibraryFormatError(
                        f"not valid JSON: a number has more than {sys.get_int_max_str_digits()} digits") from None
                raise LibraryFormatError(f"not valid JSON: {str(problem).splitlines()[0]:.200}") from None
            if end >= len(self.text) and self.more():  # a number may go on in the next chunk
                continue
            self.reserve = max(self.reserve, 2 * (end - self.pos))
            self.pos = end
            return value

    def characters(self) -> int:
        """How many characters of the file come before the place reached."""
        return self.chars_before + self.pos

    def bits(self, size: int) -> tuple[list[WholeBit], int] | None:
        """The whole bits in about the next `size` characters, decoded at once (msgspec, as typed
        `WholeBit`s), and the place just past the last (`pos` itself is not moved); None where
        that cannot be done (the next character is not a bit's `{`, no end of a bit in reach, or
        any bit not a `WholeBit`): the caller then parses them one by one.

        The span ends at a `}` followed by `,` and `{`, which may also occur inside a string or
        close a nested object; the span (in brackets) then does not decode as a list of bits, so
        a wrong guess costs a failed decode, never a wrong result.
        """
        if self.next_char() != "{":
            return None
        if len(self.text) - self.pos < size and not self.at_end:
            self.more()
        text, start = self.text, self.pos
        end = text.rfind("}", start, start + size)
        for _ in range(64):  # `}` that close an info object or sit in a text come before the right one
            if end < start or BETWEEN_BITS.match(text, end + 1):
                break
            end = text.rfind("}", start, end)
        if end < start:
            return None
        try:
            bits = _DECODE_BITS("[" + text[start : end + 1] + "]")
        except (msgspec.DecodeError, RecursionError):
            return None
        return bits, end + 1

    def _may_need_more(self, problem: json.JSONDecodeError) -> bool:
        return problem.pos >= len(self.text) - CUT_SHORT_SLACK or problem.msg.startswith("Unterminated string")

    def fail(self, message: str, pos: int | None = None) -> None:
        if self.at_end and (pos if pos is not None else self.pos) >= len(self.text):
            raise LibraryFormatError(f"not valid JSON: the file ends at byte {self.size:,} (was it cut short?)")
        raise LibraryFormatError(f"not valid JSON: {message} at byte {self.offset(pos):,}")


@dataclass(frozen=True)
class Streamed:
    """What streaming a file gave: its header (None if nothing could be checked), problems, digest."""

    header: LibraryHeader | None
    problems: list[str]  # the first `problem_limit` of them
    problem_count: int
    sha256: str


def stream_library(path: Path, sink: BitSink, *, access_tag: str | None = None, problem_limit: int | None = None,
                   progress: Progress | None = None) -> Streamed:
    """Check the library file at `path`, handing its whole bits to `sink` block by block while no
    problem has been found. Every problem is listed (file order, top level first, as
    `library_problems` lists them); a file that is not JSON raises LibraryFormatError."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        stream = StreamedFile(handle, size)
        try:
            return _stream(path, stream, sink, access_tag, problem_limit, progress)
        finally:
            stream.close()


def _stream(path: Path, stream: StreamedFile, sink: BitSink, access_tag: str | None, problem_limit: int | None,
            progress: Progress | None) -> Streamed:
    if stream.next_char() != "{":
        return _whole_file(path, sink, access_tag, problem_limit)
    stream.pos += 1
    header: dict[str, Any] = {}
    top, below = Problems(collect=True, limit=problem_limit), Problems(collect=True, limit=problem_limit)
    checker: BitChecker | None = None
    if stream.next_char() == "}":
        stream.pos += 1
    else:
        while True:
            if stream.next_char() != '"':
                stream.fail("expecting a property name enclosed in double quotes")
            key = stream.value("a property name")
            stream.expect(":", "':' after a property name")
            if key == "content":  # version 0: its order may come after it
                return _whole_file(path, sink, access_tag, problem_limit)
            if key == "bits" and stream.next_char() == "[":
                if checker is not None:
                    raise LibraryFormatError("bits: the file holds more than one list of bits")
                if type(header.get("version")) is not int or header["version"] != 1 or "embedding_model" not in header:
                    return _whole_file(path, sink, access_tag, problem_limit)
                model = header["embedding_model"]
                checker = BitChecker(model if isinstance(model, str) and model.strip() else str(model), access_tag, below)
                _stream_bits(stream, checker, sink, top, below, progress)
                header["bits"] = []
            else:
                header[key] = stream.value(f"the value of {key!r:.40}")
            if stream.expect(",}", "',' or '}' after a value") == "}":
                break
    if stream.next_char():
        stream.fail("extra data after the library object")
    sha256 = stream.sha256()
    if checker is None:  # no list of bits: the whole-file checks say what is wrong
        return _finish(check_bits_into(header, sink, access_tag=access_tag, consume=True, problems=top), top, below, sha256)
    checked = check_top_level(header, top)
    found = None
    if checked is not None:
        _, model, sort, details, language = checked
        found = LibraryHeader(model, details, sort, checker.dimension, checker.read, checker.dropped, language)
    return _finish(found, top, below, sha256)


def _stream_bits(stream: StreamedFile, checker: BitChecker, sink: BitSink, top: Problems, below: Problems,
                 progress: Progress | None) -> None:
    """The list of bits, a block at a time: decoded at once and checked column by column where every
    bit is plainly whole (`StreamedFile.bits`, `BitChecker.check_decoded`), otherwise parsed by the
    standard library one bit at a time and checked in full (`BitChecker.check`): same result."""
    stream.pos += 1  # the '['
    pending: list[Any] = []
    block_size = 0  # characters of the last block of bits, whichever way it was read
    misses = 0

    def deliver(block: BitBlock) -> None:
        if not top and not below:
            sink.add(block)
        if progress:
            progress(stream.bytes_before + stream.pos)  # exact for ASCII text; near enough for a progress bar

    if stream.next_char() == "]":
        stream.pos += 1
        return
    while True:
        if not pending and block_size and misses < FAST_MISSES:
            decoded = stream.bits(block_size)
            block = None if decoded is None else checker.check_decoded(decoded[0])
            if decoded is not None and block is not None:
                misses = 0
                bits, end = decoded
                block_size = (end - stream.pos) * BLOCK // len(bits)
                stream.pos = end
                deliver(block)
                if stream.expect(",]", "',' or ']' after a bit") == "]":
                    return
                continue
            misses += 1
        if not pending:
            start = stream.characters()
        pending.append(stream.value(f"bits[{checker.read + len(pending):,}]"))
        if len(pending) == BLOCK:
            block_size = stream.characters() - start
            deliver(checker.check(pending))
            pending.clear()
        if stream.expect(",]", "',' or ']' after a bit") == "]":
            break
    if pending:
        deliver(checker.check(pending))


def _finish(header: LibraryHeader | None, top: Problems, below: Problems, sha256: str) -> Streamed:
    problems = top.found + below.found
    if top.limit is not None:
        problems = problems[: top.limit]
    return Streamed(header, problems, top.count + below.count, sha256)


def _whole_file(path: Path, sink: BitSink, access_tag: str | None, problem_limit: int | None) -> Streamed:
    """The file parsed whole (version 0, or bits before the model): bounded by WHOLE_FILE_LIMIT."""
    data = read_whole(path, WHOLE_FILE_LIMIT, reason=" (a version 0 library, or one whose bits come before its "
                                                     "version and embedding_model, is read whole)")
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    problems = Problems(collect=True, limit=problem_limit)
    header = check_bits_into(data, sink, access_tag=access_tag, consume=True, problems=problems)
    return Streamed(header, problems.found, problems.count, digest.hexdigest())


def read_small(body: bytes, access_tag: str | None) -> tuple[LibraryHeader, list[BitBlock]] | None:
    """A small library file's bytes decoded at once (msgspec) and its bits checked column by column:
    its header and its bits' blocks. None where anything is not plainly whole or well formed: the
    caller then reads it with `stream_library`, whose messages name what is wrong. Ten thousand small
    files are read this way in a fraction of what parsing each bit of them alone would take."""
    try:
        document = _DECODE_TOP(body)
        raw_bits = document.pop("bits", None)
        header: dict[str, Any] = {key: msgspec.json.decode(value) for key, value in document.items()}
        if raw_bits is None or type(header.get("version")) is not int or header["version"] != 1:
            return None
        bits = _DECODE_BITS(raw_bits)
    except (msgspec.DecodeError, RecursionError):
        return None
    problems = Problems(collect=True, limit=1)
    checked = check_top_level({**header, "bits": []}, problems)
    if checked is None or problems:
        return None
    _, model, sort, details, language = checked
    checker = BitChecker(model, access_tag, problems)
    blocks = []
    for start in range(0, len(bits), BLOCK):
        block = checker.check_decoded(bits[start : start + BLOCK])
        if block is None or problems:
            return None
        blocks.append(block)
    return LibraryHeader(model, details, sort, checker.dimension, checker.read, checker.dropped, language), blocks


def read_whole(path: Path, max_bytes: int, reason: str = " (raise --max-library-bytes)") -> Any:
    """The decoded JSON of a whole file, refused beyond `max_bytes`."""
    size = path.stat().st_size
    if size > max_bytes:
        raise LibraryFormatError(f"file is {size:,} bytes, over the {max_bytes:,}-byte limit{reason}")
    try:
        # Decoded text, not bytes: json.loads(bytes) would hold the bytes, their decoded copy and
        # the objects at once. The text is freed as soon as the objects exist.
        with path.open(encoding="utf-8-sig") as handle:
            return parse_json(handle.read())
    except UnicodeDecodeError:
        raise LibraryFormatError("not valid JSON: not UTF-8 text") from None
    except ValueError as problem:
        raise LibraryFormatError(str(problem)) from None
