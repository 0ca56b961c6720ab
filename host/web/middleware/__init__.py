"""Plain ASGI middleware, one concern each."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable

from cachetools import TTLCache
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from host.web.errors import HTTPError
from host.web.metrics import Metrics
from host.web.responses import error_response

POLYMATH_LINK = b'</>; rel="polymath"'
access_log = logging.getLogger("polymath_host.access_log")


def _header(scope: Scope, name: bytes) -> bytes | None:
    return next((value for key, value in scope["headers"] if key == name), None)


class PolymathLinkHeader:
    """Every response says where the Polymath endpoint is, for the JavaScript client's discovery."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_link(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"link", POLYMATH_LINK)]
            await send(message)

        await self.app(scope, receive, send_with_link)


class RequestBodyGuard:
    """Refuse bodies over `max_bytes` (413) and bodies that arrive too slowly (408).

    The size is checked against Content-Length up front and counted as chunks arrive; every
    chunk must come within `read_timeout` seconds, so a slow-loris client cannot hold a worker.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, read_timeout: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.read_timeout = read_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        too_large = HTTPError(413, f"the request body is over the {self.max_bytes:,}-byte limit")
        length = _header(scope, b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            return await error_response(too_large)(scope, receive, send)
        received = 0

        async def guarded_receive() -> Message:
            nonlocal received
            try:
                message = await asyncio.wait_for(receive(), self.read_timeout)
            except asyncio.TimeoutError:
                raise HTTPError(408, f"the request body did not arrive within {self.read_timeout:g} s") from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise too_large
            return message

        await self.app(scope, guarded_receive, send)


class RateLimit:
    """A token bucket per client: 429 with Retry-After past it.

    `subject_of(bearer_token)` names the holder of a *valid* token, who is limited as one client
    wherever they connect from; anyone else (no token, or an unknown or made-up one, which could
    be changed on every request) is limited by address. Buckets live in a bounded TTL cache, so
    memory stays bounded whatever the number of clients. The limit is per worker process.
    """

    def __init__(self, app: ASGIApp, per_second: float, burst: int,
                 subject_of: Callable[[str], str | None] = lambda token: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self.per_second = per_second
        self.burst = burst
        self.subject_of = subject_of
        self.clock = clock
        self._buckets: TTLCache[bytes, tuple[float, float]] = TTLCache(maxsize=100_000, ttl=max(60.0, burst / per_second) if per_second > 0 else 60.0)
        self._lock = threading.Lock()

    def _client(self, scope: Scope) -> bytes:
        scheme, _, token = (_header(scope, b"authorization") or b"").decode("latin-1").partition(" ")
        subject = self.subject_of(token.strip()) if scheme.lower() == "bearer" and token.strip() else None
        if subject:
            return b"subject:" + hashlib.sha256(subject.encode()).digest()
        host = (scope.get("client") or ("unknown", 0))[0]
        return b"address:" + host.encode()

    def _take(self, client: bytes) -> float:
        """0 if the request may go ahead, else the seconds until it may."""
        now = self.clock()
        with self._lock:
            tokens, last = self._buckets.get(client, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.per_second)
            if tokens >= 1:
                self._buckets[client] = (tokens - 1, now)
                return 0.0
            self._buckets[client] = (tokens, now)
            return (1 - tokens) / self.per_second

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.per_second <= 0 or scope["path"] in ("/healthz", "/readyz", "/metrics"):
            return await self.app(scope, receive, send)
        wait = self._take(self._client(scope))
        if wait:
            retry_after = str(max(1, math.ceil(wait)))
            refused = HTTPError(429, f"too many requests; retry after {retry_after} s", {"Retry-After": retry_after})
            return await error_response(refused)(scope, receive, send)
        await self.app(scope, receive, send)


class AccessLog:
    """One JSON line per request, and the request counters and latency in /metrics.

    Logs the path without its query string (which may hold an access token), never a header.
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
            self.metrics.count("polymath_requests_total", method=scope["method"], status=str(status))
            self.metrics.observe_request_seconds(seconds)
            access_log.info(json.dumps({
                "time": round(time.time(), 3),
                "method": scope["method"],
                "path": scope["path"],
                "status": status,
                "duration_ms": round(seconds * 1000, 3),
                "generation": generation,
                "client": (scope.get("client") or ("", 0))[0],
            }))
