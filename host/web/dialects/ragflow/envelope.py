"""RAGFlow's answer envelope: every response under `/api/v1/` is `{"code", "message"?, "data"?}`.

RAGFlow's SDK never looks at the HTTP status: it parses the body and reads `code` (0 is success)
and `message`, so every answer under the prefix must be JSON with an integer `code` and, when
`code` is not 0, a string `message` — also the ones other layers make (404, 405, 408, 413, 429,
a crash). Two pieces keep that true:

- `ragflow_endpoint` wraps each RAGFlow endpoint: a `RAGFlowError` (RAGFlow's own refusals, HTTP
  200 as RAGFlow sends them), a refused token (401), an embedder or core refusal all become
  envelopes.
- `RAGFlowEnvelope` (host/web/middleware/dialect_errors.py, scoped to the prefix) rewrites any
  other error body (`{"error": ...}` or text) as `{"code": <status>, "message": ..., "data": null}`
  keeping its status and headers (Retry-After, WWW-Authenticate), and answers a crash with code 100
  and HTTP 500 (logged, never a traceback). It also serves `//api/v1/...`, which the SDK requests
  when its base URL ends with a slash.

Codes are RAGFlow's (`common/constants.py::RetCode`): 0 success, 100 exception, 101 argument,
102 data, 108 permission, 401 unauthorized; an error made outside the dialect carries its HTTP
status as its code (RAGFlow does so for 401 and 404), except a crash: 100.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from host.embedders.errors import EmbedderError, NoEmbedder
from host.search.errors import NothingLoaded, QueryError
from host.web.errors import HTTPError, from_core
from host.web.middleware.dialect_errors import DialectErrors, error_message, json_object
from host.web.responses import JSON, render_json

PREFIX = "/api/v1/"
SUCCESS = 0
EXCEPTION_ERROR = 100
ARGUMENT_ERROR = 101
DATA_ERROR = 102
PERMISSION_ERROR = 108
UNAUTHORIZED = 401


class RAGFlowError(Exception):
    """A refusal in RAGFlow's words: its code, one sentence, and (as RAGFlow) HTTP 200 by default."""

    def __init__(self, code: int, message: str, status: int = 200, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.headers = headers or {}


def envelope_response(body: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(render_json(body), status, headers, media_type=JSON)


def success(data: Any, headers: dict[str, str], **extra: Any) -> Response:
    """RAGFlow's `get_result`: `{"code": 0, "data": ...}` (no message), plus e.g. `total_datasets`."""
    return envelope_response({"code": SUCCESS, "data": data, **extra}, 200, headers)


def failure(code: int, message: str, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return envelope_response({"code": code, "message": message, "data": None}, status, headers)


def ragflow_endpoint(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """Every refusal of a RAGFlow endpoint answered as RAGFlow answers it."""

    @functools.wraps(handler)
    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except RAGFlowError as refused:
            return failure(refused.code, refused.message, refused.status, refused.headers)
        except (QueryError, NoEmbedder) as refused:
            return failure(DATA_ERROR, str(refused))
        except (EmbedderError, NothingLoaded) as failed:
            http = from_core(failed)
            return failure(EXCEPTION_ERROR, http.message, http.status)
        except HTTPError as refused:  # a refused token (401), a body too large or too slow (413, 408)
            return failure(refused.status, refused.message, refused.status, refused.headers)

    return endpoint


def _is_envelope(body: bytes) -> bool:
    parsed = json_object(body)
    return parsed is not None and type(parsed.get("code")) is int and (
        parsed["code"] == SUCCESS or isinstance(parsed.get("message"), str))


def rewritten(status: int, body: bytes) -> bytes:
    """An error body made outside the dialect, as an envelope (an envelope already is one)."""
    if _is_envelope(body):
        return body
    code = EXCEPTION_ERROR if status == 500 else status
    return render_json({"code": code, "message": error_message(body, status), "data": None})


class RAGFlowEnvelope(DialectErrors):
    """Under `/api/v1/`, every response is RAGFlow's envelope (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        super().__init__(app, PREFIX, rewritten)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope.get("root_path") and scope["path"].startswith("/" + PREFIX):
            # RAGFlow("key", "http://host:port/"); under /p/{name}/ the prefix took the extra slash
            raw_path = scope.get("raw_path")
            scope = {**scope, "path": scope["path"][1:], "raw_path": raw_path[1:] if raw_path else raw_path}
        await super().__call__(scope, receive, send)
