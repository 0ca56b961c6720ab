"""The HTTP edge: parse arguments, call the engine, render. No ranking logic lives here."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import signal
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

from cachetools import LRUCache
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from access import ANONYMOUS, AccessControl, Grant, TokenRejected
from host import page
from host.catalog import Catalog, ModelIndex, load_catalog
from host.engine import random_query, rank
from host.errors import HTTPError, bad_request
from host.metrics import Metrics
from host.middleware import POLYMATH_LINK, AccessLog, PolymathLinkHeader, RateLimit, RequestBodyGuard
from host.openapi import OPENAPI
from host.query_args import QueryArgs, parse_query_args, query_vector
from host.rendering import JSON, MSGPACK, error_response, render_json, render_msgpack, wants_msgpack
from host.reloader import LibraryWatcher
from host.results import build_result
from host.settings import Settings
from host.static_library import publish_library

log = logging.getLogger("polymath_host")
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def cache_headers(token: str | None, *, revalidate: bool = False) -> dict[str, str]:
    """A response computed with a token is private: no shared cache or CDN may keep it."""
    policy = "no-cache" if revalidate else "no-store"
    return {"Cache-Control": f"private, {policy}" if token else f"public, {policy}", "Vary": "Authorization"}


class HostState:
    """What every request reads: the current catalog generation, access rules and caches."""

    def __init__(self, settings: Settings, catalog: Catalog, access: AccessControl) -> None:
        self.settings = settings
        self.catalog = catalog
        self.access = access
        self.metrics = Metrics()
        self._cache: LRUCache[tuple[Any, ...], bytes] = LRUCache(maxsize=max(1, settings.query_cache_entries))
        self._published: LRUCache[tuple[Any, ...], tuple[bytes, str]] = LRUCache(maxsize=64)
        self._lock = threading.Lock()
        self._describe(catalog)

    def install(self, catalog: Catalog) -> None:
        """Swap in a new generation: requests already running keep the one they read."""
        self.catalog = catalog
        self.metrics.count("polymath_reloads_total")
        self._describe(catalog)

    def subject_of(self, token: str) -> str | None:
        """Who a valid token belongs to; None for an unknown, refused or anonymous one."""
        try:
            return self.access.authorize(token).subject
        except TokenRejected:
            return None

    def tick(self) -> None:
        """Housekeeping between requests: follow the access file even when no token arrives."""
        self.access.reload_if_changed()

    def _describe(self, catalog: Catalog) -> None:
        # /metrics is as public as every other path: it counts only what anyone may see.
        self.metrics.gauge("polymath_public_libraries_loaded", len(catalog.public_libraries()))
        self.metrics.gauge("polymath_public_bits_loaded",
                           sum(library.visible_bit_count(frozenset()) for library in catalog.libraries))
        self.metrics.gauge("polymath_catalog_generation", catalog.generation)
        self.metrics.gauge("polymath_library_problems", len(catalog.problems))

    def cached(self, cache: LRUCache, key: tuple[Any, ...]) -> Any:
        with self._lock:
            return cache.get(key)

    def remember(self, cache: LRUCache, key: tuple[Any, ...], value: Any) -> None:
        with self._lock:
            cache[key] = value


def create_app(settings: Settings, catalog: Catalog | None = None, access: AccessControl | None = None) -> Starlette:
    """The ASGI app. Loads libraries and the access file unless given them already."""
    if catalog is None:
        catalog = load_catalog(settings.libraries, cache_dir=settings.cache_dir, max_bytes=settings.max_library_bytes)
    state = HostState(settings, catalog, access or AccessControl.from_file(settings.access))
    watcher = LibraryWatcher(state, settings.libraries, cache_dir=settings.cache_dir,
                             max_bytes=settings.max_library_bytes, interval=settings.watch_interval)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if settings.watch_interval > 0:
            watcher.start()
            with suppress(NotImplementedError, RuntimeError, ValueError):  # no signals off the main thread
                asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, watcher.request_reload)
        yield
        if settings.watch_interval > 0:
            watcher.stop()

    app = Starlette(
        routes=[
            Route("/", query_endpoint, methods=["POST"]),
            Route("/", home_page, methods=["GET"]),
            Route("/libraries", list_libraries, methods=["GET"]),
            Route("/libraries/{name:path}", library_file, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/openapi.json", openapi, methods=["GET"]),
        ],
        middleware=[
            Middleware(PolymathLinkHeader),
            Middleware(AccessLog, metrics=state.metrics, generation=lambda: state.catalog.generation),
            Middleware(RateLimit, per_second=settings.rate_limit_per_second, burst=settings.rate_limit_burst,
                       subject_of=state.subject_of),
            Middleware(RequestBodyGuard, max_bytes=settings.max_body_bytes, read_timeout=settings.body_read_timeout),
        ],
        lifespan=lifespan,
        exception_handlers={HTTPError: on_refused, HTTPException: on_starlette_error, Exception: on_crash},
    )
    app.state.host = state
    app.state.watcher = watcher
    return app


def app_from_environment() -> Starlette:
    """Factory for `uvicorn --factory` when serving with several workers."""
    import os

    from host.cli import configure_logging  # a worker is a fresh process: log as `serve` does
    if not logging.getLogger("polymath_host.access_log").handlers:
        configure_logging(os.environ.get("POLYMATH_HOST_LOG_LEVEL", "info"))
    return create_app(Settings.from_environment())


def host_state(request: Request) -> HostState:
    return request.app.state.host


# ---- errors -------------------------------------------------------------------------------


async def on_refused(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPError)
    host_state(request).metrics.count("polymath_errors_total", status=str(error.status))
    return error_response(error)


async def on_starlette_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    messages = {404: "there is nothing at this path", 405: f"{request.method} is not allowed on {request.url.path}"}
    return error_response(HTTPError(error.status_code, messages.get(error.status_code, str(error.detail)), error.headers))


async def on_crash(request: Request, error: Exception) -> Response:
    log.exception("internal error on %s %s", request.method, request.url.path)
    # Starlette sends this response from outside every middleware, so PolymathLinkHeader
    # never sees it: the Link header is added here.
    link = {"Link": POLYMATH_LINK.decode()}
    return error_response(HTTPError(500, "the host failed to answer this request; the error is logged", link))


# ---- POST / ----------------------------------------------------------------------------------


async def read_fields(request: Request, max_fields: int) -> dict[str, Any]:
    """The arguments, from a JSON, urlencoded or multipart body (numbers may be strings)."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type == "application/json":
        try:
            fields = json.loads(await request.body())
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise bad_request("the body is not valid JSON") from None
        if not isinstance(fields, dict):
            raise bad_request("the JSON body must be an object of arguments")
        return fields
    if media_type in FORM_TYPES:
        try:
            # `async with` closes uploaded parts' temporary files once they are read.
            async with request.form(max_files=max_fields, max_fields=max_fields) as form:
                return {key: await _field_text(value) for key, value in form.items()}
        except MultiPartException as problem:
            raise bad_request(f"the form body is malformed: {problem.message}") from None
    if not media_type and not await request.body():
        return {}
    raise HTTPError(
        415,
        f"unsupported content type {media_type!r}; send application/json, "
        "application/x-www-form-urlencoded or multipart/form-data",
    )


async def _field_text(value: str | UploadFile) -> str:
    if isinstance(value, str):
        return value
    try:
        return (await value.read()).decode()
    except UnicodeDecodeError:
        raise bad_request(f"form field {value.filename!r} is not UTF-8 text") from None


def bearer_token(request: Request) -> str | None:
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    return credentials.strip() or None if scheme.lower() == "bearer" else None


def authorize(state: HostState, token: str | None) -> Grant:
    if not token:
        return ANONYMOUS
    try:
        return state.access.authorize(token)
    except TokenRejected as rejected:
        raise HTTPError(
            401,
            f"the access token was refused: {rejected.reason}",
            {"WWW-Authenticate": f'Bearer error="invalid_token", error_description="{rejected.reason}"'},
        ) from None


def choose_model(catalog: Catalog, model: str | None, grant: Grant, *, reveal_all: bool = False) -> ModelIndex:
    # A model with no bit this caller may see is not revealed to them: not named in errors, not
    # answerable, not in the way of the default model. With the opt-in restricted signals on
    # (`reveal_all`), it is answered, so the caller can be told that bits were held back.
    models = catalog.models if reveal_all else {
        name: index for name, index in catalog.models.items()
        if (mask := index.visible_rows(grant.access_tags)) is None or mask.any()}
    if model is None:
        if len(models) == 1:
            return next(iter(models.values()))
        if not models:
            raise HTTPError(503, "no libraries are loaded on this host yet")
        raise bad_request(f"query_embedding_model is required: this host serves {', '.join(sorted(models))}")
    if model not in models:
        served = ", ".join(sorted(models)) or "nothing yet"
        raise bad_request(f"query_embedding_model {model!r:.80} is not served here; this host serves {served}")
    return models[model]


async def query_endpoint(request: Request) -> Response:
    state = host_state(request)
    started = time.perf_counter()
    args = parse_query_args(
        await read_fields(request, state.settings.max_form_fields),
        max_count=state.settings.max_count,
        max_embedding_bytes=state.settings.max_embedding_bytes,
    )
    token = args.access_token or bearer_token(request)
    grant = authorize(state, token)
    catalog = state.catalog
    index = choose_model(catalog, args.model, grant,
                         reveal_all=state.access.restricted_count or bool(state.access.restricted_message))
    binary = wants_msgpack(request.headers.get("accept", ""))
    body = await _answer(state, catalog, index, args, grant, binary)
    state.metrics.observe_query_seconds(time.perf_counter() - started)
    state.metrics.count("polymath_queries_total", format="msgpack" if binary else "json")
    return Response(body, 200, cache_headers(token), media_type=MSGPACK if binary else JSON)


async def _answer(
    state: HostState, catalog: Catalog, index: ModelIndex, args: QueryArgs, grant: Grant, binary: bool
) -> bytes:
    restricted_count, restricted_message = state.access.restricted_count, state.access.restricted_message
    if args.query_embedding is None:
        vector = random_query(index.dimension)
        key = None  # a random sample is different every time
    else:
        vector = query_vector(args.query_embedding, index.dimension, index.model)
        # Everything the answer depends on, including the caller's grant: callers with
        # different access never share an entry.
        key = (catalog.generation, index.model, vector.tobytes(), args.count, args.count_type, args.omit,
               grant.access_tags, binary, restricted_count, restricted_message)
        cached = state.cached(state._cache, key)
        if cached is not None:
            state.metrics.count("polymath_query_cache_hits_total")
            return cached

    def compute() -> bytes:
        # `auto` search follows the bits this caller may see, so hidden bits never switch it.
        mask = index.visible_rows(grant.access_tags)
        visible = index.bit_count if mask is None else int(mask.sum())
        selection = rank(
            index,
            vector,
            granted=grant.access_tags,
            count=args.count,
            count_type=args.count_type,
            count_restricted=restricted_count or bool(restricted_message),
            search=state.settings.search_for(visible),
        )
        result = build_result(
            index,
            selection,
            args.omit,
            binary_embeddings=binary,
            restricted_count=restricted_count,
            restricted_message=restricted_message,
        )
        return render_msgpack(result) if binary else render_json(result)

    body = await run_in_threadpool(compute)
    if key is not None and state.settings.query_cache_entries:
        state.remember(state._cache, key, body)
    return body


# ---- GET endpoints ---------------------------------------------------------------------------


def request_grant(request: Request) -> tuple[Grant, str | None]:
    token = request.query_params.get("access_token") or bearer_token(request)
    return authorize(host_state(request), token), token


async def list_libraries(request: Request) -> Response:
    grant, token = request_grant(request)
    catalog = host_state(request).catalog
    listed = []
    for library in catalog.libraries:
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
    published = state.cached(state._published, key)
    if published is None:
        body = await run_in_threadpool(lambda: render_json(publish_library(library, visible_tags)))
        published = (body, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')
        state.remember(state._published, key, published)
    body, etag = published
    headers = {"ETag": etag, **cache_headers(token, revalidate=True)}
    if etag in [tag.strip() for tag in request.headers.get("if-none-match", "").split(",")]:
        return Response(status_code=304, headers=headers)
    return Response(body, 200, headers, media_type=JSON)


async def home_page(request: Request) -> Response:
    state = host_state(request)
    like = request.query_params.get("like")
    html = await run_in_threadpool(page.render_home, state.catalog, like)
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
