"""`Accept: text/plain` on `POST /`: the budgeted bits as a ready-to-paste context block."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from librarian import b64, make_library, unit_vectors, write_library

from host.service.settings import Settings
from host.web.app import create_app
from host.web.context_block import render_context_block
from host.web.responses import answer_format

pytestmark = pytest.mark.anyio
VECTORS = unit_vectors(12, seed=5)
QUERY = b64(unit_vectors(1, seed=6)[0])


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    library = make_library(VECTORS, token_counts=[10 + row for row in range(12)])
    library["bits"][3]["info"] = {"url": "https://example.com/untitled\nsecond line"}  # no title, a broken URL
    write_library(tmp_path / "libraries" / "notes.json", library)
    app = create_app(Settings(libraries=tmp_path / "libraries", watch_interval=0))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host.test") as connected:
        yield connected


async def both(client: httpx.AsyncClient, **fields: object) -> tuple[dict, httpx.Response]:
    body = {"query_embedding": QUERY, **fields}
    as_json = await client.post("/", json=body)
    as_text = await client.post("/", json=body, headers={"Accept": "text/plain"})
    assert as_json.status_code == as_text.status_code == 200, (as_json.text, as_text.text)
    return as_json.json(), as_text


@pytest.mark.parametrize(("count", "count_type"), [(45, "token"), (5, "bit"), (1000, "token")])
async def test_the_block_holds_exactly_the_bits_of_the_json_answer_in_the_documented_format(
    client: httpx.AsyncClient, count: int, count_type: str
) -> None:
    result, response = await both(client, count=count, count_type=count_type)

    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    expected = "\n".join(
        f"[{number}] {bit['info'].get('title') or ' '.join(bit['info']['url'].split())}\n"
        f"Source: {' '.join(bit['info']['url'].split())}\n\n{bit['text']}\n"
        for number, bit in enumerate(result["bits"], start=1))
    assert response.text == expected
    assert response.text.count("\nSource: ") == len(result["bits"]) > 0


async def test_a_first_bit_over_the_budget_is_cut_as_in_json(client: httpx.AsyncClient) -> None:
    result, response = await both(client, count=4, count_type="token")

    assert len(result["bits"]) == 1 and result["bits"][0]["token_count"] == 4
    assert response.text.endswith(f"\n\n{result['bits'][0]['text']}\n")


async def test_a_threshold_above_every_bit_gives_an_empty_block(client: httpx.AsyncClient) -> None:
    result, response = await both(client, similarity_threshold=1.5)

    assert result["bits"] == [] and response.text == ""


async def test_omit_does_not_empty_the_block(client: httpx.AsyncClient) -> None:
    result, response = await both(client, count=2, count_type="bit", omit="text,info")

    assert "text" not in result["bits"][0] and "info" not in result["bits"][0]
    assert response.text.startswith("[1] ") and response.text.count("\nSource: https://example.com/") == 2
    assert "bit number" in response.text


def test_rendering_keeps_each_header_on_one_line() -> None:
    block = render_context_block([{"text": "body \n", "info": {"url": "https://a.example/x", "title": "Two\nlines"}},
                                  {"text": "", "info": {"url": "https://b.example/"}}])

    assert block == ("[1] Two lines\nSource: https://a.example/x\n\nbody\n\n"
                     "[2] https://b.example/\nSource: https://b.example/\n\n\n")
    assert render_context_block([]) == ""


@pytest.mark.parametrize(("accept", "chosen"), [
    ("", "json"), ("*/*", "json"), ("application/json", "json"), ("text/plain", "text"),
    ("text/plain, application/json", "text"), ("application/json, text/plain", "json"),
    ("application/json;q=0.5, text/plain", "text"), ("text/plain;q=0", "json"),
    ("text/html,application/xhtml+xml,*/*;q=0.8", "json"), ("application/msgpack, text/plain", "msgpack"),
    ("TEXT/PLAIN; charset=utf-8", "text"), ("text/plain;q=abc", "json"),
])
def test_the_answer_format_follows_the_accept_header(accept: str, chosen: str) -> None:
    assert answer_format(accept) == chosen


async def test_text_answers_are_cached_apart_from_json(client: httpx.AsyncClient) -> None:
    first = await client.post("/", json={"query_embedding": QUERY}, headers={"Accept": "text/plain"})
    second = await client.post("/", json={"query_embedding": QUERY})
    third = await client.post("/", json={"query_embedding": QUERY}, headers={"Accept": "text/plain"})

    assert first.text == third.text and second.json()["bits"]
    assert np.isclose(second.json()["bits"][0]["similarity"], max(VECTORS @ unit_vectors(1, seed=6)[0]))
