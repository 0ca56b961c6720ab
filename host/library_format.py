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


def parse_library(data: Any, *, access_tag: str | None = None, consume: bool = False) -> ParsedLibrary:
    """Validate a decoded library file and return it as arrays.

    `access_tag` (from the `libraries/access/<tag>/` folder) overrides any tag in the file.
    With `consume`, each bit of `data` is dropped once read, so its base64 embedding is freed while
    the matrix fills: for a large file that is the difference between two copies and one.
    Raises LibraryFormatError naming the first problem found.
    """
    if not isinstance(data, dict):
        raise LibraryFormatError(f"a library must be a JSON object, got {type(data).__name__}")
    version = data.get("version")
    if type(version) is not int:  # Python has true == 1 and 1.0 == 1; neither is a version
        raise LibraryFormatError(f"version: expected 0 or 1, got {version!r}")
    if version == 0:
        data = upgrade_version_0(data)
    elif version != FORMAT_VERSION:
        raise LibraryFormatError(f"version: expected 0 or 1, got {version!r}")

    model = data.get("embedding_model")
    if not isinstance(model, str) or not model.strip():
        raise LibraryFormatError(f"embedding_model: must be a non-empty string, got {model!r}")
    sort = data.get("sort", "any")
    if sort not in SORT_TYPES:
        raise LibraryFormatError(f"sort: expected one of {', '.join(SORT_TYPES)}, got {sort!r}")
    details = data.get("details", {})
    if not isinstance(details, dict):
        raise LibraryFormatError(f"details: must be an object, got {details!r}")
    omit = parse_omit(data.get("omit", ""))
    missing = [key for key in ("text", "embedding", "token_count", "info") if key in omit]
    if missing:
        raise LibraryFormatError(
            f"omit: a hosted library needs every bit whole, but this file omits {', '.join(missing)}"
        )
    bits = data.get("bits")
    if not isinstance(bits, list):
        raise LibraryFormatError("bits: must be a list")
    return _parse_bits(bits, model, access_tag, details, sort, consume)


def _parse_bits(
    bits: list[Any], model: str, folder_tag: str | None, details: dict[str, Any], sort: str, consume: bool
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
            raise LibraryFormatError(f"{where}: must be an object, got {type(bit).__name__}")
        unknown = sorted(set(bit) - BIT_KEYS)
        if unknown:
            raise LibraryFormatError(f"{where}: unknown key {unknown[0]!r}")
        text = bit.get("text")
        if not isinstance(text, str):
            raise LibraryFormatError(f"{where}.text: must be a string, got {text!r:.40}")
        token_count = bit.get("token_count")
        if not isinstance(token_count, int) or isinstance(token_count, bool) or not 0 <= token_count <= MAX_TOKEN_COUNT:
            raise LibraryFormatError(
                f"{where}.token_count: must be an integer from 0 to {MAX_TOKEN_COUNT}, got {token_count!r:.40}")
        info = _parse_info(bit.get("info"), where)
        try:
            vector = decode_embedding(bit.get("embedding"))
        except ValueError as problem:
            raise LibraryFormatError(f"{where}.embedding: {problem}") from None
        if expected_dimension is None:
            expected_dimension = len(vector)
        if matrix is None:
            matrix = np.empty((len(bits), expected_dimension), dtype="<f4")
        if len(vector) != expected_dimension:
            raise LibraryFormatError(
                f"{where}.embedding: has {len(vector)} dimensions, expected {expected_dimension} for {model}"
            )
        if not np.isfinite(vector).all():
            raise LibraryFormatError(f"{where}.embedding: contains NaN or infinity")
        if np.abs(vector).max() > MAX_EMBEDDING_MAGNITUDE:
            raise LibraryFormatError(
                f"{where}.embedding: has a value of magnitude {np.abs(vector).max():.3g}; "
                f"values must be at most {MAX_EMBEDDING_MAGNITUDE:g} (dot products would overflow)")
        tag = folder_tag if folder_tag is not None else bit.get("access_tag")
        if tag is not None and (not isinstance(tag, str) or not tag):
            raise LibraryFormatError(f"{where}.access_tag: must be a non-empty string, got {tag!r}")
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


def _parse_info(info: Any, where: str) -> dict[str, str]:
    """`url` is required; other keys (image_url, title, description, ...) are optional strings."""
    if not isinstance(info, dict):
        raise LibraryFormatError(f"{where}.info: must be an object with a url, got {info!r:.40}")
    url = info.get("url")
    if not isinstance(url, str) or not url.strip():
        raise LibraryFormatError(f"{where}.info.url: must be a non-empty string, got {url!r:.40}")
    for key, value in info.items():
        if value is not None and not isinstance(value, str):
            raise LibraryFormatError(f"{where}.info.{key}: must be a string, got {value!r:.40}")
    # Published files carry `null` for absent optional fields; absent is what clients expect.
    return {key: value for key, value in info.items() if value is not None}
