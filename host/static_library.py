"""A compiled library published back as a version-1 file, holding only what a caller may see."""

from __future__ import annotations

from typing import Any

import numpy as np

from host.library_format import FORMAT_VERSION, encode_embedding
from host.store import CompiledLibrary


def publish_library(library: CompiledLibrary, granted: frozenset[str]) -> dict[str, Any]:
    rows = np.flatnonzero(library.visible_rows(granted))
    bits = []
    for row in rows.tolist():
        record = library.record(row)
        bits.append({
            "id": library.bit_id(row),
            "text": record["text"],
            "embedding": encode_embedding(library.embeddings[row]),
            "token_count": int(library.token_counts[row]),
            "info": record["info"],
        })
    details: dict[str, Any] = {"counts": {"bits": len(bits)}}
    if isinstance(library.details.get("message"), str):
        details["message"] = library.details["message"]
    return {
        "version": FORMAT_VERSION,
        "embedding_model": library.embedding_model,
        "omit": "",
        "sort": "any",
        "details": details,
        "bits": bits,
    }
