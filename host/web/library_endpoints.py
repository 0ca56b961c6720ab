"""`GET /libraries` and `GET /libraries/{name}.json`: what is loaded, and each library as a static file.

A library file is streamed in pieces rendered as they are sent (gzip-compressed when the client
accepts it), so its size never sets the memory a download takes; small ones are also kept
rendered. Its ETag digests exactly the bits the caller may see, so it is known before rendering
and never tells one caller about another's bits.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from host.catalog.generations import Catalog
from host.catalog.libraries import Library
from host.results.bits import result_bit
from host.results.published import library_header, visible_digest, visible_in_file_order
from host.web.caller import request_caller
from host.web.errors import HTTPError
from host.web.responses import JSON, accepts_gzip, cache_headers, is_not_modified, render_json, streamed_json
from host.web.state import HostState, host_state


def library_url(name: str) -> str:
    """Where a library is published; its name comes from a file path, so it is percent-encoded."""
    return f"/libraries/{quote(name)}.json"


async def list_libraries(request: Request) -> Response:
    """The libraries this caller may see at least one bit of, with the count they may see."""
    caller = request_caller(request)
    listed = visible_libraries(host_state(request).catalog, caller.access_tags)
    headers = cache_headers(caller.token, revalidate=True)
    return Response(render_json({"libraries": listed}), 200, headers, media_type=JSON)


def visible_libraries(catalog: Catalog, access_tags: frozenset[str]) -> list[dict[str, Any]]:
    """`GET /libraries`'s list (also the MCP `libraries` tool's): only what a caller holding `access_tags` may see."""
    listed = []
    for library in catalog.libraries:
        visible = library.visible_bit_count(access_tags)
        if visible:
            listed.append({
                "name": library.name,
                "url": library_url(library.name),
                "embedding_model": library.embedding_model,
                "dimension": library.dimension,
                "bits": visible,
            })
    return listed


async def library_file(request: Request) -> Response:
    """A library as a static asset: only the bits the caller may see, with an ETag of exactly those."""
    state = host_state(request)
    caller = request_caller(request)
    name = request.path_params["name"]
    library = state.catalog.library(name.removesuffix(".json")) if name.endswith(".json") else None
    if library is None or not library.visible_bit_count(caller.access_tags):
        raise HTTPError(404, f"there is no library named {name!r:.80}", cache_headers(caller.token, revalidate=True))
    visible_tags = library.visible_tags(caller.access_tags)
    gzip = accepts_gzip(request.headers.get("accept-encoding", ""))
    digest = await etag_digest(state, library, visible_tags)
    etag = f'"{digest[:32]}{"-gzip" if gzip else ""}"'
    headers = {"ETag": etag, **cache_headers(caller.token, revalidate=True), "Vary": "Authorization, Accept-Encoding"}
    if gzip:
        headers["Content-Encoding"] = "gzip"
    if is_not_modified(request.headers.get("if-none-match", ""), etag):
        return Response(status_code=304, headers=headers)
    key = (digest, gzip)
    cached = state.published.get(key)
    if cached is not None:
        return Response(cached, 200, headers, media_type=JSON)
    return StreamingResponse(_kept_as_sent(state, key, _pieces(library, visible_tags, gzip)), 200, headers,
                             media_type=JSON)


async def etag_digest(state: HostState, library: Library, visible_tags: frozenset[str]) -> str:
    key = (library.name, library.source_key.sha256, visible_tags)
    digest = state.etags.get(key)
    if digest is None:
        digest = await run_in_threadpool(visible_digest, library, visible_tags)
        state.etags[key] = digest
    return digest


def _pieces(library: Library, visible_tags: frozenset[str], gzip: bool) -> AsyncIterator[bytes]:
    """The file exactly as `render_json(publish_library(...))` would be, a few hundred bits at a time."""
    rows = visible_in_file_order(library, visible_tags).tolist()

    def render_bits(start: int, stop: int) -> bytes:
        return b",".join(render_json(result_bit(library.segment, row)) for row in rows[start:stop])

    return streamed_json(library_header(library, len(rows)), len(rows), render_bits, gzip=gzip)


async def _kept_as_sent(state: HostState, key: tuple[str, bool], pieces: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Pass the pieces on; keep the whole body rendered if it turns out small enough to cache."""
    kept: list[bytes] | None = []
    size = 0
    async for piece in pieces:
        if kept is not None:
            size += len(piece)
            if state.published.keeps(size):
                kept.append(piece)
            else:
                kept = None
        yield piece
    if kept is not None:
        state.published.put(key, b"".join(kept))
