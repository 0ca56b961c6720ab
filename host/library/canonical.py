"""A bit's canonical id: the hex SHA-256 of `url.strip() + "\\n" + text.strip()`, so that the same
passage is the same bit whichever file or importer it came from (SPEC §2).

Reading a library computes one for every bit, a block at a time (`canonical_digests`): in C with
the CPU's SHA instructions where the package was built with a compiler on an x86-64 CPU that has
them (host/library/_canonical.c), otherwise with hashlib; the same digests either way. Callers
read `compiled` at each call, so tests run both ways.
"""

from __future__ import annotations

import hashlib

try:
    import host.library._canonical as compiled
except ImportError:  # no C compiler, not x86-64, or a CPU without SHA instructions
    compiled = None  # type: ignore[assignment]

BUILT = compiled is not None
__all__ = ["BUILT", "canonical_digest", "canonical_digests", "canonical_id", "compiled"]


def canonical_id(url: str, text: str) -> str:
    """Hex SHA-256 of `url.strip() + "\\n" + text.strip()`: the same passage is the same bit."""
    return canonical_digest(url, text).hex()


def canonical_digest(url: str, text: str) -> bytes:
    """`canonical_id` as its 32 raw bytes."""
    return hashlib.sha256(f"{url.strip()}\n{text.strip()}".encode()).digest()


def canonical_digests(urls: list[str], texts: list[str]) -> list[bytes]:
    """`canonical_digest` of each (url, text) pair; UnicodeEncodeError where one cannot be UTF-8
    (a lone surrogate), as `str.encode` raises."""
    if compiled is not None:
        return compiled.canonical_digests(urls, texts)
    return [canonical_digest(url, text) for url, text in zip(urls, texts, strict=True)]
