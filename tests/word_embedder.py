"""A small, real embedder for in-process tests of text dialects: bag of words, hashed into a vector.

It implements host.embedders.base.Embedder for librarian's TEST_MODEL (8 dimensions): each word
(host/constraints/words.py's) adds a fixed pseudo-random vector seeded by its SHA-256, and the sum
is normalised. Texts sharing words get near vectors, so questions find the bits that hold them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
from librarian import TEST_MODEL

from host.constraints.words import words


class WordEmbedder:
    model = TEST_MODEL
    dimension = 8

    def count_tokens(self, text: str) -> int:
        return len(words(text))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._one(text) for text in texts]).astype(np.float32) if texts else \
            np.zeros((0, self.dimension), np.float32)

    def _one(self, text: str) -> np.ndarray:
        vector = np.zeros(self.dimension)
        for word in words(text) or [""]:
            seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
            vector += np.random.default_rng(seed).standard_normal(self.dimension)
        return vector / (np.linalg.norm(vector) or 1.0)
