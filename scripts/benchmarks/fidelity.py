"""Step `fidelity`: how close the local model's int8 vectors are to its fp32 ones, which decides the default.

Two corpora: the sample library with its drafts (397 passages of the King James Bible, the vectors
every text query against it is compared with) and this project's own documentation (README and
docs/*.md, chunked as `polymath-host import` chunks them: modern technical English with code and
tables). Each passage is embedded in fp32 and in int8.

- cosine: each passage's int8 vector against its fp32 vector (min, 1st percentile, median);
- recall@10: the ten nearest passages an fp32 query finds in the fp32 library (the reference)
  against those found by an int8 query in the fp32 library (a host embedding queries in int8
  over a library imported in fp32), by an fp32 query in the int8 library (the reverse), and with
  both in int8. Queries: every passage's own text (the passage itself left out of both lists)
  and a dozen questions in other words.

The rule of issue 21: int8 is the import default only if min cosine >= 0.99 and every recall@10
>= 0.98 on both corpora; `verdict` applies it.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np

from host.embedders.minilm import MiniLMEmbedder, missing_requirement
from host.importer.file_chunks import chunk_file
from host.importer.pipeline import DEFAULT_CHUNK_TOKENS
from host.importer.sources import SourceFile

from .config import Config
from .report import ROOT, say, table
from .step import ONCE, Numbers, Results, Step

MIN_COSINE = 0.99
MIN_RECALL = 0.98
K = 10
SAMPLE_FILES = (ROOT / "libraries" / "sample.json", ROOT / "libraries" / "access" / "unpublished" / "drafts.json")
SAMPLE_QUESTIONS = (
    "a great fish swallowed the prophet", "love your enemies and pray for them that persecute you",
    "in the beginning God created the heaven and the earth", "the Lord is my shepherd, I shall not want",
    "charity suffereth long and is kind", "vanity of vanities, all is vanity",
    "a son who wasted his inheritance comes home to his father", "thrown into a den of lions for praying",
    "who can find a virtuous woman? her price is far above rubies", "a light from heaven on the road to Damascus",
    "storm at sea and a shipwreck on an island", "where were you when I laid the foundations of the earth?",
)
DOCS_QUESTIONS = (
    "how do I make some bits private to a token", "what happens when I press Ctrl-C during an import",
    "how fast is a query on a million bits", "which HTTP status means my token expired",
    "can I use Ollama to embed text queries", "how are long sections cut into chunks",
    "what does the server do when a library file changes", "how do I run the tests",
    "how much memory does the server use", "what is the canonical id of a bit",
    "how do I call the host from LangChain", "why is the first query after start slower",
)


def sample_corpus() -> list[str]:
    texts = []
    for path in SAMPLE_FILES:
        texts += [bit["text"] for bit in json.loads(path.read_text(encoding="utf-8"))["bits"]]
    return texts


def docs_corpus(count_tokens: Any) -> list[str]:
    """This project's README and docs/*.md, chunked as the importer does."""
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    texts: list[str] = []
    for path in paths:
        source = SourceFile(path, path.name, "markdown")
        for part in chunk_file(source, path.read_bytes(), count_tokens, None, DEFAULT_CHUNK_TOKENS):
            texts += [text for text, _, _ in part.bits]
    return list(dict.fromkeys(texts))  # each text once


def stored_sample_vectors() -> np.ndarray:
    vectors = []
    for path in SAMPLE_FILES:
        vectors += [np.frombuffer(base64.b64decode(bit["embedding"]), "<f4")
                    for bit in json.loads(path.read_text(encoding="utf-8"))["bits"]]
    return np.stack(vectors)


def nearest(library: np.ndarray, queries: np.ndarray, leave_out: np.ndarray | None) -> np.ndarray:
    """(queries, K) rows of the K best-scoring library rows; row `leave_out[i]` never counts for query i."""
    scores = queries.astype(np.float64) @ library.astype(np.float64).T
    if leave_out is not None:
        scores[np.arange(len(queries)), leave_out] = -np.inf
    return np.argsort(-scores, axis=1, kind="stable")[:, :K]


def recall(found: np.ndarray, reference: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / K for a, b in zip(found, reference, strict=True)]))


def compare(texts: list[str], questions: tuple[str, ...], fp32: MiniLMEmbedder, int8: MiniLMEmbedder) -> Numbers:
    """The cosine and recall@10 figures of one corpus (see the module docstring)."""
    library = {"fp32": fp32.embed(texts), "int8": int8.embed(texts)}
    asked = {"fp32": fp32.embed(list(questions)), "int8": int8.embed(list(questions))}
    cosines = np.sum(library["fp32"].astype(np.float64) * library["int8"], axis=1)
    own = np.arange(len(texts))

    def top(lib: str, query: str) -> np.ndarray:
        return np.concatenate([nearest(library[lib], library[query], own), nearest(library[lib], asked[query], None)])

    reference = top("fp32", "fp32")
    return {
        "passages": len(texts), "questions": len(questions),
        "cosine": {"min": float(cosines.min()), "p1": float(np.percentile(cosines, 1)),
                   "median": float(np.median(cosines))},
        "recall_at_10": {"int8_queries_fp32_library": recall(top("fp32", "int8"), reference),
                         "fp32_queries_int8_library": recall(top("int8", "fp32"), reference),
                         "int8_queries_int8_library": recall(top("int8", "int8"), reference)},
    }


def verdict(corpora: dict[str, Numbers]) -> dict[str, Any]:
    """Issue 21's rule over every corpus: int8 becomes the default only if all of it holds."""
    worst_cosine = min(numbers["cosine"]["min"] for numbers in corpora.values())
    worst_recall = min(value for numbers in corpora.values() for value in numbers["recall_at_10"].values())
    return {"min_cosine": worst_cosine, "min_recall_at_10": worst_recall,
            "int8_default": worst_cosine >= MIN_COSINE and worst_recall >= MIN_RECALL}


def measure(config: Config) -> Numbers:
    fp32 = MiniLMEmbedder(precision="fp32", threads=0)
    int8 = MiniLMEmbedder(precision="int8", threads=0)
    say("fidelity: the sample library")
    sample = sample_corpus()
    corpora = {"sample library": compare(sample, SAMPLE_QUESTIONS, fp32, int8)}
    stored = stored_sample_vectors().astype(np.float64)
    corpora["sample library"]["fp32_vs_stored_min_cosine"] = float(
        np.min(np.sum(fp32.embed(sample).astype(np.float64) * stored, axis=1)))
    say("fidelity: the project's documentation")
    corpora["documentation"] = compare(docs_corpus(fp32.count_tokens), DOCS_QUESTIONS, fp32, int8)
    return {"corpora": corpora, "verdict": verdict(corpora)}


def report(results: Results, config: Config) -> list[str]:
    figures = results.get("fidelity")
    if not figures:
        return []
    rows = []
    for name, numbers in figures["corpora"].items():
        cosine, recalls = numbers["cosine"], numbers["recall_at_10"]
        rows.append([name, numbers["passages"], f"{cosine['min']:.4f}", f"{cosine['p1']:.4f}", f"{cosine['median']:.4f}",
                     f"{recalls['int8_queries_fp32_library']:.3f}", f"{recalls['fp32_queries_int8_library']:.3f}",
                     f"{recalls['int8_queries_int8_library']:.3f}"])
    decided = figures["verdict"]
    note = (f"Rule: int8 is the default if min cosine >= {MIN_COSINE} and recall@10 >= {MIN_RECALL} everywhere. "
            f"Worst: cosine {decided['min_cosine']:.4f}, recall@10 {decided['min_recall_at_10']:.3f}: "
            f"int8 default {'holds' if decided['int8_default'] else 'does not hold'}. Queries: each passage's own "
            "text (itself left out) and a dozen questions; the reference is fp32 queries on the fp32 library.")
    return [table("int8 against fp32, all-MiniLM-L6-v2", ["corpus", "passages", "cosine min", "p1", "median",
                                                          "recall@10 int8 q / fp32 lib", "fp32 q / int8 lib",
                                                          "int8 q / int8 lib"], rows, note=note)]


def unavailable() -> str | None:
    problem = missing_requirement()
    return None if problem is None else f"fidelity: skipped ({problem})"


STEP = Step("fidelity", "int8 against fp32 vectors of the local model: cosine and recall@10, the default's rule",
            ONCE, measure, report, unavailable)
