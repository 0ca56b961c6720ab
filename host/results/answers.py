"""A query's selection as the result library clients read (SPEC §3), and its size before rendering."""

from __future__ import annotations

from typing import Any

import numpy as np

from host.catalog.model_index import ModelIndex
from host.library.format import FORMAT_VERSION
from host.library.omit import Omit
from host.results.bits import selection_bits
from host.search.engine import Selection

RESTRICTED_PREFIX = "Restricted results were omitted. "
BYTES_AROUND_BITS = 400  # version, model, omit, sort, details
BYTES_PER_BIT = 200  # keys, punctuation, the id, similarity and token count


def build_result(
    index: ModelIndex,
    selection: Selection,
    omit: Omit,
    *,
    binary_embeddings: bool = False,
    restricted_count: bool = False,
    restricted_message: str = "",
) -> dict[str, Any]:
    """The result library of a query (SPEC §3)."""
    bits = [] if omit.everything else selection_bits(index, selection, omit, binary_embeddings=binary_embeddings)
    return {**result_header(index, selection, omit, restricted_count=restricted_count,
                            restricted_message=restricted_message), "bits": bits}


def result_header(index: ModelIndex, selection: Selection, omit: Omit, *, restricted_count: bool = False,
                  restricted_message: str = "") -> dict[str, Any]:
    """The result library without its bits (`bits` last and empty: the answer can be streamed)."""
    details: dict[str, Any] = {"counts": {"bits": len(selection.rows)}}
    if restricted_count:
        details["counts"]["restricted"] = selection.restricted
    if restricted_message and selection.restricted:
        details["message"] = RESTRICTED_PREFIX + restricted_message
    if selection.best_score is not None:
        # The best bit's rank score, kept by a threshold or not: "how sure" without a second call.
        details["best_score"] = selection.best_score
    if selection.notes:
        details["notes"] = list(selection.notes)
    return {
        "version": FORMAT_VERSION,
        "embedding_model": index.model,
        "omit": omit.to_wire(),
        # Ranked by keywords (alone or fused), the bits are in the host's order, not by similarity: a
        # client that sorted them by similarity again would undo the ranking.
        "sort": "similarity" if selection.ranks is None else "manual",
        "details": details,
        "bits": [],
    }


def estimated_answer_bytes(index: ModelIndex, selection: Selection, omit: Omit, *, binary_embeddings: bool) -> int:
    """About how many bytes `build_result` would render to, known before rendering any of it.

    A bit's record (text and info) takes about as many bytes in JSON as in its stored msgpack form;
    its embedding takes 4 bytes a value, 4/3 of that in base64.
    """
    if omit.everything or not len(selection.rows):
        return BYTES_AROUND_BITS
    per_bit = BYTES_PER_BIT
    if "embedding" not in omit:
        per_bit += index.dimension * 4 if binary_embeddings else -(-index.dimension * 4 // 3) * 4
    records = 0
    if "text" not in omit or "info" not in omit:
        rows = selection.rows
        if len(index.segments) == 1:
            parts = [(index.segments[0], rows)]
        else:
            owners = np.searchsorted(index.offsets, rows, side="right") - 1
            parts = [(index.segments[position], rows[owners == position] - index.offsets[position])
                     for position in np.unique(owners).tolist()]
        for segment, local in parts:
            records += int((segment.record_offsets[local + 1] - segment.record_offsets[local]).sum())
    return BYTES_AROUND_BITS + len(selection.rows) * per_bit + records
