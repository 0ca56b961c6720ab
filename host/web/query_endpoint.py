"""`POST /` (SPEC §3): read the arguments, ask the query core, render, cache.

The answer is a version-1 library as JSON, as MessagePack (`Accept: application/msgpack`) or as a
ready-to-paste context block (`Accept: text/plain`, host/web/context_block.py): the same bits
under the same budget rules in each.

A query that reads little (a cluster scan or a small exact scan, a small budget, no constraint) is
answered on the event loop's own thread: handing it to a worker thread and back costs two thread
wake-ups, ~0.3 ms on an idle machine and more on a busy one, which is as long as the search itself.
Anything larger goes to a worker thread, so the loop keeps serving others meanwhile (and exact
queries can share scans, host/search/batching.py).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Literal, overload

import numpy as np
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Scope

from host.catalog.generations import Catalog
from host.catalog.model_index import ModelIndex
from host.catalog.selection import BadName
from host.embedders.errors import EmbedderError
from host.library.omit import parse_omit
from host.results.answers import build_result, estimated_answer_bytes, result_header
from host.results.bits import selection_bits
from host.search.batching import BATCHER
from host.search.engine import Search, Selection, random_query
from host.search.fusion import DEFAULT_KEYWORD_WEIGHT
from host.search.keywords import weigh
from host.search.query import Mode, Query, choose_model, run_query
from host.web.caller import Caller, keys_ready, request_caller
from host.web.context_block import TEXT_PLAIN, render_context_block
from host.web.errors import bad_request
from host.web.library_selection import (
    NoSuchLibrary,
    choose,
    in_reach,
    one_model,
    reach_of,
    refusal,
    with_held_back,
)
from host.web.query_args import QueryArgs, parse_query_args, query_vector
from host.web.request_body import read_fields
from host.web.responses import (
    JSON,
    MSGPACK,
    AnswerFormat,
    ChunkedResponse,
    answer_format,
    cache_headers,
    render_json,
    render_msgpack,
    streamed_json,
)
from host.web.state import HostState, host_state

STREAM_FROM_BYTES = 1 << 20  # larger JSON answers are rendered as they are sent
MEDIA_TYPES: dict[AnswerFormat, str] = {"json": JSON, "msgpack": MSGPACK, "text": TEXT_PLAIN}
CONTEXT_BLOCK_KEYS = parse_omit("embedding")  # a context block shows text and info, whatever `omit` says
INLINE_FLOATS = 1 << 22  # vector values a query may read on the event loop's thread (16 MB: ~1 ms of scan)
INLINE_BITS = 64  # bits a query so answered may ask for...
INLINE_TOKENS = 4096  # ...or tokens
# Postings a keyword (or hybrid) query may have on the loop's thread: the block-max search reads a
# fraction of them (1M verses, three terms of 150-300k postings each: 0.1-2 ms; host/keywords/top.py).
INLINE_POSTINGS = 1 << 20
INLINE_CHOSEN_ROWS = 4096  # rows of the libraries a query chooses, at most, for it to be answered inline


async def query_endpoint(request: Request) -> Response:
    state = host_state(request)
    started = time.perf_counter()
    args = parse_query_args(
        await read_fields(request, state.settings.max_form_fields),
        max_count=state.settings.max_count,
        max_embedding_bytes=state.settings.max_embedding_bytes,
    )
    if args.access_token:  # a Bearer token's issuer keys were made ready by the IssuerKeysReady middleware
        await keys_ready(state.access, args.access_token)
    caller = request_caller(request, args.access_token)
    catalog = state.catalog  # this request's generation, whatever reloads happen meanwhile
    index, libraries = model_and_libraries(request.scope, catalog, args, caller, state.access.signals_on)
    form = answer_format(request.headers.get("accept", ""))
    body = await answer(state, catalog, index, args, caller, form, libraries, stream_large=True)
    state.metrics.observe("polymath_query_seconds", time.perf_counter() - started)
    state.metrics.count("polymath_queries_total", format=form)
    headers, media_type = cache_headers(caller.token), MEDIA_TYPES[form]
    if isinstance(body, bytes):
        return ChunkedResponse(body, 200, headers, media_type=media_type)
    return StreamingResponse(body, 200, headers, media_type=media_type)


def model_and_libraries(scope: Scope, catalog: Catalog, args: QueryArgs, caller: Caller,
                        signals_on: Callable[[str | None], bool]) -> tuple[ModelIndex, frozenset[str] | None]:
    """The model index to answer from and the libraries to narrow to (None: every library): the
    request's `/p/{name}/` prefix and its `libraries`, resolved for this caller
    (host/web/library_selection.py). With neither, the host's one model or the one named.

    Where the publisher holding the selection tells readers what was held back (`signals_on` of its
    folder: its access file's `restricted` signals), the answer is narrowed to every library the
    names select, those without a bit the caller may see too, so that their bits are counted."""
    reach = reach_of(scope, catalog, caller.access_tags)
    try:
        chosen = in_reach(catalog, reach) if args.libraries is None else choose(
            catalog, caller.access_tags, reach, args.libraries, "library name in libraries")
    except (BadName, NoSuchLibrary) as problem:
        raise refusal(problem) from None
    if chosen is None:
        return choose_model(catalog, args.model, caller.grant, reveal_all=signals_on(None)), None
    model = one_model(chosen, args.model)
    names = frozenset(library.name for library in chosen if library.embedding_model == model)
    if signals_on(None) or signals_on(access_scope_of(catalog, names)):
        every = with_held_back(catalog, reach, args.libraries)
        if signals_on(access_scope_of(catalog, frozenset(library.name for library in every))):
            names = frozenset(library.name for library in every if library.embedding_model == model)
    return catalog.models[model], names


def access_scope_of(catalog: Catalog, libraries: frozenset[str] | None) -> str | None:
    """The publisher folder holding every library of an answer narrowed to `libraries`, if one does
    (its access file's `restricted` signals are then the answer's: host/web/access_rules.py)."""
    if not libraries:
        return None
    scopes = {library.scope for name in libraries if (library := catalog.library(name)) is not None}
    return scopes.pop() if len(scopes) == 1 else None


def check_answer_size(size: int, limit: int) -> None:
    if size > limit:
        raise bad_request(f"this answer would be about {size:,} bytes, over this host's {limit:,}-byte limit: "
                          "ask for a smaller count, or omit embedding")


@overload
async def answer(state: HostState, catalog: Catalog, index: ModelIndex, args: QueryArgs, caller: Caller,
                 form: AnswerFormat = ..., libraries: frozenset[str] | None = ..., *,
                 stream_large: Literal[False] = ...) -> bytes: ...


@overload
async def answer(state: HostState, catalog: Catalog, index: ModelIndex, args: QueryArgs, caller: Caller,
                 form: AnswerFormat = ..., libraries: frozenset[str] | None = ..., *,
                 stream_large: bool) -> bytes | AsyncIterator[bytes]: ...


async def answer(
    state: HostState, catalog: Catalog, index: ModelIndex, args: QueryArgs, caller: Caller, form: AnswerFormat = "json",
    libraries: frozenset[str] | None = None, *, stream_large: bool = False,
) -> bytes | AsyncIterator[bytes]:
    """The rendered result, from the cache when the very same question was asked before.

    `libraries` narrows the answer to those libraries (the MCP tool's `library`). With
    `stream_large`, a JSON answer of more than STREAM_FROM_BYTES comes as pieces rendered as they
    are sent (and is not cached): a client reading slowly then holds a few bits, not the answer."""
    restricted_count, restricted_message = state.access.restricted_for(access_scope_of(catalog, libraries))
    key = None  # a random sample is different every time: never cached
    mode: Mode = args.effective_mode
    notes: tuple[str, ...] = ()
    if args.mode is None and mode == "hybrid" and index.model not in state.embedders:
        mode, notes = "keyword", (f"no embedder serves {index.model} here: ranked by keywords alone",)
    vector = await query_vector_of(state, index, args, mode)
    if args.query is not None or args.query_embedding is not None:
        # Everything the answer depends on, including the caller's grant: callers with
        # different access never share an entry. `notes`: keyword mode asked for says nothing, the
        # default turned keyword (no embedder) says so.
        key = (catalog.generation, index.model, b"" if vector is None else vector.tobytes(), args.query, mode, notes,
               args.keyword_weight, args.count, args.count_type, args.omit, args.similarity_threshold,
               args.score_threshold, args.constraint,
               libraries, caller.access_tags, form, restricted_count, restricted_message)
        cached = state.answers.get(key)
        if cached is not None:
            state.metrics.count("polymath_query_cache_hits_total")
            cached_body: bytes = cached
            return cached_body

    limit = state.settings.max_answer_bytes

    omit = CONTEXT_BLOCK_KEYS if form == "text" else args.omit

    def compute() -> bytes | Selection:
        query = Query(vector, args.count, args.count_type, args.similarity_threshold, args.constraint, libraries,
                      text=args.query, mode=mode, keyword_weight=DEFAULT_KEYWORD_WEIGHT if args.keyword_weight is None
                      else args.keyword_weight, score_threshold=args.score_threshold)
        selection = run_query(index, query, caller.grant, state.search,
                              count_restricted=restricted_count or bool(restricted_message), search=search)
        if notes:
            selection = replace(selection, notes=(*notes, *selection.notes))
        if key is None:
            selection = replace(selection, best_score=None)  # a random sample: no question to be sure of
        binary = form == "msgpack"
        estimate = estimated_answer_bytes(index, selection, omit, binary_embeddings=binary)
        check_answer_size(estimate, limit)
        if stream_large and form == "json" and estimate > STREAM_FROM_BYTES:
            return selection
        if form == "text":
            body = render_context_block(selection_bits(index, selection, omit)).encode()
        else:
            result = build_result(index, selection, omit, binary_embeddings=binary, restricted_count=restricted_count,
                                  restricted_message=restricted_message)
            body = render_msgpack(result) if binary else render_json(result)
        check_answer_size(len(body), limit)
        return body

    search = state.search.for_index(index, caller.access_tags)
    inline = runs_inline(index, args, search, libraries) if mode != "keyword" else small(args, libraries, index)
    if inline and mode != "vector" and libraries is None:  # a few chosen rows are scored, not the postings read
        assert args.query is not None
        inline = weigh(index, args.query, caller.access_tags).postings <= INLINE_POSTINGS
    computed = compute() if inline else await run_in_threadpool(compute)
    if isinstance(computed, Selection):
        selection = computed

        def render_bits(start: int, stop: int) -> bytes:
            return b",".join(render_json(bit) for bit in selection_bits(index, selection, omit, start=start, stop=stop))

        header = result_header(index, selection, omit, restricted_count=restricted_count,
                               restricted_message=restricted_message)
        return streamed_json(header, len(selection.rows), render_bits)
    if key is not None:
        state.answers.put(key, computed)
    return computed


async def query_vector_of(state: HostState, index: ModelIndex, args: QueryArgs, mode: Mode) -> np.ndarray | None:
    """The query's vector: the one sent, the text embedded, or a random one (a sample). A keyword
    query embeds its text only when a similarity threshold needs similarities."""
    if args.query_embedding is not None:
        return query_vector(args.query_embedding, index.dimension, index.model)
    if args.query is not None:
        if mode == "keyword" and args.similarity_threshold is None:
            return None
        return await embedded(state, index, args.query)
    return random_query(index.dimension)


async def embedded(state: HostState, index: ModelIndex, text: str) -> np.ndarray:
    """`text` embedded by the embedder of `index`'s model, the same way at every door; EmbedderError
    (502) when that embedder's vectors do not have the libraries' dimension."""
    vector = await state.embedders.embed_query(index.model, text)
    if vector.shape != (index.dimension,):
        raise EmbedderError(f"the embedder of {index.model} gave {vector.shape[-1]} dimensions; "
                            f"its libraries have {index.dimension}")
    return vector


def small(args: QueryArgs, libraries: frozenset[str] | None, index: ModelIndex) -> bool:
    """A small budget and no constraint, and no library list unless its libraries are small: what
    every query answered inline has."""
    if libraries is not None and chosen_rows(index, libraries) > INLINE_CHOSEN_ROWS:
        return False
    return args.constraint is None and args.count <= (INLINE_BITS if args.count_type == "bit" else INLINE_TOKENS)


def chosen_rows(index: ModelIndex, libraries: frozenset[str]) -> int:
    return sum(index.libraries[position].bit_count for position in index.positions_of(libraries))


def runs_inline(index: ModelIndex, args: QueryArgs, search: Search, libraries: frozenset[str] | None) -> bool:
    """Whether a query reads so little that it is answered on the event loop's thread: a small budget,
    no constraint, and a cluster scan (the centroids, then at least `probes` clusters and `oversample`
    rows) or an exact scan too small to share passes, of at most INLINE_FLOATS values; or a few small
    libraries chosen among many (their rows gathered and scored, at most INLINE_CHOSEN_ROWS)."""
    if not small(args, libraries, index):
        return False
    if libraries is not None:
        return True
    if search.approximate and index.clusters is not None:
        table = index.clusters
        loose = sum(stop - start for start, stop in table.loose)
        rows = table.count + max(search.probes * index.bit_count // table.count, search.oversample) + loose
    elif not search.approximate and index.bit_count < BATCHER.batch_from:
        rows = index.bit_count
    else:
        return False
    return rows * index.dimension <= INLINE_FLOATS
