"""An import through an OpenAI-compatible service that throttles, fails and goes down, for real.

The service (tests/embedding_service.py) answers 429 with Retry-After beyond two requests at once,
fails a seeded fifth of requests (5xx or a dropped connection), answers each batch's vectors in
reverse order, and takes a little while. The importer sends four batches at once. What must hold:
the library is the very one a calm service gives (no chunk lost, none moved, every vector its own
text's), and an import the service gives up on mid-way resumes from its cache, asking again for
nothing it was already given.
"""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from embedding_service import EmbeddingService, Flaky, Reply, Seen, running_service, unit_vector

from host.embedders.openai_http import OpenAIEmbedder
from host.importer import ImportOptions, import_library
from host.importer.errors import ImporterError
from host.library.embeddings import decode_embedding

WORDS = ["harbour", "lantern", "orchard", "meadow", "copper", "thistle", "lagoon", "ember", "quarry", "falcon",
         "juniper", "basalt", "marigold", "tundra", "saffron", "glacier", "heron", "cobalt", "willow", "prairie"]
BUDGET = 40  # the service counts words as tokens: sections of ~100 words make two or three chunks


def write_posts(folder: Path, posts: int = 12, seed: int = 7) -> Path:
    chance = random.Random(seed)
    folder.mkdir(parents=True)
    for number in range(posts):
        sections = "\n\n".join(
            f"## Part {part}\n\n" + " ".join(chance.choice(WORDS) for _ in range(chance.randint(30, 110))) + "."
            for part in range(chance.randint(2, 4)))
        (folder / f"post-{number:02d}.md").write_text(f"---\ntitle: Post {number}\n---\n\n{sections}\n")
    return folder


def embedder_for(service: EmbeddingService, retries: int = 12) -> OpenAIEmbedder:
    """The import's embedder, as `open_embedder` makes it, with short test backoffs."""
    return OpenAIEmbedder(service.url, "text-embedding-test", key="sk-test", timeout=5.0, retries=retries,
                          backoff=0.01, max_retry_after=1.0)


def run(site: Path, out: Path, service: EmbeddingService, *, concurrency: int = 4, retries: int = 12) -> Any:
    options = ImportOptions(base_url="https://example.com/", chunk_tokens=BUDGET, batch_size=4,
                            concurrency=concurrency, window=16, cache=out.with_name(out.name + ".cache.sqlite"))
    return import_library([site], out, embedder_for(service, retries), options, say=lambda line: None)


def embed_calls(requests: list[Seen]) -> list[list[str]]:
    """The inputs of the requests that embedded a batch (token counts are asked one text at a time)."""
    return [seen.body["input"] for seen in requests if len(seen.body["input"]) > 1]


def test_a_throttling_failing_service_loses_moves_and_mixes_up_no_chunk(tmp_path: Path) -> None:
    site = write_posts(tmp_path / "site")
    with running_service(dimension=16) as calm:
        run(site, tmp_path / "calm" / "site.json", calm)

    with running_service(dimension=16, delay=0.02) as busy:
        busy.max_in_flight, busy.flaky, busy.shuffle = 2, Flaky(0.2, seed=3), True
        report = run(site, tmp_path / "busy" / "site.json", busy)
        statuses = [seen.status for seen in busy.requests]

    out = tmp_path / "busy" / "site.json"
    assert out.read_bytes() == (tmp_path / "calm" / "site.json").read_bytes()  # the very same library
    for bit in json_bits(out):  # each vector is its own text's
        assert np.allclose(decode_embedding(bit["embedding"]), unit_vector(bit["text"], 16), atol=1e-6)
    assert report.embedded_texts == report.bits > 20
    assert 429 in statuses and {500, 502, 503} & set(statuses) and 0 in statuses  # it did throttle and fail
    assert busy.most_in_flight > 2  # the importer had more requests out than the service allows at once


def test_an_import_the_service_gives_up_on_resumes_without_asking_again(tmp_path: Path) -> None:
    site = write_posts(tmp_path / "site")
    out = tmp_path / "libraries" / "site.json"

    def down_after_three_batches(service: EmbeddingService, seen: Seen) -> Reply | None:
        answered = [earlier for earlier in service.requests if earlier.status == 200 and len(earlier.body["input"]) > 1]
        return Reply(503, {"error": {"message": "down for maintenance"}}) if len(answered) >= 3 else None

    with running_service(dimension=16) as failing:
        failing.policy = down_after_three_batches
        with pytest.raises(ImporterError, match=r"embedding service .* answered 503: down for maintenance"):
            run(site, out, failing, concurrency=2, retries=2)
        paid_for = {text for inputs in embed_calls(failing.answered()) for text in inputs}
    assert not out.exists()  # nothing half-done was published
    assert len(paid_for) >= 3 * 2

    with running_service(dimension=16) as healthy:
        report = run(site, out, healthy)
        asked_again = {text for inputs in embed_calls(healthy.requests) for text in inputs} & paid_for
    texts = {bit["text"] for bit in json_bits(out)}
    assert asked_again == set()
    assert report.reused == len(paid_for & texts) and report.embedded_texts == len(texts) - len(paid_for & texts)
    for bit in json_bits(out):
        assert np.allclose(decode_embedding(bit["embedding"]), unit_vector(bit["text"], 16), atol=1e-6)


def test_when_one_call_fails_the_others_stop_waiting_out_their_retry_after(tmp_path: Path) -> None:
    """One batch refused for good (400) while the others are told to come back in ten minutes: the
    import ends with the refusal at once, and nothing more is sent."""
    site = write_posts(tmp_path / "site")
    out = tmp_path / "libraries" / "site.json"
    refused: list[Seen] = []

    def refuse_one_throttle_the_rest(service: EmbeddingService, seen: Seen) -> Reply | None:
        if len(seen.body["input"]) == 1:
            return None  # token counts
        if not refused:
            refused.append(seen)
            return Reply(400, {"error": {"message": "this batch is refused"}})
        return Reply(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "600"})

    options = ImportOptions(base_url="https://example.com/", chunk_tokens=BUDGET, batch_size=4, concurrency=4,
                            window=16, cache=out.with_name("site.json.cache.sqlite"))
    outcome: list[BaseException] = []
    with running_service(dimension=16) as service:
        service.policy = refuse_one_throttle_the_rest
        patient = OpenAIEmbedder(service.url, "text-embedding-test", key="sk-test", timeout=5.0, retries=8,
                                 backoff=0.01, max_retry_after=600.0)

        def importing() -> None:
            try:
                import_library([site], out, patient, options, say=lambda line: None)
            except BaseException as problem:  # what the import ended with is the test's
                outcome.append(problem)

        thread = threading.Thread(target=importing)
        thread.start()
        thread.join(120)  # far longer than the import needs, far shorter than one Retry-After
        assert not thread.is_alive(), "the import waited out a Retry-After after another call had failed"
        sent = len(service.requests)
        time.sleep(0.3)
        assert len(service.requests) == sent  # and it sends nothing more
    assert len(outcome) == 1 and isinstance(outcome[0], ImporterError)
    assert "answered 400: this batch is refused" in str(outcome[0])
    assert not out.exists()


def json_bits(path: Path) -> list[dict[str, Any]]:
    return list(json.loads(path.read_text())["bits"])
