#!/usr/bin/env python3
"""Benchmark polymath-host against the floor measured in the same run.

The machine this runs on is small (2 cores) and shared, so absolute times drift from run to
run: every host figure is printed next to the numpy floor (`E @ q` + argpartition) measured
on the same memory-mapped matrix in the same run, and the ratio is what to compare.

Steps (all by default; choose with --steps):

  latency      in-process p50/p99 of host.engine.rank (exact, 1500 tokens) vs the floor and faiss
  approximate  sign-code search: p50/p99, recall@10 against exact, a profile of where time goes
  fixtures     recall of the sign-code search on the real ada-002 fixtures (../shared/fixtures)
  encoding     build_result + render_json / render_msgpack for a 1500-token result
  compile      bits/s compiling a real JSON library file (host.store.load_library)
  coldstart    `python -m host serve` to the first 200 answer on an already compiled library
  memory       RSS and PSS of the server with --workers 1 and 2 (exact search touches every page)
  http         wrk against a real uvicorn process: p50/p99 and requests/s, JSON and msgpack

Synthetic libraries (unit float32, dimension 1536, ~200 clusters, 50-400 tokens per bit) are
written to the compiled form once and reused from --workdir. Queries are perturbed existing
bits, not random vectors (random vectors have no real neighbours: see PERFORMANCE-NOTES).
Progress goes to stderr, tables to stdout, raw numbers to --json FILE.

Install the extras with `pip install -e '.[bench]'` (faiss-cpu) and wrk with
`apt-get update && apt-get install -y wrk`. Every server listens on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import gc
import http.client
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Self

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from host import engine
from host.catalog import load_catalog
from host.engine import EXACT, Search, rank
from host.index import ModelIndex
from host.library_format import ADA_002, ParsedLibrary, canonical_id, encode_embedding, parse_library, parse_omit
from host.query import SearchPolicy
from host.results import build_result
from host.sign_codes import hamming_distances
from host.store import STORE_FORMAT, SourceKey, file_sha256, open_compiled, read_library_file, write_compiled
from host.web.responses import render_json, render_msgpack

SIZES = {"1k": 1_000, "10k": 10_000, "100k": 100_000, "1M": 1_000_000}
ALL_STEPS = ("latency", "approximate", "fixtures", "encoding", "compile", "coldstart", "memory", "http")
DIMENSION = 1536
CLUSTERS = 200
TOKENS = (50, 400)
SPREAD = 1.0  # noise norm relative to the (unit) cluster centre: a bit is ~0.7 cosine from its centre
QUERY_NOISE = 0.5  # a query is an existing bit plus noise of this relative norm (~0.9 cosine to it)
COUNT = 1500  # tokens per query, as the brief and the original host's measurements
GENERATOR_VERSION = 1
CHUNK = 32_768  # rows generated at a time: memory stays bounded at 1M
FIXTURES = ROOT.parent / "shared" / "fixtures"
ORIGINAL_HOST_HTTP_P50 = {1_000: 0.108, 10_000: 1.15, 100_000: 13.0, 1_000_000: 130.0}  # PERFORMANCE-NOTES
NOTES_FLOOR_P50 = {1_000: 0.16e-3, 10_000: 1.3e-3, 100_000: 27e-3, 1_000_000: 263e-3}
EVERYONE: frozenset[str] = frozenset()

# ---- output ----------------------------------------------------------------------------------


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def label(bits: int) -> str:
    return next((name for name, value in SIZES.items() if value == bits), f"{bits:,}")


def ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    value = seconds * 1000
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 100 else f"{value:,.0f}"


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}x"


def table(title: str, headers: list[str], rows: list[list[Any]], note: str = "", left: int = 1) -> str:
    """A Markdown table, aligned for reading in a terminal: the first `left` columns to the left."""
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [max(len(headers[i]), *(len(row[i]) for row in cells)) if cells else len(headers[i]) for i in range(len(headers))]
    lines = [f"### {title}", ""]
    lines.append("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |")
    lines.append("|" + "|".join(("-" * (w + 1)) + ":" if i >= left else "-" * (w + 2) for i, w in enumerate(widths)) + "|")
    for row in cells:
        lines.append("| " + " | ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))) + " |")
    if note:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def summary(samples: list[float]) -> dict[str, float]:
    values = np.asarray(samples)
    return {
        "n": len(values),
        "p50": float(np.percentile(values, 50)),
        "p99": float(np.percentile(values, 99)),
        "mean": float(values.mean()),
        "min": float(values.min()),
    }


# ---- synthetic libraries --------------------------------------------------------------------


def generator_params(bits: int, seed: int) -> dict[str, Any]:
    return {"generator": GENERATOR_VERSION, "bits": bits, "seed": seed, "dimension": DIMENSION,
            "clusters": CLUSTERS, "tokens": list(TOKENS), "spread": SPREAD}


def library_folder(workdir: Path, bits: int) -> Path:
    return workdir / f"synthetic-{label(bits)}"


def placeholder_library() -> bytes:
    """The source file the host discovers; its compiled form beside it is what is served."""
    return json.dumps({"version": 1, "embedding_model": ADA_002, "bits": [], "details": {
        "note": "placeholder written by scripts/bench.py: the compiled form in .compiled/bench holds the bits"}}).encode()


def ensure_library(workdir: Path, bits: int, seed: int) -> Path:
    """A folder the host serves with `bits` synthetic bits, compiled; reused when it matches."""
    folder = library_folder(workdir, bits)
    source, compiled = folder / "bench.json", folder / ".compiled" / "bench"
    params = generator_params(bits, seed)
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        meta = json.loads((compiled / "meta.json").read_text())
        if (meta["store_format"] == STORE_FORMAT and meta["details"].get("bench") == params
                and SourceKey(**meta["source"]).matches_stat(source.stat())):
            say(f"{label(bits)}: reusing {compiled}")
            return folder
    say(f"{label(bits)}: generating {bits:,} bits x {DIMENSION} in {folder}")
    started = time.perf_counter()
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((CLUSTERS, DIMENSION), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    scratch = folder / "embeddings.tmp.npy"
    matrix = np.lib.format.open_memmap(scratch, mode="w+", dtype="<f4", shape=(bits, DIMENSION))
    token_counts = np.empty(bits, dtype=np.int64)
    for start in range(0, bits, CHUNK):
        chunk_rng = np.random.default_rng([seed, bits, start])
        size = min(CHUNK, bits - start)
        block = chunk_rng.standard_normal((size, DIMENSION), dtype=np.float32)
        block *= np.float32(SPREAD / np.sqrt(DIMENSION))
        block += centres[chunk_rng.integers(0, CLUSTERS, size)]
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        matrix[start:start + size] = block
        token_counts[start:start + size] = chunk_rng.integers(TOKENS[0], TOKENS[1] + 1, size)
    matrix.flush()
    records, ids = synthetic_records(token_counts, rng)
    say(f"{label(bits)}: arrays ready in {time.perf_counter() - started:.1f} s; writing the compiled form")
    source.write_bytes(placeholder_library())
    stat = source.stat()
    key = SourceKey(size=stat.st_size, mtime_ns=stat.st_mtime_ns, sha256=file_sha256(source))
    parsed = ParsedLibrary(embedding_model=ADA_002, embeddings=matrix, token_counts=token_counts, ids=ids,
                           records=records, access_tags=[None] * bits, details={"bench": params})
    write_compiled(parsed, compiled, key, "bench")
    del parsed, matrix, records
    scratch.unlink()
    gc.collect()
    say(f"{label(bits)}: written in {time.perf_counter() - started:.1f} s")
    return folder


def synthetic_records(token_counts: np.ndarray, rng: np.random.Generator) -> tuple[list[dict[str, Any]], list[str]]:
    """Text of about 0.75 words per token (so the first-bit cut has words to cut), and an info url."""
    vocabulary = ["lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "do", "eiusmod", "tempor", "incididunt", "ut", "labore", "et", "dolore", "magna", "aliqua", "enim", "ad", "minim", "veniam", "quis", "nostrud", "exercitation", "ullamco", "laboris", "nisi", "aliquip", "ex", "ea", "commodo", "consequat", "duis", "aute", "irure", "in", "reprehenderit", "voluptate", "velit", "esse"]
    words = [vocabulary[i] for i in rng.integers(0, len(vocabulary), 2000)]
    filler = " ".join(words)
    ends = np.cumsum([len(word) + 1 for word in words]) - 1
    starts = ends - np.array([len(word) for word in words])
    records, ids = [], []
    for row, tokens in enumerate(token_counts.tolist()):
        first = (row * 7) % 1000
        text = f"Bit {row}. " + filler[starts[first]:ends[first + int(tokens * 0.75) - 1]]
        url = f"https://example.com/bench/{row}"
        records.append({"text": text, "info": {"url": url, "title": f"Synthetic bit {row}"}})
        ids.append(canonical_id(url, text))
    return records, ids


def open_index(folder: Path, bits: int) -> ModelIndex:
    messages: list[str] = []
    catalog = load_catalog(folder, progress=messages.append)
    if catalog.problems or not all(message.startswith("opened") for message in messages):
        raise SystemExit(f"{folder}: expected an already compiled library, got {messages} {catalog.problems}")
    index = catalog.models[ADA_002]
    if index.bit_count != bits:
        raise SystemExit(f"{folder}: {index.bit_count} bits, expected {bits}")
    return index


def matrix_of(index: ModelIndex) -> np.ndarray:
    return index.libraries[0].embeddings


def near_queries(embeddings: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """Existing bits plus noise: queries that have real neighbours."""
    rows = np.sort(rng.choice(len(embeddings), size=count, replace=len(embeddings) < count))
    queries = np.array(embeddings[rows], dtype=np.float32)
    queries += rng.standard_normal(queries.shape, dtype=np.float32) * np.float32(QUERY_NOISE / np.sqrt(queries.shape[1]))
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    return queries[rng.permutation(count)]


def warm(embeddings: np.ndarray) -> None:
    """Touch every page once, so the first query does not pay for reading the file."""
    for start in range(0, len(embeddings), 1 << 16):
        float(embeddings[start:start + (1 << 16), 0].sum())
    embeddings @ embeddings[0]


# ---- measuring -------------------------------------------------------------------------------


def interleaved(functions: dict[str, Callable[[np.ndarray], Any]], queries: np.ndarray, repetitions: int,
                budget: float) -> dict[str, dict[str, float]]:
    """Time each function on the same queries, in rotating order, bounded by count and time."""
    times: dict[str, list[float]] = {name: [] for name in functions}
    names = list(functions)
    for function in functions.values():  # warm-up, untimed
        function(queries[0])
    deadline = time.perf_counter() + budget
    for repetition in range(repetitions):
        query = queries[repetition % len(queries)]
        for name in names[repetition % len(names):] + names[:repetition % len(names)]:
            started = time.perf_counter()
            functions[name](query)
            times[name].append(time.perf_counter() - started)
        if time.perf_counter() > deadline and repetition >= 4:
            break
    return {name: summary(values) for name, values in times.items()}


def floor_search(embeddings: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    def search(query: np.ndarray) -> np.ndarray:
        scores = embeddings @ query
        top = np.argpartition(scores, len(scores) - 10)[-10:]
        return top[np.argsort(-scores[top])]
    return search


def host_search(index: ModelIndex, search: Search = EXACT, count: int = COUNT, count_type: str = "token"):
    def run(query: np.ndarray) -> Any:
        return rank(index, query, granted=EVERYONE, count=count, count_type=count_type, search=search)  # type: ignore[arg-type]
    return run


def faiss_search(embeddings: np.ndarray) -> Callable[[np.ndarray], Any] | None:
    try:
        import faiss  # type: ignore[import-not-found]
    except ImportError:
        return None
    flat = faiss.IndexFlatIP(embeddings.shape[1])
    flat.add(np.ascontiguousarray(embeddings))
    return lambda query: flat.search(query[np.newaxis, :], 10)


# ---- steps: in-process -----------------------------------------------------------------------


def step_latency(index: ModelIndex, config: argparse.Namespace, rng: np.random.Generator) -> dict[str, Any]:
    embeddings = matrix_of(index)
    bits = len(embeddings)
    queries = near_queries(embeddings, 64, rng)
    functions: dict[str, Callable[[np.ndarray], Any]] = {"host_exact": host_search(index), "floor": floor_search(embeddings)}
    if bits <= config.faiss_max:
        faiss = faiss_search(embeddings)
        if faiss is not None:
            functions["faiss_flat_ip"] = faiss
    result = interleaved(functions, queries, config.repetitions(bits), config.budget)
    result["bits_returned_p50"] = float(np.median([len(host_search(index)(q).rows) for q in queries[:16]]))
    functions.clear()
    gc.collect()
    return result


def server_search(bits: int) -> Search:
    """The approximate search `serve` uses by default for a library of this size."""
    return SearchPolicy(mode="approximate").for_bits(bits)


def step_approximate(index: ModelIndex, config: argparse.Namespace, rng: np.random.Generator) -> dict[str, Any]:
    """Latency and recall of the server's default approximate search against exact, on the same queries."""
    bits = index.bit_count
    count = config.approximate_queries(bits)
    queries = near_queries(matrix_of(index), count, rng)
    approximate = server_search(bits)
    exact_top = [host_search(index, EXACT, 10, "bit")(q).rows for q in queries]
    exact_full = [host_search(index)(q).rows for q in queries]
    latency = interleaved({"approximate": host_search(index, approximate), "exact": host_search(index)},
                          queries, config.repetitions(bits), config.budget)
    identical = np.mean([np.array_equal(host_search(index, approximate)(q).rows, rows) for q, rows in zip(queries, exact_full)])
    default_recall = np.mean([len(np.intersect1d(host_search(index, approximate, 10, "bit")(q).rows, truth)) / 10
                              for q, truth in zip(queries, exact_top)])
    pools = {}
    for oversample in config.oversamples:
        search = Search(approximate=True, oversample=oversample)
        recalls, times = [], []
        deadline = time.perf_counter() + config.budget
        for query, truth in zip(queries, exact_top):
            started = time.perf_counter()
            found = host_search(index, search, 10, "bit")(query).rows
            times.append(time.perf_counter() - started)
            recalls.append(len(np.intersect1d(found, truth)) / len(truth))
            if time.perf_counter() > deadline and len(recalls) >= 20:
                break
        pools[oversample] = {"recall_at_10": float(np.mean(recalls)), "min_recall": float(np.min(recalls)),
                             "queries": len(recalls), "p50_bit10": float(np.median(times)),
                             "falls_back_to_exact": max(oversample, 40) >= bits // 2}
    return {"queries": count, "oversample": approximate.oversample, "latency": latency, "recall_at_10": float(default_recall),
            "identical_1500_token_results": float(identical), "sweep": pools,
            "difficulty": difficulty(index, queries[:20]), "profile": profile_approximate(index, queries[:32], config)}


def difficulty(index: ModelIndex, queries: np.ndarray) -> dict[str, float]:
    """How hard the queries are for sign codes: near-ties around the 10th bit, and how deep in
    Hamming order the true top 10 lie (the pool an approximate search needs to find them all)."""
    embeddings, codes = matrix_of(index), index.libraries[0].sign_codes
    gaps, crowd, depth = [], [], []
    for query in queries:
        scores = embeddings @ query
        top = np.argpartition(scores, len(scores) - 11)[-11:]
        top = top[np.argsort(-scores[top])]
        gaps.append(float(scores[top[9]] - scores[top[10]]))
        crowd.append(int(np.count_nonzero(scores >= scores[top[9]] - 0.02)))
        distances = hamming_distances(codes, query).astype(np.int64)
        # position in (distance, row) order of the deepest of the true top 10
        deepest = max(int(np.count_nonzero((distances < distances[row]) | ((distances == distances[row]) & (np.arange(len(distances)) < row))))
                      for row in top[:10])
        depth.append(deepest + 1)
    return {"gap_10_11_p50": float(np.median(gaps)), "within_0.02_of_10th_p50": float(np.median(crowd)),
            "pool_needed_p50": float(np.percentile(depth, 50)), "pool_needed_p90": float(np.percentile(depth, 90)),
            "pool_needed_max": float(max(depth))}


@contextlib.contextmanager
def timing_calls(phases: dict[str, float]) -> Iterator[None]:
    """Accumulate the time spent in the engine's building blocks while rank() runs, whatever its shape."""
    originals = {"hamming": (engine, "hamming_distances"), "pool selection": (np, "argpartition"),
                 "gather": (ModelIndex, "gather"), "select": (engine, "select")}
    saved = {name: getattr(owner, attribute) for name, (owner, attribute) in originals.items()}

    def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                phases[name] = phases.get(name, 0.0) + time.perf_counter() - started
        return wrapper
    try:
        for name, (owner, attribute) in originals.items():
            setattr(owner, attribute, timed(name, saved[name]))
        yield
    finally:
        for name, (owner, attribute) in originals.items():
            setattr(owner, attribute, saved[name])


def profile_approximate(index: ModelIndex, queries: np.ndarray, config: argparse.Namespace) -> dict[str, float]:
    """The server's default approximate rank() taken apart (1500 tokens): median seconds per phase.
    `other` is the rest: masks, sort keys, the re-scoring product, Python."""
    search = server_search(index.bit_count)
    samples: dict[str, list[float]] = {}
    deadline = time.perf_counter() + config.budget
    for query in queries:
        phases: dict[str, float] = {}
        with timing_calls(phases):
            started = time.perf_counter()
            rank(index, query, granted=EVERYONE, count=COUNT, count_type="token", search=search)
            total = time.perf_counter() - started
        phases["other"] = total - sum(phases.values())
        phases["rank_total"] = total
        for name, seconds in phases.items():
            samples.setdefault(name, []).append(seconds)
        if time.perf_counter() > deadline:
            break
    return {name: float(np.median(values)) for name, values in samples.items()}


def step_fixtures(workdir: Path, rng: np.random.Generator) -> dict[str, Any] | None:
    """Recall on real ada-002 vectors: perturbed bits and midpoints of two bits as queries."""
    if not FIXTURES.is_dir():
        say(f"fixtures: {FIXTURES} is absent; skipped")
        return None
    cache = workdir / "fixtures-compiled"
    shutil.rmtree(cache, ignore_errors=True)
    catalog = load_catalog(FIXTURES, cache_dir=cache)
    index = catalog.models[ADA_002]
    mask = index.visible_rows(EVERYONE)  # duplicates across the files are ranked once
    embeddings = np.concatenate([library.embeddings for library in index.libraries])
    rows = np.arange(len(embeddings)) if mask is None else np.flatnonzero(mask)
    visible = len(rows)
    perturbed = embeddings[rows] + rng.standard_normal((len(rows), embeddings.shape[1]), dtype=np.float32) * np.float32(
        0.3 / np.sqrt(embeddings.shape[1]))
    pairs = rng.choice(rows, size=(100, 2))
    midpoints = embeddings[pairs[:, 0]] + embeddings[pairs[:, 1]]
    queries = np.concatenate([perturbed, midpoints]).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    result: dict[str, Any] = {"bits": int(index.bit_count), "visible_bits": visible, "queries": len(queries), "runs": []}
    for k in (5, 10):
        truths = [host_search(index, EXACT, k, "bit")(q).rows for q in queries]
        for oversample in (20, 30, 1000):
            pool = max(oversample, 4 * k)
            found = [host_search(index, Search(approximate=True, oversample=oversample), k, "bit")(q).rows for q in queries]
            recall = np.mean([len(np.intersect1d(f, t)) / len(t) for f, t in zip(found, truths)])
            result["runs"].append({"k": k, "oversample": oversample, "pool": min(pool, visible),
                                   "falls_back_to_exact": pool >= visible // 2, "recall": float(recall)})
    # The candidate pool alone (no fallback): how many of the true top 10 are among the nearest codes.
    codes = np.concatenate([library.sign_codes for library in index.libraries], axis=1)
    truths = [host_search(index, EXACT, 10, "bit")(q).rows for q in queries]
    hidden = np.ones(len(embeddings), dtype=bool)
    hidden[rows] = False
    for pool in (10, 20, 30, 40):
        hits = []
        for query, truth in zip(queries, truths):
            distances = hamming_distances(codes, query).astype(np.int32)
            distances[hidden] = 1 << 20
            nearest = np.argsort(distances, kind="stable")[:pool]
            hits.append(len(np.intersect1d(nearest, truth)) / len(truth))
        result.setdefault("candidate_pool_recall_at_10", {})[pool] = float(np.mean(hits))
    shutil.rmtree(cache, ignore_errors=True)
    return result


def step_encoding(index: ModelIndex, config: argparse.Namespace, rng: np.random.Generator) -> dict[str, Any]:
    queries = near_queries(matrix_of(index), 16, rng)
    selections = [host_search(index)(q) for q in queries]
    result: dict[str, Any] = {"bits_in_result": float(np.median([len(s.rows) for s in selections]))}
    for selection in selections:  # the first read of each record pages it in: not what is measured here
        build_result(index, selection, parse_omit(""))
    for omit_text in ("embedding", ""):
        omit = parse_omit(omit_text)
        for fmt in ("json", "msgpack"):
            binary = fmt == "msgpack"
            render = render_msgpack if binary else render_json
            build_times, render_times, sizes = [], [], []
            deadline = time.perf_counter() + config.budget / 2
            for repetition in range(config.encoding_repetitions):
                selection = selections[repetition % len(selections)]
                t0 = time.perf_counter()
                content = build_result(index, selection, omit, binary_embeddings=binary)
                t1 = time.perf_counter()
                body = render(content)
                t2 = time.perf_counter()
                build_times.append(t1 - t0)
                render_times.append(t2 - t1)
                sizes.append(len(body))
                if time.perf_counter() > deadline and repetition >= 4:
                    break
            result[f"{fmt} omit={omit_text!r}"] = {
                "build": float(np.median(build_times)), "render": float(np.median(render_times)),
                "total": float(np.median(np.add(build_times, render_times))), "bytes": int(np.median(sizes))}
    timing = interleaved({"exact": host_search(index), "approximate": host_search(index, Search(approximate=True))},
                         queries, 30, config.budget / 2)
    result["rank_exact_p50"] = timing["exact"]["p50"]
    result["rank_approximate_p50"] = timing["approximate"]["p50"]
    return result


# ---- steps: compiling ------------------------------------------------------------------------


def ensure_json_library(workdir: Path, index: ModelIndex, bits: int, seed: int) -> Path:
    """A real version-1 JSON file of the synthetic library (base64 embeddings), reused when present."""
    path = workdir / f"json-{label(bits)}" / "library.json"
    marker = path.with_suffix(".params")
    params = json.dumps(generator_params(bits, seed))
    if path.exists() and marker.exists() and marker.read_text() == params:
        return path
    say(f"compile: writing {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    library, embeddings = index.libraries[0], matrix_of(index)
    with open(path.with_suffix(".tmp"), "w") as handle:
        handle.write('{"version":1,"embedding_model":' + json.dumps(ADA_002) + ',"bits":[')
        for row in range(bits):
            record = library.record(row)
            bit = {"text": record["text"], "embedding": encode_embedding(embeddings[row]),
                   "token_count": int(library.token_counts[row]), "info": record["info"]}
            handle.write(("," if row else "") + json.dumps(bit, separators=(",", ":")))
        handle.write("]}")
    path.with_suffix(".tmp").rename(path)
    marker.write_text(params)
    return path


COMPILE_CHILD = """
import json, resource, sys, time
started = time.perf_counter()
from pathlib import Path
from host.store import load_library
imported = time.perf_counter()
library, compiled = load_library(Path(sys.argv[1]), Path(sys.argv[2]), name="library")
done = time.perf_counter()
assert compiled, "expected a compilation"
print(json.dumps({"seconds": done - imported, "with_imports": done - started, "bits": library.bit_count,
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def step_compile(workdir: Path, index: ModelIndex, bits: int, seed: int, breakdown: bool) -> dict[str, Any]:
    source = ensure_json_library(workdir, index, bits, seed)
    target = workdir / f"json-{label(bits)}" / "compiled"
    result: dict[str, Any] = {"json_bytes": source.stat().st_size}
    shutil.rmtree(target, ignore_errors=True)
    say(f"compile {label(bits)}: load_library from scratch in a fresh process")
    child = subprocess.run([sys.executable, "-c", COMPILE_CHILD, str(source), str(target)], capture_output=True,
                           text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=3600, check=False)
    if child.returncode:
        raise RuntimeError(f"compile child failed: {child.stderr[-2000:]}")
    result.update(json.loads(child.stdout.strip().splitlines()[-1]))
    result["bits_per_second"] = bits / result["seconds"]
    if breakdown:
        t0 = time.perf_counter()
        data = read_library_file(source)
        t1 = time.perf_counter()
        parsed = parse_library(data)
        del data
        t2 = time.perf_counter()
        shutil.rmtree(target, ignore_errors=True)
        stat = source.stat()
        write_compiled(parsed, target, SourceKey(stat.st_size, stat.st_mtime_ns, "0" * 64), "library")
        t3 = time.perf_counter()
        open_compiled(target, source)
        t4 = time.perf_counter()
        result["phases"] = {"read_and_json_loads": t1 - t0, "parse_library": t2 - t1, "write_compiled": t3 - t2,
                            "open_compiled": t4 - t3}
        del parsed
        gc.collect()
    shutil.rmtree(target, ignore_errors=True)
    return result


# ---- servers ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def query_body(query: np.ndarray, **extra: Any) -> bytes:
    encoded = base64.b64encode(np.asarray(query, dtype="<f4").tobytes()).decode()
    return json.dumps({"query_embedding": encoded, "count": COUNT, "count_type": "token", **extra}).encode()


def post(port: int, body: bytes, accept: str = "application/json", timeout: float = 120) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST", "/", body, {"Content-Type": "application/json", "Accept": accept})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


class Server:
    """`python -m host serve` in its own process group, on 127.0.0.1 only."""

    def __init__(self, workdir: Path, libraries: Path, *, workers: int = 1, search: str | None = None,
                 environment: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.started = time.perf_counter()
        command = [sys.executable, "-m", "host", "serve", "--libraries", str(libraries), "--host", "127.0.0.1",
                   "--port", str(self.port), "--workers", str(workers), "--log-level", "warning"]
        if search:
            command += ["--search", search]
        self.log_path = workdir / f"server-{self.port}.log"
        self.log = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop())
        # cwd=workdir: no access.SECRET.json from the project folder is picked up.
        self.process = subprocess.Popen(command, cwd=workdir, stdout=self.log, stderr=subprocess.STDOUT,
                                        env={**os.environ, "PYTHONPATH": str(ROOT), **(environment or {})},
                                        start_new_session=True)

    def first_answer(self, body: bytes, timeout: float) -> float:
        """Seconds from the spawn to the first 200 answer to POST /."""
        deadline = self.started + timeout
        while time.perf_counter() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                status, answer = post(self.port, body, timeout=max(1.0, deadline - time.perf_counter()))
            except (ConnectionError, OSError):
                time.sleep(0.02)
                continue
            if status != 200:
                raise RuntimeError(f"server answered {status}: {answer[:300]!r}")
            return time.perf_counter() - self.started
        raise RuntimeError(f"no answer within {timeout} s; log: {self.log_path}")

    def loaded_line(self) -> str:
        return next((line for line in self.log_path.read_text().splitlines() if line.startswith("loaded ")), "")

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=15)
        self.log.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *problem: object) -> None:
        self.stop()


def step_coldstart(workdir: Path, folder: Path, bodies: list[bytes]) -> dict[str, Any]:
    with Server(workdir, folder) as server:
        seconds = server.first_answer(bodies[0], timeout=300)
        loaded = server.loaded_line()
        started = time.perf_counter()
        post(server.port, bodies[1])
        second = time.perf_counter() - started
    return {"first_answer": seconds, "second_answer": second, "server_says": loaded}


# ---- memory ----------------------------------------------------------------------------------


def process_tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending.extend(children.get(pid, []))
    return tree


def mapped_here(path: Path) -> bool:
    """Whether this process maps `path`: its mapping would take a share of the server's PSS."""
    return str(path.resolve()) in Path("/proc/self/maps").read_text()


def smaps_rollup(pid: int) -> dict[str, int]:
    values = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, _, rest = line.partition(":")
        values[name.strip()] = int(rest.split()[0]) * 1024
    return values


def command_line(pid: int) -> str:
    with contextlib.suppress(OSError):
        parts = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        text = " ".join(part.decode(errors="replace") for part in parts if part)
        if " serve " in f" {text} ":
            return "serve (main)"
        return "resource tracker" if "resource_tracker" in text else "worker" if "multiprocessing" in text else text[:60]
    return "?"


def step_memory(workdir: Path, folder: Path, bodies: list[bytes]) -> dict[str, Any]:
    matrix = folder / ".compiled" / "bench" / "embeddings.npy"
    result: dict[str, Any] = {"matrix_bytes": matrix.stat().st_size, "queries": len(bodies),
                              "mapped_by_this_process": mapped_here(matrix)}
    for workers in (1, 2):
        with Server(workdir, folder, workers=workers, search="exact") as server:
            server.first_answer(bodies[0], timeout=300)
            # Two threads of short connections, so both workers get queries.
            errors: list[str] = []

            def send(port: int, part: list[bytes], errors: list[str]) -> None:
                for body in part:
                    status, _ = post(port, body, timeout=60)
                    if status != 200:
                        errors.append(str(status))
            threads = [threading.Thread(target=send, args=(server.port, bodies[i::2], errors)) for i in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=300)
            processes = []
            for pid in process_tree(server.process.pid):
                with contextlib.suppress(OSError):
                    rollup = smaps_rollup(pid)
                    processes.append({"pid": pid, "role": command_line(pid), "rss": rollup.get("Rss", 0),
                                      "pss": rollup.get("Pss", 0), "pss_anon": rollup.get("Pss_Anon", 0),
                                      "pss_file": rollup.get("Pss_File", 0), "shared_clean": rollup.get("Shared_Clean", 0)})
            result[f"workers={workers}"] = {"processes": processes, "errors": errors,
                                            "rss_total": sum(p["rss"] for p in processes),
                                            "pss_total": sum(p["pss"] for p in processes)}
    return result


# ---- HTTP with wrk ---------------------------------------------------------------------------

WRK_SCRIPT = r"""
-- POST / with one query embedding. In "vary" mode four base64 characters that hold only the
-- lowest mantissa byte of four floats change per request: the ranking is the same work, but
-- every request misses the host's answer cache (keyed by the exact vector bytes). Each run
-- starts its counter at its own offset, so no run repeats another's vectors.
local counter = 0
local alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local threads = {}
local prefix, embedding, suffix, accept, mode

function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end

function init(args)
  local file = io.open(args[1], "r")
  local body = file:read("*a")
  file:close()
  accept, mode = args[2], args[3]
  local offset = tonumber(args[4])
  local s, e = body:find('"query_embedding": "', 1, true)
  local close = body:find('"', e + 1, true)
  prefix, embedding, suffix = body:sub(1, e), body:sub(e + 1, close - 1), body:sub(close)
  counter = offset + id * 1000000
end

local function char(n) return alphabet:sub(n % 64 + 1, n % 64 + 1) end

function request()
  local vector = embedding
  if mode == "vary" then
    counter = counter + 1
    local n = counter
    vector = embedding:sub(1, 16) .. char(n) .. embedding:sub(18, 32) .. char(math.floor(n / 64))
          .. embedding:sub(34, 48) .. char(math.floor(n / 4096)) .. embedding:sub(50, 64)
          .. char(math.floor(n / 262144)) .. embedding:sub(66)
  end
  return wrk.format("POST", "/", {["Content-Type"] = "application/json", ["Accept"] = accept},
                    prefix .. vector .. suffix)
end

function done(summary, latency, requests)
  io.write(string.format('WRK_RESULT {"requests": %d, "duration_us": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, ' ..
    '"max_us": %d, "mean_us": %f, "status_errors": %d, "socket_errors": %d, "timeouts": %d, "bytes": %d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write, summary.errors.timeout, summary.bytes))
end
"""


def check_vary_mode(query: np.ndarray) -> None:
    """The Lua edit must change only low mantissa bits (never NaN or a different vector in effect)."""
    encoded = base64.b64encode(np.asarray(query, dtype="<f4").tobytes()).decode()
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    changed = list(encoded)
    for position in (16, 32, 48, 64):
        changed[position] = alphabet[(alphabet.index(changed[position]) + 37) % 64]
    vector = np.frombuffer(base64.b64decode("".join(changed)), dtype="<f4")
    difference = np.abs(vector - query)
    assert np.isfinite(vector).all() and np.count_nonzero(difference) <= 4 and difference.max() < 1e-4, difference.max()


WRK_RUNS = iter(range(1, 1 << 20))  # each run's vectors start at its own offset: no cross-run cache hits


def run_wrk(workdir: Path, port: int, body: bytes, accept: str, mode: str, seconds: float,
            connections: int = 2) -> dict[str, Any]:
    script, body_file = workdir / "post.lua", workdir / f"body-{port}.json"
    offset = next(WRK_RUNS) * 2_000_000
    script.write_text(WRK_SCRIPT)
    body_file.write_bytes(body)
    command = ["wrk", f"-t{connections}", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "30s", "-s", str(script),
               f"http://127.0.0.1:{port}/", "--", str(body_file), accept, mode, str(offset)]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 120, check=False)
    line = next((line for line in finished.stdout.splitlines() if line.startswith("WRK_RESULT ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no result: {finished.stdout[-1000:]} {finished.stderr[-1000:]}")
    raw = json.loads(line.removeprefix("WRK_RESULT "))
    return {"p50": raw["p50_us"] / 1e6, "p90": raw["p90_us"] / 1e6, "p99": raw["p99_us"] / 1e6,
            "requests": raw["requests"], "requests_per_second": raw["requests"] / (raw["duration_us"] / 1e6),
            "errors": raw["status_errors"] + raw["socket_errors"] + raw["timeouts"],
            "bytes_per_response": raw["bytes"] / max(1, raw["requests"])}


HTTP_CONFIGS = {  # name: (--search, extra environment)
    "auto": (None, {}),
    "auto, 1 BLAS thread": (None, {"OPENBLAS_NUM_THREADS": "1"}),
    "exact": ("exact", {}),
    "exact, 1 BLAS thread": ("exact", {"OPENBLAS_NUM_THREADS": "1"}),
}


def step_http(workdir: Path, folder: Path, bits: int, query: np.ndarray, seconds: float, configs: list[str],
              single_connection: bool) -> dict[str, Any]:
    """wrk runs: the first configuration in JSON (new and repeated queries) and msgpack, the others
    in JSON; with `single_connection`, every configuration once more with one connection."""
    check_vary_mode(query)
    body = query_body(query)
    result = {}
    for position, config in enumerate(configs):
        search, environment = HTTP_CONFIGS[config]
        runs = [("json", "vary", 2), ("json", "fixed", 2), ("msgpack", "vary", 2)] if position == 0 else [("json", "vary", 2)]
        if single_connection or position == 0:
            runs.append(("json", "vary", 1))
        with Server(workdir, folder, search=search, environment=environment) as server:
            server.first_answer(body, timeout=300)
            for kind, mode, connections in runs:
                name = f"{config} / {kind} / {mode}" + (" / 1 connection" if connections == 1 else "")
                say(f"http {label(bits)}: wrk {name} for {seconds:.0f} s")
                result[name] = run_wrk(workdir, server.port, body, f"application/{kind}", mode, seconds, connections)
    return result


# ---- the run ---------------------------------------------------------------------------------


def parse_sizes(text: str) -> list[int]:
    sizes = []
    for part in text.split(","):
        part = part.strip()
        if part in SIZES:
            sizes.append(SIZES[part])
        else:
            multiplier = {"k": 1_000, "m": 1_000_000}.get(part[-1:].lower(), 1)
            sizes.append(int(float(part[:-1] if multiplier > 1 else part) * multiplier))
    return sorted(set(sizes))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1k, 10k, 100k with fewer repetitions (< 2 minutes once the libraries exist)")
    parser.add_argument("--sizes", help="comma-separated library sizes, e.g. 1k,10k,100k,1M (default: 1k,10k,100k,1M; --quick: 1k,10k,100k)")
    parser.add_argument("--steps", default=",".join(ALL_STEPS), help=f"comma-separated steps (default: all): {', '.join(ALL_STEPS)}")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "polymath-host-bench",
                        help="where synthetic libraries are generated and kept for the next run (default: %(default)s)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also save every raw number to FILE")
    parser.add_argument("--seed", type=int, default=20240611, help="seed of the synthetic libraries and queries")
    parser.add_argument("--http-seconds", type=float, help="wrk duration per run (default 10; --quick 3)")
    parser.add_argument("--faiss-max", type=int, default=100_000,
                        help="largest size compared with faiss IndexFlatIP (it copies the matrix; default %(default)s)")
    return parser


def configure(args: argparse.Namespace) -> argparse.Namespace:
    quick = args.quick
    args.sizes_list = parse_sizes(args.sizes or ("1k,10k,100k" if quick else "1k,10k,100k,1M"))
    args.steps_set = {step.strip() for step in args.steps.split(",") if step.strip()}
    unknown = args.steps_set - set(ALL_STEPS)
    if unknown:
        raise SystemExit(f"unknown steps: {', '.join(sorted(unknown))}; choose from {', '.join(ALL_STEPS)}")
    args.budget = 3.0 if quick else 30.0
    args.repetitions = lambda bits: (100 if bits <= 10_000 else 30 if bits <= 100_000 else 10) if quick else \
        (400 if bits <= 10_000 else 100 if bits <= 100_000 else 30)
    args.approximate_queries = lambda bits: 100 if quick or bits >= 1_000_000 else 200
    args.oversamples = (250, 1000, 4000) if quick else (250, 500, 1000, 2000, 4000, 8000)
    args.encoding_repetitions = 10 if quick else 40
    args.http_seconds = args.http_seconds or (3.0 if quick else 10.0)
    args.compile_sizes = [bits for bits in args.sizes_list if bits in ((10_000,) if quick else (10_000, 100_000))]
    return args


def main(argv: list[str] | None = None) -> int:
    args = configure(build_parser().parse_args(argv))
    run_started = time.perf_counter()
    args.workdir.mkdir(parents=True, exist_ok=True)
    steps = args.steps_set
    machine = {"cpus": os.cpu_count(), "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
               "python": platform.python_version(), "numpy": np.__version__, "platform": platform.platform()}
    with contextlib.suppress(ImportError):
        import faiss  # type: ignore[import-not-found]
        machine["faiss"] = faiss.__version__
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        git = ["git", "-C", str(ROOT)]
        machine["commit"] = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False).stdout.strip()
        changed = subprocess.run([*git, "status", "--porcelain", "--", "host"], capture_output=True, text=True, check=False).stdout.split("\n")
        machine["uncommitted_host_files"] = [line[3:] for line in changed if line.strip()]
    results: dict[str, Any] = {"command": " ".join(["scripts/bench.py", *(argv if argv is not None else sys.argv[1:])]),
                               "machine": machine, "sizes": {}, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    if "http" in steps and shutil.which("wrk") is None:
        say("wrk is not installed: the http step is skipped. Install it with: apt-get update && apt-get install -y wrk")
        steps = steps - {"http"}
    say(f"sizes {', '.join(label(b) for b in args.sizes_list)}; steps {', '.join(s for s in ALL_STEPS if s in steps)}; workdir {args.workdir}")
    mid = 100_000 if 100_000 in args.sizes_list else max((b for b in args.sizes_list if b <= 100_000), default=None)
    for bits in args.sizes_list:
        rng = np.random.default_rng([args.seed, bits])
        folder = ensure_library(args.workdir, bits, args.seed)
        index = open_index(folder, bits)
        say(f"{label(bits)}: warming the page cache")
        warm(matrix_of(index))
        entry: dict[str, Any] = {"load_average_before": [round(value, 2) for value in os.getloadavg()]}
        results["sizes"][bits] = entry
        if "latency" in steps:
            say(f"{label(bits)}: exact latency vs floor")
            entry["latency"] = step_latency(index, args, rng)
        if "approximate" in steps and bits >= 10_000:
            say(f"{label(bits)}: approximate latency and recall")
            entry["approximate"] = step_approximate(index, args, rng)
        if "encoding" in steps and bits == mid:
            say(f"{label(bits)}: response building")
            entry["encoding"] = step_encoding(index, args, rng)
        if "compile" in steps and bits in args.compile_sizes:
            entry["compile"] = step_compile(args.workdir, index, bits, args.seed, breakdown=True)
        # Servers next: this process lets go of the matrix first, so that it takes no share of
        # the servers' PSS (the page cache stays warm).
        queries = near_queries(matrix_of(index), 2 + (20 if args.quick else 60) + 1, rng)
        bodies = [query_body(query) for query in queries]
        del index
        gc.collect()
        if "coldstart" in steps:
            say(f"{label(bits)}: cold start")
            entry["coldstart"] = step_coldstart(args.workdir, folder, bodies[:2])
        if "memory" in steps and bits == mid:
            say(f"{label(bits)}: memory with 1 and 2 workers")
            entry["memory"] = step_memory(args.workdir, folder, bodies[2:-1])
        if "http" in steps and bits in (10_000, 100_000):
            configs = ["auto", "auto, 1 BLAS thread"]
            if bits >= 100_000:
                configs += ["exact"] if args.quick else ["exact", "exact, 1 BLAS thread"]
            entry["http"] = step_http(args.workdir, folder, bits, queries[-1], args.http_seconds, configs,
                                      single_connection=not args.quick)
        entry["load_average"] = [round(value, 2) for value in os.getloadavg()]
    if "fixtures" in steps:
        say("fixtures: recall on the real ada-002 libraries")
        results["fixtures"] = step_fixtures(args.workdir, np.random.default_rng(args.seed))
    results["seconds"] = time.perf_counter() - run_started
    print(report(results, args))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
        say(f"raw numbers in {args.json}")
    say(f"done in {results['seconds']:.0f} s")
    return 0


# ---- the report ------------------------------------------------------------------------------


def report(results: dict[str, Any], args: argparse.Namespace) -> str:
    sizes: dict[int, dict[str, Any]] = results["sizes"]
    machine = results["machine"]
    out = [f"## polymath-host benchmark ({results['started']}, {results['seconds']:.0f} s)\n",
           f"`{results['command']}` on {machine['cpus']} CPUs, {machine['memory_gib']} GiB, Python {machine['python']}, "
           f"numpy {machine['numpy']}, faiss {machine.get('faiss', 'not installed')}; {machine['platform']}; "
           f"commit {machine.get('commit', '?')}"
           + (f" with uncommitted changes to {', '.join(machine['uncommitted_host_files'])}" if machine.get("uncommitted_host_files") else "")
           + "\n"]
    loads = "; ".join(f"{label(bits)}: {entry['load_average_before'][0]:.1f} -> {entry.get('load_average', ['?'])[0]}"
                      for bits, entry in sizes.items())
    out.append(f"1-minute load average before -> after each size (2 cores; others share the machine): {loads}\n")
    rows = []
    for bits, entry in sizes.items():
        latency = entry.get("latency")
        if latency:
            host, floor, faiss = latency["host_exact"], latency["floor"], latency.get("faiss_flat_ip")
            rows.append([label(bits), ms(host["p50"]), ms(host["p99"]), ms(floor["p50"]), ms(floor["p99"]),
                         ratio(host["p50"], floor["p50"]), ratio(host["min"], floor["min"]), ms(faiss["p50"]) if faiss else "-",
                         ratio(faiss["p50"], floor["p50"]) if faiss else "-", host["n"], ms(NOTES_FLOOR_P50.get(bits))])
    if rows:
        out.append(table("Exact ranking in-process (host.engine.rank, 1500 tokens) vs the floor, ms",
                         ["bits", "host p50", "host p99", "floor p50", "floor p99", "host/floor p50", "host/floor min", "faiss p50",
                          "faiss/floor", "samples", "notes' floor p50"], rows,
                         "floor = `E @ q` + `np.argpartition` top 10 on the same memory-mapped matrix; "
                         "measured interleaved, same queries; `min` (the fastest of each) is the least noisy ratio on a "
                         "shared machine. Target: host/floor <= 1.2 at 100k."))
    rows, recall_rows, profile_rows, hard_rows = [], [], [], []
    parts = ("hamming", "pool selection", "gather", "select", "other")
    for bits, entry in sizes.items():
        approximate = entry.get("approximate")
        if not approximate:
            continue
        latency = approximate["latency"]
        floor = entry.get("latency", {}).get("floor", {}).get("p50")
        rows.append([label(bits), approximate["oversample"], ms(latency["approximate"]["p50"]), ms(latency["approximate"]["p99"]),
                     ms(latency["exact"]["p50"]), ratio(latency["approximate"]["p50"], floor),
                     f"{approximate['recall_at_10']:.4f}", f"{approximate['identical_1500_token_results']:.3f}", approximate["queries"]])
        for oversample, pool in approximate["sweep"].items():
            recall_rows.append([label(bits), oversample, f"{pool['recall_at_10']:.4f}", f"{pool['min_recall']:.1f}",
                                ms(pool["p50_bit10"]), pool["queries"], "yes" if pool["falls_back_to_exact"] else "no"])
        profile = approximate["profile"]
        profile_rows.append([label(bits), *(ms(profile.get(p, 0.0)) for p in parts), ms(profile["rank_total"])])
        hard = approximate["difficulty"]
        hard_rows.append([label(bits), f"{hard['gap_10_11_p50']:.4f}", f"{hard['within_0.02_of_10th_p50']:.0f}",
                          f"{hard['pool_needed_p50']:.0f}", f"{hard['pool_needed_p90']:.0f}", f"{hard['pool_needed_max']:.0f}"])
    if rows:
        out.append(table("Approximate search as served by default (sign codes; oversample max(1000, bits/250)), ms",
                         ["bits", "oversample", "p50", "p99", "exact p50", "approx/floor", "recall@10", "same 1500-token result",
                          "queries"], rows, "Targets: recall@10 >= 0.99; 1M in <= 50 ms p50. Below 100k bits `auto` serves exact."))
        out.append(table("Recall@10 against exact by oversample (count=10 bits)",
                         ["bits", "oversample", "recall@10", "worst query", "p50 ms", "queries", "falls back to exact"], recall_rows))
        out.append(table("How hard the queries are (20 queries)",
                         ["bits", "score gap #10-#11", "bits within 0.02 of #10", "pool for all top 10: p50", "p90", "max"], hard_rows,
                         "The pool is the position, in Hamming-distance order, of the deepest of the exact top 10."))
        out.append(table("Where the default approximate rank() spends its time (median ms per query, 1500 tokens)",
                         ["bits", *parts, "rank() total"], profile_rows,
                         "Measured by timing the engine's own calls inside rank(): hamming_distances, np.argpartition, "
                         "ModelIndex.gather, select; `other` is the rest (masks, sort keys, the re-scoring product, Python)."))
    fixtures = results.get("fixtures")
    if fixtures:
        rows = [[run["k"], run["oversample"], run["pool"], "yes" if run["falls_back_to_exact"] else "no", f"{run['recall']:.4f}"]
                for run in fixtures["runs"]]
        pools = ", ".join(f"{pool}: {value:.3f}" for pool, value in fixtures["candidate_pool_recall_at_10"].items())
        out.append(table(f"Real ada-002 fixtures ({fixtures['visible_bits']} distinct bits, {fixtures['queries']} queries: "
                         "perturbed bits and midpoints of two bits)",
                         ["k", "oversample", "pool", "falls back to exact", "recall@k"], rows,
                         f"Share of the exact top 10 among the nearest sign codes alone, by pool size: {pools}."))
    for bits, entry in sizes.items():
        encoding = entry.get("encoding")
        if not encoding:
            continue
        rows = []
        for name, value in encoding.items():
            if isinstance(value, dict):
                rows.append([name, ms(value["build"]), ms(value["render"]), ms(value["total"]), f"{value['bytes']:,}",
                             ratio(value["total"], encoding["rank_exact_p50"]), ratio(value["total"], encoding["rank_approximate_p50"])])
        out.append(table(f"Response building at {label(bits)} ({encoding['bits_in_result']:.0f} bits in a 1500-token result), ms",
                         ["format", "build_result", "render", "total", "bytes", "/ exact rank", "/ approx rank"], rows,
                         f"rank() p50 in the same step: exact {ms(encoding['rank_exact_p50'])} ms, "
                         f"approximate {ms(encoding['rank_approximate_p50'])} ms."))
    rows = []
    for bits, entry in sizes.items():
        compiled = entry.get("compile")
        if compiled:
            phases = compiled.get("phases", {})
            rows.append([label(bits), f"{compiled['json_bytes'] / 1e6:,.0f}", f"{compiled['seconds']:.2f}",
                         f"{compiled['bits_per_second']:,.0f}", f"{compiled['json_bytes'] / compiled['seconds'] / 1e6:.0f}",
                         f"{compiled['peak_rss_bytes'] / 2**20:,.0f}",
                         " / ".join(f"{phases[p]:.2f}" for p in ("read_and_json_loads", "parse_library", "write_compiled", "open_compiled")) if phases else "-"])
    if rows:
        largest = max(bits for bits, entry in sizes.items() if entry.get("compile"))
        throughput = sizes[largest]["compile"]["bits_per_second"]
        memory_ratio = sizes[largest]["compile"]["peak_rss_bytes"] / sizes[largest]["compile"]["json_bytes"]
        json_1m = sizes[largest]["compile"]["json_bytes"] * 1_000_000 / largest
        out.append(table("Compiling a JSON library file (host.store.load_library, fresh process)",
                         ["bits", "JSON MB", "seconds", "bits/s", "MB/s", "peak RSS MiB", "read+loads / parse / write / open s"], rows,
                         f"1M is not compiled from JSON here: a ~{json_1m / 1e9:.1f} GB file, over the default 8 GiB "
                         f"--max-library-bytes. Extrapolated at {label(largest)}'s rate: ~{1_000_000 / throughput:.0f} s, "
                         f"and ~{memory_ratio * json_1m / 2**30:.0f} GiB peak memory ({memory_ratio:.1f}x the file)."))
    rows = []
    for bits, entry in sizes.items():
        cold = entry.get("coldstart")
        if cold:
            rows.append([label(bits), f"{cold['first_answer']:.2f}", ms(cold["second_answer"]), cold["server_says"]])
    if rows:
        out.append(table("Cold start: spawn `python -m host serve` to the first 200 answer (compiled library, warm page cache)",
                         ["bits", "first answer s", "next query ms", "server's own line"], rows, left=4))
    for bits, entry in sizes.items():
        memory = entry.get("memory")
        if not memory:
            continue
        rows = []
        for workers in (1, 2):
            run = memory[f"workers={workers}"]
            for process in run["processes"]:
                rows.append([f"{workers}", process["pid"], process["role"], f"{process['rss'] / 2**20:,.0f}",
                             f"{process['pss'] / 2**20:,.0f}", f"{process['pss_file'] / 2**20:,.0f}", f"{process['pss_anon'] / 2**20:,.0f}"])
            rows.append([f"{workers}", "", "**total**", f"{run['rss_total'] / 2**20:,.0f}", f"{run['pss_total'] / 2**20:,.0f}", "", ""])
        out.append(table(f"Server memory at {label(bits)} (--search exact, after queries; matrix {memory['matrix_bytes'] / 2**20:,.0f} MiB), MiB",
                         ["workers", "pid", "process", "RSS", "PSS", "PSS file", "PSS anon"], rows, left=3,
                         note="RSS counts shared pages in every process; PSS splits them: the total PSS is what the host really costs."
                         + (" (Warning: the benchmark process still mapped the matrix, so it took a share of the PSS.)"
                            if memory["mapped_by_this_process"] else f" Measured after {memory['queries']} queries.")))
    rows = []
    for bits, entry in sizes.items():
        for name, run in (entry.get("http") or {}).items():
            original = ORIGINAL_HOST_HTTP_P50.get(bits)
            rows.append([label(bits), name, ms(run["p50"]), ms(run["p99"]), f"{run['requests_per_second']:.1f}", run["requests"],
                         run["errors"], f"{run['bytes_per_response'] / 1024:.1f}", f"{original / run['p50']:,.0f}x" if original else "-"])
    if rows:
        out.append(table(f"HTTP: wrk -t2 -c2 -d{args.http_seconds:.0f}s (-t1 -c1 where marked), POST / with a 1500-token query, one uvicorn worker",
                         ["bits", "search / format / query", "p50 ms", "p99 ms", "req/s", "requests", "errors", "KiB/answer",
                          "faster than original"], rows, left=2,
                         note="`auto` is exact below 100k bits and approximate from 100k (the default settings); "
                         "`1 BLAS thread`: the server run with OPENBLAS_NUM_THREADS=1. "
                         "`vary`: each request changes the lowest mantissa byte of 4 floats, so every request misses the answer "
                         "cache and is ranked; `fixed`: the same body every time (answer-cache hits after the first). Original host p50 (PERFORMANCE-NOTES): 108 ms at 1k, "
                         "1.15 s at 10k, 13 s at 100k. wrk shares the 2 cores with the server."))
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
