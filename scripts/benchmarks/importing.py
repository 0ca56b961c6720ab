"""Step `import`: `polymath-host import` throughput on a generated corpus (chunks/s), cold and incremental,
today's importer against this one in the same run.

The corpus: 1,000 files (--quick: 100), mostly Markdown posts with front matter and two to six
headed sections, some HTML pages and some plain text, written from the King James verses the
sample library is built from (`scripts/sample_source/`), shuffled with a fixed seed, so the token
counts are those of real English and every run writes the same corpus.

Three imports of it into one output, with the embeddings cache beside it:
  cold       nothing cached: read, chunk, embed every chunk, validate, write
  unchanged  the same corpus again: every vector from the cache (what a re-publish costs)
  one edit   one document changed: only its chunks embedded again

Embedders: `minilm` (the built-in local sentence-transformers:all-MiniLM-L6-v2: the figure a
publisher sees) and `hashing` (words hashed into 64 dimensions: the importer's own cost, no model).

Issue 21 asked for three times today's chunks per second on this corpus. The machine is shared, so
"today" is measured in the same run: the importer as it was before issue 21 (`BASELINE`, taken
from git with `git archive` and run as `python -m host import` in a process of its own), then this
importer in fp32 and int8, with length bucketing on and off (off: calls of 64 chunks in reading
order, each model run padded to its longest chunk), each cold (empty embeddings cache) and again
unchanged (everything cached). Every run starts its own model from the same graph cache. Besides
wall time: CPU seconds (this process and its children), which a busy machine inflates less.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from host.embedders.graph_cache import CACHE_VARIABLE
from host.embedders.minilm import MiniLMEmbedder, missing_requirement
from host.importer import ImportOptions, import_library
from host.importer.cli import CACHE_SUFFIX, default_concurrency
from host.importer.embedding import Embedder
from host.importer.pipeline import DEFAULT_CHUNK_TOKENS

from .config import Config
from .report import ROOT, say, table
from .step import ONCE, Numbers, Results, Step

VERSES = ROOT / "scripts" / "sample_source" / "kjv-selection.tsv"
BASELINE = "cf63ff1"  # the last commit before issue 21: the importer the issue measured at 8.4 chunks/s
VARIANTS = (  # (name, precision, bucketing), after the baseline
    ("fp32", "fp32", True), ("int8", "int8", True), ("fp32, no bucketing", "fp32", False),
    ("int8, no bucketing", "int8", False),
)
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


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children that have ended."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def baseline_tree(workdir: Path) -> Path:
    """The project's `host` and `access` packages as they were at BASELINE, unpacked under `workdir`."""
    tree = workdir / f"importer-{BASELINE}"
    if not (tree / "host" / "__main__.py").exists():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", BASELINE, "host", "access"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def run_baseline(tree: Path, corpus: Path, out: Path, graphs: Path) -> dict[str, Any]:
    """`python -m host import` of BASELINE's code in a process of its own; its figures."""
    environment = {**os.environ, "PYTHONPATH": str(tree), CACHE_VARIABLE: str(graphs)}
    command = [sys.executable, "-m", "host", "import", str(corpus), "--out", str(out), "--base-url",
               "https://example.com/", "--quiet"]
    cpu, started = cpu_seconds(), time.perf_counter()
    done = subprocess.run(command, cwd=tree, env=environment, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"the baseline importer failed: {done.stderr.strip()[-500:]}")
    said = re.search(r"(\d+) chunks, .*; embedded (\d+)(?: \((\d+) distinct texts\))?", done.stderr)
    assert said is not None, done.stderr
    chunks, embedded = int(said.group(1)), int(said.group(3) or said.group(2))
    return {"seconds": round(seconds, 3), "cpu_seconds": round(cpu_seconds() - cpu, 3), "chunks": chunks,
            "embedded": embedded, "chunks_per_second": round(chunks / seconds, 2)}


def run_variant(corpus: Path, out: Path, precision: str, bucketing: bool, graphs: Path) -> dict[str, Any]:
    """This importer, as `polymath-host import --embedder-precision P` runs it (a fresh model, loaded from
    the graph cache), with length bucketing on or off; its figures."""
    embedder = MiniLMEmbedder(precision=precision, cache_dir=graphs, threads=1, bucketing=bucketing)
    options = ImportOptions(base_url="https://example.com/", cache=out.with_name(out.name + CACHE_SUFFIX),
                            concurrency=default_concurrency(embedder), bucketing=bucketing)
    cpu, started = cpu_seconds(), time.perf_counter()
    report = import_library([corpus], out, embedder, options, say=say)
    seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 3), "cpu_seconds": round(cpu_seconds() - cpu, 3), "chunks": report.bits,
            "embedded": report.embedded_texts, "chunks_per_second": round(report.bits / seconds, 2),
            "read_and_chunk_seconds": round(report.read_seconds, 3)}


def compare_with_baseline(documents: int, workdir: Path, seed: int = 0) -> dict[str, Any]:
    """Today's importer and this one's variants on one corpus: each cold, then unchanged. Today's and
    the bucketed variants run cold twice, in the order A B C ... C B A, so drift on a shared machine
    touches them alike."""
    scratch = Path(tempfile.mkdtemp(prefix="bench-import-compare-", dir=workdir))
    graphs = workdir / "import-graphs"  # built once, shared by every run: cold means "no embeddings cached"
    for precision in ("fp32", "int8"):
        MiniLMEmbedder(precision=precision, cache_dir=graphs).load()
    try:
        corpus = scratch / "corpus"
        words = write_corpus(corpus, documents, seed)
        tree = baseline_tree(workdir)
        twice = ["today", *(name for name, _, bucketing in VARIANTS if bucketing)]
        order = [*twice, *(name for name, _, bucketing in VARIANTS if not bucketing), *reversed(twice)]
        settings = {name: (precision, bucketing) for name, precision, bucketing in VARIANTS}
        runs: dict[str, dict[str, Any]] = {}
        for name in order:
            first = name not in runs
            say(f"import: {name if name != 'today' else f'today ({BASELINE})'}, {documents} documents, cold")
            out = scratch / f"{name.replace(',', '').replace(' ', '-')}-{len(runs.get(name, {}))}" / "bench.json"
            if name == "today":
                measured = [run_baseline(tree, corpus, out, graphs)]
                if first:
                    measured.append(run_baseline(tree, corpus, out, graphs))
            else:
                measured = [run_variant(corpus, out, *settings[name], graphs)]
                if first:
                    measured.append(run_variant(corpus, out, *settings[name], graphs))
            entry = runs.setdefault(name, {"cold": []})
            entry["cold"].append(measured[0])
            if first:
                entry["unchanged"] = measured[1]
        return {"documents": documents, "words": words, "baseline": BASELINE, "cores": default_concurrency(
            MiniLMEmbedder()), "load_average": [round(value, 2) for value in os.getloadavg()], "runs": runs}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def measure(config: Config) -> Numbers:
    documents = 100 if config.quick else 1000
    say(f"import: {documents} documents, hashing embedder")
    figures: Numbers = {"hashing": measure_import(documents, "hashing", workdir=config.workdir)}
    figures["compared"] = compare_with_baseline(documents, config.workdir)
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
    compared = figures["compared"]

    def rate(runs: list[dict[str, Any]]) -> float:  # chunks a second over the runs together
        return sum(run["chunks"] for run in runs) / sum(run["seconds"] for run in runs)

    today = rate(compared["runs"]["today"]["cold"])
    rows = []
    for name, runs in compared["runs"].items():
        cold = runs["cold"]
        cpu = sum(run["cpu_seconds"] for run in cold) / sum(run["embedded"] for run in cold)
        rows.append([name if name != "today" else f"today ({compared['baseline']})", "cold", cold[0]["chunks"],
                     " / ".join(f"{run['seconds']:.0f}" for run in cold), f"{rate(cold):.1f}",
                     f"{rate(cold) / today:.2f}x", f"{cpu * 1000:.0f}"])
        unchanged = runs["unchanged"]
        rows.append(["", "unchanged", unchanged["chunks"], f"{unchanged['seconds']:.1f}",
                     f"{unchanged['chunks_per_second']:.0f}", "", ""])
    parts.append(table(f"`polymath-host import` of {compared['documents']:,} generated documents "
                       f"({compared['words']:,} words), local MiniLM, today's importer and this one in one run",
                       ["importer", "run", "chunks", "seconds (each run)", "chunks/s", "vs today", "CPU ms / chunk"],
                       rows, left=2,
                       note=f"{compared['cores']} cores; load average at the end {compared['load_average']}. Cold: "
                            "no embeddings cached (the model's graph is), run twice in the order today, fp32, int8, "
                            "..., int8, fp32, today (chunks/s over both); unchanged: the same corpus again."))
    return parts


def unavailable() -> str | None:
    problem = missing_requirement()
    return None if problem is None else f"import: skipped ({problem})"


STEP = Step("import", "polymath-host import of a generated corpus: cold, unchanged and after one edit", ONCE,
            measure, report, unavailable)
