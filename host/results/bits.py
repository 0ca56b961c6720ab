"""A compiled row as the bit clients read (SPEC §2): the one place a bit's JSON is built.

Query results, library files served as static assets and the page all use `result_bit`.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from host.catalog.model_index import ModelIndex
from host.library.embeddings import encode_embedding
from host.library.omit import Omit, parse_omit
from host.search.engine import Selection
from host.store.compiled import Segment, decode_record

OMIT_NOTHING = parse_omit("")
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
    segment: Segment,
    row: int,
    omit: Omit = OMIT_NOTHING,
    *,
    similarity: float | None = None,
    score: float | None = None,
    cut_to_tokens: int | None = None,
    binary_embedding: bool = False,
    record: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One bit as clients read it. It carries its canonical `id` (clients compare bits by it) and
    never its `access_tag`. `score` is the rank score of an answer not ranked by similarity (keyword
    or hybrid): without one, the similarity is the rank. `cut_to_tokens` cuts the text to that budget (an overflowing first
    bit); `binary_embedding` gives raw float32 bytes (for msgpack) in place of base64. `record` is
    the row's record when the caller has read it already (`selection_bits` reads them together)."""
    if record is None:
        record = segment.record(row)
    token_count = int(segment.token_counts[row])
    text = record["text"]
    if cut_to_tokens is not None:
        text = cut_text_to_tokens(text, token_count, cut_to_tokens)
        token_count = cut_to_tokens
    bit: dict[str, Any] = {"id": segment.bit_id(row)}
    if "text" not in omit:
        bit["text"] = text
    if "embedding" not in omit:
        vector = np.asarray(segment.embeddings[row], dtype="<f4")
        bit["embedding"] = vector.tobytes() if binary_embedding else encode_embedding(vector)
    if "token_count" not in omit:
        bit["token_count"] = token_count
    if "similarity" not in omit and similarity is not None:
        bit["similarity"] = similarity
    if "score" not in omit and score is not None:
        bit["score"] = score
    if "info" not in omit:
        bit["info"] = record["info"]
    return bit


def selection_bits(index: ModelIndex, selection: Selection, omit: Omit = OMIT_NOTHING, *,
                   binary_embeddings: bool = False, start: int = 0, stop: int | None = None) -> list[dict[str, Any]]:
    """The selected rows (from `start` to `stop`) as bits, best first; the first is cut when it alone
    overflowed the budget."""
    rows = selection.rows[start:stop]
    owners = np.searchsorted(index.offsets, rows, side="right") - 1  # the segment of each row, at once
    local_rows = (rows - index.offsets[owners]).tolist()
    records = _records(index, owners, local_rows)
    similarities = [None] * len(rows) if selection.scores is None else selection.scores[start:stop].tolist()
    scores = [None] * len(rows) if selection.ranks is None else selection.ranks[start:stop].tolist()
    bits = []
    for position, (owner, local, similarity, score, record) in enumerate(
            zip(owners.tolist(), local_rows, similarities, scores, records, strict=True), start):
        cut = selection.first_bit_cut_to if position == 0 else None
        bits.append(result_bit(index.segments[owner], local, omit, similarity=similarity, score=score,
                               cut_to_tokens=cut, binary_embedding=binary_embeddings, record=record))
    return bits


def _records(index: ModelIndex, owners: np.ndarray, local_rows: list[int]) -> list[dict[str, Any]]:
    """The records of these rows (`owners[i]` is the position of row i's segment), read from each
    segment's map through a plain array view: slicing the memmap itself costs ~10x more per row."""
    maps: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    records: list[dict[str, Any]] = []
    for owner, local in zip(owners.tolist(), local_rows, strict=True):
        if owner not in maps:
            segment = index.segments[owner]
            maps[owner] = (np.asarray(segment.records), segment.record_offsets)
        blob, offsets = maps[owner]
        records.append(decode_record(blob[offsets[local] : offsets[local + 1]]))
    return records
