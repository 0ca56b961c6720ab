"""One JSON line per request, and the request counters and latency in /metrics.

The query string is logged with the value of every credential-like parameter redacted (a name
ending in token, key, secret, password or signature, in any case: `access_token` and `token` among
them; and `code`, the authorization code a reader signing in at the page comes back with). No door
accepts a token there (host/web/middleware/url_tokens.py), but an old client may still send one, and
the log must not keep it. Headers are never logged.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from urllib.parse import parse_qsl, quote

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from host.service.process import ACCESS_LOG
from host.web.metrics import Metrics

access_log = logging.getLogger(ACCESS_LOG)
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"})
SECRET_NAME_ENDINGS = ("token", "key", "secret", "password", "signature")
SECRET_NAMES = frozenset({"code"})  # the OAuth authorization code the page's sign-in comes back with (?code=...)
REDACTED = "REDACTED"
MAX_LOGGED_QUERY = 2048  # characters: a query string of megabytes is cut, not copied into every line


def redacted_query(query_string: bytes) -> str:
    """The query string as logged: credential-like parameters' values replaced by REDACTED."""
    if not query_string:
        return ""
    pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)
    return "&".join(
        f"{quote(name, safe='')}={REDACTED if _secret(name) else quote(value, safe='')}"
        for name, value in pairs)[:MAX_LOGGED_QUERY]


def _secret(name: str) -> bool:
    lowered = name.lower()
    return lowered.endswith(SECRET_NAME_ENDINGS) or lowered in SECRET_NAMES


class AccessLog:
    """One JSON line per request, and the request counters and latency in /metrics.

    Logs the path and the query string with credentials redacted (`redacted_query`), never a header.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics, generation: Callable[[], int]) -> None:
        self.app = app
        self.metrics = metrics
        self.generation = generation

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        generation = self.generation()
        status = 500

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            seconds = time.perf_counter() - started
            method = scope["method"] if scope["method"] in KNOWN_METHODS else "other"  # clients make up names
            self.metrics.count("polymath_requests_total", method=method, status=str(status))
            self.metrics.observe("polymath_request_seconds", seconds)
            access_log.info(json.dumps({
                "time": round(time.time(), 3),
                "method": scope["method"],
                "path": scope["path"],
                "query": redacted_query(scope.get("query_string", b"")),
                "status": status,
                "duration_ms": round(seconds * 1000, 3),
                "generation": generation,
                "client": (scope.get("client") or ("", 0))[0],
            }))
