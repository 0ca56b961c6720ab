"""OpenAI's error shape for everything under `/v1/`: `{"error": {"message", "type", "param", "code"}}`.

OpenAI's clients read `error.message` (and raise by status: 400 BadRequestError, 401
AuthenticationError, 404 NotFoundError, 429 RateLimitError, ...). The endpoints raise
`OpenAIError`; `as_openai_error` (in a DialectErrors middleware on `/v1/`) rewrites every error made
elsewhere (the router's 404 and 405, the body guard's 408 and 413, the rate limiter's 429, a
refused token's 401, a crash) into the same shape, keeping its status and headers.
"""

from __future__ import annotations

from starlette.responses import Response

from host.web.errors import HTTPError
from host.web.middleware.dialect_errors import error_message, json_object
from host.web.responses import JSON, render_json

PREFIX = "/v1/"
KINDS = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error", 500: "server_error",
         502: "api_error", 503: "api_error", 504: "timeout"}


class OpenAIError(HTTPError):
    """A refusal in OpenAI's error shape."""

    def __init__(self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error",
                 headers: dict[str, str] | None = None, code: str | None = None) -> None:
        super().__init__(status, message, headers)
        self.body = {"error": {"message": message, "type": kind, "param": param, "code": code}}


def openai_error_response(error: OpenAIError) -> Response:
    return Response(render_json(error.body), error.status, error.headers, media_type=JSON)


def as_openai_error(status: int, body: bytes) -> bytes:
    """An error body made outside the dialect in OpenAI's shape (one in that shape already is kept)."""
    parsed = json_object(body)
    error = parsed.get("error") if parsed is not None else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return body
    kind = KINDS.get(status, "invalid_request_error" if status < 500 else "api_error")
    return render_json({"error": {"message": error_message(body, status), "type": kind, "param": None, "code": None}})

