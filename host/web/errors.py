"""The one error type the HTTP edge turns into `{"error": "..."}` with a status."""

from __future__ import annotations

from host.errors import NothingLoaded, QueryError


class HTTPError(Exception):
    """A request we refuse: `message` is one sentence safe to show to any client."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def bad_request(message: str) -> HTTPError:
    return HTTPError(400, message)


STATUS_OF_CORE_REFUSALS: dict[type[Exception], int] = {QueryError: 400, NothingLoaded: 503}


def from_core(error: Exception) -> HTTPError:
    """The HTTP refusal for a core refusal (host.errors)."""
    return HTTPError(STATUS_OF_CORE_REFUSALS[type(error)], str(error))
