"""The Polymath library file format (SPEC §2): parsing, validation, version-0 upgrade.

Every problem is reported as one `LibraryFormatError` line naming the file, the bit and the
field, so a publisher can fix a file without reading our code.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

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


def canonical_id(url: str, text: str) -> str:
    """Hex SHA-256 of `url.strip() + "\\n" + text.strip()`: the same passage is the same bit."""
    return hashlib.sha256(f"{url.strip()}\n{text.strip()}".encode()).hexdigest()


def decode_embedding(encoded: Any) -> np.ndarray:
    """Base64 of little-endian float32 -> a float32 vector; raises ValueError on bad input."""
    if not isinstance(encoded, str):
        raise ValueError(f"must be a base64 string, got {type(encoded).__name__}")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("is not valid base64") from None
    if not raw or len(raw) % 4:
        raise ValueError(f"decodes to {len(raw)} bytes, not a whole number of float32 values")
    return np.frombuffer(raw, dtype="<f4")


def encode_embedding(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


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


class _Problems:
    """Where the checks report: `parse_library` raises the first problem, `library_problems` keeps all.

    One set of checks serves both, so the first problem `library_problems` lists is always the very
    message `parse_library` raises.
    """

    def __init__(self, *, collect: bool) -> None:
        self.collect = collect
        self.found: list[str] = []

    def report(self, message: str) -> None:
        if not self.collect:
            raise LibraryFormatError(message)
        self.found.append(message)


def parse_library(data: Any, *, access_tag: str | None = None, consume: bool = False) -> ParsedLibrary:
    """Validate a decoded library file and return it as arrays.

    `access_tag` (from the `libraries/access/<tag>/` folder) overrides any tag in the file.
    With `consume`, each bit of `data` is dropped once read, so its base64 embedding is freed while
    the matrix fills: for a large file that is the difference between two copies and one.
    Raises LibraryFormatError naming the first problem found.
    """
    library = _check_library(data, access_tag, consume, _Problems(collect=False))
    assert library is not None  # without `collect`, every problem has raised
    return library


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
    problems = _Problems(collect=True)
    library = _check_library(data, access_tag, consume, problems)
    return library, problems.found


def _check_library(data: Any, access_tag: str | None, consume: bool, problems: _Problems) -> ParsedLibrary | None:
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
    bits = data.get("bits")
    if not isinstance(bits, list):
        problems.report("bits: must be a list")
        return None
    library = _parse_bits(bits, model, access_tag, details, sort, consume, problems)
    return None if problems.found else library


def _parse_bits(
    bits: list[Any],
    model: str,
    folder_tag: str | None,
    details: dict[str, Any],
    sort: str,
    consume: bool,
    problems: _Problems,
) -> ParsedLibrary:
    expected_dimension = KNOWN_DIMENSIONS.get(model)
    matrix: np.ndarray | None = None  # allocated at the first bit, once the dimension is known
    token_counts: list[int] = []
    ids: list[str] = []
    records: list[dict[str, Any]] = []
    tags: list[str | None] = []
    seen: set[tuple[str, str | None]] = set()
    for index, bit in enumerate(bits):
        if consume:
            bits[index] = None
        where = f"bits[{index}]"
        if not isinstance(bit, dict):
            problems.report(f"{where}: must be an object, got {type(bit).__name__}")
            continue
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
        vector = _parse_embedding(bit.get("embedding"), where, model, expected_dimension, problems)
        if vector is not None and expected_dimension is None:
            expected_dimension = len(vector)
        tag = folder_tag if folder_tag is not None else bit.get("access_tag")
        if tag is not None and (not isinstance(tag, str) or not tag):
            problems.report(f"{where}.access_tag: must be a non-empty string, got {tag!r}")
            whole = False
        if not whole or info is None or vector is None:
            continue
        assert isinstance(text, str) and isinstance(token_count, int)  # checked above; tells the type checker
        if matrix is None:
            matrix = np.empty((len(bits), len(vector)), dtype="<f4")
        bit_id = canonical_id(info["url"], text)
        # One copy per tag: which copy a caller gets is decided per caller (ModelIndex), so a
        # private copy listed first never hides a public one.
        if (bit_id, tag) in seen:
            continue
        seen.add((bit_id, tag))
        matrix[len(ids)] = vector
        token_counts.append(token_count)
        ids.append(bit_id)
        records.append({"text": text, "info": info})
        tags.append(tag)
    if matrix is None:
        matrix = np.empty((0, expected_dimension or 0), dtype="<f4")
    return ParsedLibrary(
        embedding_model=model,
        embeddings=matrix[: len(ids)],
        token_counts=np.asarray(token_counts, dtype=np.int64),
        ids=ids,
        records=records,
        access_tags=tags,
        details=details,
        sort=sort,
        duplicates_dropped=len(bits) - len(ids),
    )


def _parse_embedding(
    encoded: Any, where: str, model: str, expected_dimension: int | None, problems: _Problems
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


def _parse_info(info: Any, where: str, problems: _Problems) -> dict[str, str] | None:
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
