"""What a keyword is: the terms a text is indexed and asked by.

A term is a word of host/constraints/words.py (Unicode word characters, case-folded, NFKC), not a
stop word, stemmed by the Snowball stemmer of the analyzer's language (PyStemmer). English, the
default, drops NLTK's 179 English stop words (bm25s's `english_plus`: pronouns, auxiliaries, question
words, "isn", "don") and every one-letter word that is not a digit: the house's words split at
apostrophes, so "isn't" and "Noah's" leave a lone "t" and "s", and lone initials carry as little.
Measured on CISI and CACM (docs/quality.md): keyword nDCG@10 0.393 / 0.505 against 0.378 / 0.491
with Lucene's 33 (Elasticsearch's `_english_`, bm25s's `en`); a question's "what", "how" and "which"
no longer match a passage that says them, so a question about nothing here scores lower too.
Dropping one-letter words gave 0.377 / 0.491 where keeping them gave 0.370 / 0.483; keeping single
digits ("Genesis 5") costs nothing there.

Another Snowball language stems in that language and drops no word (no stop list ships with
PyStemmer); `none` keeps every word as it is. Index and query use the same analyzer, always: the
compiled store records its name, and a query is analyzed by each library's own.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence

import Stemmer

from host.constraints.words import words
from host.library.language import DEFAULT_LANGUAGE, LANGUAGES, NO_LANGUAGE

# NLTK's English stop words (bm25s's `english_plus`), those of two letters or more and without an
# apostrophe: the house's words split at one ("don't" is "don" and "t"), and one-letter words go anyway.
ENGLISH_STOP_WORDS = frozenset((
    "about", "above", "after", "again", "against", "ain", "all", "am", "an", "and", "any", "are", "aren", "as",
    "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "couldn",
    "did", "didn", "do", "does", "doesn", "doing", "don", "down", "during", "each", "few", "for", "from",
    "further", "had", "hadn", "has", "hasn", "have", "haven", "having", "he", "her", "here", "hers", "herself",
    "him", "himself", "his", "how", "if", "in", "into", "is", "isn", "it", "its", "itself", "just", "ll", "ma",
    "me", "mightn", "more", "most", "mustn", "my", "myself", "needn", "no", "nor", "not", "now", "of", "off",
    "on", "once", "only", "or", "other", "our", "ours", "ourselves", "out", "over", "own", "re", "same", "shan",
    "she", "should", "shouldn", "so", "some", "such", "than", "that", "the", "their", "theirs", "them",
    "themselves", "then", "there", "these", "they", "this", "those", "through", "to", "too", "under", "until",
    "up", "ve", "very", "was", "wasn", "we", "were", "weren", "what", "when", "where", "which", "while", "who",
    "whom", "why", "will", "with", "won", "wouldn", "you", "your", "yours", "yourself", "yourselves",
))


class Analyzer:
    """Text to terms for one language (see the module docstring). Cheap to share between threads:
    PyStemmer's stemmer is not thread-safe, so each call takes a stemmer of its own thread."""

    def __init__(self, language: str = DEFAULT_LANGUAGE) -> None:
        if language not in LANGUAGES:
            raise ValueError(f"unknown analyzer language {language!r:.40}; known: {', '.join(LANGUAGES)}")
        self.language = language
        self.english = language == DEFAULT_LANGUAGE

    def kept(self, word: str) -> bool:
        """Whether a (folded) word is a term at all: not a stop word."""
        if self.english:
            return word not in ENGLISH_STOP_WORDS and (len(word) > 1 or word.isdigit())
        return True

    def stems(self, kept_words: Sequence[str]) -> list[str]:
        """The terms of words already kept, in order."""
        if self.language == NO_LANGUAGE:
            return list(kept_words)
        stemmed: list[str] = _stemmer(self.language).stemWords(kept_words)
        return stemmed

    def terms(self, text: str) -> list[str]:
        """The terms of `text`, in order, repeats kept (a query weighs a term by how often it says it)."""
        return self.stems([word for word in words(text) if self.kept(word)])

    def vocabulary_terms(self, vocabulary: Sequence[str]) -> list[str | None]:
        """The term of each distinct word of an index (None for a stop word): each word is stemmed
        once, however often the library says it. A word of digits is its own term (no stemmer
        changes one): a library of a million numbered bits stems none of its million numbers."""
        terms: list[str | None] = [word if word.isdigit() else None for word in vocabulary]
        wordy = [at for at, word in enumerate(vocabulary) if terms[at] is None and self.kept(word)]
        for at, term in zip(wordy, self.stems([vocabulary[at] for at in wordy])):
            terms[at] = term
        return terms


@functools.cache
def analyzer(language: str = DEFAULT_LANGUAGE) -> Analyzer:
    """The shared analyzer of `language`."""
    return Analyzer(language)


_local = threading.local()


def _stemmer(language: str) -> Stemmer.Stemmer:
    """The calling thread's stemmer of `language`."""
    stemmers: dict[str, Stemmer.Stemmer] = _local.__dict__.setdefault("stemmers", {})
    if language not in stemmers:
        stemmers[language] = Stemmer.Stemmer(language)
    return stemmers[language]
