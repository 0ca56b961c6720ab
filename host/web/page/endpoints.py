"""`GET /` (the page) and `GET /libraries/{name}/map.svg`: the thin HTTP layer.

Who asks (the one token reader, `host.web.caller`), the query text embedded (async), the page's
data built and rendered in a worker thread, the caching headers. A page is never cached by a
shared cache when a token came with it (`Cache-Control: private`), and depends on
`Authorization` and `Accept` (`Vary`).

With `serve --sign-in`, the HTML page carries what page.js needs to sign readers in (sign_in.py), and
its Content-Security-Policy lets the script connect to the provider's token endpoint, nothing more.

A refused token (401) on the HTML page is a page too: what anyone may see, with a notice saying
why the token was refused, the status 401 and `WWW-Authenticate`, so page.js can forget it and a
person reads why. Programs asking for JSON get the API's `{"error": ...}` 401.

Under `/p/{name}/` the page is that publisher's (host/web/library_selection.py): its libraries only,
every link under the prefix. A name that selects nothing the caller may see is a 404: a page saying
so for a browser, the API's `{"error": ...}` for a program.
"""

from __future__ import annotations

import secrets

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from access import ANONYMOUS
from host.embedders.errors import EmbedderError, NoEmbedder
from host.web.caller import Caller, caller_for, presented_token, request_caller
from host.web.errors import HTTPError
from host.web.library_selection import reach_of
from host.web.middleware.publisher_prefix import publisher as publisher_of_request
from host.web.middleware.publisher_prefix import root_href
from host.web.middleware.security_headers import content_security_policy
from host.web.page.data import PageInputs, build_library_map, build_page, models_to_search, visible_library
from host.web.page.rendering import page_json, render_map, render_page
from host.web.page.request import MAX_SEED, Notice, parse_page_request
from host.web.responses import JSON, cache_headers, render_json
from host.web.state import host_state

HTML = "text/html; charset=utf-8"
SVG = "image/svg+xml"


def wants_json(accept: str) -> bool:
    """A browser's navigation asks for text/html; a program that asks for JSON gets the page's data."""
    accept = accept.lower()
    return "application/json" in accept and "text/html" not in accept


async def home_page(request: Request) -> Response:
    state = host_state(request)
    as_json = wants_json(request.headers.get("accept", ""))
    token = presented_token(request)
    notices: list[Notice] = []
    status, headers = 200, {}
    try:
        caller = caller_for(state.access, token)
    except HTTPError as refused:
        if as_json:
            raise
        caller = Caller(ANONYMOUS, token)
        notices.append(Notice("error", f"{refused.message[:1].upper()}{refused.message[1:]}. Ask for a new token; "
                                       "until then the page shows what anyone may see."))
        status, headers = refused.status, dict(refused.headers)
    catalog = state.catalog  # this request's generation, whatever reloads happen meanwhile
    publisher = publisher_of_request(request.scope)
    try:
        scope = reach_of(request.scope, catalog, caller.access_tags).names
    except HTTPError as missing:
        if as_json:
            raise HTTPError(missing.status, missing.message, cache_headers(token)) from None
        scope, status = frozenset(), status if status != 200 else missing.status  # a refused token's 401 first
    page_request = parse_page_request(request.query_params, root_href(publisher))
    vectors, failures = {}, {}
    for model in models_to_search(catalog, page_request, caller.grant, scope):
        index = catalog.models[model]
        try:
            vector = await state.embedders.embed_query(model, page_request.query)
        except NoEmbedder:
            continue  # the page says no embedder serves it
        except EmbedderError as failure:
            failures[model] = str(failure)
            continue
        if vector.shape != (index.dimension,):
            failures[model] = f"its embedder gave {vector.shape[-1]} dimensions; its libraries have {index.dimension}"
        else:
            vectors[model] = vector
    inputs = PageInputs(
        catalog=catalog,
        request=page_request,
        grant=caller.grant,
        policy=state.search,
        seed=page_request.seed if page_request.seed is not None else secrets.randbelow(MAX_SEED + 1),
        searchable=frozenset(state.embedders.models),
        vectors=vectors,
        failures=failures,
        notices=tuple(notices),
        token_presented=token is not None,
        projections=state.projections,
        publisher=publisher,
        scope=scope,
        listings=state.listings,
    )

    sign_in = state.sign_in.page() if state.sign_in is not None and not as_json else None

    def rendered() -> bytes:
        data = build_page(inputs)
        return render_json(page_json(data)) if as_json else render_page(data, sign_in).encode()

    body = await run_in_threadpool(rendered)
    headers.update(cache_headers(token))
    headers["Vary"] = "Authorization, Accept"
    if sign_in is not None:  # page.js redeems the sign-in's code at the provider's token endpoint
        headers["Content-Security-Policy"] = content_security_policy(connect=(sign_in.connect_origin,))
    return Response(body, status, headers, media_type=JSON if as_json else HTML)


async def library_map(request: Request) -> Response:
    """A library's map on its own, as image/svg+xml: the bits this caller may see."""
    state = host_state(request)
    caller = request_caller(request)
    name = request.path_params["name"]
    headers = cache_headers(caller.token, revalidate=True)
    scope = reach_of(request.scope, state.catalog, caller.access_tags, headers).names
    library = visible_library(state.catalog, name, caller.grant, scope)
    if library is None:
        raise HTTPError(404, f"there is no library named {name!r:.80}", headers)
    page_request = parse_page_request(request.query_params, root_href(publisher_of_request(request.scope)))

    def rendered() -> bytes:
        drawn = build_library_map(state.catalog, library, caller.grant, page_request, state.projections)
        return render_map(drawn).encode()

    return Response(await run_in_threadpool(rendered), 200, headers, media_type=SVG)
