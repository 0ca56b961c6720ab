"""The two exceptions the access rules raise, and nothing else.

Both carry one line of text that is safe to show: a file name, a field and what is
wrong with its value, or a short reason a token was refused. Neither ever contains a
token or a secret, because these messages end up in logs and HTTP responses.
"""

from __future__ import annotations


class AccessConfigError(Exception):
    """`access.SECRET.json` (or a value bound for it) is unusable.

    The message names the file, the field and the problem, e.g.
    ``access.SECRET.json: keys[0].secret: decodes to 16 bytes; HS256 needs at least 32``.
    """


class TokenRejected(Exception):
    """A presented token failed verification (the HTTP layer answers 401).

    ``reason`` is a short phrase such as ``"expired"``, ``"bad signature"``,
    ``"revoked"``, ``"wrong audience"``, ``"wrong issuer"``, ``"malformed token"`` or
    ``"unknown key id"``; it never includes the token.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
