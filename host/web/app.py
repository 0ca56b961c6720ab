"""The ASGI app: routes, middleware, error handlers and the library watcher, put together.

Data flows one way: files -> compiled store -> engine -> response. The endpoints only parse
arguments, ask the query core and render; errors become `{"error": ...}` here, at the edge.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from functools import partial

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route

from access import AccessControl
from host.catalog.generations import Catalog, catalog_as_planned, load_catalog
from host.catalog.reloader import LibraryWatcher
from host.embedders.errors import EmbedderError, NoEmbedder
from host.embedders.service import Embedders, build_embedders
from host.search.errors import NothingLoaded, QueryError
from host.service.allocator import limit_malloc_arenas, release_free_memory
from host.service.process import LOG_LEVEL_VARIABLE, configure_logging, configure_scans, limit_blas_threads, own_memory
from host.service.settings import Settings
from host.service.sources import Sources, open_sources
from host.store.residency import mapped_bytes
from host.web.caller import verified_subject
from host.web.dialects import dify, mcp_server, openai_embeddings, openai_errors, openai_vector_stores, ragflow
from host.web.errors import HTTPError, from_core
from host.web.library_endpoints import library_file, list_libraries
from host.web.middleware import (
    AccessLog,
    CrossOrigin,
    DialectErrors,
    IssuerKeysReady,
    PolymathLinkHeader,
    PublisherPrefix,
    RateLimit,
    RefusedPrefix,
    RequestBodyGuard,
    SecurityHeaders,
    TokensOutOfURLs,
    parse_cors_origins,
)
from host.web.middleware.link_header import polymath_link
from host.web.middleware.publisher_prefix import route_path
from host.web.middleware.security_headers import SECURITY_HEADERS
from host.web.page.endpoints import home_page, library_map
from host.web.page.rendering import STATIC_PREFIX, StaticAssets
from host.web.page.sign_in import SignIn, sign_in_config
from host.web.query_endpoint import query_endpoint
from host.web.responses import error_response
from host.web.server import drain_on_sigterm, prepare_worker
from host.web.service_endpoints import healthz, metrics, openapi, readyz
from host.web.state import HostState, host_state

log = logging.getLogger("polymath_host")

ROUTES = [
    Route("/", query_endpoint, methods=["POST"]),
    Route("/", home_page, methods=["GET"]),
    Route("/libraries", list_libraries, methods=["GET"]),
    Route("/libraries/{name:path}/map.svg", library_map, methods=["GET"]),  # before the files: a name may hold "/"
    Route("/libraries/{name:path}", library_file, methods=["GET"]),
    Route("/healthz", healthz, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
    Route("/metrics", metrics, methods=["GET"]),
    Route("/openapi.json", openapi, methods=["GET"]),
    Route("/v1/embeddings", openai_embeddings.embeddings, methods=["POST"]),
    *openai_vector_stores.routes(),
    Route("/dify/retrieval", dify.retrieval, methods=["POST"]),
    Mount(STATIC_PREFIX, app=StaticAssets()),
]


def create_app(settings: Settings, catalog: Catalog | None = None, access: AccessControl | None = None,
               embedders: Embedders | None = None, sources: Sources | None = None, *, as_planned: bool = False) -> Starlette:
    """The ASGI app. Loads libraries, the access file and the embedders unless given them already
    (ValueError for contradictory embedder settings or a malformed --cors-origin; StartRefused for
    sources that cannot be opened). A replica's mirror is read as it is: its watcher syncs it."""
    cors = parse_cors_origins(settings.cors_origin)
    sources = sources or open_sources(settings)
    settings = sources.settings
    if catalog is None:
        load = catalog_as_planned if as_planned else load_catalog
        catalog = load(sources.root, cache_dir=sources.compiled_dir, max_bytes=settings.max_library_bytes,
                       digests=sources.digests())
    if sources.replica is not None:
        sources.replica.serving = sources.replica.current()  # what the catalog was just loaded from
    if embedders is None:
        embedders = embedders_for(settings, catalog)
    state = HostState(settings, catalog, access or AccessControl.from_file(sources.access_file), embedders)
    state.origins = sources
    state.sign_in = sign_in_for(settings)
    watcher = LibraryWatcher(state, sources.root, cache_dir=sources.compiled_dir,
                             max_bytes=settings.max_library_bytes, interval=settings.watch_interval,
                             also_each_poll=partial(state.access.reload_if_changed, force=True), replica=sources.replica,
                             access_follower=sources.access_follower)

    # None without the `mcp` extra: /mcp then answers 501. Pages of the origins listed with
    # --cors-origin may use it as well as loopback ones (never any origin, even with `*`).
    mcp = mcp_server.lazy_endpoint(state, sorted(cors.origins))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if settings.watch_interval > 0:
            watcher.start()
            with suppress(NotImplementedError, RuntimeError, ValueError):  # no signals off the main thread
                asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, watcher.request_reload)
        # Before the first request (uvicorn listens once startup is over): the first text query does not
        # wait for a model, a worker answers with the memory it will keep (a model is ~160 MB: loaded
        # after /healthz, it once looked like growth under load), and loading's leftovers go back.
        loading = state.embedders.start_loading()
        await asyncio.gather(*map(asyncio.wrap_future, loading), return_exceptions=True)
        release_free_memory()
        log.info("%s", memory_line(state, with_embedder=bool(loading)))
        drain_on_sigterm(settings.drain_seconds)
        async with mcp_server.running(mcp):
            yield
        if settings.watch_interval > 0:
            watcher.stop()
        state.embedders.close()

    app = Starlette(
        routes=[*ROUTES, *ragflow.routes(), *mcp_server.routes(mcp)],
        middleware=[
            Middleware(PublisherPrefix),  # first: every other layer sees /p/{name}/'s paths as the host's own
            Middleware(PolymathLinkHeader),
            Middleware(ragflow.RAGFlowEnvelope),  # under /api/v1/, every answer in RAGFlow's envelope
            Middleware(DialectErrors, prefix=openai_errors.PREFIX, rewrite=openai_errors.as_openai_error),
            Middleware(DialectErrors, prefix=dify.PREFIX, rewrite=dify.as_dify_error),
            Middleware(AccessLog, metrics=state.metrics, generation=lambda: state.catalog.generation),
            # Outside the rate limit and the body guard: their refusals carry CORS headers too, and a
            # preflight (answered there, doing no work) never spends a client's requests.
            Middleware(CrossOrigin, policy=cors),
            Middleware(SecurityHeaders),
            Middleware(TokensOutOfURLs),  # every door, before anything reads the request
            Middleware(IssuerKeysReady, access=lambda: state.access),  # a provider's new keys, before the rate limit
            Middleware(RateLimit, per_second=settings.rate_limit, burst=settings.rate_burst,
                       subject_of=partial(verified_subject, state.access)),
            Middleware(RequestBodyGuard, max_bytes=settings.max_body_bytes, read_timeout=settings.body_read_timeout),
            Middleware(RefusedPrefix),  # last: a refused /p/ name's 400, shaped by every layer above
        ],
        lifespan=lifespan,
        exception_handlers={
            HTTPError: on_refused,
            openai_errors.OpenAIError: on_openai_refused,
            QueryError: on_core_refusal,
            NothingLoaded: on_core_refusal,
            NoEmbedder: on_core_refusal,
            EmbedderError: on_core_refusal,
            HTTPException: on_starlette_error,
            Exception: on_crash,
        },
    )
    app.state.host = state
    app.state.cors = cors
    app.state.watcher = watcher
    return app


def sign_in_for(settings: Settings) -> SignIn | None:
    """The page's sign-in `serve --sign-in` asks for (ValueError for options that do not fit together)."""
    config = sign_in_config(settings.sign_in, settings.sign_in_client, settings.sign_in_scope,
                            settings.sign_in_parameters, settings.sign_in_token)
    return SignIn(config) if config is not None else None


def embedders_for(settings: Settings, catalog: Catalog) -> Embedders:
    """The embedders `serve` was told to keep; an HTTP one learns its dimension from its model's libraries."""
    library_model = settings.embedder_library_model or (
        f"openai.com:{settings.embedder_model}" if settings.embedder_model else None)
    return build_embedders(settings.embedder, settings.embedder_url, settings.embedder_model,
                           settings.embedder_library_model, catalog.dimension_of(library_model) if library_model else None,
                           timeout=settings.embedder_timeout, precision=settings.embedder_precision,
                           device=settings.embedder_device)


def memory_line(state: HostState, *, with_embedder: bool) -> str:
    """What this serving process costs in memory of its own, and what it shares with every other worker."""
    shared = sum(mapped_bytes(segment) for segment in state.catalog.segments)
    return (f"process {os.getpid()} serving: {own_memory() / 2**20:,.0f} MiB of memory of its own (anonymous "
            f"memory and page tables{', with its embedder' if with_embedder else ''}); the libraries' "
            f"{shared / 2**20:,.0f} MiB of memory maps are shared by every worker")


def app_from_environment() -> Starlette:
    """Factory for `uvicorn --factory` when serving with several workers: set up as `serve` does."""
    limit_malloc_arenas()
    configure_logging(os.environ.get(LOG_LEVEL_VARIABLE, "info"))
    settings = Settings.from_environment()
    limit_blas_threads(settings.blas_threads)
    configure_scans(settings.scan_threads, settings.max_batch)
    app = create_app(settings, as_planned=True)  # serve's first process has just brought the plan up to date
    log.debug("%s", prepare_worker(settings))  # once its libraries are open: serve said the same for them all
    return app


async def on_refused(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPError)
    host_state(request).metrics.count("polymath_errors_total", status=str(error.status))
    return error_response(error)


async def on_openai_refused(request: Request, error: Exception) -> Response:
    assert isinstance(error, openai_errors.OpenAIError)
    host_state(request).metrics.count("polymath_errors_total", status=str(error.status))
    return openai_errors.openai_error_response(error)


async def on_core_refusal(request: Request, error: Exception) -> Response:
    return await on_refused(request, from_core(error))


async def on_starlette_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    messages = {404: "there is nothing at this path", 405: f"{request.method} is not allowed on {request.url.path}"}
    headers = dict(error.headers or {})
    if error.status_code == 405:  # every method of the path: `/` is two routes (GET the page, POST a query)
        headers["Allow"] = allowed_methods(request.app.router.routes, route_path(request.scope)) or headers.get("Allow", "")
    return error_response(HTTPError(error.status_code, messages.get(error.status_code, str(error.detail)), headers))


def allowed_methods(routes: list[BaseRoute], path: str) -> str:
    """The methods of the resource at `path`, as an Allow header says them: those of the most specific
    routes matching it (`/v1/vector_stores/{id}/search` before `/v1/vector_stores/{rest:path}`), leaving
    out routes that only refuse (OpenAI's write operations)."""
    matching = [route for route in routes if isinstance(route, Route) and route.methods
                and route.name != openai_vector_stores.REFUSED and route.path_regex.fullmatch(path)]
    literal = {id(route): len(re.sub(r"{[^}]*}", "", route.path)) for route in matching}
    most = max(literal.values(), default=0)
    methods: set[str] = set()
    for route in matching:
        if literal[id(route)] == most:
            methods |= route.methods or set()
    order = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
    return ", ".join(sorted(methods, key=lambda method: (order.index(method) if method in order else len(order), method)))


async def on_crash(request: Request, error: Exception) -> Response:
    log.exception("internal error on %s %s", request.method, request.url.path)
    # Starlette sends this response from outside every middleware, so PolymathLinkHeader and
    # CrossOrigin never see it: their headers are added here.
    headers = {"Link": polymath_link(request.scope).decode(), **SECURITY_HEADERS,
               **request.app.state.cors.headers_for(request.headers.get("origin"))}
    return error_response(HTTPError(500, "the host failed to answer this request; the error is logged", headers))
