"""`/mcp`: a Model Context Protocol server (streamable HTTP) inside the app (SPEC §10).

The official `mcp` package (the `mcp` extra) serves the protocol; mcp_tools.py holds the tools.
Decisions, and why:

- Stateless JSON mode (`stateless_http=True, json_response=True`): every POST is answered on its
  own, as JSON, with no session kept in a worker, so `serve --workers N` works (a session made
  by one worker is unknown to the others) and answers pass through proxies and our middleware
  like any other. Our two tools need nothing stateful (no sampling, no notifications). GET (a
  server-to-client stream) is a 405, as the transport allows.
- One exact `Route("/mcp")` around the transport's ASGI app (a `Mount` would redirect every
  `POST /mcp` to `/mcp/`); the session manager runs in the app's lifespan (`running`), one per
  app.
- Built once the app has started (`LazyEndpoint`), on a thread: importing the `mcp` package costs
  ~0.8 s of CPU (its pydantic models), as much as the rest of a worker's start, and a host is
  ready without it. A request to /mcp meanwhile waits for it.
- Who calls: the caller's `Authorization: Bearer` token, through host/web/caller.py. A token that
  fails verification is a 401 (`{"error"}`, `WWW-Authenticate`) before MCP sees the request; no
  token, or an unknown opaque one, is anonymous: public bits only. Answers are `Cache-Control:
  private` when a token came with the request.
- Host and Origin: the SDK's DNS-rebinding protection checks `Host` against an allow-list, which
  breaks every request by name (`--host 0.0.0.0`, a reverse proxy, a public name), so it is off.
  Rebinding matters to servers trusting whoever reaches them; this one trusts only explicit
  Bearer tokens, which a rebinding page does not have, and serves anonymous callers only what
  `POST /` serves anyone. What the MCP specification asks (validate `Origin`) is done here: a
  request without `Origin` (every non-browser client) is served; one with `Origin` is served
  when it is a loopback origin (`http(s)://localhost|127.0.0.1|[::1]`, any port: browser-based
  inspectors on this machine) or listed in `allowed_origins`, else a 403. Works the same on
  127.0.0.1, on 0.0.0.0 and behind a proxy.

Without the `mcp` package, `build` returns None: the core serves everything else, `/mcp`
answers 501 naming the extra, and `serve` says so in one line (`status_line`).
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from host.web.caller import bearer_token, caller_for
from host.web.errors import HTTPError
from host.web.responses import cache_headers, error_response

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from host.web.state import HostState

log = logging.getLogger("polymath_host")
PATH = "/mcp"
EXTRA = "pip install 'polymath-host[mcp]'"
LOOPBACK = ("localhost", "127.0.0.1", "::1")


def mcp_missing() -> str | None:
    """Why /mcp cannot be served here (the `mcp` package is absent), or None."""
    try:
        found = importlib.util.find_spec("mcp") is not None
    except (ImportError, ValueError):  # ValueError: a module set to None in sys.modules
        found = False
    return None if found else f"the MCP server at {PATH} needs the `mcp` extra: {EXTRA}"


def status_line() -> str:
    """What `serve` says about /mcp, in one line."""
    missing = mcp_missing()
    return f"no MCP server: {missing}" if missing else f"MCP server (streamable HTTP) at {PATH}"


@dataclass(frozen=True)
class MCPEndpoint:
    route: Route
    session_manager: StreamableHTTPSessionManager


def build(state: HostState, allowed_origins: Sequence[str] = ()) -> MCPEndpoint | None:
    """The /mcp endpoint for one app, or None without the `mcp` package."""
    if mcp_missing():
        return None
    try:
        from mcp.server.transport_security import TransportSecuritySettings

        from host.web.dialects.mcp_tools import make_server
    except ImportError:
        return None
    server = make_server()
    transport = server.streamable_http_app(
        streamable_http_path=PATH, stateless_http=True, json_response=True,
        max_request_body_size=state.settings.max_body_bytes,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    (inner,) = [route for route in transport.routes if isinstance(route, Route) and route.path == PATH]
    guarded = MCPGuard(inner.app, allowed_origins)
    return MCPEndpoint(Route(PATH, endpoint=guarded, methods=["POST"]), server.session_manager)


class LazyEndpoint:
    """The /mcp endpoint of one app, built by `running` on a thread once the app has started."""

    def __init__(self, state: HostState, allowed_origins: Sequence[str]) -> None:
        self.state = state
        self.allowed_origins = allowed_origins
        self.endpoint: MCPEndpoint | None = None
        self.ready = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.ready.wait()
        if self.endpoint is None:
            return await error_response(HTTPError(501, "this host serves no MCP: the mcp package failed to load"))(
                scope, receive, send)
        await self.endpoint.route.handle(scope, receive, send)

    async def serve_until(self, stop: asyncio.Event) -> None:
        """Build the endpoint (on a thread), then run its session manager until `stop`."""
        try:
            self.endpoint = await asyncio.to_thread(build, self.state, self.allowed_origins)
        except Exception as problem:  # the extra installed but broken: every other door still serves
            log.warning("the MCP server at %s could not start (%s: %s); it answers 501", PATH,
                        type(problem).__name__, problem)
        if self.endpoint is None:
            self.ready.set()
            return
        async with self.endpoint.session_manager.run():
            self.ready.set()
            await stop.wait()


def lazy_endpoint(state: HostState, allowed_origins: Sequence[str] = ()) -> LazyEndpoint | None:
    """The /mcp endpoint to build once started, or None without the `mcp` package (nothing imported here)."""
    return None if mcp_missing() else LazyEndpoint(state, allowed_origins)


def routes(endpoint: LazyEndpoint | None) -> list[BaseRoute]:
    if endpoint is None:
        return [Route(PATH, not_installed, methods=["GET", "POST"])]
    return [Route(PATH, endpoint=endpoint, methods=["POST"])]


@asynccontextmanager
async def running(endpoint: LazyEndpoint | None) -> AsyncIterator[None]:
    """Build the endpoint and run its session manager for the app's lifetime (a mounted app's
    lifespan never runs), beside the app: the app is serving meanwhile."""
    if endpoint is None:
        yield
        return
    endpoint.ready = asyncio.Event()  # of this loop: an app may be started again under another (tests)
    stop = asyncio.Event()
    serving = asyncio.create_task(endpoint.serve_until(stop))
    try:
        yield
    finally:
        stop.set()
        await serving


async def not_installed(request: Request) -> Response:
    raise HTTPError(501, f"this host serves no MCP: {mcp_missing() or 'the mcp package failed to load'}")


def loopback_or_listed(origin: str, allowed: Sequence[str]) -> bool:
    if "*" in allowed or origin in allowed:
        return True
    try:
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and parts.hostname in LOOPBACK
    except ValueError:  # a malformed port
        return False


class MCPGuard:
    """In front of the MCP transport: Origin, content type (our JSON 415, not the transport's bare
    text 400), then the caller's token, then private caching."""

    def __init__(self, app: ASGIApp, allowed_origins: Sequence[str]) -> None:
        self.app = app
        self.allowed_origins = tuple(allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if origin is not None and not loopback_or_listed(origin, self.allowed_origins):
            refused = HTTPError(403, f"requests from the web page at {origin!r:.80} may not use {PATH}")
            return await error_response(refused)(scope, receive, send)
        if not headers.get("content-type", "").lower().startswith("application/json"):
            refused = HTTPError(415, f"{PATH} reads JSON-RPC messages: send Content-Type: application/json")
            return await error_response(refused)(scope, receive, send)
        token = bearer_token(headers)
        state: HostState = scope["app"].state.host
        try:
            caller_for(state.access, token)
        except HTTPError as refused:
            return await error_response(refused)(scope, receive, send)
        caching = [(name.lower().encode(), value.encode()) for name, value in cache_headers(token).items()]

        async def send_privately(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept: list[Any] = [(name, value) for name, value in message.get("headers", [])
                                   if name.lower() not in (b"cache-control", b"vary")]
                message = {**message, "headers": [*kept, *caching]}
            await send(message)

        await self.app(scope, receive, send_privately)
