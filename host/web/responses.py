"""Bytes on the wire: JSON (NaN refused, as Starlette's JSONResponse does) and MessagePack."""

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
    return msgpack.packb(content, use_bin_type=True)


def error_response(error: HTTPError) -> Response:
    return Response(render_json({"error": error.message}), error.status, error.headers, media_type=JSON)
