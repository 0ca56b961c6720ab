"""Plain ASGI middleware, one concern each."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from host.errors import HTTPError
from host.rendering import error_response

POLYMATH_LINK = b'</>; rel="polymath"'


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


class BodySizeLimit:
    """Refuse bodies over `max_bytes` with 413, whether announced by Content-Length or streamed."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        too_large = HTTPError(413, f"the request body is over the {self.max_bytes:,}-byte limit")
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                return await error_response(too_large)(scope, receive, send)
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise too_large
            return message

        await self.app(scope, limited_receive, send)
