"""End to end: a real `python -m host serve` process answering real HTTP over loopback.

The host serves the real Polymath libraries (../shared/fixtures, real ada-002 embeddings) plus
a generated library of another model. Every right answer is computed here, independently of
the host's code: rankings by brute force with numpy straight from the fixture files, and the
original Python client's acceptance rules (docs/clients.md) as a small strict validator.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import json
import re
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx
import msgpack
import numpy as np
import pytest
from conftest import RunningHost, start_host, stop_host
from librarian import TEST_MODEL, b64, brute_force_ranking, make_library, unit_vectors, write_library

ADA = "openai.com:text-embedding-ada-002"
ADA_DIMENSION = 1536
FIXTURE_FILES = (
    "polymath-v0-sample-content.json",
    "polymath-v1-knowledge-string.json",
    "polymath-v1-sample-library.json",
)
PYTHON_CLIENT_COUNT = 4096 - 500  # its completion model's context size minus 500
GENERATED_VECTORS = unit_vectors(12, dimension=8, seed=7)
POLYMATH_LINK = re.compile(r'<([^>]*)>\s*;\s*rel="?polymath"?')


# ---- the reference: the fixture files read directly, ranked by brute force ---------------------


def canonical_id(url: str, text: str) -> str:
    return hashlib.sha256(f"{url.strip()}\n{text.strip()}".encode()).hexdigest()


def result_bit_id(bit: dict[str, Any]) -> str:
    return canonical_id(bit["info"]["url"], bit["text"])


@dataclass(frozen=True)
class Reference:
    """Every ada-002 bit of the fixture files, with its vector as stored (float32)."""

    ids: list[str]
    embeddings: list[str]  # the base64 text exactly as in the file
    token_counts: dict[str, int]
    matrix: np.ndarray

    @classmethod
    def load(cls, folder: Path) -> Reference:
        ids, embeddings, token_counts, vectors = [], [], {}, []
        for name in FIXTURE_FILES:
            data = json.loads((folder / name).read_text())
            bits = data["bits"] if data["version"] == 1 else list(data["content"].values())
            for bit in bits:
                bit_id = canonical_id(bit["info"]["url"], bit["text"])
                assert bit_id not in token_counts, "the fixtures were expected to hold no duplicate bits"
                ids.append(bit_id)
                embeddings.append(bit["embedding"])
                token_counts[bit_id] = bit["token_count"]
                vectors.append(np.frombuffer(base64.b64decode(bit["embedding"]), dtype="<f4"))
        return cls(ids, embeddings, token_counts, np.stack(vectors))

    def ranking(self, query: np.ndarray) -> list[tuple[str, float]]:
        """(id, dot product) for every bit, best first, by brute force in float64."""
        scores = self.matrix.astype(np.float64) @ np.asarray(query, np.float64)
        order = sorted(range(len(self.ids)), key=lambda row: -scores[row])
        return [(self.ids[row], float(scores[row])) for row in order]

    def token_budget(self, ranking: list[tuple[str, float]], count: int) -> list[str]:
        """The SPEC's token rule: take bits while the running sum stays within `count`."""
        taken, total = [], 0
        for bit_id, _ in ranking:
            if total + self.token_counts[bit_id] > count:
                break
            taken.append(bit_id)
            total += self.token_counts[bit_id]
        return taken


def assert_ranked_like(bits: list[dict[str, Any]], ranking: list[tuple[str, float]]) -> None:
    """The bits are the top of `ranking`, in its order, with its similarities.

    Only bits whose reference scores are within 1e-6 of each other (float32 rounding in the
    host versus float64 here) may trade places.
    """
    got = [result_bit_id(bit) for bit in bits]
    assert len(set(got)) == len(got), "a bit was returned twice"
    expected = [bit_id for bit_id, _ in ranking[: len(got)]]
    if got != expected:
        scores = dict(ranking)
        assert [scores.get(bit_id, np.nan) for bit_id in got] == pytest.approx(
            [score for _, score in ranking[: len(got)]], abs=1e-6
        ), f"ranking differs from the brute-force reference:\n got {got}\nwant {expected}"
    if bits and "similarity" in bits[0]:
        assert [bit["similarity"] for bit in bits] == pytest.approx([s for _, s in ranking[: len(got)]], abs=1e-5)


# ---- the original Python client's acceptance rules (docs/clients.md), written here ------------

PYTHON_OMIT_KEYS = ("*", "", "similarity", "embedding", "token_count", "info", "access_tag")


def python_client_accepts(result: Any) -> None:
    """Fail where `polymath/library.py` of the original Python client would refuse `result`."""
    assert isinstance(result, dict), "the body is not a JSON object"
    assert "error" not in result, f"Server returned an error: {result.get('error')}"
    assert type(result.get("version")) is int, f"version must be a JSON integer, got {result.get('version')!r}"
    assert result["version"] == 1, f"version must be 1, got {result['version']}"
    assert result.get("embedding_model") == ADA, f"embedding_model must be {ADA}"
    assert isinstance(result.get("bits"), list), "bits must be present and a list"
    omit = result.get("omit", "")
    assert isinstance(omit, str), f"omit not str as expected: {omit!r}"
    omitted = omit.split(",")
    for key in omitted:
        assert key in PYTHON_OMIT_KEYS, f"Illegal omit key type: {key}"
    if "" in omitted or "*" in omitted:
        assert len(omitted) == 1, f"'' and '*' must stand alone in omit, got {omit!r}"
    if omit == "*":
        assert result["bits"] == [], "omit '*' requires bits to be []"
        return
    for bit in result["bits"]:
        python_client_accepts_bit(bit, set(omitted))


def python_client_accepts_bit(bit: Any, omitted: set[str]) -> None:
    assert isinstance(bit, dict), "a bit must be an object"
    for key in omitted - {""}:
        assert key not in bit, f"Expected {key} to be omitted but it was included"
    assert isinstance(bit.get("text"), str), "a bit needs its text"
    if "embedding" not in omitted:
        assert isinstance(bit.get("embedding"), str), "a bit needs its embedding"
        try:
            raw = base64.b64decode(bit["embedding"], validate=True)
        except binascii.Error:
            raise AssertionError("embedding is not base64") from None
        assert len(raw) == ADA_DIMENSION * 4, f"an ada-002 embedding has 1536 float32, got {len(raw)} bytes"
        assert np.isfinite(np.frombuffer(raw, dtype="<f4")).all(), "embedding has NaN or infinity"
    if "token_count" not in omitted:
        token_count = bit.get("token_count")
        assert type(token_count) is int and token_count >= 0, f"token_count must be a JSON integer, got {token_count!r}"
    if "similarity" not in omitted:
        assert type(bit.get("similarity")) is float, f"similarity must be a JSON float, got {bit.get('similarity')!r}"
    if "info" not in omitted:
        info = bit.get("info")
        assert isinstance(info, dict) and isinstance(info.get("url"), str), f"info must be an object with a url, got {info!r}"


def python_client_fields(query_embedding: str | None, **extra: str) -> dict[str, str]:
    """The form fields of `sample/client.py` `query_server()`, all as strings."""
    fields = {"version": "1", "query_embedding_model": ADA, "count": str(PYTHON_CLIENT_COUNT), "access_token": ""}
    if query_embedding is not None:
        fields["query_embedding"] = query_embedding
    fields.update(extra)
    return fields


def post_multipart(url: str, fields: dict[str, str], **options: Any) -> httpx.Response:
    """POST plain (non-file) multipart/form-data parts, as urllib3's `request(fields=...)` does."""
    response = httpx.post(f"{url}/", files={name: (None, value) for name, value in fields.items()}, **options)
    assert response.request.headers["content-type"].startswith("multipart/form-data; boundary=")
    return response


def post_json(url: str, body: dict[str, Any], **options: Any) -> httpx.Response:
    return httpx.post(f"{url}/", json=body, **options)


# ---- the server ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference(fixtures_dir: Path) -> Reference:
    return Reference.load(fixtures_dir)


def fixture_folder(folder: Path, fixtures: Path) -> Path:
    """The real fixture files plus a generated library of another model, in one folder."""
    folder.mkdir(parents=True)
    for name in FIXTURE_FILES:
        shutil.copy(fixtures / name, folder / name)
    write_library(folder / "generated" / "unit.json", make_library(GENERATED_VECTORS))
    return folder


@pytest.fixture(scope="module")
def host(reference: Reference, tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> Iterator[RunningHost]:
    running = start_host(fixture_folder(tmp_path_factory.mktemp("end_to_end") / "libraries", fixtures_dir))
    yield running
    stop_host(running)


@pytest.fixture(scope="module")
def url(host: RunningHost) -> str:
    return host.url


def parametrize_query_bits() -> pytest.MarkDecorator:
    """One real bit from each fixture file (position in the reference)."""
    return pytest.mark.parametrize("row", [0, 57, 100, 101, 102, 115], ids=lambda row: f"bit{row}")


# ---- ranking ------------------------------------------------------------------------------------


@parametrize_query_bits()
def test_a_bits_own_embedding_finds_it_first_and_ranks_everything_like_brute_force(
    url: str, reference: Reference, row: int
) -> None:
    query = reference.embeddings[row]

    response = post_json(url, {"query_embedding": query, "query_embedding_model": ADA,
                               "count": 1000, "count_type": "bit"})

    assert response.status_code == 200, response.text
    bits = response.json()["bits"]
    assert result_bit_id(bits[0]) == reference.ids[row]
    assert bits[0]["similarity"] == pytest.approx(1.0, abs=1e-5)
    assert len(bits) == len(reference.ids), "every ada-002 bit, and none of the other model's"
    assert_ranked_like(bits, reference.ranking(reference.matrix[row]))


def test_a_float64_query_embedding_ranks_exactly_like_the_same_vector_in_float32(url: str, reference: Reference) -> None:
    vector = reference.matrix[20]

    as_float32 = post_json(url, {"query_embedding": b64(vector, "<f4"), "query_embedding_model": ADA,
                                 "count": 30, "count_type": "bit"}).json()
    as_float64 = post_json(url, {"query_embedding": b64(vector, "<f8"), "query_embedding_model": ADA,
                                 "count": 30, "count_type": "bit"}).json()

    assert [result_bit_id(bit) for bit in as_float64["bits"]] == [result_bit_id(bit) for bit in as_float32["bits"]]
    assert_ranked_like(as_float64["bits"], reference.ranking(vector))


def test_a_library_of_another_model_answers_only_queries_in_that_model(url: str) -> None:
    query = unit_vectors(1, dimension=8, seed=99)[0]

    response = post_json(url, {"query_embedding": b64(query), "query_embedding_model": TEST_MODEL,
                               "count": 100, "count_type": "bit"})

    assert response.status_code == 200, response.text
    result = response.json()
    assert result["embedding_model"] == TEST_MODEL
    urls = [bit["info"]["url"] for bit in result["bits"]]
    assert urls == [f"https://example.com/{row}" for row in brute_force_ranking(GENERATED_VECTORS, query)]


# ---- the original Python client's request and rules ---------------------------------------------


def test_the_python_clients_multipart_query_gets_a_result_it_accepts_within_its_token_budget(
    url: str, reference: Reference
) -> None:
    row = 108
    response = post_multipart(url, python_client_fields(reference.embeddings[row]))

    assert response.status_code == 200, response.text
    assert response.headers["content-type"].split(";")[0] == "application/json"
    result = response.json()
    python_client_accepts(result)
    assert result["omit"] == "embedding"
    ranking = reference.ranking(reference.matrix[row])
    expected = reference.token_budget(ranking, PYTHON_CLIENT_COUNT)
    assert [result_bit_id(bit) for bit in result["bits"]] == expected
    assert_ranked_like(result["bits"], ranking)
    assert sum(bit["token_count"] for bit in result["bits"]) <= PYTHON_CLIENT_COUNT
    assert result["details"]["counts"]["bits"] == len(expected)


def test_the_python_clients_empty_access_token_means_no_token(url: str, reference: Reference) -> None:
    fields = python_client_fields(reference.embeddings[3])
    assert fields["access_token"] == ""
    without_field = {name: value for name, value in fields.items() if name != "access_token"}

    with_empty_token = post_multipart(url, fields)
    with_no_token = post_multipart(url, without_field)

    assert with_empty_token.status_code == 200, with_empty_token.text
    assert b'name="access_token"\r\n\r\n\r\n' in with_empty_token.request.read(), "the empty part was sent"
    assert with_empty_token.json() == with_no_token.json()
    assert with_empty_token.headers["cache-control"].startswith("public")


def test_with_nothing_omitted_the_python_client_gets_every_key_and_the_original_embeddings(
    url: str, reference: Reference
) -> None:
    response = post_multipart(url, python_client_fields(reference.embeddings[40], omit="", count="1500"))

    assert response.status_code == 200, response.text
    result = response.json()
    python_client_accepts(result)
    assert result["omit"] == ""
    assert result["bits"], "some bits fit in 1500 tokens"
    by_id = dict(zip(reference.ids, reference.embeddings))
    for bit in result["bits"]:
        assert set(bit) >= {"text", "embedding", "token_count", "similarity", "info"}
        assert "access_tag" not in bit
        assert base64.b64decode(bit["embedding"]) == base64.b64decode(by_id[result_bit_id(bit)])


def test_the_python_clients_random_mode_returns_bits_without_similarity_or_embedding(url: str,
                                                                                      reference: Reference) -> None:
    response = post_multipart(url, python_client_fields(None, omit="similarity,embedding"))

    assert response.status_code == 200, response.text
    result = response.json()
    # Several keys come back as a JSON list (SPEC §3): the form the JavaScript client accepts;
    # the typed Python client wants a string here, so no host can satisfy it for several keys.
    assert sorted(result["omit"]) == ["embedding", "similarity"]
    assert result["bits"]
    for bit in result["bits"]:
        python_client_accepts_bit(bit, {"similarity", "embedding"})
        assert result_bit_id(bit) in reference.token_counts
    assert sum(bit["token_count"] for bit in result["bits"]) <= PYTHON_CLIENT_COUNT


GOOD_BIT = {"text": "a passage", "embedding": b64(np.full(ADA_DIMENSION, 0.025)), "token_count": 3,
            "similarity": 0.5, "info": {"url": "https://example.com/a"}}
GOOD_RESULT = {"version": 1, "embedding_model": ADA, "omit": "", "sort": "similarity", "bits": [GOOD_BIT]}


def _changed(path: str, value: Any) -> dict[str, Any]:
    result = copy.deepcopy(GOOD_RESULT)
    *parents, last = path.split(".")
    target: Any = result
    for key in parents:
        target = target[int(key)] if key.isdigit() else target[key]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return result


@pytest.mark.parametrize("result", [
    pytest.param(_changed("version", "1"), id="version-string"),
    pytest.param(_changed("version", 1.0), id="version-float"),
    pytest.param(_changed("embedding_model", "openai.com:text-embedding-3-small"), id="other-model"),
    pytest.param(_changed("omit", ["embedding", "similarity"]), id="omit-list"),
    pytest.param(_changed("omit", "text"), id="omit-text"),
    pytest.param(_changed("omit", "*,embedding"), id="star-not-alone"),
    pytest.param(_changed("omit", "*"), id="star-with-bits"),
    pytest.param(_changed("omit", "embedding"), id="omitted-key-present"),
    pytest.param(_changed("bits.0.embedding", KeyError), id="embedding-missing"),
    pytest.param(_changed("bits.0.embedding", b64(np.zeros(1535))), id="embedding-1535"),
    pytest.param(_changed("bits.0.token_count", "3"), id="token-count-string"),
    pytest.param(_changed("bits.0.similarity", 1), id="similarity-int"),
    pytest.param(_changed("bits.0.info", {"title": "no url"}), id="info-without-url"),
    pytest.param(_changed("error", "no"), id="error-key"),
])
def test_the_strict_validator_refuses_what_the_python_client_refuses(result: dict[str, Any]) -> None:
    python_client_accepts(GOOD_RESULT)  # the baseline passes
    with pytest.raises(AssertionError):
        python_client_accepts(result)


# ---- errors ----------------------------------------------------------------------------------


def _python_client_post(**extra: str) -> Callable[[str, Reference], httpx.Response]:
    return lambda url, reference: post_multipart(url, {**python_client_fields(reference.embeddings[0]), **extra})


ERROR_CASES = [
    pytest.param(_python_client_post(count="0"), 400, "count", id="count-0"),
    pytest.param(_python_client_post(count="many"), 400, "count", id="count-not-a-number"),
    pytest.param(_python_client_post(version="0"), 400, "version", id="version-0"),
    pytest.param(_python_client_post(count_type="words"), 400, "count_type", id="bad-count-type"),
    pytest.param(_python_client_post(omit="embedding,colour"), 400, "colour", id="unknown-omit-key"),
    pytest.param(_python_client_post(query_embedding="not base64!"), 400, "base64", id="embedding-not-base64"),
    pytest.param(_python_client_post(query_embedding=b64(np.ones(1535))), 400, "1536", id="embedding-too-short"),
    pytest.param(_python_client_post(query_embedding_model="openai.com:text-embedding-3-small"), 400,
                 "text-embedding-3-small", id="model-not-served"),
    pytest.param(lambda url, reference: post_json(url, {"count": 3}), 400, "query_embedding_model",
                 id="model-needed-with-two-models"),
    pytest.param(lambda url, reference: httpx.post(f"{url}/", content=b"count=3",
                                                   headers={"content-type": "text/plain"}), 415, "content type",
                 id="text-plain"),
    pytest.param(lambda url, reference: post_multipart(url, python_client_fields("A" * (2 << 20))), 413, "limit",
                 id="body-over-limit"),
    pytest.param(lambda url, reference: httpx.get(f"{url}/nowhere"), 404, "", id="no-such-path"),
    pytest.param(lambda url, reference: httpx.get(f"{url}/libraries/nothing-here.json"), 404, "nothing-here",
                 id="no-such-library"),
    pytest.param(lambda url, reference: httpx.delete(f"{url}/"), 405, "DELETE", id="wrong-method"),
]


@pytest.mark.parametrize(("send", "status", "mentions"), ERROR_CASES)
def test_errors_are_one_json_sentence_with_a_non_2xx_status(
    url: str, reference: Reference, send: Callable[[str, Reference], httpx.Response], status: int, mentions: str
) -> None:
    response = send(url, reference)

    assert response.status_code == status, response.text
    assert response.headers["content-type"].split(";")[0] == "application/json"
    body = json.loads(response.content)  # as the Python client does, whatever the status
    assert list(body) == ["error"]
    assert isinstance(body["error"], str) and body["error"].strip()
    assert mentions in body["error"]
    assert "Traceback" not in body["error"] and "\n" not in body["error"]
    assert POLYMATH_LINK.search(response.headers.get("link", ""))


# ---- MessagePack, the Link header -----------------------------------------------------------------


def test_msgpack_is_the_json_answer_with_raw_float32_embeddings(url: str, reference: Reference) -> None:
    body = {"query_embedding": reference.embeddings[77], "query_embedding_model": ADA, "count": 8,
            "count_type": "bit", "omit": ""}

    packed = post_json(url, body, headers={"accept": "application/msgpack"})
    plain = post_json(url, body).json()

    assert packed.status_code == 200
    assert packed.headers["content-type"] == "application/msgpack"
    result = msgpack.unpackb(packed.content, raw=False)
    assert len(result["bits"]) == 8
    for binary_bit, json_bit in zip(result["bits"], plain["bits"], strict=True):
        assert isinstance(binary_bit["embedding"], bytes)
        assert len(binary_bit["embedding"]) == ADA_DIMENSION * 4
        assert binary_bit["embedding"] == base64.b64decode(json_bit["embedding"])
        assert {**binary_bit, "embedding": json_bit["embedding"]} == json_bit
    assert {key: value for key, value in result.items() if key != "bits"} == \
        {key: value for key, value in plain.items() if key != "bits"}
    assert result_bit_id(result["bits"][0]) == reference.ids[77]


def test_every_response_carries_the_polymath_link_and_it_leads_to_the_query_endpoint(
    url: str, reference: Reference
) -> None:
    responses = [
        httpx.get(f"{url}/"),
        httpx.get(f"{url}/healthz"),
        httpx.get(f"{url}/libraries"),
        httpx.get(f"{url}/nowhere"),
        post_multipart(url, python_client_fields(reference.embeddings[1])),
        post_multipart(url, python_client_fields(reference.embeddings[1], count="0")),
    ]

    for response in responses:
        link = POLYMATH_LINK.search(response.headers.get("link", ""))
        assert link, f"{response.request.method} {response.request.url} has no polymath Link header"
        assert link.group(1) == "/"
    page = responses[0]
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<link rel="polymath" href="/">' in page.text
    endpoint = urljoin(f"{url}/some/page", POLYMATH_LINK.search(page.headers["link"]).group(1))
    found = httpx.post(endpoint, files={name: (None, value) for name, value in
                                        python_client_fields(reference.embeddings[1]).items()})
    assert found.status_code == 200 and result_bit_id(found.json()["bits"][0]) == reference.ids[1]


# ---- processes: workers and signals -------------------------------------------------------------


def wait_for_exit(process: subprocess.Popen, timeout: float = 15) -> int:
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"the host did not stop within {timeout} s of SIGTERM")


def refuses_connections(url: str) -> bool:
    try:
        httpx.get(f"{url}/healthz", timeout=2)
    except httpx.TransportError:
        return True
    return False


def test_two_workers_answer_like_brute_force_and_sigterm_stops_them_with_exit_code_0(
    run_host: Callable[..., RunningHost], fixtures_dir: Path, reference: Reference, tmp_path: Path
) -> None:
    server = run_host(fixture_folder(tmp_path / "libraries", fixtures_dir), "--workers", "2")

    def query(row: int) -> tuple[int, httpx.Response]:  # a new connection each time
        return row, post_multipart(server.url, python_client_fields(reference.embeddings[row], count="2000"))

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(query, range(0, 116, 7)))

    for row, response in answers:
        assert response.status_code == 200, response.text
        python_client_accepts(response.json())
        ranking = reference.ranking(reference.matrix[row])
        assert [result_bit_id(bit) for bit in response.json()["bits"]] == reference.token_budget(ranking, 2000)
    # Both workers started (the second may still be starting when the first has answered everything).
    server.wait_until(lambda: len(re.findall(r"Started server process \[\d+\]", server.log())) == 2, timeout=60,
                      what="start both workers")

    server.process.send_signal(signal.SIGTERM)

    assert wait_for_exit(server.process) == 0, server.log()
    assert refuses_connections(server.url), "a worker outlived its parent"


def test_sigterm_stops_a_single_process_server_with_exit_code_0(
    run_host: Callable[..., RunningHost], tmp_path: Path
) -> None:
    folder = tmp_path / "libraries"
    write_library(folder / "unit.json", make_library(GENERATED_VECTORS))
    server = run_host(folder)
    assert httpx.post(f"{server.url}/", json={"count": 2, "count_type": "bit"}).status_code == 200

    server.process.send_signal(signal.SIGTERM)

    assert wait_for_exit(server.process) == 0, server.log()
    assert refuses_connections(server.url)
