"""Step `text`: asking in words. The local MiniLM embedder alone, a vector query and a text query
over HTTP on the sample library, in one run, in fp32 and in int8 (`serve --embedder-precision`);
and the embedder's throughput by batch size.

Every query text is new (the server's embedding cache never hits): twelve words of a sample
passage, the length issue 21 set its target for (embedding <= 6 ms). The server's answer cache
is off, so a text query costs an embedding plus a ranked vector query, which is the target:
text query p50 <= embedding p50 + vector query p50 + 1 ms. Vector and text queries alternate on
one keep-alive connection, so drift on a shared machine touches both alike.
"""

from __future__ import annotations

import base64
import http.client
import json
import shutil
import time
from collections.abc import Callable

import numpy as np

from host.embedders.minilm import MiniLMEmbedder, missing_requirement
from host.service.harness import spawn_host

from .config import Config
from .report import ROOT, ms, say, summary, table
from .step import ONCE, Numbers, Results, Step

QUERIES = (
    "a great fish swallowed the prophet", "love your enemies", "in the beginning God created the heaven",
    "the Lord is my shepherd", "charity suffereth long", "vanity of vanities", "the prodigal son",
    "thrown into a den of lions", "a virtuous woman", "the road to Damascus", "shipwreck on an island",
    "where were you when I laid the foundations of the earth",
)
BATCH_SIZES = (1, 8, 64)
PRECISIONS = ("fp32", "int8")
QUERY_WORDS = 12


def twelve_word_queries(count: int) -> list[str]:
    """`count` different texts of QUERY_WORDS words each, cut from the sample library's passages."""
    words = " ".join(bit["text"] for bit in json.loads((ROOT / "libraries" / "sample.json").read_text())["bits"])
    words_list = words.split()
    texts = [" ".join(words_list[start:start + QUERY_WORDS])
             for start in range(0, len(words_list) - QUERY_WORDS, QUERY_WORDS * 3)]
    return list(dict.fromkeys(texts))[:count]


def measure(config: Config) -> Numbers:
    count = 60 if config.quick else 240
    return {precision: measure_precision(precision, twelve_word_queries(count), config) for precision in PRECISIONS}


def measure_precision(precision: str, texts: list[str], config: Config) -> Numbers:
    say(f"text: loading the local embedder ({precision})")
    started = time.perf_counter()
    embedder = MiniLMEmbedder(precision=precision)  # one thread, as the server's
    embedder.load()
    numbers: Numbers = {"load_seconds": time.perf_counter() - started, "queries": len(texts)}
    alone = []
    for text in texts:
        began = time.perf_counter()
        embedder.embed([text])
        alone.append(time.perf_counter() - began)
    numbers["embedding"] = summary(alone)
    numbers["throughput"] = throughput(embedder)

    libraries = config.workdir / "text-sample" / "libraries"
    shutil.rmtree(libraries.parent, ignore_errors=True)
    shutil.copytree(ROOT / "libraries", libraries, ignore=shutil.ignore_patterns(".compiled"))
    vectors = embedder.embed(texts)
    say(f"text: vector and text queries over HTTP ({precision})")
    with spawn_host(libraries, "--log-level", "warning", "--answer-cache-bytes", "0", "--embedder-precision",
                    precision, cwd=libraries.parent, own_session=True) as server:
        server.wait_until_ready("/healthz", timeout=120)
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        ask = asker(connection)
        ask({"query": "warming the embedder up", "count": 5, "count_type": "bit"})
        by_vector, by_text = [], []
        for text, vector in zip(texts, vectors, strict=True):
            by_vector.append(ask({"query_embedding": encode(vector), "count": 5, "count_type": "bit"}))
            by_text.append(ask({"query": text, "count": 5, "count_type": "bit"}))
        connection.close()
    numbers["vector_query"] = summary(by_vector)
    numbers["text_query"] = summary(by_text)
    return numbers


def asker(connection: http.client.HTTPConnection) -> Callable[[dict[str, object]], float]:
    """POST / over one keep-alive connection; the seconds to the whole answer."""

    def ask(fields: dict[str, object]) -> float:
        body = json.dumps(fields).encode()
        began = time.perf_counter()
        connection.request("POST", "/", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        answer = response.read()
        if response.status != 200:
            raise RuntimeError(f"POST / answered {response.status}: {answer[:200]!r}")
        return time.perf_counter() - began
    return ask


def encode(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()


def throughput(embedder: MiniLMEmbedder) -> dict[str, dict[int, float]]:
    """Texts a second at each batch size, for the sample's passages and for short queries."""
    passages = [bit["text"] for bit in json.loads((ROOT / "libraries" / "sample.json").read_text())["bits"]][:128]
    short = [f"{QUERIES[n % len(QUERIES)]} {n}" for n in range(256)]
    figures: dict[str, dict[int, float]] = {"passages": {}, "short queries": {}}
    defaults = embedder.batch_size, embedder.batch_tokens
    try:
        for kind, texts in (("passages", passages), ("short queries", short)):
            for size in BATCH_SIZES:
                embedder.batch_size, embedder.batch_tokens = size, 1 << 30  # exactly `size` texts a run
                began = time.perf_counter()
                embedder.embed(texts)
                figures[kind][size] = len(texts) / (time.perf_counter() - began)
    finally:
        embedder.batch_size, embedder.batch_tokens = defaults
    return figures


def report(results: Results, config: Config) -> list[str]:
    by_precision = results.get("text")
    if not by_precision:
        return []
    rows, speed = [], []
    for precision, numbers in by_precision.items():
        embedding, vector, text = numbers["embedding"], numbers["vector_query"], numbers["text_query"]
        over = text["p50"] - (embedding["p50"] + vector["p50"])
        rows += [
            [precision, f"the embedding alone (in-process; loaded in {numbers['load_seconds']:.2f} s)",
             ms(embedding["p50"]), ms(embedding["p99"])],
            [precision, "a vector query over HTTP", ms(vector["p50"]), ms(vector["p99"])],
            [precision, "a text query over HTTP", ms(text["p50"]), ms(text["p99"])],
            [precision, "text - (embedding + vector), p50", ms(over), ""],
        ]
        speed += [[precision, kind, *(f"{figures[size]:.0f}" for size in BATCH_SIZES)]
                  for kind, figures in numbers["throughput"].items()]
    some = next(iter(by_precision.values()))
    return [
        table(f"Text queries on the sample library ({some['queries']} new {QUERY_WORDS}-word texts each; answer "
              "cache off)", ["precision", "what", "p50 ms", "p99 ms"], rows, left=2,
              note="Targets: text query p50 <= embedding p50 + vector query p50 + 1 ms; a 12-word query embedded "
                   "in <= 6 ms (issue 21)."),
        table("The local embedder's throughput, texts a second (one thread)",
              ["precision", "texts", *(f"batch {size}" for size in BATCH_SIZES)], speed, left=2),
    ]


def unavailable() -> str | None:
    problem = missing_requirement()
    return None if problem is None else f"text: skipped ({problem})"


STEP = Step("text", "text queries: the embedding alone, vector and text queries over HTTP, embedder throughput",
            ONCE, measure, report, unavailable)
