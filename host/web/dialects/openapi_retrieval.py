"""The retrieval dialects' part of /openapi.json: Dify's External Knowledge API and OpenAI's vector stores.

Dify's errors are `{"error_code", "error_msg"}` (1001, 1002, 2001, or the HTTP status), OpenAI's
`{"error": {"message", "type", "param", "code"}}`; every refusal under /dify/ and /v1/ has that shape.
"""

from __future__ import annotations

from typing import Any

_BEARER = {"name": "Authorization", "in": "header", "required": False, "schema": {"type": "string"},
           "description": "Bearer <access token>; none: public bits only"}
_NULLABLE_INT = {"type": "integer", "nullable": True}

_RANK_SCORE = {"type": "number", "minimum": 0, "maximum": 1,
               "description": "the rank score (POST /'s score), the same in every question: hybrid ranking's fused "
                              "score (1 - w) * similarity + w * keyword score; the similarity in vector mode or when "
                              "a question of stop words alone was ranked by meaning; the keyword score "
                              "min(1, BM25 / the question's norm) in keyword mode"}
_DIFY_ERROR = {"type": "object", "required": ["error_code", "error_msg"], "properties": {
    "error_code": {"type": "integer", "description": "1001 a malformed Authorization header, 1002 a refused token, "
                                                     "2001 no such knowledge base; else the HTTP status"},
    "error_msg": {"type": "string"}}}
_DIFY_REQUEST = {"type": "object", "required": ["knowledge_id", "query", "retrieval_setting"], "properties": {
    "knowledge_id": {"type": "string", "description": "A library's name, or several separated by commas"},
    "query": {"type": "string", "maxLength": 10000},
    "retrieval_setting": {"type": "object", "required": ["top_k", "score_threshold"], "properties": {
        "top_k": {"type": "integer", "minimum": 1},
        "score_threshold": {"type": "number", "minimum": 0, "maximum": 1,
                            "description": "the least score a record keeps, in every mode; 0 keeps every one. "
                                           "0.4 kept at least 92% of answers to real questions and turned away "
                                           "at least 88% about something else (all-MiniLM-L6-v2; docs/quality.md)"}}},
    "metadata_condition": {"type": "object", "nullable": True, "description": "Dify's: {logical_operator, conditions: "
                           "[{name, comparison_operator, value}]} over title, url, description, image_url, library, text"},
}}
_DIFY_RECORDS = {"type": "object", "required": ["records"], "properties": {"records": {"type": "array", "items": {
    "type": "object", "required": ["content", "score", "title", "metadata"], "properties": {
        "content": {"type": "string"}, "score": _RANK_SCORE,
        "title": {"type": "string"},
        "metadata": {"type": "object", "description": "url, title, description, image_url, library, bit_id, token_count",
                     "properties": {"url": {"type": "string"}, "library": {"type": "string"},
                                    "bit_id": {"type": "string"}, "token_count": {"type": "integer"}}}}}}}}

_OPENAI_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["message", "type", "param", "code"], "properties": {
        "message": {"type": "string"}, "type": {"type": "string"}, "param": {"type": "string", "nullable": True},
        "code": {"type": "string", "nullable": True}}}}}
_VECTOR_STORE = {"type": "object", "required": ["id", "object", "created_at", "name", "usage_bytes", "file_counts",
                                                "status"], "properties": {
    "id": {"type": "string", "description": "the library's name"}, "object": {"type": "string", "enum": ["vector_store"]},
    "created_at": {"type": "integer"}, "name": {"type": "string"}, "usage_bytes": {"type": "integer"},
    "file_counts": {"type": "object", "properties": {key: {"type": "integer"} for key in (
        "in_progress", "completed", "failed", "cancelled", "total")}},
    "status": {"type": "string", "enum": ["completed"]}, "expires_after": {"type": "object", "nullable": True},
    "expires_at": _NULLABLE_INT, "last_active_at": _NULLABLE_INT,
    "metadata": {"type": "object", "additionalProperties": {"type": "string"}}}}
_VECTOR_STORES = {"type": "object", "required": ["object", "data", "has_more"], "properties": {
    "object": {"type": "string", "enum": ["list"]}, "data": {"type": "array", "items": _VECTOR_STORE},
    "first_id": {"type": "string", "nullable": True}, "last_id": {"type": "string", "nullable": True},
    "has_more": {"type": "boolean"}}}
_SEARCH_REQUEST = {"type": "object", "required": ["query"], "properties": {
    "query": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}]},
    "max_num_results": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
    "filters": {"type": "object", "description": "OpenAI's comparison ({type: eq|ne|gt|gte|lt|lte|in|nin, key, value}) "
                "or compound ({type: and|or, filters}) filter on url, title, description, image_url, library"},
    "ranking_options": {"type": "object", "properties": {
        "ranker": {"type": "string", "enum": ["auto", "none", "default-2024-11-15"],
                   "description": "accepted; this host has no re-ranking model"},
        "score_threshold": {"type": "number", "minimum": 0, "maximum": 1,
                            "description": "the least score a result keeps; above the best one's, data is empty. "
                                           "0.4 kept at least 92% of answers to real questions and turned away "
                                           "at least 88% about something else (all-MiniLM-L6-v2; docs/quality.md)"},
        "hybrid_search": {"type": "object", "required": ["embedding_weight", "text_weight"], "description":
                          "the keywords' share of the fused score is text_weight / (embedding_weight + text_weight); "
                          "0.5 without these", "properties": {
                              "embedding_weight": {"type": "number", "minimum": 0},
                              "text_weight": {"type": "number", "minimum": 0}}}}},
    "rewrite_query": {"type": "boolean", "description": "accepted; nothing is rewritten"},
}}
_SEARCH_PAGE = {"type": "object", "required": ["object", "search_query", "data", "has_more", "next_page"], "properties": {
    "object": {"type": "string", "enum": ["vector_store.search_results.page"]},
    "search_query": {"type": "array", "items": {"type": "string"}},
    "data": {"type": "array", "items": {"type": "object", "required": ["file_id", "filename", "score", "attributes",
                                                                       "content"], "properties": {
        "file_id": {"type": "string"}, "filename": {"type": "string", "description": "the bit's URL"},
        "score": _RANK_SCORE,
        "attributes": {"type": "object", "description": "url, title, description, image_url, library, bit_id, token_count"},
        "content": {"type": "array", "items": {"type": "object", "required": ["type", "text"], "properties": {
            "type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}}}}}}},
    "has_more": {"type": "boolean"}, "next_page": {"type": "string", "nullable": True}}}

_DESCRIBED = {"400": "A bad request, naming the field", "401": "A malformed Authorization header or a refused token",
              "404": "No such library visible to this caller", "405": "A write operation: the host is read-only",
              "408": "The body came too slowly", "413": "The body is over the limit", "429": "Too many requests",
              "502": "The embedding service failed", "503": "Nothing loaded yet",
              "504": "The embedding service was too slow"}


def _errors(schema: dict[str, Any], *statuses: str) -> dict[str, Any]:
    return {status: {"description": _DESCRIBED[status], "content": {"application/json": {"schema": schema}}}
            for status in statuses}


def _ok(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"200": {"description": description, "content": {"application/json": {"schema": schema}}}}


_STORE_ID = {"name": "vector_store_id", "in": "path", "required": True, "schema": {"type": "string"},
             "description": "A library's name (percent-encode a '/')"}
_SEARCH_ERRORS = ("400", "401", "404", "408", "413", "429", "502", "503", "504")

_FILE_ID = {"name": "file_id", "in": "path", "required": True, "schema": {"type": "string"}}


def _read_only(what: str, *parameters: dict[str, Any]) -> dict[str, Any]:
    """A write operation of OpenAI's API: refused, since libraries are published as files on the host."""
    return {"summary": f"{what}: refused with a 405 (the host serves its libraries read-only)",
            "parameters": [*parameters, _BEARER],
            "responses": _errors(_OPENAI_ERROR, "401", "405", "429")}


PATHS: dict[str, Any] = {
    "/dify/retrieval": {"post": {
        "summary": "Dify's External Knowledge API: register <host>/dify as the endpoint, a library as the knowledge id",
        "parameters": [_BEARER],
        "requestBody": {"required": True, "content": {"application/json": {"schema": _DIFY_REQUEST}}},
        "responses": {**_ok("The best passages, scores from 0 to 1", _DIFY_RECORDS),
                      **_errors(_DIFY_ERROR, *_SEARCH_ERRORS)},
    }},
    "/v1/vector_stores": {"get": {
        "summary": "OpenAI's vector stores: the libraries this caller may see",
        "parameters": [_BEARER, *({"name": name, "in": "query", "required": False, "schema": schema} for name, schema in (
            ("limit", {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}),
            ("order", {"type": "string", "enum": ["asc", "desc"], "default": "desc"}),
            ("after", {"type": "string"}), ("before", {"type": "string"})))],
        "responses": {**_ok("A page of vector stores", _VECTOR_STORES), **_errors(_OPENAI_ERROR, "400", "401", "429")},
    }, "post": _read_only("Creating a vector store")},
    "/v1/vector_stores/{vector_store_id}": {
        "get": {
            "summary": "OpenAI's vector store: one library this caller may see",
            "parameters": [_STORE_ID, _BEARER],
            "responses": {**_ok("The vector store", _VECTOR_STORE), **_errors(_OPENAI_ERROR, "401", "404", "405", "429")},
        },
        "post": _read_only("Modifying a vector store", _STORE_ID),
        "delete": _read_only("Deleting a vector store", _STORE_ID),
    },
    "/v1/vector_stores/{vector_store_id}/search": {"post": {
        "summary": "OpenAI's vector-store search: a library's best passages for a query, scores from 0 to 1",
        "parameters": [_STORE_ID, _BEARER],
        "requestBody": {"required": True, "content": {"application/json": {"schema": _SEARCH_REQUEST}}},
        "responses": {**_ok("A vector_store.search_results.page", _SEARCH_PAGE),
                      **_errors(_OPENAI_ERROR, *_SEARCH_ERRORS)},
    }},
    "/v1/files": {"get": _read_only("Listing files"), "post": _read_only("Uploading a file")},
    "/v1/files/{file_id}": {"get": _read_only("Reading a file", _FILE_ID),
                            "post": _read_only("Modifying a file", _FILE_ID),
                            "delete": _read_only("Deleting a file", _FILE_ID)},
}
