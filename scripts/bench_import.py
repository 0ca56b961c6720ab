#!/usr/bin/env python3
"""Import throughput of `polymath-host import` on a generated corpus (chunks/s), cold and incremental.

The corpus: `--documents` files (default 1,000), mostly Markdown posts with front matter and two to
six headed sections, some HTML pages and some plain text, written from the King James verses the
sample library is built from (`scripts/sample_source/`), shuffled with a fixed seed, so the token
counts are those of real English and every run writes the same corpus.

Three imports of it into one output, with the embeddings cache beside it:
  cold       nothing cached: read, chunk, embed every chunk, validate, write
  unchanged  the same corpus again: every vector from the cache (what a re-publish costs)
  one edit   one document changed: only its chunks embedded again

Embedders: `minilm` (the built-in local sentence-transformers:all-MiniLM-L6-v2, when host.embedders
is installed: the figure a publisher sees) and `hashing` (the tests' word-hashing embedder: the
importer's own cost, no model). `measure_import(...)` returns the figures as a dict; run as a
script it prints them as JSON (progress on stderr).
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the word-hashing test embedder

from host.importer import ImportOptions, import_library  # noqa: E402
from host.importer.embedding import Embedder  # noqa: E402
from host.importer.pipeline import DEFAULT_CHUNK_TOKENS  # noqa: E402

VERSES = ROOT / "scripts" / "sample_source" / "kjv-selection.tsv"


def open_bench_embedder(name: str) -> Embedder:
    if name == "hashing":
        hashing: Embedder = importlib.import_module("importer_support").HashingEmbedder()
        return hashing
    if name == "minilm":
        local = importlib.import_module("host.embedders.minilm")  # ImportError: not in this build
        problem = local.missing_requirement()
        if problem:
            raise SystemExit(f"minilm: {problem}")
        embedder: Embedder = local.MiniLMEmbedder(threads=0)
        return embedder
    raise SystemExit(f"unknown embedder {name!r}: hashing or minilm")


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
    report = import_library([corpus], out, embedder, options, say=lambda line: print(line, file=sys.stderr))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=1000)
    parser.add_argument("--embedder", choices=["hashing", "minilm"], default="minilm")
    parser.add_argument("--chunk-tokens", type=int, default=DEFAULT_CHUNK_TOKENS)
    parser.add_argument("--workdir", type=Path, default=None, help="where the corpus is written (default: /tmp)")
    args = parser.parse_args()
    print(json.dumps(measure_import(args.documents, args.embedder, args.chunk_tokens, args.workdir), indent=2))


if __name__ == "__main__":
    main()
