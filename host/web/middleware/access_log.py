"""One JSON line per request, and the request counters and latency in /metrics."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from host.service.process import ACCESS_LOG
from host.web.metrics import Metrics

access_log = logging.getLogger(ACCESS_LOG)
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"})


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
            method = scope["method"] if scope["method"] in KNOWN_METHODS else "other"  # clients make up names
            self.metrics.count("polymath_requests_total", method=method, status=str(status))
            self.metrics.observe("polymath_request_seconds", seconds)
            access_log.info(json.dumps({
                "time": round(time.time(), 3),
                "method": scope["method"],
                "path": scope["path"],
                "status": status,
                "duration_ms": round(seconds * 1000, 3),
                "generation": generation,
                "client": (scope.get("client") or ("", 0))[0],
            }))
