"""Templates and static files: the Jinja2 environment (autoescaped), and /static with versioned URLs.

Every template is autoescaped (HTML and SVG alike) and undefined names fail loudly. Static files
are linked as `/static/<name>?v=<digest of its bytes>`: such a URL always means the same bytes, so
it may be kept a year (`immutable`); any other URL of a static file must be revalidated. Every
static file's ETag is that digest, so a client's copy is checked by content, not by mtime.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict
from functools import cache
from pathlib import Path
from urllib.parse import parse_qs

import jinja2
from starlette.datastructures import Headers
from starlette.responses import FileResponse, Response
from starlette.staticfiles import NotModifiedResponse, StaticFiles
from starlette.types import Scope

from host import MANUAL_URL
from host.web.page.data import PageData
from host.web.page.maps import LibraryMap
from host.web.page.sign_in import SignInPage

WEB = Path(__file__).resolve().parents[1]
TEMPLATES = WEB / "templates"
STATIC = WEB / "static"
STATIC_PREFIX = "/static"
FOREVER = "public, max-age=31536000, immutable"
REVALIDATE = "public, no-cache"


@cache
def asset_versions() -> dict[str, str]:
    """name -> the first 16 hex digits of the SHA-256 of its bytes, for every file in STATIC."""
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()[:16]
            for path in sorted(STATIC.iterdir()) if path.is_file()}


def asset_url(name: str) -> str:
    return f"{STATIC_PREFIX}/{name}?v={asset_versions()[name]}"


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html", "svg"), default_for_string=True, default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["asset_url"] = asset_url
    env.globals["manual_url"] = MANUAL_URL
    return env


def render_page(data: PageData, sign_in: SignInPage | None = None) -> str:
    return environment().get_template("page.html").render(page=data, sign_in=sign_in)


def render_map(library_map: LibraryMap) -> str:
    """The map as a standalone SVG document (the page embeds the same markup inline)."""
    return environment().get_template("map.svg").render(map=library_map)


def page_json(data: PageData) -> dict[str, object]:
    return asdict(data)


class StaticAssets(StaticFiles):
    """host/web/static: content ETags, a year's cache for versioned URLs, revalidation otherwise."""

    def __init__(self) -> None:
        super().__init__(directory=STATIC)

    def file_response(self, full_path: str | os.PathLike[str], stat_result: os.stat_result, scope: Scope,
                      status_code: int = 200) -> Response:
        name = Path(full_path).name
        version = asset_versions().get(name)
        headers = {"Cache-Control": REVALIDATE}
        if version is not None:
            headers["ETag"] = f'"{version}"'
            if _query_value(scope, "v") == version:
                headers["Cache-Control"] = FOREVER
        response = FileResponse(full_path, status_code=status_code, stat_result=stat_result, headers=headers)
        if self.is_not_modified(response.headers, Headers(scope=scope)):
            return NotModifiedResponse(response.headers)
        return response


def _query_value(scope: Scope, name: str) -> str | None:
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get(name)
    return values[0] if values else None
