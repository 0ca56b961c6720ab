"""Keyword postings built and used in memory: libraries made without a compiled folder (tests, and
libraries opened from records rather than compiled)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from host.constraints.text_index import text_index_in_memory
from host.keywords.index import KeywordIndex, open_keyword_index
from host.keywords.postings import build_postings, plan_terms
from host.library.language import DEFAULT_LANGUAGE


def keyword_index_in_memory(texts: Sequence[str], titles: Sequence[str], tag_ids: np.ndarray | None = None,
                            language: str = DEFAULT_LANGUAGE) -> KeywordIndex:
    """The keyword index of rows of these texts and titles (`tag_ids`: each row's tag, default public)."""
    words = text_index_in_memory([{"text": text, "info": {"title": title}} for text, title in zip(texts, titles)]).words
    tags = np.zeros(len(texts), dtype=np.uint16) if tag_ids is None else np.asarray(tag_ids, dtype=np.uint16)
    tag_count = int(tags.max()) + 1 if len(tags) else 1
    fields = [words["text"], words["title"]]
    arrays = build_postings(fields, plan_terms([field.vocabulary for field in fields], language), tags, tag_count)
    return open_keyword_index(arrays.__getitem__, len(texts), language)
