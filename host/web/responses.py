"""Bytes on the wire: JSON (NaN refused, as Starlette's JSONResponse does; host/web/fast_json.py) and
MessagePack, error bodies, the caching headers every response computed for a caller carries, and bodies sent in
pieces (a large one is never held whole for a client who reads slowly)."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

import msgpack
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from host.web.errors import HTTPError
from host.web.fast_json import render_json as render_json  # every endpoint's JSON renderer

JSON = "application/json"
MSGPACK = "application/msgpack"
CHUNK_BYTES = 1 << 16
BITS_PER_PIECE = 32  # bits rendered at a time into a streamed answer or library file: ~100 KB of text
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


async def streamed_json(header: dict[str, Any], bit_count: int, render_bits: Callable[[int, int], bytes], *,
                        gzip: bool = False) -> AsyncIterator[bytes]:
    """`render_json({**header, "bits": [...]})` exactly, a piece at a time, so that no whole answer or
    file is ever held: the header, then `render_bits(start, stop)` (those bits' JSON, comma-joined)
    BITS_PER_PIECE at a time in a worker thread, gzip-compressed on the way when asked. Rendering bit
    by bit also lets other requests run between bits."""
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31) if gzip else None  # wbits 31: a gzip stream

    def encoded(piece: bytes) -> bytes:
        return compressor.compress(piece) if compressor is not None else piece

    yield encoded(render_json({**header, "bits": []})[: -len(b"]}")])
    for start in range(0, bit_count, BITS_PER_PIECE):
        rendered = await run_in_threadpool(render_bits, start, min(bit_count, start + BITS_PER_PIECE))
        yield encoded((b"," if start else b"") + rendered)
    yield encoded(b"]}") + (compressor.flush() if compressor is not None else b"")
