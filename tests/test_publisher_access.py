"""Each publisher keeps the keys to their own door (issue 36, item 3).

Two writers on one real host, each with a folder holding its own access file and a private
`members` library: a token from Ada's file opens Ada's members' library and never Bob's, although
both are tagged `members`, on every door (POST /, /libraries and the library file, the page's data,
RAGFlow, Dify, OpenAI's vector stores, MCP, and Ada's own host under /p/writers/ada/); the host's own
access file stays the operator's, and its `members` opens both. A publisher revokes their own
tokens; a publisher folder whose access file is broken shows nothing private (fail closed).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from components import access_cli
from conftest import RunningHost, start_host, stop_host
from librarian import TEST_MODEL, b64, make_bit, unit_vectors, write_library

from host.web.dialects.ragflow.view import dataset_id

VECTORS = unit_vectors(6, seed=36)
RPC = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def library_of(first: int, text: str) -> dict[str, Any]:
    bits = [make_bit(first + row, VECTORS[first + row], 10) for row in range(2)]
    for bit in bits:
        bit["text"] = f"{text} {bit['text']}"
    return {"version": 1, "embedding_model": TEST_MODEL, "bits": bits}


@pytest.fixture(scope="module")
def writers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningHost, dict[str, str], Path]]:
    root = tmp_path_factory.mktemp("writers")
    libraries = root / "libraries"
    write_library(libraries / "writers" / "ada" / "posts.json", library_of(0, "ada public"))
    write_library(libraries / "writers" / "ada" / "access" / "members" / "notes.json", library_of(2, "ada members"))
    write_library(libraries / "writers" / "bob" / "access" / "members" / "notes.json", library_of(4, "bob members"))
    tokens = {}
    for writer in ("ada", "bob"):
        file = libraries / "writers" / writer / "access.SECRET.json"
        access_cli("access", "init", "--access", file, "--issuer", f"https://library.example/p/writers/{writer}")
        tokens[writer] = access_cli("token", "issue", f"reader-of-{writer}", "--tag", "members", "--access", file)
    operator = root / "access.SECRET.json"
    access_cli("access", "init", "--access", operator, "--issuer", "https://library.example")
    tokens["operator"] = access_cli("token", "issue", "operator", "--tag", "members", "--access", operator)
    host = start_host(libraries, "--access", str(operator), "--watch-interval", "0.2")
    yield host, tokens, libraries
    stop_host(host)


def texts(answer: httpx.Response) -> set[str]:
    assert answer.status_code == 200, answer.text
    return {bit["text"].split(" bit")[0] for bit in answer.json()["bits"]}


def ask(host: RunningHost, token: str | None, path: str = "/", **fields: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(f"{host.url}{path}", headers=headers, json={
        "query_embedding": b64(VECTORS[2]), "count": 20, "count_type": "bit", **fields})


SEEN = {
    None: {"ada public"},
    "ada": {"ada public", "ada members"},
    "bob": {"ada public", "bob members"},
    "operator": {"ada public", "ada members", "bob members"},
}


@pytest.mark.parametrize("who", list(SEEN))
def test_a_publishers_token_opens_its_own_members_and_never_anothers(
        writers: tuple[RunningHost, dict[str, str], Path], who: str | None) -> None:
    host, tokens, _ = writers
    token = tokens[who] if who else None
    assert texts(ask(host, token)) == SEEN[who]
    listed = httpx.get(f"{host.url}/libraries", headers={"Authorization": f"Bearer {token}"} if token else {}).json()
    names = {library["name"] for library in listed["libraries"]}
    assert names == {name for name, text in [("writers/ada/posts", "ada public"),
                                             ("writers/ada/access/members/notes", "ada members"),
                                             ("writers/bob/access/members/notes", "bob members")] if text in SEEN[who]}


def test_another_publishers_library_is_not_there_for_a_token_on_every_door(
        writers: tuple[RunningHost, dict[str, str], Path]) -> None:
    host, tokens, _ = writers
    headers = {"Authorization": f"Bearer {tokens['ada']}"}
    bobs = "writers/bob/access/members/notes"
    assert httpx.get(f"{host.url}/libraries/{bobs}.json", headers=headers).status_code == 404
    assert httpx.get(f"{host.url}/libraries/writers/ada/access/members/notes.json", headers=headers).status_code == 200
    assert ask(host, tokens["ada"], libraries=bobs).status_code == 404
    assert ask(host, tokens["ada"], "/p/writers/bob/").status_code == 404
    assert texts(ask(host, tokens["ada"], "/p/writers/ada/")) == {"ada public", "ada members"}
    datasets = httpx.get(f"{host.url}/api/v1/datasets", headers=headers).json()["data"]
    assert {dataset["name"] for dataset in datasets} == {"writers/ada/posts", "writers/ada/access/members/notes"}
    retrieval = httpx.post(f"{host.url}/api/v1/retrieval", headers=headers, json={
        "dataset_ids": [dataset_id(bobs)], "question": "members"}).json()
    assert retrieval["code"] != 0
    dify = httpx.post(f"{host.url}/dify/retrieval", headers=headers, json={
        "knowledge_id": bobs, "query": "members", "retrieval_setting": {"top_k": 5, "score_threshold": 0}})
    assert dify.status_code == 404
    stores = httpx.get(f"{host.url}/v1/vector_stores", headers=headers).json()["data"]
    assert {store["id"] for store in stores} == {"writers/ada/posts", "writers/ada/access/members/notes"}
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "libraries", "arguments": {}}}
    mcp = httpx.post(f"{host.url}/mcp", content=json.dumps(call), headers={**RPC, **headers})
    assert "writers/ada/access/members/notes" in mcp.text and bobs not in mcp.text


def test_a_publisher_revokes_their_own_readers(writers: tuple[RunningHost, dict[str, str], Path]) -> None:
    host, tokens, libraries = writers
    file = libraries / "writers" / "bob" / "access.SECRET.json"
    late = access_cli("token", "issue", "late-reader", "--tag", "members", "--access", file)
    assert "bob members" in texts(ask(host, late))
    access_cli("token", "revoke", "late-reader", "--access", file)
    deadline = time.monotonic() + 10
    while ask(host, late).status_code != 401 and time.monotonic() < deadline:
        time.sleep(0.1)
    refused = ask(host, late)
    assert refused.status_code == 401 and "revoked" in refused.json()["error"]
    assert "bob members" in texts(ask(host, tokens["bob"]))  # their other readers read on


def test_a_token_signed_by_no_file_of_its_issuer_is_refused_with_that_files_reason(
        writers: tuple[RunningHost, dict[str, str], Path], tmp_path: Path) -> None:
    host, _, _ = writers
    impostor = tmp_path / "access.SECRET.json"
    access_cli("access", "init", "--access", impostor, "--issuer", "https://library.example/p/writers/ada")
    forged = access_cli("token", "issue", "mallory", "--tag", "members", "--access", impostor)
    refused = ask(host, forged)
    assert refused.status_code == 401
    assert "ada members" not in refused.text


def test_a_broken_publisher_access_file_hides_that_folders_private_libraries(tmp_path: Path) -> None:
    libraries = tmp_path / "libraries"
    write_library(libraries / "carol" / "access" / "members" / "notes.json", library_of(0, "carol members"))
    write_library(libraries / "carol" / "posts.json", library_of(2, "carol public"))
    (libraries / "carol" / "access.SECRET.json").write_text('{"keys": [}')
    operator = tmp_path / "access.SECRET.json"
    access_cli("access", "init", "--access", operator)
    token = access_cli("token", "issue", "someone", "--tag", "members", "--access", operator)
    host = start_host(libraries, "--access", str(operator))
    try:
        assert texts(ask(host, None)) == {"carol public"}
        assert texts(ask(host, token)) == {"carol public", "carol members"}  # the operator's grant reaches it
        assert "publisher access file not loaded" in host.log()
    finally:
        stop_host(host)


def test_a_publishers_restricted_signals_count_what_their_folder_holds_back(tmp_path: Path) -> None:
    libraries = tmp_path / "libraries"
    write_library(libraries / "carol" / "posts.json", library_of(0, "carol public"))
    write_library(libraries / "carol" / "access" / "members" / "notes.json", library_of(2, "carol members"))
    write_library(libraries / "dave" / "access" / "members" / "notes.json", library_of(4, "dave members"))
    carols = libraries / "carol" / "access.SECRET.json"
    access_cli("access", "init", "--access", carols, "--issuer", "https://library.example/p/carol")
    settings = json.loads(carols.read_text())
    settings["restricted"] = {"count": True, "message": "Subscribe to read Carol's notes."}
    carols.write_text(json.dumps(settings))
    member = access_cli("token", "issue", "reader", "--tag", "members", "--access", carols)
    operator = tmp_path / "access.SECRET.json"
    access_cli("access", "init", "--access", operator)
    host = start_host(libraries, "--access", str(operator))
    try:
        for path, fields in [("/p/carol/", {}), ("/", {"libraries": "carol"}), ("/", {"libraries": ["carol/posts"]})]:
            answer = ask(host, None, path, **fields)
            assert texts(answer) == {"carol public"}
            details = answer.json()["details"]
            held_back = 2 if "posts" not in str(fields) else 0  # carol's members' notes, never dave's
            assert details["counts"]["restricted"] == held_back, (path, fields)
            assert ("Subscribe to read" in details.get("message", "")) == bool(held_back)
        opened = ask(host, member, "/p/carol/")
        assert texts(opened) == {"carol public", "carol members"}
        assert opened.json()["details"]["counts"]["restricted"] == 0
        whole = ask(host, None).json()["details"]  # the host's own file keeps its signals off
        assert "restricted" not in whole.get("counts", {}) and "message" not in whole
    finally:
        stop_host(host)
