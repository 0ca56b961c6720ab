#!/usr/bin/env python3
"""Answer quality (issue 31): nDCG@10 of the host's modes on public test collections, beside references.

For each collection of ../shared/ir/ (CISI, CACM; BEIR layout), as a publisher would:
  1. every document is written as a Markdown file (front matter `title`, `url:
     https://example.org/<collection>/<_id>`) and imported with `python -m host import`;
  2. the library is served by a real `serve` (the local MiniLM embedder, fp32);
  3. every judged query is asked over HTTP: the default (no mode: hybrid), and each mode;
  4. the answers' bits are mapped to documents by URL (each document's best bit) and scored with
     nDCG@10 as trec_eval defines it (scripts/benchmarks/quality.py).
In the same run, on the same library: bm25s (k1 1.2, b 0.75, English stop words, Snowball), exact
dense search on the bits' own vectors (the queries embedded by the served host's /v1/embeddings),
and their reciprocal-rank fusion (k = 60). Goals: keyword >= bm25s - 0.005, hybrid and the default
>= that fusion, on every collection.

    python scripts/bench_quality.py                       # both collections, Markdown on stdout
    python scripts/bench_quality.py --collections cisi --work /tmp/quality --keep

Needs `pip install -e '.[embed,import,bench]'` (bm25s). Progress on stderr. The import takes about
20 s a collection on 2 cores; the queries a few seconds.
"""

from __future__ import annotations

import argparse
import base64
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
    Collection,
    bm25s_rankings,
    dense_rankings,
    documents_of,
    mean_ndcg,
    read_collection,
    reciprocal_rank_fusion,
    write_markdown,
)

from host.library.embeddings import decode_embedding  # noqa: E402
from host.service.harness import child_environment, start_host  # noqa: E402

IR = ROOT.parent / "shared" / "ir"
MODES: dict[str, dict[str, str]] = {"default": {}, "vector": {"mode": "vector"}, "keyword": {"mode": "keyword"},
                                    "hybrid": {"mode": "hybrid"}}
BITS_ASKED = 50  # bits a query asks for: enough to name 10 documents when some have several bits
DEPTH = 1000  # rows each reference ranks


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def import_library(collection: Collection, work: Path) -> Path:
    markdown = work / collection.name / "markdown"
    library = work / collection.name / "libraries" / f"{collection.name}.json"
    count = write_markdown(collection, markdown)
    say(f"{collection.name}: {count:,} documents written as Markdown; importing")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "host", "import", str(markdown), "--out", str(library), "--no-cache",
                           "--quiet"], env=child_environment(), capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"import of {collection.name} failed:\n{done.stderr}")
    say(f"{collection.name}: imported in {time.perf_counter() - started:.1f} s")
    return library


def host_rankings(url: str, collection: Collection, fields: dict[str, str]) -> dict[str, list[str]]:
    rankings = {}
    with httpx.Client(base_url=url, timeout=120) as client:
        for query in collection.queries:
            response = client.post("/", json={"query": query["text"], "count": BITS_ASKED, "count_type": "bit",
                                              "omit": "embedding", **fields})
            response.raise_for_status()
            rankings[query["_id"]] = documents_of((bit["info"]["url"] for bit in response.json()["bits"]),
                                                  collection.name)
    return rankings


def query_vectors(url: str, questions: list[str], model: str) -> np.ndarray:
    vectors = []
    with httpx.Client(base_url=url, timeout=120) as client:
        for start in range(0, len(questions), 64):
            response = client.post("/v1/embeddings", json={"model": model, "input": questions[start : start + 64],
                                                          "encoding_format": "base64"})
            response.raise_for_status()
            vectors += [np.frombuffer(base64.b64decode(item["embedding"]), "<f4") for item in response.json()["data"]]
    return np.stack(vectors)


def measure(collection: Collection, work: Path) -> dict[str, float]:
    library_path = import_library(collection, work)
    library = json.loads(library_path.read_text())
    bits = library["bits"]
    urls = [bit["info"]["url"] for bit in bits]
    texts = [f"{bit['info'].get('title', '')} {bit['text']}" for bit in bits]
    vectors = np.stack([decode_embedding(bit["embedding"]) for bit in bits])
    host = start_host(library_path.parent, "--cache-dir", str(work / collection.name / "compiled"),
                      timeout=120)
    try:
        figures = {}
        for name, fields in MODES.items():
            started = time.perf_counter()
            figures[name] = mean_ndcg(host_rankings(host.url, collection, fields), collection)
            say(f"{collection.name}: {name} nDCG@10 {figures[name]:.4f} ({time.perf_counter() - started:.1f} s)")
        questions = [query["text"] for query in collection.queries]
        dense = dense_rankings(vectors, query_vectors(host.url, questions, library["embedding_model"]), DEPTH)
    finally:
        host.stop()
    lexical = bm25s_rankings(texts, questions, DEPTH)
    references = {"bm25s": lexical, "dense": dense,
                  "rrf": [reciprocal_rank_fusion(a, b) for a, b in zip(lexical, dense)]}
    for name, rows in references.items():
        rankings = {query["_id"]: documents_of((urls[row] for row in ranked), collection.name)
                    for query, ranked in zip(collection.queries, rows)}
        figures[name] = mean_ndcg(rankings, collection)
        say(f"{collection.name}: {name} nDCG@10 {figures[name]:.4f}")
    return figures


def report(results: dict[str, dict[str, float]]) -> str:
    columns = ["default", "vector", "keyword", "hybrid", "bm25s", "dense", "rrf"]
    lines = ["| nDCG@10 | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    lines += [f"| {name} | " + " | ".join(f"{figures[column]:.3f}" for column in columns) + " |"
              for name, figures in results.items()]
    goals = []
    for name, figures in results.items():
        goals.append(f"- {name}: keyword - bm25s = {figures['keyword'] - figures['bm25s']:+.3f} (goal >= -0.005); "
                     f"hybrid - rrf = {figures['hybrid'] - figures['rrf']:+.3f}, default - rrf = "
                     f"{figures['default'] - figures['rrf']:+.3f} (goals >= 0)")
    return "\n".join([*lines, "", *goals])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collections", default="cisi,cacm", help="folders of --ir to measure (default cisi,cacm)")
    parser.add_argument("--ir", type=Path, default=IR, help=f"the collections' folder (default {IR})")
    parser.add_argument("--work", type=Path, help="where libraries are written (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep --work afterwards")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="quality-"))
    say(f"load average {os.getloadavg()[0]:.1f}; work in {work}")
    try:
        results: dict[str, dict[str, Any]] = {}
        for name in args.collections.split(","):
            folder = args.ir / name
            if not folder.is_dir():
                raise SystemExit(f"{folder}: no such collection (see --ir)")
            results[name] = measure(read_collection(folder), work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
