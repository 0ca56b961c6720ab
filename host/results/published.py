"""A library published back as a version-1 file (SPEC §2), and its strong validator."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from host.catalog.libraries import Library
from host.library.format import FORMAT_VERSION
from host.library.visibility import allowed_tag_ids
from host.results.bits import result_bit

RENDERING = 1  # bumped whenever the same bits would render differently: old ETags must not match


def library_header(library: Library, bit_count: int) -> dict[str, Any]:
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


def visible_digest(library: Library, granted: frozenset[str]) -> str:
    """A digest of what a caller holding `granted` gets as this library's file: a strong validator.

    Public bits alone use the digest made at compile time; with tags, the visible bits are hashed
    in order, which costs one pass over them (the edge keeps the result).
    """
    if library.visible_bit_count(granted) == library.visible_bit_count(frozenset()):
        return hashlib.sha256(f"{RENDERING}:{library.public_digest}".encode()).hexdigest()
    segment = library.segment
    digest = hashlib.sha256(f"{RENDERING}:{library.embedding_model}:{library.details.get('message')!r}".encode())
    for row in visible_in_file_order(library, granted).tolist():
        start, end = segment.record_offsets[row], segment.record_offsets[row + 1]
        digest.update(segment.ids[row].tobytes() + segment.token_counts[row].tobytes())
        digest.update(segment.embeddings[row].tobytes() + segment.records[start:end].tobytes())
    return digest.hexdigest()


def publish_library(library: Library, granted: frozenset[str]) -> dict[str, Any]:
    """A library published back as a version-1 file, holding only what `granted` may see."""
    bits = [result_bit(library.segment, row) for row in visible_in_file_order(library, granted).tolist()]
    return {**library_header(library, len(bits)), "bits": bits}


def visible_in_file_order(library: Library, granted: frozenset[str]) -> np.ndarray:
    """The stored rows of its segment that `granted` may see, in the order of the library file (a
    clustered segment is stored in another order; its published file and digest are not)."""
    rows = library.rows()
    allowed = allowed_tag_ids(library.segment.tags, granted)
    visible: np.ndarray = rows[np.isin(library.segment.tag_ids[rows], allowed)]
    return visible
