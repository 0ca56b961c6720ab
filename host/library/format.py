"""The Polymath library file format (SPEC §2): a whole file checked, parsed, or its problems listed.

The top level is checked here (version, model, sort, details, omit) and the bits handed to
host/library/bit_checks.py block by block. Beside it: `problems` (one line each), `version_0`
(the upgrade), `omit`, `embeddings` (base64 float32), `json_text` (JSON decoded safely).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from host.library.bit_checks import BLOCK, BitBlock, BitChecker
from host.library.language import DEFAULT_LANGUAGE, LANGUAGES
from host.library.omit import Omit, parse_omit
from host.library.problems import LibraryFormatError, Problems
from host.library.version_0 import upgrade_version_0

FORMAT_VERSION = 1
SORT_TYPES = ("any", "similarity", "manual", "random")


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
    language: str = DEFAULT_LANGUAGE  # the keyword analyzer's (host/keywords/analyzer.py)

    @property
    def dimension(self) -> int:
        return int(self.embeddings.shape[1])


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
    language: str = DEFAULT_LANGUAGE


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
            language=header.language,
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
    data, model, sort, details, language = checked
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
    return LibraryHeader(model, details, sort, checker.dimension, checker.read, checker.dropped, language)


def check_top_level(data: Any, problems: Problems) -> tuple[dict[str, Any], str, str, dict[str, Any], str] | None:
    """Every check above the bits: (the data, version 0 upgraded; model; sort; details; the keyword
    analyzer's language), or None when the data cannot hold bits at all. `bits` itself is left to
    the caller."""
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
    language = data.get("language", DEFAULT_LANGUAGE)
    if language not in LANGUAGES:
        problems.report(f"language: expected one of {', '.join(LANGUAGES)}, got {language!r:.40}")
        language = DEFAULT_LANGUAGE
    return data, model, sort, details, language
