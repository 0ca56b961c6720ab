"""CORS without a browser: preflights, headers on answers and refusals, the allow-list, `--cors-origin`.

In-process over httpx (what a browser sends is spelled out); tests/test_browser_cors.py runs the
real JavaScript client in Chromium from another origin.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import PROJECT
from librarian import b64, make_library, unit_vectors, write_library
from starlette.applications import Starlette

from host.embedders.service import Embedders
from host.service.process import ACCESS_LOG
from host.service.settings import Settings
from host.web.app import create_app
from host.web.middleware.cors import parse_cors_origins

pytestmark = pytest.mark.anyio

APP = "https://app.example"
PREFLIGHT = {"Origin": APP, "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization, content-type"}
QUERY = {"query_embedding": b64(unit_vectors(1, 8, seed=5)[0]), "count": 2, "count_type": "bit"}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def libraries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cors") / "libraries"
    write_library(folder / "public.json", make_library(unit_vectors(6, 8, seed=4)))
    return folder


def app_with(libraries: Path, **settings: Any) -> Starlette:
    return create_app(Settings(libraries=libraries, cache_dir=libraries.parent / "compiled", watch_interval=0,
                               **settings), embedders=Embedders([]))


def connect(app: Starlette) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host.test")


@pytest.fixture
async def client(libraries: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with connect(app_with(libraries)) as connected:
        yield connected


def assert_any_origin(response: httpx.Response) -> None:
    assert response.headers["access-control-allow-origin"] == "*"
    assert response.headers["access-control-expose-headers"] == "Link, ETag, Retry-After, WWW-Authenticate"
    assert "access-control-allow-credentials" not in response.headers


# ---- any origin (the default) ------------------------------------------------------------------------------


async def test_a_preflight_is_answered_with_what_a_browser_needs(client: httpx.AsyncClient) -> None:
    response = await client.options("/", headers=PREFLIGHT)

    assert response.status_code == 204 and response.content == b""
    assert response.headers["access-control-allow-origin"] == "*"
    assert response.headers["access-control-allow-methods"] == "GET, HEAD, POST"
    allowed = {name.strip().lower() for name in response.headers["access-control-allow-headers"].split(",")}
    assert {"authorization", "content-type", "accept", "if-none-match"} <= allowed
    assert response.headers["access-control-max-age"] == "7200"
    assert "access-control-allow-credentials" not in response.headers
    assert "vary" not in response.headers  # with "*" nothing depends on Origin


@pytest.mark.parametrize("path", ["/", "/v1/embeddings", "/libraries", "/libraries/public.json", "/nowhere"])
async def test_every_path_is_preflighted_alike(client: httpx.AsyncClient, path: str) -> None:
    response = await client.options(path, headers=PREFLIGHT)

    assert response.status_code == 204 and response.headers["access-control-allow-origin"] == "*"


@pytest.mark.parametrize("origin", [APP, None])
async def test_answers_carry_the_headers_with_or_without_an_origin(client: httpx.AsyncClient,
                                                                    origin: str | None) -> None:
    headers = {"Origin": origin} if origin else {}
    for response in [await client.post("/", json=QUERY, headers=headers), await client.get("/libraries", headers=headers),
                     await client.get("/libraries/public.json", headers=headers), await client.get("/", headers=headers)]:
        assert response.status_code == 200
        assert_any_origin(response)
        assert response.headers["link"] == '</>; rel="polymath"'


async def test_refusals_carry_the_headers_too(libraries: Path) -> None:
    app = app_with(libraries, max_body_bytes=100, rate_limit=0.001, rate_burst=4)
    headers = {"Origin": APP}
    async with connect(app) as client:
        refusals = {
            405: await client.post("/libraries", headers=headers),  # the JavaScript client's discovery starts here
            404: await client.get("/libraries/nothing.json", headers=headers),
            401: await client.post("/", json=QUERY, headers={**headers, "Authorization": "Bearer a.b.c"}),
        }
        refusals[413] = await client.post("/", content=b"x" * 200, headers={**headers, "Content-Type": "application/json"})
        refusals[429] = await client.get("/libraries", headers=headers)

    for status, response in refusals.items():
        assert response.status_code == status, (status, response.text)
        assert_any_origin(response)
    assert "Retry-After" in refusals[429].headers["access-control-expose-headers"]


async def test_preflights_never_spend_the_rate_limit_and_are_logged(libraries: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    app = app_with(libraries, rate_limit=0.001, rate_burst=2)
    async with connect(app) as client:
        with caplog.at_level(logging.INFO, logger=ACCESS_LOG):
            preflights = [await client.options("/", headers=PREFLIGHT) for _ in range(10)]
        queries = [await client.post("/", json=QUERY, headers={"Origin": APP}) for _ in range(3)]

    assert [response.status_code for response in preflights] == [204] * 10
    assert [response.status_code for response in queries] == [200, 200, 429]  # the burst of 2 was all theirs
    logged = [json.loads(record.getMessage()) for record in caplog.records if record.name == ACCESS_LOG]
    assert [(line["method"], line["status"]) for line in logged] == [("OPTIONS", 204)] * 10


async def test_an_options_request_that_is_not_a_preflight_reaches_the_routes(client: httpx.AsyncClient) -> None:
    response = await client.options("/libraries", headers={"Origin": APP})

    assert response.status_code == 405
    assert_any_origin(response)


# ---- an allow-list -----------------------------------------------------------------------------------------


async def test_an_allow_list_names_the_origin_back_and_varies_by_it(libraries: Path) -> None:
    app = app_with(libraries, cors_origin="https://app.example, http://localhost:3000")
    async with connect(app) as client:
        allowed = await client.options("/", headers=PREFLIGHT)
        local = await client.post("/", json=QUERY, headers={"Origin": "http://localhost:3000"})
        other = await client.post("/", json=QUERY, headers={"Origin": "https://evil.example"})
        refused = await client.options("/", headers={**PREFLIGHT, "Origin": "https://evil.example"})
        plain = await client.get("/libraries")

    assert allowed.status_code == 204 and allowed.headers["access-control-allow-origin"] == APP
    assert allowed.headers["vary"] == "Origin"
    assert local.headers["access-control-allow-origin"] == "http://localhost:3000"
    assert local.headers["vary"] == "Authorization, Origin"
    assert other.status_code == 200 and "access-control-allow-origin" not in other.headers
    assert other.headers["vary"] == "Authorization, Origin"
    assert refused.status_code == 403 and "access-control-allow-origin" not in refused.headers
    assert refused.json() == {"error": "pages from 'https://evil.example' may not call this host (see its --cors-origin)"}
    assert plain.headers["vary"] == "Authorization, Origin"  # a shared cache must not serve it to another origin
    assert "access-control-allow-origin" not in plain.headers


async def test_none_turns_cors_off(libraries: Path) -> None:
    async with connect(app_with(libraries, cors_origin="none")) as client:
        preflight = await client.options("/", headers=PREFLIGHT)
        answer = await client.post("/", json=QUERY, headers={"Origin": APP})

    assert preflight.status_code == 405
    assert not any(name.startswith("access-control-") for name in [*preflight.headers, *answer.headers])


@pytest.mark.parametrize(("value", "origins"), [
    ("*", None),
    ("none", set()),
    ("HTTPS://App.Example:443/", {"https://app.example"}),
    ("http://localhost:3000,https://a.example", {"http://localhost:3000", "https://a.example"}),
    ("http://[::1]:8080", {"http://[::1]:8080"}),
])
def test_origins_are_read_as_browsers_send_them(value: str, origins: set[str] | None) -> None:
    policy = parse_cors_origins(value)

    assert policy.any_origin == (origins is None)
    assert policy.origins == frozenset(origins or ())


@pytest.mark.parametrize(("value", "says"), [
    ("app.example", "'app.example' is not an origin"),
    ("https://app.example/path", "'https://app.example/path' is not an origin"),
    ("ftp://app.example", "is not an origin"),
    ("https://app.example,*", "'*' stands alone"),
    ("https://app.example:99999", "is not an origin"),
])
def test_a_malformed_origin_is_refused_naming_it(value: str, says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("*", r"\*")):
        parse_cors_origins(value)


# ---- `serve --cors-origin` ---------------------------------------------------------------------------------


def test_serve_refuses_a_malformed_origin_in_one_line(libraries: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "host", "serve", "--libraries", str(libraries),
                           "--cors-origin", "https://app.example", "--cors-origin", "app.example/"],
                          capture_output=True, text=True, timeout=60, cwd=libraries.parent,
                          env={**os.environ, "PYTHONPATH": str(PROJECT)})

    assert done.returncode == 1
    assert done.stderr == ("error: --cors-origin: 'app.example/' is not an origin; write it as scheme://host[:port], "
                           "e.g. https://app.example or http://localhost:3000\n")


def test_serve_takes_the_option_again_and_again(libraries: Path, run_host: Any) -> None:
    host = run_host(libraries, "--cors-origin", "https://a.example", "--cors-origin", "https://b.example,http://c.test")

    answers = {origin: httpx.options(f"{host.url}/", headers={**PREFLIGHT, "Origin": origin}, timeout=10)
               for origin in ("https://a.example", "https://b.example", "http://c.test", "https://d.example")}

    assert {origin: answer.status_code for origin, answer in answers.items()} == {
        "https://a.example": 204, "https://b.example": 204, "http://c.test": 204, "https://d.example": 403}
    assert answers["http://c.test"].headers["access-control-allow-origin"] == "http://c.test"
