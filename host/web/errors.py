"""The one error type the HTTP edge turns into `{"error": "..."}` with a status."""

from __future__ import annotations

from host.embedders.errors import EmbedderError, EmbedderTimeout, NoEmbedder
from host.search.errors import NothingLoaded, QueryError


class HTTPError(Exception):
    """A request we refuse: `message` is one sentence safe to show to any client."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def bad_request(message: str) -> HTTPError:
    return HTTPError(400, message)


# Most specific first: EmbedderTimeout is an EmbedderError.
STATUS_OF_CORE_REFUSALS: dict[type[Exception], int] = {
    QueryError: 400, NoEmbedder: 400, NothingLoaded: 503, EmbedderTimeout: 504, EmbedderError: 502,
}


def from_core(error: Exception) -> HTTPError:
    """The HTTP refusal for a refusal of the core or of an embedder (their messages are safe to show)."""
    status = next(status for kind, status in STATUS_OF_CORE_REFUSALS.items() if isinstance(error, kind))
    return HTTPError(status, str(error))
