"""Ranking (SPEC §3): one matrix-vector product, hidden rows masked, the budget rule applied.

Everything here takes arrays and returns arrays: no HTTP, no files, no JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from host.catalog import ModelIndex

CountType = Literal["token", "bit"]
FIRST_GUESS_FOR_TOKENS = 64  # candidates taken before the token budget is known to be filled
GROWTH = 4


@dataclass(frozen=True)
class Selection:
    """The returned rows in order, with their similarities."""

    rows: np.ndarray  # global rows of the ModelIndex, best first
    scores: np.ndarray  # float32 dot products, same order
    first_bit_cut_to: int | None  # token budget the first bit was cut to, when it overflowed alone
    restricted: int  # bits held back from this caller (computed only when asked)


def similarities(index: ModelIndex, query: np.ndarray) -> np.ndarray:
    """Dot product of `query` with every row: the only full pass over the matrix."""
    if len(index.libraries) == 1:
        return index.libraries[0].embeddings @ query
    return np.concatenate([library.embeddings @ query for library in index.libraries])


def apply_budget(token_counts: np.ndarray, count: int, count_type: CountType) -> tuple[int, int | None]:
    """How many of the ranked bits fit, and the budget the first one is cut to if it alone overflows.

    `token`: bits are added while the running sum stays <= count; the first bit that would
    overflow ends the list (no skipping ahead).
    """
    if count_type == "bit":
        return min(count, len(token_counts)), None
    fitting = int(np.searchsorted(np.cumsum(token_counts), count, side="right"))
    if fitting == 0 and len(token_counts):
        return 1, count
    return fitting, None


def best_rows(scores: np.ndarray, k: int) -> np.ndarray:
    """The rows of the k highest scores (and any tied with the k-th), best first, ties by row."""
    if k >= len(scores):
        candidates = np.flatnonzero(scores > -np.inf)
    else:
        threshold = np.partition(scores, len(scores) - k)[len(scores) - k]
        candidates = np.flatnonzero(scores >= threshold)
    return candidates[np.lexsort((candidates, -scores[candidates]))]


def select(
    scores: np.ndarray, token_counts: np.ndarray, visible: int, count: int, count_type: CountType
) -> tuple[np.ndarray, int | None]:
    """Rows (best first) that fill the budget; hidden rows carry a score of -inf."""
    k = min(visible, count if count_type == "bit" else FIRST_GUESS_FOR_TOKENS)
    while True:
        rows = best_rows(scores, k) if k else np.zeros(0, dtype=np.int64)
        taken, cut_to = apply_budget(token_counts[rows], count, count_type)
        budget_full = taken < len(rows) or (count_type == "bit" and taken >= count)
        if budget_full or k >= visible:
            return rows[:taken], cut_to
        k = min(visible, k * GROWTH)


def rank(
    index: ModelIndex,
    query: np.ndarray,
    *,
    granted: frozenset[str],
    count: int,
    count_type: CountType,
    count_restricted: bool = False,
) -> Selection:
    """Rank the bits `granted` may see against `query` and fill the budget.

    Bits the caller may not see are set to -inf before selection, so they never take a place,
    a token or a tie. With `count_restricted`, the budget is filled a second time as if every
    tag were granted, to tell how many bits were held back.
    """
    raw = similarities(index, query)
    mask = index.visible_rows(granted)
    scores = raw if mask is None else np.where(mask, raw, np.float32(-np.inf))
    visible = index.bit_count if mask is None else int(np.count_nonzero(mask))
    rows, cut_to = select(scores, index.token_counts, visible, count, count_type)
    restricted = 0
    if count_restricted and mask is not None:
        restricted = _held_back(index, raw, granted, count, count_type)
    return Selection(rows=rows, scores=scores[rows], first_bit_cut_to=cut_to, restricted=restricted)


def _held_back(
    index: ModelIndex, raw: np.ndarray, granted: frozenset[str], count: int, count_type: CountType
) -> int:
    everything = index.visible_rows(frozenset(index.tags))
    scores = raw if everything is None else np.where(everything, raw, np.float32(-np.inf))
    visible = index.bit_count if everything is None else int(np.count_nonzero(everything))
    rows, _ = select(scores, index.token_counts, visible, count, count_type)
    allowed = index.visible_rows(granted)
    return int(np.count_nonzero(~allowed[rows])) if allowed is not None else 0


def random_query(dimension: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """A random unit vector: without a query embedding, a random sample of the library."""
    vector = (rng or np.random.default_rng()).standard_normal(dimension).astype(np.float32)
    return vector / np.linalg.norm(vector)
