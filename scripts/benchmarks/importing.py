"""Step `import`: `polymath-host import` on a generated corpus: the importer's own cost, and today's
importer against the one before issue 21, in turns.

The corpus: mostly Markdown posts with front matter and two to six headed sections, some HTML
pages and some plain text, written from the King James verses the sample library is built from
(`scripts/sample_source/`), shuffled with a fixed seed, so the token counts are those of real
English and every run writes the same corpus (300 documents: 1,844 chunks of at most 250 tokens).

The importer's own cost: 1,000 documents (--quick: 100) with words hashed into 64 dimensions in
place of a model, imported three times into one output, the embeddings cache beside it:
  cold       nothing cached: read, chunk, embed every chunk, validate, write
  unchanged  the same corpus again: every vector from the cache (what a re-publish costs)
  one edit   one document changed: only its chunks embedded again

Today against before issue 21 (scripts/benchmarks/import_rounds.py, also `scripts/bench_import.py`
with its own options): 300 documents (--quick: 100), the old checkout, today's fp32 and int8 in
turns, two rounds (--quick: one), each a child process run with the local model, cold. No ratio
when the 1-minute load average went above the core count: the run then exits 1 with that line.
"""

from __future__ import annotations

import hashlib
import random
import re
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from host.embedders.minilm import MiniLMEmbedder, missing_requirement
from host.importer import ImportOptions, import_library
from host.importer.embedding import Embedder
from host.importer.pipeline import DEFAULT_CHUNK_TOKENS

from .config import Config
from .import_rounds import BEFORE_21, Rounds, Side, alternate, before_tree, report_rounds
from .report import ROOT, say, table
from .step import ONCE, Numbers, Results, Step

VERSES = ROOT / "scripts" / "sample_source" / "kjv-selection.tsv"
_WORD = re.compile(r"\w+")


class HashingEmbedder:
    """Words hashed into 64 signed dimensions: an embedder that costs next to nothing."""

    model = "bench:hashing-64"
    dimension = 64

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float64)
        for row, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
                vectors[row, digest[0] % self.dimension] += 1.0 if digest[1] & 1 else -1.0
        vectors[:, 0] += (np.linalg.norm(vectors, axis=1) == 0)
        return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def open_bench_embedder(name: str) -> Embedder:
    if name == "hashing":
        return HashingEmbedder()
    return MiniLMEmbedder(threads=0)


def write_corpus(folder: Path, documents: int, seed: int = 0) -> int:
    """`documents` files of writing under `folder`; returns the number of words written."""
    verses = [line.split("\t")[3] for line in VERSES.read_text(encoding="utf-8").splitlines() if line.count("\t") == 3]
    chance = random.Random(seed)
    words = 0

    def paragraph() -> str:
        return " ".join(chance.choice(verses) for _ in range(chance.randint(2, 6)))

    for number in range(documents):
        sections = [(f"Part {index + 1}: {chance.choice(verses).split(',')[0][:40]}",
                     [paragraph() for _ in range(chance.randint(1, 3))]) for index in range(chance.randint(2, 6))]
        title = f"Post {number}: {chance.choice(verses)[:50]}"
        words += sum(len(text.split()) for _, paragraphs in sections for text in paragraphs)
        kind = number % 10
        folder_of = folder / f"{2000 + number % 25}"
        folder_of.mkdir(parents=True, exist_ok=True)
        if kind == 8:
            body = "".join(f"<h2>{heading}</h2>" + "".join(f"<p>{text}</p>" for text in paragraphs)
                           for heading, paragraphs in sections)
            (folder_of / f"page-{number}.html").write_text(
                f"<html><head><title>{title}</title></head><body><nav>Home</nav><main><h1>{title}</h1>{body}"
                "</main></body></html>", encoding="utf-8")
        elif kind == 9:
            body = "\n\n".join(text for _, paragraphs in sections for text in paragraphs)
            (folder_of / f"note-{number}.txt").write_text(f"{title}\n\n{body}\n", encoding="utf-8")
        else:
            body = "\n\n".join(f"## {heading}\n\n" + "\n\n".join(paragraphs) for heading, paragraphs in sections)
            (folder_of / f"post-{number}.md").write_text(
                f"---\ntitle: \"{title}\"\ndescription: Post number {number}.\n---\n\n{body}\n", encoding="utf-8")
    return words


def _run(corpus: Path, out: Path, embedder: Embedder, chunk_tokens: int) -> dict[str, Any]:
    options = ImportOptions(base_url="https://example.com/", chunk_tokens=chunk_tokens,
                            cache=out.with_name(out.name + ".embeddings-cache.sqlite"))
    started = time.perf_counter()
    report = import_library([corpus], out, embedder, options, say=say)
    seconds = time.perf_counter() - started
    return {
        "seconds": round(seconds, 3),
        "read_and_chunk_seconds": round(report.read_seconds, 3),
        "embed_seconds": round(report.embed_seconds, 3),
        "chunks": report.bits,
        "embedded": report.embedded_texts,
        "reused": report.reused,
        "chunks_per_second": round(report.bits / seconds, 1),
        "embedded_per_second": round(report.embedded_texts / report.embed_seconds, 1) if report.embed_seconds else None,
        "failed": len(report.failed),
    }


def measure_import(
    documents: int = 1000,
    embedder: str | Embedder = "hashing",
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    workdir: Path | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Import a generated corpus three times (cold, unchanged, one edit); the figures of each."""
    model = open_bench_embedder(embedder) if isinstance(embedder, str) else embedder
    scratch = Path(tempfile.mkdtemp(prefix="bench-import-", dir=workdir))
    try:
        corpus = scratch / "corpus"
        words = write_corpus(corpus, documents, seed)
        out = scratch / "libraries" / "bench.json"
        cold = _run(corpus, out, model, chunk_tokens)
        unchanged = _run(corpus, out, model, chunk_tokens)
        edited = sorted(corpus.rglob("post-*.md"))[0]
        edited.write_text(edited.read_text(encoding="utf-8") + "\n\nA paragraph added since the last import.\n",
                          encoding="utf-8")
        one_edit = _run(corpus, out, model, chunk_tokens)
        return {
            "embedder": "hashing" if embedder == "hashing" else model.model,
            "documents": documents, "words": words, "chunk_tokens": chunk_tokens,
            "library_bytes": out.stat().st_size,
            "cold": cold, "unchanged": unchanged, "one_edit": one_edit,
        }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def measure(config: Config) -> Numbers:
    documents = 100 if config.quick else 1000
    say(f"import: {documents} documents, hashing embedder")
    figures: Numbers = {"hashing": measure_import(documents, "hashing", workdir=config.workdir)}
    documents = 100 if config.quick else 300
    sides = [Side("before", before_tree(config.workdir), None), Side("fp32", ROOT, None), Side("int8", ROOT, "int8")]
    scratch = Path(tempfile.mkdtemp(prefix="bench-import-rounds-", dir=config.workdir))
    try:
        write_corpus(scratch / "corpus", documents)
        rounds = alternate(sides, scratch / "corpus", documents, scratch, config.workdir / "import-graphs",
                           1 if config.quick else 2)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    figures["rounds"] = rounds.as_json()
    figures["refused"] = rounds.refusal()  # scripts/bench.py exits 1 with it after the report
    return figures


def report(results: Results, config: Config) -> list[str]:
    figures = results.get("import")
    if not figures:
        return []
    parts = []
    hashing = figures["hashing"]
    rows = [["hashing", run.replace("_", " "), hashing[run]["chunks"], hashing[run]["embedded"],
             f"{hashing[run]['seconds']:.1f}", f"{hashing[run]['chunks_per_second']:.1f}",
             f"{hashing[run]['read_and_chunk_seconds']:.1f}"] for run in ("cold", "unchanged", "one_edit")]
    parts.append(table(f"The importer's own cost: {hashing['documents']:,} generated documents, words hashed "
                       "instead of a model", ["embedder", "run", "chunks", "embedded", "seconds", "chunks/s",
                                              "read + chunk s"], rows, left=2))
    rounds = Rounds.from_json(figures["rounds"])
    parts.append(f"### `polymath-host import` today against before issue 21 ({BEFORE_21}), in turns\n\n"
                 + "\n".join(report_rounds(rounds, config.command)) + "\n")
    return parts


def unavailable() -> str | None:
    problem = missing_requirement()
    return None if problem is None else f"import: skipped ({problem})"


STEP = Step("import", "polymath-host import of a generated corpus: its own cost; today against before issue 21", ONCE,
            measure, report, unavailable)
