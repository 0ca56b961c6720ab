"""Schemathesis against real servers: /openapi.json says exactly what the host accepts and answers.

- The whole document, by schemathesis's own command line exactly as anyone would run it from the
  repository (`schemathesis.toml` and the hooks it names), with every check, in every phase
  (coverage, fuzzing, stateful), valid and invalid requests, a fixed seed, and a token that grants
  the private tag: against `serve` of the sample library and its private drafts, with the embedder.
  Any server error, undocumented status, answer that does not match its schema, request the
  document allows that the host refuses, or request it forbids that the host accepts, fails.
- The answers random generation rarely reaches (413, 401, 304, 503...), one by one against the
  same document.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from conftest import PROJECT, RunningHost, start_host, stop_host
from librarian import b64, make_library, unit_vectors, write_library
from sample_host import serve_sample
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from host.web.dialects.ragflow.view import dataset_id
from host.web.openapi import OPENAPI, document_for

FUZZED_EXAMPLES = 15  # per operation: about a minute on 2 cores, with the coverage phase's own cases
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHost]:
    root = tmp_path_factory.mktemp("schemathesis")
    folder = root / "libraries"
    write_library(folder / "public.json", make_library(unit_vectors(12, dimension=8, seed=3)))
    write_library(folder / "access" / "unpublished" / "private.json", make_library(unit_vectors(4, dimension=8, seed=4)))
    host = start_host(folder, "--max-body-bytes", "65536")
    yield host
    stop_host(host)


@pytest.fixture(scope="module")
def api_schema(served: RunningHost) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(f"{served.url}/openapi.json")


# Schemathesis leaves out the operation that serves the document itself.
OPERATIONS = [(method, path) for path, methods in OPENAPI["paths"].items() for method in methods
              if path != "/openapi.json"]


def test_the_document_is_the_one_served(served: RunningHost, api_schema: schemathesis.BaseSchema) -> None:
    assert sorted((operation.ok().method, operation.ok().path) for operation in api_schema.get_all_operations()) \
        == sorted(OPERATIONS)
    assert api_schema.raw_schema == OPENAPI


def test_a_host_documents_its_own_max_count() -> None:
    document = document_for(500)
    count = document["paths"]["/"]["post"]["requestBody"]["content"]["application/json"]["schema"]["properties"]["count"]
    search = document["paths"]["/v1/vector_stores/{vector_store_id}/search"]["post"]["requestBody"]["content"]
    assert count["anyOf"][0]["maximum"] == 500
    assert search["application/json"]["schema"]["properties"]["max_num_results"]["maximum"] == 50
    assert document_for(20)["paths"]["/v1/vector_stores/{vector_store_id}/search"]["post"]["requestBody"]["content"][
        "application/json"]["schema"]["properties"]["max_num_results"]["maximum"] == 20


def test_schemathesis_finds_no_mismatch_between_the_document_and_the_host(tmp_path_factory: pytest.TempPathFactory) -> None:
    with serve_sample(tmp_path_factory.mktemp("schemathesis-sample")) as sample:
        run = subprocess.run(
            [str(Path(sys.executable).parent / "schemathesis"), "run", f"{sample.url}/openapi.json", "--checks", "all",
             "--seed", "1", "--max-examples", str(FUZZED_EXAMPLES), "--continue-on-failure",
             "--header", f"Authorization: Bearer {sample.token}"],
            cwd=PROJECT, capture_output=True, text=True, timeout=600,
            env={**os.environ, "POLYMATH_SCHEMATHESIS_DIMENSION": "384"})
    assert run.returncode == 0, f"schemathesis found mismatches:\n{run.stdout[-12000:]}\n{run.stderr[-3000:]}"
    assert "No issues found" in run.stdout or " passed" in run.stdout


# ---- the answers random generation rarely reaches, checked against the same document ------------


EXPLICIT = [
    pytest.param("/", "POST", {"body": {"query_embedding": b64(unit_vectors(1, 8, seed=9)[0]), "count": 3,
                                        "count_type": "bit", "omit": ""}, "media_type": "application/json"},
                 200, id="query-everything-kept"),
    pytest.param("/", "POST", {"body": {"count": "5", "count_type": "bit", "omit": ["text", "embedding"]},
                               "media_type": "application/x-www-form-urlencoded"}, 200, id="query-form"),
    pytest.param("/", "POST", {"body": {"count": 3}, "media_type": "application/json",
                               "headers": {"Accept": "application/msgpack"}}, 200, id="query-msgpack"),
    pytest.param("/", "POST", {"body": {"count": 3, "omit": "*"}, "media_type": "multipart/form-data"}, 200,
                 id="query-omit-everything"),
    pytest.param("/", "POST", {"body": {"count": 3}, "media_type": "application/json",
                               "headers": {"Authorization": "Bearer not.a-valid.jwt"}}, 401, id="query-bad-token"),
    pytest.param("/", "POST", {"body": {"omit": "x" * 70000}, "media_type": "application/json"}, 413,
                 id="query-too-large"),
    pytest.param("/libraries", "GET", {"headers": {"Authorization": "Bearer not.a-valid.jwt"}}, 401,
                 id="libraries-bad-token"),
    pytest.param("/api/v1/datasets", "GET", {}, 200, id="ragflow-datasets"),
    pytest.param("/api/v1/retrieval", "POST", {"body": {"dataset_ids": [dataset_id("public")], "question": "words"},
                                               "media_type": "application/json"}, 200, id="ragflow-no-embedder"),
    pytest.param("/api/v1/retrieval", "POST", {"body": {}, "media_type": "application/json",
                                               "headers": {"Authorization": "Bearer not.a-valid.jwt"}}, 401,
                 id="ragflow-bad-token"),
    pytest.param("/mcp", "POST", {"body": {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                  "media_type": "application/json",
                                  "headers": {"Accept": "application/json, text/event-stream"}}, 200, id="mcp-tools"),
    pytest.param("/libraries/{name}.json", "GET", {"path_parameters": {"name": "public"}}, 200, id="library-public"),
    pytest.param("/libraries/{name}.json", "GET", {"path_parameters": {"name": "access/unpublished/private"}}, 404,
                 id="library-private-hidden"),
    pytest.param("/libraries/{name}.json", "GET", {"path_parameters": {"name": "public"},
                                                   "headers": {"Authorization": "Bearer not.a-valid.jwt"}}, 401,
                 id="library-bad-token"),
    pytest.param("/libraries", "GET", {"query": {"limit": 1}}, 200, id="libraries-page"),
    pytest.param("/", "POST", {"body": {"count": 3, "libraries": ["access"]}, "media_type": "application/json"}, 404,
                 id="query-private-folder-hidden"),
    pytest.param("/p/{publisher}/", "POST", {"path_parameters": {"publisher": "public"}, "body": {"count": 3},
                                             "media_type": "application/json"}, 200, id="publisher-query"),
    pytest.param("/p/{publisher}/libraries", "GET", {"path_parameters": {"publisher": "access"}}, 404,
                 id="publisher-private-hidden"),
    pytest.param("/p/{publisher}/api/v1/datasets", "GET", {"path_parameters": {"publisher": "%2e%2e"}}, 400,
                 id="publisher-leaving-its-folder"),
]


@pytest.mark.parametrize(("path", "method", "parts", "status"), EXPLICIT)
def test_rarer_answers_are_documented_too(
    served: RunningHost, api_schema: schemathesis.BaseSchema, path: str, method: str, parts: dict, status: int
) -> None:
    case = api_schema[path][method].Case(**parts)
    response = case.call(base_url=served.url, timeout=10)
    assert response.status_code == status, response.text
    case.validate_response(response, checks=CHECKS)


def test_a_conditional_get_of_a_library_is_documented(served: RunningHost, api_schema: schemathesis.BaseSchema) -> None:
    operation = api_schema["/libraries/{name}.json"]["GET"]
    etag = operation.Case(path_parameters={"name": "public"}).call(base_url=served.url).headers["etag"][0]
    case = operation.Case(path_parameters={"name": "public"}, headers={"If-None-Match": etag})
    response = case.call(base_url=served.url)
    assert response.status_code == 304
    case.validate_response(response, checks=CHECKS)


def test_a_host_with_no_libraries_yet_answers_as_documented(tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = tmp_path_factory.mktemp("empty") / "libraries"
    folder.mkdir()
    host = start_host(folder)
    try:
        empty_schema = schemathesis.openapi.from_url(f"{host.url}/openapi.json")
        for path, method, status in (("/", "POST", 503), ("/readyz", "GET", 200), ("/libraries", "GET", 200)):
            case = empty_schema[path][method].Case(**({"body": {}, "media_type": "application/json"}
                                                      if method == "POST" else {}))
            response = case.call(base_url=host.url, timeout=10)
            assert response.status_code == status, response.text
            # 503 is the documented "not ready yet", not a crash.
            case.validate_response(response, checks=CHECKS if status < 500 else CHECKS[1:])
    finally:
        stop_host(host)
