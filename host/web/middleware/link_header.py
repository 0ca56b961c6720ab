"""Every response says where the Polymath endpoint is, for the JavaScript client's discovery (SPEC §5):
the host's root, or under `/p/{name}/` that prefix's (host/web/middleware/publisher_prefix.py)."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from host.web.middleware.publisher_prefix import publisher, root_href

POLYMATH_LINK = b'</>; rel="polymath"'


def polymath_link(scope: Scope) -> bytes:
    """The `Link` header's value for this request: its root is where its Polymath endpoint is."""
    name = publisher(scope)
    return POLYMATH_LINK if name is None else f'<{root_href(name)}>; rel="polymath"'.encode("ascii")


class PolymathLinkHeader:
    """Every response says where the Polymath endpoint is, for the JavaScript client's discovery."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        link = polymath_link(scope)

        async def send_with_link(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"link", link)]
            await send(message)

        await self.app(scope, receive, send_with_link)
