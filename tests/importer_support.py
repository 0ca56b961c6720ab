"""Test support for the importer: a small deterministic embedder and a corpus of real files.

`HashingEmbedder` satisfies the shared `Embedder` protocol (model, dimension, count_tokens,
embed) without a model: each word is hashed to one of 64 dimensions with a sign, the counts are
summed and normalised, so texts sharing rare words are near each other and a query made of a
document's specific words finds it. Its tokens are words (whitespace-separated), so token counts
can be checked by hand. It records every text it embeds, for tests that count re-embedding.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

_WORD = re.compile(r"\w+")


class HashingEmbedder:
    model = "test:hashing-64"
    dimension = 64

    def __init__(self) -> None:
        self.embedded: list[str] = []

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.embedded.extend(texts)
        return np.stack([embed_words(text, self.dimension) for text in texts]).astype(np.float32)


def embed_words(text: str, dimension: int = 64) -> np.ndarray:
    vector = np.zeros(dimension, dtype=np.float64)
    for word in _WORD.findall(text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        vector[digest[0] % dimension] += 1.0 if digest[1] & 1 else -1.0
    norm = np.linalg.norm(vector)
    if norm == 0:
        vector[0], norm = 1.0, 1.0
    return (vector / norm).astype(np.float32)
