"""BM25 the slow, obvious way: every visible bit analyzed and scored one at a time, in plain Python.

The reference the keyword tests compare the compiled postings and their block-max search with. It
uses only the analyzer (what a term is) and the formula, summing each bit's parts in the terms'
sorted order, as the host does: so its scores equal the host's exactly, not just nearly.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from host.keywords.analyzer import analyzer

K1, B = 1.2, 0.75


def bit_terms(text: str, title: str, language: str = "english") -> Counter[str]:
    """A bit's terms and how often it holds each: its text and title as one field."""
    words = analyzer(language)
    return Counter(words.terms(text) + words.terms(title))


def bm25_scores(texts: Sequence[str], titles: Sequence[str], visible: Sequence[bool], question: str,
                language: str = "english") -> dict[int, float]:
    """The BM25 score of every visible bit holding a term of `question`, by row, with statistics
    (N, df, average length) over the visible bits alone."""
    bits = [bit_terms(text, title, language) for text, title in zip(texts, titles)]
    seen = [row for row in range(len(bits)) if visible[row]]
    documents = len(seen)
    average = sum(sum(bits[row].values()) for row in seen) / documents if documents else 1.0
    said = Counter(analyzer(language).terms(question))
    frequency = {term: sum(1 for row in seen if term in bits[row]) for term in said}
    weights = {term: count * math.log(1 + (documents - frequency[term] + 0.5) / (frequency[term] + 0.5))
               for term, count in said.items() if frequency[term]}
    scores = {}
    for row in seen:
        length = sum(bits[row].values())
        total, held = 0.0, False
        for term in sorted(weights):
            f = float(bits[row].get(term, 0))
            if f:
                held = True
                total += weights[term] * f / (f + K1 * (1.0 - B + B * float(length) / average))
        if held:
            scores[row] = total
    return scores


def query_norm(texts: Sequence[str], titles: Sequence[str], visible: Sequence[bool], question: str,
               language: str = "english") -> float:
    """|w|: the Euclidean norm of the question's weights over every term it says, a term no visible
    bit holds weighing as one held by none (df 0)."""
    bits = [bit_terms(text, title, language) for text, title in zip(texts, titles)]
    seen = [row for row in range(len(bits)) if visible[row]]
    said = Counter(analyzer(language).terms(question))
    squares = 0.0
    for term, count in said.items():
        df = sum(1 for row in seen if term in bits[row])
        squares += (count * math.log(1 + (len(seen) - df + 0.5) / (df + 0.5))) ** 2
    return math.sqrt(squares)


def keyword_scores(texts: Sequence[str], titles: Sequence[str], visible: Sequence[bool], question: str,
                   language: str = "english") -> dict[int, float]:
    """What the doors show for `bm25_scores`: min(1, BM25 / |w|), by row."""
    norm = query_norm(texts, titles, visible, question, language)
    return {row: min(1.0, score / norm) for row, score in bm25_scores(texts, titles, visible, question, language).items()}


def ranked(scores: dict[int, float], keys: Sequence[int] | None = None) -> list[tuple[int, float]]:
    """Rows best first; equal scores in file order (`keys[row]`, else the row)."""
    return sorted(scores.items(), key=lambda item: (-item[1], item[0] if keys is None else keys[item[0]]))
