"""The host's embedder registry: settings -> embedders, and the async path of a text query
(worker threads, bounded concurrency, time limit, LRU cache, one embedding per text in flight)."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from embedding_service import EmbeddingService, Reply, running_service, unit_vector, wait_until

from host.embedders import EmbedderError, EmbedderTimeout, NoEmbedder, minilm
from host.embedders.openai_http import OpenAIEmbedder
from host.embedders.service import MAX_CACHED_TEXT_CHARS, Embedders, build_embedders
from host.embedders.stats import EmbeddingStats

pytest_plugins = ["embedder_fixtures"]  # minilm_embedder, minilm_cache_dir

REMOTE = "openai.com:text-embedding-test"


@pytest.fixture
def service() -> Iterator[EmbeddingService]:
    with running_service(dimension=16) as running:
        yield running


def remote_only(service: EmbeddingService, **options: object) -> Embedders:
    """A registry serving only the test service's model (the local model stays out of the way)."""
    registry = build_embedders("auto", service.url, "text-embedding-test", **options)  # type: ignore[arg-type]
    return Embedders([registry.get(REMOTE)], **options)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def local(minilm_embedder: minilm.MiniLMEmbedder, minilm_cache_dir: Path) -> Iterator[Embedders]:
    registry = build_embedders("auto", cache_dir=minilm_cache_dir)  # loads the graph the fixture built
    (loading,) = registry.start_loading()
    loading.result(timeout=60)
    yield registry
    registry.close()


# ---------------------------------------------------------------- settings


def test_auto_serves_the_sample_model_locally(local: Embedders) -> None:
    assert local.models == (minilm.MODEL,)
    vector = asyncio.run(local.embed_query(minilm.MODEL, "a great fish swallowed the prophet"))
    assert vector.shape == (384,) and vector.dtype == np.float32 and not vector.flags.writeable
    assert np.array_equal(vector, local.get(minilm.MODEL).embed(["a great fish swallowed the prophet"])[0])


def test_auto_without_the_extra_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as if the `embed` extra were not installed
    caplog.set_level(logging.INFO, logger="host.embedders")
    assert build_embedders("auto").models == ()
    (line,) = [record.getMessage() for record in caplog.records]
    assert line.startswith(f"no text queries for {minilm.MODEL}: ")
    assert "needs tokenizers: pip install 'polymath-host[embed]'" in line


def test_none_turns_text_queries_off() -> None:
    registry = build_embedders("none")
    assert registry.models == ()
    with pytest.raises(NoEmbedder, match=r"cannot embed text for model 'openai\.com:x': send `query_embedding`"):
        asyncio.run(registry.embed_query("openai.com:x", "hello"))


def test_a_remote_embedder_serves_the_model_named(service: EmbeddingService) -> None:
    registry = build_embedders("auto", service.url, "nomic-embed-text", "ollama:nomic-embed-text")
    assert "ollama:nomic-embed-text" in registry.models
    assert build_embedders("auto", service.url, "nomic-embed-text").get("openai.com:nomic-embed-text")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"embedder": "local"}, "embedder must be one of auto, none, not 'local'"),
        ({"embedder": "none", "embedder_url": "http://localhost:1/v1"}, "embedder 'none' turns text queries off"),
        ({"embedder_url": "http://localhost:1/v1"}, "needs the remote model NAME"),
        ({"embedder_url": "localhost:11434", "embedder_model": "m"}, "must be http:// or https://"),
    ],
)
def test_contradictory_settings_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_embedders(**settings)


def test_two_embedders_for_one_model_are_refused(service: EmbeddingService) -> None:
    one = build_embedders("auto", service.url, "m").get("openai.com:m")
    with pytest.raises(ValueError, match=r"two embedders for model 'openai\.com:m'"):
        Embedders([one, one])


# ---------------------------------------------------------------- the query path


def test_a_repeated_query_text_comes_from_the_cache(service: EmbeddingService) -> None:
    registry = remote_only(service)

    async def twice() -> tuple[np.ndarray, np.ndarray]:
        return await registry.embed_query(REMOTE, "hello"), await registry.embed_query(REMOTE, "hello")

    first, second = asyncio.run(twice())
    assert first is second and len(service.requests) == 1
    assert np.allclose(first, unit_vector("hello", 16), atol=1e-6)
    assert registry.stats.value("cache_hits", REMOTE) == 1
    assert registry.stats.value("cache_misses", REMOTE) == 1


def test_the_cache_is_keyed_by_model_and_text(service: EmbeddingService) -> None:
    registry = remote_only(service, cache_entries=1)

    async def queries() -> None:
        for text in ("a", "b", "a"):
            await registry.embed_query(REMOTE, text)

    asyncio.run(queries())
    assert [seen.body["input"] for seen in service.requests] == [["a"], ["b"], ["a"]]  # one entry: "a" evicted


def test_long_texts_are_not_kept_in_the_cache(service: EmbeddingService) -> None:
    registry = remote_only(service)
    long_text = "word " * (MAX_CACHED_TEXT_CHARS // 5 + 1)
    for _ in range(2):
        asyncio.run(registry.embed_query(REMOTE, long_text))
    assert len(service.requests) == 2


def test_identical_texts_asked_at_once_are_embedded_once() -> None:
    with running_service(dimension=16, delay=0.2) as slow:
        registry = remote_only(slow)

        async def together() -> list[np.ndarray]:
            return await asyncio.gather(*(registry.embed_query(REMOTE, "same") for _ in range(5)))

        vectors = asyncio.run(together())
        assert len(slow.requests) == 1
        assert all(vector is vectors[0] for vector in vectors)


def test_no_more_than_the_concurrency_bound_run_at_once() -> None:
    with running_service(dimension=16, delay=0.2) as slow:
        registry = remote_only(slow, concurrency=2)

        async def many() -> list[np.ndarray]:
            return await asyncio.gather(*(registry.embed_query(REMOTE, f"text {n}") for n in range(6)))

        started = time.monotonic()
        vectors = asyncio.run(many())
        assert len(vectors) == 6 and len(slow.requests) == 6
        assert slow.most_in_flight == 2
        assert time.monotonic() - started >= 0.6  # three rounds of two


def test_a_slow_embedding_is_a_timeout(service: EmbeddingService) -> None:
    service.reply(Reply(hang=3.0))
    registry = remote_only(service, timeout=0.3)
    started = time.monotonic()
    with pytest.raises(EmbedderTimeout, match=f"embedding with {REMOTE} took longer than 0.3 s"):
        asyncio.run(registry.embed_query(REMOTE, "hello"))
    assert time.monotonic() - started < 1.5
    assert registry.stats.value("timeouts", REMOTE) == 1


def test_queued_work_nobody_waits_for_is_dropped() -> None:
    with running_service(dimension=16, delay=1.5) as slow:
        # The HTTP request itself may take 5 s, so the one that started is still in flight when the
        # callers give up at 0.2 s: whether the queued ones were dropped is then never a race.
        embedder = OpenAIEmbedder(slow.url, "text-embedding-test", model=REMOTE, dimension=16, timeout=5.0)
        registry = Embedders([embedder], concurrency=1, timeout=0.2)

        async def impatient() -> list[object]:
            outcomes: list[object] = await asyncio.gather(
                *(registry.embed_query(REMOTE, f"t{n}") for n in range(3)), return_exceptions=True
            )
            return outcomes

        outcomes = asyncio.run(impatient())
        assert all(isinstance(outcome, EmbedderTimeout) for outcome in outcomes)
        # The one that had started finishes; the two queued never start. Wait for outcomes, not
        # for fixed times: on a busy machine the first request may reach the service late.
        wait_until(lambda: len(slow.requests) == 1 and slow.in_flight == 0, timeout=15)
        time.sleep(1.0)  # a queued one that was not dropped would be sent now
        assert len(slow.requests) == 1
        registry.close()


def test_a_query_after_a_timeout_starts_afresh(service: EmbeddingService) -> None:
    service.reply(Reply(hang=1.0))
    registry = remote_only(service, timeout=0.2)
    with pytest.raises(EmbedderTimeout):
        asyncio.run(registry.embed_query(REMOTE, "hello"))
    registry.timeout = 5.0
    vector = asyncio.run(registry.embed_query(REMOTE, "hello"))
    assert np.allclose(vector, unit_vector("hello", 16), atol=1e-6)


def test_a_failing_service_is_an_embedder_error_and_is_not_cached(service: EmbeddingService) -> None:
    service.reply(Reply(400, {"error": {"message": "bad input"}}))
    registry = remote_only(service)
    with pytest.raises(EmbedderError, match="answered 400: bad input"):
        asyncio.run(registry.embed_query(REMOTE, "hello"))
    assert registry.stats.value("errors", REMOTE) == 1
    asyncio.run(registry.embed_query(REMOTE, "hello"))
    assert len(service.requests) == 2


class Broken:
    """An embedder with a bug: it raises something that is not an EmbedderError, or a bad shape."""

    model = "test:broken"
    dimension = 4

    def __init__(self, shape: tuple[int, ...] | None = None) -> None:
        self.shape = shape

    def count_tokens(self, text: str) -> int:
        return len(text)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.shape is None:
            raise RuntimeError("index out of range in some library")
        return np.zeros(self.shape, dtype=np.float32)


@pytest.mark.parametrize(
    ("embedder", "message"),
    [
        (Broken(), r"^embedding with test:broken failed \(RuntimeError\)$"),
        (Broken((1, 3)), r"^embedder of test:broken returned float32 \(1, 3\) for 1 texts of dimension 4$"),
    ],
)
def test_a_broken_embedder_is_one_line_not_a_traceback(embedder: Broken, message: str) -> None:
    registry = Embedders([embedder])
    with pytest.raises(EmbedderError, match=message):
        asyncio.run(registry.embed_query("test:broken", "x"))


# ---------------------------------------------------------------- several texts, counts, the importer


def test_several_texts_reuse_the_cache_and_embed_the_rest_in_one_call(service: EmbeddingService) -> None:
    registry = remote_only(service)
    asyncio.run(registry.embed_query(REMOTE, "a"))
    vectors = asyncio.run(registry.embed_texts(REMOTE, ["b", "a", "c", "b"]))
    assert [seen.body["input"] for seen in service.requests] == [["a"], ["b", "c"]]
    expected = [unit_vector(text, 16) for text in ["b", "a", "c", "b"]]
    assert vectors.shape == (4, 16) and np.allclose(vectors, expected, atol=1e-6)
    assert asyncio.run(registry.embed_texts(REMOTE, [])).shape == (0, 16)


def test_several_texts_may_be_given_their_own_time_limit(service: EmbeddingService) -> None:
    service.reply(Reply(hang=2.0))
    registry = remote_only(service, timeout=10.0)
    with pytest.raises(EmbedderTimeout, match=r"took longer than 0\.2 s"):
        asyncio.run(registry.embed_texts(REMOTE, ["a", "b"], timeout=0.2))


def test_token_counts_are_counted_off_the_event_loop(local: Embedders) -> None:
    assert asyncio.run(local.count_tokens(minilm.MODEL, ["hello world", ""])) == [2, 0]


def test_the_importer_embeds_in_batches_with_progress(service: EmbeddingService) -> None:
    registry = remote_only(service)
    seen: list[tuple[int, int]] = []
    vectors = registry.embed_many(REMOTE, [f"bit {n}" for n in range(5)], batch_size=2,
                                  progress=lambda done, total: seen.append((done, total)))
    assert vectors.shape == (5, 16) and np.allclose(vectors[3], unit_vector("bit 3", 16), atol=1e-6)
    assert seen == [(2, 5), (4, 5), (5, 5)]
    assert registry.stats.calls(REMOTE) == 3 and registry.stats.value("texts", REMOTE) == 5


def test_the_importer_gets_the_same_vectors_as_a_query(local: Embedders) -> None:
    texts = ["in the beginning", "the Lord is my shepherd"]
    batch = local.embed_many(minilm.MODEL, texts)
    query = asyncio.run(local.embed_query(minilm.MODEL, texts[1]))
    assert np.abs(batch[1] - query).max() < 1e-6


# ---------------------------------------------------------------- /metrics


def test_stats_render_as_prometheus_lines(service: EmbeddingService) -> None:
    stats = EmbeddingStats()
    registry = remote_only(service, stats=stats)
    asyncio.run(registry.embed_query(REMOTE, "x"))
    asyncio.run(registry.embed_query(REMOTE, "x"))
    lines = stats.render_lines()
    label = f'model="{REMOTE}"'
    assert f"polymath_embed_cache_hits_total{{{label}}} 1" in lines
    assert f"polymath_embed_cache_misses_total{{{label}}} 1" in lines
    assert f"polymath_embed_texts_total{{{label}}} 1" in lines
    assert f'polymath_embed_seconds_bucket{{{label},le="+Inf"}} 1' in lines
    assert f"polymath_embed_seconds_count{{{label}}} 1" in lines
    assert any(line.startswith(f"polymath_embed_seconds_sum{{{label}}} 0.") for line in lines)
