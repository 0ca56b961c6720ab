"""The GET endpoints: libraries as static files, the human page, health and metrics, the API."""

from __future__ import annotations

import hashlib

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response

from access import Grant
from host.web import page
from host.web.errors import HTTPError
from host.web.openapi import OPENAPI
from host.web.responses import JSON, render_json
from host.web.caller import bearer_token, cache_headers, host_state
from host.static_library import publish_library


def request_grant(request: Request) -> tuple[Grant, str | None]:
    token = request.query_params.get("access_token") or bearer_token(request)
    return host_state(request).grant_for(token), token


async def list_libraries(request: Request) -> Response:
    """The libraries this caller may see at least one bit of, with the count they may see."""
    grant, token = request_grant(request)
    listed = []
    for library in host_state(request).catalog.libraries:
        visible = library.visible_bit_count(grant.access_tags)
        if visible:
            listed.append({
                "name": library.name,
                "url": f"/libraries/{library.name}.json",
                "embedding_model": library.embedding_model,
                "dimension": library.dimension,
                "bits": visible,
            })
    return Response(render_json({"libraries": listed}), 200, cache_headers(token, revalidate=True), media_type=JSON)


async def library_file(request: Request) -> Response:
    """A library as a static asset: only the bits the caller may see, with an ETag of exactly those."""
    state = host_state(request)
    grant, token = request_grant(request)
    name = request.path_params["name"]
    library = state.catalog.library(name.removesuffix(".json")) if name.endswith(".json") else None
    if library is None or not library.visible_bit_count(grant.access_tags):
        raise HTTPError(404, f"there is no library named {name!r:.80}", cache_headers(token, revalidate=True))
    visible_tags = frozenset(tag for tag in grant.access_tags if tag in library.tags)
    key = (state.catalog.generation, library.name, visible_tags)
    published = state.published.get(key)
    if published is None:
        body = await run_in_threadpool(lambda: render_json(publish_library(library, visible_tags)))
        published = (body, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')
        state.published.put(key, published)
    body, etag = published
    headers = {"ETag": etag, **cache_headers(token, revalidate=True)}
    if etag in [tag.strip() for tag in request.headers.get("if-none-match", "").split(",")]:
        return Response(status_code=304, headers=headers)
    return Response(body, 200, headers, media_type=JSON)


async def home_page(request: Request) -> Response:
    html = await run_in_threadpool(page.render_home, host_state(request).catalog, request.query_params.get("like"))
    return HTMLResponse(html)


async def healthz(request: Request) -> Response:
    return Response(render_json({"status": "ok"}), media_type=JSON)


async def readyz(request: Request) -> Response:
    catalog = host_state(request).catalog
    ready = bool(catalog.libraries)
    body = {"status": "ready" if ready else "no libraries loaded", "generation": catalog.generation,
            "public_libraries": len(catalog.public_libraries())}
    return Response(render_json(body), 200 if ready else 503, media_type=JSON)


async def metrics(request: Request) -> Response:
    return PlainTextResponse(host_state(request).metrics.render(), media_type="text/plain; version=0.0.4")


async def openapi(request: Request) -> Response:
    return Response(render_json(OPENAPI), media_type=JSON)
