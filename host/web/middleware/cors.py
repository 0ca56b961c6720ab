"""Cross-origin requests (CORS): web pages on other origins may call the host from a browser.

The host keeps no ambient credentials (no cookies; a token travels only in `Authorization` or a
body field the caller sets), so a page on another origin can read exactly what `curl` could read
with the same request: allowing any origin (`*`, the default) gives away nothing. An operator may
narrow it to a list of origins (`--cors-origin`), or turn it off (`none`).

Invariants:
- `Access-Control-Allow-Credentials` is never sent: no cookie or client certificate ever
  authorises a cross-origin read.
- A preflight (`OPTIONS` with `Access-Control-Request-Method`) is answered here, before the rate
  limit, the body guard and the routes: it does no work and names nothing about the libraries.
- Every other response, errors included (404, 405, 413, 429, 401, ...), carries the same
  `Access-Control-Allow-Origin` and `Access-Control-Expose-Headers`, so a browser app can read
  why it was refused and when to retry.
- With `*` an answer never depends on `Origin`, so it is sent whatever the request says and no
  `Vary: Origin` is needed; with a list, the answer depends on `Origin`, so every response says
  `Vary: Origin` (a shared cache must not give one origin's answer to another).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from host.web.errors import HTTPError
from host.web.responses import error_response

ANY = "*"
NONE = "none"
ALLOWED_METHODS = "GET, HEAD, POST"
# Headers a browser app may send beyond the CORS-safelisted ones: a bearer token, a JSON or
# msgpack body, conditional GETs of library files, and the MCP transport's own headers for a browser
# MCP client. (`*` would not cover Authorization.)
ALLOWED_HEADERS = "Authorization, Content-Type, Accept, If-None-Match, Mcp-Protocol-Version, Mcp-Session-Id"
# Headers a browser app may read beyond the safelisted ones: the endpoint link (the JavaScript
# client's discovery reads it), a library file's ETag, a 429's Retry-After, a 401's reason.
EXPOSED_HEADERS = "Link, ETag, Retry-After, WWW-Authenticate"
PREFLIGHT_MAX_AGE = "7200"  # seconds; Chromium keeps a preflight at most 2 hours anyway


@dataclass(frozen=True)
class CorsPolicy:
    """Which origins' pages may read this host's answers: any, none, or those listed."""

    any_origin: bool
    origins: frozenset[str]

    @property
    def enabled(self) -> bool:
        return self.any_origin or bool(self.origins)

    def allows(self, origin: str | None) -> bool:
        return self.any_origin or (origin is not None and origin in self.origins)

    def headers_for(self, origin: str | None) -> dict[str, str]:
        """The CORS headers of an actual (not preflight) response to a request from `origin`."""
        if not self.enabled:
            return {}
        headers = {} if self.any_origin else {"Vary": "Origin"}
        if self.allows(origin):
            headers["Access-Control-Allow-Origin"] = ANY if self.any_origin else str(origin)
            headers["Access-Control-Expose-Headers"] = EXPOSED_HEADERS
        return headers


def parse_cors_origins(value: str) -> CorsPolicy:
    """`*`, `none`, or a comma list of origins (`https://app.example`, `http://localhost:3000`).

    Raises ValueError naming a value that is not an origin (a path, no scheme, `*` in a list).
    Origins are compared as browsers send them: lower case, no default port, no trailing slash.
    """
    items = [item.strip() for item in value.split(",") if item.strip()]
    if items == [ANY]:
        return CorsPolicy(True, frozenset())
    if not items or items == [NONE]:
        return CorsPolicy(False, frozenset())
    return CorsPolicy(False, frozenset(_origin(item) for item in items))


def _origin(text: str) -> str:
    if text in (ANY, NONE):
        raise ValueError(f"{text!r} stands alone: it cannot be one of several origins")
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = -1
    if scheme not in ("http", "https") or not parts.hostname or port == -1 or parts.path not in ("", "/") \
            or parts.query or parts.fragment or parts.username is not None or parts.password is not None:
        raise ValueError(f"{text!r:.100} is not an origin; write it as scheme://host[:port], "
                         "e.g. https://app.example or http://localhost:3000")
    default = {"http": 80, "https": 443}[scheme]
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    return f"{scheme}://{host}" + (f":{port}" if port not in (None, default) else "")


def merge_vary(existing: str | None, name: str) -> str:
    """`Vary` with `name` added once (case-insensitively), keeping what was there."""
    names = [part.strip() for part in (existing or "").split(",") if part.strip()]
    if name.lower() not in (part.lower() for part in names):
        names.append(name)
    return ", ".join(names)


class CrossOrigin:
    """Answer preflights and add CORS headers to every HTTP response, as `policy` allows."""

    def __init__(self, app: ASGIApp, policy: CorsPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.policy.enabled:
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if scope["method"] == "OPTIONS" and origin is not None and "access-control-request-method" in headers:
            return await self._preflight(origin)(scope, receive, send)
        added = self.policy.headers_for(origin)

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                response_headers = MutableHeaders(scope=message)
                for name, value in added.items():
                    if name == "Vary":
                        response_headers["Vary"] = merge_vary(response_headers.get("vary"), value)
                    else:
                        response_headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_cors)

    def _preflight(self, origin: str) -> ASGIApp:
        """204 allowing the methods and headers this host serves (the browser checks what it asked
        against them); 403 for an origin not on the list."""
        vary = {} if self.policy.any_origin else {"Vary": "Origin"}
        if not self.policy.allows(origin):
            refused = HTTPError(403, f"pages from {origin!r:.100} may not call this host (see its --cors-origin)", vary)
            return error_response(refused)
        return Response(status_code=204, headers={
            **vary,
            "Access-Control-Allow-Origin": ANY if self.policy.any_origin else origin,
            "Access-Control-Allow-Methods": ALLOWED_METHODS,
            "Access-Control-Allow-Headers": ALLOWED_HEADERS,
            "Access-Control-Max-Age": PREFLIGHT_MAX_AGE,
        })
