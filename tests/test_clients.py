"""The REAL JavaScript client, @polymath-ai/client 2.0.3, against a real host process.

Each query runs `node tests/js_client/query.mjs`, which calls the package's own
`PolymathEndpoint.ask()` (its FormData encoding, its zod validation of arguments and results)
or `validate()`. The host serves the real 14-bit Polymath library in public and the real 2-bit
library as private bits under `access/unpublished/`. Right answers are computed here by brute
force from the fixture files (docs/clients.md has the facts about the client).
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pytest
from components import admin, unavailable
from conftest import PROJECT, RunningHost, start_host, stop_host

HARNESS = PROJECT / "tests" / "js_client"
ADA = "openai.com:text-embedding-ada-002"
PUBLIC_FILE = "polymath-v1-sample-library.json"  # 14 bits
PRIVATE_FILE = "polymath-v1-knowledge-string.json"  # 2 bits, served under access/unpublished/
PRIVATE_TAG = "unpublished"
EVERYTHING = 100_000  # a token budget larger than all the bits together


# ---- the harness ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    code: int
    output: Any  # the harness's one JSON document


class Ask(Protocol):
    def __call__(self, url: str, args: dict[str, Any], *, as_given: bool = False) -> Answer: ...


@pytest.fixture(scope="session")
def js_client() -> Ask:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        unavailable("node and npm (Node >= 18) are needed to run the real @polymath-ai/client")
    assert node is not None and npm is not None
    major = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    if int(major.lstrip("v").split(".")[0]) < 18:
        unavailable(f"@polymath-ai/client needs Node >= 18, found {major}")
    if not (HARNESS / "node_modules").is_dir():
        installed = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=HARNESS,
                                   capture_output=True, text=True, timeout=600)
        if installed.returncode != 0:
            unavailable(f"npm ci failed in {HARNESS}:\n{installed.stdout}\n{installed.stderr}")

    def ask(url: str, args: dict[str, Any], *, as_given: bool = False) -> Answer:
        """The client asked at `url` + "/" (a host's root), or at `url` itself with `as_given`."""
        done = subprocess.run([node, str(HARNESS / "query.mjs"), url if as_given else f"{url}/", "-"],
                              input=json.dumps(args),
                              capture_output=True, text=True, timeout=60, cwd=HARNESS)
        try:
            output = json.loads(done.stdout)
        except json.JSONDecodeError:
            pytest.fail(f"query.mjs exited {done.returncode} without JSON:\n{done.stdout}\n{done.stderr}")
        return Answer(done.returncode, output)

    return ask


# ---- the reference --------------------------------------------------------------------------


def canonical_id(url: str, text: str) -> str:
    return hashlib.sha256(f"{url.strip()}\n{text.strip()}".encode()).hexdigest()


def bit_id(bit: dict[str, Any]) -> str:
    return canonical_id(bit["info"]["url"], bit["text"])


@dataclass(frozen=True)
class FixtureBit:
    id: str
    text: str
    embedding: str  # base64 float32, exactly as in the file
    token_count: int
    private: bool

    @property
    def vector(self) -> np.ndarray:
        return np.frombuffer(base64.b64decode(self.embedding), dtype="<f4")


def read_bits(path: Path, private: bool) -> list[FixtureBit]:
    return [FixtureBit(canonical_id(bit["info"]["url"], bit["text"]), bit["text"], bit["embedding"],
                       bit["token_count"], private)
            for bit in json.loads(path.read_text())["bits"]]


@dataclass(frozen=True)
class Reference:
    bits: list[FixtureBit]

    @property
    def public(self) -> list[FixtureBit]:
        return [bit for bit in self.bits if not bit.private]

    @property
    def private(self) -> list[FixtureBit]:
        return [bit for bit in self.bits if bit.private]

    def ranking(self, query: FixtureBit, *, with_private: bool = False) -> list[FixtureBit]:
        """Every bit the caller may see, by descending dot product (brute force, float64)."""
        visible = [bit for bit in self.bits if with_private or not bit.private]
        scores = [float(np.dot(bit.vector.astype(np.float64), query.vector.astype(np.float64))) for bit in visible]
        return [bit for _, bit in sorted(zip(scores, visible), key=lambda pair: -pair[0])]


def ids(bits: list[Any]) -> list[str]:
    return [bit.id if isinstance(bit, FixtureBit) else bit_id(bit) for bit in bits]


# ---- the host -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Served:
    url: str
    token: str  # grants `unpublished`, issued by the admin CLI
    reference: Reference


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("clients")
    libraries = root / "libraries"
    (libraries / "access" / PRIVATE_TAG).mkdir(parents=True)
    shutil.copy(fixtures_dir / PUBLIC_FILE, libraries / PUBLIC_FILE)
    shutil.copy(fixtures_dir / PRIVATE_FILE, libraries / "access" / PRIVATE_TAG / PRIVATE_FILE)
    access_file = root / "access.SECRET.json"
    admin("access", "init", "--access", str(access_file))
    token = admin("token", "issue", "alice", "--tag", PRIVATE_TAG, "--access", str(access_file))
    reference = Reference(read_bits(fixtures_dir / PUBLIC_FILE, False) + read_bits(fixtures_dir / PRIVATE_FILE, True))
    running: RunningHost = start_host(libraries, "--access", str(access_file))
    yield Served(running.url, token, reference)
    stop_host(running)


def assert_exit(answer: Answer, code: int) -> Any:
    assert answer.code == code, f"query.mjs exited {answer.code}, expected {code}: {json.dumps(answer.output)[:3000]}"
    return answer.output


# ---- queries --------------------------------------------------------------------------------


def test_the_js_client_gets_the_brute_force_ranking_for_a_real_bits_embedding(js_client: Ask, served: Served) -> None:
    query = served.reference.public[4]

    library = assert_exit(js_client(served.url, {"query_embedding": query.embedding, "count": EVERYTHING}), 0)

    assert library["version"] == 1 and library["embedding_model"] == ADA
    assert library["omit"] == "embedding"
    assert ids(library["bits"]) == ids(served.reference.ranking(query))
    assert library["bits"][0]["similarity"] == pytest.approx(1.0, abs=1e-5)
    similarities = [bit["similarity"] for bit in library["bits"]]
    assert similarities == sorted(similarities, reverse=True)


def test_a_bit_budget_returns_exactly_that_many_of_the_best_bits(js_client: Ask, served: Served) -> None:
    query = served.reference.public[9]

    library = assert_exit(js_client(served.url, {"query_embedding": query.embedding, "count": 5,
                                                 "count_type": "bit"}), 0)

    assert ids(library["bits"]) == ids(served.reference.ranking(query)[:5])


def test_a_token_budget_stops_at_the_first_bit_that_would_overflow(js_client: Ask, served: Served) -> None:
    query = served.reference.public[0]
    ranking = served.reference.ranking(query)
    budget = sum(bit.token_count for bit in ranking[:4]) + ranking[4].token_count - 1  # the 5th does not fit

    library = assert_exit(js_client(served.url, {"query_embedding": query.embedding, "count": budget,
                                                 "count_type": "token"}), 0)

    assert ids(library["bits"]) == ids(ranking[:4])
    assert sum(bit["token_count"] for bit in library["bits"]) <= budget


def test_a_first_bit_larger_than_the_token_budget_comes_back_cut_to_it(js_client: Ask, served: Served) -> None:
    query = served.reference.public[5]  # 333 tokens

    library = assert_exit(js_client(served.url, {"query_embedding": query.embedding, "count": 40}), 0)

    [bit] = library["bits"]
    assert bit["token_count"] == 40
    assert bit["info"]["url"] and query.text.startswith(bit["text"]) and len(bit["text"]) < len(query.text)


def test_omit_as_an_array_is_sent_as_a_comma_list_and_omits_every_key(js_client: Ask, served: Served) -> None:
    query = served.reference.public[2]

    traced = assert_exit(js_client(served.url, {"query_embedding": query.embedding, "count": 3, "count_type": "bit",
                                                "omit": ["embedding", "similarity"], "trace": True}), 0)

    [post] = [request for request in traced["requests"] if request["method"] == "POST"]
    assert post["form"]["omit"] == "embedding,similarity"
    library = traced["library"]
    assert library["omit"] == ["embedding", "similarity"]
    assert ids(library["bits"]) == ids(served.reference.ranking(query)[:3])
    for bit in library["bits"]:
        assert "embedding" not in bit and "similarity" not in bit
        assert isinstance(bit["token_count"], int) and isinstance(bit["text"], str)


def test_omit_a_single_key_returns_the_embeddings_the_library_holds(js_client: Ask, served: Served) -> None:
    query = served.reference.public[11]
    by_id = {bit.id: bit for bit in served.reference.bits}

    library = assert_exit(js_client(served.url, {"query_embedding": query.embedding, "count": 4,
                                                 "count_type": "bit", "omit": "similarity"}), 0)

    assert library["omit"] == "similarity"
    assert ids(library["bits"]) == ids(served.reference.ranking(query)[:4])
    for bit in library["bits"]:
        assert "similarity" not in bit
        assert base64.b64decode(bit["embedding"]) == base64.b64decode(by_id[bit_id(bit)].embedding)


# ---- access -------------------------------------------------------------------------------------


def test_the_access_token_shows_the_js_client_the_private_bits(js_client: Ask, served: Served) -> None:
    query = served.reference.private[0]

    library = assert_exit(js_client(served.url, {"query_embedding": query.embedding, "count": EVERYTHING,
                                                 "access_token": served.token}), 0)

    assert ids(library["bits"]) == ids(served.reference.ranking(query, with_private=True))
    assert bit_id(library["bits"][0]) == query.id
    assert library["bits"][0]["similarity"] == pytest.approx(1.0, abs=1e-5)
    assert not any("access_tag" in bit for bit in library["bits"])


def test_without_the_token_the_js_client_never_sees_a_private_bit(js_client: Ask, served: Served) -> None:
    query = served.reference.private[0]

    library = assert_exit(js_client(served.url, {"query_embedding": query.embedding, "count": EVERYTHING}), 0)

    assert ids(library["bits"]) == ids(served.reference.ranking(query))
    assert not set(ids(library["bits"])) & set(ids(served.reference.private))


def test_a_token_with_a_forged_signature_is_an_http_401_for_the_js_client(js_client: Ask, served: Served) -> None:
    header, claims, signature = served.token.split(".")
    forged = ".".join([header, claims, signature[:10] + ("A" if signature[10] != "A" else "B") + signature[11:]])

    error = assert_exit(js_client(served.url, {"query_embedding": served.reference.private[0].embedding,
                                               "access_token": forged}), 3)

    assert error["error_status"] == 401
    assert "error" in error["error_body"]


# ---- one publisher: /p/{name}/ --------------------------------------------------------------------


PUBLIC_NAME = PUBLIC_FILE.removesuffix(".json")


def test_the_js_client_given_a_publishers_url_sees_only_that_publisher(js_client: Ask, served: Served) -> None:
    query = served.reference.private[0]
    asked = {"query_embedding": query.embedding, "count": EVERYTHING, "access_token": served.token}

    public = assert_exit(js_client(f"{served.url}/p/{PUBLIC_NAME}", asked), 0)
    private = assert_exit(js_client(f"{served.url}/p/access", asked), 0)
    anonymous = assert_exit(js_client(f"{served.url}/p/access", {"query_embedding": query.embedding}), 3)

    assert ids(public["bits"]) == ids(served.reference.ranking(query))  # the token's private bits are elsewhere
    assert ids(private["bits"]) == ids([bit for bit in served.reference.ranking(query, with_private=True)
                                        if bit.private])
    assert anonymous["error_status"] == 404  # to an anonymous caller the private folder is not there


def test_the_js_clients_discovery_finds_the_publishers_endpoint_from_its_link(js_client: Ask, served: Served) -> None:
    query = served.reference.public[3]

    traced = assert_exit(js_client(f"{served.url}/p/{PUBLIC_NAME}/libraries",
                                   {"query_embedding": query.embedding, "count": EVERYTHING, "trace": True},
                                   as_given=True), 0)

    steps = [(request["method"], request["url"].removeprefix(served.url), request["status"])
             for request in traced["requests"]]
    assert steps == [("POST", f"/p/{PUBLIC_NAME}/libraries", 405), ("GET", f"/p/{PUBLIC_NAME}/libraries", 200),
                     ("POST", f"/p/{PUBLIC_NAME}/", 200)]
    assert traced["requests"][1]["link"] == f'</p/{PUBLIC_NAME}/>; rel="polymath"'
    assert ids(traced["library"]["bits"]) == ids(served.reference.ranking(query))


def test_the_js_clients_own_validate_passes_against_one_publisher(js_client: Ask, served: Served) -> None:
    report = assert_exit(js_client(f"{served.url}/p/{PUBLIC_NAME}", {"validate": True}), 0)

    assert report["valid"] is True


# ---- the client's own checks and errors ---------------------------------------------------------


def test_the_js_clients_own_validate_passes_against_the_14_bit_library(js_client: Ask, served: Served) -> None:
    report = assert_exit(js_client(served.url, {"validate": True}), 0)

    assert report["valid"] is True
    assert report["details"] and all(step["success"] for step in report["details"]), report["details"]


@pytest.mark.parametrize(("args", "mentions"), [
    pytest.param({"count": 0}, "count", id="count-0"),
    pytest.param({"count": 10_000_000}, "count", id="count-over-the-maximum"),
    pytest.param({"version": 0}, "version", id="version-0"),
])
def test_http_errors_surface_as_exit_code_3_with_the_status(
    js_client: Ask, served: Served, args: dict[str, Any], mentions: str
) -> None:
    error = assert_exit(js_client(served.url, {"query_embedding": served.reference.public[0].embedding, **args}), 3)

    assert error["error_status"] == 400
    assert mentions in error["error_body"]["error"]
