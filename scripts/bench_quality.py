#!/usr/bin/env python3
"""Answer quality (issues 31, 38): nDCG@10 of the host's modes on public test collections, beside
references, and whether each mode's score can say "nothing here".

For each collection of ../shared/ir/ (CISI, CACM; BEIR layout), as a publisher would:
  1. every document is written as a Markdown file (front matter `title`, `url:
     https://example.org/<collection>/<_id>`) and imported with `python -m host import` (once: a
     later run with the same --work and the same documents reuses the library, and the compiled store);
  2. the library is served by a real `serve` (the local MiniLM embedder, fp32);
  3. every judged query is asked over HTTP: the default (no mode: hybrid), and each mode; and so
     are the 80 questions about something else of ../shared/ir/offtopic/;
  4. the answers' bits are mapped to documents by URL (each document's best bit) and scored with
     nDCG@10 as trec_eval defines it (scripts/benchmarks/quality.py); each answer's best score
     (`details.best_score`, checked against its first bit's) gives the threshold that keeps the
     best answer of 90% of the judged questions, and the share of the others it turns away.
In the same run, on the same library: bm25s (k1 1.2, b 0.75, Snowball) with Lucene's 33 English
stop words (bm25s's `en`) and with its own larger list (`english_plus`, NLTK's), exact dense search
on the bits' own vectors (the queries embedded by the served host's /v1/embeddings), and the
reciprocal-rank fusion (k = 60) of each bm25s with it. Goals: keyword within 0.005 of bm25s+,
the default >= both fusions, and the default turning away >= 95% of the off-topic questions, on
every collection.

    python scripts/bench_quality.py                       # both collections, Markdown on stdout
    python scripts/bench_quality.py --collections cisi --work /tmp/quality

Needs `pip install -e '.[embed,import,bench]'` (bm25s). Progress on stderr. The import takes about
20 s a collection on 2 cores (minutes on a busy machine; a --work kept between runs skips it);
the queries a few seconds.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchmarks.quality import (  # noqa: E402
    KEPT_SHARE,
    Collection,
    bm25s_rankings,
    dense_rankings,
    documents_of,
    mean_ndcg,
    read_collection,
    reciprocal_rank_fusion,
    threshold_keeping,
    turned_away,
    write_markdown,
)

from host.library.embeddings import decode_embedding  # noqa: E402
from host.service.harness import child_environment, start_host  # noqa: E402

IR = ROOT.parent / "shared" / "ir"
MODES: dict[str, dict[str, str]] = {"default": {}, "vector": {"mode": "vector"}, "keyword": {"mode": "keyword"},
                                    "hybrid": {"mode": "hybrid"}}
BITS_ASKED = 50  # bits a query asks for: enough to name 10 documents when some have several bits
DEPTH = 1000  # rows each reference ranks
SUGGESTIONS = (0.30, 0.35, 0.40, 0.45, 0.50)  # fixed thresholds tried on every collection at once


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def import_library(collection: Collection, work: Path, *, fresh: bool = False) -> Path:
    """The collection imported as a library in `work`; the one imported before from the same
    documents when there is one (unless `fresh`): an import takes minutes on a busy machine."""
    markdown = work / collection.name / "markdown"
    library = work / collection.name / "libraries" / f"{collection.name}.json"
    stamp = library.with_suffix(".documents-sha256")
    digest = documents_digest(collection)
    if not fresh and library.is_file() and stamp.is_file() and stamp.read_text() == digest:
        say(f"{collection.name}: the library imported before from the same documents ({library})")
        return library
    count = write_markdown(collection, markdown)
    say(f"{collection.name}: {count:,} documents written as Markdown; importing")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "host", "import", str(markdown), "--out", str(library), "--no-cache",
                           "--quiet"], env=child_environment(), capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"import of {collection.name} failed:\n{done.stderr}")
    say(f"{collection.name}: imported in {time.perf_counter() - started:.1f} s")
    stamp.write_text(digest)
    return library


def documents_digest(collection: Collection) -> str:
    return hashlib.sha256(json.dumps(collection.documents, sort_keys=True).encode()).hexdigest()


def host_answers(url: str, questions: list[str], collection: str,
                 fields: dict[str, str]) -> tuple[list[list[str]], list[float]]:
    """Each question's documents in the host's order and its best score (0 for an empty answer)."""
    rankings, best = [], []
    with httpx.Client(base_url=url, timeout=120) as client:
        for question in questions:
            response = client.post("/", json={"query": question, "count": BITS_ASKED, "count_type": "bit",
                                              "omit": "embedding", **fields})
            response.raise_for_status()
            answer = response.json()
            bits = answer["bits"]
            rankings.append(documents_of((bit["info"]["url"] for bit in bits), collection))
            best.append(best_score(answer))
    return rankings, best


def best_score(answer: dict[str, Any]) -> float:
    """The answer's `details.best_score`, which must be its first bit's rank score (none asked: no
    threshold); 0 for an answer without bits."""
    bits = answer["bits"]
    if not bits:
        return 0.0
    first = bits[0]
    score = float(first["score"] if "score" in first else first["similarity"])
    if answer["details"].get("best_score") != score:
        raise SystemExit(f"details.best_score {answer['details'].get('best_score')} is not the first bit's {score}")
    return score


def query_vectors(url: str, questions: list[str], model: str) -> np.ndarray:
    vectors = []
    with httpx.Client(base_url=url, timeout=120) as client:
        for start in range(0, len(questions), 64):
            response = client.post("/v1/embeddings", json={"model": model, "input": questions[start : start + 64],
                                                          "encoding_format": "base64"})
            response.raise_for_status()
            vectors += [np.frombuffer(base64.b64decode(item["embedding"]), "<f4") for item in response.json()["data"]]
    return np.stack(vectors)


def measure(collection: Collection, offtopic: list[str], work: Path, fresh: bool) -> dict[str, dict[str, float]]:
    library_path = import_library(collection, work, fresh=fresh)
    library = json.loads(library_path.read_text())
    bits = library["bits"]
    urls = [bit["info"]["url"] for bit in bits]
    texts = [f"{bit['info'].get('title', '')} {bit['text']}" for bit in bits]
    vectors = np.stack([decode_embedding(bit["embedding"]) for bit in bits])
    questions = [query["text"] for query in collection.queries]
    host = start_host(library_path.parent, "--cache-dir", str(work / collection.name / "compiled"),
                      timeout=300)
    ndcg: dict[str, float] = {}
    away: dict[str, float] = {}
    thresholds: dict[str, float] = {}
    best_scores: dict[str, list[float]] = {}
    offtopic_scores: dict[str, list[float]] = {}
    try:
        for name, fields in MODES.items():
            started = time.perf_counter()
            ranked, best = host_answers(host.url, questions, collection.name, fields)
            ndcg[name] = mean_ndcg({query["_id"]: ranking for query, ranking in zip(collection.queries, ranked)},
                                   collection)
            thresholds[name] = threshold_keeping(best)
            elsewhere = host_answers(host.url, offtopic, collection.name, fields)[1]
            away[name] = turned_away(elsewhere, thresholds[name])
            best_scores[name], offtopic_scores[name] = best, elsewhere
            say(f"{collection.name}: {name} nDCG@10 {ndcg[name]:.4f}, threshold {thresholds[name]:.3f} turns away "
                f"{away[name]:.1%} of the off-topic questions ({time.perf_counter() - started:.1f} s)")
        dense = dense_rankings(vectors, query_vectors(host.url, questions, library["embedding_model"]), DEPTH)
    finally:
        host.stop()
    lexical = bm25s_rankings(texts, questions, DEPTH, "en")
    plus = bm25s_rankings(texts, questions, DEPTH, "english_plus")
    references = {"bm25s": lexical, "bm25s+": plus, "dense": dense,
                  "rrf": [reciprocal_rank_fusion(a, b) for a, b in zip(lexical, dense)],
                  "rrf+": [reciprocal_rank_fusion(a, b) for a, b in zip(plus, dense)]}
    for name, rows in references.items():
        rankings = {query["_id"]: documents_of((urls[row] for row in ranked), collection.name)
                    for query, ranked in zip(collection.queries, rows)}
        ndcg[name] = mean_ndcg(rankings, collection)
        say(f"{collection.name}: {name} nDCG@10 {ndcg[name]:.4f}")
    return {"ndcg": ndcg, "turned_away": away, "threshold": thresholds, "best": best_scores, "offtopic": offtopic_scores}


def report(results: dict[str, dict[str, Any]]) -> str:
    columns = ["default", "vector", "keyword", "hybrid", "bm25s", "bm25s+", "dense", "rrf", "rrf+"]
    lines = ["| nDCG@10 | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    lines += [f"| {name} | " + " | ".join(f"{figures['ndcg'][column]:.3f}" for column in columns) + " |"
              for name, figures in results.items()]
    modes = list(MODES)
    lines += ["", f"| turned away (threshold: keeps {KEPT_SHARE:.0%} of the collection's own) | "
              + " | ".join(modes) + " |", "|---|" + "---:|" * len(modes)]
    lines += [f"| {name} | " + " | ".join(f"{figures['turned_away'][mode]:.1%} ({figures['threshold'][mode]:.3f})"
                                         for mode in modes) + " |" for name, figures in results.items()]
    lines += ["", "| fixed threshold: kept / turned away | " + " | ".join(modes) + " |", "|---|" + "---:|" * len(modes)]
    for threshold in SUGGESTIONS:
        for name, figures in results.items():
            cells = [f"{1 - turned_away(figures['best'][mode], threshold):.0%} / "
                     f"{turned_away(figures['offtopic'][mode], threshold):.0%}" for mode in modes]
            lines.append(f"| {threshold:.2f}, {name} | " + " | ".join(cells) + " |")
    suggested = {mode: max((threshold for threshold in SUGGESTIONS
                            if all(1 - turned_away(figures["best"][mode], threshold) >= KEPT_SHARE
                                   for figures in results.values())), default=None) for mode in modes}
    lines += ["", "Suggested thresholds (the highest above that keeps 90% of every collection's own): " + ", ".join(
        f"{mode} {'none' if value is None else f'{value:.2f}'}" for mode, value in suggested.items())]
    goals = [""]
    for name, figures in results.items():
        ndcg, away = figures["ndcg"], figures["turned_away"]
        goals.append(f"- {name}: keyword - bm25s+ = {ndcg['keyword'] - ndcg['bm25s+']:+.3f} (goal within 0.005), "
                     f"keyword - bm25s = {ndcg['keyword'] - ndcg['bm25s']:+.3f}; default - rrf = "
                     f"{ndcg['default'] - ndcg['rrf']:+.3f}, default - rrf+ = {ndcg['default'] - ndcg['rrf+']:+.3f} "
                     f"(goals >= 0); default turns away {away['default']:.1%} (goal >= 95%)")
    return "\n".join([*lines, *goals])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collections", default="cisi,cacm", help="folders of --ir to measure (default cisi,cacm)")
    parser.add_argument("--ir", type=Path, default=IR, help=f"the collections' folder (default {IR})")
    parser.add_argument("--work", type=Path, help="where libraries are imported and compiled, kept for the next "
                                                  "run (default: a temporary folder, removed afterwards)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder afterwards")
    parser.add_argument("--fresh", action="store_true", help="import again even when --work holds the library")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="quality-"))
    offtopic_file = args.ir / "offtopic" / "queries.jsonl"
    if not offtopic_file.is_file():
        raise SystemExit(f"{offtopic_file}: no off-topic questions (see --ir)")
    offtopic = [json.loads(line)["text"] for line in offtopic_file.read_text().splitlines() if line.strip()]
    say(f"load average {os.getloadavg()[0]:.1f}; work in {work}")
    try:
        results: dict[str, dict[str, Any]] = {}
        for name in args.collections.split(","):
            folder = args.ir / name
            if not folder.is_dir():
                raise SystemExit(f"{folder}: no such collection (see --ir)")
            results[name] = measure(read_collection(folder), offtopic, work, args.fresh)
    finally:
        if args.work is None and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    say(f"load average {os.getloadavg()[0]:.1f} at the end")
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
