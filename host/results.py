"""A Selection turned into the version-1 library a client reads (SPEC §3)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from host.catalog import ModelIndex
from host.engine import Selection
from host.library_format import FORMAT_VERSION, Omit, encode_embedding

RESTRICTED_PREFIX = "Restricted results were omitted. "
_WORD = re.compile(r"\S+")


def cut_text_to_tokens(text: str, token_count: int, budget: int) -> str:
    """Keep the share of whole words that `budget` is of `token_count`.

    The library only tells us how many tokens a bit has, not where they fall, so we keep the
    same proportion of words: a cut by tokens on average, never a cut inside a word.
    """
    if token_count <= budget:
        return text
    words = list(_WORD.finditer(text))
    keep = len(words) * budget // token_count
    return text[: words[keep - 1].end()] if keep else ""


def build_result(
    index: ModelIndex,
    selection: Selection,
    omit: Omit,
    *,
    binary_embeddings: bool = False,
    restricted_count: bool = False,
    restricted_message: str = "",
) -> dict[str, Any]:
    """The result library. `binary_embeddings` puts raw float32 bytes (for msgpack) in place of base64."""
    bits = [] if omit.everything else _bits(index, selection, omit, binary_embeddings)
    details: dict[str, Any] = {"counts": {"bits": len(selection.rows)}}
    if restricted_count:
        details["counts"]["restricted"] = selection.restricted
    if restricted_message and selection.restricted:
        details["message"] = RESTRICTED_PREFIX + restricted_message
    return {
        "version": FORMAT_VERSION,
        "embedding_model": index.model,
        "omit": omit.to_wire(),
        "sort": "similarity",
        "details": details,
        "bits": bits,
    }


def _bits(index: ModelIndex, selection: Selection, omit: Omit, binary: bool) -> list[dict[str, Any]]:
    bits = []
    for position, (row, score) in enumerate(zip(selection.rows.tolist(), selection.scores.tolist())):
        library, local = index.locate(row)
        record = library.record(local)
        token_count = int(library.token_counts[local])
        text = record["text"]
        if position == 0 and selection.first_bit_cut_to is not None:
            text = cut_text_to_tokens(text, token_count, selection.first_bit_cut_to)
            token_count = selection.first_bit_cut_to
        bit: dict[str, Any] = {"id": library.bit_id(local)}  # stable: clients compare bits by it
        if "text" not in omit:
            bit["text"] = text
        if "embedding" not in omit:
            vector = np.asarray(library.embeddings[local], dtype="<f4")
            bit["embedding"] = vector.tobytes() if binary else encode_embedding(vector)
        if "token_count" not in omit:
            bit["token_count"] = token_count
        if "similarity" not in omit:
            bit["similarity"] = score
        if "info" not in omit:
            bit["info"] = record["info"]
        bits.append(bit)
    return bits
