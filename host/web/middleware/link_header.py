"""Every response says where the Polymath endpoint is, for the JavaScript client's discovery (SPEC §5)."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

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
