"""The MCP server's tools, `search` and `libraries`, on the official `mcp` package (2.x).

Imported only by `mcp_server.build`, so the `mcp` package is needed only where /mcp is served.

- `search` asks what `POST /` asks, through the same code (`query_args.parse_query_args`, the
  query core, the answer cache): its structured result is exactly `POST /`'s JSON answer for the
  same arguments (default `omit`: no embeddings), and its text is that answer as a context block
  (host/web/context_block.py), the form a model reads best, with numbered sources. `library`
  narrows the answer to one library or the libraries of a folder, as `POST /`'s `libraries` does
  (and picks their model). `mode` and `keyword_weight` are
  `POST /`'s: hybrid by default (meaning and keywords fused), `vector` or `keyword` alone; an
  agent looking for a name, a number or an identifier does best with `keyword`. `score_threshold`
  is `POST /`'s too: an empty answer above it tells an agent the libraries hold nothing on it.
- `libraries` lists what `GET /libraries` lists.

Under `/p/{name}/mcp`, both reach only that name's libraries (host/web/library_selection.py).

Each call is judged by the `Authorization: Bearer` token of the HTTP request carrying it, read
through host/web/caller.py (a token that fails verification never gets here: mcp_server's guard
answers it with a 401). Refusals are `ToolError`s with the same one-line messages as `POST /`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request

from host.embedders.errors import EmbedderError, NoEmbedder
from host.search.errors import NothingLoaded, QueryError
from host.web.caller import request_caller
from host.web.context_block import render_context_block
from host.web.errors import HTTPError
from host.web.library_endpoints import visible_libraries
from host.web.library_selection import reach_of
from host.web.middleware.publisher_prefix import publisher
from host.web.query_args import parse_query_args
from host.web.query_endpoint import answer, model_and_libraries
from host.web.state import host_state

INSTRUCTIONS = ("Search the text libraries this host serves. `search` returns the passages most relevant to a "
                "question, best first, within a budget of tokens or passages, each with its source URL; "
                "`libraries` lists what can be searched.")
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


class Info(BaseModel):
    model_config = ConfigDict(extra="allow")
    url: str
    title: str | None = None
    description: str | None = None
    image_url: str | None = None


class Bit(BaseModel):
    id: str
    text: str
    token_count: int
    similarity: float | None = Field(None, description="cosine similarity to the query (absent: a keyword "
                                                           "query ranked without its vector)")
    score: float | None = Field(None, description="the rank score, 0-1, the same in every query (keyword: "
                                                  "min(1, BM25 / the query's norm); hybrid: the fused score), "
                                                  "when the bits are not ranked by similarity")
    info: Info


class SearchResult(BaseModel):
    """`POST /`'s answer: a version-1 library of the best bits."""

    version: int
    embedding_model: str
    omit: str | list[str]
    sort: str
    details: dict[str, Any]
    bits: list[Bit]


class Library(BaseModel):
    name: str
    url: str = Field(description="where the library is published as a file on this host")
    embedding_model: str
    dimension: int
    bits: int = Field(description="bits of it you may see")


class LibrariesResult(BaseModel):
    libraries: list[Library]


def _request(context: Context) -> Request:
    request = context.request_context.request
    if not isinstance(request, Request):
        raise ToolError("this tool is served over HTTP only")
    return request


async def search(
    context: Context,
    query: Annotated[str, Field(description="What to look for, in plain words.")],
    count: Annotated[int, Field(description="The budget: tokens (count_type token) or bits (count_type bit).")] = 1000,
    count_type: Annotated[Literal["token", "bit"], Field(description="What count counts.")] = "token",
    library: Annotated[str | None, Field(description="Only this library, or the libraries in this folder (a name "
                                                     "from the libraries tool, or a folder of them).")] = None,
    similarity_threshold: Annotated[float | None, Field(
        description="Only bits at least this similar (cosine) to the query.")] = None,
    score_threshold: Annotated[float | None, Field(
        description="Only bits whose score (0-1, the same in every query; vector: the similarity) reaches "
                    "this: above every bit's, the answer is empty, which says the libraries hold nothing on "
                    "it. With all-MiniLM-L6-v2, 0.4 kept at least 92% of answers to real questions and "
                    "turned away at least 88% of questions about something else, in every mode. "
                    "details.best_score tells the best bit's score either way.")] = None,
    constraint: Annotated[str | dict[str, Any] | None, Field(
        description="Only bits matching this query expression, e.g. title:jonah AND NOT text:\"great fish\" "
                    "(labels title, url, description, image_url, library, text; AND/OR/NOT; \"phrases\"; "
                    "prefix*), or its structured JSON form.")] = None,
    mode: Annotated[Literal["hybrid", "vector", "keyword"] | None, Field(
        description="How to rank: hybrid (the default: meaning and keywords fused), vector (meaning alone), "
                    "keyword (BM25 alone: only bits holding a word of the query; best for names, numbers, "
                    "identifiers and exact words).")] = None,
    keyword_weight: Annotated[float | None, Field(
        description="hybrid only: the keywords' share of the fused score, from 0 (meaning alone) "
                    "to 1 (keywords alone); 0.5 when not given.")] = None,
) -> Annotated[CallToolResult, SearchResult]:
    """The bits that best answer a text query, within a budget of tokens or bits: exactly POST /'s answer."""
    request = _request(context)
    state = host_state(request)
    with _as_tool_errors():
        caller = request_caller(request)
        fields = {"query": query, "count": count, "count_type": count_type,
                  "similarity_threshold": similarity_threshold, "score_threshold": score_threshold,
                  "constraint": constraint, "mode": mode, "keyword_weight": keyword_weight, "libraries": library}
        args = parse_query_args(fields, max_count=state.settings.max_count,
                                max_embedding_bytes=state.settings.max_embedding_bytes)
        catalog = state.catalog
        if library is None and publisher(request.scope) is None and sum(
                1 for index in catalog.models.values() if index.visible_count(caller.access_tags)) > 1:
            raise QueryError("this host serves libraries of several embedding models: name a library "
                             "(the libraries tool lists them)")
        index, libraries = model_and_libraries(request.scope, catalog, args, caller, state.access.signals_on)
        body = await answer(state, catalog, index, args, caller, "json", libraries)
    state.metrics.count("polymath_queries_total", format="mcp")
    result = json.loads(body)
    return CallToolResult(content=[TextContent(type="text", text=render_context_block(result["bits"]))],
                          structured_content=result)


async def libraries(context: Context) -> Annotated[CallToolResult, LibrariesResult]:
    """The libraries you may search here, with how many of their bits you may see: GET /libraries's list."""
    request = _request(context)
    with _as_tool_errors():
        caller = request_caller(request)
        catalog = host_state(request).catalog
        reach = reach_of(request.scope, catalog, caller.access_tags)
    listed = list(visible_libraries(catalog, caller.access_tags, reach))
    lines = [f"{entry['name']}: {entry['bits']:,} bits ({entry['embedding_model']})" for entry in listed]
    return CallToolResult(content=[TextContent(type="text", text="\n".join(lines) or "no libraries")],
                          structured_content={"libraries": listed})


@contextmanager
def _as_tool_errors() -> Iterator[None]:
    """Our refusals, in the same one-line words as `POST /`, as the tool's error result."""
    try:
        yield
    except HTTPError as refused:
        hint = "; the libraries tool lists them" if refused.status == 404 else ""  # the only 404: a library name
        raise ToolError(refused.message + hint) from None
    except (QueryError, NoEmbedder, NothingLoaded, EmbedderError) as refused:
        raise ToolError(str(refused)) from None


@contextmanager
def _logging_left_alone() -> Iterator[None]:
    """`MCPServer()` calls `logging.basicConfig`: it must never set up this process's logging."""
    root = logging.getLogger()
    placeholder = None if root.handlers else logging.NullHandler()
    if placeholder is not None:
        root.addHandler(placeholder)  # basicConfig does nothing when the root logger has a handler
    try:
        yield
    finally:
        if placeholder is not None:
            root.removeHandler(placeholder)


def make_server() -> MCPServer:
    """A new MCP server with both tools (one per app: its session manager runs once)."""
    with _logging_left_alone():
        server = MCPServer("polymath-host", instructions=INSTRUCTIONS, log_level="WARNING")
    logging.getLogger("mcp").setLevel(logging.WARNING)  # at INFO it logs every request and session
    server.tool(name="search", annotations=READ_ONLY)(search)
    server.tool(name="libraries", annotations=READ_ONLY)(libraries)
    return server
