"""OpenAI's vector stores with the REAL `openai` client against a real host process: the access
token as the API key, `vector_stores.list()`, `.retrieve()` and `.search()` answered in OpenAI's
types, private libraries only with the token, and every write operation refused in OpenAI's error
shape (never a 404 page)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
from openai import AsyncOpenAI, OpenAI
from sample_host import DANIEL, DRAFTS, JONAH, Served, serve_sample

ANONYMOUS_KEY = "anonymous"  # the client needs some key; one the host does not know is no token


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve_sample(tmp_path_factory.mktemp("openai")) as served:
        yield served


OPENED: list[OpenAI] = []


@pytest.fixture(autouse=True)
def closed_clients() -> Iterator[None]:
    """Every client a test opens is closed when it ends (an unclosed one warns when collected)."""
    yield
    while OPENED:
        OPENED.pop().close()


def client(served: Served, token: str | None = None) -> OpenAI:
    opened = OpenAI(api_key=token or ANONYMOUS_KEY, base_url=f"{served.url}/v1", max_retries=0, timeout=30)
    OPENED.append(opened)
    return opened


def post_slash(served: Served, question: str, count: int, **arguments: object) -> list[dict[str, object]]:
    answer = httpx.post(f"{served.url}/", json={"query": question, "count": count, "count_type": "bit", **arguments},
                        timeout=30).json()
    bits: list[dict[str, object]] = answer["bits"]
    return bits


# ---- list and retrieve ------------------------------------------------------------------------------


def test_list_shows_an_anonymous_caller_the_public_library_only(served: Served) -> None:
    (store,) = client(served).vector_stores.list()

    assert (store.id, store.name, store.object, store.status) == ("sample", "sample", "vector_store", "completed")
    assert store.file_counts.total == store.file_counts.completed == 386  # its distinct URLs
    assert (store.file_counts.in_progress, store.file_counts.failed, store.file_counts.cancelled) == (0, 0, 0)
    assert store.usage_bytes > 100_000 and store.created_at == 0
    assert store.metadata == {"embedding_model": "sentence-transformers:all-MiniLM-L6-v2", "bits": "386"}


def test_list_with_the_token_shows_the_private_drafts_in_either_order(served: Served) -> None:
    stores = client(served, served.token).vector_stores

    assert [store.id for store in stores.list()] == ["sample", DRAFTS]  # desc: the reverse of the path order
    assert [store.id for store in stores.list(order="asc")] == [DRAFTS, "sample"]
    first = stores.list(order="asc", limit=1)
    assert [store.id for store in first.data] == [DRAFTS] and first.has_more
    assert [store.id for store in first.get_next_page().data] == ["sample"]  # after=<last id>, as the client pages
    assert [store.id for store in stores.list(order="asc", before="sample")] == [DRAFTS]


def test_retrieve_finds_a_library_by_name_even_with_a_slash(served: Served) -> None:
    drafts = client(served, served.token).vector_stores.retrieve(DRAFTS)
    assert (drafts.id, drafts.file_counts.total, drafts.metadata) == (DRAFTS, 11, {
        "embedding_model": "sentence-transformers:all-MiniLM-L6-v2", "bits": "11"})

    with pytest.raises(openai.NotFoundError, match=f"No vector store found with id '{DRAFTS}'") as refused:
        client(served).vector_stores.retrieve(DRAFTS)
    with pytest.raises(openai.NotFoundError) as unknown:
        client(served).vector_stores.retrieve("access/unpublished/nothing")
    assert refused.value.body == {**unknown.value.body, "message": refused.value.body["message"]}  # type: ignore[dict-item]


# ---- search -----------------------------------------------------------------------------------------


def test_search_answers_in_openais_types_with_post_slashs_rank_scores(served: Served) -> None:
    page = client(served).vector_stores.search("sample", query=JONAH)
    bits = post_slash(served, JONAH, 10)

    assert len(page.data) == 10  # OpenAI's default max_num_results
    first = page.data[0]
    assert "Jonah" in str(first.attributes["title"]) and first.filename == first.attributes["url"]
    assert first.file_id.startswith("file-") and len(first.file_id) == 37
    assert [result.content[0].type for result in page.data] == ["text"] * 10
    assert [result.content[0].text for result in page.data] == [bit["text"] for bit in bits]
    assert [result.attributes["bit_id"] for result in page.data] == [bit["id"] for bit in bits]
    assert [result.score for result in page.data] == [min(1.0, max(0.0, float(bit["score"]))) for bit in bits]  # type: ignore[arg-type]
    assert set(first.attributes) == {"url", "title", "library", "bit_id", "token_count"}
    assert first.attributes["library"] == "sample"


def test_the_raw_page_is_a_vector_store_search_results_page(served: Served) -> None:
    raw = client(served).vector_stores.with_raw_response.search("sample", query=[JONAH, "Nineveh"],
                                                                 max_num_results=2, rewrite_query=True)
    page = raw.http_response.json()

    assert list(page) == ["object", "search_query", "data", "has_more", "next_page"]
    assert (page["object"], page["search_query"], page["has_more"], page["next_page"]) == (
        "vector_store.search_results.page", [JONAH, "Nineveh"], False, None)
    assert [list(result) for result in page["data"]] == [["file_id", "filename", "score", "attributes", "content"]] * 2


def test_max_num_results_score_threshold_and_filters_narrow_the_results(served: Served) -> None:
    stores = client(served).vector_stores
    three = stores.search("sample", query=JONAH, max_num_results=3)
    threshold = three.data[1].score
    kept = stores.search("sample", query=JONAH, max_num_results=50,
                         ranking_options={"ranker": "none", "score_threshold": threshold})
    jonah_only = stores.search("sample", query=JONAH, max_num_results=50, filters={
        "type": "and", "filters": [{"type": "gte", "key": "title", "value": "Jonah"},
                                   {"type": "lt", "key": "title", "value": "Joshua"}]})
    in_list = stores.search("sample", query=JONAH, filters={"type": "in", "key": "title", "value": [
        str(three.data[0].attributes["title"]), str(three.data[2].attributes["title"])]})

    assert len(three.data) == 3
    assert len(kept.data) >= 2 and all(result.score >= threshold for result in kept.data)
    assert [result.attributes["bit_id"] for result in kept.data][:2] == [r.attributes["bit_id"] for r in three.data[:2]]
    assert jonah_only.data and all(str(r.attributes["title"]).startswith("Jonah") for r in jonah_only.data)
    assert [r.attributes["bit_id"] for r in in_list.data] == [three.data[0].attributes["bit_id"],
                                                                three.data[2].attributes["bit_id"]]


@pytest.mark.parametrize(("weights", "asked"), [
    ({"embedding_weight": 1, "text_weight": 0}, {"keyword_weight": 0}),
    ({"embedding_weight": 1, "text_weight": 3}, {"keyword_weight": 0.75}),
    ({"embedding_weight": 0.2, "text_weight": 0.2}, {}),  # the same share as the default
])
def test_hybrid_search_weights_set_the_keywords_share_as_post_slashs_keyword_weight(
    served: Served, weights: dict[str, float], asked: dict[str, float]
) -> None:
    question = "the son of Amittai"
    page = client(served).vector_stores.search("sample", query=question, max_num_results=5,
                                               ranking_options={"hybrid_search": weights})  # type: ignore[typeddict-unknown-key]

    bits = post_slash(served, question, 5, **asked)
    assert [result.attributes["bit_id"] for result in page.data] == [bit["id"] for bit in bits]
    assert [result.score for result in page.data] == [min(1.0, max(0.0, float(bit["score"]))) for bit in bits]  # type: ignore[arg-type]


def test_the_passage_holding_a_name_comes_first_by_default_and_by_keywords_alone(served: Served) -> None:
    stores = client(served).vector_stores
    amittai = stores.search("sample", query="the son of Amittai", max_num_results=3)
    methuselah = stores.search("sample", query="Methuselah", max_num_results=3, ranking_options={
        "ranker": "none", "hybrid_search": {"embedding_weight": 0, "text_weight": 1}})  # type: ignore[typeddict-unknown-key]

    assert str(amittai.data[0].attributes["title"]).startswith("Jonah 1:")
    assert [str(result.attributes["title"])[:10] for result in methuselah.data[:2]] == ["Genesis 5:"] * 2
    # Keywords alone: the keyword score, min(1, BM25 / |w|), the same as POST /'s; no keyword, no score.
    keyword_only = post_slash(served, "Methuselah", 3, mode="keyword")
    assert [result.score for result in methuselah.data[:2]] == [bit["score"] for bit in keyword_only[:2]]
    assert 0 < methuselah.data[0].score < 1 and methuselah.data[2].score == 0.0


def test_private_passages_come_only_with_the_token(served: Served) -> None:
    holder = client(served, served.token).vector_stores.search(DRAFTS, query=DANIEL, max_num_results=3)
    assert all(result.attributes["library"] == DRAFTS for result in holder.data) and len(holder.data) == 3
    assert "Daniel" in str(holder.data[0].attributes["title"])

    with pytest.raises(openai.NotFoundError, match="No vector store found"):
        client(served).vector_stores.search(DRAFTS, query=DANIEL)


@pytest.mark.anyio
async def test_the_async_client_searches_too(served: Served) -> None:
    async with AsyncOpenAI(api_key=served.token, base_url=f"{served.url}/v1", max_retries=0) as async_client:
        page = await async_client.vector_stores.search(DRAFTS, query=DANIEL, max_num_results=2)
        stores = [store.id async for store in async_client.vector_stores.list()]
    assert len(page.data) == 2 and stores == ["sample", DRAFTS]


# ---- refusals ---------------------------------------------------------------------------------------


def test_a_token_that_fails_verification_is_an_authentication_error(served: Served) -> None:
    for call in (lambda c: c.vector_stores.list(), lambda c: c.vector_stores.search("sample", query=JONAH),
                 lambda c: c.vector_stores.create(name="x")):
        with pytest.raises(openai.AuthenticationError, match="the access token was refused") as refused:
            call(client(served, "not.a-valid.jwt"))
        assert refused.value.code == "invalid_api_key"


@pytest.mark.parametrize(("arguments", "message"), [
    ({"query": JONAH, "max_num_results": 51}, "max_num_results must be an integer from 1 to 50, got 51"),
    ({"query": []}, "query is required: a string, or a non-empty list of strings"),
    ({"query": JONAH, "ranking_options": {"score_threshold": 2}}, "score_threshold must be a number from 0 to 1"),
    ({"query": JONAH, "ranking_options": {"ranker": "fancy"}}, "ranking_options.ranker must be one of auto, none"),
    ({"query": JONAH, "ranking_options": {"hybrid_search": {"text_weight": 1}}},
     "ranking_options.hybrid_search must be an object with embedding_weight and text_weight"),
    ({"query": JONAH, "ranking_options": {"hybrid_search": {"embedding_weight": -1, "text_weight": 1}}},
     "ranking_options.hybrid_search.embedding_weight must be a number of at least 0, got -1"),
    ({"query": JONAH, "ranking_options": {"hybrid_search": {"embedding_weight": 0, "text_weight": 0}}},
     "embedding_weight and text_weight must not both be 0"),
    ({"query": JONAH, "filters": {"type": "eq", "key": "author", "value": "x"}}, "unknown field 'author' in filters.key"),
    ({"query": JONAH, "extra_body": {"attempts": 3}}, "Unrecognized request argument supplied: attempts"),
])
def test_a_bad_search_is_a_bad_request_naming_the_parameter(served: Served, arguments: dict, message: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client(served).vector_stores.search("sample", **arguments)
    assert message in refused.value.message
    assert refused.value.type == "invalid_request_error"


@pytest.mark.parametrize(("operation", "what"), [
    (lambda c: c.vector_stores.create(name="mine"), "creating a vector store"),
    (lambda c: c.vector_stores.update("sample", name="renamed"), "modifying a vector store"),
    (lambda c: c.vector_stores.delete("sample"), "deleting a vector store"),
    (lambda c: c.vector_stores.files.list("sample"), "managing a vector store's files"),
    (lambda c: c.vector_stores.files.create("sample", file_id="file-1"), "managing a vector store's files"),
    (lambda c: c.vector_stores.files.delete("file-1", vector_store_id="sample"), "managing a vector store's files"),
    (lambda c: c.vector_stores.file_batches.create("sample", file_ids=["file-1"]), "managing a vector store's file batches"),
    (lambda c: c.files.create(file=("notes.txt", b"hello"), purpose="assistants"), "uploading and managing files"),
    (lambda c: c.files.list(), "uploading and managing files"),
])
def test_write_operations_are_refused_in_openais_error_shape(served: Served, operation: object, what: str) -> None:
    with pytest.raises(openai.APIStatusError) as refused:
        operation(client(served, served.token))  # type: ignore[operator]
    assert refused.value.status_code == 405
    assert refused.value.message.startswith(f"Error code: 405 - {what} is not supported: this host serves its ")
    assert refused.value.code == "unsupported_operation"


def test_any_other_path_under_v1_answers_in_openais_error_shape(served: Served) -> None:
    for method, path in (("GET", "/v1/assistants"), ("POST", "/v1/chat/completions"), ("GET", "/v1/embeddings")):
        response = httpx.request(method, f"{served.url}{path}", timeout=10)
        assert response.status_code in (404, 405)
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
