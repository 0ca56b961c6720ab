"""OpenAI's vector stores, read-only: each library a caller may see is a vector store named as it is.

    GET  /v1/vector_stores                       the libraries this caller may see (a cursor page)
    GET  /v1/vector_stores/{id}                  one of them
    POST /v1/vector_stores/{id}/search           its best passages for a query

`client.vector_stores.search("sample", query=...)` of the real `openai` package works with an
access token as its API key (`Authorization: Bearer`; none, or an unknown opaque key: public bits
only). The id is the library's name (percent-encoded in the path when it holds "/"); a search may
also name a folder of libraries, and searches every library in it the caller may see, as `POST /`'s
`libraries` does (host/web/library_selection.py). Under `/p/{name}/v1/`, the stores are that name's
libraries alone. Search asks
the query core as `POST /` asks a text query (passages.py): `query` a string or a list of strings
(embedded together, as one text), `max_num_results` bits (1-50, default 10), `filters` through the
one constraint engine (host/constraints/attribute_filter.py). Ranking is hybrid, as OpenAI's file
search is (meaning and keywords fused): `ranking_options.hybrid_search` `{"embedding_weight",
"text_weight"}` (both, as OpenAI's file search tool documents them: weights of a fusion of the two
rankings) set the keywords' share, `text_weight / (embedding_weight + text_weight)`, 0.5 without
them; the score is the fused rank score (0-1, the same in every question: passages.py) and
`ranking_options.score_threshold` (0-1) the least score kept: above the best one's, `data` is
empty. `ranking_options.ranker` (`auto`, `default-2024-11-15`, or `none`: OpenAI's re-ranking on
or off) and `rewrite_query` are accepted and change nothing: this host has no re-ranking model and
rewrites nothing. A result's file is the bits of the library sharing its URL (the document RAGFlow's dialect lists: `file_id`
is "file-" and that document's id), `filename` its URL, `attributes` the bit's info fields with
its library, bit_id and token_count.

A vector store's counts come from the bits the caller may see: `file_counts` their URLs,
`usage_bytes` their stored text and info. The host keeps no creation times (`created_at` 0);
`order=asc` lists in the host's (path) order, `desc` (the default) the reverse. Creating,
modifying or deleting vector stores, their files and file batches, and uploading files are
refused with a 405 in OpenAI's error shape: libraries are published as files on the host.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from host.catalog.selection import BadName
from host.constraints import ConstraintError, parse_attribute_filter
from host.constraints.words import fold
from host.library.json_text import parse_json
from host.search.fusion import DEFAULT_KEYWORD_WEIGHT
from host.web.caller import Caller, request_caller
from host.web.dialects.openai_errors import OpenAIError
from host.web.dialects.passages import Passage, find_passages
from host.web.dialects.ragflow.view import Dataset, dataset_of, document_id, visible_datasets
from host.web.errors import HTTPError
from host.web.library_selection import NoSuchLibrary, choose, reach_of
from host.web.middleware.publisher_prefix import route_path
from host.web.query_args import MAX_QUERY_CHARACTERS
from host.web.responses import JSON, cache_headers, render_json
from host.web.state import host_state

SEARCH_KEYS = ("query", "filters", "max_num_results", "ranking_options", "rewrite_query")
RANKERS = ("auto", "none", "default-2024-11-15")
RANKING_KEYS = ("ranker", "score_threshold", "hybrid_search")
LIST_PARAMETERS = ("limit", "order", "after", "before")
DEFAULT_RESULTS, MAX_RESULTS = 10, 50
DEFAULT_LIMIT, MAX_LIMIT = 20, 100
INFO_KEYS = ("url", "title", "description", "image_url")
READ_ONLY = ("this host serves its libraries read-only, as vector stores it lists, retrieves and searches; "
             "a library is published by putting its file in the host's libraries folder")


REFUSED = "refused"  # the name of a route that only refuses (405): not an operation of this host, nor in its Allow


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/vector_stores", list_vector_stores, methods=["GET"]),
        Route("/v1/vector_stores", unsupported, methods=["POST"], name=REFUSED),
        Route("/v1/vector_stores/{vector_store_id:path}/search", search, methods=["POST"]),
        Route("/v1/vector_stores/{rest:path}", vector_store_path, methods=["GET"]),
        Route("/v1/vector_stores/{rest:path}", unsupported, methods=["POST", "DELETE"], name=REFUSED),
        Route("/v1/files", unsupported, methods=["GET", "POST"], name=REFUSED),
        Route("/v1/files/{rest:path}", unsupported, methods=["GET", "POST", "DELETE"], name=REFUSED),
    ]


def openai_caller(request: Request) -> Caller:
    try:
        return request_caller(request)
    except HTTPError as refused:
        raise OpenAIError(refused.status, refused.message, kind="authentication_error", headers=refused.headers,
                          code="invalid_api_key") from None


def not_found(vector_store_id: str) -> OpenAIError:
    return OpenAIError(404, f"No vector store found with id {vector_store_id!r:.80} (GET /v1/vector_stores lists them)")


# ---- listing ------------------------------------------------------------------------------------


async def list_vector_stores(request: Request) -> Response:
    caller = openai_caller(request)
    params = request.query_params
    for name in params:
        if name not in LIST_PARAMETERS:
            raise OpenAIError(400, f"Unrecognized query parameter {name!r:.40}; this list takes "
                                   f"{', '.join(LIST_PARAMETERS)}", name)
    limit = _integer_parameter(params.get("limit"), "limit", DEFAULT_LIMIT, MAX_LIMIT)
    order = params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise OpenAIError(400, f"order must be 'asc' or 'desc', got {order!r:.40}", "order")
    catalog = host_state(request).catalog
    stores = visible_datasets(catalog, caller.access_tags, reach_of(request.scope, catalog, caller.access_tags))
    if order == "desc":
        stores.reverse()
    ids = [store.library.name for store in stores]
    start, stop = 0, len(stores)
    if params.get("after"):  # a blank cursor, as a form left empty sends it, is no cursor
        start = _cursor(ids, params["after"]) + 1
    if params.get("before"):
        stop = _cursor(ids, params["before"])
    page = stores[start:stop][:limit]
    data = [describe(store) for store in page]
    body = {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": start + len(page) < stop}
    return Response(render_json(body), 200, cache_headers(caller.token, revalidate=True), media_type=JSON)


def _integer_parameter(value: str | None, name: str, default: int, largest: int) -> int:
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = 0
    if not 1 <= number <= largest:
        raise OpenAIError(400, f"{name} must be an integer from 1 to {largest}, got {value!r:.40}", name)
    return number


def _cursor(ids: list[str], value: str) -> int:
    if value not in ids:  # a private library's name is refused exactly as an unknown one
        raise not_found(value)
    return ids.index(value)


async def vector_store_path(request: Request) -> Response:
    """`GET /v1/vector_stores/{id}`; its files and file batches are refused as read-only."""
    rest = request.path_params["rest"]
    if any(part in ("files", "file_batches") for part in rest.split("/")[1:]):
        return await unsupported(request)
    caller = openai_caller(request)
    catalog = host_state(request).catalog
    reach = reach_of(request.scope, catalog, caller.access_tags)
    library = catalog.library(rest)
    store = dataset_of(catalog, library, caller.access_tags, reach) if library is not None else None
    if store is None:
        raise not_found(rest)
    return Response(render_json(describe(store)), 200, cache_headers(caller.token, revalidate=True), media_type=JSON)


def describe(store: Dataset) -> dict[str, Any]:
    """A library as OpenAI's VectorStore object, from the bits this caller may see of it."""
    library, rows = store.library, store.visible_rows
    files = len(store.documents.values)
    offsets = store.segment.record_offsets
    usage = int((offsets[rows + 1] - offsets[rows]).sum())
    return {
        "id": library.name, "object": "vector_store", "created_at": 0, "name": library.name, "usage_bytes": usage,
        "file_counts": {"in_progress": 0, "completed": files, "failed": 0, "cancelled": 0, "total": files},
        "status": "completed", "expires_after": None, "expires_at": None, "last_active_at": None,
        "metadata": {"embedding_model": library.embedding_model, "bits": str(store.chunk_count)},
    }


async def unsupported(request: Request) -> Response:
    openai_caller(request)  # a refused token is still a 401 first, as on every door
    what, allowed = refused_operation(request.method, route_path(request.scope))
    raise OpenAIError(405, f"{what} is not supported: {READ_ONLY}", code="unsupported_operation",
                      headers={"Allow": allowed})


def refused_operation(method: str, path: str) -> tuple[str, str]:
    """What a write operation of OpenAI's API does, in words, and the methods its path allows here."""
    inside = path.removeprefix("/v1/vector_stores").strip("/")
    if path.startswith("/v1/files"):
        return "uploading and managing files", ""
    if "/file_batches" in path:
        return "managing a vector store's file batches", ""
    if "/files" in path:
        return "managing a vector store's files", ""
    if not inside:
        return "creating a vector store", "GET"
    return ("deleting a vector store" if method == "DELETE" else "modifying a vector store"), "GET"


# ---- search -------------------------------------------------------------------------------------


async def search(request: Request) -> Response:
    state = host_state(request)
    caller = openai_caller(request)
    vector_store_id = request.path_params["vector_store_id"]
    catalog = state.catalog
    try:
        libraries = choose(catalog, caller.access_tags, reach_of(request.scope, catalog, caller.access_tags),
                           [vector_store_id], "vector_store_id")
    except BadName as problem:
        raise OpenAIError(400, str(problem), "vector_store_id") from None
    except NoSuchLibrary:
        raise not_found(vector_store_id) from None
    body = _request_object(await request.body())
    queries = _queries(body.get("query"))
    count = body.get("max_num_results", DEFAULT_RESULTS)
    largest = min(MAX_RESULTS, state.settings.max_count)  # a lower --max-count caps it, as it caps POST /
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= largest:
        raise OpenAIError(400, f"max_num_results must be an integer from 1 to {largest}, got {count!r:.40}",
                          "max_num_results")
    threshold, keyword_weight = _ranking_options(body.get("ranking_options"))
    if not isinstance(body.get("rewrite_query", False), bool):
        raise OpenAIError(400, "rewrite_query must be a boolean", "rewrite_query")
    try:
        constraint = parse_attribute_filter(body["filters"]) if body.get("filters") is not None else None
    except ConstraintError as problem:
        raise OpenAIError(400, str(problem), "filters") from None
    question = "\n".join(queries)
    passages = [] if not question.strip() else await find_passages(
        state, caller, libraries, question, count, score_threshold=threshold, constraint=constraint,
        keyword_weight=keyword_weight)
    state.metrics.count("polymath_queries_total", format="openai")
    page = {"object": "vector_store.search_results.page", "search_query": queries,
            "data": [result(passage) for passage in passages], "has_more": False, "next_page": None}
    return Response(render_json(page), 200, cache_headers(caller.token), media_type=JSON)


def _request_object(raw: bytes) -> dict[str, Any]:
    try:
        body = parse_json(raw)
    except ValueError as problem:
        raise OpenAIError(400, f"the body is {problem}: send a JSON object") from None
    if not isinstance(body, dict):
        raise OpenAIError(400, "the body must be a JSON object with a query")
    unknown = sorted(set(body) - set(SEARCH_KEYS))
    if unknown:
        raise OpenAIError(400, f"Unrecognized request argument supplied: {unknown[0]:.40}; a search takes "
                               f"{', '.join(SEARCH_KEYS)}", unknown[0])
    return body


def _queries(value: Any) -> list[str]:
    queries = [value] if isinstance(value, str) else value
    if not isinstance(queries, list) or not queries or not all(isinstance(query, str) for query in queries):
        raise OpenAIError(400, "query is required: a string, or a non-empty list of strings", "query")
    if sum(len(query) for query in queries) > MAX_QUERY_CHARACTERS:
        raise OpenAIError(400, f"query is over {MAX_QUERY_CHARACTERS:,} characters long; at most that many are read",
                          "query")
    return queries


def _ranking_options(options: Any) -> tuple[float, float]:
    """(score_threshold, keyword_weight) from `ranking_options`, checked as OpenAI documents it."""
    if options is None:
        return 0.0, DEFAULT_KEYWORD_WEIGHT
    if not isinstance(options, dict) or set(options) - set(RANKING_KEYS):
        raise OpenAIError(400, f"ranking_options must be an object with {', '.join(RANKING_KEYS)}", "ranking_options")
    if options.get("ranker", "auto") not in RANKERS:
        raise OpenAIError(400, f"ranking_options.ranker must be one of {', '.join(RANKERS)}", "ranking_options.ranker")
    threshold = options.get("score_threshold", 0.0)
    if not _finite(threshold) or not 0 <= threshold <= 1:
        raise OpenAIError(400, f"ranking_options.score_threshold must be a number from 0 to 1, got {threshold!r:.40}",
                          "ranking_options.score_threshold")
    return float(threshold), _keyword_weight(options.get("hybrid_search"))


def _keyword_weight(weights: Any) -> float:
    """The keywords' share of the fused score from OpenAI's `hybrid_search` weights (None: the default)."""
    if weights is None:
        return DEFAULT_KEYWORD_WEIGHT
    param = "ranking_options.hybrid_search"
    if not isinstance(weights, dict) or set(weights) != {"embedding_weight", "text_weight"}:
        raise OpenAIError(400, f"{param} must be an object with embedding_weight and text_weight", param)
    for name in ("embedding_weight", "text_weight"):
        if not _finite(weights[name]) or weights[name] < 0:
            raise OpenAIError(400, f"{param}.{name} must be a number of at least 0, got {weights[name]!r:.40}",
                              f"{param}.{name}")
    total = float(weights["embedding_weight"]) + float(weights["text_weight"])
    if total <= 0:
        raise OpenAIError(400, f"{param}: embedding_weight and text_weight must not both be 0", param)
    return float(weights["text_weight"]) / total


def _finite(value: Any) -> TypeGuard[float]:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def result(passage: Passage) -> dict[str, Any]:
    info = passage.info
    url = info["url"] if isinstance(info.get("url"), str) else ""
    attributes: dict[str, Any] = {key: info[key] for key in INFO_KEYS if isinstance(info.get(key), str)}
    attributes.update(library=passage.library.name, bit_id=passage.bit["id"], token_count=passage.bit["token_count"])
    return {"file_id": f"file-{document_id(passage.library.name, fold(url))}", "filename": url,
            "score": passage.score, "attributes": attributes,
            "content": [{"type": "text", "text": passage.bit["text"]}]}

