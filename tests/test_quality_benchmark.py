"""The quality benchmark's arithmetic (scripts/benchmarks/quality.py): nDCG@10 as trec_eval computes
it, checked against values worked out by hand, and what the benchmark writes and reads."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import yaml
from conftest import PROJECT

sys.path.insert(0, str(PROJECT / "scripts"))

from benchmarks.quality import (
    Collection,
    documents_of,
    mean_ndcg,
    ndcg,
    read_collection,
    reciprocal_rank_fusion,
    threshold_keeping,
    turned_away,
    write_markdown,
)


def test_a_perfect_ranking_scores_one_and_a_ranking_without_relevant_documents_zero() -> None:
    assert ndcg(["a", "b", "x"], {"a": 1, "b": 1}) == 1.0
    assert ndcg(["x", "y"], {"a": 1}) == 0.0
    assert ndcg(["a"], {}) == 0.0  # a query judged without a relevant document


def test_binary_gains_are_discounted_by_log2_of_the_rank_plus_one() -> None:
    # Relevant at ranks 2 and 4 of 3 relevant documents: DCG = 1/log2(3) + 1/log2(5);
    # ideal = 1/log2(2) + 1/log2(3) + 1/log2(4) = 1 + 0.6309 + 0.5.
    expected = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3) + 0.5)
    assert ndcg(["x", "a", "y", "b", "z"], {"a": 1, "b": 1, "c": 1}) == pytest.approx(expected, abs=1e-12)
    assert expected == pytest.approx(0.4982, abs=1e-4)


def test_graded_judgments_give_their_grade_and_only_the_first_ten_count() -> None:
    # Grade 2 at rank 1, grade 1 at rank 11 (past the cut): DCG = 2; ideal = 2 + 1/log2(3).
    assert ndcg(["a", *(f"x{n}" for n in range(9)), "b"], {"a": 2, "b": 1}) == pytest.approx(2 / (2 + 1 / math.log2(3)))
    assert ndcg(["b", "a"], {"a": 2, "b": 1}, cutoff=1) == pytest.approx(1 / 2)


def test_the_mean_is_over_every_judged_query_an_unanswered_one_counting_zero() -> None:
    collection = Collection("c", [], [{"_id": "1", "text": ""}, {"_id": "2", "text": ""}], {"1": {"a": 1}, "2": {"b": 1}})
    assert mean_ndcg({"1": ["a"]}, collection) == 0.5


def test_bits_map_back_to_documents_once_each_by_their_urls() -> None:
    urls = ["https://example.org/cisi/7#part-2", "https://example.org/cisi/3", "https://example.org/cisi/7",
            "https://elsewhere.example/cisi/1"]
    assert documents_of(urls, "cisi") == ["7", "3"]


def test_reciprocal_rank_fusion_adds_one_over_k_plus_rank() -> None:
    # b: 1/61 + 1/62; a: 1/61 + 1/63; c: 1/62; d: 1/63.
    assert reciprocal_rank_fusion([1, 2, 3], [2, 4, 1]) == [2, 1, 4, 3]


def test_a_collection_is_written_as_markdown_a_publisher_would_import(tmp_path: Path) -> None:
    folder = tmp_path / "tiny"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text('{"_id": "1", "title": "On: colons", "text": "Body one."}\n'
                                         '{"_id": "2", "title": "Two", "text": "Body two."}\n')
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "colons"}\n{"_id": "q2", "text": "unjudged"}\n')
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\t1\t1\n")
    collection = read_collection(folder)
    assert [query["_id"] for query in collection.queries] == ["q1"] and collection.judgments == {"q1": {"1": 1}}

    assert write_markdown(collection, tmp_path / "md") == 2
    front, body = (tmp_path / "md" / "1.md").read_text().split("---\n")[1:]
    assert yaml.safe_load(front) == {"title": "On: colons", "url": "https://example.org/tiny/1"}
    assert body.strip() == "Body one."


def test_the_threshold_keeps_the_best_answer_of_nine_questions_in_ten() -> None:
    best = [0.1 * n for n in range(1, 11)]  # 0.1 ... 1.0
    threshold = threshold_keeping(best)  # numpy's linear 10th percentile: 0.1 + 0.9 * 0.1
    assert threshold == pytest.approx(0.19)
    assert sum(score >= threshold for score in best) == 9


def test_turned_away_counts_the_best_answers_below_the_threshold_an_empty_answer_scoring_0() -> None:
    assert turned_away([0.0, 0.2, 0.39, 0.4, 0.9], 0.4) == 0.6
    assert turned_away([], 0.4) == 0.0
