"""Answer quality on public test collections (BEIR layout: ../shared/ir/): nDCG@10 as trec_eval
defines it, the collections written as a publisher would write them, and the reference rankings
the host is measured beside (scripts/bench_quality.py runs them all in one go).

References, computed here on the library the host imported (its bits, their titles and texts, their
own vectors), never on the host's answers:
  bm25s    BM25 of the bits' title + text by bm25s (k1 1.2, b 0.75, Lucene's 33 English stop words,
           bm25s's `en`, PyStemmer's English Snowball stemmer): a BM25 done by somebody else
  bm25s+   the same with bm25s's own larger English list (`english_plus`, NLTK's 179 words)
  dense    exact dot products of the query's vector (the host's /v1/embeddings) with every bit's
  rrf      reciprocal-rank fusion of bm25s and dense, k = 60: the textbook way to fuse them
  rrf+     the same of bm25s+ and dense

Whether a score says "nothing here" (`turned_away`): the threshold that keeps the best answer of 90%
of a collection's own judged questions (the 10th percentile of their best scores), and the share of
questions about something else (../shared/ir/offtopic/) whose best answer falls below it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

RRF_K = 60
CUTOFF = 10


@dataclass(frozen=True)
class Collection:
    name: str
    documents: list[dict[str, str]]  # {"_id", "title", "text"}
    queries: list[dict[str, str]]  # {"_id", "text"}: judged queries only
    judgments: dict[str, dict[str, int]]  # query id -> document id -> grade


def read_collection(folder: Path) -> Collection:
    """A BEIR folder: corpus.jsonl, queries.jsonl, qrels/test.tsv (with a header line)."""
    documents = [json.loads(line) for line in (folder / "corpus.jsonl").read_text().splitlines() if line.strip()]
    queries = [json.loads(line) for line in (folder / "queries.jsonl").read_text().splitlines() if line.strip()]
    judgments: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        if line.strip():
            query, document, grade = line.split("\t")
            judgments.setdefault(query, {})[document] = int(grade)
    return Collection(folder.name, documents, [query for query in queries if query["_id"] in judgments], judgments)


def document_url(collection: str, document: str) -> str:
    return f"https://example.org/{collection}/{document}"


def write_markdown(collection: Collection, folder: Path) -> int:
    """One Markdown file per document, with front matter `title` and `url`; returns how many."""
    folder.mkdir(parents=True, exist_ok=True)
    for document in collection.documents:
        front = yaml.safe_dump({"title": document["title"], "url": document_url(collection.name, document["_id"])},
                               allow_unicode=True, sort_keys=False, width=1 << 20)
        (folder / f"{document['_id']}.md").write_text(f"---\n{front}---\n\n{document['text']}\n")
    return len(collection.documents)


def documents_of(urls: Iterable[str], collection: str) -> list[str]:
    """Document ids in rank order from bits' URLs, each document once (its best-ranked bit)."""
    prefix = document_url(collection, "")
    ranked: dict[str, None] = {}
    for url in urls:
        if url.startswith(prefix):
            ranked.setdefault(url[len(prefix):].split("#")[0], None)
    return list(ranked)


def ndcg(ranked: Sequence[str], judged: Mapping[str, int], cutoff: int = CUTOFF) -> float:
    """nDCG@cutoff as trec_eval's ndcg_cut: gain = the judgment's grade, discount log2(rank + 1),
    the ideal ranking from the judgments; 0 for a query without a relevant document."""
    gained = sum(judged.get(document, 0) / math.log2(rank + 2) for rank, document in enumerate(ranked[:cutoff]))
    grades = sorted((grade for grade in judged.values() if grade > 0), reverse=True)[:cutoff]
    ideal = sum(grade / math.log2(rank + 2) for rank, grade in enumerate(grades))
    return gained / ideal if ideal else 0.0


def mean_ndcg(rankings: Mapping[str, Sequence[str]], collection: Collection) -> float:
    """The mean over every judged query (a query without a ranking counts 0)."""
    return float(np.mean([ndcg(rankings.get(query["_id"], []), collection.judgments[query["_id"]])
                          for query in collection.queries]))


def reciprocal_rank_fusion(*rankings: Sequence[int], k: int = RRF_K) -> list[int]:
    """Rows by the sum of 1 / (k + rank) over the rankings that hold them (rank from 1); ties by row."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, row in enumerate(ranking, 1):
            scores[row] = scores.get(row, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda row: (-scores[row], row))


KEPT_SHARE = 0.9  # of a collection's own questions, whose best answer a threshold keeps


def threshold_keeping(best_scores: Sequence[float], share: float = KEPT_SHARE) -> float:
    """The threshold that keeps the best answer of `share` of the questions: their (1 - share) quantile."""
    return float(np.quantile(np.asarray(best_scores, dtype=np.float64), 1 - share))


def turned_away(best_scores: Sequence[float], threshold: float) -> float:
    """The share of questions whose best answer scores below `threshold` (no answer scores 0)."""
    return float(np.mean(np.asarray(best_scores, dtype=np.float64) < threshold)) if len(best_scores) else 0.0


def bm25s_rankings(texts: Sequence[str], questions: Sequence[str], depth: int,
                   stopwords: str = "en") -> list[list[int]]:
    """bm25s's top `depth` bits for each question (see the module docstring); `stopwords` is
    bm25s's name of its list: `en` (Lucene's 33) or `english_plus` (NLTK's 179)."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25(k1=1.2, b=0.75)
    retriever.index(bm25s.tokenize(list(texts), stopwords=stopwords, stemmer=stemmer, show_progress=False),
                    show_progress=False)
    tokenized = bm25s.tokenize(list(questions), stopwords=stopwords, stemmer=stemmer, show_progress=False,
                               return_ids=False)
    rankings = []
    for words in tokenized:
        scores = retriever.get_scores(words) if words else np.zeros(len(texts))
        order = np.lexsort((np.arange(len(texts)), -scores))
        rankings.append([int(row) for row in order[:depth] if scores[row] > 0])
    return rankings


def dense_rankings(vectors: np.ndarray, query_vectors: np.ndarray, depth: int) -> list[list[int]]:
    """Exact dot products, best first (ties by row)."""
    scores = query_vectors.astype(np.float64) @ vectors.astype(np.float64).T
    return [np.lexsort((np.arange(len(row)), -row))[:depth].tolist() for row in scores]
