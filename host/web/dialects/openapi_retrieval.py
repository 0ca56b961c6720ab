"""The retrieval dialects' part of /openapi.json: Dify's External Knowledge API and OpenAI's vector stores.

Dify's errors are `{"error_code", "error_msg"}` (1001, 1002, 2001, or the HTTP status), OpenAI's
`{"error": {"message", "type", "param", "code"}}`; every refusal under /dify/ and /v1/ has that shape.
"""

from __future__ import annotations

from typing import Any

from host.web.dialects.openapi_paths import NOT_SPACE

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
_METADATA_LABELS = ["title", "url", "description", "image_url", "library", "text"]
_DIFY_CONDITION = {
    "type": "object", "nullable": True, "additionalProperties": False,
    "description": "Dify's: {logical_operator, conditions: [{name, comparison_operator, value}]} over title, url, "
                   "description, image_url, library, text; null, {} or no conditions restrict nothing. A condition "
                   "the host cannot read (an unknown operator, a text operator whose value holds no word) is a 400 "
                   "naming it.",
    "properties": {
        "logical_operator": {"type": "string", "enum": ["and", "or", ""], "nullable": True},
        "conditions": {"type": "array", "nullable": True, "items": {"type": "object", "required": ["comparison_operator"],
                       "properties": {"name": {"oneOf": [{"type": "string", "enum": _METADATA_LABELS},
                                                         {"type": "array", "items": {"type": "string",
                                                                                     "enum": _METADATA_LABELS}}]},
                                      "comparison_operator": {"type": "string"}, "value": {}}}}}}
_DIFY_REQUEST = {"type": "object", "required": ["knowledge_id", "query", "retrieval_setting"],
                 "description": "Any other key is ignored.", "properties": {
    "knowledge_id": {"type": "string", "pattern": "[^," + NOT_SPACE[2:],
                     "description": "A library's name, or several separated by commas (a 404 when one is not here)"},
    "query": {"type": "string", "maxLength": 10000, "description": "The question; a blank one finds nothing"},
    "retrieval_setting": {"type": "object", "required": ["top_k", "score_threshold"], "properties": {
        "top_k": {"type": "integer", "minimum": 1, "maximum": 100_000, "x-limit": "max_count",
                  "description": "at most the host's --max-count"},
        "score_threshold": {"type": "number", "minimum": 0, "maximum": 1,
                            "description": "the least score a record keeps, in every mode; 0 keeps every one. "
                                           "0.4 kept at least 92% of answers to real questions and turned away "
                                           "at least 88% about something else (all-MiniLM-L6-v2; docs/quality.md)"},
        "mode": {"type": "string", "enum": ["hybrid", "vector", "keyword"], "nullable": True,
                 "description": "this host's: how to rank, as POST /'s mode (Dify never sends it)"},
        "keyword_weight": {"type": "number", "minimum": 0, "maximum": 1, "nullable": True,
                           "description": "this host's, with mode hybrid (or none): the keywords' share"}},
        "anyOf": [{"not": {"required": ["keyword_weight"]}},
                  {"properties": {"keyword_weight": {"nullable": True, "enum": [None]}}},
                  {"not": {"required": ["mode"]}},
                  {"properties": {"mode": {"type": "string", "enum": ["hybrid"], "nullable": True}}}]},
    "metadata_condition": _DIFY_CONDITION,
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
_ATTRIBUTES = ["url", "title", "description", "image_url", "library"]
_SCALAR = {"oneOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]}
SCHEMAS: dict[str, Any] = {"OpenAIFilter": {
    "description": "OpenAI's comparison or compound filter on url, title, description, image_url, library (at most "
                   "64 comparisons, nested at most 32 deep)",
    "oneOf": [
        {"type": "object", "required": ["type", "key", "value"], "additionalProperties": False, "properties": {
            "type": {"type": "string", "enum": ["eq", "ne", "gt", "gte", "lt", "lte"]},
            "key": {"type": "string", "enum": _ATTRIBUTES}, "value": _SCALAR}},
        {"type": "object", "required": ["type", "key", "value"], "additionalProperties": False, "properties": {
            "type": {"type": "string", "enum": ["in", "nin"]},
            "key": {"type": "string", "enum": _ATTRIBUTES},
            "value": {"type": "array", "minItems": 1, "items": _SCALAR}}},
        {"type": "object", "required": ["type", "filters"], "additionalProperties": False, "properties": {
            "type": {"type": "string", "enum": ["and", "or"]},
            "filters": {"type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/OpenAIFilter"}}}},
    ]}}
_SEARCH_REQUEST = {"type": "object", "required": ["query"], "additionalProperties": False, "properties": {
    "query": {"oneOf": [{"type": "string", "maxLength": 10000},
                        {"type": "array", "items": {"type": "string", "maxLength": 10000}, "minItems": 1}],
              "description": "the question, or several embedded together as one text (10,000 characters in all)"},
    "max_num_results": {"type": "integer", "minimum": 1, "maximum": 50, "x-limit": "max_count", "x-cap": 50,
                        "default": 10},
    "filters": {"allOf": [{"$ref": "#/components/schemas/OpenAIFilter"}], "nullable": True},
    "ranking_options": {"type": "object", "nullable": True, "additionalProperties": False, "properties": {
        "ranker": {"type": "string", "enum": ["auto", "none", "default-2024-11-15"],
                   "description": "accepted; this host has no re-ranking model"},
        "score_threshold": {"type": "number", "minimum": 0, "maximum": 1,
                            "description": "the least score a result keeps; above the best one's, data is empty. "
                                           "0.4 kept at least 92% of answers to real questions and turned away "
                                           "at least 88% about something else (all-MiniLM-L6-v2; docs/quality.md)"},
        "hybrid_search": {"type": "object", "nullable": True, "required": ["embedding_weight", "text_weight"],
                          "additionalProperties": False, "description":
                          "the keywords' share of the fused score is text_weight / (embedding_weight + text_weight); "
                          "0.5 without these; not both 0", "properties": {
                              "embedding_weight": {"type": "number", "minimum": 0},
                              "text_weight": {"type": "number", "minimum": 0}},
                          "anyOf": [{"properties": {"embedding_weight": {"type": "number", "minimum": 0,
                                                                         "exclusiveMinimum": True}}},
                                    {"properties": {"text_weight": {"type": "number", "minimum": 0,
                                                                    "exclusiveMinimum": True}}}]}}},
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
            ("after", {"type": "string", "description": "the id of a vector store of this list: the page after it "
                                                        "(a 404 when there is none; blank: none)"}),
            ("before", {"type": "string", "description": "the id of a vector store of this list: the page before it "
                                                         "(a 404 when there is none; blank: none)"})))],
        "responses": {**_ok("A page of vector stores", _VECTOR_STORES),
                      **_errors(_OPENAI_ERROR, "400", "401", "404", "429")},
    }},
    "/v1/vector_stores/{vector_store_id}": {"get": {
        "summary": "OpenAI's vector store: one library this caller may see",
        "parameters": [_STORE_ID, _BEARER],
        "responses": {**_ok("The vector store", _VECTOR_STORE), **_errors(_OPENAI_ERROR, "401", "404", "405", "429")},
    }},
    "/v1/vector_stores/{vector_store_id}/search": {"post": {
        "summary": "OpenAI's vector-store search: a library's best passages for a query, scores from 0 to 1",
        "parameters": [_STORE_ID, _BEARER],
        "requestBody": {"required": True, "content": {"application/json": {"schema": _SEARCH_REQUEST}}},
        "responses": {**_ok("A vector_store.search_results.page", _SEARCH_PAGE),
                      **_errors(_OPENAI_ERROR, *_SEARCH_ERRORS)},
    }},
}
