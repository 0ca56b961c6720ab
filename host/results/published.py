"""A compiled library published back as a version-1 file (SPEC §2), and its strong validator."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from host.library.format import FORMAT_VERSION
from host.results.bits import result_bit
from host.store.compiled import CompiledLibrary

RENDERING = 1  # bumped whenever the same bits would render differently: old ETags must not match


def library_header(library: CompiledLibrary, bit_count: int) -> dict[str, Any]:
    """A published library without its bits (SPEC §2): `bits` comes last, so the file can be streamed."""
    details: dict[str, Any] = {"counts": {"bits": bit_count}}
    if isinstance(library.details.get("message"), str):
        details["message"] = library.details["message"]
    return {
        "version": FORMAT_VERSION,
        "embedding_model": library.embedding_model,
        "omit": "",
        "sort": "any",
        "details": details,
        "bits": [],
    }


def visible_digest(library: CompiledLibrary, granted: frozenset[str]) -> str:
    """A digest of what a caller holding `granted` gets as this library's file: a strong validator.

    Public bits alone use the digest made at compile time; with tags, the visible bits are hashed
    in order, which costs one pass over them (the edge keeps the result).
    """
    if not any(tag in library.tags for tag in granted):
        return hashlib.sha256(f"{RENDERING}:{library.public_digest}".encode()).hexdigest()
    digest = hashlib.sha256(f"{RENDERING}:{library.embedding_model}:{library.details.get('message')!r}".encode())
    for row in visible_in_file_order(library, granted).tolist():
        start, end = library.record_offsets[row], library.record_offsets[row + 1]
        digest.update(library.ids[row].tobytes() + library.token_counts[row].tobytes())
        digest.update(library.embeddings[row].tobytes() + library.records[start:end].tobytes())
    return digest.hexdigest()


def publish_library(library: CompiledLibrary, granted: frozenset[str]) -> dict[str, Any]:
    """A compiled library published back as a version-1 file, holding only what `granted` may see."""
    bits = [result_bit(library, row) for row in visible_in_file_order(library, granted).tolist()]
    return {**library_header(library, len(bits)), "bits": bits}


def visible_in_file_order(library: CompiledLibrary, granted: frozenset[str]) -> np.ndarray:
    """The stored rows `granted` may see, in the order of the library file (a clustered library is
    stored in another order; its published file and digest are not)."""
    rows = library.rows_in_file_order()
    visible: np.ndarray = rows[library.visible_rows(granted)[rows]]
    return visible
