"""The dialects' part of /openapi.json: RAGFlow's API under /api/v1/ and the MCP endpoint.

RAGFlow answers its own refusals with HTTP 200 and a `code` (its SDK reads only the body), so the
200 answer of each RAGFlow operation is the envelope: `code` 0 with `data`, or an error `code`
with `message` and `data: null`. /mcp speaks JSON-RPC 2.0 (Model Context Protocol, streamable
HTTP transport, stateless JSON mode); its messages are the protocol's, described there, not here.
"""

from __future__ import annotations

from typing import Any

# What Python's str.strip() removes (the host trims text arguments with it), as a regular expression class:
# `\s` of the document's readers may not agree with Python on \x1c-\x1f and the like.
SPACE = "[\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]"
NOT_SPACE = "[^" + SPACE[1:]  # a character str.strip() keeps

_BEARER = {"name": "Authorization", "in": "header", "required": False, "schema": {"type": "string"},
           "description": "Bearer <access token> (what RAGFlow(api_key=...) sends); none or empty: public bits only"}
_NULL = {"enum": [None]}


def _envelope(data: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "required": ["code"], "properties": {
        "code": {"type": "integer", "description": "0 on success; RAGFlow's codes otherwise (100, 101, 102, 108, "
                                                   "or the HTTP status of an error made outside the dialect)"},
        "message": {"type": "string", "description": "one sentence, on errors"},
        "data": {"anyOf": [data, _NULL]},
        **extra}}


def _answer(description: str, data: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _envelope(data, **extra)}}}


def _errors(*statuses: str) -> dict[str, Any]:
    described = {"401": "A token that failed verification (code 401)", "404": "No such path (code 404)",
                 "405": "Another method (code 405)", "408": "The body came too slowly (code 408)",
                 "413": "The body is over the limit (code 413)", "429": "Too many requests (code 429)",
                 "502": "The embedding service failed (code 100)", "503": "Nothing loaded yet (code 100)",
                 "504": "The embedding service was too slow (code 100)"}
    return {status: _answer(described[status], _NULL) for status in statuses}


_CHUNK = {"type": "object", "required": ["id", "content", "document_id", "dataset_id", "similarity"], "properties": {
    "id": {"type": "string", "description": "the bit's canonical id"},
    "content": {"type": "string", "description": "the bit's text"},
    "document_id": {"type": "string"},
    "document_name": {"type": "string", "description": "the bit's info.url"},
    "document_keyword": {"type": "string", "description": "the bit's info.url"},
    "dataset_id": {"type": "string"},
    "similarity": {"type": "number", "description": "the rank score: hybrid ranking's fused score with keyword_weight "
                   "1 - w (POST /'s score), 0-1; the cosine when a question of stop words was ranked by meaning"},
    "vector_similarity": {"type": "number", "description": "the cosine similarity POST / reports"},
    "term_similarity": {"type": "number", "minimum": 0, "maximum": 1,
                        "description": "the keyword side of the fusion: min(1, BM25 / the question's norm)"},
    "highlight": {"type": "string", "description": "with highlight: sentences holding question words, in <em>"},
    "document_metadata": {"type": "object", "description": "with include_metadata: the bit's info fields"},
}}

_RETRIEVAL_DATA = {"type": "object", "required": ["chunks", "doc_aggs", "total"], "properties": {
    "chunks": {"type": "array", "items": _CHUNK},
    "doc_aggs": {"type": "array", "items": {"type": "object", "required": ["doc_id", "doc_name", "count"], "properties": {
        "doc_id": {"type": "string"}, "doc_name": {"type": "string"}, "count": {"type": "integer"}}}},
    "total": {"type": "integer", "description": "chunks kept (at most top_k, at or above the threshold)"},
}}

_RETRIEVAL_REQUEST = {"type": "object", "required": ["dataset_ids", "question"], "properties": {
    "question": {"type": "string", "maxLength": 10000},
    "dataset_ids": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    "document_ids": {"type": "array", "items": {"type": "string"}, "maxItems": 256},
    "page": {"type": "integer", "minimum": 1, "default": 1},
    "page_size": {"type": "integer", "minimum": 1, "maximum": 100, "default": 30},
    "similarity_threshold": {"type": "number", "default": 0.2,
                             "description": "the least similarity (the fused score, 0-1, the same in every question) "
                                            "a chunk keeps; void when w is 0"},
    "vector_similarity_weight": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.3,
                                 "description": "w, the vectors' share: ranked hybrid with keyword_weight 1 - w"},
    "top_k": {"type": "integer", "minimum": 1, "default": 1024},
    "highlight": {"type": "boolean", "default": False},
    "keyword": {"type": "boolean", "default": False,
                "description": "accepted; changes nothing (every question word already counts on the keyword side)"},
    "metadata_condition": {"type": "object", "nullable": True, "description": "RAGFlow's: {logic, conditions: "
                           "[{name, comparison_operator, value}]} over title, url, description, image_url, library, text"},
    "include_metadata": {"type": "boolean", "default": False},
    "metadata_fields": {"type": "array", "items": {"type": "string",
                                                   "enum": ["url", "title", "description", "image_url"]}},
}}

_DATASET = {"type": "object", "required": ["id", "name", "description"], "properties": {
    "id": {"type": "string"}, "name": {"type": "string"}, "description": {"type": "string", "nullable": True},
    "embedding_model": {"type": "string"}, "document_count": {"type": "integer"}, "chunk_count": {"type": "integer"},
    "token_num": {"type": "integer"}}}

_DOCUMENTS = {"type": "object", "required": ["total", "docs"], "properties": {
    "total": {"type": "integer"},
    "docs": {"type": "array", "items": {"type": "object", "required": ["id", "name"], "properties": {
        "id": {"type": "string"}, "name": {"type": "string"}, "dataset_id": {"type": "string"},
        "chunk_count": {"type": "integer"}, "token_count": {"type": "integer"}, "meta_fields": {"type": "object"}}}},
}}


def _query(name: str, schema: dict[str, Any], description: str = "") -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


def _pages(largest: int) -> list[dict[str, Any]]:
    return [_query("page", {"type": "integer", "minimum": 1, "default": 1}),
            _query("page_size", {"type": "integer", "minimum": 1, "maximum": largest, "default": 30})]

_JSON_RPC = {"type": "object", "description": "a JSON-RPC 2.0 message of the Model Context Protocol"}
_JSON_RPC_SENT = {
    "type": "object", "required": ["jsonrpc", "method"],
    "description": "a JSON-RPC 2.0 request (with an id: a string or an integer) or notification (without) of the "
                   "Model Context Protocol; its methods and their params are the protocol's (an unknown method is a "
                   "JSON-RPC error in a 200 answer)",
    "properties": {"jsonrpc": {"type": "string", "enum": ["2.0"]}, "id": {},
                   "method": {"type": "string"}, "params": {"type": "object", "nullable": True}}}

PATHS: dict[str, Any] = {
    "/api/v1/retrieval": {"post": {
        "summary": "RAGFlow's retrieval: chunks ranked hybrid (keywords and vectors, keyword_weight 1 - w) "
                   "over the datasets' visible bits",
        "parameters": [_BEARER],
        "requestBody": {"content": {"application/json": {"schema": _RETRIEVAL_REQUEST}}},
        "responses": {"200": _answer("Chunks, or RAGFlow's error envelope", _RETRIEVAL_DATA),
                      **_errors("401", "408", "413", "429", "502", "503", "504")},
    }},
    "/api/v1/datasets": {"get": {
        "summary": "RAGFlow's dataset list: the libraries this caller may see",
        "parameters": [_BEARER, *_pages(100), _query("id", {"type": "string"}), _query("name", {"type": "string"}),
                       _query("orderby", {"type": "string", "enum": ["create_time", "update_time"]}),
                       _query("desc", {"type": "boolean"})],
        "responses": {"200": _answer("Datasets, or RAGFlow's error envelope", {"type": "array", "items": _DATASET},
                                     total_datasets={"type": "integer"}),
                      **_errors("401", "429")},
    }},
    "/api/v1/datasets/{dataset_id}/documents": {"get": {
        "summary": "RAGFlow's document list: a library's bits grouped by URL",
        "parameters": [{"name": "dataset_id", "in": "path", "required": True, "schema": {"type": "string"}},
                       _BEARER, *_pages(1024), _query("id", {"type": "string"}), _query("name", {"type": "string"}),
                       _query("keywords", {"type": "string"})],
        "responses": {"200": _answer("Documents, or RAGFlow's error envelope", _DOCUMENTS), **_errors("401", "429")},
    }},
    "/mcp": {"post": {
        "summary": "Model Context Protocol (streamable HTTP, stateless, JSON answers): tools search and libraries",
        "description": "Send `Accept: application/json, text/event-stream`. Errors of the protocol come from the "
                       "mcp package in its own forms.",
        "parameters": [{"name": "Authorization", "in": "header", "required": False, "schema": {"type": "string"},
                        "description": "Bearer <access token>"}],
        "requestBody": {"required": True, "content": {"application/json": {"schema": _JSON_RPC_SENT}}},
        "responses": {
            "200": {"description": "A JSON-RPC answer", "content": {"application/json": {"schema": _JSON_RPC}}},
            "202": {"description": "A notification, accepted"},
            **{status: {"description": description, "content": {"application/json": {"schema": {}},
                                                                 "text/plain": {"schema": {"type": "string"}}}}
               for status, description in (
                   ("400", "Not a JSON-RPC request the transport reads"), ("401", "A token that failed verification"),
                   ("403", "A request from a web page of an origin not allowed"), ("404", "Unknown session"),
                   ("406", "An Accept header without application/json and text/event-stream"),
                   ("413", "The body is over the limit"), ("415", "Not JSON"), ("422", "Invalid parameters"),
                   ("429", "Too many requests"),
                   ("501", "This host serves no MCP (the `mcp` extra is not installed)"))},
        },
    }},
}
