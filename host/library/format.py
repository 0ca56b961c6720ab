"""The Polymath library file format (SPEC §2): parsing, validation, version-0 upgrade.

Every problem is reported as one `LibraryFormatError` line naming the file, the bit and the
field, so a publisher can fix a file without reading our code.
"""

from __future__ import annotations

import binascii
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, cast

import msgspec
import numpy as np
import pybase64

from host.library.canonical import canonical_digest, canonical_digests

FORMAT_VERSION = 1
MAX_TOKEN_COUNT = 2**31 - 1  # the compiled form holds token counts as int32
MAX_EMBEDDING_MAGNITUDE = 1e6  # larger values overflow float32 dot products into inf/NaN
ADA_002 = "openai.com:text-embedding-ada-002"
KNOWN_DIMENSIONS = {ADA_002: 1536}
SORT_TYPES = ("any", "similarity", "manual", "random")
OMITTABLE_KEYS = ("text", "embedding", "token_count", "similarity", "info", "access_tag")
OMIT_NOTHING = ""
OMIT_ALL = "*"
BIT_KEYS = frozenset({"id", *OMITTABLE_KEYS})


class LibraryFormatError(ValueError):
    """A library file (or an `omit` argument) that breaks the format; the message is one line."""


def parse_json(text: str | bytes) -> Any:
    """Decode JSON text; raises ValueError with one line for anything Python's json would choke on.

    Beyond syntax: nesting deeper than the interpreter's recursion limit, integers of more than
    4,300 digits, and the non-standard constants NaN and Infinity are all refused, never a crash.
    """
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError("not valid JSON: nested too deeply") from None
    except UnicodeDecodeError:
        raise ValueError("not valid JSON: not UTF-8 text") from None
    except json.JSONDecodeError as problem:
        raise ValueError(f"not valid JSON: {str(problem).splitlines()[0]:.200}") from None
    except ValueError as problem:
        if "integer string conversion" in str(problem):
            raise ValueError(f"not valid JSON: a number has more than {sys.get_int_max_str_digits()} digits") from None
        raise ValueError(f"not valid JSON: {str(problem).splitlines()[0]:.200}") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


@dataclass(frozen=True)
class Omit:
    """Which keys are left out of bits. `everything` means whole bits are gone (`"*"`)."""

    keys: frozenset[str] = frozenset()
    everything: bool = False

    def __contains__(self, key: str) -> bool:
        return self.everything or key in self.keys

    def to_wire(self) -> str | list[str]:
        """`""`, `"*"`, one key as a string, or several keys as a list (SPEC §3)."""
        if self.everything:
            return OMIT_ALL
        ordered = [key for key in OMITTABLE_KEYS if key in self.keys]
        if not ordered:
            return OMIT_NOTHING
        return ordered[0] if len(ordered) == 1 else ordered


def parse_omit(value: Any) -> Omit:
    """Read an omit value: `""`, `"*"`, a key, a comma list, or a list of keys."""
    if value is None:
        return Omit()
    if isinstance(value, str):
        parts = [part.strip() for part in value.split(",")]
        if parts == [""]:
            return Omit()
        if parts == [OMIT_ALL]:
            return Omit(everything=True)
    elif isinstance(value, list) and all(isinstance(part, str) for part in value):
        parts = [part.strip() for part in value]
        if parts == [OMIT_ALL]:
            return Omit(everything=True)
        if parts == [] or parts == [""]:
            return Omit()
    else:
        raise LibraryFormatError(f"omit must be a string or a list of strings, got {value!r:.80}")
    for part in parts:
        if part in (OMIT_ALL, ""):
            raise LibraryFormatError(f"omit: {part!r} must stand alone, got {value!r:.80}")
        if part not in OMITTABLE_KEYS:
            raise LibraryFormatError(
                f"omit: unknown key {part!r:.40}; expected one of {', '.join(OMITTABLE_KEYS)}, '' or '*'"
            )
    return Omit(keys=frozenset(parts))


def decode_embedding(encoded: Any) -> np.ndarray:
    """Base64 of little-endian float32 -> a float32 vector; raises ValueError on bad input."""
    if not isinstance(encoded, str):
        raise ValueError(f"must be a base64 string, got {type(encoded).__name__}")
    try:
        raw = pybase64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("is not valid base64") from None
    if not raw or len(raw) % 4:
        raise ValueError(f"decodes to {len(raw)} bytes, not a whole number of float32 values")
    return np.frombuffer(raw, dtype="<f4")


def encode_embedding(vector: np.ndarray) -> str:
    """A float32 vector as base64 of its little-endian bytes. pybase64 reads the array's own buffer
    (no `tobytes` copy): 0.35 µs for 1,536 values against 8 µs with the standard library's base64,
    which was 80 µs of a 10-bit answer (docs/performance.md, "Query speed")."""
    return pybase64.b64encode_as_string(np.ascontiguousarray(vector, dtype="<f4").data)


@dataclass
class ParsedLibrary:
    """A validated version-1 library held as arrays plus per-bit records."""

    embedding_model: str
    embeddings: np.ndarray  # (bits, dimension) float32, C-contiguous
    token_counts: np.ndarray  # (bits,) int64
    ids: list[str]
    records: list[dict[str, Any]]  # {"text": ..., "info": {...}} per bit
    access_tags: list[str | None]
    details: dict[str, Any] = field(default_factory=dict)
    sort: str = "any"
    duplicates_dropped: int = 0

    @property
    def dimension(self) -> int:
        return int(self.embeddings.shape[1])


def upgrade_version_0(data: dict[str, Any]) -> dict[str, Any]:
    """Version 0 kept bits in `content: {id: bit}` with an optional `sort: {type, ids}`."""
    content = data.get("content")
    if not isinstance(content, dict):
        raise LibraryFormatError("content: a version 0 library needs an object of bits")
    sort = data.get("sort")
    sort_type = "any"
    order = list(content)
    if isinstance(sort, dict):
        sort_type = sort.get("type", "any")
        if "ids" in sort:
            ids = sort["ids"]
            if not isinstance(ids, list) or any(key not in content for key in ids):
                raise LibraryFormatError("sort.ids: must list ids that are keys of content")
            # Bits the list leaves out follow it in key order: an upgrade loses nothing.
            order = list(dict.fromkeys([*ids, *content]))
    elif sort is not None:
        raise LibraryFormatError(f"sort: a version 0 sort must be an object, got {sort!r}")
    upgraded = {key: value for key, value in data.items() if key not in ("content", "sort")}
    upgraded.update(version=1, sort=sort_type, bits=[content[key] for key in order])
    return upgraded


class Problems:
    """Where the checks report: `parse_library` raises the first problem, `library_problems` keeps all.

    One set of checks serves both, so the first problem `library_problems` lists is always the very
    message `parse_library` raises. `limit` bounds what is kept of a file with millions of bad bits
    (the count goes on).
    """

    def __init__(self, *, collect: bool, limit: int | None = None) -> None:
        self.collect = collect
        self.limit = limit
        self.found: list[str] = []
        self.count = 0

    def report(self, message: str) -> None:
        if not self.collect:
            raise LibraryFormatError(message)
        self.count += 1
        if self.limit is None or len(self.found) < self.limit:
            self.found.append(message)

    def __bool__(self) -> bool:
        return self.count > 0


@dataclass
class BitBlock:
    """Whole bits in file order, the first copy of each kept: what a compiled store is made of."""

    vectors: np.ndarray  # (bits, dimension) float32
    token_counts: list[int]
    ids: list[bytes]  # raw SHA-256 canonical ids
    texts: list[str]
    infos: list[dict[str, str | None]]  # a None value is a field the bit does not have
    tags: list[str | None]

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def records(self) -> list[dict[str, Any]]:
        """Each bit's record, {"text": ..., "info": {...}} (the store packs them from the columns)."""
        return [{"text": text, "info": info if None not in info.values() else
                 {key: value for key, value in info.items() if value is not None}}
                for text, info in zip(self.texts, self.infos, strict=True)]


class BitSink(Protocol):
    def add(self, block: BitBlock) -> None: ...


@dataclass
class LibraryHeader:
    """What a library file says besides its bits, and what reading its bits found."""

    embedding_model: str
    details: dict[str, Any]
    sort: str
    dimension: int | None  # None when no bit was whole
    bits_read: int
    duplicates_dropped: int


class WholeBit(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A bit as the streaming reader's fast path decodes it (host/library/stream.py): only exact
    JSON types, no unknown key. Whatever does not decode as one (or fails `check_decoded`) is
    parsed again by the standard library and goes through every check, so it never changes a
    result; msgspec refuses all that the standard library refuses here (over-long numbers, NaN,
    lone surrogates, nesting), and keeps the last of duplicate keys as it does."""

    text: str
    embedding: msgspec.Raw  # its JSON, undecoded: a base64 string in quotes is decoded at once (`_decoded_matrix`)
    token_count: int
    info: dict[str, str | None]
    access_tag: str | None = None
    id: str | None = None  # ignored, as by the full checks
    similarity: float | None = None  # ignored


QUOTE = ord('"')
BLOCK = 1024  # bits checked at a time: numeric checks run on the block, a problem re-checks it bit by bit


class BitChecker:
    """Checks bits in file order, block by block, and keeps the first copy of each (id, tag).

    A block is first read on the fast path (exact types, one numeric check for all its vectors).
    Any doubt sends the whole block through the bit-by-bit path, which names every problem; so
    the fast path never changes a result, it only skips work on blocks with nothing to say.
    """

    def __init__(self, model: str, folder_tag: str | None, problems: Problems) -> None:
        self.model = model
        self.folder_tag = folder_tag
        self.problems = problems
        self.dimension: int | None = KNOWN_DIMENSIONS.get(model)
        self.read = 0
        self.dropped = 0
        self._seen: set[bytes] = set()  # id, or id + tag: 32-byte keys cost a third of hex strings

    def check(self, bits: list[Any]) -> BitBlock:
        """The whole, new bits of the next `bits` of the file (reporting the others' problems)."""
        first = self.read
        self.read += len(bits)
        fast = self._fast(bits)
        if fast is not None:
            return self._keep(fast)
        return self._keep([self._one(bit, f"bits[{first + offset}]") for offset, bit in enumerate(bits)])

    def check_decoded(self, bits: list[WholeBit]) -> BitBlock | None:
        """The next `bits`, decoded as `WholeBit`s, checked column by column; None (nothing counted)
        when any of them needs the full checks: the caller then parses them again for `check`.

        Each check runs over a whole column at a time (a comprehension, `in`, `min`), not bit by
        bit: at a million bits the per-bit steps of a loop were a third of reading the file."""
        if not bits:
            return None
        counts = [bit.token_count for bit in bits]
        tags: list[str | None] = ([bit.access_tag for bit in bits] if self.folder_tag is None
                                  else [self.folder_tag] * len(bits))
        infos = [bit.info for bit in bits]
        urls = [info.get("url") for info in infos]
        if None in urls or min(counts) < 0 or max(counts) > MAX_TOKEN_COUNT or "" in tags:
            return None
        present = cast("list[str]", urls)  # None is refused above
        if "" in [url.strip() for url in present]:
            return None
        texts = [bit.text for bit in bits]
        try:
            ids = canonical_digests(present, texts)
            matrix = self._decoded_matrix([bit.embedding for bit in bits])
        except (binascii.Error, ValueError):  # bad base64, or text that is not UTF-8 (a lone surrogate)
            return None
        if matrix is None:
            return None
        self.read += len(bits)
        kept = self._new(ids, tags)
        if len(kept) == len(bits):
            return BitBlock(matrix, counts, ids, texts, infos, tags)
        return BitBlock(matrix[kept], [counts[row] for row in kept], [ids[row] for row in kept],
                        [texts[row] for row in kept], [infos[row] for row in kept], [tags[row] for row in kept])

    def _new(self, ids: list[bytes], tags: list[str | None]) -> list[int]:
        """Which of these bits are first copies (of their id and tag), remembering them.

        One copy per tag: which copy a caller gets is decided per caller (ModelIndex), so a private
        copy listed first never hides a public one."""
        seen = self._seen
        keys = (ids if tags.count(None) == len(tags) else
                [bit_id if tag is None else bit_id + tag.encode() for bit_id, tag in zip(ids, tags, strict=True)])
        fresh = set(keys)
        if len(fresh) == len(keys) and seen.isdisjoint(fresh):  # the usual block: no copy at all
            seen |= fresh
            return list(range(len(keys)))
        kept = []
        for row, key in enumerate(keys):
            if key in seen:
                self.dropped += 1
                continue
            seen.add(key)
            kept.append(row)
        return kept

    def _fast(self, bits: list[Any]) -> list[_Bit] | None:
        checked: list[_Bit] = []
        vectors: list[bytes] = []
        folder_tag = self.folder_tag
        for bit in bits:
            if type(bit) is not dict or not bit.keys() <= BIT_KEYS:
                return None
            text, token_count, info, encoded = bit.get("text"), bit.get("token_count"), bit.get("info"), bit.get("embedding")
            if (type(text) is not str or type(token_count) is not int or not 0 <= token_count <= MAX_TOKEN_COUNT
                    or type(info) is not dict or type(encoded) is not str):
                return None
            url = info.get("url")
            if type(url) is not str or not url.strip():
                return None
            if any(value is not None and type(value) is not str for value in info.values()):
                return None
            tag = folder_tag if folder_tag is not None else bit.get("access_tag")
            if tag is not None and (type(tag) is not str or not tag):
                return None
            try:
                raw = pybase64.b64decode(encoded, validate=True)
                bit_id = canonical_digest(url, text)
            except (binascii.Error, ValueError):  # bad base64, or text that is not UTF-8 (a lone surrogate)
                return None
            vectors.append(raw)
            checked.append(_Bit(None, token_count, bit_id, text, info, tag))
        matrix = self._matrix(vectors)
        if matrix is None:
            return None
        return [bit._replace(vector=matrix[row]) for row, bit in enumerate(checked)]

    def _decoded_matrix(self, embeddings: list[msgspec.Raw]) -> np.ndarray | None:
        """`_matrix` of the embeddings as their JSON: base64 in quotes, or else None (any other
        value, or a string with an escape in it, is left to the full checks). Where a vector's
        base64 has no padding (4 x dimension a multiple of 3: 384, 768, 1536...), strings of the
        right length joined are one matrix of characters, checked for their quotes and decoded in
        one call; a bad character or a `=` anywhere fails it as it fails a string alone."""
        dimension = self.dimension or 0
        width = 16 * dimension // 3 + 2
        quoted = cast("list[bytes]", embeddings)  # a Raw is a buffer of the value's JSON
        if dimension and 4 * dimension % 3 == 0 and set(map(len, quoted)) == {width}:
            characters = np.frombuffer(b"".join(quoted), dtype=np.uint8).reshape(len(quoted), width)
            if not ((characters[:, 0] == QUOTE).all() and (characters[:, -1] == QUOTE).all()):
                return None
            raw = pybase64.b64decode(np.ascontiguousarray(characters[:, 1:-1]).data, validate=True)
            return self._checked(raw, len(quoted), dimension) if len(raw) == 4 * dimension * len(quoted) else None
        views = [memoryview(text) for text in quoted]
        if any(len(view) < 2 or view[0] != QUOTE or view[-1] != QUOTE for view in views):
            return None
        decode = pybase64.b64decode
        return self._matrix([decode(view[1:-1], validate=True) for view in views])

    def _matrix(self, raws: list[bytes]) -> np.ndarray | None:
        """The decoded vectors as one matrix, if all have the model's dimension and finite values
        within the limit (the dimension is learnt from the first when not known yet); else None."""
        dimension = self.dimension or (len(raws[0]) // 4 if raws else 0)
        if not dimension or any(len(raw) != 4 * dimension for raw in raws):
            return None
        return self._checked(b"".join(raws), len(raws), dimension)

    def _checked(self, raw: bytes, rows: int, dimension: int) -> np.ndarray | None:
        matrix = np.frombuffer(raw, dtype="<f4").reshape(rows, dimension)
        # max and min carry a NaN through and fail the comparisons; infinities exceed the limit.
        if rows and not (float(matrix.max()) <= MAX_EMBEDDING_MAGNITUDE and float(matrix.min()) >= -MAX_EMBEDDING_MAGNITUDE):
            return None
        self.dimension = dimension
        return matrix

    def _one(self, bit: Any, where: str) -> _Bit | None:
        """One bit checked field by field, every problem reported; None unless it is whole."""
        problems = self.problems
        if not isinstance(bit, dict):
            problems.report(f"{where}: must be an object, got {type(bit).__name__}")
            return None
        whole = True  # no problem found in this bit yet; only whole bits are kept
        for unknown in sorted(set(bit) - BIT_KEYS):
            problems.report(f"{where}: unknown key {unknown!r}")
            whole = False
        text = bit.get("text")
        if not isinstance(text, str):
            problems.report(f"{where}.text: must be a string, got {text!r:.40}")
            whole = False
        token_count = bit.get("token_count")
        if not isinstance(token_count, int) or isinstance(token_count, bool) or not 0 <= token_count <= MAX_TOKEN_COUNT:
            problems.report(
                f"{where}.token_count: must be an integer from 0 to {MAX_TOKEN_COUNT}, got {token_count!r:.40}")
            whole = False
        info = _parse_info(bit.get("info"), where, problems)
        vector = _parse_embedding(bit.get("embedding"), where, self.model, self.dimension, problems)
        if vector is not None and self.dimension is None:
            self.dimension = len(vector)
        tag = self.folder_tag if self.folder_tag is not None else bit.get("access_tag")
        if tag is not None and (not isinstance(tag, str) or not tag):
            problems.report(f"{where}.access_tag: must be a non-empty string, got {tag!r}")
            whole = False
        if not whole or info is None or vector is None:
            return None
        url = info["url"]
        assert isinstance(text, str) and isinstance(token_count, int) and isinstance(url, str)  # checked above
        return _Bit(vector, int(token_count), canonical_digest(url, text), text, info, tag)

    def _keep(self, bits: Sequence[_Bit | None]) -> BitBlock:
        whole = [bit for bit in bits if bit is not None]
        kept = [whole[row] for row in self._new([bit.id for bit in whole], [bit.tag for bit in whole])]
        vectors = np.empty((len(kept), self.dimension or 0), dtype="<f4")
        for row, bit in enumerate(kept):
            vectors[row] = bit.vector
        return BitBlock(vectors, [bit.token_count for bit in kept], [bit.id for bit in kept],
                        [bit.text for bit in kept], [bit.info for bit in kept], [bit.tag for bit in kept])


class _Bit(NamedTuple):
    vector: np.ndarray | None
    token_count: int
    id: bytes
    text: str
    info: dict[str, str | None]
    tag: str | None


class _Collector:
    """A BitSink that keeps every block, for a ParsedLibrary."""

    def __init__(self) -> None:
        self.blocks: list[BitBlock] = []

    def add(self, block: BitBlock) -> None:
        self.blocks.append(block)

    def library(self, header: LibraryHeader) -> ParsedLibrary:
        blocks = [block for block in self.blocks if len(block)]
        embeddings = (np.concatenate([block.vectors for block in blocks]) if blocks
                      else np.empty((0, header.dimension or 0), dtype="<f4"))
        return ParsedLibrary(
            embedding_model=header.embedding_model,
            embeddings=embeddings,
            token_counts=np.array([count for block in blocks for count in block.token_counts], dtype=np.int64),
            ids=[bit_id.hex() for block in blocks for bit_id in block.ids],
            records=[record for block in blocks for record in block.records],
            access_tags=[tag for block in blocks for tag in block.tags],
            details=header.details,
            sort=header.sort,
            duplicates_dropped=header.duplicates_dropped,
        )


def parse_library(data: Any, *, access_tag: str | None = None, consume: bool = False) -> ParsedLibrary:
    """Validate a decoded library file and return it as arrays.

    `access_tag` (from the `libraries/access/<tag>/` folder) overrides any tag in the file.
    With `consume`, each bit of `data` is dropped once read, so its base64 embedding is freed while
    the matrix fills: for a large file that is the difference between two copies and one.
    Raises LibraryFormatError naming the first problem found.
    """
    collector = _Collector()
    header = check_bits_into(data, collector, access_tag=access_tag, consume=consume, problems=Problems(collect=False))
    assert header is not None  # without `collect`, every problem has raised
    return collector.library(header)


def library_problems(data: Any, *, access_tag: str | None = None, consume: bool = False) -> list[str]:
    """Every problem of a decoded library file, one line each in file order; `[]` when it is valid.

    The first line is exactly the message `parse_library` raises. After a problem that leaves
    nothing to check below it (not an object, `bits` not a list, a broken version 0 `content`),
    the list ends there.
    """
    return check_library(data, access_tag=access_tag, consume=consume)[1]


def check_library(
    data: Any, *, access_tag: str | None = None, consume: bool = False
) -> tuple[ParsedLibrary | None, list[str]]:
    """`(the parsed library, [])` for a valid file, else `(None, every problem)` as `library_problems` lists them."""
    problems = Problems(collect=True)
    collector = _Collector()
    header = check_bits_into(data, collector, access_tag=access_tag, consume=consume, problems=problems)
    return (None if header is None or problems else collector.library(header)), problems.found


def check_bits_into(data: Any, sink: BitSink, *, access_tag: str | None, consume: bool,
                    problems: Problems) -> LibraryHeader | None:
    """Check a decoded library file, handing its whole bits to `sink` block by block (nothing more
    once a problem is found); None when nothing below the top level could be checked."""
    checked = check_top_level(data, problems)
    if checked is None:
        return None
    data, model, sort, details = checked
    bits = data.get("bits")
    if not isinstance(bits, list):
        problems.report("bits: must be a list")
        return None
    checker = BitChecker(model, access_tag, problems)
    for start in range(0, len(bits), BLOCK):
        block = checker.check(bits[start : start + BLOCK])
        if consume:
            bits[start : start + BLOCK] = [None] * len(bits[start : start + BLOCK])
        if not problems:
            sink.add(block)
    return LibraryHeader(model, details, sort, checker.dimension, checker.read, checker.dropped)


def check_top_level(data: Any, problems: Problems) -> tuple[dict[str, Any], str, str, dict[str, Any]] | None:
    """Every check above the bits: (the data, version 0 upgraded; model; sort; details), or None
    when the data cannot hold bits at all. `bits` itself is left to the caller."""
    if not isinstance(data, dict):
        problems.report(f"a library must be a JSON object, got {type(data).__name__}")
        return None
    version = data.get("version")
    if type(version) is not int or version not in (0, FORMAT_VERSION):
        # `type(...) is int`: Python has true == 1 and 1.0 == 1; neither is a version.
        problems.report(f"version: expected 0 or 1, got {version!r}")
    if version == 0 and type(version) is int:
        try:
            data = upgrade_version_0(data)
        except LibraryFormatError as problem:
            problems.report(str(problem))
            return None
    model = data.get("embedding_model")
    if not isinstance(model, str) or not model.strip():
        problems.report(f"embedding_model: must be a non-empty string, got {model!r}")
        model = str(model)
    sort = data.get("sort", "any")
    if sort not in SORT_TYPES:
        problems.report(f"sort: expected one of {', '.join(SORT_TYPES)}, got {sort!r}")
    details = data.get("details", {})
    if not isinstance(details, dict):
        problems.report(f"details: must be an object, got {details!r}")
    try:
        omit = parse_omit(data.get("omit", ""))
    except LibraryFormatError as problem:
        problems.report(str(problem))
        omit = Omit()
    missing = [key for key in ("text", "embedding", "token_count", "info") if key in omit]
    if missing:
        problems.report(f"omit: a hosted library needs every bit whole, but this file omits {', '.join(missing)}")
    return data, model, sort, details


def _parse_embedding(
    encoded: Any, where: str, model: str, expected_dimension: int | None, problems: Problems
) -> np.ndarray | None:
    """The bit's vector, or None after reporting why it is not one of `expected_dimension` finite floats."""
    try:
        vector = decode_embedding(encoded)
    except ValueError as problem:
        problems.report(f"{where}.embedding: {problem}")
        return None
    if expected_dimension is not None and len(vector) != expected_dimension:
        problems.report(f"{where}.embedding: has {len(vector)} dimensions, expected {expected_dimension} for {model}")
        return None
    if not np.isfinite(vector).all():
        problems.report(f"{where}.embedding: contains NaN or infinity")
        return None
    largest = np.abs(vector).max()
    if largest > MAX_EMBEDDING_MAGNITUDE:
        problems.report(f"{where}.embedding: has a value of magnitude {largest:.3g}; "
                        f"values must be at most {MAX_EMBEDDING_MAGNITUDE:g} (dot products would overflow)")
        return None
    return vector


def _parse_info(info: Any, where: str, problems: Problems) -> dict[str, str | None] | None:
    """`url` is required; other keys (image_url, title, description, ...) are optional strings."""
    if not isinstance(info, dict):
        problems.report(f"{where}.info: must be an object with a url, got {info!r:.40}")
        return None
    whole = True
    url = info.get("url")
    if not isinstance(url, str) or not url.strip():
        problems.report(f"{where}.info.url: must be a non-empty string, got {url!r:.40}")
        whole = False
    for key, value in info.items():
        if value is not None and not isinstance(value, str) and key != "url":
            problems.report(f"{where}.info.{key}: must be a string, got {value!r:.40}")
            whole = False
    if not whole:
        return None
    # Published files carry `null` for absent optional fields; absent is what clients expect.
    return {key: value for key, value in info.items() if value is not None}
