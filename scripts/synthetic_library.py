#!/usr/bin/env python3
"""Synthetic library files written as real JSON (format version 1), chunk by chunk: the input of
the compile and ten-million-bit benchmarks (scripts/bench_compile.py, scripts/bench_10m.py).

The vectors follow scripts/benchmarks/libraries.py's recipe: unit float32 vectors, each a cluster
centre plus Gaussian noise of relative norm `SPREAD` (a bit is ~0.7 cosine from its centre), 200
centres unless told otherwise; token counts 50-400. With `--subclusters N`, each centre has N
sub-centres (`SUB_SPREAD` from it) and bits gather around those instead: topics within topics,
as a large real collection has (many passages per document, many documents per subject).

Rows are generated in chunks from `(seed, bits, start)`, so any block of rows can be made again
without the files (`vectors(...)`): the benchmarks compute exact answers and build faiss on the
very same vectors without parsing JSON. Memory stays at one chunk whatever the size.

    python scripts/synthetic_library.py /work/data/scale/lib10m --bits 10M --dimension 384 --files 10
    python scripts/synthetic_library.py /tmp/lib100k --bits 100k            # 1536 dimensions, one file

Text: `--text long` (the default) is scripts/benchmarks/libraries.py's ~0.75 words per token;
`--text short` is one line of about a dozen words (a 10M library with long texts would need
~30 GB more disk than this machine has to spare: the measurement says so); `--text verses` is
English for keyword search (scripts/bench_keywords.py): ~0.75 words per token drawn from a
word-bigram chain of the sample library's King James verses (scripts/sample_source/), so words
keep their real frequencies and neighbours (7,000 distinct words, Zipf-like) and every bit differs.
"""

from __future__ import annotations

import argparse
import base64
import functools
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchmarks.config import parse_sizes  # noqa: E402

from host.library.embeddings import ADA_002  # noqa: E402

SPREAD = 1.0  # noise norm relative to the unit centre (scripts/benchmarks/libraries.py)
SUB_SPREAD = 0.6  # a sub-centre's distance from its centre, relative
CHUNK = 32_768  # rows generated at a time
TOKENS = (50, 400)
MINILM = "sentence-transformers:all-MiniLM-L6-v2"
VERSES = ROOT / "scripts" / "sample_source" / "kjv-selection.tsv"
VOCABULARY = ["lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "do", "eiusmod",
              "tempor", "incididunt", "ut", "labore", "et", "dolore", "magna", "aliqua", "enim", "ad", "minim", "veniam",
              "quis", "nostrud", "exercitation", "ullamco", "laboris", "nisi", "aliquip", "ex", "ea", "commodo",
              "consequat", "duis", "aute", "irure", "in", "reprehenderit", "voluptate", "velit", "esse"]


@dataclass(frozen=True)
class Recipe:
    """Everything that decides the rows: the same recipe gives the same vectors, tokens and texts."""

    bits: int
    dimension: int = 1536
    clusters: int = 200
    subclusters: int = 0
    seed: int = 0
    text: str = "long"


def centres(recipe: Recipe) -> np.ndarray:
    """The centres bits gather around: `clusters` of them, or `clusters x subclusters` sub-centres."""
    rng = np.random.default_rng(recipe.seed)
    tops = _unit(rng.standard_normal((recipe.clusters, recipe.dimension), dtype=np.float32))
    if not recipe.subclusters:
        return tops
    offsets = rng.standard_normal((recipe.clusters, recipe.subclusters, recipe.dimension), dtype=np.float32)
    offsets *= np.float32(SUB_SPREAD / np.sqrt(recipe.dimension))
    return _unit((tops[:, np.newaxis, :] + offsets).reshape(-1, recipe.dimension))


def chunk(recipe: Recipe, start: int, size: int, where: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows start..start+size: (unit float32 vectors, token counts)."""
    rng = np.random.default_rng([recipe.seed, recipe.bits, start])
    block = rng.standard_normal((size, recipe.dimension), dtype=np.float32)
    block *= np.float32(SPREAD / np.sqrt(recipe.dimension))
    block += where[rng.integers(0, len(where), size)]
    tokens = rng.integers(TOKENS[0], TOKENS[1] + 1, size)
    return _unit(block), tokens


def vectors(recipe: Recipe, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, vectors) chunk by chunk over rows start..stop, without the files."""
    stop = recipe.bits if stop is None else stop
    where = centres(recipe)
    first = start - start % CHUNK
    for chunk_start in range(first, stop, CHUNK):
        block, _ = chunk(recipe, chunk_start, min(CHUNK, recipe.bits - chunk_start), where)
        low, high = max(start, chunk_start), min(stop, chunk_start + len(block))
        yield low, block[low - chunk_start : high - chunk_start]


def texts(recipe: Recipe, start: int, token_counts: np.ndarray) -> list[str]:
    if recipe.text == "verses":
        return verse_texts(recipe, start, token_counts)
    words = np.random.default_rng([recipe.seed, recipe.bits, start, 1]).integers(0, len(VOCABULARY), (len(token_counts), 12))
    if recipe.text == "short":
        return [f"Bit {start + row}: " + " ".join(VOCABULARY[w] for w in words[row]) for row in range(len(token_counts))]
    filler = [VOCABULARY[w] for w in np.random.default_rng(recipe.seed).integers(0, len(VOCABULARY), 2000)]
    return [f"Bit {start + row}. " + " ".join(filler[(start + row) * 7 % 1000 :][: int(tokens * 0.75)])
            for row, tokens in enumerate(token_counts.tolist())]


@functools.cache
def verse_chain() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The sample's verses as a word-bigram chain: (the words, the text as word numbers, each word's
    occurrences grouped by word, where each word's group starts). The next word after w is the word
    after a random occurrence of w: a bigram drawn with its real frequency, in two gathers."""
    said: list[str] = []
    for line in VERSES.read_text().splitlines():
        said += line.split("\t")[3].split()
    words, numbers = np.unique(np.array(said), return_inverse=True)
    numbers = numbers[:-1]  # the last word has no successor: never an occurrence to follow
    occurrences = np.argsort(numbers, kind="stable")
    starts = np.searchsorted(numbers[occurrences], np.arange(len(words) + 1))
    return words, np.append(numbers, 0), occurrences, starts


def verse_texts(recipe: Recipe, start: int, token_counts: np.ndarray) -> list[str]:
    """Rows' texts of ~0.75 words a token, walked along the verse chain (reproducible by chunk)."""
    words, text, occurrences, starts = verse_chain()
    counts = np.diff(starts)
    rng = np.random.default_rng([recipe.seed, recipe.bits, start, 2])
    lengths = np.maximum(1, (token_counts * 0.75).astype(np.int64))
    walked = np.empty((len(token_counts), int(lengths.max()) if len(lengths) else 0), dtype=np.int64)
    current = text[occurrences[rng.integers(0, len(occurrences), len(token_counts))]]
    for step in range(walked.shape[1]):
        walked[:, step] = current
        drawn = starts[current] + (rng.random(len(current)) * counts[current]).astype(np.int64)
        current = text[occurrences[drawn] + 1]
    vocabulary = words.tolist()
    return [" ".join(map(vocabulary.__getitem__, row[:length])) for row, length in zip(walked.tolist(), lengths.tolist())]


def bit_json(row: int, vector: np.ndarray, tokens: int, text: str) -> str:
    # Lorem words are plain ASCII (json.dumps would write them exactly like this); verses may need escapes.
    if '"' in text or "\\" in text:
        text = json.dumps(text)[1:-1]
    return (f'{{"text":"{text}","embedding":"{base64.b64encode(vector.tobytes()).decode()}",'
            f'"token_count":{tokens},"info":{{"url":"https://example.com/synthetic/{row}","title":"Synthetic bit {row}"}}}}')


def file_name(number: int, files: int, folders: int) -> str:
    """part-00.json, ... (as wide as the count needs); with `folders`, spread over publisher folders
    pub-000/, ... in turn, as a host of many writers holds them."""
    name = f"part-{number:0{max(2, len(str(files - 1)))}d}.json"
    return f"pub-{number % folders:0{len(str(folders - 1))}d}/{name}" if folders > 1 else name


def write_files(folder: Path, recipe: Recipe, files: int, model: str, folders: int = 1) -> list[Path]:
    """`files` library files (rows split evenly, in order) named part-00.json, ... (in `folders`
    publisher folders when more than one); returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    where = centres(recipe)
    bounds = np.linspace(0, recipe.bits, files + 1).astype(np.int64).tolist()
    paths = []
    started = time.perf_counter()

    @functools.lru_cache(maxsize=1)  # many small files share a chunk: it is made once, not once per file
    def made(chunk_start: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
        block, tokens = chunk(recipe, chunk_start, min(CHUNK, recipe.bits - chunk_start), where)
        return block, tokens, texts(recipe, chunk_start, tokens)

    for number in range(files):
        path = folder / file_name(number, files, folders)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".json.tmp")
        with temporary.open("w") as handle:
            details = {"synthetic": {**asdict(recipe), "rows": [bounds[number], bounds[number + 1]]}}
            handle.write(f'{{"version":1,"embedding_model":{json.dumps(model)},"details":{json.dumps(details)},"bits":[')
            first = True
            for chunk_start in range(bounds[number] - bounds[number] % CHUNK, bounds[number + 1], CHUNK):
                block, tokens, words = made(chunk_start)
                low, high = max(bounds[number], chunk_start), min(bounds[number + 1], chunk_start + len(block))
                parts = [bit_json(row, block[row - chunk_start], int(tokens[row - chunk_start]), words[row - chunk_start])
                         for row in range(low, high)]
                handle.write(("" if first else ",") + ",".join(parts))
                first = False
            handle.write("]}\n")
        temporary.rename(path)
        paths.append(path)
        if files <= 100 or (number + 1) % (files // 20) == 0:
            print(f"[{time.perf_counter() - started:7.1f} s] {path}: rows {bounds[number]:,}-{bounds[number + 1]:,}, "
                  f"{path.stat().st_size / 1e9:.2f} GB", file=sys.stderr, flush=True)
    return paths


def _unit(rows: np.ndarray) -> np.ndarray:
    rows /= np.linalg.norm(rows, axis=-1, keepdims=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--bits", default="100k", help="e.g. 100k, 1M, 10M (default 100k)")
    parser.add_argument("--dimension", type=int, default=1536)
    parser.add_argument("--files", type=int, default=1, help="library files to split the rows over (default 1)")
    parser.add_argument("--folders", type=int, default=1,
                        help="publisher folders to spread the files over, pub-0/ ... (default 1: none)")
    parser.add_argument("--clusters", type=int, default=200)
    parser.add_argument("--subclusters", type=int, default=0, help="sub-centres per centre (default 0: none)")
    parser.add_argument("--text", choices=["long", "short", "verses"], default="long")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", help=f"embedding model (default {ADA_002} at 1536 dimensions, else {MINILM})")
    args = parser.parse_args(argv)
    recipe = Recipe(bits=parse_sizes(args.bits)[0], dimension=args.dimension, clusters=args.clusters,
                    subclusters=args.subclusters, seed=args.seed, text=args.text)
    model = args.model or (ADA_002 if args.dimension == 1536 else MINILM)
    write_files(args.folder, recipe, args.files, model, args.folders)
    (args.folder / "recipe.params").write_text(json.dumps(asdict(recipe)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
