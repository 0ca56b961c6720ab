"""Bytes on the wire: JSON (NaN refused, as Starlette's JSONResponse does) and MessagePack, error
bodies, and the caching headers every response computed for a caller carries."""

from __future__ import annotations

import json
from typing import Any

import msgpack
from starlette.responses import Response

from host.web.errors import HTTPError

JSON = "application/json"
MSGPACK = "application/msgpack"
MSGPACK_TYPES = ("application/msgpack", "application/x-msgpack", "application/vnd.msgpack")


def wants_msgpack(accept: str) -> bool:
    return any(kind in accept for kind in MSGPACK_TYPES)


def render_json(content: Any) -> bytes:
    return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def render_msgpack(content: Any) -> bytes:
    packed: bytes = msgpack.packb(content, use_bin_type=True)
    return packed


def error_response(error: HTTPError) -> Response:
    return Response(render_json({"error": error.message}), error.status, error.headers, media_type=JSON)


def cache_headers(token: str | None, *, revalidate: bool = False) -> dict[str, str]:
    """A response computed with a token is private: no shared cache or CDN may keep it."""
    policy = "no-cache" if revalidate else "no-store"
    return {"Cache-Control": f"private, {policy}" if token else f"public, {policy}", "Vary": "Authorization"}


def is_not_modified(if_none_match: str, etag: str) -> bool:
    """RFC 9110 §13.1.2: `If-None-Match` compares weakly (`W/"x"` matches `"x"`), and `*` matches any."""
    def opaque(tag: str) -> str:
        return tag.strip().removeprefix("W/")

    wanted = [opaque(tag) for tag in if_none_match.split(",")]
    return "*" in wanted or opaque(etag) in wanted
