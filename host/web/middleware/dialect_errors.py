"""Under a dialect's path prefix, every error answer in that dialect's shape, whoever made it.

A dialect's clients read errors their own way (RAGFlow's SDK reads `code` and `message`,
OpenAI's clients `error.message`, Dify `error_code` and `error_msg`), but some errors are made
before a dialect's endpoint runs or outside it: 404 and 405 from the router, 408 and 413 from the
body guard, 429 from the rate limiter, 401 from the caller, a crash. This middleware holds back
the start of any answer of status 400 or more under its prefix, reads its (short) body, and sends
`rewrite(status, body)` instead, keeping the status and every header but the length and type. A
body already in the dialect's shape is the rewrite's to keep. A crash is logged and answered as
a 500 in the same shape: never a traceback. Under `/p/{name}/`, the prefix is looked for after it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from http import HTTPStatus

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from host.web.middleware.publisher_prefix import route_path
from host.web.responses import JSON, render_json

MAX_ERROR_BODY = 1 << 16  # error bodies are one sentence; a longer one is cut, never buffered unbounded
CRASH_MESSAGE = "the host failed to answer this request; the error is logged"
log = logging.getLogger("polymath_host")

Rewrite = Callable[[int, bytes], bytes]


def error_message(body: bytes, status: int) -> str:
    """The one sentence inside an error body made elsewhere: `{"error": ...}`, or its text."""
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
        return str(parsed["error"])
    text = body.decode("utf-8", "replace").strip()
    if text and not text.startswith(("{", "[", "<")):
        return text.splitlines()[0][:300]
    return HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else f"HTTP {status}"


def json_object(body: bytes) -> dict[str, object] | None:
    """The body as a JSON object, or None."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


class DialectErrors:
    """Error answers under `prefix` rewritten into a dialect's shape (see the module docstring)."""

    def __init__(self, app: ASGIApp, prefix: str, rewrite: Rewrite) -> None:
        self.app = app
        self.prefix = prefix
        self.rewrite = rewrite

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not route_path(scope).startswith(self.prefix):
            return await self.app(scope, receive, send)
        started: Message | None = None  # an error's start, held back until its body is rewritten
        sent_start = False
        body = bytearray()

        async def rewriting_send(message: Message) -> None:
            nonlocal started, sent_start
            if message["type"] == "http.response.start":
                if message["status"] < 400:
                    sent_start = True
                    return await send(message)
                started = message
                return None
            if message["type"] == "http.response.body" and started is not None:
                if len(body) < MAX_ERROR_BODY:
                    body.extend(message.get("body", b"")[: MAX_ERROR_BODY - len(body)])
                if message.get("more_body", False):
                    return None
                return await self._send_error(send, started, bytes(body))
            return await send(message)

        try:
            await self.app(scope, receive, rewriting_send)
        except Exception:
            if sent_start:
                raise
            log.exception("internal error on %s %s", scope["method"], scope["path"])
            crash = render_json({"error": CRASH_MESSAGE})
            await self._send_error(send, {"type": "http.response.start", "status": 500, "headers": []}, crash)

    async def _send_error(self, send: Send, start: Message, body: bytes) -> None:
        status = start["status"]
        body = self.rewrite(status, body)
        kept = [(name, value) for name, value in start.get("headers", [])
                if name.lower() not in (b"content-length", b"content-type")]
        headers = [*kept, (b"content-type", JSON.encode()), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
