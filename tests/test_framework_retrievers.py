"""The LangChain and LlamaIndex retrievers of polymath-host-client, with the real langchain-core and
llama-index-core (pinned in the test extra), against a real host process: the frameworks' own
Document and NodeWithScore types with score and metadata, private passages only with a token, the
async paths, and a host that is down raising a clear exception. Nothing here reaches beyond this
machine: a guard refuses any connection or name lookup off the loopback (the frameworks must not
download tokenizers or NLTK data), and a test shows the guard bites."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever as LangChainRetriever
from llama_index.core.retrievers import BaseRetriever as LlamaIndexRetriever
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode
from polymath_host_client import HostUnreachable, Mode, PolymathClient, TokenRefused
from polymath_host_client.langchain import PolymathRetriever as LangChainPolymath
from polymath_host_client.llama_index import PolymathRetriever as LlamaIndexPolymath
from sample_host import DANIEL, DRAFTS, JONAH, Served, serve_sample

from host.service.harness import free_port

LOOPBACK = ("127.", "::1", "localhost")


class OffTheMachine(AssertionError):
    """Something tried to reach beyond this machine."""


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any connection or name lookup off the loopback fails the test."""
    connect, lookup = socket.socket.connect, socket.getaddrinfo

    def guarded_connect(self: socket.socket, address: Any) -> Any:
        if isinstance(address, tuple) and not str(address[0]).startswith(LOOPBACK):
            raise OffTheMachine(f"a connection to {address}")
        return connect(self, address)

    def guarded_lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None and not str(host).startswith(LOOPBACK):
            raise OffTheMachine(f"a name lookup of {host}")
        return lookup(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_lookup)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve_sample(tmp_path_factory.mktemp("retrievers")) as served:
        yield served


def test_the_guard_refuses_a_connection_off_the_machine() -> None:
    with pytest.raises(OffTheMachine), PolymathClient("http://polymath.invalid") as host:
        host.libraries()


# ---- LangChain --------------------------------------------------------------------------------------


def test_langchain_retriever_returns_documents_with_score_and_metadata(served: Served) -> None:
    retriever = LangChainPolymath(url=served.url)
    documents = retriever.invoke(JONAH)
    with PolymathClient(served.url) as host:
        passages = host.retrieve(JONAH, k=4)

    assert isinstance(retriever, LangChainRetriever) and retriever.k == 4 and retriever.token is None
    assert len(documents) == 4 and all(isinstance(document, Document) for document in documents)
    assert [document.page_content for document in documents] == [passage.text for passage in passages]
    assert [document.id for document in documents] == [passage.bit_id for passage in passages]
    first = documents[0].metadata
    assert set(first) == {"url", "title", "library", "bit_id", "score", "token_count"}
    assert (first["library"], first["bit_id"], first["score"]) == ("sample", passages[0].bit_id, passages[0].score)
    assert first["title"].startswith("Jonah") and first["url"].startswith("https://www.biblegateway.com/")
    assert [document.metadata["score"] for document in documents] == sorted(
        (document.metadata["score"] for document in documents), reverse=True)


@pytest.mark.parametrize(("mode", "question", "first"), [("keyword", "Methuselah", "Genesis 5:"),
                                                      ("hybrid", "the son of Amittai", "Jonah 1:"),
                                                      ("vector", JONAH, "Jonah ")])
def test_both_retrievers_rank_in_the_mode_asked_as_the_client_does(served: Served, mode: Mode, question: str,
                                                                   first: str) -> None:
    documents = LangChainPolymath(url=served.url, k=3, mode=mode).invoke(question)
    nodes = LlamaIndexPolymath(url=served.url, similarity_top_k=3, mode=mode).retrieve(question)
    with PolymathClient(served.url) as host:
        passages = host.retrieve(question, k=3, mode=mode)

    assert [document.id for document in documents] == [node.node.node_id for node in nodes] == [
        passage.bit_id for passage in passages]
    assert [node.score for node in nodes] == [document.metadata["score"] for document in documents] == [
        passage.score for passage in passages]
    assert documents[0].metadata["title"].startswith(first)


def test_both_retrievers_pass_keyword_weight_and_check_it(served: Served) -> None:
    question = "the son of Amittai"
    documents = LangChainPolymath(url=served.url, k=3, keyword_weight=0).invoke(question)
    nodes = LlamaIndexPolymath(url=served.url, similarity_top_k=3, keyword_weight=0).retrieve(question)
    with PolymathClient(served.url) as host:
        by_meaning = host.retrieve(question, k=3, mode="vector")

    assert [document.id for document in documents] == [node.node.node_id for node in nodes] == [
        passage.bit_id for passage in by_meaning]
    with pytest.raises(ValueError, match="keyword_weight"):
        LangChainPolymath(url=served.url, keyword_weight=1.5)
    with pytest.raises(ValueError, match="keyword_weight must be from 0 to 1"):
        LlamaIndexPolymath(url=served.url, keyword_weight=1.5)
    with pytest.raises(ValueError, match="mode must be one of hybrid, vector, keyword"):
        LlamaIndexPolymath(url=served.url, mode="fuzzy")  # type: ignore[arg-type]


def test_langchain_retriever_sees_private_passages_only_with_the_token(served: Served) -> None:
    holder = LangChainPolymath(url=served.url, token=served.token, k=3).invoke(DANIEL)
    anonymous = LangChainPolymath(url=served.url, k=3).invoke(DANIEL)
    only_drafts = LangChainPolymath(url=served.url, token=served.token, k=2, libraries=[DRAFTS]).invoke(DANIEL)

    assert holder[0].metadata["library"] == DRAFTS and "Daniel" in holder[0].metadata["title"]
    assert {document.metadata["library"] for document in anonymous} == {"sample"}
    assert [document.metadata["library"] for document in only_drafts] == [DRAFTS, DRAFTS]
    assert served.token not in repr(LangChainPolymath(url=served.url, token=served.token))


@pytest.mark.anyio
async def test_langchain_retriever_async_matches_sync(served: Served) -> None:
    retriever = LangChainPolymath(url=served.url, token=served.token, k=3, score_threshold=0.2)
    documents = await retriever.ainvoke(DANIEL)
    assert documents == retriever.invoke(DANIEL)
    assert all(document.metadata["score"] >= 0.2 for document in documents)


def test_langchain_retriever_raises_clearly_for_a_refused_token_or_a_host_that_is_down(served: Served) -> None:
    with pytest.raises(TokenRefused, match="the access token was refused"):
        LangChainPolymath(url=served.url, token="not.a-valid.jwt").invoke(JONAH)
    with pytest.raises(HostUnreachable, match="could not reach the host"):
        LangChainPolymath(url=f"http://127.0.0.1:{free_port()}").invoke(JONAH)


@pytest.mark.anyio
async def test_langchain_retriever_async_raises_for_a_host_that_is_down() -> None:
    with pytest.raises(HostUnreachable, match="could not reach the host"):
        await LangChainPolymath(url=f"http://127.0.0.1:{free_port()}").ainvoke(JONAH)


# ---- LlamaIndex -------------------------------------------------------------------------------------


def test_llama_index_retriever_returns_nodes_with_score_and_metadata(served: Served) -> None:
    retriever = LlamaIndexPolymath(url=served.url)
    nodes = retriever.retrieve(JONAH)
    with PolymathClient(served.url) as host:
        passages = host.retrieve(JONAH, k=4)

    assert isinstance(retriever, LlamaIndexRetriever) and retriever.similarity_top_k == 4
    assert len(nodes) == 4 and all(isinstance(node, NodeWithScore) and isinstance(node.node, TextNode) for node in nodes)
    assert [node.score for node in nodes] == [passage.score for passage in passages]
    assert [node.node.node_id for node in nodes] == [passage.bit_id for passage in passages]
    assert [node.node.get_content() for node in nodes] == [passage.text for passage in passages]
    metadata = nodes[0].node.metadata
    assert (metadata["library"], metadata["bit_id"]) == ("sample", passages[0].bit_id)
    assert metadata["title"].startswith("Jonah") and metadata["url"] == passages[0].url
    seen_by_a_model = nodes[0].node.get_content(metadata_mode=MetadataMode.LLM)
    assert "title: Jonah" in seen_by_a_model and "bit_id" not in seen_by_a_model


def test_llama_index_retriever_sees_private_passages_only_with_the_token(served: Served) -> None:
    holder = LlamaIndexPolymath(url=served.url, token=served.token, similarity_top_k=3).retrieve(DANIEL)
    anonymous = LlamaIndexPolymath(url=served.url, similarity_top_k=3).retrieve(DANIEL)

    assert holder[0].node.metadata["library"] == DRAFTS
    assert {node.node.metadata["library"] for node in anonymous} == {"sample"}
    assert served.token not in repr(LlamaIndexPolymath(url=served.url, token=served.token))


@pytest.mark.anyio
async def test_llama_index_retriever_async_matches_sync(served: Served) -> None:
    retriever = LlamaIndexPolymath(url=served.url, token=served.token, similarity_top_k=3)
    nodes = await retriever.aretrieve(DANIEL)
    assert [(node.node.node_id, node.score) for node in nodes] == [
        (node.node.node_id, node.score) for node in retriever.retrieve(DANIEL)]


def test_llama_index_retriever_raises_clearly_for_a_refused_token_or_a_host_that_is_down(served: Served) -> None:
    with pytest.raises(TokenRefused, match="the access token was refused"):
        LlamaIndexPolymath(url=served.url, token="not.a-valid.jwt").retrieve(JONAH)
    with pytest.raises(HostUnreachable, match="could not reach the host"):
        LlamaIndexPolymath(url=f"http://127.0.0.1:{free_port()}").retrieve(JONAH)
    with pytest.raises(ValueError, match="similarity_top_k must be at least 1"):
        LlamaIndexPolymath(url=served.url, similarity_top_k=0)


@pytest.mark.anyio
async def test_llama_index_retriever_async_raises_for_a_host_that_is_down() -> None:
    with pytest.raises(HostUnreachable, match="could not reach the host"):
        await LlamaIndexPolymath(url=f"http://127.0.0.1:{free_port()}").aretrieve(JONAH)
