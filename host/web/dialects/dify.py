"""Dify's External Knowledge API at `POST /dify/retrieval`: register `<host>/dify` as the endpoint.

    {"knowledge_id": "sample" | "sample,access/team/notes",
     "query": "...", "retrieval_setting": {"top_k": 3, "score_threshold": 0.5},
     "metadata_condition": {"logical_operator": "and", "conditions": [...]}}          (optional)
    -> {"records": [{"content", "score", "title", "metadata": {url, title, ..., library, bit_id, token_count}}]}

`knowledge_id` names a library or a folder of libraries (host/web/library_selection.py), or several
of one embedding model separated by commas; under `/p/{name}/dify/` only that name's. The API
key Dify sends (`Authorization: Bearer <key>`) is an access token of this host; with no
Authorization header the caller is anonymous (public bits only). `passages.find_passages` asks
the query core as `POST /` asks a text query: hybrid (meaning and keywords fused, as Dify's own
knowledge bases search by default), `top_k` bits (at most --max-count), the score the rank score
POST / reports (the fused score, 0-1, the same in every question: see passages.py),
`score_threshold` (0 when Dify's threshold is off) the least score kept: above the best passage's,
`records` is empty, which tells Dify the knowledge base holds nothing on it (0.4 kept 94-99% of
answers to real questions and turned away 96-99% of others in hybrid mode, docs/quality.md), `metadata_condition`
through the one constraint engine (host/constraints/dify_condition.py). `retrieval_setting` may
also hold this host's `mode` ("hybrid", "vector", "keyword") and `keyword_weight` (0-1, hybrid),
as `POST /` takes them: Dify never sends them, but the Python client's `retrieve` does.
`metadata` is always an object, `records` an empty list when nothing matches.

Errors are `{"error_code", "error_msg"}` with a non-200 status (Dify shows any non-200 to the
user): 1001 (401) an Authorization header that is not `Bearer <token>`, 1002 (401) a token that
fails verification, 2001 (404) a knowledge_id naming no library this caller may see (a private
one is refused exactly as one that does not exist). Every other error, here or from another
layer (400 a malformed request, 405, 408, 413, 429, 502-504, a crash's 500), carries its HTTP
status as its error_code (`as_dify_error`, in a DialectErrors middleware on `/dify/`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from starlette.requests import Request
from starlette.responses import Response

from host.catalog.libraries import Library
from host.catalog.selection import BadName
from host.constraints import ConstraintError, Everything, parse_dify_condition
from host.library.json_text import parse_json
from host.search.fusion import DEFAULT_KEYWORD_WEIGHT
from host.search.query import MODES, Mode
from host.web.caller import Caller, request_caller
from host.web.dialects.passages import Passage, find_passages
from host.web.errors import HTTPError
from host.web.library_selection import NoSuchLibrary, choose, reach_of
from host.web.middleware.dialect_errors import error_message, json_object
from host.web.query_args import MAX_QUERY_CHARACTERS
from host.web.responses import JSON, cache_headers, render_json
from host.web.state import HostState, host_state

PREFIX = "/dify/"
MALFORMED_AUTHORIZATION, AUTHORIZATION_FAILED, UNKNOWN_KNOWLEDGE = 1001, 1002, 2001
INFO_KEYS = ("url", "title", "description", "image_url")


class DifyError(Exception):
    """A refusal in Dify's words: its error_code, one sentence, and an HTTP status."""

    def __init__(self, code: int, message: str, status: int = 400, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.status, self.headers = code, message, status, headers or {}


def bad_request(message: str) -> DifyError:
    return DifyError(400, message)


async def retrieval(request: Request) -> Response:
    try:
        return await _retrieval(request)
    except DifyError as refused:
        return Response(render_json({"error_code": refused.code, "error_msg": refused.message}), refused.status,
                        refused.headers, media_type=JSON)


async def _retrieval(request: Request) -> Response:
    state = host_state(request)
    caller = dify_caller(request)
    body = request_object(await request.body())
    libraries = knowledge(request, state, caller, body.get("knowledge_id"))
    query = body.get("query")
    if not isinstance(query, str):
        raise bad_request("query is required: the user's question, a string")
    if len(query) > MAX_QUERY_CHARACTERS:
        raise bad_request(f"query is {len(query):,} characters long; at most {MAX_QUERY_CHARACTERS:,} are read")
    setting = retrieval_setting(body.get("retrieval_setting"), state.settings.max_count)
    try:
        condition = parse_dify_condition(body.get("metadata_condition"))
    except ConstraintError as problem:
        raise bad_request(str(problem)) from None
    passages = [] if not query.strip() else await find_passages(
        state, caller, libraries, query, setting.top_k, score_threshold=setting.score_threshold,
        constraint=None if isinstance(condition, Everything) else condition, mode=setting.mode,
        keyword_weight=DEFAULT_KEYWORD_WEIGHT if setting.keyword_weight is None else setting.keyword_weight)
    state.metrics.count("polymath_queries_total", format="dify")
    return Response(render_json({"records": [record(passage) for passage in passages]}), 200,
                    cache_headers(caller.token), media_type=JSON)


def dify_caller(request: Request) -> Caller:
    """The caller behind Dify's API key (no Authorization header: anonymous), in Dify's error codes."""
    header = request.headers.get("authorization")
    if header is not None:
        scheme, _, credentials = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():
            raise DifyError(MALFORMED_AUTHORIZATION, "Invalid Authorization header format: expected "
                            "'Bearer <api-key>', the key being an access token of this host", 401,
                            {"WWW-Authenticate": "Bearer"})
    try:
        return request_caller(request)
    except HTTPError as refused:
        if refused.status != 401:
            raise
        raise DifyError(AUTHORIZATION_FAILED, f"Authorization failed: {refused.message}", 401,
                        refused.headers) from None


def request_object(raw: bytes) -> dict[str, Any]:
    try:
        body = parse_json(raw)
    except ValueError as problem:
        raise bad_request(f"the body is {problem}: send a JSON object") from None
    if not isinstance(body, dict):
        raise bad_request("the body must be a JSON object with knowledge_id, query and retrieval_setting")
    return body


def knowledge(request: Request, state: HostState, caller: Caller, knowledge_id: Any) -> list[Library]:
    """The libraries `knowledge_id` selects (a name, or several separated by commas, each a library's or
    a folder's), all visible to the caller, within the request's prefix."""
    names = [part.strip() for part in knowledge_id.split(",") if part.strip()] if isinstance(knowledge_id, str) else []
    if not names:
        raise bad_request("knowledge_id is required: a library name, or several separated by commas")
    catalog = state.catalog
    try:
        return choose(catalog, caller.access_tags, reach_of(request.scope, catalog, caller.access_tags), names,
                      "knowledge_id")
    except BadName as problem:
        raise bad_request(str(problem)) from None
    except NoSuchLibrary as problem:
        raise DifyError(UNKNOWN_KNOWLEDGE, f"The knowledge does not exist: {problem} "
                        "(GET /libraries lists them)", 404) from None


@dataclass(frozen=True)
class RetrievalSetting:
    top_k: int
    score_threshold: float
    mode: Mode | None = None  # this host's extension: None is hybrid (keyword where nothing embeds the model)
    keyword_weight: float | None = None  # this host's extension, with hybrid: the keywords' share


def retrieval_setting(value: Any, max_count: int) -> RetrievalSetting:
    """Dify's top_k and score_threshold, checked as Dify documents them, and this host's `mode` and
    `keyword_weight` (which Dify never sends), checked as `POST /` checks them."""
    if not isinstance(value, Mapping):
        raise bad_request("retrieval_setting is required: an object with top_k and score_threshold")
    top_k = value.get("top_k")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= max_count:
        raise bad_request(f"retrieval_setting.top_k must be an integer from 1 to {max_count}, got {top_k!r:.40}")
    threshold = value.get("score_threshold")
    if not _finite(threshold) or not 0 <= threshold <= 1:
        raise bad_request(f"retrieval_setting.score_threshold must be a number from 0 to 1 (0 keeps every "
                          f"passage), got {threshold!r:.40}")
    mode = value.get("mode")
    if mode is not None and mode not in MODES:
        raise bad_request(f"retrieval_setting.mode must be one of {', '.join(MODES)}, got {mode!r:.40}")
    weight = value.get("keyword_weight")
    if weight is not None:
        if not _finite(weight) or not 0 <= weight <= 1:
            raise bad_request(f"retrieval_setting.keyword_weight must be a number from 0 to 1, got {weight!r:.40}")
        if mode not in (None, "hybrid"):
            raise bad_request("retrieval_setting.keyword_weight weighs keywords against meaning: it applies only "
                              "to mode hybrid (the default)")
    return RetrievalSetting(top_k, float(threshold), mode, None if weight is None else float(weight))


def _finite(value: Any) -> TypeGuard[float]:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def record(passage: Passage) -> dict[str, Any]:
    info = passage.info
    metadata = {key: info[key] for key in INFO_KEYS if isinstance(info.get(key), str)}
    metadata.update(library=passage.library.name, bit_id=passage.bit["id"], token_count=passage.bit["token_count"])
    title = info.get("title") if isinstance(info.get("title"), str) and info["title"].strip() else info.get("url", "")
    return {"content": passage.bit["text"], "score": passage.score, "title": title, "metadata": metadata}


def as_dify_error(status: int, body: bytes) -> bytes:
    """An error body made outside the endpoint in Dify's shape (one in that shape already is kept)."""
    parsed = json_object(body)
    if parsed is not None and type(parsed.get("error_code")) is int and isinstance(parsed.get("error_msg"), str):
        return body
    return render_json({"error_code": status, "error_msg": error_message(body, status)})

