"""`PolymathClient` and `AsyncPolymathClient`: a host's answers as dataclasses, its refusals as exceptions.

    with PolymathClient("http://127.0.0.1:8080", token=None) as host:
        host.libraries()                                  # GET /libraries
        host.query("a great fish", count=500)             # POST /: the bits within a budget of tokens or bits
        host.retrieve("a great fish", k=4)                # the best k passages, each with its library and a 0-1 score
        host.query("Methuselah", mode="keyword")          # ranked by keywords (BM25) alone; hybrid is the default

Both classes send the same requests (built by the `*_call` functions below) and read the same
answers; only the I/O differs. The token rules are the host's: an access token travels as
`Authorization: Bearer` (never in the URL); none, or "", asks as an anonymous caller (public
bits only). Every request has a timeout (10 s unless told): a host that is down raises
HostUnreachable at once, one that does not answer HostTimeout, never a hang.

`retrieve` asks `POST /dify/retrieval`, the host's door that names each passage's library (Dify's
External Knowledge API, with the host's own `mode` and `keyword_weight` in `retrieval_setting`);
with no `libraries` it first asks `GET /libraries` for those the caller may see.

`mode` is the host's: None (the host's default: `hybrid` for text, meaning and keywords fused),
`vector` (meaning alone), `keyword` (BM25 alone); `keyword_weight` (0-1, hybrid only) the
keywords' share of the fused score. Both are checked by the host, whose message a refusal carries.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

from polymath_host_client.errors import HostError, HostTimeout, HostUnreachable, PolymathError, TokenRefused
from polymath_host_client.results import (
    Answer,
    Library,
    Passage,
    error_message,
    read_answer,
    read_libraries,
    read_records,
)

DEFAULT_TIMEOUT = 10.0
CountType = Literal["token", "bit"]
Mode = Literal["hybrid", "vector", "keyword"]


@dataclass(frozen=True)
class Call:
    """One request to the host, before any I/O."""

    method: str
    path: str
    json: Mapping[str, Any] | None = None


def libraries_call() -> Call:
    return Call("GET", "/libraries")


def query_call(query: str | None, count: int, count_type: CountType, model: str | None,
               similarity_threshold: float | None, constraint: str | Mapping[str, Any] | None,
               mode: Mode | None = None, keyword_weight: float | None = None,
               score_threshold: float | None = None) -> Call:
    arguments: dict[str, Any] = {"count": count, "count_type": count_type}
    optional = {"query": query, "query_embedding_model": model, "similarity_threshold": similarity_threshold,
                "score_threshold": score_threshold, "constraint": constraint, "mode": mode,
                "keyword_weight": keyword_weight}
    arguments.update({name: value for name, value in optional.items() if value is not None})
    return Call("POST", "/", arguments)


def retrieve_call(query: str, libraries: Sequence[str], k: int, score_threshold: float,
                  metadata_condition: Mapping[str, Any] | None, mode: Mode | None = None,
                  keyword_weight: float | None = None) -> Call:
    setting: dict[str, Any] = {"top_k": k, "score_threshold": score_threshold}
    setting.update({name: value for name, value in (("mode", mode), ("keyword_weight", keyword_weight))
                    if value is not None})
    body: dict[str, Any] = {"knowledge_id": ",".join(libraries), "query": query, "retrieval_setting": setting}
    if metadata_condition is not None:
        body["metadata_condition"] = metadata_condition
    return Call("POST", "/dify/retrieval", body)


def libraries_to_search(listed: list[Library]) -> list[str]:
    """Every library the caller may see, when they share one embedding model (passages of different
    models have no common score)."""
    models = sorted({library.embedding_model for library in listed})
    if len(models) > 1:
        raise PolymathError(f"this host serves libraries of several embedding models ({', '.join(models)}): "
                            "name the libraries to search (libraries=[...])")
    return [library.name for library in listed]


def base_url(url: str) -> str:
    """The host's URL without a trailing slash; ValueError for one that is not http(s) or carries a query."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"the host's URL must be http:// or https://, got {url!r:.80}")
    if parts.query or parts.fragment:
        raise ValueError("the host's URL must have no query string or fragment: give the access token as token=, "
                         "never in a URL")
    return url.strip().rstrip("/")


def bearer_headers(token: str | None) -> dict[str, str]:
    """`Authorization: Bearer <token>`, or nothing for no token (None or "")."""
    token = (token or "").strip()
    if not token:
        return {}
    if any(character.isspace() or not character.isprintable() for character in token):
        raise ValueError("the access token must be one word of printable characters")
    return {"Authorization": f"Bearer {token}"}


def read_response(response: httpx.Response) -> Any:
    """The answer's JSON; HostError (TokenRefused for 401) with the host's message for an error status."""
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.status_code >= 400:
        message = error_message(data, response.reason_phrase or f"HTTP {response.status_code}")
        raise (TokenRefused if response.status_code == 401 else HostError)(response.status_code, message)
    if data is None:
        raise HostError(response.status_code, f"the host's answer to {response.request.url.path} is not JSON")
    return data


@contextmanager
def reaching(url: str, timeout: float) -> Iterator[None]:
    """httpx's transport errors as HostUnreachable / HostTimeout, saying where and why."""
    try:
        yield
    except httpx.TimeoutException:
        raise HostTimeout(f"the host at {url} did not answer within {timeout:g} s") from None
    except httpx.TransportError as failed:
        raise HostUnreachable(f"could not reach the host at {url}: {failed or type(failed).__name__}") from None


class PolymathClient:
    """A host's API, synchronously (an httpx.Client; close it, or use the client as a context manager)."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = DEFAULT_TIMEOUT,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.url = base_url(url)
        self.timeout = timeout
        self._http = httpx.Client(base_url=self.url, headers=bearer_headers(token), timeout=timeout,
                                  transport=transport)

    def __repr__(self) -> str:  # never the token
        return f"PolymathClient({self.url!r})"

    def _ask(self, call: Call) -> Any:
        with reaching(self.url, self.timeout):
            response = self._http.request(call.method, call.path, json=call.json)
        return read_response(response)

    def libraries(self) -> list[Library]:
        """The libraries this caller may see, with how many of their bits they may see."""
        return read_libraries(self._ask(libraries_call()))

    def query(self, query: str | None = None, *, count: int = 1000, count_type: CountType = "token",
              model: str | None = None, similarity_threshold: float | None = None,
              constraint: str | Mapping[str, Any] | None = None, mode: Mode | None = None,
              keyword_weight: float | None = None, score_threshold: float | None = None) -> Answer:
        """`POST /`: the bits that best answer `query` within `count` tokens or bits, ranked in `mode`
        (no query: a random sample), only those scoring at least `score_threshold` (0-1)."""
        call = query_call(query, count, count_type, model, similarity_threshold, constraint, mode, keyword_weight,
                          score_threshold)
        return read_answer(self._ask(call))

    def retrieve(self, query: str, *, k: int = 4, libraries: Sequence[str] | None = None, score_threshold: float = 0.0,
                 metadata_condition: Mapping[str, Any] | None = None, mode: Mode | None = None,
                 keyword_weight: float | None = None) -> list[Passage]:
        """The best `k` passages for `query` in `libraries` (default: every library this caller may see)."""
        names = list(libraries) if libraries is not None else libraries_to_search(self.libraries())
        if not names:
            return []
        call = retrieve_call(query, names, k, score_threshold, metadata_condition, mode, keyword_weight)
        return read_records(self._ask(call))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> PolymathClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


class AsyncPolymathClient:
    """A host's API, asynchronously (an httpx.AsyncClient; `await aclose()` it, or use `async with`)."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = DEFAULT_TIMEOUT,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.url = base_url(url)
        self.timeout = timeout
        self._http = httpx.AsyncClient(base_url=self.url, headers=bearer_headers(token), timeout=timeout,
                                       transport=transport)

    def __repr__(self) -> str:  # never the token
        return f"AsyncPolymathClient({self.url!r})"

    async def _ask(self, call: Call) -> Any:
        with reaching(self.url, self.timeout):
            response = await self._http.request(call.method, call.path, json=call.json)
        return read_response(response)

    async def libraries(self) -> list[Library]:
        """The libraries this caller may see, with how many of their bits they may see."""
        return read_libraries(await self._ask(libraries_call()))

    async def query(self, query: str | None = None, *, count: int = 1000, count_type: CountType = "token",
                    model: str | None = None, similarity_threshold: float | None = None,
                    constraint: str | Mapping[str, Any] | None = None, mode: Mode | None = None,
                    keyword_weight: float | None = None, score_threshold: float | None = None) -> Answer:
        """`POST /`: the bits that best answer `query` within `count` tokens or bits, ranked in `mode`
        (no query: a random sample), only those scoring at least `score_threshold` (0-1)."""
        call = query_call(query, count, count_type, model, similarity_threshold, constraint, mode, keyword_weight,
                          score_threshold)
        return read_answer(await self._ask(call))

    async def retrieve(self, query: str, *, k: int = 4, libraries: Sequence[str] | None = None,
                       score_threshold: float = 0.0, metadata_condition: Mapping[str, Any] | None = None,
                       mode: Mode | None = None, keyword_weight: float | None = None) -> list[Passage]:
        """The best `k` passages for `query` in `libraries` (default: every library this caller may see)."""
        names = list(libraries) if libraries is not None else libraries_to_search(await self.libraries())
        if not names:
            return []
        call = retrieve_call(query, names, k, score_threshold, metadata_condition, mode, keyword_weight)
        return read_records(await self._ask(call))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncPolymathClient:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.aclose()
