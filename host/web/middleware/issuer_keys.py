"""The keys a provider's Bearer token needs, fetched before any endpoint reads the token.

For a request with `Authorization: Bearer <token>` whose trusted issuer's keys lack its key id (or
have not arrived yet), the one bounded fetch is awaited here (host/web/caller.py `keys_ready`), on
the event loop without blocking it, so that every door (which reads the token synchronously) finds
the keys there. Any other request passes at the cost of a header lookup; a verified token's, of a
digest and a cache lookup.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from host.web.access_rules import AccessRules
from host.web.caller import bearer_token, keys_ready


class IssuerKeysReady:
    def __init__(self, app: ASGIApp, access: Callable[[], AccessRules]) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            token = bearer_token(Headers(scope=scope))
            if token:
                await keys_ready(self.access(), token)
        await self.app(scope, receive, send)
