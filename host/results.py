"""Library rows turned into the version-1 libraries clients read (SPEC §2, §3).

`result_bit` is the one place a bit's JSON is built from a compiled row: query results, library
files served as static assets and the page all use it.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import numpy as np

from host.engine import Selection
from host.index import ModelIndex
from host.library_format import FORMAT_VERSION, Omit, encode_embedding, parse_omit
from host.store import CompiledLibrary

RESTRICTED_PREFIX = "Restricted results were omitted. "
RENDERING = 1  # bumped whenever the same bits would render differently: old ETags must not match
OMIT_NOTHING = parse_omit("")
BYTES_AROUND_BITS = 400  # version, model, omit, sort, details
BYTES_PER_BIT = 200  # keys, punctuation, the id, similarity and token count
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


def result_bit(
    library: CompiledLibrary,
    row: int,
    omit: Omit = OMIT_NOTHING,
    *,
    similarity: float | None = None,
    cut_to_tokens: int | None = None,
    binary_embedding: bool = False,
) -> dict[str, Any]:
    """One bit as clients read it. It carries its canonical `id` (clients compare bits by it) and
    never its `access_tag`. `cut_to_tokens` cuts the text to that budget (an overflowing first
    bit); `binary_embedding` gives raw float32 bytes (for msgpack) in place of base64."""
    record = library.record(row)
    token_count = int(library.token_counts[row])
    text = record["text"]
    if cut_to_tokens is not None:
        text = cut_text_to_tokens(text, token_count, cut_to_tokens)
        token_count = cut_to_tokens
    bit: dict[str, Any] = {"id": library.bit_id(row)}
    if "text" not in omit:
        bit["text"] = text
    if "embedding" not in omit:
        vector = np.asarray(library.embeddings[row], dtype="<f4")
        bit["embedding"] = vector.tobytes() if binary_embedding else encode_embedding(vector)
    if "token_count" not in omit:
        bit["token_count"] = token_count
    if "similarity" not in omit and similarity is not None:
        bit["similarity"] = similarity
    if "info" not in omit:
        bit["info"] = record["info"]
    return bit


def selection_bits(index: ModelIndex, selection: Selection, omit: Omit = OMIT_NOTHING, *,
                   binary_embeddings: bool = False, start: int = 0, stop: int | None = None) -> list[dict[str, Any]]:
    """The selected rows (from `start` to `stop`) as bits, best first; the first is cut when it alone
    overflowed the budget."""
    rows, scores = selection.rows[start:stop].tolist(), selection.scores[start:stop].tolist()
    bits = []
    for position, (row, score) in enumerate(zip(rows, scores, strict=True), start):
        library, local = index.locate(row)
        cut = selection.first_bit_cut_to if position == 0 else None
        bits.append(result_bit(library, local, omit, similarity=score, cut_to_tokens=cut,
                               binary_embedding=binary_embeddings))
    return bits


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
    return {
        "version": FORMAT_VERSION,
        "embedding_model": index.model,
        "omit": omit.to_wire(),
        "sort": "similarity",
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
        for position, library in enumerate(index.libraries):
            start, stop = index.offsets[position], index.offsets[position + 1]
            local = selection.rows[(selection.rows >= start) & (selection.rows < stop)] - start
            records += int((library.record_offsets[local + 1] - library.record_offsets[local]).sum())
    return BYTES_AROUND_BITS + len(selection.rows) * per_bit + records


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
