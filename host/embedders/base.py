"""The interface every embedder offers: one library model id, its dimension, its tokenizer, `embed`.

An embedder turns texts into vectors of exactly one `embedding_model` (the id string libraries
carry, e.g. "sentence-transformers:all-MiniLM-L6-v2"), normalised as that model's library vectors
are (unit length for every model this package serves). `embed` and `count_tokens` may block (a
model run, an HTTP request): callers on an event loop run them in worker threads (see
`host.embedders.service`). Implementations are safe to call from several threads at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from host.embedders.errors import EmbedderError


@runtime_checkable
class Embedder(Protocol):
    model: str  # the library `embedding_model` id it serves
    dimension: int

    def count_tokens(self, text: str) -> int:
        """The number of tokens the model's own tokenizer makes of `text`, without special tokens."""
        ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 array of shape (len(texts), dimension), rows in the order of `texts`."""
        ...


def unit_rows(vectors: np.ndarray, source: str) -> np.ndarray:
    """Rows scaled to unit length in float64, then stored as float32 (as library vectors are);
    EmbedderError naming `source` for a zero or non-finite row."""
    rows = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    if not np.all(np.isfinite(norms)) or np.any(norms == 0):
        raise EmbedderError(f"{source} gave a zero or non-finite vector")
    unit: np.ndarray = (rows / norms).astype(np.float32)
    return unit
