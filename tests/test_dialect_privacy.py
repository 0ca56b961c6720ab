"""Private bits never change what a dialect tells an anonymous caller (SPEC §3, §10), byte for byte.

Hypothesis builds a library of public bits, then the same library with private bits mixed in
(tagged inside the file, at any position, sharing URLs and words with public bits) and a private
library beside it. Every anonymous answer of RAGFlow's API (datasets, documents, retrieval with
its scores, totals, doc_aggs and highlights) and of the MCP tools must be the same bytes from both
hosts: term statistics, document counts and every total come from visible bits only. So must
every anonymous answer of Dify's External Knowledge API and of OpenAI's vector stores (list,
retrieve, search, and the refusals for the private library's name, which must read as if it did
not exist). Searches are drawn in every mode each door takes: MCP's and Dify's `mode` and
`keyword_weight`, OpenAI's `hybrid_search` weights, RAGFlow's `vector_similarity_weight`. The same
holds under `/p/public/` (the public library's own host) and `/p/access/` (the private library's
folder, which must read as if it did not exist), and for `POST /`'s `libraries`.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from librarian import b64, write_library
from starlette.testclient import TestClient
from word_embedder import WordEmbedder

from host.embedders.service import Embedders
from host.service.settings import Settings
from host.web.app import create_app
from host.web.dialects.ragflow.view import dataset_id

EMBED = WordEmbedder()
VOCABULARY = ["jonah", "fish", "ark", "noah", "lion", "den", "daniel", "sea", "storm", "prophet", "Fish", "LORD"]
RPC_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}

phrases = st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=8).map(" ".join)
bits = st.fixed_dictionaries({"text": phrases, "url": st.integers(0, 3), "title": phrases})
questions = st.lists(st.sampled_from([*VOCABULARY, "absent"]), min_size=1, max_size=4).map(" ".join)


def as_bit(drawn: dict[str, Any], tag: str | None = None) -> dict[str, Any]:
    bit = {"text": drawn["text"], "embedding": b64(EMBED.embed([drawn["text"]])[0]),
           "token_count": len(drawn["text"].split()),
           "info": {"url": f"https://example.com/{drawn['url']}", "title": drawn["title"]}}
    return {**bit, "access_tag": tag} if tag else bit


def library(bits: list[dict[str, Any]]) -> dict[str, Any]:
    return {"version": 1, "embedding_model": EMBED.model, "bits": bits}


def answers(folder: Path, question: str, options: dict[str, Any]) -> dict[str, bytes]:
    """Everything an anonymous caller can ask the two dialects, as bytes."""
    app = create_app(Settings(libraries=folder, watch_interval=0), embedders=Embedders([EMBED]))
    public, private = dataset_id("public"), dataset_id("access/unpublished/secret")
    seen = {}
    ragflow_options = {key: value for key, value in options.items()
                       if key not in ("dify_condition", "openai_filters", "mode", "text_weight")}
    with TestClient(app) as client:
        seen["datasets"] = client.get("/api/v1/datasets").content
        seen["documents"] = client.get(f"/api/v1/datasets/{public}/documents").content
        seen["private documents"] = client.get(f"/api/v1/datasets/{private}/documents").content
        for name, dataset in (("retrieval", public), ("private retrieval", private)):
            seen[name] = client.post("/api/v1/retrieval", json={
                "dataset_ids": [dataset], "question": question, **ragflow_options}).content
        search = {"query": question, "count": options["top_k"] * 3, "count_type": "token", **options["mode"]}
        for tool, arguments in (("search", search), ("libraries", {})):
            call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
            seen[tool] = client.post("/mcp", content=json.dumps(call), headers=RPC_HEADERS).content
        threshold = min(1.0, max(0.0, options["similarity_threshold"]))
        for name, library in (("dify", "public"), ("private dify", "access/unpublished/secret"),
                              ("dify both", "public,access/unpublished/secret")):
            seen[name] = client.post("/dify/retrieval", json={
                "knowledge_id": library, "query": question, "metadata_condition": options.get("dify_condition"),
                "retrieval_setting": {"top_k": options["top_k"], "score_threshold": threshold, **options["mode"]}}).content
        seen["vector stores"] = client.get("/v1/vector_stores").content
        for name, store in (("vector store", "public"), ("private vector store", "access%2Funpublished%2Fsecret")):
            seen[name] = client.get(f"/v1/vector_stores/{store}").content
            seen[f"{name} search"] = client.post(f"/v1/vector_stores/{store}/search", json={
                "query": question, "max_num_results": options["top_k"], "filters": options.get("openai_filters"),
                "ranking_options": {"score_threshold": threshold, "hybrid_search": {
                    "embedding_weight": 1 - options["text_weight"], "text_weight": options["text_weight"]}}}).content
        for prefix in ("/p/public", "/p/access"):
            seen[f"{prefix}/"] = client.post(f"{prefix}/", json={"query": question, "count": 50}).content
            seen[f"{prefix}/libraries"] = client.get(f"{prefix}/libraries").content
            seen[f"{prefix}/api/v1/datasets"] = client.get(f"{prefix}/api/v1/datasets").content
            seen[f"{prefix}/dify/retrieval"] = client.post(f"{prefix}/dify/retrieval", json={
                "knowledge_id": "public", "query": question,
                "retrieval_setting": {"top_k": options["top_k"], "score_threshold": 0, **options["mode"]}}).content
            seen[f"{prefix}/v1/vector_stores"] = client.get(f"{prefix}/v1/vector_stores").content
            call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search", "arguments": search}}
            seen[f"{prefix}/mcp"] = client.post(f"{prefix}/mcp", content=json.dumps(call), headers=RPC_HEADERS).content
        for libraries in ("public", "access", ["public", "access/unpublished/secret"]):
            seen[f"libraries {libraries}"] = client.post("/", json={"query": question, "count": 50,
                                                                      "libraries": libraries}).content
    return seen


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    public=st.lists(bits, min_size=1, max_size=6),
    private=st.lists(st.tuples(bits, st.booleans()), min_size=1, max_size=6),
    question=questions,
    options=st.fixed_dictionaries({
        "vector_similarity_weight": st.sampled_from([0.0, 0.3, 1.0]),
        "similarity_threshold": st.sampled_from([-1.0, 0.0, 0.2]),
        "top_k": st.integers(1, 12),
        "page_size": st.integers(1, 5),
        "highlight": st.booleans(),
        "mode": st.sampled_from([{}, {"mode": "vector"}, {"mode": "keyword"}, {"mode": "hybrid", "keyword_weight": 0.8}]),
        "text_weight": st.sampled_from([0.0, 0.5, 1.0]),
    }),
    data=st.data(),
)
def test_private_bits_never_change_an_anonymous_dialect_answer(
    public: list[dict[str, Any]], private: list[tuple[dict[str, Any], bool]], question: str,
    options: dict[str, Any], data: st.DataObject,
) -> None:
    inline = [as_bit(drawn, "unpublished") for drawn, in_file in private if in_file]
    elsewhere = [as_bit(drawn) for drawn, in_file in private if not in_file]
    slots = data.draw(st.permutations([True] * len(public) + [False] * len(inline)), label="where private bits sit")
    public_bits, inline_bits = [as_bit(drawn) for drawn in public], list(inline)
    mixed = [public_bits.pop(0) if is_public else inline_bits.pop(0) for is_public in slots]
    if data.draw(st.booleans(), label="a metadata condition"):
        word = data.draw(st.sampled_from(VOCABULARY))
        options = {**options, "metadata_condition": {"conditions": [
            {"name": "title", "comparison_operator": "contains", "value": word}]},
            "dify_condition": {"logical_operator": "or", "conditions": [
                {"name": "title", "comparison_operator": "contains", "value": word},
                {"name": "url", "comparison_operator": "end with", "value": "/1"}]},
            "openai_filters": {"type": "or", "filters": [{"type": "gte", "key": "title", "value": word},
                                                          {"type": "eq", "key": "url", "value": "https://example.com/2"}]}}

    with tempfile.TemporaryDirectory() as scratch:
        alone, among = Path(scratch) / "alone", Path(scratch) / "among"
        write_library(alone / "public.json", library([as_bit(drawn) for drawn in public]))
        write_library(among / "public.json", library(mixed))
        if elsewhere:
            write_library(among / "access" / "unpublished" / "secret.json", library(elsewhere))

        expected, got = answers(alone, question, options), answers(among, question, options)

    for name in expected:
        assert got[name] == expected[name], name
    assert json.loads(expected["retrieval"])["code"] == 0
    assert json.loads(expected["private retrieval"])["code"] == 102  # not there, and not revealed
    assert "records" in json.loads(expected["dify"])
    assert json.loads(expected["private dify"])["error_code"] == json.loads(expected["dify both"])["error_code"] == 2001
    assert json.loads(expected["vector store search"])["object"] == "vector_store.search_results.page"
    assert json.loads(expected["private vector store search"])["error"]["message"].startswith("No vector store found")
    assert json.loads(expected["/p/public/libraries"])["libraries"][0]["name"] == "public"
    assert json.loads(expected["/p/access/libraries"]) == {
        "error": "there is no library or folder of libraries named 'access' here"}
    assert json.loads(expected["libraries access"]) == json.loads(expected["/p/access/libraries"])
