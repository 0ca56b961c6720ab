"""`POST /v1/embeddings`: OpenAI's embeddings API over the host's embedders (SPEC §7).

Clients embed text with exactly a library's model, e.g. to build their own query vectors:
`{"model": "<a library embedding_model>", "input": "text" | ["text", ...],
"encoding_format": "float" | "base64"}` answered as OpenAI does. Errors come in OpenAI's shape
(`{"error": {"message", "type", "param", "code"}}`, openai_errors.py), which its clients read. A
model is served to a caller only if they may see some of its bits: an embedder of a private-only
model is not named.
"""

from __future__ import annotations

import base64

import numpy as np
from starlette.requests import Request
from starlette.responses import Response

from host.embedders.errors import EmbedderError, EmbedderTimeout, NoEmbedder
from host.library.json_text import parse_json
from host.web.caller import request_caller
from host.web.dialects.openai_errors import OpenAIError
from host.web.errors import HTTPError
from host.web.responses import JSON, cache_headers, render_json
from host.web.state import host_state

MAX_INPUTS = 256
MAX_INPUT_CHARACTERS = 8_000  # MiniLM reads 256 tokens; OpenAI's models ~8k tokens
BATCH_SECONDS_PER_INPUT = 0.5  # a batch may take this long per input beyond the query time limit


async def embeddings(request: Request) -> Response:
    state = host_state(request)
    try:
        caller = request_caller(request)
    except HTTPError as refused:
        raise OpenAIError(refused.status, refused.message, kind="authentication_error", headers=refused.headers) from None
    model, inputs, encoding = read_request(await request.body())
    index = state.catalog.models.get(model)
    if index is None or not index.visible_count(caller.access_tags) or model not in state.embedders:
        served = ", ".join(sorted(m for m, i in state.catalog.models.items()
                                  if i.visible_count(caller.access_tags) and m in state.embedders)) or "none"
        # OpenAI's answer to a model it does not have: 404 model_not_found (a private-only model reads the same).
        raise OpenAIError(404, f"model {model!r:.80} cannot be embedded here; models embedded here: {served}", "model",
                          code="model_not_found")
    timeout = state.settings.embedder_timeout + BATCH_SECONDS_PER_INPUT * len(inputs)
    try:
        vectors = await state.embedders.embed_texts(model, inputs, timeout=timeout)
        tokens = sum(await state.embedders.count_tokens(model, inputs, timeout=timeout))
    except EmbedderTimeout as slow:
        raise OpenAIError(504, str(slow), kind="timeout") from None
    except (EmbedderError, NoEmbedder) as failed:
        raise OpenAIError(502, str(failed), kind="api_error") from None
    data = [{"object": "embedding", "index": position, "embedding": encoded(vector, encoding)}
            for position, vector in enumerate(vectors)]
    body = {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
    return Response(render_json(body), 200, cache_headers(caller.token), media_type=JSON)


def read_request(raw: bytes) -> tuple[str, list[str], str]:
    """(model, inputs, encoding format), or an OpenAIError naming the parameter."""
    try:
        body = parse_json(raw)
    except ValueError as problem:
        raise OpenAIError(400, f"the body is {problem}") from None
    if not isinstance(body, dict):
        raise OpenAIError(400, "the body must be a JSON object with model and input")
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise OpenAIError(400, "model is required: the embedding_model of a library here", "model")
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise OpenAIError(400, f"encoding_format must be 'float' or 'base64', got {encoding!r:.40}", "encoding_format")
    inputs = body.get("input")
    if isinstance(inputs, str):
        inputs = [inputs]
    if not isinstance(inputs, list) or not inputs:
        raise OpenAIError(400, "input must be a string or a non-empty list of strings", "input")
    if not all(isinstance(text, str) for text in inputs):
        raise OpenAIError(400, "input must be text: token-id input (lists of integers) is not supported", "input")
    if len(inputs) > MAX_INPUTS:
        raise OpenAIError(413, f"input has {len(inputs):,} texts; send at most {MAX_INPUTS} a request", "input")
    longest = max(len(text) for text in inputs)
    if longest > MAX_INPUT_CHARACTERS:
        raise OpenAIError(413, f"an input is {longest:,} characters long; at most {MAX_INPUT_CHARACTERS:,} are read",
                          "input")
    if any(not text.strip() for text in inputs):
        raise OpenAIError(400, "input must not contain empty strings", "input")
    return model.strip(), inputs, encoding


def encoded(vector: np.ndarray, encoding: str) -> list[float] | str:
    """Floats, or base64 of little-endian float32 (what OpenAI's clients decode)."""
    if encoding == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    floats: list[float] = vector.astype(np.float64).tolist()
    return floats
