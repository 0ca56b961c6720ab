"""RAGFlow's HTTP API in detail, in-process: its checks in its order and words, the envelope on
every answer under /api/v1/ (also those other layers make), and what each field means here."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from librarian import b64, write_library
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from word_embedder import WordEmbedder

from host.embedders.service import Embedders
from host.service.settings import Settings
from host.web.app import create_app
from host.web.dialects.ragflow import RAGFlowEnvelope
from host.web.dialects.ragflow.highlight import highlight
from host.web.dialects.ragflow.view import dataset_id

pytestmark = pytest.mark.anyio
EMBED = WordEmbedder()
TEXTS = ["Jonah was swallowed by a great fish", "Noah built an ark of gopher wood",
         "The fish & the <prophet>. Jonah prayed; the LORD heard", "Daniel in the den of lions"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def bit(text: str, url: str, **info: str) -> dict[str, Any]:
    return {"text": text, "embedding": b64(EMBED.embed([text])[0]), "token_count": len(text.split()),
            "info": {"url": url, **info}}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    libraries = tmp_path / "libraries"
    bits = [bit(text, f"https://example.com/{number // 2}", title=f"Story {number}") for number, text in enumerate(TEXTS)]
    write_library(libraries / "stories.json", {"version": 1, "embedding_model": EMBED.model, "bits": bits,
                                               "details": {"message": "Old stories"}})
    other = {"version": 1, "embedding_model": "test:other-4", "bits": [
        {"text": "elsewhere", "embedding": b64([1, 0, 0, 0]), "token_count": 1, "info": {"url": "https://o.example/"}}]}
    write_library(libraries / "other.json", other)
    return libraries


async def connect(folder: Path, **settings: Any) -> httpx.AsyncClient:
    app = create_app(Settings(libraries=folder, watch_interval=0, **settings), embedders=Embedders([EMBED]))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host.test")


@pytest.fixture
async def client(folder: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with await connect(folder) as connected:
        yield connected


STORIES = dataset_id("stories")


async def retrieve(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    response = await client.post("/api/v1/retrieval", json={"dataset_ids": [STORIES], "question": "jonah fish", **body})
    assert response.headers["content-type"] == "application/json"
    answer: dict[str, Any] = response.json()
    return answer


# ---- RAGFlow's checks, in its order ------------------------------------------------------------------


@pytest.mark.parametrize(("body", "code", "message"), [
    ({}, 102, "`dataset_ids` is required."),
    ({"dataset_ids": []}, 102, "`dataset_ids` is required."),
    ({"dataset_ids": STORIES}, 102, "`dataset_ids` should be a list"),
    ({"dataset_ids": ["nope"]}, 102, "You don't own the dataset nope."),
    ({"dataset_ids": [STORIES, dataset_id("other")]}, 102, "Datasets use different embedding models."),
    ({"dataset_ids": [STORIES]}, 102, "`question` is required."),
    ({"dataset_ids": [STORIES], "question": 3}, 101, "`question` must be a string, got int"),
    ({"dataset_ids": [STORIES], "question": "q", "top_k": 0}, 102, "`top_k` must be greater than 0"),
    ({"dataset_ids": [STORIES], "question": "q", "highlight": "maybe"}, 102, "`highlight` should be a boolean"),
    ({"dataset_ids": [STORIES], "question": "q", "page_size": 101}, 101,
     "`page` must be at least 1 and `page_size` from 1 to 100, got 1 and 101"),
    ({"dataset_ids": [STORIES], "question": "q", "page": "two"}, 101, "`page` must be an integer, got 'two'"),
    ({"dataset_ids": [STORIES], "question": "q", "vector_similarity_weight": 2}, 101,
     "`vector_similarity_weight` must be from 0 to 1, got 2"),
    ({"dataset_ids": [STORIES], "question": "q", "similarity_threshold": "NaN"}, 101,
     "`similarity_threshold` must be a finite number, got 'NaN'"),
    ({"dataset_ids": [STORIES], "question": "q", "rerank_id": "bge"}, 101,
     "`rerank_id` is not supported: this host has no rerank model"),
    ({"dataset_ids": [STORIES], "question": "q", "document_ids": "x"}, 102, "`documents` should be a list"),
    ({"dataset_ids": [STORIES], "question": "q", "document_ids": ["x"]}, 102, "The datasets don't own the document x"),
    ({"dataset_ids": [STORIES], "question": "q", "metadata_condition": {"conditions": [
        {"name": "author", "comparison_operator": "=", "value": "x"}]}}, 101,
     "unknown field 'author' in metadata_condition.conditions[0].name; "
     "fields are title, url, description, image_url, library, text"),
])
async def test_a_refusal_names_the_field_in_ragflows_code_and_words(
    client: httpx.AsyncClient, body: dict[str, Any], code: int, message: str
) -> None:
    response = await client.post("/api/v1/retrieval", json=body)

    assert response.status_code == 200  # as RAGFlow: its SDK reads `code`, never the status
    assert response.json() == {"code": code, "message": message, "data": None}


async def test_a_body_that_is_not_json_reads_as_empty_whatever_its_type(client: httpx.AsyncClient) -> None:
    response = await client.post("/api/v1/retrieval", content=b"question=x", headers={"content-type": "text/plain"})

    assert response.json()["message"] == "`dataset_ids` is required."


async def test_the_sdks_null_and_false_options_are_accepted(client: httpx.AsyncClient) -> None:
    answer = await retrieve(client, rerank_id=None, keyword=False, cross_languages=None, metadata_condition=None,
                            use_kg=False, toc_enhance=False, document_ids=[])

    assert answer["code"] == 0 and answer["data"]["chunks"]


# ---- what an answer holds -----------------------------------------------------------------------------


async def test_chunks_doc_aggs_and_total_describe_one_kept_list(client: httpx.AsyncClient) -> None:
    answer = await retrieve(client, similarity_threshold=-1, page_size=2)

    data = answer["data"]
    assert answer["code"] == 0 and "message" not in answer
    assert data["total"] == 4 and len(data["chunks"]) == 2
    assert sum(aggregate["count"] for aggregate in data["doc_aggs"]) == 4
    assert [aggregate["count"] for aggregate in data["doc_aggs"]] == [2, 2]
    first = data["chunks"][0]
    assert first["content"] == TEXTS[0] and first["document_name"] == first["document_keyword"] == "https://example.com/0"
    assert first["dataset_id"] == STORIES and "access_tag" not in first and "embedding" not in first

    # The host's one engine: hybrid with keyword_weight = 1 - vector_similarity_weight (0.3 by default).
    bits = (await client.post("/", json={"query": "jonah fish", "query_embedding_model": EMBED.model, "count": 4,
                                         "count_type": "bit", "keyword_weight": 0.7})).json()["bits"]
    chunks = (await retrieve(client, similarity_threshold=-1, page_size=4))["data"]["chunks"]
    assert [chunk["id"] for chunk in chunks] == [bit["id"] for bit in bits]
    assert [chunk["similarity"] for chunk in chunks] == [bit["score"] for bit in bits]
    assert [chunk["vector_similarity"] for chunk in chunks] == [bit["similarity"] for bit in bits]
    assert all(0 <= chunk["term_similarity"] < 1 for chunk in chunks) and chunks[0]["term_similarity"] > 0
    for chunk in chunks:  # the fused score: w * vector + (1 - w) * term, the cosine clipped to 0-1
        assert chunk["similarity"] == pytest.approx(0.3 * min(1, max(0, chunk["vector_similarity"]))
                                                    + 0.7 * chunk["term_similarity"], abs=1e-12)
    assert [chunk["term_similarity"] for chunk in chunks if chunk["content"] == TEXTS[1]] == [0]  # Noah: no word of it


async def test_a_threshold_above_every_chunks_similarity_keeps_none(client: httpx.AsyncClient) -> None:
    every = (await retrieve(client, similarity_threshold=0, top_k=10))["data"]
    best = every["chunks"][0]["similarity"]
    assert every["total"] == 4 and best < 1

    assert (await retrieve(client, similarity_threshold=best, top_k=10))["data"]["total"] >= 1
    nothing = (await retrieve(client, similarity_threshold=best + 1e-9, top_k=10))["data"]
    assert nothing == {"chunks": [], "doc_aggs": [], "total": 0}


async def test_with_no_weight_on_vectors_the_threshold_is_void_as_in_ragflow(client: httpx.AsyncClient) -> None:
    terms_only = await retrieve(client, vector_similarity_weight=0, similarity_threshold=0.99, top_k=10)

    assert terms_only["data"]["total"] == 4
    assert [chunk["similarity"] for chunk in terms_only["data"]["chunks"]] == \
        [chunk["term_similarity"] for chunk in terms_only["data"]["chunks"]]


async def test_with_all_the_weight_on_vectors_chunks_rank_as_post_slashs_vector_mode(client: httpx.AsyncClient) -> None:
    chunks = (await retrieve(client, vector_similarity_weight=1, similarity_threshold=0))["data"]["chunks"]
    bits = (await client.post("/", json={"query": "jonah fish", "query_embedding_model": EMBED.model, "count": 4,
                                         "count_type": "bit", "mode": "vector"})).json()["bits"]

    assert [chunk["id"] for chunk in chunks] == [bit["id"] for bit in bits]
    assert [chunk["vector_similarity"] for chunk in chunks] == [bit["similarity"] for bit in bits]


async def test_a_question_of_stop_words_is_ranked_by_meaning(client: httpx.AsyncClient) -> None:
    chunks = (await retrieve(client, question="of the and", similarity_threshold=-1))["data"]["chunks"]

    assert len(chunks) == 4 and all(chunk["term_similarity"] == 0 for chunk in chunks)
    assert [chunk["similarity"] for chunk in chunks] == [chunk["vector_similarity"] for chunk in chunks]


async def test_an_empty_question_is_an_empty_success(client: httpx.AsyncClient) -> None:
    assert await retrieve(client, question=" ") == {"code": 0, "data": {"chunks": [], "doc_aggs": [], "total": 0}}


async def test_highlight_marks_words_and_escapes_the_text(client: httpx.AsyncClient) -> None:
    answer = await retrieve(client, highlight=True, similarity_threshold=0.0)

    marked = {chunk["content"]: chunk["highlight"] for chunk in answer["data"]["chunks"]}
    assert marked[TEXTS[2]] == "The <em>fish</em> &amp; the &lt;prophet&gt;... <em>Jonah</em> prayed"
    assert marked[TEXTS[1]] == TEXTS[1]  # no question word: the content itself
    assert highlight("a\nb fish", {"fish"}) == "b <em>fish</em>"


async def test_metadata_is_included_on_request_and_conditions_filter(client: httpx.AsyncClient) -> None:
    answer = await retrieve(client, include_metadata=True, metadata_fields=["title"], similarity_threshold=-1,
                            metadata_condition={
        "logic": "or", "conditions": [{"name": "title", "comparison_operator": "=", "value": "story 3"},
                                      {"name": "url", "comparison_operator": "end with", "value": "/0"}]})

    assert sorted(chunk["document_metadata"]["title"] for chunk in answer["data"]["chunks"]) == \
        ["Story 0", "Story 1", "Story 3"]


async def test_datasets_and_documents_list_what_the_library_holds(client: httpx.AsyncClient) -> None:
    datasets = (await client.get("/api/v1/datasets")).json()
    documents = (await client.get(f"/api/v1/datasets/{STORIES}/documents", params={"keywords": "COM/1"})).json()

    assert datasets["total_datasets"] == 2 and [d["name"] for d in datasets["data"]] == ["other", "stories"]
    stories = datasets["data"][1]
    assert (stories["document_count"], stories["chunk_count"], stories["token_num"]) == (2, 4, 30)
    assert stories["description"] == "Old stories" and stories["id"] == STORIES
    assert documents["data"]["total"] == 1
    (document,) = documents["data"]["docs"]
    assert (document["name"], document["chunk_count"], document["meta_fields"]) == \
        ("https://example.com/1", 2, {"url": "https://example.com/1", "title": "Story 2"})
    missing = (await client.get(f"/api/v1/datasets/{'0' * 32}/documents")).json()
    assert missing == {"code": 102, "message": f"You don't own the dataset {'0' * 32}.", "data": None}


async def test_a_library_whose_every_bit_another_serves_is_no_dataset_by_name_or_folder(folder: Path) -> None:
    """`copies/b` holds `copies/a`'s bits (the same ids): the host serves them as `copies/a`'s, so
    `copies/b` is no dataset. Named, it is refused as one that does not exist; its folder searches `a`."""
    copied = [bit(text, f"https://copies.example/{number}") for number, text in enumerate(TEXTS)]
    for name in ("copies/a", "copies/b"):
        write_library(folder / f"{name}.json", {"version": 1, "embedding_model": EMBED.model, "bits": copied})
    async with await connect(folder) as client:
        listed = [dataset["name"] for dataset in (await client.get("/api/v1/datasets")).json()["data"]]
        alone = (await client.post("/api/v1/retrieval", json={"dataset_ids": ["copies/b"], "question": "jonah"}))
        in_folder = (await client.post("/api/v1/retrieval", json={"dataset_ids": ["copies"], "question": "jonah"}))

    assert "copies/a" in listed and "copies/b" not in listed
    assert alone.status_code == 200
    assert alone.json() == {"code": 102, "message": "You don't own the dataset copies/b.", "data": None}
    chunks = in_folder.json()["data"]["chunks"]
    assert chunks and {chunk["dataset_id"] for chunk in chunks} == {dataset_id("copies/a")}


# ---- the envelope on answers other layers make -----------------------------------------------------------


def assert_envelope(response: httpx.Response, status: int, code: int) -> dict[str, Any]:
    body: dict[str, Any] = response.json()
    assert response.status_code == status and response.headers["content-type"] == "application/json"
    assert body["code"] == code and isinstance(body["message"], str) and body["message"]
    assert int(response.headers["content-length"]) == len(response.content)
    return body


async def test_errors_made_outside_the_dialect_are_envelopes_too(folder: Path) -> None:
    async with await connect(folder, max_body_bytes=1000, rate_limit=0.001, rate_burst=5) as client:
        assert_envelope(await client.get("/api/v1/nothing"), 404, 404)
        assert_envelope(await client.get("/api/v1/retrieval"), 405, 405)
        assert_envelope(await client.post("/api/v1/retrieval", content=b"x" * 2000), 413, 413)
        bad = assert_envelope(await client.get("/api/v1/datasets", headers={"Authorization": "Bearer a.b.c"}), 401, 401)
        assert bad["message"].startswith("the access token was refused")
        slashed = await client.get(httpx.URL("http://host.test//api/v1/datasets"))  # RAGFlow(key, "http://host/")
        assert slashed.json()["code"] == 0
        limited = await client.get("/api/v1/datasets")
        assert_envelope(limited, 429, 429)
        assert limited.headers["retry-after"]
        assert (await client.get("/libraries")).json() == {"error": limited.json()["message"]}  # elsewhere: ours


async def test_a_crash_under_the_prefix_is_a_logged_code_100(caplog: pytest.LogCaptureFixture) -> None:
    async def crash(request: Request) -> Response:
        raise RuntimeError("a bug")

    app = Starlette(routes=[Route("/api/v1/crash", crash)], middleware=[Middleware(RAGFlowEnvelope)])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        body = assert_envelope(await client.get("/api/v1/crash"), 500, 100)

    assert "a bug" not in body["message"] and "a bug" in caplog.text
