"""The embedder as the importer uses it: the shared interface, and its failures as one-line errors.

`GuardedEmbedder` wraps any embedder: whatever it raises (a service down, a timeout, a model that
will not load) becomes `EmbedderFailed`, which stops the import, and a wrong shape or a NaN from it
is caught before it reaches a library. `GuardedCounter` does the same for a token counter another
process runs. `chunk_limit_warning` says when chunks would be longer than the model reads.

An embedder may say more than the shared interface: its `precision` (the local model: fp32 or
int8), which is recorded in the library and keeps the cached vectors of each precision apart
(`vector_space`), and a picklable `token_counter()`, which lets files be read and chunked in a
second process while it embeds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from host.importer.errors import ImporterError

# Tokens of text a model embeds (its window less special tokens); past them text is not embedded.
MODEL_INPUT_TOKENS = {
    "sentence-transformers:all-MiniLM-L6-v2": 254,
    "openai.com:text-embedding-ada-002": 8191,
    "openai.com:text-embedding-3-small": 8191,
    "openai.com:text-embedding-3-large": 8191,
}


class Embedder(Protocol):
    """The shared embedder interface (`host/embedders/base.py`), restated so this package stands alone."""

    model: str
    dimension: int

    def count_tokens(self, text: str) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class EmbedderFailed(ImporterError):
    """The embedder (not a file) failed: the import stops, whichever file it was working on."""


def precision_of(embedder: object) -> str | None:
    """The precision an embedder computes in, when it says (the local model's fp32 or int8)."""
    precision = getattr(embedder, "precision", None)
    return precision if isinstance(precision, str) else None


def vector_space(embedder: Embedder) -> str:
    """The key its vectors are cached under: the model id, and a precision other than fp32 after `#`
    (so fp32 caches made before precisions existed stay valid, and int8 vectors never pass for fp32)."""
    precision = precision_of(embedder)
    return embedder.model if precision in (None, "fp32") else f"{embedder.model}#{precision}"


class GuardedCounter:
    """A token counter whose failures are one-line EmbedderFailed; picklable when the counter is."""

    def __init__(self, counter: Callable[[str], int]) -> None:
        self.counter = counter

    def __call__(self, text: str) -> int:
        try:
            return int(self.counter(text))
        except Exception as problem:
            raise EmbedderFailed(f"counting tokens failed: {_one_line(problem)}") from problem


class GuardedEmbedder:
    """The embedder's `count_tokens`, `dimension` and `embed`, with its failures as one-line EmbedderFailed."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.model = embedder.model
        self.precision = precision_of(embedder)
        self.count_tokens = GuardedCounter(embedder.count_tokens)
        try:
            # A remote embedder may ask its service here. A local one loads its model at the first count
            # (not here: a re-run whose files are all unchanged never needs it).
            self.dimension = int(embedder.dimension)
        except Exception as problem:
            raise EmbedderFailed(f"the embedder of {self.model} is not usable: {_one_line(problem)}") from problem

    def token_counter(self) -> GuardedCounter | None:
        """A counter to run in another process, if the embedder offers one."""
        offer = getattr(self.embedder, "token_counter", None)
        return GuardedCounter(offer()) if callable(offer) else None

    def stop(self, because: str = "") -> None:
        """Stop the embedder's retries (a remote one's), if it has any: the import is ending."""
        stop = getattr(self.embedder, "stop", None)
        if callable(stop):
            stop(because)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        try:
            vectors = np.asarray(self.embedder.embed(texts), dtype=np.float32)
        except Exception as problem:  # any embedder failure (service down, timeout, bad key) ends the import cleanly
            # Calls and token counts waiting out a Retry-After meanwhile give up now, saying why.
            self.stop(_one_line(problem))
            raise EmbedderFailed(f"embedding failed: {_one_line(problem)}") from problem
        if vectors.shape != (len(texts), self.dimension):
            raise EmbedderFailed(f"embedding failed: the embedder returned an array of shape {vectors.shape} "
                                 f"for {len(texts)} texts of dimension {self.dimension}")
        if not np.isfinite(vectors).all():
            raise EmbedderFailed("embedding failed: the embedder returned NaN or infinity")
        return vectors


def _one_line(problem: BaseException) -> str:
    return f"{type(problem).__name__}: {' '.join(str(problem).split())}"


def chunk_limit_warning(model: str, chunk_tokens: int) -> str | None:
    """A warning when chunks may be longer than the model reads (their ends would not be embedded)."""
    limit = MODEL_INPUT_TOKENS.get(model)
    if limit is not None and chunk_tokens > limit:
        return (f"warning: --chunk-tokens {chunk_tokens} is more than {model} embeds ({limit} tokens): "
                "the end of a longer chunk will not be found by search")
    return None
