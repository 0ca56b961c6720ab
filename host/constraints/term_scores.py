"""Term similarity of a question to bits, for RAGFlow's hybrid score `w·vector + (1-w)·term`.

RAGFlow's `FulltextQueryer.token_similarity` (rag/nlp/query.py) weighs each query token by an
idf, adds each pair of adjacent query tokens as a bigram, and scores a chunk by the share of
the query's weight that the chunk holds:

    query weights   q[t]   = 0.4·w(t)                   for each query word t
                    q[a b] = 0.6·max(w(a), w(b))        for each adjacent pair of query words
    similarity      Σ q[k] over the k the bit holds  /  Σ q[k] over all k        (in [0, 1])

RAGFlow takes w from corpus-wide dictionaries; this host takes it from the library itself,
RAGFlow's idf form over the bits the caller may see:

    w(t) = log10(10 + (N - df(t) + 0.5) / (df(t) + 0.5))

with N the caller's visible bits of the library and df(t) those holding t. A bit "holds" a word
when its text or title has it, and a bigram when its text or title has the two words in sequence
(RAGFlow matches a chunk's content and title). Words are `words.py`'s; no stop-word list (the
idf already makes common words light). A question without words scores 0 everywhere.

Only visible bits enter N and df, so private bits never change what an anonymous caller's
scores are (tests/test_constraints_term_scores.py checks this property).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from host.constraints.evaluation import phrase_starts
from host.constraints.text_index import TextIndex
from host.constraints.words import words

UNIGRAM_SHARE = 0.4
BIGRAM_SHARE = 0.6
SCORED_FIELDS = ("text", "title")


def _holding(index: TextIndex, sequence: Sequence[str]) -> np.ndarray:
    """Rows whose text or title holds the words in sequence."""
    mask = np.zeros(index.rows, dtype=bool)
    for field in SCORED_FIELDS:
        word_index = index.words[field]
        starts = phrase_starts(word_index, sequence)
        if len(starts):
            mask[starts >> word_index.shift] = True
    return mask


def _pair_among(index: TextIndex, first: str, second: str, candidate: np.ndarray) -> np.ndarray:
    """Rows among `candidate` whose text or title has `first` right before `second`.

    Only the candidates' positions are compared: a pair needs no statistics, so its cost is two
    gathers over the words' positions, not a pass over the library.
    """
    mask = np.zeros(index.rows, dtype=bool)
    for field in SCORED_FIELDS:
        word_index = index.words[field]
        lists = []
        for word in (first, second):
            lo, hi = word_index.term_range(word)
            positions = word_index.positions_of(lo, hi)
            lists.append(positions[candidate[positions >> word_index.shift]])
        starts, follows = lists
        starts = starts[(starts & word_index.low_mask) < word_index.low_mask]  # a next slot in the same row
        at = np.searchsorted(follows, starts + 1)
        hit = at < len(follows)
        hit[hit] = follows[at[hit]] == starts[hit] + 1
        mask[starts[hit] >> word_index.shift] = True
    return mask


def idf(documents: int, frequency: int) -> float:
    """RAGFlow's idf form: log10(10 + (N - df + 0.5) / (df + 0.5)), so always >= 1."""
    return math.log10(10 + (documents - frequency + 0.5) / (frequency + 0.5))


def library_term_similarity(
    question_words: Sequence[str], index: TextIndex, rows: np.ndarray, visible: np.ndarray | None
) -> np.ndarray:
    """Term similarity of the question to `rows` of one library, from its visible bits' statistics.

    `visible` is the library's bool mask of bits the caller may see (None: all of them).
    Returns float64 in [0, 1], one per row of `rows`.
    """
    scores = np.zeros(len(rows), dtype=np.float64)
    if not question_words or not len(rows):
        return scores
    documents = index.rows if visible is None else int(np.count_nonzero(visible))
    candidate = np.zeros(index.rows, dtype=bool)
    candidate[rows] = True
    held: dict[tuple[str, ...], np.ndarray] = {}
    weight: dict[str, float] = {}
    for word in dict.fromkeys(question_words):
        mask = _holding(index, (word,))
        frequency = int(np.count_nonzero(mask if visible is None else mask & visible))
        weight[word] = idf(documents, frequency)
        held[(word,)] = mask[rows]
    shares: list[tuple[tuple[str, ...], float]] = [((word,), UNIGRAM_SHARE * weight[word]) for word in question_words]
    for left, right in itertools.pairwise(question_words):
        pair = (left, right)
        if pair not in held:
            held[pair] = _pair_among(index, left, right, candidate)[rows]
        shares.append((pair, BIGRAM_SHARE * max(weight[left], weight[right])))
    total = 0.0
    for key, share in shares:  # one vector operation per query word or pair, never per bit
        scores += share * held[key]
        total += share
    return scores / total


def term_similarity(
    question: str,
    libraries: Sequence[TextIndex],
    offsets: np.ndarray,
    rows: np.ndarray,
    visible: np.ndarray | None,
) -> np.ndarray:
    """Term similarity of `question` to global `rows` of libraries laid end to end.

    `offsets` are where each library's rows start (plus the total), as ModelIndex.offsets;
    `visible` is the caller's mask over all rows (ModelIndex.visible_rows), None for all.
    Statistics are each library's own, over its visible bits.
    """
    question_words = words(question)
    scores = np.zeros(len(rows), dtype=np.float64)
    owner = np.searchsorted(offsets, rows, side="right") - 1
    for position, index in enumerate(libraries):
        mine = np.flatnonzero(owner == position)
        if not len(mine):
            continue
        start, stop = int(offsets[position]), int(offsets[position + 1])
        local_visible = None if visible is None else visible[start:stop]
        scores[mine] = library_term_similarity(question_words, index, rows[mine] - start, local_visible)
    return scores


def hybrid_similarity(vector: np.ndarray, term: np.ndarray, vector_weight: float) -> np.ndarray:
    """RAGFlow's `w·vector + (1-w)·term` (vector_similarity_weight is w)."""
    return vector_weight * np.asarray(vector, dtype=np.float64) + (1 - vector_weight) * term
