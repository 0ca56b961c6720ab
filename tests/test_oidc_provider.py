"""A real identity provider's tokens at every door (issue 37): oidc-provider (npm) and a real `serve`.

The world: the sample library and its private drafts (tag `unpublished`, as tests/sample_host.py has
them), an access file made by the admin's commands that trusts the provider with one rule,
`groups=members:unpublished`, and the provider's two client-credentials clients: `members` (groups
["members"]) and `free` (groups ["free"]). Their tokens are JWT access tokens (RFC 9068, `typ: at+jwt`)
signed with the provider's RS256 keys, fetched by the host through OpenID discovery.

A members token must show the drafts on every door, a free one (valid, no rule matching) must answer
200 with public passages only, and every answer to a request with a token is `Cache-Control: private`.
Then the provider rotates its key mid-run, a flood of made-up key ids is sent, and a reader is revoked.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx
import jwt
import pytest
from components import admin, unavailable
from conftest import PROJECT, RunningHost, start_host, stop_host
from librarian import b64, make_library, unit_vectors, write_library
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from oidc_support import AUDIENCE, OidcProvider
from polymath_host_client import PolymathClient
from polymath_host_client.langchain import PolymathRetriever as LangChainPolymath
from polymath_host_client.llama_index import PolymathRetriever as LlamaIndexPolymath
from sample_host import DANIEL, DRAFTS

from host.web.dialects.ragflow.view import dataset_id

JS_HARNESS = PROJECT / "tests" / "js_client"
WIDE = "openai.com:text-embedding-ada-002"
WIDE_DRAFTS = unit_vectors(3, 1536, seed=2)
RPC_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@dataclass(frozen=True)
class World:
    url: str
    provider: OidcProvider
    root: Path
    host: RunningHost

    def token(self, who: str) -> str:
        return self.provider.token(who)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("oidc")
    shutil.copytree(PROJECT / "libraries", root / "libraries", ignore=shutil.ignore_patterns(".compiled"))
    access = root / "access.SECRET.json"
    with OidcProvider() as provider:
        admin("access", "init", "--access", str(access), "--issuer", "https://polymath.test", "--alg", "EdDSA", cwd=root)
        admin("access", "trust", provider.issuer, "--audience", AUDIENCE, "--grant", "groups=members:unpublished",
              "--access", str(access), cwd=root)
        host = start_host(root / "libraries", "--access", str(access), timeout=60, embedder=True)
        try:
            yield World(host.url, provider, root, host)
        finally:
            stop_host(host)


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def libraries(url: str, token: str | None) -> list[str]:
    answer = httpx.get(f"{url}/libraries", headers=bearer(token), timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.headers["cache-control"].startswith("private" if token else "public")
    return [library["name"] for library in answer.json()["libraries"]]


def test_the_providers_token_is_a_jwt_access_token_for_this_host(world: World) -> None:
    token = world.token("members")
    header, claims = jwt.get_unverified_header(token), jwt.decode(token, options={"verify_signature": False})
    assert header["typ"] == "at+jwt" and header["alg"] == "RS256" and header["kid"] == world.provider.kids[0]
    assert claims["iss"] == world.provider.issuer and claims["aud"] == AUDIENCE and claims["groups"] == ["members"]


def test_post_slash_the_page_and_libraries_show_members_the_drafts(world: World) -> None:
    members, free = world.token("members"), world.token("free")
    assert libraries(world.url, members) == [DRAFTS, "sample"]
    assert libraries(world.url, free) == ["sample"]  # valid, no rule matches: public only, not a 401
    for token, expected in ((members, True), (free, False), (None, False)):
        answer = httpx.post(f"{world.url}/", json={"query": DANIEL, "count": 3}, headers=bearer(token), timeout=60)
        assert answer.status_code == 200
        urls = {bit["info"]["url"] for bit in answer.json()["bits"]}
        assert bool(urls & drafts_urls(world)) is expected
        assert answer.headers["cache-control"].startswith("private" if token else "public")
    page = httpx.get(f"{world.url}/", headers={"Accept": "application/json", **bearer(members)}, timeout=60)
    assert page.status_code == 200 and page.headers["cache-control"].startswith("private")
    assert DRAFTS.partition("/")[0] in [publisher["name"] for publisher in page.json()["publishers"]]
    folder = httpx.get(f"{world.url}/p/access/", headers={"Accept": "application/json", **bearer(members)}, timeout=60)
    assert DRAFTS in json.dumps(folder.json()["libraries"])
    html = httpx.get(f"{world.url}/p/access/", headers={"Accept": "text/html", **bearer(members)}, timeout=60)
    assert html.status_code == 200 and DRAFTS in html.text


def drafts_urls(world: World) -> set[str]:
    bits = json.loads((world.root / "libraries" / f"{DRAFTS}.json").read_text())["bits"]
    return {bit["info"]["url"] for bit in bits}


def test_the_dialects_show_members_the_drafts(world: World) -> None:
    members, free = world.token("members"), world.token("free")
    for token, sees in ((members, True), (free, False)):
        ragflow = httpx.post(f"{world.url}/api/v1/retrieval", headers=bearer(token), timeout=60,
                             json={"dataset_ids": [dataset_id(DRAFTS)], "question": DANIEL})
        assert (ragflow.json()["code"] == 0 and len(ragflow.json()["data"]["chunks"]) > 0) is sees
        dify = httpx.post(f"{world.url}/dify/retrieval", headers=bearer(token), timeout=60, json={
            "knowledge_id": DRAFTS, "query": DANIEL, "retrieval_setting": {"top_k": 2, "score_threshold": 0}})
        assert (dify.status_code == 200 and len(dify.json()["records"]) == 2) is sees
        store = httpx.post(f"{world.url}/v1/vector_stores/{quote(DRAFTS, safe='')}/search", headers=bearer(token),
                           json={"query": DANIEL, "max_num_results": 2}, timeout=60)
        assert (store.status_code == 200 and len(store.json()["data"]) == 2) is sees
        for answer in (dify, store) if sees else ():
            assert answer.headers["cache-control"].startswith("private")


@asynccontextmanager
async def mcp_session(url: str, token: str) -> AsyncIterator[ClientSession]:
    async with (
        create_mcp_http_client(headers=bearer(token)) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as connected,
    ):
        await connected.initialize()
        yield connected


@pytest.mark.anyio
async def test_mcp_shows_members_the_drafts(world: World) -> None:
    for who, expected in (("members", [DRAFTS, "sample"]), ("free", ["sample"])):
        async with mcp_session(world.url, world.token(who)) as connected:
            listed = (await connected.call_tool("libraries", {})).structured_content
        assert listed is not None
        assert [library["name"] for library in listed["libraries"]] == expected


def test_the_python_client_and_its_retrievers_show_members_the_drafts(world: World) -> None:
    members, free = world.token("members"), world.token("free")
    with PolymathClient(world.url, token=members) as holder, PolymathClient(world.url, token=free) as reader:
        assert holder.retrieve(DANIEL, k=3)[0].library == DRAFTS
        assert {passage.library for passage in reader.retrieve(DANIEL, k=3)} == {"sample"}
    assert LangChainPolymath(url=world.url, token=members, k=2).invoke(DANIEL)[0].metadata["library"] == DRAFTS
    nodes = LlamaIndexPolymath(url=world.url, token=members, similarity_top_k=2).retrieve(DANIEL)
    assert nodes[0].node.metadata["library"] == DRAFTS


def test_the_js_client_sends_the_token_in_its_body_and_sees_the_drafts(world: World, tmp_path: Path) -> None:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        unavailable("node and npm are needed to run the real @polymath-ai/client")
    assert node is not None and npm is not None
    if not (JS_HARNESS / "node_modules").is_dir():
        installed = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=JS_HARNESS, capture_output=True,
                                   text=True, timeout=600)
        if installed.returncode != 0:
            unavailable(f"npm ci failed in {JS_HARNESS}:\n{installed.stdout}\n{installed.stderr}")
    # The client sends only 1536-number embeddings: a host of that model, with a private library, the same rules.
    write_library(tmp_path / "wide.json", make_library(unit_vectors(4, 1536, seed=1), model=WIDE))
    write_library(tmp_path / "access" / "unpublished" / "wide-drafts.json", make_library(WIDE_DRAFTS, model=WIDE))
    wide = start_host(tmp_path, "--access", str(world.root / "access.SECRET.json"))
    try:
        for who, sees in (("members", True), ("free", False)):
            args = {"query_embedding": b64(WIDE_DRAFTS[0]), "count": 3, "count_type": "bit",
                    "access_token": world.token(who)}
            done = subprocess.run([node, str(JS_HARNESS / "query.mjs"), f"{wide.url}/", "-"], input=json.dumps(args),
                                  capture_output=True, text=True, timeout=60, cwd=JS_HARNESS)
            assert done.returncode == 0, done.stdout + done.stderr
            bits = json.loads(done.stdout)["bits"]
            assert (bits[0]["similarity"] > 0.999) is sees
    finally:
        stop_host(wide)


def test_a_replica_verifies_with_the_keys_embedded_at_publish(world: World, tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    admin("publish", str(world.root / "libraries"), str(origin), "--quiet", "--access",
          str(world.root / "access.SECRET.json"), "--issuer-keys", "embed", cwd=world.root)
    replica = start_host(f"file://{origin}", "--cache-dir", str(tmp_path / "cache"), timeout=60, embedder=True,
                         cwd=tmp_path)
    try:
        assert libraries(replica.url, world.token("members")) == [DRAFTS, "sample"]
        assert libraries(replica.url, world.token("free")) == ["sample"]
        # It verified with the edition's keys: it holds no fetched keys of any provider.
        assert "polymath_issuer_keys_age_seconds" not in httpx.get(f"{replica.url}/metrics", timeout=10).text
    finally:
        stop_host(replica)


def metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{")]
    assert len(values) == 1, text
    return values[0]


def test_a_key_rotated_at_the_provider_is_accepted_at_once_and_the_old_token_still(world: World) -> None:
    old = world.token("members")
    assert libraries(world.url, old)[0] == DRAFTS
    kids = world.provider.rotate()
    new = world.token("members")
    assert jwt.get_unverified_header(new)["kid"] == kids[0] != jwt.get_unverified_header(old)["kid"]
    assert libraries(world.url, new)[0] == DRAFTS  # the one refetch, waited for without blocking the host
    assert libraries(world.url, old)[0] == DRAFTS  # its key is still published
    assert metric(world.url, "polymath_issuer_keys_age_seconds") < 60


def test_a_flood_of_made_up_key_ids_costs_at_most_one_fetch(world: World) -> None:
    token = world.token("members")
    header, payload, _ = token.split(".")
    before = metric(world.url, "polymath_issuer_key_fetches_total")
    reasons = set()
    with httpx.Client(timeout=30) as client:
        for n in range(200):
            forged_header = jwt.utils.base64url_encode(json.dumps(
                {**jwt.get_unverified_header(token), "kid": f"made-up-{n}"}).encode()).decode()
            answer = client.get(f"{world.url}/libraries", headers=bearer(f"{forged_header}.{payload}.c2ln"))
            assert answer.status_code == 401
            reasons.add(answer.json()["error"])
    assert reasons == {"the access token was refused: unknown key id"}
    assert metric(world.url, "polymath_issuer_key_fetches_total") - before <= 1
    assert libraries(world.url, token)[0] == DRAFTS  # the host is unharmed
    assert header


def test_revoking_a_readers_subject_ends_their_provider_tokens(world: World) -> None:
    token = world.token("free")
    assert libraries(world.url, token) == ["sample"]
    admin("token", "revoke", "free-machine", "--access", str(world.root / "access.SECRET.json"), cwd=world.root)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        answer = httpx.get(f"{world.url}/libraries", headers=bearer(token), timeout=10)
        if answer.status_code == 401:
            break
        time.sleep(0.2)
    assert answer.status_code == 401
    assert answer.json()["error"] == "the access token was refused: revoked"
    assert libraries(world.url, world.token("members"))[0] == DRAFTS
