"""Request bodies: too large (413) or too slow (408) is refused before an endpoint reads it."""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from host.web.errors import HTTPError
from host.web.responses import error_response


def header(scope: Scope, name: bytes) -> bytes | None:
    return next((value for key, value in scope["headers"] if key == name), None)


class RequestBodyGuard:
    """Refuse bodies over `max_bytes` (413) and bodies that arrive too slowly (408).

    The size is checked against Content-Length up front and counted as chunks arrive; every
    chunk must come within `read_timeout` seconds, so a slow-loris client cannot hold a worker.
    Once the body is complete, `receive` only waits for the client to go away (a streamed answer
    listens for that while it is sent): that wait has no limit, or a long answer would be cut.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, read_timeout: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.read_timeout = read_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        too_large = HTTPError(413, f"the request body is over the {self.max_bytes:,}-byte limit")
        length = header(scope, b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            return await error_response(too_large)(scope, receive, send)
        received = 0
        complete = False

        async def guarded_receive() -> Message:
            nonlocal received, complete
            if complete:
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.read_timeout)
            except TimeoutError:
                raise HTTPError(408, f"the request body did not arrive within {self.read_timeout:g} s") from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise too_large
                complete = not message.get("more_body", False)
            return message

        await self.app(scope, guarded_receive, send)
