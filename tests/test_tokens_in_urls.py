"""Tokens never in URLs, on every door of a real `serve` (issue 23.1; RFC 6750 §5.3).

URLs end up in load balancers', proxies' and browsers' logs, so a token there is a token leaked.
Every door takes a token only as `Authorization: Bearer` (and `POST /` also as its body's
`access_token` field); a token in the query string is a 400 saying where to send it instead, and
is never logged. `DOORS` is the table of doors: a new door gets its row, and both tests run on it.
"""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from components import admin, unavailable
from conftest import RunningHost, start_host, stop_host
from librarian import TEST_MODEL, b64, make_library, unit_vectors, write_library

from host.web.caller import url_token_parameter
from host.web.middleware.access_log import redacted_query

PRIVATE = "access/team/plans"
PRIVATE_URL = "https://team.example/"  # the private library's bits link here; the public one's elsewhere
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@dataclass(frozen=True)
class Door:
    """One way in: a request that reads the caller's token, and what its answer with a Bearer token shows."""

    method: str
    path: str
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    bearer_status: int = 200  # the answer with the token as Bearer
    private_marker: str | None = PRIVATE  # in that answer only because the token was read
    extra: str | None = None  # the module of the extra this door needs to answer at all


DOORS = {
    "Polymath POST /": Door("POST", "/", {"query_embedding": b64(unit_vectors(1, 8, seed=3)[0]), "count": 100,
                                          "count_type": "bit"}, private_marker=PRIVATE_URL),
    "the page": Door("GET", "/", headers={"Accept": "application/json"}),
    "GET /libraries": Door("GET", "/libraries"),
    "a library file": Door("GET", f"/libraries/{PRIVATE}.json", private_marker=PRIVATE_URL),
    "a library's map": Door("GET", f"/libraries/{PRIVATE}/map.svg", private_marker=None),  # anonymous: 404
    "RAGFlow datasets": Door("GET", "/api/v1/datasets"),
    "MCP": Door("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                 "params": {"name": "libraries", "arguments": {}}}, MCP_HEADERS, extra="mcp"),
    # No embedder serves the test model: the Bearer answer is the door's own 404 (model_not_found), not the URL's 400.
    "OpenAI embeddings": Door("POST", "/v1/embeddings", {"model": TEST_MODEL, "input": "x"}, bearer_status=404,
                              private_marker=None),
    # An empty question needs no embedder; the private library is found only when the token is read.
    "Dify retrieval": Door("POST", "/dify/retrieval", {"knowledge_id": PRIVATE, "query": "", "retrieval_setting": {
        "top_k": 3, "score_threshold": 0}}, private_marker='"records"'),
    "OpenAI vector stores": Door("GET", "/v1/vector_stores"),
    "OpenAI vector store": Door("GET", f"/v1/vector_stores/{PRIVATE}", private_marker='"object":"vector_store"'),
    "OpenAI vector-store search": Door("POST", f"/v1/vector_stores/{PRIVATE}/search", {"query": ""},
                                       private_marker='"vector_store.search_results.page"'),
}


@dataclass(frozen=True)
class Served:
    host: RunningHost
    token: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("url-tokens")
    write_library(root / "libraries" / "public.json", make_library(unit_vectors(3, 8, seed=1)))
    private = make_library(unit_vectors(3, 8, seed=2))
    for row, bit in enumerate(private["bits"]):
        bit["info"]["url"] = f"{PRIVATE_URL}{row}"
    write_library(root / "libraries" / f"{PRIVATE}.json", private)
    access = root / "access.SECRET.json"
    admin("access", "init", "--access", str(access), cwd=root)
    token = admin("token", "issue", "alice@example.com", "--tag", "team", "--access", str(access), cwd=root)
    host = start_host(root / "libraries", "--access", str(access), cwd=root)
    yield Served(host, token)
    stop_host(host)


def knock(served: Served, door: Door, params: dict[str, str] | None = None,
          headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.request(door.method, f"{served.host.url}{door.path}", params=params, json=door.json,
                         headers={**door.headers, **(headers or {})}, timeout=30)


def logged_queries(host: RunningHost, path: str) -> list[str]:
    """The query strings of the access log's lines for `path`, as logged."""
    lines = [json.loads(line) for line in host.log().splitlines() if line.startswith("{")]
    return [line["query"] for line in lines if line["path"] == path]


def error_message(response: httpx.Response) -> str:
    body = response.json()
    if "error_msg" in body:  # Dify's
        return str(body["error_msg"])
    error = body["message"] if "message" in body else body["error"]  # RAGFlow's envelope, OpenAI's, or ours
    return str(error["message"] if isinstance(error, dict) else error)


@pytest.mark.parametrize("name", ["access_token", "token", "Access_Token"])
@pytest.mark.parametrize("door", DOORS)
def test_a_token_in_the_url_is_a_400_saying_where_to_send_it(served: Served, door: str, name: str) -> None:
    response = knock(served, DOORS[door], params={name: served.token})

    assert response.status_code == 400, response.text
    assert "send it in an Authorization: Bearer header" in error_message(response)
    assert served.token not in response.text
    deadline = time.monotonic() + 10  # the line is written as the answer leaves: poll for it
    while f"{name}=REDACTED" not in logged_queries(served.host, DOORS[door].path):
        assert time.monotonic() < deadline, "the refused request was not logged with its token redacted"
        time.sleep(0.05)
    assert served.token not in served.host.log()


@pytest.mark.parametrize("door", DOORS)
def test_the_same_token_as_bearer_is_read_at_every_door(served: Served, door: str) -> None:
    if DOORS[door].extra and importlib.util.find_spec(DOORS[door].extra) is None:
        unavailable(f"{door} needs the {DOORS[door].extra} extra")
    anonymous = knock(served, DOORS[door])
    response = knock(served, DOORS[door], headers={"Authorization": f"Bearer {served.token}"})

    assert response.status_code == DOORS[door].bearer_status, response.text
    marker = DOORS[door].private_marker
    if marker is not None:
        assert marker in response.text and marker not in anonymous.text
    if response.status_code == 400:
        assert "Authorization: Bearer" not in error_message(response)


def test_a_blank_token_parameter_or_another_name_is_no_token() -> None:
    assert url_token_parameter(b"") is None
    assert url_token_parameter(b"access_token=&token=%20&q=token&tokens=x&my_token=y") is None
    assert url_token_parameter(b"q=x&TOKEN=abc") == "TOKEN"
    assert url_token_parameter(b"access%5Ftoken=abc") == "access_token"  # percent-encoded names too


def test_the_access_log_redacts_credentials_in_the_query_string() -> None:
    logged = redacted_query(b"q=love+is&access_token=abc&TOKEN=def&api_key=ghi&client_secret=jkl&count=3")

    assert logged == ("q=love%20is&access_token=REDACTED&TOKEN=REDACTED&api_key=REDACTED&client_secret=REDACTED"
                      "&count=3")
    assert redacted_query(b"") == ""
