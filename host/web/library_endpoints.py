"""`GET /libraries` and `GET /libraries/{name}.json`: what is loaded, and each library as a static file."""

from __future__ import annotations

import hashlib

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from host.results import publish_library
from host.web.caller import request_caller
from host.web.errors import HTTPError
from host.web.responses import JSON, cache_headers, is_not_modified, render_json
from host.web.state import host_state


async def list_libraries(request: Request) -> Response:
    """The libraries this caller may see at least one bit of, with the count they may see."""
    caller = request_caller(request)
    listed = []
    for library in host_state(request).catalog.libraries:
        visible = library.visible_bit_count(caller.access_tags)
        if visible:
            listed.append({
                "name": library.name,
                "url": f"/libraries/{library.name}.json",
                "embedding_model": library.embedding_model,
                "dimension": library.dimension,
                "bits": visible,
            })
    headers = cache_headers(caller.token, revalidate=True)
    return Response(render_json({"libraries": listed}), 200, headers, media_type=JSON)


async def library_file(request: Request) -> Response:
    """A library as a static asset: only the bits the caller may see, with an ETag of exactly those."""
    state = host_state(request)
    caller = request_caller(request)
    name = request.path_params["name"]
    library = state.catalog.library(name.removesuffix(".json")) if name.endswith(".json") else None
    if library is None or not library.visible_bit_count(caller.access_tags):
        raise HTTPError(404, f"there is no library named {name!r:.80}", cache_headers(caller.token, revalidate=True))
    visible_tags = frozenset(tag for tag in caller.access_tags if tag in library.tags)
    key = (state.catalog.generation, library.name, visible_tags)
    published = state.published.get(key)
    if published is None:
        body = await run_in_threadpool(lambda: render_json(publish_library(library, visible_tags)))
        published = (body, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')
        state.published.put(key, published)
    body, etag = published
    headers = {"ETag": etag, **cache_headers(caller.token, revalidate=True)}
    if is_not_modified(request.headers.get("if-none-match", ""), etag):
        return Response(status_code=304, headers=headers)
    return Response(body, 200, headers, media_type=JSON)
