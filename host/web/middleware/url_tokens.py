"""Tokens never in URLs: a request carrying one in its query string is a 400, on every door.

In front of every route (the Polymath query, the page, the library files, RAGFlow, MCP, `/v1/*`,
and any door added later), so no endpoint has to remember it. The refusal says where a token goes
instead (host.web.caller.URL_TOKEN_REFUSAL) and never repeats the token; the access log, outside
this middleware, records the request with the token's value redacted.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from host.web.caller import URL_TOKEN_REFUSAL, url_token_parameter
from host.web.errors import bad_request
from host.web.responses import error_response


class TokensOutOfURLs:
    """Refuse (400) any HTTP request whose query string carries an access token."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and url_token_parameter(scope.get("query_string", b"")):
            return await error_response(bad_request(URL_TOKEN_REFUSAL))(scope, receive, send)
        await self.app(scope, receive, send)
