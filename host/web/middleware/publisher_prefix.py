"""`/p/{name}/...`: the host's own paths for the library or folder of libraries of that name alone.

`/p/blog/libraries` is `/libraries` for the libraries `blog` selects (host/catalog/selection.py),
`POST /p/blog/` is `POST /` over them, and so on. This middleware, the outermost, finds where the
name ends and hands the request on with the prefix in `root_path` (`/p/blog`, as a Starlette
`Mount` sets it: the router matches the rest, `/libraries`, and its redirects stay under the
prefix) and the name in `scope[PUBLISHER]`. Endpoints read it with `publisher(scope)` and restrict
what they list and search to it (host/web/library_selection.py): the routes are the host's own,
never copies. Middleware that look at a path's prefix read `route_path(scope)`.

Where the name ends: a name may hold "/" (`/p/newsroom/sports/`), so it runs up to the first
segment after its first that is one of the host's own paths (`ROUTE_WORDS`), or to the end:
`/p/blog/libraries/blog/a.json` is `blog`'s `/libraries/blog/a.json`, and `/p/blog/a/` the root of
`blog/a` (`/p/blog/a` redirects there). A library or folder with one of those words among its
folders (`blog/api/x`) is reached under its parent's prefix. The host's operational paths
(/healthz, /readyz, /metrics) and its static files are the host's alone: not under a prefix.

A malformed name (`check_name`: `..`, absolute, a backslash, percent-encoded forms of those, NUL,
overlong) gets its `root_path` too, but no `scope[PUBLISHER]`: the problem goes in `scope[REFUSED]`,
and `RefusedPrefix`, the innermost middleware, answers 400 with that one line before any endpoint
runs, so every other layer shapes it as any answer (under a dialect's path, in its dialect's
shape). No name is ever joined to a file path.
"""

from __future__ import annotations

from functools import lru_cache
from urllib.parse import quote

from starlette.types import ASGIApp, Receive, Scope, Send

from host.catalog.selection import BadName, check_name
from host.web.errors import HTTPError
from host.web.responses import error_response

PREFIX = "/p/"
PUBLISHER = "polymath.publisher"  # the scope key holding the name (None or absent: the whole host)
REFUSED = "polymath.refused_name"  # the scope key holding why a /p/ name was refused
ROUTE_WORDS = frozenset({"libraries", "openapi.json", "v1", "dify", "api", "mcp"})
NAME_ARGUMENT = "name in /p/{name}/"


def split_prefix(path: str) -> str | None:
    """The name of a path under /p/ as it stands in the path (see the module docstring), else None."""
    if not path.startswith(PREFIX):
        return None
    segments = path[len(PREFIX):].split("/")
    end = next((position for position in range(1, len(segments)) if segments[position] in ROUTE_WORDS), None)
    if end is None:
        end = len(segments) - 1 if len(segments) > 1 and segments[-1] == "" else len(segments)
    return "/".join(segments[:end])


def publisher(scope: Scope) -> str | None:
    """The name this request's `/p/{name}/` prefix gives, or None for the whole host."""
    name: str | None = scope.get(PUBLISHER)
    return name


def root_href(name: str | None) -> str:
    """The root of the host for `name` (`/p/{name}/`, percent-encoded), or of the whole host (`/`)."""
    return "/" if name is None else f"{PREFIX}{quote(name, safe='/')}/"


def library_href(name: str, root: str = "/", ending: str = ".json") -> str:
    """A library's file (or, ending "/map.svg", its map) under a root; its name comes from a file path,
    so it is percent-encoded."""
    return f"{root}libraries/{_quoted(name)}{ending}"


@lru_cache(maxsize=1 << 15)
def _quoted(name: str) -> str:
    return quote(name)  # 10,000 names listed: 8 of /libraries' 30 ms were spent here


def route_path(scope: Scope) -> str:
    """The path the router matches: under a prefix, what follows it."""
    root: str = scope.get("root_path", "")
    path: str = scope["path"]
    return path[len(root):] if root and path.startswith(root) else path


class PublisherPrefix:
    """Requests under `/p/{name}/` handed on as the host's own paths for that name (module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name = split_prefix(scope["path"]) if scope["type"] == "http" else None
        if name is not None:
            try:
                scope = {**scope, "root_path": PREFIX + name, PUBLISHER: check_name(name, NAME_ARGUMENT)}
            except BadName as problem:
                scope = {**scope, "root_path": PREFIX + name, REFUSED: str(problem)}
        await self.app(scope, receive, send)


class RefusedPrefix:
    """The innermost middleware: a request whose `/p/` name was refused is a 400 saying why, and
    reaches no endpoint (an endpoint would answer for the whole host: it finds no publisher)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refused = scope.get(REFUSED) if scope["type"] == "http" else None
        if refused is None:
            return await self.app(scope, receive, send)
        await error_response(HTTPError(400, refused))(scope, receive, send)
