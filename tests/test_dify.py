"""Dify's External Knowledge API at POST /dify/retrieval, in-process: the documented request and answer,
field by field, its error codes, private bits only with a token, and the same core as POST /; and a
crash under /dify/ or /v1/ answered as a logged 500 in that dialect's shape."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from dialect_hosts import EMBED, OPAQUE_TOKEN, assert_no_traceback, bearer, connect, counter, signed_token, write_host
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from host.web.dialects.dify import as_dify_error
from host.web.dialects.openai_errors import as_openai_error
from host.web.middleware import DialectErrors

pytestmark = pytest.mark.anyio
JONAH = "a great fish swallowed Jonah"


async def post_slash(client: httpx.AsyncClient, **arguments: Any) -> dict[str, Any]:
    """POST /'s answer to the same question, as a list of bits."""
    response = await client.post("/", json={"query": JONAH, "query_embedding_model": EMBED.model, "count_type": "bit",
                                            **arguments})
    answer: dict[str, Any] = response.json()
    return answer


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("dify")
    write_host(root)
    return root


@pytest.fixture
async def client(root: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with connect(root) as connected:
        yield connected


def request(knowledge_id: str = "stories", query: str = JONAH, top_k: int = 3, score_threshold: float = 0.0,
            **extra: Any) -> dict[str, Any]:
    return {"knowledge_id": knowledge_id, "query": query,
            "retrieval_setting": {"top_k": top_k, "score_threshold": score_threshold}, **extra}


async def records(client: httpx.AsyncClient, body: dict[str, Any], token: str | None = None) -> list[dict[str, Any]]:
    response = await client.post("/dify/retrieval", json=body, headers=bearer(token) if token else {})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    answer = response.json()
    assert list(answer) == ["records"]
    found: list[dict[str, Any]] = answer["records"]
    return found


async def refused(client: httpx.AsyncClient, body: Any, status: int, code: int, headers: dict[str, str] | None = None,
                  path: str = "/dify/retrieval", method: str = "POST") -> str:
    response = await client.request(method, path, json=body, headers=headers or {})
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    answer = response.json()
    assert list(answer) == ["error_code", "error_msg"] and answer["error_code"] == code
    assert isinstance(answer["error_msg"], str) and answer["error_msg"] and "\n" not in answer["error_msg"]
    assert_no_traceback(response)
    message: str = answer["error_msg"]
    return message


# ---- the documented request and answer ------------------------------------------------------------


async def test_the_documented_example_request_gets_the_documented_answer_shape(client: httpx.AsyncClient) -> None:
    # Dify's example request, with our knowledge id: {"knowledge_id", "query", "retrieval_setting": {top_k, score_threshold}}
    found = await records(client, {"knowledge_id": "stories", "query": "What is Jonah's fish?",
                                   "retrieval_setting": {"top_k": 2, "score_threshold": 0.3}})

    assert 0 < len(found) <= 2
    for record in found:
        assert list(record) == ["content", "score", "title", "metadata"]
        assert isinstance(record["content"], str) and record["content"]
        assert isinstance(record["score"], float) and 0.3 <= record["score"] <= 1
        assert isinstance(record["title"], str) and record["title"].startswith("Jonah")
        assert isinstance(record["metadata"], dict)  # an object, never null
        assert set(record["metadata"]) == {"url", "title", "library", "bit_id", "token_count"}
        assert record["metadata"]["library"] == "stories" and record["metadata"]["url"] == "https://example.com/jonah"


async def test_scores_are_post_slash_rank_scores_best_first_within_top_k(client: httpx.AsyncClient) -> None:
    found = await records(client, request(top_k=4))
    answer = await post_slash(client, count=4)  # a text query: hybrid, as Dify's door

    assert answer["sort"] == "manual"
    assert [record["metadata"]["bit_id"] for record in found] == [bit["id"] for bit in answer["bits"]]
    assert [record["score"] for record in found] == [min(1.0, max(0.0, bit["score"])) for bit in answer["bits"]]
    assert [record["content"] for record in found] == [bit["text"] for bit in answer["bits"]]
    assert [record["metadata"]["token_count"] for record in found] == [bit["token_count"] for bit in answer["bits"]]
    assert found[0]["content"] == "Jonah was swallowed by a great fish"


async def test_score_threshold_keeps_the_passages_whose_rank_score_reaches_it(client: httpx.AsyncClient) -> None:
    every = await records(client, request(top_k=10))
    threshold = every[1]["score"]
    kept = await records(client, request(top_k=10, score_threshold=threshold))

    assert kept == [record for record in every if record["score"] >= threshold]  # a filter: nothing moves
    assert len(kept) >= 2 and len(kept) < len(every)
    # Scores mean the same in every question: above the best one's, nothing is kept.
    assert every[0]["content"] == "Jonah was swallowed by a great fish" and every[0]["score"] < 1
    assert await records(client, request(top_k=10, score_threshold=every[0]["score"] + 1e-9)) == []
    assert await records(client, request(top_k=10, score_threshold=1)) == []


async def test_a_question_of_stop_words_is_ranked_by_meaning_and_scored_by_similarity(client: httpx.AsyncClient) -> None:
    found = await records(client, request(query="of the and to it is", top_k=4))
    answer = await post_slash(client, query="of the and to it is", count=4)

    assert answer["details"]["notes"] == ["the query has no keyword (only stop words or punctuation): "
                                          "ranked by meaning alone"]
    assert [record["score"] for record in found] == [min(1.0, max(0.0, bit["similarity"])) for bit in answer["bits"]]
    threshold = found[1]["score"]
    assert await records(client, request(query="of the and to it is", top_k=4, score_threshold=threshold)) == \
        [record for record in found if record["score"] >= threshold]


@pytest.mark.parametrize("setting", [{"mode": "vector"}, {"mode": "keyword"}, {"mode": "hybrid", "keyword_weight": 0.8},
                                     {"keyword_weight": 0.2}])
async def test_the_hosts_own_mode_and_keyword_weight_rank_as_post_slash_does(client: httpx.AsyncClient,
                                                                           setting: dict[str, Any]) -> None:
    body = request(top_k=4)
    body["retrieval_setting"].update(setting)
    found = await records(client, body)
    answer = await post_slash(client, count=4, **setting)

    assert [record["metadata"]["bit_id"] for record in found] == [bit["id"] for bit in answer["bits"]]
    if setting.get("mode") == "vector":
        assert [record["score"] for record in found] == [min(1.0, max(0.0, bit["similarity"])) for bit in answer["bits"]]
    elif setting.get("mode") == "keyword":  # min(1, BM25 / |w|), as POST / reports it
        assert [record["score"] for record in found] == [bit["score"] for bit in answer["bits"]]
        assert 0 < found[0]["score"] < 1 and len(found) == 2  # only the bits holding a word of the question
    else:
        assert [record["score"] for record in found] == [min(1.0, max(0.0, bit["score"])) for bit in answer["bits"]]


async def test_a_score_threshold_in_keyword_mode_keeps_the_same_head_of_the_list(client: httpx.AsyncClient) -> None:
    every = request(top_k=10)
    every["retrieval_setting"]["mode"] = "keyword"
    ranked = await records(client, every)
    every["retrieval_setting"]["score_threshold"] = ranked[1]["score"]

    assert await records(client, every) == [record for record in ranked if record["score"] >= ranked[1]["score"]]


async def test_no_match_is_an_empty_list_of_records(client: httpx.AsyncClient) -> None:
    assert await records(client, request(query="   ")) == []
    condition = {"conditions": [{"name": "title", "comparison_operator": "is", "value": "Exodus"}]}
    assert await records(client, request(metadata_condition=condition)) == []


async def test_metadata_condition_narrows_through_the_constraint_engine(client: httpx.AsyncClient) -> None:
    condition = {"logical_operator": "or", "conditions": [
        {"name": "title", "comparison_operator": "start with", "value": "genesis"},
        {"name": "url", "comparison_operator": "end with", "value": "/daniel"}]}
    found = await records(client, request(top_k=10, metadata_condition=condition))
    constrained = await post_slash(client, count=10, constraint="title:genesis* OR url:daniel")

    assert sorted(record["title"] for record in found) == ["Daniel 6", "Genesis 6"]
    assert [record["metadata"]["bit_id"] for record in found] == [bit["id"] for bit in constrained["bits"]]


async def test_a_null_metadata_condition_as_dify_dumps_it_restricts_nothing(client: httpx.AsyncClient) -> None:
    plain = await records(client, request(top_k=10))
    dumped = await records(client, request(top_k=10, metadata_condition={"logical_operator": "and", "conditions": None}))
    assert dumped == plain


async def test_several_knowledge_ids_separated_by_commas_search_together(root: Path, client: httpx.AsyncClient) -> None:
    token = signed_token(root)
    found = await records(client, request(" stories , access/team/drafts,stories", top_k=10), token)

    assert {record["metadata"]["library"] for record in found} == {"stories", "access/team/drafts"}
    assert [record["score"] for record in found] == sorted((record["score"] for record in found), reverse=True)


async def test_private_bits_come_only_with_a_token_that_grants_their_tag(root: Path, client: httpx.AsyncClient) -> None:
    anonymous = await records(client, request(top_k=10))
    for token in (signed_token(root), OPAQUE_TOKEN):
        holder = await records(client, request(top_k=10), token)
        assert "The great fish of the secret sea" in [record["content"] for record in holder]
        assert len(holder) == len(anonymous) + 1
    assert "The great fish of the secret sea" not in [record["content"] for record in anonymous]
    assert await records(client, request(top_k=10), signed_token(root, ("other",))) == anonymous
    assert await records(client, request(top_k=10), "an-unknown-opaque-key") == anonymous


async def test_a_query_counts_as_a_dify_query_in_the_metrics(client: httpx.AsyncClient) -> None:
    await records(client, request())
    await records(client, request())
    metrics = (await client.get("/metrics")).text
    assert counter(metrics, 'polymath_queries_total{format="dify"}') == 2


# ---- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("header", ["Basic YWxpY2U6c2VjcmV0", "Bearer", "Bearer    ", "sk_alice_team_0123456789"])
async def test_an_authorization_header_that_is_not_bearer_is_1001(client: httpx.AsyncClient, header: str) -> None:
    message = await refused(client, request(), 401, 1001, {"Authorization": header})
    assert "Bearer <api-key>" in message


async def test_a_token_that_fails_verification_is_1002_with_the_reason(client: httpx.AsyncClient) -> None:
    response = await client.post("/dify/retrieval", json=request(), headers=bearer("not.a-valid.jwt"))
    assert response.status_code == 401 and response.json()["error_code"] == 1002
    assert response.json()["error_msg"].startswith("Authorization failed: the access token was refused")
    assert response.headers["www-authenticate"].startswith('Bearer error="invalid_token"')


async def test_an_unknown_or_private_knowledge_id_is_2001_alike(root: Path, client: httpx.AsyncClient) -> None:
    unknown = await refused(client, request("access/team/nothing"), 404, 2001)
    private = await refused(client, request("access/team/drafts"), 404, 2001)
    assert unknown.replace("nothing", "drafts") == private
    assert "there is no library or folder of libraries named 'access/team/drafts' here" in private
    await refused(client, request("stories,access/team/drafts"), 404, 2001)
    assert await records(client, request("access/team/drafts"), signed_token(root))


@pytest.mark.parametrize(("body", "message"), [
    ([], "the body must be a JSON object"),
    ({"query": JONAH, "retrieval_setting": {"top_k": 1, "score_threshold": 0}}, "knowledge_id is required"),
    (request(knowledge_id=" , "), "knowledge_id is required"),
    ({"knowledge_id": "stories", "retrieval_setting": {"top_k": 1, "score_threshold": 0}}, "query is required"),
    (request(query="x" * 10_001), "query is 10,001 characters long"),
    ({"knowledge_id": "stories", "query": JONAH}, "retrieval_setting is required"),
    (request(top_k=0), "retrieval_setting.top_k must be an integer from 1 to 100000, got 0"),
    ({**request(), "retrieval_setting": {"top_k": "3", "score_threshold": 0}}, "top_k must be an integer"),
    ({**request(), "retrieval_setting": {"top_k": 3}}, "retrieval_setting.score_threshold must be a number from 0 to 1"),
    (request(score_threshold=1.5), "score_threshold must be a number from 0 to 1 (0 keeps every passage), got 1.5"),
    ({**request(), "retrieval_setting": {"top_k": 3, "score_threshold": 0, "mode": "fuzzy"}},
     "retrieval_setting.mode must be one of vector, keyword, hybrid, got 'fuzzy'"),
    ({**request(), "retrieval_setting": {"top_k": 3, "score_threshold": 0, "keyword_weight": 2}},
     "retrieval_setting.keyword_weight must be a number from 0 to 1, got 2"),
    ({**request(), "retrieval_setting": {"top_k": 3, "score_threshold": 0, "mode": "vector", "keyword_weight": 0.5}},
     "it applies only to mode hybrid"),
    (request(metadata_condition={"conditions": [{"name": "author", "comparison_operator": "is", "value": "x"}]}),
     "unknown field 'author' in metadata_condition.conditions[0].name"),
    (request(knowledge_id="stories,other"), "these libraries use different embedding models"),
])
async def test_a_bad_request_is_a_400_naming_the_field(client: httpx.AsyncClient, body: Any, message: str) -> None:
    assert message in await refused(client, body, 400, 400)


async def test_malformed_json_is_a_400(client: httpx.AsyncClient) -> None:
    response = await client.post("/dify/retrieval", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error_code"] == 400
    assert response.json()["error_msg"].startswith("the body is")


async def test_errors_made_elsewhere_under_dify_are_in_difys_shape(root: Path) -> None:
    async with connect(root, max_body_bytes=1024, rate_limit=0.001, rate_burst=3) as client:
        assert "not allowed" in await refused(client, None, 405, 405, method="GET")
        assert "nothing at this path" in await refused(client, request(), 404, 404, path="/dify/other")
        await refused(client, request(query="x" * 2000), 413, 413)
        response = await client.post("/dify/retrieval", json=request())
        assert response.status_code == 429 and response.json()["error_code"] == 429
        assert "retry-after" in response.headers


@pytest.mark.parametrize(("prefix", "rewrite", "message_of"), [
    ("/dify/", as_dify_error, lambda body: body["error_msg"]),
    ("/v1/", as_openai_error, lambda body: body["error"]["message"]),
])
async def test_a_crash_under_a_dialects_prefix_is_a_logged_500_in_its_shape(
    caplog: pytest.LogCaptureFixture, prefix: str, rewrite: Any, message_of: Any,
) -> None:
    async def crash(request: Request) -> Response:
        raise RuntimeError("a bug")

    app = Starlette(routes=[Route(f"{prefix}crash", crash)],
                    middleware=[Middleware(DialectErrors, prefix=prefix, rewrite=rewrite)])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        response = await client.get(f"{prefix}crash")

    assert response.status_code == 500 and response.headers["content-type"] == "application/json"
    assert message_of(response.json()) == "the host failed to answer this request; the error is logged"
    assert_no_traceback(response)
    assert "a bug" in caplog.text
