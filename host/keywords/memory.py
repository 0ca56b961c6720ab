"""Keyword postings built and used in memory: libraries made without a compiled folder (tests, and
libraries opened from records rather than compiled)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from host.constraints.word_index import TOKENIZE_CHUNK, WordIndexBuilder
from host.keywords.index import KeywordIndex, open_keyword_index
from host.keywords.postings import FieldWords, build_postings
from host.library.language import DEFAULT_LANGUAGE


def keyword_index_in_memory(texts: Sequence[str], titles: Sequence[str], tag_ids: np.ndarray | None = None,
                            language: str = DEFAULT_LANGUAGE) -> KeywordIndex:
    """The keyword index of rows of these texts and titles (`tag_ids`: each row's tag, default public)."""
    fields = []
    for strings in (texts, titles):
        builder = WordIndexBuilder()
        for start in range(0, len(strings), TOKENIZE_CHUNK):
            builder.add(strings[start : start + TOKENIZE_CHUNK])
        fields.append(FieldWords(*builder.numbered()))
    tags = np.zeros(len(texts), dtype=np.uint16) if tag_ids is None else np.asarray(tag_ids, dtype=np.uint16)
    arrays = build_postings(fields, tags, int(tags.max()) + 1 if len(tags) else 1, language)
    return open_keyword_index(arrays.__getitem__, len(texts), language)
