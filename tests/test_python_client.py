"""polymath-host-client (clients/python) against a real host process: the host's answers as
dataclasses, its refusals as exceptions carrying its message, the same token rules as the host,
sync and async, and a host that is down or silent raising at once or at the timeout, never hanging."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pytest
from polymath_host_client import (
    Answer,
    AsyncPolymathClient,
    Bit,
    HostError,
    HostTimeout,
    HostUnreachable,
    Library,
    Mode,
    Passage,
    PolymathClient,
    TokenRefused,
)
from sample_host import DANIEL, DRAFTS, JONAH, Served, serve_sample

from host.service.harness import free_port

MODEL = "sentence-transformers:all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve_sample(tmp_path_factory.mktemp("python-client")) as served:
        yield served


@pytest.fixture
def silent_host() -> Iterator[str]:
    """A socket that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


# ---- answers as dataclasses ------------------------------------------------------------------------


def test_libraries_are_those_the_token_may_see(served: Served) -> None:
    with PolymathClient(served.url) as anonymous, PolymathClient(served.url, token=served.token) as holder:
        assert anonymous.libraries() == [Library("sample", "/libraries/sample.json", MODEL, 384, 386)]
        assert [(library.name, library.bits) for library in holder.libraries()] == [(DRAFTS, 11), ("sample", 386)]


def test_query_is_post_slashs_answer_as_dataclasses(served: Served) -> None:
    with PolymathClient(served.url) as host:
        answer = host.query(JONAH, count=3, count_type="bit")
    raw = httpx.post(f"{served.url}/", json={"query": JONAH, "count": 3, "count_type": "bit"}, timeout=30).json()

    assert isinstance(answer, Answer) and answer.embedding_model == MODEL and answer.message is None
    assert answer.sort == "manual" and answer.notes == ()  # hybrid, the host's default for text
    assert all(isinstance(bit, Bit) for bit in answer.bits)
    assert [(bit.id, bit.text, bit.token_count, bit.similarity, bit.score) for bit in answer.bits] == [
        (bit["id"], bit["text"], bit["token_count"], bit["similarity"], bit["score"]) for bit in raw["bits"]]
    assert [(bit.url, bit.title) for bit in answer.bits] == [(b["info"]["url"], b["info"]["title"]) for b in raw["bits"]]
    assert "Jonah" in str(answer.bits[0].title)


def test_a_token_budget_and_a_constraint_go_through(served: Served) -> None:
    with PolymathClient(served.url) as host:
        budget = host.query(JONAH, count=300)
        jonah = host.query(JONAH, count=5, count_type="bit", constraint="title:jonah")
    assert sum(bit.token_count for bit in budget.bits) <= 300
    assert len(jonah.bits) == 5 and all("Jonah" in str(bit.title) for bit in jonah.bits)


@pytest.mark.parametrize(("mode", "question", "first"), [
    ("keyword", "Methuselah", "Genesis 5:"), ("hybrid", "the son of Amittai", "Jonah 1:"),
    (None, "the son of Amittai", "Jonah 1:"), ("vector", JONAH, "Jonah ")])
def test_query_and_retrieve_rank_in_each_mode_as_post_slash_does(served: Served, mode: Mode | None, question: str,
                                                                 first: str) -> None:
    with PolymathClient(served.url) as host:
        answer = host.query(question, count=3, count_type="bit", mode=mode)
        passages = host.retrieve(question, k=3, mode=mode)
    raw = httpx.post(f"{served.url}/", json={"query": question, "count": 3, "count_type": "bit",
                                             **({"mode": mode} if mode else {})}, timeout=30).json()

    assert [bit.id for bit in answer.bits] == [passage.bit_id for passage in passages] == [b["id"] for b in raw["bits"]]
    assert str(answer.bits[0].title).startswith(first) and passages[0].title.startswith(first)
    assert answer.sort == ("similarity" if mode == "vector" else "manual")
    assert [bit.score for bit in answer.bits] == [bit.get("score") for bit in raw["bits"]]
    assert [bit.similarity for bit in answer.bits] == [bit.get("similarity") for bit in raw["bits"]]
    first = raw["bits"][0]
    assert passages[0].score == min(1.0, first["score"] if "score" in first else first["similarity"])


def test_keyword_weight_and_notes_come_through(served: Served) -> None:
    with PolymathClient(served.url) as host:
        by_meaning = host.query("the son of Amittai", count=3, count_type="bit", keyword_weight=0)
        passages = host.retrieve("the son of Amittai", k=3, keyword_weight=0)
        stop_words = host.query("of the and to it is", count=1, count_type="bit", mode="keyword")
        with pytest.raises(HostError, match="keyword_weight must be between 0 and 1, got 2"):
            host.query("the son of Amittai", keyword_weight=2)
        with pytest.raises(HostError, match=r"retrieval_setting\.mode must be one of vector, keyword, hybrid"):
            host.retrieve("the son of Amittai", mode="fuzzy")  # type: ignore[arg-type]
    vector = httpx.post(f"{served.url}/", json={"query": "the son of Amittai", "count": 3, "count_type": "bit",
                                                "mode": "vector"}, timeout=30).json()

    assert [bit.id for bit in by_meaning.bits] == [passage.bit_id for passage in passages] == [
        bit["id"] for bit in vector["bits"]]
    assert stop_words.bits == [] and stop_words.notes == (
        "the query has no keyword (only stop words or punctuation): nothing matches it",)


def test_retrieve_gives_passages_with_library_and_a_score_from_0_to_1(served: Served) -> None:
    with PolymathClient(served.url) as host:
        passages = host.retrieve(JONAH, k=4)
    bits = httpx.post(f"{served.url}/", json={"query": JONAH, "count": 4, "count_type": "bit"},
                      timeout=30).json()["bits"]  # hybrid, as retrieve

    assert len(passages) == 4 and all(isinstance(passage, Passage) for passage in passages)
    assert [passage.bit_id for passage in passages] == [bit["id"] for bit in bits]
    assert [passage.score for passage in passages] == [min(1.0, bit["score"]) for bit in bits]
    assert all(passage.library == "sample" and 0 <= passage.score <= 1 for passage in passages)
    assert passages[0].title.startswith("Jonah") and passages[0].url.startswith("https://www.biblegateway.com/")


def test_private_passages_come_only_with_the_token(served: Served) -> None:
    with PolymathClient(served.url) as anonymous, PolymathClient(served.url, token=served.token) as holder:
        everything = holder.retrieve(DANIEL, k=5)
        public = anonymous.retrieve(DANIEL, k=5)
        assert everything[0].library == DRAFTS and "Daniel" in everything[0].title
        assert all(passage.library == "sample" for passage in public)
        with pytest.raises(HostError, match=f"there is no library or folder of libraries named '{DRAFTS}'") as refused:
            anonymous.retrieve(DANIEL, libraries=[DRAFTS])
        assert refused.value.status == 404
        assert [passage.library for passage in holder.retrieve(DANIEL, libraries=[DRAFTS], k=2)] == [DRAFTS] * 2


def test_an_empty_token_is_no_token(served: Served) -> None:
    with PolymathClient(served.url, token="") as host:
        assert [library.name for library in host.libraries()] == ["sample"]


# ---- refusals --------------------------------------------------------------------------------------


def test_a_refused_token_raises_token_refused_with_the_hosts_reason(served: Served) -> None:
    with PolymathClient(served.url, token="not.a-valid.jwt") as host:
        for call in (host.libraries, lambda: host.query(JONAH), lambda: host.retrieve(JONAH, libraries=["sample"])):
            with pytest.raises(TokenRefused, match="the access token was refused") as refused:
                call()
            assert refused.value.status == 401
            assert str(refused.value).startswith("the host answered 401: ")


def test_a_bad_argument_raises_host_error_with_the_hosts_message(served: Served) -> None:
    with PolymathClient(served.url) as host, pytest.raises(HostError, match="count_type must be 'token' or 'bit'"):
        host.query(JONAH, count_type="pages")  # type: ignore[arg-type]


def test_a_host_that_is_down_raises_host_unreachable_at_once() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with PolymathClient(url) as host, pytest.raises(HostUnreachable, match=f"could not reach the host at {url}"):
        host.libraries()


def test_a_host_that_never_answers_raises_host_timeout(silent_host: str) -> None:
    with PolymathClient(silent_host, timeout=0.5) as host, pytest.raises(HostTimeout, match=r"did not answer within 0\.5 s"):
        host.retrieve(JONAH, libraries=["sample"])


def test_urls_and_tokens_are_checked_before_any_request() -> None:
    with pytest.raises(ValueError, match="never in a URL"):
        PolymathClient("http://127.0.0.1:8080/?access_token=secret")
    with pytest.raises(ValueError, match="http:// or https://"):
        PolymathClient("127.0.0.1:8080")
    with pytest.raises(ValueError, match="one word"):
        PolymathClient("http://127.0.0.1:8080", token="two words")
    with PolymathClient("http://127.0.0.1:8080/", token="secret-token") as host:
        assert repr(host) == "PolymathClient('http://127.0.0.1:8080')" and "secret" not in repr(host)


# ---- async -----------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_async_client_answers_as_the_sync_one(served: Served) -> None:
    async with AsyncPolymathClient(served.url, token=served.token) as host:
        libraries = await host.libraries()
        answer = await host.query(JONAH, count=3, count_type="bit")
        passages = await host.retrieve(DANIEL, k=3)
    with PolymathClient(served.url, token=served.token) as sync:
        assert libraries == sync.libraries()
        assert answer == sync.query(JONAH, count=3, count_type="bit")
        assert passages == sync.retrieve(DANIEL, k=3)


@pytest.mark.anyio
async def test_the_async_client_raises_the_same_errors(served: Served, silent_host: str) -> None:
    async with AsyncPolymathClient(served.url, token="not.a-valid.jwt") as host:
        with pytest.raises(TokenRefused, match="the access token was refused"):
            await host.retrieve(JONAH)
    async with AsyncPolymathClient(f"http://127.0.0.1:{free_port()}") as host:
        with pytest.raises(HostUnreachable, match="could not reach the host"):
            await host.libraries()
    async with AsyncPolymathClient(silent_host, timeout=0.5) as host:
        with pytest.raises(HostTimeout):
            await host.query(JONAH)
