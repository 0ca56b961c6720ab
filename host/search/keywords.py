"""Keyword ranking over every library of a model: Okapi BM25 with the caller's own statistics.

A query's text is analyzed by each segment's analyzer (host/keywords/analyzer.py); a term the
query says twice weighs twice (as in Lucene and bm25s). The statistics are the caller's:

    N        the bits they may see                      (summed over the tags they may see)
    df(t)    of those, the bits holding t               (likewise: host/keywords/postings.py
    avgdl    those bits' average number of terms          keeps each count per tag)
    idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

so a private bit never moves a public score, and hidden bits are never candidates. A bit that two
libraries both hold counts in each (the host serves it once: the first library's), and so does a
bit of a file replaced or deleted until a merge drops its rows (host/catalog/merging.py), counted
in the tags a caller may see only. What narrows a query (a constraint, a library list) never
changes a score either: it only masks candidates.

At most MOST_TERMS distinct terms are kept, the rarest first (the common ones weigh least), so a
query of ten thousand words costs what one of MOST_TERMS does; the answer says so in a note.

A raw BM25 score grows with the query: it is a sum over its terms. What the doors show is the
keyword score on a 0-1 scale that means the same in every query (`keyword_score`):

    min(1, BM25 / |w|)        |w| = the Euclidean norm of the query's weights, over every term it
                              says (one no visible bit holds weighs as a term held by none: df 0)

BM25 is the dot product of the query's weights w with the bit's saturations s (each below 1),
so BM25 / |w| is how far the bit's keywords reach along the query. A one-word query scores the
word's saturation in the bit (0.45 for once in a bit of average length, 0.71 for three times); a
long question's best bit holds a few of its words strongly and scores as much. Dividing by the
sum of the weights instead (the bound no bit reaches short of holding every word) shrank a
question's best score with its length (as n^-0.5 to n^-0.7 on CISI and CACM), so a fixed threshold
kept long questions about nothing and turned away short ones about something. A word the library
does not hold counts with the highest idf: a question about what it does not hold scores low.
Measured in docs/quality.md (scripts/bench_quality.py).
"""

from __future__ import annotations

import math
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from host.catalog.model_index import ModelIndex
from host.keywords.analyzer import analyzer
from host.keywords.index import KeywordIndex
from host.keywords.top import scores_of, top
from host.library.visibility import allowed_tag_ids
from host.search.budget import FIRST_GUESS_FOR_TOKENS, GROWTH, CountType, apply_budget
from host.store.compiled import keywords_of

REMEMBERED_QUERIES = 256  # weighed queries kept (`weigh`)
_WEIGHED: dict[tuple[int, str, frozenset[str]], tuple[weakref.ref[ModelIndex], Weighted]] = {}
MOST_TERMS = 128  # distinct terms of a query: CISI's longest judged query has 134, its median 25
SUBSET_ROWS = 4096  # rows allowed at most for them to be scored one by one rather than found in the postings


@dataclass(frozen=True)
class Weighted:
    """A query's terms in one model, each segment's numbers for them, and the caller's weights."""

    terms: tuple[str, ...]  # distinct, in the order scores are summed (sorted)
    weights: np.ndarray  # float64 per term: idf times how often the query says it
    numbers: tuple[tuple[int | None, ...], ...]  # per segment, each term's number there (None: absent)
    average: float  # the caller's average bit length, in terms
    notes: tuple[str, ...] = ()
    postings: int = 0  # the visible bits holding each term, summed: what a search would read at most
    said: int = 0  # distinct terms the query said, held by a visible bit or not
    norm: float = 0.0  # |w|: the Euclidean norm of the weights of every term said (`keyword_score`)

    @property
    def empty(self) -> bool:
        return not self.terms


def weigh(index: ModelIndex, text: str, granted: frozenset[str]) -> Weighted:
    """The query's terms and weights from the statistics of the bits a caller holding `granted` may see.

    The last few are remembered: `POST /` weighs a query to decide where to answer it (the weights
    tell how much it reads), then the query core weighs it again to answer."""
    key = (id(index), text, granted)
    remembered = _WEIGHED.get(key)
    if remembered is not None and remembered[0]() is index:  # the very index, not a later one at its address
        return remembered[1]
    weighted = _weighed(index, text, granted)
    if len(_WEIGHED) >= REMEMBERED_QUERIES:
        _WEIGHED.clear()  # a plain dict emptied when full: threads may race here, to no harm
    _WEIGHED[key] = (weakref.ref(index), weighted)  # weak: a replaced generation's maps are let go
    return weighted


def _weighed(index: ModelIndex, text: str, granted: frozenset[str]) -> Weighted:
    segments = [keywords_of(segment) for segment in index.segments]
    allowed = [_allowed(keywords, segment.tags, granted) for keywords, segment in zip(segments, index.segments)]
    visible_rows = sum(int(keywords.tag_rows[tags].sum()) for keywords, tags in zip(segments, allowed))
    visible_length = sum(int(keywords.tag_lengths[tags].sum()) for keywords, tags in zip(segments, allowed))
    said: Counter[str] = Counter()
    for language in dict.fromkeys(keywords.language for keywords in segments):
        said |= Counter(analyzer(language).terms(text))  # a term two languages agree on is said once
    numbers = {term: tuple(keywords.find(term) for keywords in segments) for term in said}
    frequency = {term: sum(keywords.rows_holding(number, tags) for keywords, tags, number
                           in zip(segments, allowed, numbers[term]) if number is not None) for term in said}
    held = [term for term in said if frequency[term]]
    notes: list[str] = []
    if len(held) > MOST_TERMS:
        held = sorted(held, key=lambda term: (frequency[term], term))[:MOST_TERMS]
        notes.append(f"the query has {len(said):,} distinct keywords; the {MOST_TERMS} rarest were used")
    terms = tuple(sorted(held))
    weights = np.array([said[term] * idf(visible_rows, frequency[term]) for term in terms], dtype=np.float64)
    average = visible_length / visible_rows if visible_rows else 1.0
    per_segment = tuple(tuple(numbers[term][position] for term in terms) for position in range(len(segments)))
    # Every term said, the held ones past MOST_TERMS and the unheld ones too: the query's own size.
    norm = math.sqrt(sum((said[term] * idf(visible_rows, frequency[term])) ** 2 for term in said))
    return Weighted(terms, weights, per_segment, average or 1.0, tuple(notes), sum(frequency[term] for term in terms),
                    len(said), norm)


def keyword_score(weighted: Weighted, bm25: np.ndarray) -> np.ndarray:
    """BM25 scores on the 0-1 scale every door shows: min(1, BM25 / |w|) (see the module docstring)."""
    if weighted.norm <= 0:
        return np.zeros(len(bm25), dtype=np.float64)
    normalized: np.ndarray = np.minimum(1.0, np.asarray(bm25, dtype=np.float64) / weighted.norm)
    return normalized


def idf(documents: int, frequency: int) -> float:
    """BM25's inverse document frequency (Lucene's form: never negative)."""
    return math.log(1 + (documents - frequency + 0.5) / (frequency + 0.5))


def _allowed(keywords: KeywordIndex, tags: tuple[str, ...], granted: frozenset[str]) -> np.ndarray:
    """The tag ids of a segment that a caller may see, among those its postings count."""
    ids = [tag_id for tag_id in allowed_tag_ids(tags, granted) if tag_id < keywords.tag_count]
    return np.array(ids, dtype=np.int64)


def keyword_top(index: ModelIndex, weighted: Weighted, k: int, allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The k best rows (global) by BM25 among those `allowed` (a bool mask over the model's rows;
    None: all), best first, ties in file order, and their scores (float64).

    Where at most SUBSET_ROWS rows are allowed (one small library among ten thousand), those rows are
    scored (`keyword_scores`, the same values), not the postings of the whole model: choosing one
    library costs what a host holding only it would spend."""
    if weighted.empty or k < 1:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    if allowed is not None and np.count_nonzero(allowed) <= SUBSET_ROWS:
        return _best_of(index, weighted, np.flatnonzero(allowed), k)
    found_rows, found_scores = [], []
    for position, segment in enumerate(index.segments):
        numbers = weighted.numbers[position]
        held = [at for at, number in enumerate(numbers) if number is not None]
        if not held:
            continue
        start, stop = int(index.offsets[position]), int(index.offsets[position + 1])
        local_allowed = None if allowed is None else allowed[start:stop]
        terms = [number for number in numbers if number is not None]
        rows, scores = top(keywords_of(segment), terms, weighted.weights[held].tolist(), weighted.average, k,
                           local_allowed)
        found_rows.append(rows + start)
        found_scores.append(scores)
    if not found_rows:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    rows, scores = np.concatenate(found_rows), np.concatenate(found_scores)
    best = np.lexsort((rows if index.tie_keys is None else index.tie_keys[rows], -scores))[:k]
    return rows[best], scores[best]


def _best_of(index: ModelIndex, weighted: Weighted, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """`keyword_top` over a few rows: each scored, those holding a term ranked."""
    scores = keyword_scores(index, weighted, rows)
    holding = scores > 0
    rows, scores = rows[holding], scores[holding]
    best = np.lexsort((rows if index.tie_keys is None else index.tie_keys[rows], -scores))[:k]
    return rows[best], scores[best]


def keyword_scores(index: ModelIndex, weighted: Weighted, rows: Sequence[int] | np.ndarray) -> np.ndarray:
    """The BM25 score of each of `rows` (global; 0 where a row holds no term): the same values
    `keyword_top` gives for them, bit for bit (the parts summed in the terms' order)."""
    rows = np.asarray(rows, dtype=np.int64)
    scores = np.zeros(len(rows), dtype=np.float64)
    if weighted.empty or not len(rows):
        return scores
    owner = np.searchsorted(index.offsets, rows, side="right") - 1
    for position, segment in enumerate(index.segments):
        mine = np.flatnonzero(owner == position)
        if not len(mine):
            continue
        local = rows[mine] - int(index.offsets[position])  # stored rows; the postings' are in file order
        local = local if segment.source_rows is None else segment.source_rows[local]
        numbers = weighted.numbers[position]
        held = [at for at, number in enumerate(numbers) if number is not None]
        terms = [number for number in numbers if number is not None]
        scores[mine] = scores_of(keywords_of(segment), terms, weighted.weights[held].tolist(), weighted.average, local)
    return scores


@dataclass(frozen=True)
class KeywordRanking:
    """Rows best first, their keyword scores (0-1), the first bit's cut, and the best score found
    before any threshold (None: no visible bit holds a term)."""

    rows: np.ndarray
    scores: np.ndarray
    cut_to: int | None
    best: float | None


def rank_keywords(index: ModelIndex, weighted: Weighted, allowed: np.ndarray | None, count: int, count_type: CountType,
                  keep: Callable[[np.ndarray], np.ndarray] | None = None,
                  score_threshold: float | None = None) -> KeywordRanking:
    """The rows that fill the budget by BM25, best first, with their keyword scores (`keyword_score`).

    Only rows holding a term are ranked: a keyword query returns nothing it does not match.
    `keep` (rows -> bool mask) drops rows the caller's other conditions refuse (a similarity
    threshold) before the budget sees them; the list ends at the first score below `score_threshold`.
    """
    k = count if count_type == "bit" else FIRST_GUESS_FOR_TOKENS
    best = None
    while True:
        rows, found = keyword_top(index, weighted, k, allowed)
        scores = keyword_score(weighted, found)  # BM25's order: min(1, x / |w|) never reorders
        if best is None and len(scores):
            best = float(scores[0])
        exhausted = len(rows) < k
        if score_threshold is not None and len(scores) and scores[-1] < score_threshold:
            above = int(np.count_nonzero(scores >= score_threshold))
            rows, scores, exhausted = rows[:above], scores[:above], True
        if keep is not None and len(rows):
            kept = keep(rows)
            rows, scores = rows[kept], scores[kept]
        taken, cut_to = apply_budget(index.token_counts[rows], count, count_type)
        if exhausted or taken < len(rows) or (count_type == "bit" and taken >= count):
            return KeywordRanking(rows[:taken], scores[:taken], cut_to, best)
        k *= GROWTH
