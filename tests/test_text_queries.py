"""Asking in words (SPEC §7): `query` on `POST /`, `POST /v1/embeddings`, and embedder failures.

The sample library and the local MiniLM embedder are real; the remote embedder is the real
OpenAI-compatible one talking to a real local HTTP server (tests/embedding_service.py).
"""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
from conftest import PROJECT
from embedder_fixtures import minilm_cache_dir, minilm_embedder  # noqa: F401 (session fixtures)
from embedding_service import EmbeddingService, Reply, running_service, unit_vector
from librarian import b64, make_library, write_library
from word_embedder import WordEmbedder

from host.embedders.minilm import MODEL as MINILM
from host.embedders.minilm import MiniLMEmbedder
from host.embedders.openai_http import OpenAIEmbedder
from host.embedders.service import Embedders
from host.search.keywords import MOST_TERMS
from host.service.settings import Settings
from host.web.app import create_app

pytestmark = pytest.mark.anyio
JONAH = "a great fish swallowed the prophet"
REMOTE = "test:remote-16"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the project's libraries/ (the sample and its private drafts)."""
    folder = tmp_path_factory.mktemp("sample") / "libraries"
    shutil.copytree(PROJECT / "libraries", folder, ignore=shutil.ignore_patterns(".compiled"))
    return folder


def connect(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host.test")


@pytest.fixture
async def client(sample: Path, minilm_embedder: MiniLMEmbedder) -> AsyncIterator[httpx.AsyncClient]:  # noqa: F811
    app = create_app(Settings(libraries=sample, watch_interval=0), embedders=Embedders([minilm_embedder]))
    async with connect(app) as connected:
        yield connected


# ---- the README's promise, against a real server ------------------------------------------------------------


def test_the_readme_first_command_answers_in_words_with_jonah_first(run_host, sample: Path) -> None:
    host = run_host(sample, embedder=True)

    response = httpx.post(f"{host.url}/", data={"query": JONAH, "count": "3", "count_type": "bit"}, timeout=60)

    assert response.status_code == 200, response.text
    titles = [bit["info"]["title"] for bit in response.json()["bits"]]
    assert titles[0].startswith("Jonah "), titles
    assert "text queries for sentence-transformers:all-MiniLM-L6-v2" in host.log()


# ---- POST / with query ----------------------------------------------------------------------------------


@pytest.mark.parametrize("body", ["json", "urlencoded", "multipart"])
async def test_a_vector_mode_text_query_answers_as_its_vector_would_in_every_body_type(
    client: httpx.AsyncClient, minilm_embedder: MiniLMEmbedder, body: str  # noqa: F811
) -> None:
    fields = {"query": JONAH, "count": "5", "count_type": "bit", "mode": "vector"}
    sent = {"json": {"json": fields}, "urlencoded": {"data": fields},
            "multipart": {"files": {name: (None, value) for name, value in fields.items()}}}[body]

    by_text = await client.post("/", **sent)
    by_vector = await client.post("/", json={"query_embedding": b64(minilm_embedder.embed([JONAH])[0]),
                                             "count": 5, "count_type": "bit"})

    assert by_text.status_code == 200, by_text.text
    assert by_text.content == by_vector.content


async def test_query_and_query_embedding_together_are_a_400(client: httpx.AsyncClient) -> None:
    response = await client.post("/", json={"query": JONAH, "query_embedding": b64(np.ones(384))})

    assert response.status_code == 400
    assert response.json()["error"].startswith("send either query (text) or query_embedding (a vector), not both")


async def test_a_query_longer_than_any_embedder_reads_is_a_400(client: httpx.AsyncClient) -> None:
    response = await client.post("/", json={"query": "word " * 2500})

    assert response.status_code == 400 and "at most 10,000 are read" in response.json()["error"]


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
async def test_text_for_a_model_without_an_embedder_is_a_400_saying_what_to_send(tmp_path: Path, mode: str) -> None:
    write_library(tmp_path / "libraries" / "notes.json", make_library(np.eye(8, dtype=np.float32)[:3]))
    app = create_app(Settings(libraries=tmp_path / "libraries", watch_interval=0), embedders=Embedders())
    async with connect(app) as client:
        response = await client.post("/", json={"query": JONAH, "mode": mode})

    assert response.status_code == 400
    assert response.json()["error"] == ("this host cannot embed text for model 'test:unit-8': "
                                        "send `query_embedding` (a vector of that model)")


async def test_text_for_a_model_without_an_embedder_is_answered_by_keywords_and_says_so(tmp_path: Path) -> None:
    write_library(tmp_path / "libraries" / "notes.json", make_library(np.eye(8, dtype=np.float32)[:3]))
    app = create_app(Settings(libraries=tmp_path / "libraries", watch_interval=0), embedders=Embedders())
    async with connect(app) as client:
        asked = {"query": "word1_4", "count": 3, "count_type": "bit"}
        keyword = (await client.post("/", json={**asked, "mode": "keyword"})).json()  # cached first: the same bits
        answer = (await client.post("/", json=asked)).json()
        keyword_again = (await client.post("/", json={**asked, "mode": "keyword"})).json()

    assert answer["details"]["notes"] == ["no embedder serves test:unit-8 here: ranked by keywords alone"]
    assert answer["sort"] == "manual" and [bit["info"]["title"] for bit in answer["bits"]] == ["Bit 1"]
    assert "similarity" not in answer["bits"][0] and answer["bits"][0]["score"] > 0
    assert keyword["bits"] == keyword_again["bits"] == answer["bits"]  # keyword mode, asked for: nothing to say
    assert "notes" not in keyword["details"] and "notes" not in keyword_again["details"]


# ---- a remote embedder that fails ---------------------------------------------------------------------


@pytest.fixture
def remote(tmp_path: Path) -> Iterator[tuple[EmbeddingService, Any]]:
    """A library of model REMOTE whose text queries go to a real local embedding service."""
    folder = tmp_path / "libraries"
    vectors = np.stack([unit_vector(f"passage {n}", 16) for n in range(4)])
    write_library(folder / "remote.json", make_library(vectors, model=REMOTE))
    with running_service(dimension=16) as service:
        embedder = OpenAIEmbedder(service.url, "remote-16", model=REMOTE, dimension=16, key="sk-test-secret-key",
                                  timeout=1.0, retries=1, backoff=0.01)
        app = create_app(Settings(libraries=folder, watch_interval=0, embedder_timeout=2.0),
                         embedders=Embedders([embedder], timeout=2.0))
        yield service, app


async def test_a_remote_embedder_serves_text_queries(remote: tuple[EmbeddingService, Any]) -> None:
    service, app = remote
    async with connect(app) as client:
        response = await client.post("/", json={"query": "passage 2", "count": 1, "count_type": "bit"})

    assert response.status_code == 200
    assert response.json()["bits"][0]["info"]["url"] == "https://example.com/2"
    assert service.requests[-1].headers["Authorization"] == "Bearer sk-test-secret-key"


@pytest.mark.parametrize(("replies", "status", "says"), [
    ([Reply(500, {"error": {"message": "overloaded"}})] * 2, 502, "overloaded"),
    ([Reply(401, {"error": {"message": "bad key sk-test-secret-key"}})], 502, "bad key"),
    ([Reply(hang=5)], 504, "did not answer within 1 s"),
])
async def test_a_failing_embedding_service_is_a_clear_502_or_504(
    remote: tuple[EmbeddingService, Any], replies: list[Reply], status: int, says: str
) -> None:
    service, app = remote
    service.reply(*replies)
    async with connect(app) as client:
        response = await client.post("/", json={"query": "passage 1"})

    assert response.status_code == status, response.text
    assert says in response.json()["error"]
    assert "sk-test-secret-key" not in response.text


class FiveDimensions(WordEmbedder):
    """Serves test:unit-8 with vectors of 5 dimensions: a misconfigured embedder."""

    dimension = 5

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.full((len(texts), 5), 1 / np.sqrt(5), np.float32)


async def test_an_embedder_of_the_wrong_dimension_is_the_same_one_line_502_at_every_door(tmp_path: Path) -> None:
    write_library(tmp_path / "libraries" / "notes.json", make_library(np.eye(8, dtype=np.float32)[:3]))
    app = create_app(Settings(libraries=tmp_path / "libraries", watch_interval=0), embedders=Embedders([FiveDimensions()]))
    async with connect(app) as client:
        post = await client.post("/", json={"query": "word1_4"})
        dify = await client.post("/dify/retrieval", json={"knowledge_id": "notes", "query": "word1_4",
                                                          "retrieval_setting": {"top_k": 3, "score_threshold": 0}})
        openai_search = await client.post("/v1/vector_stores/notes/search", json={"query": "word1_4"})
        ragflow = await client.post("/api/v1/retrieval", json={"question": "word1_4", "dataset_ids": ["notes"]})

    said = "the embedder of test:unit-8 gave 5 dimensions; its libraries have 8"
    assert (post.status_code, post.json()) == (502, {"error": said})
    assert (dify.status_code, dify.json()) == (502, {"error_code": 502, "error_msg": said})
    assert openai_search.status_code == 502 and openai_search.json()["error"]["message"] == said
    assert ragflow.status_code == 502 and ragflow.json() == {"code": 100, "message": said, "data": None}


# ---- POST /v1/embeddings -------------------------------------------------------------------------------


def test_the_real_openai_client_embeds_with_the_librarys_model(run_host, sample: Path) -> None:
    host = run_host(sample, embedder=True)
    client = openai.OpenAI(base_url=f"{host.url}/v1", api_key="unused", max_retries=0)
    local = MiniLMEmbedder()

    default = client.embeddings.create(model=MINILM, input=[JONAH, "the Lord is my shepherd"])  # base64 on the wire
    floats = client.embeddings.create(model=MINILM, input=JONAH, encoding_format="float")

    expected = local.embed([JONAH, "the Lord is my shepherd"])
    np.testing.assert_allclose([item.embedding for item in default.data], expected, atol=1e-6)
    np.testing.assert_allclose(floats.data[0].embedding, expected[0], atol=1e-6)
    assert default.model == MINILM and [item.index for item in default.data] == [0, 1]
    assert default.usage.prompt_tokens == local.count_tokens(JONAH) + local.count_tokens("the Lord is my shepherd")
    with pytest.raises(openai.NotFoundError, match="cannot be embedded here"):
        client.embeddings.create(model="openai.com:text-embedding-ada-002", input=JONAH)


async def test_embeddings_come_as_floats_or_little_endian_float32_base64(
    client: httpx.AsyncClient, minilm_embedder: MiniLMEmbedder  # noqa: F811
) -> None:
    as_floats = (await client.post("/v1/embeddings", json={"model": MINILM, "input": JONAH})).json()
    as_base64 = (await client.post("/v1/embeddings", json={"model": MINILM, "input": [JONAH],
                                                           "encoding_format": "base64"})).json()

    decoded = np.frombuffer(base64.b64decode(as_base64["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(as_floats["data"][0]["embedding"], minilm_embedder.embed([JONAH])[0], atol=1e-6)
    np.testing.assert_array_equal(decoded, np.asarray(as_floats["data"][0]["embedding"], dtype=np.float32))
    assert as_floats["object"] == "list" and as_floats["data"][0]["object"] == "embedding"


@pytest.mark.parametrize(("body", "status", "says"), [
    ({"model": MINILM}, 400, "input must be a string or a non-empty list of strings"),
    ({"model": MINILM, "input": [[101, 2023]]}, 400, "token-id input (lists of integers) is not supported"),
    ({"model": MINILM, "input": [1, 2]}, 400, "token-id input"),
    ({"model": MINILM, "input": ["fine", ""]}, 400, "must not contain empty strings"),
    ({"model": MINILM, "input": ["a"] * 257}, 413, "send at most 256 a request"),
    ({"model": MINILM, "input": "x" * 8001}, 413, "at most 8,000 are read"),
    ({"model": MINILM, "input": "x", "encoding_format": "int8"}, 400, "encoding_format must be"),
    ({"input": "x"}, 400, "model is required"),
    ({"model": "nope:1", "input": "x"}, 404, "cannot be embedded here; models embedded here: " + MINILM),
])
async def test_bad_embedding_requests_get_openais_error_shape(
    client: httpx.AsyncClient, body: dict[str, Any], status: int, says: str
) -> None:
    response = await client.post("/v1/embeddings", json=body)

    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and says in error["message"]


async def test_a_model_only_private_libraries_use_is_not_embedded_for_strangers(tmp_path: Path,
                                                                                minilm_embedder: MiniLMEmbedder) -> None:  # noqa: F811
    folder = tmp_path / "libraries"
    write_library(folder / "access" / "team" / "notes.json",
                  make_library(minilm_embedder.embed(["a private note"]), model=MINILM))
    app = create_app(Settings(libraries=folder, watch_interval=0), embedders=Embedders([minilm_embedder]))
    async with connect(app) as client:
        response = await client.post("/v1/embeddings", json={"model": MINILM, "input": "hello"})

    assert response.status_code == 404 and response.json()["error"]["code"] == "model_not_found"
    assert response.json()["error"]["message"] == f"model '{MINILM}' cannot be embedded here; models embedded here: none"


async def test_metrics_show_embedding_latency_and_cache_hits(client: httpx.AsyncClient) -> None:
    for _ in range(2):
        assert (await client.post("/", json={"query": "the Lord is my shepherd", "count": 1})).status_code == 200
    metrics = (await client.get("/metrics")).text

    assert f'polymath_embed_cache_hits_total{{model="{MINILM}"}}' in metrics
    assert f'polymath_embed_seconds_count{{model="{MINILM}"}}' in metrics
    assert "# TYPE polymath_embed_seconds histogram" in metrics


# ---- narrowing a query: similarity_threshold and constraint (SPEC §10) ------------------------------------


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
async def test_a_constraint_keeps_only_matching_bits_and_a_threshold_filters_the_ranking(client: httpx.AsyncClient,
                                                                                        mode: str) -> None:
    fields = {"query": JONAH, "count": 20, "count_type": "bit", "omit": "embedding", "mode": mode}

    jonah_only = (await client.post("/", json={**fields, "constraint": "title:jonah"})).json()["bits"]
    structured = (await client.post("/", json={**fields, "constraint": {"label": "title", "unparsed": "jonah"}})).json()
    above = (await client.post("/", json={**fields, "similarity_threshold": 0.45})).json()["bits"]
    everything = (await client.post("/", json=fields)).json()["bits"]

    assert jonah_only and all(bit["info"]["title"].startswith("Jonah ") for bit in jonah_only)
    assert structured["bits"] == jonah_only
    assert above == [bit for bit in everything if bit["similarity"] >= 0.45] and 0 < len(above) < len(everything)


async def test_a_constraint_never_widens_what_a_caller_may_see(client: httpx.AsyncClient) -> None:
    response = await client.post("/", json={"query": JONAH, "constraint": 'library:"access/unpublished/drafts"'})

    assert response.status_code == 200 and response.json()["bits"] == []


@pytest.mark.parametrize(("fields", "says"), [
    ({"constraint": "author:paul"}, "constraint: unknown label 'author' at 0"),
    ({"constraint": "/fish.*/"}, "regular expressions are not supported"),
    ({"similarity_threshold": "high"}, "similarity_threshold must be a number, got 'high'"),
    ({"similarity_threshold": "nan"}, "similarity_threshold must be a finite number"),
])
async def test_a_bad_constraint_or_threshold_is_a_400_naming_it(
    client: httpx.AsyncClient, fields: dict[str, Any], says: str
) -> None:
    response = await client.post("/", json={"query": JONAH, **fields})

    assert response.status_code == 400 and says in response.json()["error"], response.text


# ---- modes: keyword and hybrid (issue 31) ------------------------------------------------------------------


@pytest.mark.parametrize(("question", "verse"), [("Methuselah", "Genesis 5:"), ("the son of Amittai", "Jonah 1:")])
async def test_a_rare_name_brings_its_passage_into_the_top_three_by_default(client: httpx.AsyncClient, question: str,
                                                                           verse: str) -> None:
    answer = (await client.post("/", json={"query": question, "count": 3, "count_type": "bit"})).json()
    by_meaning = (await client.post("/", json={"query": question, "count": 3, "count_type": "bit",
                                               "mode": "vector"})).json()

    assert any(bit["info"]["title"].startswith(verse) for bit in answer["bits"]), answer
    assert answer["sort"] == "manual" and all(0 <= bit["score"] <= 1 and "similarity" in bit for bit in answer["bits"])
    assert not any(bit["info"]["title"].startswith(verse) for bit in by_meaning["bits"])  # what the issue saw


async def test_a_keyword_query_answers_only_bits_holding_its_words_ranked_by_bm25(client: httpx.AsyncClient) -> None:
    answer = (await client.post("/", data={"query": "Methuselah", "mode": "keyword", "count": "10",
                                            "count_type": "bit"})).json()

    assert [bit["info"]["title"][:10] for bit in answer["bits"]] == ["Genesis 5:"] * 2
    scores = [bit["score"] for bit in answer["bits"]]
    assert scores == sorted(scores, reverse=True) and all("similarity" not in bit for bit in answer["bits"])
    assert all("methuselah" in bit["text"].lower() for bit in answer["bits"])


async def test_stop_words_alone_are_an_empty_keyword_answer_and_a_vector_ranked_hybrid_one(
        client: httpx.AsyncClient) -> None:
    keyword = (await client.post("/", json={"query": "to be or not to be", "mode": "keyword"})).json()
    hybrid = (await client.post("/", json={"query": "?!...", "count": 3, "count_type": "bit"})).json()

    assert keyword["bits"] == [] and "nothing matches it" in keyword["details"]["notes"][0]
    assert len(hybrid["bits"]) == 3 and hybrid["sort"] == "similarity" and "score" not in hybrid["bits"][0]
    assert hybrid["details"]["notes"] == ["the query has no keyword (only stop words or punctuation): "
                                          "ranked by meaning alone"]


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
async def test_a_query_of_ten_thousand_characters_is_bounded_and_says_so(client: httpx.AsyncClient, sample: Path,
                                                                         mode: str) -> None:
    bits = json.loads((sample / "sample.json").read_text())["bits"]
    words = " ".join(bit["text"] for bit in bits)[:10_000]
    answer = (await client.post("/", json={"query": words, "mode": mode, "count": 5, "count_type": "bit"})).json()

    assert len(answer["bits"]) == 5
    assert answer["details"]["notes"][0].endswith(f"distinct keywords; the {MOST_TERMS} rarest were used")


@pytest.mark.parametrize(("fields", "says"), [
    ({"query": JONAH, "mode": "semantic"}, "mode must be one of vector, keyword, hybrid, got 'semantic'"),
    ({"query_embedding": b64(np.ones(384)), "mode": "keyword"}, "mode=keyword ranks by the query's words: send query"),
    ({"mode": "hybrid"}, "mode=hybrid ranks by the query's words: send query (text)"),
    ({"query": JONAH, "keyword_weight": 1.5}, "keyword_weight must be between 0 and 1, got 1.5"),
    ({"query": JONAH, "keyword_weight": "much"}, "keyword_weight must be a number, got 'much'"),
    ({"query": JONAH, "mode": "vector", "keyword_weight": 0.3}, "keyword_weight weighs keywords against meaning"),
])
async def test_a_bad_mode_or_weight_is_a_400_naming_it(client: httpx.AsyncClient, fields: dict[str, Any],
                                                       says: str) -> None:
    response = await client.post("/", json=fields)

    assert response.status_code == 400 and says in response.json()["error"], response.text
    assert (await client.post("/", json={"query": JONAH})).status_code == 200  # and the host serves on


async def test_hybrid_takes_a_vector_and_words_together_and_weighs_them(client: httpx.AsyncClient,
                                                                       minilm_embedder: MiniLMEmbedder) -> None:  # noqa: F811
    vector = b64(minilm_embedder.embed(["the son of Amittai"])[0])
    sent = (await client.post("/", json={"query": "the son of Amittai", "query_embedding": vector, "mode": "hybrid",
                                          "count": 5, "count_type": "bit"})).json()
    embedded = (await client.post("/", json={"query": "the son of Amittai", "count": 5, "count_type": "bit"})).json()
    by_words = (await client.post("/", json={"query": "the son of Amittai", "keyword_weight": 1, "count": 1,
                                              "count_type": "bit"})).json()

    assert sent["bits"] == embedded["bits"]
    assert by_words["bits"][0]["info"]["title"].startswith("Jonah 1:")


async def test_a_score_threshold_keeps_bits_ranked_at_least_that_high(client: httpx.AsyncClient) -> None:
    fields = {"query": "Jonah prayed unto the LORD", "mode": "keyword", "count": 10, "count_type": "bit"}
    everything = (await client.post("/", json=fields)).json()["bits"]
    third = everything[2]["score"]
    kept = (await client.post("/", json={**fields, "score_threshold": third})).json()["bits"]

    assert kept == everything[:3] and len(everything) > 3
    refused = await client.post("/", json={**fields, "score_threshold": "high"})
    assert refused.status_code == 400 and refused.json() == {"error": "score_threshold must be a number, got 'high'"}
