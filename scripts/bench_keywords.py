#!/usr/bin/env python3
"""Keyword search speed (issue 31): `mode=keyword` over HTTP beside tantivy in process, and what
hybrid ranking adds to a text query, on synthetic English libraries.

Two measurements, each alternating its two sides round by round (A, B, A, B) with the load average
recorded before every side, CPU seconds beside wall time, and no ratio printed for a round whose
1-minute load exceeded the cores:

  keyword   a `--text verses` library (scripts/synthetic_library.py; 1M bits for the issue's goal)
            served by a real `serve` (one worker, --embedder none, answer cache off: every query a
            cache miss), asked `POST /` mode=keyword, count 10 bits, over one kept-alive HTTP
            connection; beside tantivy (PyPI's `tantivy`, BM25, its English stemming tokenizer) on
            the same texts (title + text), `searcher.search(query, 10)` in this process. Also our
            own search in process, for what HTTP costs.
  hybrid    a `--text verses` library of the local model (100k bits for the goal) served with the
            local embedder: the same text queries by default (hybrid) and with mode=vector. Each
            query is embedded once before the rounds (the embedder keeps query vectors), so the
            difference is the ranking's alone.

Queries: 1 to 3 words drawn from random bits' texts (stop words left out), the same for every side.

    python scripts/synthetic_library.py /work/data/verses1m --bits 1M --dimension 384 --text verses
    python scripts/bench_keywords.py keyword /work/data/verses1m --rounds 3
    python scripts/synthetic_library.py /work/data/verses100k --bits 100k --dimension 384 --text verses
    python scripts/bench_keywords.py hybrid /work/data/verses100k --rounds 3

Needs `pip install -e '.[embed,bench]'` (tantivy). Progress on stderr, Markdown on stdout.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchmarks.import_rounds import cpu_description  # noqa: E402
from benchmarks.measure import cpu_seconds  # noqa: E402
from synthetic_library import CHUNK, Recipe, centres, chunk, texts  # noqa: E402

from host.keywords.analyzer import ENGLISH_STOP_WORDS  # noqa: E402
from host.service.harness import RunningHost, start_host  # noqa: E402

CORES = os.cpu_count() or 1


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load() -> float:
    return os.getloadavg()[0]


def settle(most: float = 240) -> None:
    """Wait (up to `most` seconds) for the 1-minute load to fall to the cores: building an index or
    loading a model leaves it high for a minute after."""
    waited = 0.0
    while load() > CORES and waited < most:
        time.sleep(5)
        waited += 5
    if waited:
        say(f"waited {waited:.0f} s for the load to settle ({load():.1f})")


def cpu_features() -> str:
    return str(cpu_description()["vector"])


def recipe_of(folder: Path) -> Recipe:
    return Recipe(**json.loads((folder / "recipe.params").read_text()))


def bit_texts(recipe: Recipe) -> Iterator[str]:
    """Every bit's title and text, as the library file has them (regenerated chunk by chunk)."""
    where = centres(recipe)
    for start in range(0, recipe.bits, CHUNK):
        _, tokens = chunk(recipe, start, min(CHUNK, recipe.bits - start), where)
        for offset, text in enumerate(texts(recipe, start, tokens)):
            yield f"Synthetic bit {start + offset} {text}"


def sample_queries(recipe: Recipe, count: int, seed: int = 7) -> list[str]:
    rng = np.random.default_rng(seed)
    rows = set(rng.integers(0, recipe.bits, count).tolist())
    where = centres(recipe)
    found: list[str] = []
    for start in range(0, recipe.bits, CHUNK):
        wanted = sorted(row for row in rows if start <= row < start + CHUNK)
        if not wanted:
            continue
        _, tokens = chunk(recipe, start, min(CHUNK, recipe.bits - start), where)
        rows_texts = texts(recipe, start, tokens)
        for row in wanted:
            words = [word for word in re.findall(r"[a-z]+", rows_texts[row - start].lower())
                     if word not in ENGLISH_STOP_WORDS and len(word) > 1]
            found.append(" ".join(rng.choice(words, min(len(words), int(rng.integers(1, 4))), replace=False)))
    return found


@dataclass
class Side:
    """One side's latencies over the rounds, the loads seen and the CPU it took."""

    name: str
    seconds: list[float]
    loads: list[float]
    cpu: float = 0.0

    def percentile(self, share: float) -> float:
        ordered = sorted(self.seconds)
        return ordered[min(len(ordered) - 1, int(share * len(ordered)))] * 1e3


def timed(ask: Callable[[str], Any], queries: list[str]) -> list[float]:
    found = []
    for query in queries:
        started = time.perf_counter()
        ask(query)
        found.append(time.perf_counter() - started)
    return found


class Poster:
    """`POST /` over one kept-alive connection (http.client: the least a client can add)."""

    def __init__(self, host: RunningHost, fields: dict[str, Any]) -> None:
        self.port = host.port
        self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        self.fields = fields

    def __call__(self, query: str) -> dict[str, Any]:
        body = json.dumps({"query": query, **self.fields})
        try:
            self.connection.request("POST", "/", body, {"content-type": "application/json"})
            response = self.connection.getresponse()
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            # The server closed the idle connection (its keep-alive ran out while the load settled).
            self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            self.connection.request("POST", "/", body, {"content-type": "application/json"})
            response = self.connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise SystemExit(f"POST / answered {response.status}: {body[:300]!r}")
        answer: dict[str, Any] = json.loads(body)
        return answer


def alternate(sides: dict[str, Callable[[str], Any]], queries: list[str], rounds: int,
              cpu_of: dict[str, Callable[[], float]]) -> tuple[dict[str, Side], list[dict[str, float]]]:
    """Each side asks every query once per round, sides taking turns; per round: each side's p50 and load."""
    results = {name: Side(name, [], []) for name in sides}
    per_round = []
    for number in range(rounds):
        figures: dict[str, float] = {}
        for name, ask in sides.items():
            figures[f"{name} load"] = load()
            before = cpu_of[name]()
            seconds = timed(ask, queries)
            results[name].cpu += cpu_of[name]() - before
            results[name].seconds += seconds
            results[name].loads.append(figures[f"{name} load"])
            figures[name] = statistics.median(seconds) * 1e3
            say(f"round {number + 1}: {name} p50 {figures[name]:.3f} ms (load {figures[f'{name} load']:.1f})")
        per_round.append(figures)
    return results, per_round


def table(results: dict[str, Side], per_round: list[dict[str, float]], reference: str, other: str) -> str:
    lines = ["| side | p50 ms | p90 ms | p99 ms | CPU s | loads |", "|---|---:|---:|---:|---:|---|"]
    for side in results.values():
        lines.append(f"| {side.name} | {side.percentile(0.5):.3f} | {side.percentile(0.9):.3f} | "
                     f"{side.percentile(0.99):.3f} | {side.cpu:.1f} | {', '.join(f'{value:.1f}' for value in side.loads)} |")
    lines.append("")
    for number, figures in enumerate(per_round, 1):
        busiest = max(value for key, value in figures.items() if key.endswith(" load"))
        if busiest > CORES:
            lines.append(f"- round {number}: no ratio (load {busiest:.1f} > {CORES} cores)")
        else:
            lines.append(f"- round {number}: {reference} / {other} p50 = {figures[reference] / figures[other]:.2f}x, "
                         f"difference {figures[reference] - figures[other]:+.3f} ms (load up to {busiest:.1f})")
    return "\n".join(lines)


def serve(folder: Path, cache: Path, *extra: str) -> RunningHost:
    say(f"serving {folder} (compiled into {cache} if needed)")
    started = time.perf_counter()
    host = start_host(folder, "--cache-dir", str(cache), "--answer-cache-bytes", "0", *extra, workers=1,
                      own_session=True, timeout=3600, ready_path="/readyz")
    say(f"ready in {time.perf_counter() - started:.1f} s")
    return host


def postings_size(cache: Path) -> str:
    """The keyword postings' bytes beside the texts' (records.bin holds each bit's text and info)."""
    lines = []
    for layout in sorted(cache.glob("**/text_index.json")):
        arrays = json.loads(layout.read_text())["arrays"]
        sizes = {name: int(np.prod(entry["shape"])) * np.dtype(entry["dtype"]).itemsize for name, entry in arrays.items()}
        keyword_bytes = sum(size for name, size in sizes.items() if name.startswith("keywords."))
        records = (layout.parent / "records.bin").stat().st_size
        lines.append(f"- {layout.parent.name}: keyword postings {keyword_bytes / 1e6:,.0f} MB, the bits' texts and infos "
                     f"(records.bin) {records / 1e6:,.0f} MB: {keyword_bytes / records:.2f}x; the whole text index "
                     f"{sum(sizes.values()) / 1e6:,.0f} MB")
    return "\n".join(lines)


def keyword(args: argparse.Namespace) -> None:
    import tantivy

    recipe = recipe_of(args.library)
    queries = sample_queries(recipe, args.queries)
    say(f"{len(queries)} queries, e.g. {queries[:4]}; load {load():.1f}; CPU {cpu_features()}")
    index_folder = Path(tempfile.mkdtemp(prefix="tantivy-", dir=args.work))
    schema = tantivy.SchemaBuilder().add_text_field("body", stored=False, tokenizer_name="en_stem").build()
    index = tantivy.Index(schema, path=str(index_folder))
    started, cpu = time.perf_counter(), time.process_time()
    writer = index.writer(heap_size=1 << 30, num_threads=CORES)
    for text in bit_texts(recipe):
        writer.add_document(tantivy.Document(body=text))
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    searcher = index.searcher()
    say(f"tantivy: {searcher.num_docs:,} documents indexed in {time.perf_counter() - started:.1f} s "
        f"({time.process_time() - cpu:.1f} s of this process's CPU, texts generated included)")

    def tantivy_search(query: str) -> Any:
        return searcher.search(index.parse_query(query, ["body"]), 10)

    host = serve(args.library, args.work / "compiled", "--embedder", "none")
    try:
        ours = Poster(host, {"mode": "keyword", "count": 10, "count_type": "bit", "omit": "embedding"})
        for query in queries:  # first touches of the maps and indexes, both sides
            ours(query)
            tantivy_search(query)
        settle()
        results, per_round = alternate({"ours over HTTP": ours, "tantivy in process": tantivy_search}, queries,
                                       args.rounds, {"ours over HTTP": lambda: cpu_seconds(host.pids()),
                                                     "tantivy in process": time.process_time})
        print(f"## keyword top 10, {recipe.bits:,} bits ({cpu_features()})\n")
        print(table(results, per_round, "ours over HTTP", "tantivy in process"))
        print()
        print(postings_size(args.work / "compiled"))
    finally:
        host.stop()
        shutil.rmtree(index_folder, ignore_errors=True)


def hybrid(args: argparse.Namespace) -> None:
    recipe = recipe_of(args.library)
    queries = sample_queries(recipe, args.queries)
    say(f"{len(queries)} queries, e.g. {queries[:4]}; load {load():.1f}; CPU {cpu_features()}")
    host = serve(args.library, args.work / "compiled")
    try:
        by_default = Poster(host, {"count": 10, "count_type": "bit", "omit": "embedding"})
        by_vector = Poster(host, {"count": 10, "count_type": "bit", "omit": "embedding", "mode": "vector"})
        for query in queries:  # each query embedded once: later rounds find its vector kept
            by_vector(query)
            by_default(query)
        settle()
        cpu = {"hybrid (default)": lambda: cpu_seconds(host.pids()), "vector": lambda: cpu_seconds(host.pids())}
        results, per_round = alternate({"hybrid (default)": by_default, "vector": by_vector}, queries, args.rounds, cpu)
        print(f"## a text query's top 10, {recipe.bits:,} bits: hybrid (default) against vector ({cpu_features()})\n")
        print(table(results, per_round, "hybrid (default)", "vector"))
    finally:
        host.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["keyword", "hybrid"])
    parser.add_argument("library", type=Path, help="a folder written by scripts/synthetic_library.py --text verses")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--work", type=Path, help="compiled stores and tantivy's index (default: a temporary folder)")
    args = parser.parse_args(argv)
    if not (args.library / "recipe.params").exists():
        raise SystemExit(f"{args.library}: no recipe.params (write it with scripts/synthetic_library.py --text verses)")
    temporary = args.work is None
    args.work = args.work or Path(tempfile.mkdtemp(prefix="keywords-"))
    args.work.mkdir(parents=True, exist_ok=True)
    try:
        keyword(args) if args.what == "keyword" else hybrid(args)
    finally:
        if temporary:
            shutil.rmtree(args.work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
