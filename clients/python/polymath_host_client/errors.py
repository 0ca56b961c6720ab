"""What can go wrong asking a host, as exceptions that say it in one line.

    PolymathError                 every error of this package
    ├── HostError                 the host answered with an error: its status and its own message
    │   └── TokenRefused          401: the access token failed verification (renew it)
    └── HostUnreachable           no answer: nothing listens there, the connection broke, or the
        └── HostTimeout           host did not answer within the timeout (10 s unless told)
"""

from __future__ import annotations


class PolymathError(Exception):
    """An error of polymath-host-client; `message` is one line saying what went wrong."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class HostError(PolymathError):
    """The host refused the request: `status` is the HTTP status, `message` the host's own words."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status

    def __str__(self) -> str:
        return f"the host answered {self.status}: {self.message}"


class TokenRefused(HostError):
    """The access token failed verification (expired, revoked, or not one of this host's): renew it."""


class HostUnreachable(PolymathError):
    """No answer from the host: nothing listens at its URL, or the connection failed."""


class HostTimeout(HostUnreachable):
    """The host did not answer in time."""
