"""Step `constraints`: the constraint engine: text-index build, its size, filtered vs unfiltered ranking.

One synthetic library of 100,000 bits (--quick: 10,000) (1536-d unit vectors; texts of 150-250 words drawn Zipf-wise from a word
list: the words of the KJV selection in scripts/sample_source, the most frequent first, plus a
tail of made-up words for a realistic 40k-word vocabulary; titles, descriptions, URLs and image
URLs made the same way) is compiled once through host.store.compiled.write_compiled into the bench's
workdir and reused. Then, with one BLAS thread (the server's default):

  build        build_text_index time and the bytes of text_index.bin next to embeddings.npy
  constraints  per constraint: matching bits, mask time, and rank() with the constraint vs
               without it (p50 of 15 queries, each a perturbed existing bit); target <= 1.5x
  hybrid       RAGFlow's retrieval core (host.search.query.run_query in hybrid mode, keyword_weight 1 - w, with
               the SDK's defaults: w 0.3, threshold 0.2, top_k 1024) next to rank() unfiltered, p50

The machine is small and shared: compare ratios measured in one run, not absolute times.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from access import ANONYMOUS
from host.catalog.model_index import ModelIndex
from host.constraints import build_text_index, parse_constraint, parse_metadata_condition
from host.constraints.words import words
from host.library.embeddings import ADA_002
from host.library.format import ParsedLibrary
from host.search.engine import rank
from host.search.model_text import constraint_mask
from host.search.query import Query, SearchPolicy, run_query
from host.store.compiled import STORE_FORMAT, Segment, SourceKey, open_segment, write_compiled

from .config import Config
from .report import ROOT, say, table
from .step import ONCE, Numbers, Results, Step

DIMENSION = 1536
VOCABULARY = 40_000
ZIPF = 1.07
TEXT_WORDS = (150, 250)
GENERATOR = 1
SAMPLE = ROOT / "scripts" / "sample_source" / "kjv-selection.tsv"


# ---- a synthetic library -------------------------------------------------------------------------


def word_list(size: int = VOCABULARY, seed: int = 7) -> list[str]:
    """Real words by frequency (the KJV sample), then made-up ones up to `size`."""
    counts = Counter(words(" ".join(line.split("\t")[-1] for line in SAMPLE.read_text().splitlines())))
    known = [word for word, _ in counts.most_common()]
    rng = np.random.default_rng(seed)
    syllables = ["ka", "lo", "mi", "ren", "tu", "sa", "vel", "dor", "qui", "an", "es", "or", "ith", "ul", "be"]
    made_up: set[str] = set()
    while len(known) + len(made_up) < size:
        made_up.add("".join(rng.choice(syllables, size=int(rng.integers(2, 5)))))
    return known + sorted(made_up - set(known))[: size - len(known)]


def zipf_words(rng: np.random.Generator, vocabulary: np.ndarray, count: int) -> np.ndarray:
    weights = 1.0 / np.arange(1, len(vocabulary) + 1) ** ZIPF
    return vocabulary[rng.choice(len(vocabulary), size=count, p=weights / weights.sum())]


def synthetic_library(bits: int, seed: int) -> ParsedLibrary:
    rng = np.random.default_rng(seed)
    vocabulary = np.array(word_list())
    lengths = rng.integers(TEXT_WORDS[0], TEXT_WORDS[1] + 1, size=bits)
    drawn = zipf_words(rng, vocabulary, int(lengths.sum()))
    ends = np.cumsum(lengths)
    texts = [" ".join(drawn[end - length : end]) + "." for end, length in zip(ends, lengths, strict=True)]
    title_words = zipf_words(rng, vocabulary, bits * 5).reshape(bits, 5)
    description_words = zipf_words(rng, vocabulary, bits * 12).reshape(bits, 12)
    records = []
    for row in range(bits):
        info = {
            "url": f"https://library.example.org/{title_words[row, 0]}/{title_words[row, 1]}/{row}",
            "title": " ".join(title_words[row, : 2 + row % 4]).title(),
            "description": " ".join(description_words[row]),
        }
        if row % 3 == 0:
            info["image_url"] = f"https://images.example.org/{row}.png"
        records.append({"text": texts[row], "info": info})
    embeddings = rng.standard_normal((bits, DIMENSION), dtype=np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    return ParsedLibrary(
        embedding_model=ADA_002,
        embeddings=embeddings,
        token_counts=(lengths * 4 // 3).astype(np.int64),
        ids=[f"{row:064x}" for row in range(bits)],
        records=records,
        access_tags=[None] * bits,
        details={"bench_constraints": {"bits": bits, "seed": seed, "generator": GENERATOR}},
    )


def compiled_library(workdir: Path, bits: int, seed: int) -> tuple[Segment, dict[str, float]]:
    """The compiled synthetic library (built once, reused), and the build figures."""
    folder = workdir / f"constraints-{bits}" / "bench"
    source = folder.parent / "bench.json"
    figures_path = folder.parent / "build.json"
    try:
        meta = json.loads((folder / "meta.json").read_text())
        if meta["store_format"] == STORE_FORMAT and meta["details"].get("bench_constraints") == {
            "bits": bits, "seed": seed, "generator": GENERATOR}:
            say(f"reusing {folder}")
            return open_segment(folder), json.loads(figures_path.read_text())
    except (OSError, ValueError, KeyError):
        pass
    say(f"generating {bits:,} bits")
    library = synthetic_library(bits, seed)
    folder.parent.mkdir(parents=True, exist_ok=True)
    source.write_text("{}")
    started = time.perf_counter()
    build_text_index(library.records)
    index_seconds = time.perf_counter() - started
    say(f"build_text_index: {index_seconds:.1f} s; compiling")
    started = time.perf_counter()
    write_compiled(library, folder, SourceKey(0, 0, ""), "bench")
    compile_seconds = time.perf_counter() - started
    figures = {
        "build_text_index_s": index_seconds,
        "write_compiled_s": compile_seconds,
        "text_index_bytes": (folder / "text_index.bin").stat().st_size,
        "embeddings_bytes": (folder / "embeddings.npy").stat().st_size,
        "records_bytes": (folder / "records.bin").stat().st_size,
        "text_words": int(sum(len(words(record["text"])) for record in library.records[:1000]) * bits / 1000),
    }
    figures_path.write_text(json.dumps(figures))
    return open_segment(folder), figures


# ---- measuring ----------------------------------------------------------------------------------


def p50_ms(run: Callable[[], Any], repeat: int) -> float:
    run()  # warm: page cache, lazily computed counts
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


CONSTRAINTS: list[tuple[str, Any]] = [
    ("a common word", "the"),
    ("a mid-frequency word", "mercy"),
    ("a rare word", "kalodor"),
    ("a phrase of common words", '"and the"'),
    ("a phrase", '"the lord"'),
    ("a title word", "title:lord"),
    ("a prefix", "ma*"),
    ("a url phrase", "url:example.org/god"),
    ("boolean", "(god OR lord) NOT title:israel"),
    ("NOT a common word", "NOT the"),
    ("structured", {"and": [{"label": "title", "quoted_term": "lord"}, {"unparsed": "NOT people"}]}),
    ("metadata contains", {"metadata_condition": {"conditions": [
        {"name": "title", "comparison_operator": "contains", "value": "ord"}]}}),
    ("metadata start with", {"metadata_condition": {"conditions": [
        {"name": "url", "comparison_operator": "start with", "value": "https://library.example.org/the"}]}}),
]


def measure_filtered_vs_unfiltered(
    library: Segment, *, repeat: int = 15, count: int = 1500, seed: int = 1
) -> list[dict[str, Any]]:
    """Per constraint: matching bits, mask ms, and rank ms with vs without it (p50), and the ratio."""
    index = ModelIndex.of_segments((library,))
    rng = np.random.default_rng(seed)
    queries = []
    for row in rng.integers(0, library.bit_count, size=repeat + 1):
        vector = library.embeddings[row] + rng.standard_normal(DIMENSION).astype(np.float32) * 0.02
        queries.append((vector / np.linalg.norm(vector)).astype(np.float32))
    turn = iter(range(10**9))

    def query() -> np.ndarray:
        return queries[next(turn) % len(queries)]

    unfiltered = p50_ms(lambda: rank(index, query(), granted=frozenset(), count=count, count_type="token"), repeat)
    rows = []
    for name, value in CONSTRAINTS:
        if isinstance(value, dict) and "metadata_condition" in value:
            node = parse_metadata_condition(value["metadata_condition"])
        else:
            node = parse_constraint(value)
        mask = constraint_mask(node, index)
        mask_ms = p50_ms(lambda node=node: constraint_mask(node, index), repeat)

        def filtered(node: Any = node) -> None:
            rank(index, query(), granted=frozenset(), count=count, count_type="token",
                 constraint=constraint_mask(node, index))

        filtered_ms = p50_ms(filtered, repeat)
        rows.append({"constraint": name, "expression": value, "matching": int(mask.sum()), "mask_ms": mask_ms,
                     "filtered_ms": filtered_ms, "unfiltered_ms": unfiltered, "ratio": filtered_ms / unfiltered})
        say(f"{name}: {rows[-1]['matching']:,} bits, mask {mask_ms:.2f} ms, "
            f"filtered {filtered_ms:.1f} ms vs {unfiltered:.1f} ms")
    return rows


def measure_hybrid(library: Segment, *, repeat: int = 15, count: int = 1500) -> dict[str, Any]:
    """RAGFlow's retrieval (the SDK's defaults: w 0.3, threshold 0.2, top_k 1024) vs rank(), p50 ms."""
    index = ModelIndex.of_segments((library,))
    rng = np.random.default_rng(5)
    vector = library.embeddings[int(rng.integers(library.bit_count))].astype(np.float32)
    question = "what did the lord say to moses about the people of israel"
    hybrid = Query(vector, 1024, "bit", text=question, mode="hybrid", keyword_weight=0.7, score_threshold=0.2)
    policy = SearchPolicy()
    kept = len(run_query(index, hybrid, ANONYMOUS, policy).rows)
    return {"question": question, "kept": kept,
            "hybrid_ms": p50_ms(lambda: run_query(index, hybrid, ANONYMOUS, policy), repeat),
            "rank_ms": p50_ms(lambda: rank(index, vector, granted=frozenset(), count=count, count_type="token"), repeat)}


def measure(config: Config) -> Numbers:
    bits = 10_000 if config.quick else 100_000
    library, build = compiled_library(config.workdir / "constraints", bits, config.seed)
    with threadpool_limits(1):
        return {"bits": bits, "build": build, "constraints": measure_filtered_vs_unfiltered(library),
                "hybrid": measure_hybrid(library)}


def report(results: Results, config: Config) -> list[str]:
    numbers = results.get("constraints")
    if not numbers:
        return []
    build, hybrid = numbers["build"], numbers["hybrid"]
    rows = [[row["constraint"], f"{row['matching']:,}", f"{row['mask_ms']:.2f}", f"{row['filtered_ms']:.1f}",
             f"{row['unfiltered_ms']:.1f}", f"{row['ratio']:.2f}x"] for row in numbers["constraints"]]
    note = (f"build_text_index {build['build_text_index_s']:.1f} s; text_index.bin "
            f"{build['text_index_bytes'] / 2**20:.0f} MiB = {build['text_index_bytes'] / build['embeddings_bytes']:.0%} "
            f"of embeddings.npy. RAGFlow retrieval of a {len(words(hybrid['question']))}-word question "
            "(hybrid, top_k 1024, w 0.3): "
            f"{hybrid['hybrid_ms']:.1f} ms vs rank() unfiltered {hybrid['rank_ms']:.1f} ms. Target: filtered <= 1.5x.")
    return [table(f"Constraint-filtered queries at {numbers['bits']:,} bits (p50, one BLAS thread)",
                  ["constraint", "matching bits", "mask ms", "filtered ms", "unfiltered ms", "ratio"], rows,
                  note=note)]


STEP = Step("constraints", "constraint-filtered ranking vs unfiltered, text-index size, RAGFlow hybrid retrieval",
            ONCE, measure, report)
