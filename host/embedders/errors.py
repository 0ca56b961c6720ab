"""The errors embedders raise, each one line naming what went wrong.

The HTTP edge maps them: `EmbedderError` -> 502 (the embedding service failed),
`EmbedderTimeout` -> 504 (it did not answer in time), `NoEmbedder` -> 400 (the host cannot embed
text for that model; the client must send `query_embedding`). Messages never carry an API key
and are safe to show to any client.
"""

from __future__ import annotations


class EmbedderError(Exception):
    """Embedding failed: the service answered with an error, garbage, or not at all."""


class EmbedderTimeout(EmbedderError):
    """Embedding did not finish within its time limit."""


class NoEmbedder(Exception):
    """The host has no embedder for `model`."""

    def __init__(self, model: str, message: str | None = None) -> None:
        self.model = model
        default = f"this host cannot embed text for model {model!r}: send `query_embedding` (a vector of that model)"
        super().__init__(message or default)
