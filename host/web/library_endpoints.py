"""`GET /libraries` and `GET /libraries/{name}.json`: what is loaded, and each library as a static file.

`GET /libraries` lists the libraries the caller may see a bit of, in name order (code points), each
with the bits they may see. With nothing asked, all of them, as `{"libraries": [...]}`. `prefix`
keeps the names that start with it; `limit` (1-1000; 100 with only a `cursor`) asks for a page, and the answer then also holds
`next_cursor`: pass it as `cursor` for the next page (null on the last). A cursor is the last name
listed, encoded: the next page starts after it whatever was added or removed meanwhile, and a forged
one tells nothing (it only says where to start). A page starts with a bisection of the catalog's
sorted names (host/catalog/selection.py), so its cost follows the page, not the host. Under
`/p/{name}/`, only that name's libraries, with URLs under the prefix.

A library file is streamed in pieces rendered as they are sent (gzip-compressed when the client
accepts it), so its size never sets the memory a download takes; small ones are also kept
rendered. Its ETag digests exactly the bits the caller may see, so it is known before rendering
and never tells one caller about another's bits.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from host.catalog.generations import Catalog
from host.catalog.libraries import Library
from host.catalog.selection import MAX_NAME_CHARACTERS, starting_with
from host.results.bits import result_bit
from host.results.published import library_header, visible_digest, visible_in_file_order
from host.web.caller import request_caller
from host.web.errors import HTTPError, bad_request
from host.web.library_selection import Reach, reach_of
from host.web.middleware.publisher_prefix import library_href, root_href
from host.web.responses import JSON, accepts_gzip, cache_headers, is_not_modified, render_json, streamed_json
from host.web.state import HostState, host_state

DEFAULT_LIMIT, MAX_LIMIT = 100, 1000
CURSOR_MARK = "n"  # a cursor's first character: which kind of cursor it is, should another ever come


@dataclass(frozen=True)
class Listing:
    """What `GET /libraries` was asked: a name prefix, and a page (a size, where to start) or everything."""

    prefix: str = ""
    limit: int | None = None  # None: every library
    after: str | None = None  # the previous page's last name

    @property
    def paged(self) -> bool:
        return self.limit is not None


async def list_libraries(request: Request) -> Response:
    """The libraries this caller may see at least one bit of, with the count they may see."""
    caller = request_caller(request)
    headers = cache_headers(caller.token, revalidate=True)
    listing = parse_listing(request.query_params)
    state = host_state(request)
    catalog = state.catalog  # this request's generation, whatever reloads happen meanwhile
    reach = reach_of(request.scope, catalog, caller.access_tags, headers)
    entries = iter(visible_libraries(catalog, caller.access_tags, reach, listing.prefix, listing.after))
    if not listing.paged:
        # Every library, as always: kept rendered per generation and grant (10,000 of them take ~30 ms).
        key = ("libraries", catalog.generation, caller.access_tags, reach.name, listing.prefix)
        body = state.answers.get(key)
        if body is None:
            body = await run_in_threadpool(lambda: render_json({"libraries": list(entries)}))
            state.answers.put(key, body)
        return Response(body, 200, headers, media_type=JSON)
    assert listing.limit is not None
    page = [entry for _, entry in zip(range(listing.limit), entries, strict=False)]
    more = next(entries, None) is not None
    cursor = encode_cursor(page[-1]["name"]) if more and page else None
    return Response(render_json({"libraries": page, "next_cursor": cursor}), 200, headers, media_type=JSON)


def parse_listing(params: Mapping[str, str]) -> Listing:
    """`prefix`, `limit` and `cursor`, checked; 400 naming the one that is wrong."""
    prefix = params.get("prefix", "")
    if len(prefix) > MAX_NAME_CHARACTERS or any(ord(character) < 0x20 or ord(character) == 0x7F for character in prefix):
        raise bad_request(f"prefix must be the start of a library name (at most {MAX_NAME_CHARACTERS:,} characters, "
                          f"no control characters), got {prefix[:40]!r}")
    limit = params.get("limit")
    cursor = params.get("cursor")
    if limit is None and cursor is None:
        return Listing(prefix)
    limit = str(DEFAULT_LIMIT) if limit is None else limit
    size = int(limit) if limit.isascii() and limit.isdigit() and len(limit) < 6 else 0
    if not 1 <= size <= MAX_LIMIT:
        raise bad_request(f"limit must be an integer from 1 to {MAX_LIMIT}, got {limit[:40]!r}")
    return Listing(prefix, size, None if cursor is None else decode_cursor(cursor))


def encode_cursor(name: str) -> str:
    """An opaque cursor: the last name of a page."""
    encoded = base64.urlsafe_b64encode(name.encode("utf-8", "surrogatepass")).decode().rstrip("=")
    return CURSOR_MARK + encoded


def decode_cursor(cursor: str) -> str:
    """The name a cursor of `encode_cursor` holds; 400 for anything else."""
    try:
        if not cursor.startswith(CURSOR_MARK) or len(cursor) > 4 * MAX_NAME_CHARACTERS:
            raise ValueError(cursor)
        encoded = cursor[len(CURSOR_MARK):]
        padded = encoded + "=" * (-len(encoded) % 4)
        return base64.b64decode(padded, altchars=b"-_", validate=True).decode("utf-8", "surrogatepass")
    except (ValueError, binascii.Error):
        raise bad_request(f"cursor {cursor[:40]!r} is not one this host gave: pass next_cursor as it came") from None


def visible_libraries(catalog: Catalog, access_tags: frozenset[str], reach: Reach | None = None, prefix: str = "",
                      after: str | None = None) -> Iterator[dict[str, Any]]:
    """`GET /libraries`'s entries (also the MCP `libraries` tool's), in name order: only what a caller
    holding `access_tags` may see, within `reach`, whose names start with `prefix`, after `after`."""
    reach = reach or Reach()
    if reach.name is not None:  # only names that start with the prefix's name can be in it
        if reach.name.startswith(prefix):
            prefix = reach.name
        elif not prefix.startswith(reach.name):
            return
    root = root_href(reach.name)
    for name in starting_with(catalog.names, prefix, after):
        library = catalog.library(name)
        if library is None or (reach.names is not None and name not in reach.names):
            continue
        visible = library.visible_bit_count(access_tags)
        if visible:
            yield {
                "name": library.name,
                "url": library_href(library.name, root),
                "embedding_model": library.embedding_model,
                "dimension": library.dimension,
                "bits": visible,
            }


async def library_file(request: Request) -> Response:
    """A library as a static asset: only the bits the caller may see, with an ETag of exactly those."""
    state = host_state(request)
    caller = request_caller(request)
    name = request.path_params["name"]
    headers = cache_headers(caller.token, revalidate=True)
    reach = reach_of(request.scope, state.catalog, caller.access_tags, headers)
    library = state.catalog.library(name.removesuffix(".json")) if name.endswith(".json") else None
    if library is None or not library.visible_bit_count(caller.access_tags) or not reach.holds(library.name):
        raise HTTPError(404, f"there is no library named {name!r:.80}", headers)
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
