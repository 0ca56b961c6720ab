"""The HTTP host, in-process (SPEC §3, §5): bodies, errors, headers, pages and caches.

Every test talks to `create_app(Settings(...))` over `httpx.ASGITransport`, on real library
files written to a temporary folder.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgpack
import numpy as np
import pytest
from librarian import TEST_MODEL, b64, brute_force_ranking, make_bit, segment_folder, unit_vectors, write_library
from starlette.applications import Starlette

from access import AccessControl
from access.keys import generate_key_entry
from access.tokens import issue_token
from host.service.settings import Settings
from host.web.app import create_app

pytestmark = pytest.mark.anyio

DIMENSION = 8
PUBLIC = unit_vectors(10, DIMENSION, seed=31)  # science.json, bits 0-9
PRIVATE = unit_vectors(2, DIMENSION, seed=32)  # science.json, bits 100-101, tagged `team` in the file
DRAFTS = unit_vectors(3, DIMENSION, seed=33)  # access/team/drafts.json, bits 200-202
QUERY = unit_vectors(1, DIMENSION, seed=34)[0]
LEGACY_TOKEN = "sk_alice_team_0123456789"
MAX_BODY_BYTES = 64 * 1024
POLYMATH_LINK = '</>; rel="polymath"'


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def bits(vectors: np.ndarray, first: int, **extra: Any) -> list[dict[str, Any]]:
    return [make_bit(first + row, vector, 10, **extra) for row, vector in enumerate(vectors)]


def library_file(*bit_lists: list[dict[str, Any]], model: str = TEST_MODEL) -> dict[str, Any]:
    return {"version": 1, "embedding_model": model, "bits": [bit for some in bit_lists for bit in some]}


def write_access_file(path: Path) -> Path:
    """An access file with a signing key and one legacy token granting `team`."""
    path.write_text(json.dumps({
        "issuer": "https://library.test",
        "keys": [generate_key_entry("HS256", "k1")],
        "tokens": {"alice": {"token": LEGACY_TOKEN, "access_tags": ["team"]}},
    }))
    path.chmod(0o600)
    return path


@dataclass(frozen=True)
class Host:
    """A folder of libraries plus an access file; `app()` builds a fresh app on them."""

    folder: Path
    access: Path | None = None
    max_body_bytes: int = MAX_BODY_BYTES

    def settings(self) -> Settings:
        return Settings(libraries=self.folder / "libraries", cache_dir=self.folder / "compiled",
                        access=self.access, max_body_bytes=self.max_body_bytes)

    def app(self) -> Starlette:
        return create_app(self.settings())


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Host:
    """science.json (10 public bits and 2 tagged `team`) and access/team/drafts.json (3 bits)."""
    folder = tmp_path_factory.mktemp("host")
    write_library(folder / "libraries" / "science.json",
                  library_file(bits(PUBLIC, 0), bits(PRIVATE, 100, access_tag="team")))
    write_library(folder / "libraries" / "access" / "team" / "drafts.json", library_file(bits(DRAFTS, 200)))
    return Host(folder, write_access_file(folder / "access.SECRET.json"))


@pytest.fixture(scope="module")
def app(host: Host) -> Starlette:
    return host.app()


@pytest.fixture(scope="module")
def jwt_token(host: Host) -> str:
    """A signed token granting `team`, as `token issue bob --tag team` prints it."""
    assert host.access is not None
    return issue_token(AccessControl.from_file(host.access).settings, "bob", ["team"]).token


def connect(app: Starlette, *, raise_app_exceptions: bool = True) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=raise_app_exceptions)
    return httpx.AsyncClient(transport=transport, base_url="http://host.test")


@pytest.fixture
async def client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    async with connect(app) as client:
        yield client


@pytest.fixture
def fresh_client(host: Host) -> Callable[..., httpx.AsyncClient]:
    """A client of a new app (its own caches and metrics) on the same libraries."""
    return lambda **settings: connect(create_app(Settings(**{**host.settings().__dict__, **settings})))


def urls(result: dict[str, Any]) -> list[str]:
    return [bit["info"]["url"] for bit in result["bits"]]


def url_of(number: int) -> str:
    return f"https://example.com/{number}"


def assert_error(response: httpx.Response, status: int, message: str | None = None) -> str:
    """A JSON `{"error": ...}` body with this status and nothing a client should not see."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert list(body) == ["error"] and isinstance(body["error"], str) and body["error"]
    assert "Traceback" not in response.text and 'File "' not in response.text
    if message is not None:
        assert body["error"] == message
    return body["error"]


# ---- the query endpoint: bodies ------------------------------------------------------------------------

FIELDS = {"query_embedding": b64(QUERY), "count": "3", "count_type": "bit", "omit": "embedding"}
EXPECTED_TOP_3 = [url_of(row) for row in brute_force_ranking(PUBLIC, QUERY)[:3]]


def as_json(fields: dict[str, str]) -> dict[str, Any]:
    return {"json": fields}


def as_json_with_charset(fields: dict[str, str]) -> dict[str, Any]:
    return {"content": json.dumps(fields).encode(), "headers": {"content-type": "application/json; charset=utf-8"}}


def as_json_numbers(fields: dict[str, str]) -> dict[str, Any]:
    return {"json": {**fields, "count": int(fields["count"])}}


def as_urlencoded(fields: dict[str, str]) -> dict[str, Any]:
    return {"data": fields}


def as_multipart_fields(fields: dict[str, str]) -> dict[str, Any]:
    """What the Python client (urllib3 fields=) and the JavaScript client (FormData) send."""
    return {"files": {name: (None, value) for name, value in fields.items()}}


def as_multipart_data_and_file(fields: dict[str, str]) -> dict[str, Any]:
    """httpx data= with files=: plain fields, and the embedding as an uploaded file part."""
    others = {name: value for name, value in fields.items() if name != "query_embedding"}
    return {"data": others, "files": {"query_embedding": ("query.b64", fields["query_embedding"].encode(), "text/plain")}}


BODY_FORMS = [as_json, as_json_with_charset, as_json_numbers, as_urlencoded, as_multipart_fields,
              as_multipart_data_and_file]


@pytest.mark.parametrize("form", BODY_FORMS, ids=lambda form: form.__name__)
async def test_every_body_type_gives_the_same_answer(client: httpx.AsyncClient, form: Callable[..., Any]) -> None:
    reference = await client.post("/", json=FIELDS)

    response = await client.post("/", **form(FIELDS))

    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.content == reference.content
    result = response.json()
    assert urls(result) == EXPECTED_TOP_3
    assert result["omit"] == "embedding" and result["version"] == 1 and result["sort"] == "similarity"


async def test_multipart_with_the_python_client_s_empty_token_is_anonymous(client: httpx.AsyncClient) -> None:
    response = await client.post("/", **as_multipart_fields({**FIELDS, "access_token": "", "version": "1",
                                                             "query_embedding_model": TEST_MODEL}))

    assert response.status_code == 200
    assert urls(response.json()) == EXPECTED_TOP_3
    assert "public" in response.headers["cache-control"]


async def test_no_body_at_all_is_a_random_query_with_the_defaults(client: httpx.AsyncClient) -> None:
    response = await client.post("/")

    assert response.status_code == 200
    result = response.json()
    assert sorted(urls(result)) == sorted(url_of(row) for row in range(10))  # 100 tokens of a 1000 budget
    assert result["omit"] == "embedding"
    assert all("embedding" not in bit and "similarity" in bit for bit in result["bits"])
    assert result["details"]["counts"]["bits"] == 10


async def test_a_float64_query_gives_the_float32_answer(client: httpx.AsyncClient) -> None:
    as_float32 = await client.post("/", json={**FIELDS, "query_embedding": b64(QUERY, "<f4")})
    as_float64 = await client.post("/", json={**FIELDS, "query_embedding": b64(QUERY.astype(np.float64), "<f8")})

    assert as_float64.status_code == 200
    assert as_float64.content == as_float32.content


async def test_msgpack_answers_carry_raw_float32_embeddings(client: httpx.AsyncClient) -> None:
    fields = {**FIELDS, "omit": ""}

    as_json_body = (await client.post("/", json=fields)).json()
    response = await client.post("/", json=fields, headers={"Accept": "application/msgpack"})

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/msgpack"
    as_msgpack = msgpack.unpackb(response.content, raw=False)
    assert {k: v for k, v in as_msgpack.items() if k != "bits"} == {k: v for k, v in as_json_body.items() if k != "bits"}
    assert len(as_msgpack["bits"]) == len(as_json_body["bits"]) == 3
    for packed, textual in zip(as_msgpack["bits"], as_json_body["bits"]):
        assert isinstance(packed["embedding"], bytes)
        assert packed["embedding"] == base64.b64decode(textual["embedding"])
        assert len(packed["embedding"]) == DIMENSION * 4
        assert {k: v for k, v in packed.items() if k != "embedding"} == {
            k: v for k, v in textual.items() if k != "embedding"}


async def test_a_token_budget_over_http_stops_at_the_first_overflowing_bit(client: httpx.AsyncClient) -> None:
    response = await client.post("/", json={"query_embedding": b64(QUERY), "count": 29})

    result = response.json()
    assert urls(result) == [url_of(row) for row in brute_force_ranking(PUBLIC, QUERY)[:2]]
    assert [bit["token_count"] for bit in result["bits"]] == [10, 10]


# ---- restricted bits over HTTP ----------------------------------------------------------------------------

AIMED_AT_PRIVATE = {"query_embedding": b64(PRIVATE[0]), "count": "3", "count_type": "bit", "omit": "embedding"}


async def test_an_anonymous_caller_never_gets_restricted_bits(client: httpx.AsyncClient) -> None:
    response = await client.post("/", json=AIMED_AT_PRIVATE)

    assert urls(response.json()) == [url_of(row) for row in brute_force_ranking(PUBLIC, PRIVATE[0])[:3]]


@pytest.mark.parametrize("how", ["access_token field", "bearer header"])
async def test_a_token_granting_the_tag_sees_restricted_bits(
    client: httpx.AsyncClient, jwt_token: str, how: str
) -> None:
    if how == "access_token field":
        response = await client.post("/", data={**AIMED_AT_PRIVATE, "access_token": LEGACY_TOKEN})
    else:
        response = await client.post("/", json=AIMED_AT_PRIVATE, headers={"Authorization": f"Bearer {jwt_token}"})

    assert response.status_code == 200
    assert urls(response.json())[0] == url_of(100)
    assert all("access_tag" not in bit for bit in response.json()["bits"])


async def test_an_unknown_opaque_token_is_anonymous(client: httpx.AsyncClient) -> None:
    anonymous = await client.post("/", json=AIMED_AT_PRIVATE)

    response = await client.post("/", json={**AIMED_AT_PRIVATE, "access_token": "sk_nobody_knows_this"})

    assert response.status_code == 200
    assert urls(response.json()) == urls(anonymous.json())


# ---- the query LRU cache ----------------------------------------------------------------------------------


async def test_identical_queries_are_answered_from_the_cache(fresh_client: Callable[..., httpx.AsyncClient]) -> None:
    async with fresh_client() as client:
        first = await client.post("/", json=FIELDS)
        second = await client.post("/", json=FIELDS)
        metrics = (await client.get("/metrics")).text

    assert second.content == first.content
    assert counter(metrics, "polymath_query_cache_hits_total") == 1


async def test_callers_with_different_grants_never_share_a_cached_answer(
    fresh_client: Callable[..., httpx.AsyncClient], jwt_token: str
) -> None:
    async with fresh_client() as client:
        anonymous = await client.post("/", json=AIMED_AT_PRIVATE)
        granted = await client.post("/", json=AIMED_AT_PRIVATE, headers={"Authorization": f"Bearer {jwt_token}"})
        anonymous_again = await client.post("/", json=AIMED_AT_PRIVATE)

    assert url_of(100) not in urls(anonymous.json())
    assert urls(granted.json())[0] == url_of(100)
    assert anonymous_again.content == anonymous.content


async def test_random_queries_are_not_cached(fresh_client: Callable[..., httpx.AsyncClient]) -> None:
    async with fresh_client() as client:
        for _ in range(3):
            assert (await client.post("/", json={"count": 2, "count_type": "bit"})).status_code == 200
        metrics = (await client.get("/metrics")).text

    assert counter(metrics, "polymath_query_cache_hits_total") == 0
    assert counter(metrics, 'polymath_queries_total{format="json"}') == 3


# ---- errors -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fields", "message"), [
    ({"count": 0}, "count must be a positive integer, got 0"),
    ({"count": "-1"}, "count must be a positive integer, got -1"),
    ({"count": "1.5"}, "count must be a positive integer, got '1.5'"),
    ({"count": "abc"}, "count must be a positive integer, got 'abc'"),
    ({"count": True}, "count must be a positive integer, got True"),
    ({"count": 10**9}, "count must be at most 100000, got 1000000000"),
    ({"version": 0}, "version must be a positive integer, got 0"),
    ({"count_type": "words"}, "count_type must be 'token' or 'bit', got 'words'"),
    ({"omit": "embedding,bogus"}, None),
    ({"query_embedding": [0.5] * DIMENSION}, None),
    ({"query_embedding": "%%%"}, "query_embedding is not valid base64"),
    ({"query_embedding": b64(np.ones(3))}, "query_embedding has 12 bytes, but test:unit-8 needs 8 values "
                                           "(32 bytes as float32 or 64 as float64)"),
    ({"query_embedding": b64(np.full(DIMENSION, np.nan))}, None),
    ({"query_embedding_model": "acme:unknown"}, "query_embedding_model 'acme:unknown' is not served here; "
                                                "this host serves test:unit-8"),
])
async def test_a_bad_argument_is_a_400_naming_it(client: httpx.AsyncClient, fields: dict[str, Any], message: str | None) -> None:
    response = await client.post("/", json={**FIELDS, **fields})

    error = assert_error(response, 400, message)
    assert next(iter(fields)) in error


async def test_a_form_body_whose_base64_plus_signs_became_spaces_is_read_as_curl_meant_it(
    client: httpx.AsyncClient,
) -> None:
    with_plus = next(encoded for seed in range(100) if "+" in (encoded := b64(unit_vectors(1, DIMENSION, seed=seed)[0])))
    fields = {**FIELDS, "query_embedding": with_plus}
    raw = "&".join(f"{name}={value}" for name, value in fields.items())  # `curl -d`: nothing percent-encoded

    as_curl_sends = await client.post("/", content=raw.encode(), headers={"content-type": "application/x-www-form-urlencoded"})
    as_json_sends = await client.post("/", json=fields)

    assert as_curl_sends.status_code == 200, as_curl_sends.text
    assert as_curl_sends.content == as_json_sends.content


async def test_a_bad_argument_in_a_form_is_a_400_too(client: httpx.AsyncClient) -> None:
    response = await client.post("/", **as_multipart_fields({**FIELDS, "count_type": "paragraph"}))

    assert_error(response, 400, "count_type must be 'token' or 'bit', got 'paragraph'")


@pytest.mark.parametrize(("body", "message"), [
    (b"{not json", "the body is not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    (b"\xff\xfe{}", "the body is not valid JSON: Expecting value: line 1 column 1 (char 0)"),
    (b"[" * 50_000, "the body is not valid JSON: nested too deeply"),
    (b'{"count": ' + b"9" * 5000 + b"}", "the body is not valid JSON: a number has more than 4300 digits"),
    (b'{"count": NaN}', "the body is not valid JSON: NaN is not a JSON value"),
    (b"", "the body is not valid JSON: Expecting value: line 1 column 1 (char 0)"),
    (b"[1, 2]", "the JSON body must be an object of arguments"),
    (b'"count=3"', "the JSON body must be an object of arguments"),
    (b"null", "the JSON body must be an object of arguments"),
])
async def test_a_json_body_that_is_not_an_object_is_a_400(client: httpx.AsyncClient, body: bytes, message: str) -> None:
    response = await client.post("/", content=body, headers={"content-type": "application/json"})

    assert_error(response, 400, message)


async def test_a_multipart_body_without_a_boundary_is_a_400(client: httpx.AsyncClient) -> None:
    response = await client.post("/", content=b"count=3", headers={"content-type": "multipart/form-data"})

    assert_error(response, 400)


async def test_a_host_of_several_models_needs_the_model_named(tmp_path: Path) -> None:
    write_library(tmp_path / "libraries" / "eight.json", library_file(bits(PUBLIC, 0)))
    write_library(tmp_path / "libraries" / "four.json",
                  library_file(bits(unit_vectors(3, 4, seed=1), 0), model="test:unit-4"))
    app = Host(tmp_path).app()

    async with connect(app) as client:
        unnamed = await client.post("/", json={"count": 1, "count_type": "bit"})
        named = await client.post("/", json={"count": 1, "count_type": "bit", "query_embedding_model": "test:unit-4"})

    assert_error(unnamed, 400, "query_embedding_model is required: this host serves test:unit-4, test:unit-8")
    assert named.status_code == 200 and named.json()["embedding_model"] == "test:unit-4"


async def test_a_host_without_libraries_is_ready_and_says_so_but_answers_no_query(tmp_path: Path) -> None:
    (tmp_path / "libraries").mkdir()
    app = Host(tmp_path).app()

    async with connect(app) as client:
        ready = await client.get("/readyz")
        query = await client.post("/", json={})

    # Readiness never depends on what is loaded: it could not without telling about private libraries.
    assert ready.status_code == 200 and ready.json()["public_libraries"] == 0
    assert_error(query, 503, "no libraries are loaded on this host yet")


@pytest.mark.parametrize("where", ["access_token field", "bearer header"])
async def test_a_token_failing_verification_is_a_401(client: httpx.AsyncClient, where: str) -> None:
    if where == "access_token field":
        response = await client.post("/", data={**FIELDS, "access_token": "aaa.bbb.ccc"})
    else:
        response = await client.post("/", json=FIELDS, headers={"Authorization": "Bearer aaa.bbb.ccc"})

    error = assert_error(response, 401)
    assert error.startswith("the access token was refused")
    assert response.headers["www-authenticate"].startswith('Bearer error="invalid_token"')


@pytest.mark.parametrize("path", ["/libraries", "/libraries/science.json"])
async def test_a_token_failing_verification_is_a_401_on_get_too(client: httpx.AsyncClient, path: str) -> None:
    response = await client.get(path, headers={"Authorization": "Bearer aaa.bbb.ccc"})

    assert_error(response, 401)


@pytest.mark.parametrize("path", ["/nothing-here", "/libraries/nope.json", "/libraries/science",
                                  "/libraries/access/team/drafts.json"])
async def test_what_is_not_there_for_this_caller_is_a_404(client: httpx.AsyncClient, path: str) -> None:
    assert_error(await client.get(path), 404)


async def test_a_private_library_is_as_absent_as_a_missing_one(client: httpx.AsyncClient) -> None:
    private = assert_error(await client.get("/libraries/access/team/drafts.json"), 404)
    missing = assert_error(await client.get("/libraries/access/team/nope.json"), 404)

    assert private == missing.replace("nope", "drafts")


@pytest.mark.parametrize(("method", "path"), [("PUT", "/"), ("DELETE", "/"), ("PATCH", "/"), ("POST", "/libraries"),
                                              ("POST", "/healthz")])
async def test_a_wrong_method_is_a_405(client: httpx.AsyncClient, method: str, path: str) -> None:
    response = await client.request(method, path)

    assert_error(response, 405, f"{method} is not allowed on {path}")


async def test_a_body_over_the_limit_is_a_413(client: httpx.AsyncClient) -> None:
    padded = {**FIELDS, "padding": "x" * MAX_BODY_BYTES}

    response = await client.post("/", json=padded)

    assert "content-length" in response.request.headers
    assert_error(response, 413, "the request body is over the 65,536-byte limit")


async def test_a_streamed_body_over_the_limit_is_a_413(client: httpx.AsyncClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"padding": "'
        for _ in range(MAX_BODY_BYTES // 1024 + 1):
            yield b"x" * 1024
        yield b'"}'

    response = await client.post("/", content=chunks(), headers={"content-type": "application/json"})

    assert "content-length" not in response.request.headers
    assert response.request.headers["transfer-encoding"] == "chunked"
    assert_error(response, 413, "the request body is over the 65,536-byte limit")


async def test_a_streamed_multipart_body_over_the_limit_is_a_413(client: httpx.AsyncClient) -> None:
    boundary = b"polymath-boundary"

    async def chunks() -> AsyncIterator[bytes]:
        yield b"--" + boundary + b'\r\nContent-Disposition: form-data; name="padding"\r\n\r\n'
        for _ in range(MAX_BODY_BYTES // 1024 + 1):
            yield b"x" * 1024
        yield b"\r\n--" + boundary + b"--\r\n"

    response = await client.post("/", content=chunks(),
                                 headers={"content-type": f"multipart/form-data; boundary={boundary.decode()}"})

    assert_error(response, 413)


async def test_a_body_just_under_the_limit_is_read(client: httpx.AsyncClient) -> None:
    body = json.dumps({**FIELDS, "padding": ""}).encode()
    body = body[:-2] + b"x" * (MAX_BODY_BYTES - len(body)) + b'"}'
    assert len(body) == MAX_BODY_BYTES

    response = await client.post("/", content=body, headers={"content-type": "application/json"})

    assert response.status_code == 200


@pytest.mark.parametrize("content_type", ["text/plain", "application/xml", "application/msgpack"])
async def test_an_unsupported_content_type_is_a_415(client: httpx.AsyncClient, content_type: str) -> None:
    response = await client.post("/", content=b"count=3", headers={"content-type": content_type})

    error = assert_error(response, 415)
    assert content_type in error


async def test_an_internal_failure_is_a_500_without_a_traceback(tmp_path: Path) -> None:
    write_library(tmp_path / "libraries" / "science.json", library_file(bits(PUBLIC, 0)))
    app = Host(tmp_path).app()
    # Corrupt the compiled records under the running app, in place (same size, so the
    # memory map stays valid): every record now fails to decode.
    records = segment_folder(tmp_path / "compiled", "science") / "records.bin"
    records.write_bytes(b"\xc1" * records.stat().st_size)

    async with connect(app, raise_app_exceptions=False) as client:
        response = await client.post("/", json=FIELDS)

    assert_error(response, 500, "the host failed to answer this request; the error is logged")
    assert response.headers.get_list("link") == [POLYMATH_LINK]


# ---- headers on every response --------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path", "options"), [
    ("GET", "/", {}),
    ("POST", "/", {"json": FIELDS}),
    ("POST", "/", {"json": {"count": 0}}),
    ("POST", "/", {"json": FIELDS, "headers": {"Authorization": "Bearer aaa.bbb.ccc"}}),
    ("GET", "/libraries", {}),
    ("GET", "/libraries/science.json", {}),
    ("GET", "/libraries/missing.json", {}),
    ("GET", "/nowhere", {}),
    ("PUT", "/", {}),
    ("POST", "/", {"content": b"x", "headers": {"content-type": "text/plain"}}),
    ("POST", "/", {"json": {"padding": "x" * MAX_BODY_BYTES}}),
    ("GET", "/healthz", {}),
    ("GET", "/readyz", {}),
    ("GET", "/metrics", {}),
    ("GET", "/openapi.json", {}),
])
async def test_every_response_links_to_the_polymath_endpoint(
    client: httpx.AsyncClient, method: str, path: str, options: dict[str, Any]
) -> None:
    response = await client.request(method, path, **options)

    assert response.headers.get_list("link") == [POLYMATH_LINK]


@pytest.mark.parametrize("credential", [
    {"json": {**FIELDS, "access_token": LEGACY_TOKEN}},
    {"data": {**FIELDS, "access_token": "sk_unknown_but_still_a_credential"}},
    {"json": FIELDS, "headers": {"Authorization": f"Bearer {LEGACY_TOKEN}"}},
])
async def test_a_query_carrying_a_token_is_private(client: httpx.AsyncClient, credential: dict[str, Any]) -> None:
    response = await client.post("/", **credential)

    assert response.status_code == 200
    assert response.headers["cache-control"].startswith("private")
    assert "Authorization" in response.headers["vary"]


async def test_a_query_without_a_token_is_public(client: httpx.AsyncClient) -> None:
    response = await client.post("/", json=FIELDS)

    assert response.headers["cache-control"].startswith("public")


@pytest.mark.parametrize("path", ["/libraries", "/libraries/science.json", "/libraries/access/team/drafts.json"])
async def test_a_get_carrying_a_token_is_private(client: httpx.AsyncClient, jwt_token: str, path: str) -> None:
    response = await client.get(path, headers={"Authorization": f"Bearer {jwt_token}"})

    assert response.status_code == 200
    assert response.headers["cache-control"].startswith("private")
    assert "Authorization" in response.headers["vary"]


# ---- GET /libraries ----------------------------------------------------------------------------------------


async def test_libraries_lists_public_facts(client: httpx.AsyncClient) -> None:
    response = await client.get("/libraries")

    assert response.status_code == 200
    assert response.json() == {"libraries": [{
        "name": "science", "url": "/libraries/science.json", "embedding_model": TEST_MODEL, "dimension": 8, "bits": 10,
    }]}
    assert response.headers["cache-control"].startswith("public")


async def test_libraries_counts_what_a_token_may_see(client: httpx.AsyncClient) -> None:
    response = await client.get("/libraries", headers={"Authorization": f"Bearer {LEGACY_TOKEN}"})

    assert {entry["name"]: entry["bits"] for entry in response.json()["libraries"]} == {
        "access/team/drafts": 3, "science": 12}


# ---- GET /libraries/{name}.json ------------------------------------------------------------------------------


async def test_a_published_library_holds_only_public_bits_for_anonymous_callers(client: httpx.AsyncClient) -> None:
    response = await client.get("/libraries/science.json")

    assert response.status_code == 200
    published = response.json()
    assert published["version"] == 1 and published["embedding_model"] == TEST_MODEL
    assert urls(published) == [url_of(row) for row in range(10)]
    assert published["details"]["counts"]["bits"] == 10
    for bit, vector in zip(published["bits"], PUBLIC):
        assert set(bit) == {"id", "text", "embedding", "token_count", "info"}
        assert base64.b64decode(bit["embedding"]) == vector.astype("<f4").tobytes()


async def test_a_token_granting_the_tag_gets_the_restricted_bits_too(client: httpx.AsyncClient, jwt_token: str) -> None:
    anonymous = await client.get("/libraries/science.json")
    granted = await client.get("/libraries/science.json", headers={"Authorization": f"Bearer {jwt_token}"})
    drafts = await client.get("/libraries/access/team/drafts.json", headers={"Authorization": f"Bearer {LEGACY_TOKEN}"})

    assert urls(granted.json()) == [url_of(row) for row in [*range(10), 100, 101]]
    assert all("access_tag" not in bit for bit in granted.json()["bits"])
    assert granted.headers["etag"] != anonymous.headers["etag"]
    assert urls(drafts.json()) == [url_of(200), url_of(201), url_of(202)]


async def test_a_published_library_answers_a_conditional_get_with_304(client: httpx.AsyncClient) -> None:
    first = await client.get("/libraries/science.json")
    etag = first.headers["etag"]

    unchanged = await client.get("/libraries/science.json", headers={"If-None-Match": etag})
    among_others = await client.get("/libraries/science.json", headers={"If-None-Match": f'"other", {etag}'})
    changed = await client.get("/libraries/science.json", headers={"If-None-Match": '"something-else"'})

    assert re.fullmatch(r'"[0-9a-f]+(-gzip)?"', etag)
    assert unchanged.status_code == 304 and unchanged.content == b"" and unchanged.headers["etag"] == etag
    assert among_others.status_code == 304
    assert changed.status_code == 200 and changed.content == first.content


async def test_a_library_file_comes_gzipped_when_asked_with_its_own_etag(client: httpx.AsyncClient) -> None:
    plain = await client.get("/libraries/science.json", headers={"Accept-Encoding": "identity"})
    zipped = await client.get("/libraries/science.json", headers={"Accept-Encoding": "gzip"})
    again = await client.get("/libraries/science.json", headers={"Accept-Encoding": "gzip",
                                                                 "If-None-Match": zipped.headers["etag"]})

    assert "content-encoding" not in plain.headers and zipped.headers["content-encoding"] == "gzip"
    assert zipped.content == plain.content  # httpx undoes the gzip: the same file
    assert zipped.headers["etag"] != plain.headers["etag"]  # two representations, two validators
    assert "Accept-Encoding" in zipped.headers["vary"] and again.status_code == 304


async def test_if_none_match_compares_weakly_as_rfc_9110_says(client: httpx.AsyncClient) -> None:
    etag = (await client.get("/libraries/science.json")).headers["etag"]

    weak = await client.get("/libraries/science.json", headers={"If-None-Match": f"W/{etag}"})
    anything = await client.get("/libraries/science.json", headers={"If-None-Match": "*"})

    assert weak.status_code == 304  # a CDN that weakened our tag still gets its 304
    assert anything.status_code == 304


async def test_the_anonymous_etag_does_not_reveal_private_bits(tmp_path: Path) -> None:
    with_private = Host(tmp_path / "with")
    without = Host(tmp_path / "without")
    write_library(with_private.folder / "libraries" / "shared.json",
                  library_file(bits(PUBLIC, 0), bits(PRIVATE[:1], 100, access_tag="team")))
    write_library(without.folder / "libraries" / "shared.json", library_file(bits(PUBLIC, 0)))

    async with connect(with_private.app()) as first, connect(without.app()) as second:
        a = await first.get("/libraries/shared.json")
        b = await second.get("/libraries/shared.json")

    assert a.status_code == b.status_code == 200
    assert a.headers["etag"] == b.headers["etag"]
    assert a.content == b.content


# ---- operations ---------------------------------------------------------------------------------------------


def counter(metrics: str, name: str) -> float:
    """The value of one sample line of Prometheus text, 0 if absent."""
    for line in metrics.splitlines():
        sample, _, value = line.rpartition(" ")
        if sample == name:
            return float(value)
    return 0.0


async def test_health_and_readiness(client: httpx.AsyncClient) -> None:
    health = await client.get("/healthz")
    ready = await client.get("/readyz")

    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready" and ready.json()["public_libraries"] == 1  # drafts.json is all private


async def test_metrics_count_queries(client: httpx.AsyncClient) -> None:
    before = await client.get("/metrics")
    await client.post("/", json=FIELDS)
    await client.post("/", json=FIELDS, headers={"Accept": "application/msgpack"})
    after = await client.get("/metrics")

    assert after.headers["content-type"].startswith("text/plain")
    json_queries = 'polymath_queries_total{format="json"}'
    assert counter(after.text, json_queries) == counter(before.text, json_queries) + 1
    msgpack_queries = 'polymath_queries_total{format="msgpack"}'
    assert counter(after.text, msgpack_queries) == counter(before.text, msgpack_queries) + 1
    assert counter(after.text, "polymath_query_seconds_count") == counter(before.text, "polymath_query_seconds_count") + 2
    assert counter(after.text, "polymath_public_libraries_loaded") == 1
    assert counter(after.text, "polymath_public_bits_loaded") == 10  # private bits are not counted
    samples = [line for line in after.text.splitlines() if not line.startswith("# ")]
    assert all(re.fullmatch(r'[a-z_]+(\{[^}]*\})? [0-9.e+-]+', line) for line in samples)
    assert "# TYPE polymath_queries_total counter" in after.text
    assert "# HELP polymath_query_seconds " in after.text


async def test_openapi_describes_the_endpoints(client: httpx.AsyncClient) -> None:
    response = await client.get("/openapi.json")

    document = response.json()
    assert document["openapi"].startswith("3.")
    assert {"/", "/libraries", "/libraries/{name}.json", "/healthz", "/readyz", "/metrics"} <= set(document["paths"])
    assert set(document["paths"]["/"]) == {"get", "post"}
