"""A token bucket per client: 429 with Retry-After past it."""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Callable

from cachetools import TTLCache
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from host.web.errors import HTTPError
from host.web.responses import error_response


class RateLimit:
    """A token bucket per client: 429 with Retry-After past it.

    `subject_of(headers)` names the holder of a *valid* token, who is limited as one client
    wherever they connect from; anyone else (no token, or an unknown or made-up one, which could
    be changed on every request) is limited by address. Buckets live in a bounded TTL cache, so
    memory stays bounded whatever the number of clients. The limit is per worker process.
    """

    def __init__(self, app: ASGIApp, per_second: float, burst: int,
                 subject_of: Callable[[Headers], str | None] = lambda headers: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self.per_second = per_second
        self.burst = burst
        self.subject_of = subject_of
        self.clock = clock
        refill_seconds = burst / per_second if per_second > 0 else 0.0
        self._buckets: TTLCache[bytes, tuple[float, float]] = TTLCache(maxsize=100_000, ttl=max(60.0, refill_seconds))
        self._lock = threading.Lock()

    def _client(self, scope: Scope) -> bytes:
        subject = self.subject_of(Headers(scope=scope))
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
