"""Synthetic libraries: generated once, written in the compiled form, reused from --workdir.

Unit float32 vectors of dimension 1536 around ~200 cluster centres, 50-400 tokens per bit. A
folder holds a placeholder `bench.json` (what the host discovers) and `.compiled/bench` (what it
serves); a folder whose compiled parameters match is reused. Queries are existing bits plus
noise, not random vectors: random vectors have no real neighbours (see PERFORMANCE-NOTES).
"""

from __future__ import annotations

import contextlib
import gc
import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from host.catalog.generations import load_catalog
from host.catalog.model_index import ModelIndex
from host.library.canonical import canonical_id
from host.library.embeddings import ADA_002
from host.library.format import ParsedLibrary
from host.store.compiled import STORE_FORMAT, SourceKey, file_sha256, write_compiled

from .config import label
from .report import say

DIMENSION = 1536
CLUSTERS = 200
TOKENS = (50, 400)
SPREAD = 1.0  # noise norm relative to the (unit) cluster centre: a bit is ~0.7 cosine from its centre
QUERY_NOISE = 0.5  # a query is an existing bit plus noise of this relative norm (~0.9 cosine to it)
GENERATOR_VERSION = 1
CHUNK = 32_768  # rows generated at a time: memory stays bounded at 1M
VOCABULARY = ["lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "do", "eiusmod",
              "tempor", "incididunt", "ut", "labore", "et", "dolore", "magna", "aliqua", "enim", "ad", "minim", "veniam",
              "quis", "nostrud", "exercitation", "ullamco", "laboris", "nisi", "aliquip", "ex", "ea", "commodo",
              "consequat", "duis", "aute", "irure", "in", "reprehenderit", "voluptate", "velit", "esse"]


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
    words = [VOCABULARY[i] for i in rng.integers(0, len(VOCABULARY), 2000)]
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
