"""Bytes on the wire: JSON (NaN refused, as Starlette's JSONResponse does) and MessagePack, error
bodies, and the caching headers every response computed for a caller carries."""

from __future__ import annotations

import json
from typing import Any, Literal

import msgpack
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from host.web.errors import HTTPError

JSON = "application/json"
MSGPACK = "application/msgpack"
CHUNK_BYTES = 1 << 16
MSGPACK_TYPES = ("application/msgpack", "application/x-msgpack", "application/vnd.msgpack")


def wants_msgpack(accept: str) -> bool:
    return any(kind in accept for kind in MSGPACK_TYPES)


AnswerFormat = Literal["json", "msgpack", "text"]


def answer_format(accept: str) -> AnswerFormat:
    """What a query answer is rendered as: MessagePack when any of its types is named (as always);
    else the context block (host/web/context_block.py) when `text/plain` is named with a higher
    q-value than `application/json`, or as high and before it; else JSON (`*/*`, no header)."""
    if wants_msgpack(accept):
        return "msgpack"
    ranked: dict[str, tuple[float, int]] = {}
    for position, item in enumerate(accept.split(",")):
        kind, *parameters = (part.strip() for part in item.split(";"))
        quality = 1.0
        for parameter in parameters:
            name, _, value = parameter.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        ranked.setdefault(kind.lower(), (quality, -position))
    text, json_ = ranked.get("text/plain", (0.0, 0)), ranked.get("application/json", (0.0, 0))
    return "text" if text[0] > 0 and text > json_ else "json"


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


class ChunkedResponse(Response):
    """A whole body sent in pieces of CHUNK_BYTES. The server's transport copies what it cannot send
    at once; in pieces, a client that stops reading holds one piece there, not the whole answer,
    until the server's write timeout drops it."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        body = memoryview(self.body)
        for start in range(0, len(body), CHUNK_BYTES):
            end = start + CHUNK_BYTES
            await send({"type": "http.response.body", "body": bytes(body[start:end]), "more_body": end < len(body)})
        if not body:
            await send({"type": "http.response.body", "body": b""})


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether `Accept-Encoding` allows gzip (and does not refuse it with q=0)."""
    for coding in accept_encoding.lower().split(","):
        name, _, parameters = coding.strip().partition(";")
        if name.strip() in ("gzip", "*"):
            return parameters.replace(" ", "") not in ("q=0", "q=0.0", "q=0.00", "q=0.000")
    return False
