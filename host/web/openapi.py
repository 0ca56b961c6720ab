"""The API described as OpenAPI 3 (served at /openapi.json).

`OPENAPI` is the document of a host with the default settings (the manual renders it); a host serves
`document_for(max_count)`, the same with its own `--max-count` wherever a limit follows it (a schema
marked `"x-limit": "max_count"`, capped at its `x-cap` when it has one). tests/test_schemathesis.py
holds the host to it.

Every path of the host's own API is served under `/p/{publisher}/` too, for that name's libraries
alone (host/web/middleware/publisher_prefix.py): `_publisher_paths` describes each such copy from the
operation itself, so the two never disagree."""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

from host.catalog.selection import MAX_NAME_CHARACTERS
from host.web.dialects.openapi_paths import NOT_SPACE, SPACE
from host.web.dialects.openapi_paths import PATHS as DIALECT_PATHS
from host.web.dialects.openapi_retrieval import PATHS as RETRIEVAL_PATHS
from host.web.dialects.openapi_retrieval import SCHEMAS as RETRIEVAL_SCHEMAS
from host.web.library_endpoints import DEFAULT_LIMIT, MAX_LIMIT
from host.web.middleware.publisher_prefix import ROUTE_WORDS
from host.web.query_args import MAX_LIBRARY_NAMES

_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


# Text arguments are read with their spaces trimmed, and a blank one (or null) is no argument at all.
_BLANK_OR = "^" + SPACE + "*({})?" + SPACE + "*$"
_DECIMAL = r"[+-]?([0-9]{1,20}(\.[0-9]{0,20})?|\.[0-9]{1,20})([eE][+-]?[0-9]{1,2})?"  # finite, as float() reads it
_PRESENT = {"anyOf": [{"type": "number"}, {"type": "string", "minLength": 1}]}
_NON_BLANK = {"required": ["query"], "properties": {"query": {"type": "string", "pattern": NOT_SPACE}}}
_TEXT_MODE = {"required": ["mode"], "properties": {"mode": {"type": "string",
                                                            "pattern": _BLANK_OR.format("keyword|hybrid").replace(")?", ")")}}}
_WITH_VECTOR = {"required": ["query_embedding"], "properties": {"query_embedding": {"type": "string", "minLength": 1}}}
_WITH_WEIGHT = {"required": ["keyword_weight"], "properties": {"keyword_weight": _PRESENT}}
_HYBRID = {"required": ["mode"], "properties": {"mode": {"type": "string",
                                                         "pattern": _BLANK_OR.format("hybrid").replace(")?", ")")}}}
_NO_MODE = {"anyOf": [{"not": {"required": ["mode"]}},
                      {"properties": {"mode": {"type": "string", "pattern": "^" + SPACE + "*$"}}},
                      {"properties": {"mode": {"nullable": True, "enum": [None]}}}]}


# What int() and float() read around a number: str.strip()'s spaces but \x1c-\x1f.
_NUMBER_SPACE = SPACE.replace("\\x1c-\\x1f", "")


def _number(description: str, number: dict[str, Any], text: str, **extra: Any) -> dict[str, Any]:
    """A number argument: a JSON number, or its text as a form sends it ("" or null: none)."""
    pattern = f"^({_NUMBER_SPACE}*({text}){_NUMBER_SPACE}*)?$"
    return {"anyOf": [{"type": "number", **number}, {"type": "string", "pattern": pattern}],
            "nullable": True, "description": description, **extra}


_OMITTABLE = "text|embedding|token_count|similarity|score|info|access_tag"

_QUERY_ARGUMENTS = {
    "type": "object",
    "description": "Any other key is ignored (Polymath clients send sort). Numbers may come as strings, as forms "
                   "send them. Arguments go together only so: mode keyword or hybrid needs query; query with "
                   "query_embedding only in mode keyword or hybrid; keyword_weight only in mode hybrid (the "
                   "default for a text query).",
    "properties": {
        "version": _number("Highest library format version the client reads.", {"type": "integer", "minimum": 1},
                           r"\+?0*[1-9][0-9]{0,17}", default=1),
        "query_embedding": {"type": "string", "format": "byte", "nullable": True,
                            "description": "Base64 of the query vector: the model's dimension of little-endian "
                                           "float32 or float64 values (told apart by length), each finite and of "
                                           "magnitude at most 1e6 (else a 400). Empty: none (a random sample)."},
        "query": {"type": "string", "maxLength": 10000, "nullable": True,
                  "description": "The query as text: embedded by the host with the model's embedder, and its "
                                 "keywords ranked by BM25 (with query_embedding only in mode hybrid or keyword). "
                                 "Blank: none."},
        "mode": {"type": "string", "pattern": _BLANK_OR.format("hybrid|vector|keyword"), "nullable": True,
                 "description": "How to rank: hybrid (meaning and keywords fused; the default for a text query), "
                                "vector (similarity alone; the default without text), keyword (BM25 alone: only "
                                "bits holding a keyword). hybrid and keyword need query."},
        "keyword_weight": _number("mode hybrid only: the keywords' share of the fused score (0: meaning alone, 1: "
                                  "keywords alone).", {"minimum": 0, "maximum": 1},
                                  r"\+?(0+(\.[0-9]{0,20})?|0*\.[0-9]{1,20}|0*1(\.0{0,20})?)", default=0.5),
        "query_embedding_model": {"type": "string", "nullable": True,
                                  "description": "The embedding_model of a library here (a 400 names the others); "
                                                 "defaults to the host's only model."},
        "similarity_threshold": _number("Only bits at least this similar (in vector mode the list ends at the first "
                                        "bit below it).", {}, _DECIMAL),
        "score_threshold": _number("Only bits whose rank score reaches it: score (0-1, the same in every query: the "
                                   "fused score, or min(1, BM25 / the query's norm) in keyword mode), in vector mode "
                                   "the similarity. Above the best bit's, the answer is empty; details.best_score "
                                   "tells the best either way. 0.4 kept at least 92% of answers to real questions and "
                                   "turned away at least 88% about something else, in every mode (all-MiniLM-L6-v2; "
                                   "docs/quality.md).", {}, _DECIMAL),
        "constraint": {"description": "A query expression the bits must match (title:, url:, description:, "
                                      "image_url:, library:, text:; AND/OR/NOT; \"phrases\"; prefix*), "
                                      "or its structured JSON form; one that does not parse is a 400 saying where.",
                       "nullable": True, "oneOf": [{"type": "string"}, {"type": "object"}]},
        "count": _number("The budget: at most the host's --max-count (100,000 unless its operator changed it).",
                         {"type": "integer", "minimum": 1, "maximum": 100_000, "x-limit": "max_count"},
                         r"\+?0*[1-9][0-9]{0,3}", default=1000),
        "count_type": {"type": "string", "pattern": _BLANK_OR.format("token|bit"), "default": "token",
                       "nullable": True, "description": "token or bit."},
        "omit": {"description": "Keys to omit from bits: '', '*', a key, a comma list, or a list of keys.",
                 "nullable": True, "default": "embedding",
                 "oneOf": [{"type": "string", "pattern": _BLANK_OR.format(
                               f"\\*|({_OMITTABLE})({SPACE}*,{SPACE}*({_OMITTABLE}))*")},
                           {"type": "array", "items": {"type": "string",
                                                       "pattern": _BLANK_OR.format(_OMITTABLE).replace(")?", ")")}},
                           {"type": "array", "minItems": 1, "maxItems": 1,
                            "items": {"type": "string", "pattern": _BLANK_OR.format("\\*")}}]},
        "access_token": {"type": "string", "nullable": True,
                         "description": "Also accepted as Authorization: Bearer; never in the URL (a token in the "
                                        "query string is a 400 on every path). Empty: none."},
        "libraries": {"description": "Only the bits of these libraries: each name a library's, or a folder's "
                                     "(every library in it), as GET /libraries names them. A form field holds one "
                                     "name; JSON may list several. A name that selects nothing the caller may see "
                                     "is a 404; one that tries to leave its folder (.., absolute, a backslash, NUL, "
                                     "percent-encoded or not) a 400.",
                      "nullable": True,
                      "oneOf": [{"type": "string", "maxLength": MAX_NAME_CHARACTERS},
                                {"type": "array", "minItems": 1, "maxItems": MAX_LIBRARY_NAMES,
                                 "items": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARACTERS}}]},
    },
    "allOf": [
        {"anyOf": [{"not": _TEXT_MODE}, _NON_BLANK]},
        {"anyOf": [{"not": _NON_BLANK}, {"not": _WITH_VECTOR}, _TEXT_MODE]},
        {"anyOf": [{"not": _WITH_WEIGHT}, _HYBRID, {"allOf": [_NO_MODE, _NON_BLANK]}]},
    ],
}

def _as_form(schema: Any) -> Any:
    """The arguments as a form sends them: no JSON null (a form's values are text), at most 32 fields."""
    if isinstance(schema, dict):
        form = {key: _as_form(value) for key, value in schema.items() if key != "nullable"}
        if form.get("type") == "object" and "properties" in form and schema is _QUERY_ARGUMENTS:
            form["maxProperties"] = 32
        return form
    if isinstance(schema, list):
        return [_as_form(item) for item in schema if item != {"properties": {"mode": {"nullable": True, "enum": [None]}}}]
    return schema


_FORM_ARGUMENTS = _as_form(_QUERY_ARGUMENTS)

_BIT = {
    "type": "object",
    "properties": {
        "text": {"type": "string"},
        "embedding": {"type": "string", "format": "byte"},
        "token_count": {"type": "integer", "minimum": 0},
        "similarity": {"type": "number", "description": "Cosine similarity to the query vector; absent in a "
                                                        "keyword query that had none."},
        "score": {"type": "number", "description": "The rank score when the bits are not ranked by similarity "
                                                   "(sort manual): BM25 in keyword mode, the fused score (0-1) in "
                                                   "hybrid mode."},
        "info": {
            "type": "object",
            "required": ["url"],
            "properties": {key: {"type": "string"} for key in ("url", "image_url", "title", "description")},
        },
    },
}

_LIBRARY = {
    "type": "object",
    "required": ["version", "embedding_model", "bits"],
    "properties": {
        "version": {"type": "integer"},
        "embedding_model": {"type": "string"},
        "omit": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
        "sort": {"type": "string",
                 "description": "A query's answer: similarity, or manual when ranked by keywords or fused (keep the "
                                "bits in the host's order)."},
        "details": {"type": "object", "properties": {
            "counts": {"type": "object"}, "message": {"type": "string"},
            "notes": {"type": "array", "items": {"type": "string"},
                      "description": "How the answer was made, e.g. that a query of stop words alone was ranked "
                                     "by meaning."}}},
        "bits": {"type": "array", "items": {"$ref": "#/components/schemas/Bit"}},
    },
}

_INPUT = {"type": "string", "pattern": NOT_SPACE, "maxLength": 8000}
_EMBEDDINGS_REQUEST = {
    "type": "object",
    "required": ["model", "input"],
    "description": "Any other key is ignored. More than 256 inputs, or one over 8,000 characters, is a 413.",
    "properties": {
        "model": {"type": "string", "pattern": NOT_SPACE,
                  "description": "A library's embedding_model (one not embedded here: 404, model_not_found)."},
        "input": {"oneOf": [_INPUT, {"type": "array", "minItems": 1, "maxItems": 256, "items": _INPUT}],
                  "description": "Text, or a list of texts; none of them blank."},
        "encoding_format": {"type": "string", "enum": ["float", "base64"], "default": "float"},
    },
}

_EMBEDDINGS_ANSWER = {
    "type": "object",
    "required": ["object", "data", "model", "usage"],
    "properties": {
        "object": {"type": "string"},
        "model": {"type": "string"},
        "data": {"type": "array", "items": {"type": "object", "properties": {
            "object": {"type": "string"}, "index": {"type": "integer"},
            "embedding": {"oneOf": [{"type": "array", "items": {"type": "number"}}, {"type": "string"}]}}}},
        "usage": {"type": "object", "properties": {"prompt_tokens": {"type": "integer"},
                                                   "total_tokens": {"type": "integer"}}},
    },
}


def _openai_error(description: str) -> dict[str, Any]:
    schema = {"type": "object", "required": ["error"], "properties": {"error": {"type": "object", "properties": {
        "message": {"type": "string"}, "type": {"type": "string"}, "param": {"type": "string", "nullable": True},
        "code": {"nullable": True}}}}}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_JSON_BODY = {"application/json": {"schema": {"$ref": "#/components/schemas/Library"}}}
_LIBRARY_LIST = {"type": "object", "required": ["libraries"], "properties": {
    "libraries": {"type": "array", "items": {"type": "object", "required": ["name", "url", "embedding_model", "dimension",
                                                                          "bits"], "properties": {
        "name": {"type": "string"}, "url": {"type": "string", "description": "The library's file on this host"},
        "embedding_model": {"type": "string"}, "dimension": {"type": "integer"},
        "bits": {"type": "integer", "description": "Those the caller may see"}}}},
    "next_cursor": {"type": "string", "nullable": True,
                    "description": "Only in a page: the cursor of the next one, null after the last"}}}
_TOKEN_PARAMETERS = [
    {"name": "Authorization", "in": "header", "required": False, "schema": {"type": "string"},
     "description": "Bearer <access token>: one this host issued, or a token of an identity provider its access "
                    "file trusts (never in the URL: a token in the query string is a 400)"},
]

_NOTICE = {"type": "object", "required": ["level", "text"], "properties": {
    "level": {"type": "string", "enum": ["info", "warning", "error"]}, "text": {"type": "string"}}}
_PAGE_BIT = {"type": "object", "required": ["id", "title", "href", "text", "similarity", "token_count", "library",
                                            "access_tag", "like_href"], "properties": {
    "id": {"type": "string"}, "anchor": {"type": "string"}, "title": {"type": "string"},
    "href": {"type": "string", "nullable": True, "description": "The bit's URL when it is http(s); else null."},
    "url": {"type": "string"}, "description": {"type": "string", "nullable": True}, "text": {"type": "string"},
    "similarity": {"type": "number", "nullable": True,
                   "description": "null in a random sample and in a search ranked by keywords alone."},
    "score": {"type": "number", "nullable": True,
              "description": "The rank score of a search ranked by keywords (BM25) or by both (0-1); else null."},
    "token_count": {"type": "integer"}, "cut_from": {"type": "integer", "nullable": True},
    "library": {"type": "string"},
    "access_tag": {"type": "string", "nullable": True, "description": "Only on bits the caller's token grants."},
    "like_href": {"type": "string"}}}
_PAGE_LIBRARY = {"type": "object", "properties": {
    "name": {"type": "string"}, "page_href": {"type": "string"}, "file_href": {"type": "string"},
    "map_href": {"type": "string"}, "bit_count": {"type": "integer"}, "private_bit_count": {"type": "integer"},
    "embedding_model": {"type": "string"}, "description": {"type": "string", "nullable": True},
    "searchable": {"type": "boolean"}}}
_PAGE = {
    "type": "object",
    "description": "The page's data (host/web/page/data.py): what the HTML page renders.",
    "required": ["title", "query", "like", "library", "budget", "mode", "search_available", "notices", "libraries",
                 "sections"],
    "properties": {
        "title": {"type": "string"}, "query": {"type": "string"},
        "like": {"type": "string", "nullable": True}, "library": {"type": "string", "nullable": True},
        "budget": {"type": "object", "properties": {"count": {"type": "integer"},
                                                    "count_type": {"type": "string", "enum": ["token", "bit"]}}},
        "mode": {"type": "string", "enum": ["hybrid", "vector", "keyword"]},
        "search_available": {"type": "boolean"}, "search_note": {"type": "string", "nullable": True},
        "caller": {"type": "object", "nullable": True, "properties": {
            "subject": {"type": "string"}, "access_tags": {"type": "array", "items": {"type": "string"}}}},
        "notices": {"type": "array", "items": _NOTICE},
        "libraries": {"type": "array", "items": _PAGE_LIBRARY,
                      "description": "A publisher's libraries; on the whole host's page, those outside any folder"},
        "publishers": {"type": "array", "description": "The whole host's page: its folders of libraries",
                       "items": {"type": "object", "properties": {
                           "name": {"type": "string"}, "page_href": {"type": "string"},
                           "libraries_href": {"type": "string"}, "library_count": {"type": "integer"},
                           "bit_count": {"type": "integer"}, "private_bit_count": {"type": "integer"}}}},
        "listed_of": {"type": "integer", "description": "How many there are to list (the page lists at most 1,000)"},
        "root": {"type": "string", "description": "The page's own path: / or /p/<name>/"},
        "publisher": {"type": "string", "nullable": True, "description": "A publisher's page: its name"},
        "library_view": {"allOf": [_PAGE_LIBRARY], "nullable": True, "description": "The library page's library"},
        "sections": {"type": "array", "items": {"type": "object", "properties": {
            "heading": {"type": "string"}, "model": {"type": "string"},
            "kind": {"type": "string", "enum": ["ranked", "sample"]},
            "bits": {"type": "array", "items": _PAGE_BIT},
            "ranked_by": {"type": "string", "nullable": True, "enum": ["similarity", "keywords", "fused", None],
                          "description": "A ranked section's order: what its bits' score is, or similarity alone."},
            "more_href": {"type": "string", "nullable": True}, "another_href": {"type": "string", "nullable": True},
            "permalink_href": {"type": "string", "nullable": True}}}},
        "map": {"type": "object", "nullable": True, "description": "On a library's page: its 2-D map."},
    },
}
_PAGE_PARAMETERS = [
    {"name": "q", "in": "query", "required": False, "schema": {"type": "string"},
     "description": "Search in words (by keywords alone where no embedder serves the model)."},
    {"name": "mode", "in": "query", "required": False, "schema": {"type": "string"},
     "description": "How a search is ranked: hybrid (the default), vector or keyword."},
    {"name": "like", "in": "query", "required": False, "schema": {"type": "string"},
     "description": "A bit id: the bits most like it."},
    {"name": "library", "in": "query", "required": False, "schema": {"type": "string"},
     "description": "A library's page: its description and map; searches and samples within it."},
    {"name": "count", "in": "query", "required": False, "schema": {"type": "string"},
     "description": "The budget (at most 100 bits or 25,000 tokens on the page)."},
    {"name": "count_type", "in": "query", "required": False, "schema": {"type": "string"},
     "description": "token or bit (default: 10 bits)."},
    {"name": "seed", "in": "query", "required": False, "schema": {"type": "string"},
     "description": "The random sample's seed: the same seed gives the same sample."},
]
_HTML = {"text/html": {"schema": {"type": "string"}}}

OPENAPI: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "polymath-host", "version": "1", "description": (
        "A host for Polymath libraries. Browser apps on other origins may call it (CORS: any origin by "
        "default, or the origins of --cors-origin; never with credentials).")},
    "paths": {
        "/": {
            "get": {
                "summary": "The page people use: search, more like this, a random sample, the libraries",
                "description": "HTML for a browser; the same page's data as JSON with Accept: application/json. "
                               "Anything it cannot use is a notice on the page, never a 400.",
                "parameters": [*_PAGE_PARAMETERS, *_TOKEN_PARAMETERS],
                "responses": {
                    "200": {"description": "The page", "content": {
                        **_HTML, "application/json": {"schema": {"$ref": "#/components/schemas/Page"}}}},
                    "401": {"description": "A refused access token: the public page with a notice saying why "
                                           "(HTML), or an error (JSON)",
                            "content": {**_HTML, "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
                    "429": _error("Too many requests"),
                },
            },
            "post": {
                "summary": "Query: the bits that best answer query (or query_embedding), within a budget",
                "parameters": [{"name": "Authorization", "in": "header", "required": False,
                                "schema": {"type": "string"}, "description": "Bearer <access token>"}],
                "requestBody": {"content": {
                    "application/json": {"schema": _QUERY_ARGUMENTS},
                    "application/x-www-form-urlencoded": {"schema": _FORM_ARGUMENTS},
                    "multipart/form-data": {"schema": _FORM_ARGUMENTS},
                }},
                "responses": {
                    "200": {"description": "A version-1 library of the best bits (Accept: application/msgpack: as "
                                           "MessagePack; Accept: text/plain: as a context block, README 'text/plain')",
                            "content": {**_JSON_BODY, "application/msgpack": {"schema": {"type": "string", "format": "binary"}},
                                        "text/plain": {"schema": {"type": "string"}}}},
                    "400": _error("A bad argument"),
                    "401": _error("An access token that failed verification"),
                    "404": _error("A name in libraries selects no library this caller may see"),
                    "408": _error("The body did not arrive in time"),
                    "413": _error("The body is over the limit"),
                    "415": _error("An unsupported content type"),
                    "429": _error("Too many requests"),
                    "502": _error("The embedding service failed"),
                    "503": _error("No libraries are loaded yet"),
                    "504": _error("The embedding service did not answer in time"),
                },
            },
        },
        "/v1/embeddings": {"post": {
            "summary": "OpenAI's embeddings API over the host's embedders",
            "parameters": [{"name": "Authorization", "in": "header", "required": False,
                            "schema": {"type": "string"}, "description": "Bearer <access token>"}],
            "requestBody": {"required": True, "content": {"application/json": {"schema": _EMBEDDINGS_REQUEST}}},
            "responses": {
                "200": {"description": "One vector per input", "content": {"application/json": {
                    "schema": _EMBEDDINGS_ANSWER}}},
                **{status: _openai_error(description) for status, description in (
                    ("400", "A bad request, naming the parameter"), ("404", "A model not embedded here"),
                    ("401", "An access token that failed verification"),
                    ("413", "Too many or too long inputs"), ("429", "Too many requests"),
                    ("502", "The embedding service failed"), ("504", "The embedding service did not answer in time"))},
            },
        }},
        "/libraries": {"get": {
            "summary": "The loaded libraries this caller may see, in name order: all of them, or a page",
            "description": "With no limit nor cursor, every one (filtered by prefix). With limit (or a cursor), a "
                           "page, and next_cursor: pass it as cursor for the next page (null after the last).",
            "parameters": [
                {"name": "prefix", "in": "query", "required": False,
                 "schema": {"type": "string", "maxLength": MAX_NAME_CHARACTERS, "pattern": "^[^\\x00-\\x1f\\x7f]*$"},
                 "description": "Only names that start with it (a folder's: blog/)"},
                {"name": "limit", "in": "query", "required": False,
                 "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
                 "description": f"A page of this many ({DEFAULT_LIMIT} with only a cursor)"},
                {"name": "cursor", "in": "query", "required": False,
                 "schema": {"type": "string", "pattern": "^n[A-Za-z0-9_-]*$", "maxLength": 4 * MAX_NAME_CHARACTERS},
                 "description": "The next_cursor of the page before, as it came (another is a 400)"},
                *_TOKEN_PARAMETERS],
            "responses": {
                "200": {"description": "Libraries", "content": {"application/json": {"schema": _LIBRARY_LIST}}},
                "400": _error("A bad prefix, limit or cursor"),
                "401": _error("An access token that failed verification"),
                "429": _error("Too many requests")}}},
        "/libraries/{name}.json": {"get": {
            "summary": "A library as a static file, restricted bits removed",
            "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}},
                           *_TOKEN_PARAMETERS],
            "responses": {"200": {"description": "The library", "content": _JSON_BODY},
                          "304": {"description": "Not modified"},
                          "401": _error("An access token that failed verification"),
                          "404": _error("No such library visible to this caller"),
                          "429": _error("Too many requests")}}},
        "/libraries/{name}/map.svg": {"get": {
            "summary": "A library's 2-D map: its bits (those the caller may see) on their first two principal "
                       "components, each linking to the bits most like it",
            "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}},
                           *_TOKEN_PARAMETERS],
            "responses": {"200": {"description": "SVG", "content": {"image/svg+xml": {"schema": {"type": "string"}}}},
                          "401": _error("An access token that failed verification"),
                          "404": _error("No such library visible to this caller"),
                          "429": _error("Too many requests")}}},
        "/healthz": {"get": {"summary": "Alive", "responses": {"200": {"description": "Alive"}}}},
        "/readyz": {"get": {"summary": "Libraries loaded", "responses": {"200": {"description": "Ready"}, "503": {
            "description": "Not ready: a replica before its first sync from its origin, or a host draining on SIGTERM"}}}},
        "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {"200": {
            "description": "Metrics", "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
        "/openapi.json": {"get": {"summary": "This document", "responses": {"200": {
            "description": "The OpenAPI document", "content": {"application/json": {"schema": {"type": "object"}}}}}}},
        **DIALECT_PATHS,
        **RETRIEVAL_PATHS,
    },
    "components": {"schemas": {"Error": _ERROR, "Bit": _BIT, "Library": _LIBRARY, "Page": _PAGE, **RETRIEVAL_SCHEMAS}},
}


_PUBLISHER = {"name": "publisher", "in": "path", "required": True,
              "schema": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARACTERS},
              "description": "A library's or a folder's name (its / as they are, or as %2F). The name ends before "
                             "the first later segment that is one of the host's own paths ("
                             + ", ".join(sorted(ROUTE_WORDS)) + "): a folder so named is reached under its parent."}


def _publisher_paths(paths: dict[str, Any]) -> dict[str, Any]:
    """The operations `/p/{publisher}/` serves too: those of `/` and of the paths under ROUTE_WORDS,
    with the same arguments and answers for that name's libraries alone, and two answers more in the
    operation's own error shape: 400 for a malformed name, 404 for one selecting nothing visible."""
    return {f"/p/{{publisher}}{path}": {method: _under_publisher(operation) for method, operation in item.items()}
            for path, item in paths.items() if path == "/" or path.split("/")[1] in ROUTE_WORDS}


def _under_publisher(operation: dict[str, Any]) -> dict[str, Any]:
    responses: dict[str, Any] = operation["responses"]
    shaped = next((answer for status, answer in sorted(responses.items())
                   if status.startswith("4") and "content" in answer), _error(""))
    added = {"400": "A malformed publisher name (.., absolute, a backslash, NUL, overlong; percent-encoded or not)",
             "404": "No library or folder of that name this caller may see"}
    return {**operation, "summary": f"{operation['summary']}, of one publisher's libraries",
            "parameters": [_PUBLISHER, *operation.get("parameters", [])],
            "responses": {**responses, **{status: {"description": description, "content": shaped["content"]}
                                          for status, description in added.items() if status not in responses}}}


OPENAPI["paths"].update(_publisher_paths(OPENAPI["paths"]))


@cache
def document_for(max_count: int) -> dict[str, Any]:
    """The document of a host whose --max-count is `max_count`."""
    document = copy.deepcopy(OPENAPI)
    _set_limits(document, max_count)
    return document


def _set_limits(node: Any, max_count: int) -> None:
    if isinstance(node, dict):
        if node.get("x-limit") == "max_count":
            node["maximum"] = min(max_count, node.get("x-cap", max_count))
        for value in node.values():
            _set_limits(value, max_count)
    elif isinstance(node, list):
        for value in node:
            _set_limits(value, max_count)
