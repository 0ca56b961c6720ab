"""An embedder that asks an OpenAI-compatible `/v1/embeddings` service (OpenAI, Ollama, vLLM, TEI).

It serves one library model id (default `openai.com:<remote model name>`), posts
`{"model": NAME, "input": [texts]}` and reads `data[i].embedding` (lists of floats, or base64
float32 from services that send that), ordered by `index`.

Invariants:
- the API key (argument, else $POLYMATH_EMBEDDER_KEY, else $OPENAI_API_KEY) goes only into the
  Authorization header: never into a log line, an error message or repr (a service that echoes
  it back has it replaced by "[key]");
- every error is an `EmbedderError` (`EmbedderTimeout` for a timeout) with one line naming the
  service (scheme, host, port, path; never user:password@ or the query string), the HTTP status
  and the service's own message;
- connection failures, 429 and 5xx are retried with exponential backoff (with jitter, so
  concurrent callers do not retry in step), honouring Retry-After (seconds or an HTTP date, up
  to `max_retry_after`); other 4xx, bad JSON, wrong counts or dimensions are not: retrying cannot
  fix them;
- a Retry-After pauses every request of this embedder, not only the one that got it: when the
  importer sends several batches at once, none of them hammers a service that asked for a rest;
- a timeout is not retried either: the caller's time limit is the budget, and a hung service
  would only eat it;
- every returned row has the dimension learned from the first answer (or given) and unit length
  (re-normalised in float64: ada-002 and text-embedding-3 vectors are unit length already, so this
  only removes float rounding; other services' raw vectors become comparable by dot product).

Plain `urllib` in the caller's (worker) thread: a new connection per request, proxies from the
environment as every HTTP client honours them. Calls block; run them off the event loop.
"""

from __future__ import annotations

import base64
import binascii
import http.client
import json
import logging
import os
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from email.message import Message
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np
from cachetools import LRUCache

from host.embedders.base import unit_rows
from host.embedders.errors import EmbedderError, EmbedderTimeout

KEY_VARIABLES = ("POLYMATH_EMBEDDER_KEY", "OPENAI_API_KEY")
MAX_MESSAGE_CHARS = 300
log = logging.getLogger("host.embedders")


def key_from_environment() -> str | None:
    """The first non-empty of $POLYMATH_EMBEDDER_KEY and $OPENAI_API_KEY."""
    for name in KEY_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


def endpoint_of(url: str) -> str:
    """The embeddings endpoint for `url`: a base URL as OpenAI clients take it (…/v1) gets
    `/embeddings`, a bare host gets `/v1/embeddings`, a URL ending in /embeddings is kept."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"embedder URL must be http:// or https:// with a host, not {url!r}")
    path = parts.path.rstrip("/")
    if not path:
        path = "/v1/embeddings"
    elif not path.endswith("/embeddings"):
        path += "/embeddings"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


class OpenAIEmbedder:
    """Embeds through an OpenAI-compatible HTTP service. Safe to call from several threads."""

    def __init__(
        self,
        url: str,
        remote_model: str,
        *,
        model: str | None = None,
        dimension: int | None = None,
        key: str | None = None,
        timeout: float = 10.0,
        retries: int = 2,
        backoff: float = 0.25,
        max_retry_after: float = 5.0,
        max_batch: int = 256,
        retry_timeouts: bool = False,
    ) -> None:
        """`url`: the service (see `endpoint_of`). `remote_model`: the model NAME the service knows.
        `model`: the library model id served (default `openai.com:<remote_model>`). `dimension`:
        expected vector size (default: learned from the first answer). `key`: default from the
        environment. `timeout`: seconds per HTTP request. `retries`: further attempts after a
        retryable failure, `backoff` seconds before the first, doubling after (the query path's
        defaults give up within seconds; `polymath-host import` waits far longer). `retry_timeouts`:
        a request that times out is retried too (an import's; a query's would only wait longer)."""
        if not remote_model.strip():
            raise ValueError("embedder model name must not be empty")
        if dimension is not None and dimension < 1:
            raise ValueError(f"embedder dimension must be positive, not {dimension}")
        if timeout <= 0 or retries < 0 or backoff < 0 or max_batch < 1:
            raise ValueError("embedder timeout and max_batch must be positive, retries and backoff not negative")
        self.endpoint = endpoint_of(url)
        self.service = _shown(self.endpoint)
        self.remote_model = remote_model.strip()
        self.model = model or f"openai.com:{self.remote_model}"
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_retry_after = max_retry_after
        self.max_batch = max_batch
        self.retry_timeouts = retry_timeouts
        self._key = key if key is not None else key_from_environment()
        if self._key and not self._key.isprintable():
            # http.client would refuse the header with the key in its message: say it here, without it.
            raise ValueError("the embedding service's key (POLYMATH_EMBEDDER_KEY or OPENAI_API_KEY) holds a line "
                             "break or another control character: set it to the key alone")
        self._dimension = dimension
        self._lock = threading.Lock()
        self._token_counts: LRUCache[str, int] = LRUCache(maxsize=4096)  # learned from one-text answers
        self._resume_at = 0.0  # time.monotonic() before which no request is sent (a Retry-After)
        self._stopped = threading.Event()
        self._stopped_because = ""

    def stop(self, because: str = "") -> None:
        """No more requests or retries from now on (an import that failed or was interrupted): calls
        waiting for a retry give up at once, with `because` as their error; a request under way ends
        as it ends. For good: an import opens an embedder of its own."""
        self._stopped_because = self._stopped_because or because
        self._stopped.set()

    def __repr__(self) -> str:
        return f"OpenAIEmbedder({self.service!r}, {self.remote_model!r}, model={self.model!r})"

    @property
    def dimension(self) -> int:
        """The vector size: given, or learned from the first answer (asking the service once, if
        nothing has been embedded yet; so reading it may block)."""
        if self._dimension is None:
            self.embed(["dimension probe"])
        assert self._dimension is not None
        return self._dimension

    @dimension.setter
    def dimension(self, value: int) -> None:
        self._dimension = value

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("embed takes a sequence of texts, not one string")
        texts = list(texts)
        if not texts:
            return np.empty((0, self._dimension or 0), dtype=np.float32)
        chunks = [self._embed_chunk(texts[start : start + self.max_batch])
                  for start in range(0, len(texts), self.max_batch)]
        return np.concatenate(chunks) if len(chunks) > 1 else chunks[0]

    def count_tokens(self, text: str) -> int:
        """The service's own count (`usage.prompt_tokens` of embedding `text` alone; remembered
        from earlier one-text answers). EmbedderError if the service reports no usage."""
        with self._lock:
            known = self._token_counts.get(text)
        if known is not None:
            return known
        self._embed_chunk([text])
        with self._lock:
            known = self._token_counts.get(text)
        if known is None:
            raise EmbedderError(f"embedding service {self.service} reports no token counts (usage.prompt_tokens)")
        return known

    # ------------------------------------------------------------------ one request

    def _embed_chunk(self, texts: list[str]) -> np.ndarray:
        answer = self._post({"model": self.remote_model, "input": texts})
        vectors = self._vectors(answer, len(texts))
        prompt_tokens = _prompt_tokens(answer)
        if len(texts) == 1 and prompt_tokens is not None:
            with self._lock:
                self._token_counts[texts[0]] = prompt_tokens
        return vectors

    def _post(self, payload: dict[str, Any]) -> Any:
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": "polymath-host"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        for attempt in range(self.retries + 1):
            retry_after: float | None = None
            self._wait_for_resume()
            if self._stopped.is_set():
                raise EmbedderError(self._stopped_because or f"requests to embedding service {self.service} were stopped")
            request = urllib.request.Request(self.endpoint, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    raw = response.read()
            except urllib.error.HTTPError as error:
                status, message = error.code, self._service_message(_read_quietly(error), error.reason)
                retry_after = _retry_after(error.headers)
                error.close()
                problem = f"embedding service {self.service} answered {status}: {message}"
                if status != 429 and status < 500:
                    raise EmbedderError(problem) from None
            except TimeoutError:
                if not self.retry_timeouts:
                    raise EmbedderTimeout(self._timeout_message()) from None
                problem = self._timeout_message()
            except urllib.error.URLError as error:
                if isinstance(error.reason, TimeoutError):
                    if not self.retry_timeouts:
                        raise EmbedderTimeout(self._timeout_message()) from None
                    problem = self._timeout_message()
                else:
                    problem = f"cannot reach embedding service {self.service}: {self._redact(str(error.reason))}"
            except (ConnectionError, http.client.HTTPException) as error:  # reset, closed early, garbled
                problem = f"embedding service {self.service} failed mid-answer: {type(error).__name__}"
            else:
                try:
                    return json.loads(raw)
                except ValueError:
                    raise EmbedderError(f"embedding service {self.service} answered with invalid JSON") from None
            if attempt == self.retries:
                raise EmbedderError(problem)
            # Jitter: concurrent calls that failed together do not all come back at the same moment.
            delay = self.backoff * 2**attempt * (0.5 + random.random() / 2)
            if retry_after is not None:
                delay = max(delay, min(retry_after, self.max_retry_after))
                with self._lock:  # the service asked for a rest: every request of this embedder waits
                    self._resume_at = max(self._resume_at, time.monotonic() + delay)
            log.warning("%s; retry %d of %d in %.2f s", problem, attempt + 1, self.retries, delay)
            self._stopped.wait(delay)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _wait_for_resume(self) -> None:
        with self._lock:
            pause = self._resume_at - time.monotonic()
        if pause > 0:
            # A little more for each: the calls a Retry-After held do not all come back at once.
            self._stopped.wait(pause + random.random() * min(pause, 1.0) / 4)

    def _vectors(self, answer: Any, expected: int) -> np.ndarray:
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list):
            raise EmbedderError(f"embedding service {self.service} answered without a `data` list")
        if len(data) != expected:
            raise EmbedderError(
                f"embedding service {self.service} answered {len(data)} embeddings for {expected} texts"
            )
        rows: list[Any] = [None] * expected
        for position, item in enumerate(data):
            index = item.get("index", position) if isinstance(item, dict) else None
            if not isinstance(index, int) or not 0 <= index < expected or rows[index] is not None:
                raise EmbedderError(f"embedding service {self.service} answered a bad or repeated `index`")
            rows[index] = _vector(item.get("embedding"))
            if rows[index] is None:
                raise EmbedderError(f"embedding service {self.service} answered an embedding that is not a vector")
        dimensions = {len(row) for row in rows}
        if len(dimensions) != 1:
            raise EmbedderError(f"embedding service {self.service} answered vectors of different dimensions")
        (dimension,) = dimensions
        with self._lock:
            if self._dimension is None and dimension > 0:
                self._dimension = dimension
            wanted = self._dimension
        if dimension != wanted:
            raise EmbedderError(
                f"embedding service {self.service} answered {dimension}-dimensional vectors for {self.model}, "
                f"expected {wanted}"
            )
        return unit_rows(np.asarray(rows, dtype=np.float64), f"embedding service {self.service}")

    def _service_message(self, raw: bytes, reason: object) -> str:
        """The service's own words about an error, on one short line, without the key."""
        text = raw.decode("utf-8", "replace")
        try:
            document = json.loads(text)
        except ValueError:
            document = None
        if isinstance(document, dict):
            found = document.get("error", document.get("message", document.get("detail")))
            if isinstance(found, dict):
                found = found.get("message", found)
            text = found if isinstance(found, str) else json.dumps(found)
        text = " ".join(text.split()) or str(reason or "no message")
        text = self._redact(text)
        return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "…"

    def _redact(self, text: str) -> str:
        return text.replace(self._key, "[key]") if self._key else text

    def _timeout_message(self) -> str:
        return f"embedding service {self.service} did not answer within {self.timeout:g} s"


def _shown(endpoint: str) -> str:
    """The endpoint as errors and logs may show it: no user:password@, no query string."""
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    netloc = f"{host}:{parts.port}" if parts.port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _vector(value: Any) -> list[float] | None:
    """A vector from a list of numbers or a base64 string of little-endian float32; None otherwise."""
    if isinstance(value, str):
        try:
            decoded = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return None
        if not decoded or len(decoded) % 4:
            return None
        return [float(x) for x in np.frombuffer(decoded, dtype="<f4")]
    if isinstance(value, list) and value and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) for x in value
    ):
        return value
    return None


def _prompt_tokens(answer: Any) -> int | None:
    usage = answer.get("usage") if isinstance(answer, dict) else None
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0 else None


def _retry_after(headers: Message | None) -> float | None:
    """Retry-After in seconds from now: a number of seconds or an HTTP date; None if absent or garbled."""
    value = headers.get("Retry-After") if headers is not None else None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def _read_quietly(error: urllib.error.HTTPError) -> bytes:
    try:
        return error.read(64 * 1024)
    except (OSError, http.client.HTTPException):
        return b""
