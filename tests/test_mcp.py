"""`/mcp` with the official MCP client (the `mcp` package) against real host processes (SPEC §10).

The host serves the sample library and its private drafts (tag `unpublished`); the token grants
that tag. The `search` tool must answer exactly what `POST /` answers for the same arguments.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from components import admin
from conftest import PROJECT, RunningHost, start_host, stop_host
from mcp import ClientSession
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from host.service.harness import free_port

pytestmark = pytest.mark.anyio
DANIEL = "Daniel in the den of lions"
JONAH = "a great fish swallowed the prophet"
RPC_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@dataclass(frozen=True)
class Served:
    url: str
    token: str
    root: Path


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("mcp")
    shutil.copytree(PROJECT / "libraries", root / "libraries", ignore=shutil.ignore_patterns(".compiled"))
    access = root / "access.SECRET.json"
    admin("access", "init", "--access", str(access), cwd=root)
    return root, admin("token", "issue", "alice", "--tag", "unpublished", "--access", str(access), cwd=root)


@pytest.fixture(scope="module")
def served(prepared: tuple[Path, str]) -> Iterator[Served]:
    root, token = prepared
    host = start_host(root / "libraries", "--access", str(root / "access.SECRET.json"), timeout=60, embedder=True)
    yield Served(host.url, token, root)
    stop_host(host)


@asynccontextmanager
async def session(url: str, token: str | None = None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as connected,
    ):
        await connected.initialize()
        yield connected


def post_slash(url: str, token: str | None, accept: str = "application/json", **fields: Any) -> httpx.Response:
    headers = {"Accept": accept, **({"Authorization": f"Bearer {token}"} if token else {})}
    response = httpx.post(f"{url}/", json=fields, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    return response


# ---- the tools -----------------------------------------------------------------------------------------


async def test_the_client_lists_both_tools_with_their_arguments(served: Served) -> None:
    async with session(served.url) as connected:
        tools = {tool.name: tool for tool in (await connected.list_tools()).tools}

    assert sorted(tools) == ["libraries", "search"]
    search = tools["search"]
    assert set(search.input_schema["properties"]) == {"query", "count", "count_type", "library", "similarity_threshold",
                                                       "score_threshold", "constraint", "mode", "keyword_weight"}
    assert search.input_schema["required"] == ["query"]
    assert search.output_schema and set(search.output_schema["properties"]) >= {"bits", "embedding_model"}
    assert search.annotations is not None and search.annotations.read_only_hint


@pytest.mark.parametrize("with_token", [False, True], ids=["anonymous", "token"])
async def test_search_answers_exactly_what_post_slash_answers(served: Served, with_token: bool) -> None:
    token = served.token if with_token else None
    arguments = {"query": DANIEL, "count": 600, "count_type": "token", "similarity_threshold": 0.1,
                 "constraint": "NOT title:genesis"}

    async with session(served.url, token) as connected:
        result = await connected.call_tool("search", arguments)

    as_json = post_slash(served.url, token, **arguments).json()
    as_text = post_slash(served.url, token, "text/plain", **arguments).text
    assert not result.is_error
    assert result.structured_content == as_json
    assert result.content[0].type == "text" and result.content[0].text == as_text
    titles = [bit["info"]["title"] for bit in as_json["bits"]]
    assert titles and all("Genesis" not in title for title in titles)
    assert any(title.startswith("Daniel 6") for title in titles) == with_token  # the drafts are private


@pytest.mark.parametrize("mode", ["hybrid", "vector", "keyword"])
async def test_a_score_threshold_above_the_best_bits_answers_nothing_and_says_how_close_it_came(
        served: Served, mode: str) -> None:
    asked = {"query": "Methuselah", "count": 3, "count_type": "bit", "mode": mode}
    async with session(served.url) as connected:
        every = (await connected.call_tool("search", asked)).structured_content
        best = every["details"]["best_score"]
        above = (await connected.call_tool("search", {**asked, "score_threshold": best + 1e-6})).structured_content
        at = (await connected.call_tool("search", {**asked, "score_threshold": best})).structured_content

    first = every["bits"][0]
    assert best == first.get("score", first.get("similarity")) and 0 < best < 1
    assert above["bits"] == [] and above["details"]["best_score"] == best
    assert at["bits"][0] == first and above == post_slash(served.url, None, **asked, score_threshold=best + 1e-6).json()


@pytest.mark.parametrize(("mode", "query", "first"), [
    ("keyword", "Methuselah", "Genesis 5:"),  # the name, which vector search blurs
    ("hybrid", "the son of Amittai", "Jonah 1:"),
    (None, "the son of Amittai", "Jonah 1:"),  # hybrid is the default
])
async def test_search_ranks_in_each_mode_as_post_slash_does(served: Served, mode: str | None, query: str,
                                                            first: str) -> None:
    arguments = {"query": query, "count": 3, "count_type": "bit", **({"mode": mode} if mode else {})}

    async with session(served.url) as connected:
        result = await connected.call_tool("search", arguments)

    assert not result.is_error
    assert result.structured_content == post_slash(served.url, None, **arguments).json()
    bits = result.structured_content["bits"]
    assert bits[0]["info"]["title"].startswith(first) and result.structured_content["sort"] == "manual"
    assert all(bit["score"] > 0 for bit in bits)
    assert all("similarity" not in bit for bit in bits) if mode == "keyword" else all("similarity" in bit for bit in bits)


async def test_keyword_weight_moves_the_fused_ranking_and_a_bad_one_is_refused(served: Served) -> None:
    arguments = {"query": "the son of Amittai", "count": 5, "count_type": "bit"}
    async with session(served.url) as connected:
        meaning = await connected.call_tool("search", {**arguments, "keyword_weight": 0})
        words = await connected.call_tool("search", {**arguments, "keyword_weight": 1})
        too_much = await connected.call_tool("search", {**arguments, "keyword_weight": 1.5})
        vector = await connected.call_tool("search", {**arguments, "mode": "vector", "keyword_weight": 0.3})

    def titles(answer: dict[str, Any]) -> list[str]:
        return [bit["info"]["title"] for bit in answer["bits"]]

    by_meaning = post_slash(served.url, None, **arguments, mode="vector").json()
    assert titles(meaning.structured_content) == titles(by_meaning)  # weight 0: meaning alone decides
    assert titles(words.structured_content)[0].startswith("Jonah 1:")
    assert not titles(meaning.structured_content)[0].startswith("Jonah 1:")
    assert too_much.is_error and too_much.content[0].text.endswith("keyword_weight must be between 0 and 1, got 1.5")
    assert vector.is_error and "applies only to mode=hybrid" in vector.content[0].text


async def test_the_libraries_tool_lists_what_get_libraries_lists(served: Served) -> None:
    for token in (None, served.token):
        async with session(served.url, token) as connected:
            result = await connected.call_tool("libraries", {})
        listed = httpx.get(f"{served.url}/libraries", headers={"Authorization": f"Bearer {token}"} if token else {}).json()
        assert result.structured_content == listed
        assert len(listed["libraries"]) == (2 if token else 1)


async def test_library_narrows_the_search_to_one_library(served: Served) -> None:
    async with session(served.url, served.token) as connected:
        drafts = await connected.call_tool("search", {"query": JONAH, "library": "access/unpublished/drafts",
                                                      "count": 3, "count_type": "bit"})
        hidden = await connected.call_tool("search", {"query": JONAH, "library": "elsewhere"})
    async with session(served.url) as connected:
        anonymous = await connected.call_tool("search", {"query": JONAH, "library": "access/unpublished/drafts"})

    drafts_urls = {bit["info"]["url"] for bit in httpx.get(
        f"{served.url}/libraries/access/unpublished/drafts.json",
        headers={"Authorization": f"Bearer {served.token}"}).json()["bits"]}
    assert {bit["info"]["url"] for bit in drafts.structured_content["bits"]} <= drafts_urls
    assert len(drafts.structured_content["bits"]) == 3
    message = "there is no library or folder of libraries named '{}' here; the libraries tool lists them"
    assert hidden.is_error and hidden.content[0].text.endswith(message.format("elsewhere"))
    assert anonymous.is_error and anonymous.content[0].text.endswith(message.format("access/unpublished/drafts"))


async def test_refusals_are_tool_errors_in_post_slashs_words(served: Served) -> None:
    async with session(served.url) as connected:
        constraint = await connected.call_tool("search", {"query": "x", "constraint": "title:("})
        count = await connected.call_tool("search", {"query": "x", "count": 0})

    expected = httpx.post(f"{served.url}/", json={"query": "x", "constraint": "title:("}).json()["error"]
    assert constraint.is_error and constraint.content[0].text.endswith(expected)
    assert count.is_error and count.content[0].text.endswith("count must be a positive integer, got 0")


# ---- HTTP around the protocol ------------------------------------------------------------------------------


def rpc(url: str, headers: dict[str, str] | None = None, **params: Any) -> httpx.Response:
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "search", "arguments": {"query": JONAH, "count": 1, "count_type": "bit", **params}}}
    return httpx.post(f"{url}/mcp", json=call, headers={**RPC_HEADERS, **(headers or {})}, timeout=60)


async def test_a_token_that_fails_verification_is_a_401_before_mcp(served: Served) -> None:
    refused = rpc(served.url, {"Authorization": "Bearer not.a-valid.jwt"})

    assert refused.status_code == 401 and refused.json()["error"].startswith("the access token was refused")
    assert refused.headers["www-authenticate"].startswith('Bearer error="invalid_token"')
    with pytest.raises(Exception):  # noqa: B017 (the client raises its transport's error for a 401)
        async with session(served.url, "not.a-valid.jwt") as connected:
            await connected.list_tools()


async def test_origins_hosts_and_methods(served: Served) -> None:
    assert rpc(served.url, {"Origin": "http://evil.example"}).status_code == 403
    assert rpc(served.url, {"Origin": "http://localhost:6274"}).status_code == 200
    assert rpc(served.url, {"Host": "library.example.com"}).status_code == 200  # behind a proxy, by name
    assert httpx.get(f"{served.url}/mcp").status_code == 405
    private = rpc(served.url, {"Authorization": f"Bearer {served.token}"})
    assert private.headers["cache-control"] == "private, no-store" and private.headers["vary"] == "Authorization"
    assert json.loads(private.text)["result"]["structuredContent"]["bits"]


async def test_several_workers_answer_one_client(prepared: tuple[Path, str]) -> None:
    root, token = prepared
    host = start_host(root / "libraries", "--access", str(root / "access.SECRET.json"), "--workers", "2",
                      timeout=90, embedder=True)
    try:
        async with session(host.url, token) as connected:
            answers = [await connected.call_tool("search", {"query": DANIEL, "count": 2, "count_type": "bit"})
                       for _ in range(8)]
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http, \
                Client(streamable_http_client(f"{host.url}/mcp", http_client=http)) as client:
            newest = await client.call_tool("search", {"query": DANIEL, "count": 2, "count_type": "bit"})
    finally:
        stop_host(host)

    assert all(not answer.is_error for answer in answers)
    assert len({json.dumps(answer.structured_content) for answer in answers}) == 1
    assert newest.structured_content == answers[0].structured_content


# ---- without the `mcp` package ----------------------------------------------------------------------


def test_without_the_mcp_extra_the_host_serves_everything_else_and_says_so(prepared: tuple[Path, str]) -> None:
    root, _ = prepared
    port = free_port()
    log = root / f"no-mcp-{port}.log"
    code = "import sys; sys.modules['mcp'] = None; from host.cli import main; sys.exit(main())"
    with log.open("w") as output:
        # One process: workers would be fresh interpreters, where `mcp` is importable again.
        process = subprocess.Popen([sys.executable, "-c", code, "serve", "--libraries", str(root / "libraries"),
                                    "--port", str(port), "--embedder", "none", "--workers", "1"], cwd=root, stdout=output,
                                   stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(PROJECT)})
    host = RunningHost(f"http://127.0.0.1:{port}", port, process, log)
    try:
        host.wait_until_ready("/healthz", timeout=60)
        missing = rpc(host.url)
        query = httpx.post(f"{host.url}/", json={"count": 1, "count_type": "bit"})
    finally:
        stop_host(host)

    assert missing.status_code == 501
    assert missing.json() == {"error": "this host serves no MCP: the MCP server at /mcp needs the `mcp` extra: "
                                       "pip install 'polymath-host[mcp]'"}
    assert query.status_code == 200 and len(query.json()["bits"]) == 1
    lines = [line for line in host.log().splitlines() if "MCP" in line]
    assert lines == ["no MCP server: the MCP server at /mcp needs the `mcp` extra: pip install 'polymath-host[mcp]'"]
