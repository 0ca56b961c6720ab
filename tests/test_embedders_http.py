"""The OpenAI-compatible HTTP embedder against a real local server that speaks /v1/embeddings."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator

import numpy as np
import pytest
from embedding_service import EmbeddingService, Reply, running_service, unit_vector

from host.embedders import Embedder, EmbedderError, EmbedderTimeout
from host.embedders.openai_http import OpenAIEmbedder, endpoint_of, key_from_environment

KEY = "sk-test-0123456789-SECRET"


@pytest.fixture
def service() -> Iterator[EmbeddingService]:
    with running_service(dimension=16) as running:
        yield running


def embedder_for(service: EmbeddingService, **options: object) -> OpenAIEmbedder:
    settings: dict[str, object] = {"key": KEY, "timeout": 2.0, "backoff": 0.01}
    settings.update(options)
    return OpenAIEmbedder(service.url, "text-embedding-test", **settings)  # type: ignore[arg-type]


def test_texts_become_unit_vectors_of_the_services_answer(service: EmbeddingService) -> None:
    embedder = embedder_for(service)
    vectors = embedder.embed(["the sea", "the land"])
    assert isinstance(embedder, Embedder)
    assert vectors.dtype == np.float32 and vectors.shape == (2, 16)
    assert np.allclose(vectors, [unit_vector("the sea", 16), unit_vector("the land", 16)], atol=1e-6)
    (seen,) = service.requests
    assert seen.path == "/v1/embeddings"
    assert seen.body == {"model": "text-embedding-test", "input": ["the sea", "the land"]}
    assert seen.headers["Authorization"] == f"Bearer {KEY}"
    assert embedder.model == "openai.com:text-embedding-test" and embedder.dimension == 16


def test_the_library_model_id_can_be_named(service: EmbeddingService) -> None:
    assert embedder_for(service, model="ollama:nomic-embed-text").model == "ollama:nomic-embed-text"


def test_rows_follow_the_index_the_service_gives_them(service: EmbeddingService) -> None:
    service.shuffle = True
    vectors = embedder_for(service).embed(["first", "second", "third"])
    assert np.allclose(vectors[2], unit_vector("third", 16), atol=1e-6)


def test_base64_embeddings_are_read_too(service: EmbeddingService) -> None:
    service.encoding = "base64"
    assert np.allclose(embedder_for(service).embed(["x"])[0], unit_vector("x", 16), atol=1e-6)


def test_many_texts_are_sent_in_batches(service: EmbeddingService) -> None:
    vectors = embedder_for(service, max_batch=2).embed([f"text {n}" for n in range(5)])
    assert [len(seen.body["input"]) for seen in service.requests] == [2, 2, 1]
    assert np.allclose(vectors[4], unit_vector("text 4", 16), atol=1e-6)


def test_no_key_sends_no_authorization(service: EmbeddingService, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POLYMATH_EMBEDDER_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    OpenAIEmbedder(service.url, "m").embed(["x"])
    assert "Authorization" not in service.requests[0].headers


def test_the_key_comes_from_the_environment_polymath_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    monkeypatch.delenv("POLYMATH_EMBEDDER_KEY", raising=False)
    assert key_from_environment() == "sk-openai"
    monkeypatch.setenv("POLYMATH_EMBEDDER_KEY", "sk-polymath")
    assert key_from_environment() == "sk-polymath"


@pytest.mark.parametrize(
    ("url", "endpoint"),
    [
        ("https://api.openai.com/v1", "https://api.openai.com/v1/embeddings"),
        ("http://localhost:11434/v1/", "http://localhost:11434/v1/embeddings"),
        ("http://localhost:8080", "http://localhost:8080/v1/embeddings"),
        ("http://tei:80/v1/embeddings", "http://tei:80/v1/embeddings"),
    ],
)
def test_the_endpoint_follows_from_the_url(url: str, endpoint: str) -> None:
    assert endpoint_of(url) == endpoint


def test_credentials_and_query_in_the_url_are_never_shown() -> None:
    embedder = OpenAIEmbedder("https://user:hunter2@[::1]:8443/v1?api-key=hunter2", "m")
    assert embedder.service == "https://[::1]:8443/v1/embeddings"
    assert "hunter2" not in repr(embedder)


def test_a_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(ValueError, match="http:// or https://"):
        OpenAIEmbedder("ftp://example.com", "m")


# ---------------------------------------------------------------- dimensions


def test_the_dimension_is_learned_from_the_first_answer(service: EmbeddingService) -> None:
    embedder = embedder_for(service)
    assert embedder.dimension == 16  # asks the service once
    assert len(service.requests) == 1
    embedder.embed(["again"])
    assert len(service.requests) == 2


def test_vectors_of_another_dimension_are_refused(service: EmbeddingService) -> None:
    with pytest.raises(EmbedderError, match=r"answered 16-dimensional vectors for openai.com:text-embedding-test, "
                                            r"expected 1536"):
        embedder_for(service, dimension=1536).embed(["x"])


def test_a_service_that_changes_dimension_is_refused(service: EmbeddingService) -> None:
    embedder = embedder_for(service)
    embedder.embed(["x"])
    service.dimension = 8
    with pytest.raises(EmbedderError, match=r"answered 8-dimensional vectors .* expected 16"):
        embedder.embed(["x"])


# ---------------------------------------------------------------- failures


def test_a_server_error_is_retried_then_succeeds(service: EmbeddingService) -> None:
    service.reply(Reply(500, {"error": {"message": "overloaded"}}), Reply(503, b"busy"))
    vectors = embedder_for(service).embed(["x"])
    assert np.allclose(vectors[0], unit_vector("x", 16), atol=1e-6)
    assert len(service.requests) == 3


def test_rate_limiting_is_retried_after_the_time_it_asks(service: EmbeddingService) -> None:
    service.reply(Reply(429, {"error": {"message": "slow down"}}, {"Retry-After": "0.3"}))
    started = time.monotonic()
    embedder_for(service).embed(["x"])
    assert time.monotonic() - started >= 0.3
    assert len(service.requests) == 2


def test_persistent_rate_limiting_ends_in_one_clear_error(service: EmbeddingService) -> None:
    service.reply(*[Reply(429, {"error": {"message": "Rate limit reached for requests"}})] * 3)
    with pytest.raises(EmbedderError) as raised:
        embedder_for(service, retries=2).embed(["x"])
    said = "Rate limit reached for requests"
    assert str(raised.value) == f"embedding service {service.url}/embeddings answered 429: {said}"
    assert len(service.requests) == 3


def test_a_client_error_is_not_retried_and_says_what_the_service_said(service: EmbeddingService) -> None:
    service.reply(Reply(400, {"error": {"message": "'input' is too long\n for this model", "type": "invalid"}}))
    with pytest.raises(EmbedderError) as raised:
        embedder_for(service).embed(["x"])
    assert not isinstance(raised.value, EmbedderTimeout)
    assert str(raised.value) == (
        f"embedding service {service.url}/embeddings answered 400: 'input' is too long for this model"
    )
    assert len(service.requests) == 1


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"error": "model 'nomic' not found"}, "model 'nomic' not found"),  # Ollama
        ({"detail": "Not Found"}, "Not Found"),  # FastAPI-based services
        (b"<html>Bad Gateway</html>", "<html>Bad Gateway</html>"),
        (b"", "Unprocessable Entity"),  # the reason phrase when the body is empty
    ],
)
def test_each_services_error_shape_gives_its_message(service: EmbeddingService, body: object, said: str) -> None:
    service.reply(Reply(422, body))  # type: ignore[arg-type]
    with pytest.raises(EmbedderError, match=f"answered 422: {re.escape(said)}$"):
        embedder_for(service).embed(["x"])


def test_a_hung_service_is_a_timeout_without_retries(service: EmbeddingService) -> None:
    service.reply(Reply(hang=5.0))
    started = time.monotonic()
    with pytest.raises(EmbedderTimeout, match=r"did not answer within 0.3 s"):
        embedder_for(service, timeout=0.3).embed(["x"])
    assert time.monotonic() - started < 2.0
    assert len(service.requests) == 1


def test_an_import_retries_a_request_that_timed_out(service: EmbeddingService) -> None:
    service.reply(Reply(hang=5.0))  # the first request hangs; the next is answered
    vectors = embedder_for(service, timeout=0.3, retry_timeouts=True).embed(["x"])
    assert vectors.shape == (1, 16) and len(service.requests) == 2


def test_a_dropped_connection_is_retried(service: EmbeddingService) -> None:
    service.reply(Reply(drop=True))
    embedder_for(service).embed(["x"])
    assert len(service.requests) == 2


def test_a_service_nobody_answers_at_is_one_clear_error(caplog: pytest.LogCaptureFixture) -> None:
    with running_service() as gone:
        url = gone.url
    with pytest.raises(EmbedderError, match=r"^cannot reach embedding service http://127\.0\.0\.1:\d+/v1/embeddings: "):
        OpenAIEmbedder(url, "m", key=KEY, retries=1, backoff=0.01).embed(["x"])
    assert "retry 1 of 1" in caplog.text


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "answered with invalid JSON"),
        ({"object": "list"}, "answered without a `data` list"),
        ({"data": []}, "answered 0 embeddings for 1 texts"),
        ({"data": [{"index": 3, "embedding": [1.0]}]}, "bad or repeated `index`"),
        ({"data": [{"index": 0, "embedding": "not base64!"}]}, "not a vector"),
        ({"data": [{"index": 0, "embedding": [0.0, 0.0]}]}, "zero or non-finite vector"),
        ({"data": [{"index": 0, "embedding": [1, True]}]}, "not a vector"),
    ],
)
def test_a_malformed_answer_is_refused_and_not_retried(service: EmbeddingService, body: object, message: str) -> None:
    service.reply(Reply(200, body))  # type: ignore[arg-type]
    with pytest.raises(EmbedderError, match=message):
        embedder_for(service).embed(["x"])
    assert len(service.requests) == 1


def test_the_key_never_reaches_errors_or_logs(service: EmbeddingService, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    echo = {"error": {"message": f"Incorrect API key provided: {KEY}. Check it."}}
    service.reply(Reply(500, echo), Reply(500, echo), Reply(401, echo))
    embedder = embedder_for(service, retries=2)
    with pytest.raises(EmbedderError) as raised:
        embedder.embed(["x"])
    assert "answered 401: Incorrect API key provided: [key]. Check it." in str(raised.value)
    assert caplog.records, "the retries were logged"
    for text in (str(raised.value), caplog.text, repr(embedder)):
        assert KEY not in text and "SECRET" not in text


def test_a_key_with_a_line_break_is_refused_without_showing_it(service: EmbeddingService) -> None:
    # http.client would refuse the header later, with the key in its message.
    with pytest.raises(ValueError, match="holds a line break or another control character") as raised:
        OpenAIEmbedder(service.url, "text-embedding-test", key=f"{KEY}\r\nX-Injected: 1")
    assert KEY not in str(raised.value)


# ---------------------------------------------------------------- token counts


def test_token_counts_are_the_services_usage(service: EmbeddingService) -> None:
    embedder = embedder_for(service)
    assert embedder.count_tokens("three little words") == 3
    assert embedder.count_tokens("three little words") == 3
    assert len(service.requests) == 1  # remembered


def test_a_count_learned_while_embedding_one_text_costs_no_request(service: EmbeddingService) -> None:
    embedder = embedder_for(service)
    embedder.embed(["four words right here"])
    assert embedder.count_tokens("four words right here") == 4
    assert len(service.requests) == 1


def test_a_service_without_usage_cannot_count(service: EmbeddingService) -> None:
    service.usage = False
    with pytest.raises(EmbedderError, match="reports no token counts"):
        embedder_for(service).count_tokens("x")
