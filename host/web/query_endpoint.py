"""`POST /` (SPEC §3): read the arguments from any body type, rank, render, cache."""

from __future__ import annotations

import json
import time
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import Response

from access import Grant
from host.catalog import Catalog, ModelIndex
from host.engine import random_query, rank
from host.web.errors import HTTPError, bad_request
from host.web.query_args import QueryArgs, parse_query_args, query_vector
from host.web.responses import JSON, MSGPACK, render_json, render_msgpack, wants_msgpack
from host.web.caller import bearer_token, cache_headers, host_state
from host.results import build_result
from host.web.state import HostState

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


async def query_endpoint(request: Request) -> Response:
    state = host_state(request)
    started = time.perf_counter()
    args = parse_query_args(
        await read_fields(request, state.settings.max_form_fields),
        max_count=state.settings.max_count,
        max_embedding_bytes=state.settings.max_embedding_bytes,
    )
    token = args.access_token or bearer_token(request)
    grant = state.grant_for(token)
    catalog = state.catalog  # this request's generation, whatever reloads happen meanwhile
    signals_on = state.access.restricted_count or bool(state.access.restricted_message)
    index = choose_model(catalog, args.model, grant, reveal_all=signals_on)
    binary = wants_msgpack(request.headers.get("accept", ""))
    body = await answer(state, catalog, index, args, grant, binary)
    state.metrics.observe_query_seconds(time.perf_counter() - started)
    state.metrics.count("polymath_queries_total", format="msgpack" if binary else "json")
    return Response(body, 200, cache_headers(token), media_type=MSGPACK if binary else JSON)


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


def choose_model(catalog: Catalog, model: str | None, grant: Grant, *, reveal_all: bool = False) -> ModelIndex:
    """The model index to answer from; the host's only one when none is named.

    A model with no bit this caller may see is not revealed to them: not named in errors, not
    answerable, not in the way of the default model. With the opt-in restricted signals on
    (`reveal_all`), it is answered, so the caller can be told that bits were held back.
    """
    models = catalog.models if reveal_all else {
        name: index for name, index in catalog.models.items() if index.visible_count(grant.access_tags)}
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


async def answer(
    state: HostState, catalog: Catalog, index: ModelIndex, args: QueryArgs, grant: Grant, binary: bool
) -> bytes:
    """The rendered result, from the cache when the very same question was asked before."""
    restricted_count, restricted_message = state.access.restricted_count, state.access.restricted_message
    key = None  # a random sample is different every time: never cached
    if args.query_embedding is None:
        vector = random_query(index.dimension)
    else:
        vector = query_vector(args.query_embedding, index.dimension, index.model)
        # Everything the answer depends on, including the caller's grant: callers with
        # different access never share an entry.
        key = (catalog.generation, index.model, vector.tobytes(), args.count, args.count_type, args.omit,
               grant.access_tags, binary, restricted_count, restricted_message)
        cached = state.answers.get(key)
        if cached is not None:
            state.metrics.count("polymath_query_cache_hits_total")
            return cached

    def compute() -> bytes:
        selection = rank(
            index,
            vector,
            granted=grant.access_tags,
            count=args.count,
            count_type=args.count_type,
            count_restricted=restricted_count or bool(restricted_message),
            # `auto` follows the bits this caller may see, so hidden bits never switch the mode.
            search=state.settings.search_for(index.visible_count(grant.access_tags)),
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
    if key is not None:
        state.answers.put(key, body)
    return body
