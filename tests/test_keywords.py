"""The keywords room (host/keywords): what a term is, the postings a compile builds, and the BM25
search over one library, against the plain-Python reference (tests/keyword_reference.py).

The postings are built and searched both ways, by the compiled loops (`_postings.c`, built in CI)
and by numpy where they were not built: the same arrays and the same answers, bit for bit.
"""

from __future__ import annotations

import math
import os
from dataclasses import replace

import numpy as np
import pytest
from compiled_or_not import compiled_or_not
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from keyword_reference import bm25_scores, ranked

from host.constraints.word_index import WordIndexBuilder
from host.keywords import postings
from host.keywords.analyzer import Analyzer, analyzer
from host.keywords.index import KeywordIndex, open_keyword_index
from host.keywords.memory import keyword_index_in_memory
from host.keywords.postings import BLOCK, FieldWords, build_postings
from host.keywords.top import top

IN_CI = os.environ.get("CI") == "true"
VOCABULARY = ["fish", "fishes", "Jonah", "whale", "sea", "Nineveh", "prophet", "the", "and", "of", "a", "5", "x",
              "Methuselah", "lived", "years", "begat", "sons", "daughters", "great"]


@pytest.fixture(params=["compiled", "numpy"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    compiled_or_not(request.param, postings, "host/keywords/_postings.c", monkeypatch)
    return str(request.param)


def test_the_compiled_postings_are_built_in_ci() -> None:
    if not IN_CI:
        pytest.skip("checked in CI, where .ci/run installs a C compiler")
    assert postings.BUILT, "host/keywords/_postings.c did not build: pip install -e . printed why"


# ---- what a term is -----------------------------------------------------------------------------------


def test_english_terms_are_stemmed_words_without_stop_words_or_lone_letters() -> None:
    assert analyzer().terms("The LORD's prophets, and Jonah's fishes: isn't it 5 a.m.?") == [
        "lord", "prophet", "jonah", "fish", "5"]


def test_english_drops_nltks_stop_words_question_words_and_pronouns_included() -> None:
    assert analyzer().terms("What did you do with which fish, and why were they theirs?") == ["fish"]


def test_a_query_that_says_a_term_twice_keeps_both() -> None:
    assert analyzer().terms("fish, fishes and FISH") == ["fish", "fish", "fish"]


def test_stop_words_and_punctuation_alone_have_no_terms() -> None:
    assert analyzer().terms("to be or not to be, that is... !?") == []


def test_another_language_stems_in_it_and_none_keeps_words_as_they_are() -> None:
    assert Analyzer("french").terms("Les poissons nageaient") == ["le", "poisson", "nag"]
    assert Analyzer("none").terms("The fishes") == ["the", "fishes"]


def test_an_unknown_language_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown analyzer language 'klingon'; known: none, arabic"):
        Analyzer("klingon")


def test_each_word_of_a_vocabulary_is_stemmed_once_into_its_term_or_none() -> None:
    assert analyzer().vocabulary_terms(["the", "fishes", "s", "7"]) == [None, "fish", None, "7"]


# ---- postings -------------------------------------------------------------------------------------------


def texts_of(seed: int, rows: int, words: int = 12) -> tuple[list[str], list[str]]:
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(VOCABULARY, rng.integers(0, words))) for _ in range(rows)]
    titles = [" ".join(rng.choice(VOCABULARY, rng.integers(0, 3))) for _ in range(rows)]
    return texts, titles


def built(texts: list[str], titles: list[str], tags: np.ndarray) -> dict[str, np.ndarray]:
    fields = []
    for strings in (texts, titles):
        builder = WordIndexBuilder()
        builder.add(strings)
        fields.append(FieldWords(*builder.numbered()))
    return build_postings(fields, tags, int(tags.max()) + 1 if len(tags) else 1, "english")


@pytest.mark.parametrize("tag_count", [1, 3])
def test_the_compiled_and_numpy_postings_are_the_same_arrays(monkeypatch: pytest.MonkeyPatch, tag_count: int) -> None:
    if postings.compiled is None:
        pytest.skip("host/keywords/_postings.c was not built here")
    texts, titles = texts_of(1, 700)
    tags = np.random.default_rng(2).integers(0, tag_count, 700).astype(np.uint16)
    compiled = built(texts, titles, tags)
    monkeypatch.setattr(postings, "compiled", None)
    assert compiled.keys() == (by_numpy := built(texts, titles, tags)).keys()
    for name, array in compiled.items():
        assert array.dtype == by_numpy[name].dtype and np.array_equal(array, by_numpy[name]), name


def test_postings_hold_each_rows_terms_how_often_and_of_which_tag(way: str) -> None:
    index = keyword_index_in_memory(["fish fish sea", "the sea", "whale"], ["Jonah", "", "fish"],
                                    np.array([0, 1, 1], np.uint16))
    fish = index.find("fish")
    assert fish is not None and index.postings(fish).rows.tolist() == [0, 2]
    assert index.postings(fish).frequencies.tolist() == [2, 1]
    assert index.rows_holding(fish, np.array([0])) == 1 and index.rows_holding(fish, None) == 2
    assert index.lengths.tolist() == [4, 1, 2]  # "the" is a stop word
    assert index.tag_rows.tolist() == [1, 2] and index.tag_lengths.tolist() == [4, 3]
    assert index.find("the") is None and index.find("nineveh") is None


def test_counts_of_many_tags_are_kept_sparse_and_add_up_per_tag(way: str) -> None:
    # A segment packing many publishers' libraries has a tag per publisher: 3,000 tags, a row each.
    rows = 3_000
    texts = ["whale" if row % 3 else "whale fish" for row in range(rows)]
    tags = np.arange(rows, dtype=np.uint16) % 3_000
    index = keyword_index_in_memory(texts, [""] * rows, tags)
    whale, fish = index.find("whale"), index.find("fish")
    assert whale is not None and fish is not None
    assert index.rows_holding(whale, None) == rows and index.rows_holding(fish, None) == rows // 3
    assert index.rows_holding(whale, np.array([0])) == 1  # the public row alone
    assert index.rows_holding(fish, np.array([0, 3, 4, 5, 2_999])) == 2  # rows 0 and 3 (fish is in every third row)
    assert len(index.tag_term_tags) == rows - 1 + rows // 3 - 1  # one count per (term, tag) held, public aside


def test_a_block_bound_is_at_least_every_score_of_its_block(way: str) -> None:
    texts, titles = texts_of(4, 5 * BLOCK + 17, words=30)
    index = keyword_index_in_memory(texts, titles)
    for term in range(index.term_count):
        held = index.postings(term)
        f = held.frequencies.astype(np.float64)
        saturation = f / (f + 1.2 * (1 - 0.75 + 0.75 * index.lengths[held.rows] / index.average))
        for block, bound in enumerate(held.block_bound.tolist()):
            assert saturation[block * BLOCK : (block + 1) * BLOCK].max() <= bound
            assert held.block_last[block] == held.rows[min((block + 1) * BLOCK, len(held.rows)) - 1]


# ---- the search -----------------------------------------------------------------------------------------


def search(index: KeywordIndex, texts: list[str], question: str, k: int,
           visible: np.ndarray | None = None) -> list[tuple[int, float]]:
    """`top` given statistics computed as the reference computes them (over the visible rows)."""
    seen = np.ones(index.rows, bool) if visible is None else visible
    documents = int(seen.sum())
    average = float(index.lengths[seen].sum()) / documents if documents else 1.0
    said: dict[str, int] = {}
    for term in analyzer().terms(question):
        said[term] = said.get(term, 0) + 1
    numbers, weights = [], []
    for term in sorted(said):
        number = index.find(term)
        if number is None:
            continue
        frequency = int(np.count_nonzero(seen[index.postings(number).rows]))
        if frequency:
            numbers.append(number)
            weights.append(said[term] * math.log(1 + (documents - frequency + 0.5) / (frequency + 0.5)))
    rows, scores = top(index, numbers, weights, average, k, visible)
    return list(zip(rows.tolist(), scores.tolist()))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), rows=st.integers(1, 400), k=st.integers(1, 30),
       hidden=st.floats(0, 0.9), words=st.integers(1, 6))
def test_the_k_best_equal_the_reference_with_hidden_rows(way: str, seed: int, rows: int, k: int, hidden: float,
                                                        words: int) -> None:
    texts, titles = texts_of(seed, rows)
    rng = np.random.default_rng(seed + 1)
    visible = rng.random(rows) >= hidden
    question = " ".join(rng.choice(VOCABULARY, words))
    index = keyword_index_in_memory(texts, titles)
    expected = ranked(bm25_scores(texts, titles, visible.tolist(), question))[:k]
    assert search(index, texts, question, k, visible) == expected


def test_long_lists_skipped_by_blocks_give_the_exhaustive_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    if postings.compiled is None:
        pytest.skip("host/keywords/_postings.c was not built here")
    texts, titles = texts_of(7, 20 * BLOCK, words=40)
    stored = np.random.default_rng(8).permutation(len(texts)).astype(np.int32)  # a clustered layout's
    index = replace(keyword_index_in_memory(texts, titles), stored_rows=stored)
    questions = ["fish", "sea whale", "Jonah prophet Nineveh great", "fish fish sea", "begat sons daughters years"]
    answers = {question: search(index, texts, question, 10) for question in questions}
    monkeypatch.setattr(postings, "compiled", None)
    for question, answer in answers.items():
        assert answer == search(index, texts, question, 10)
        expected = ranked(bm25_scores(texts, titles, [True] * len(texts), question))[:10]  # file rows, file order
        assert answer == [(int(stored[row]), score) for row, score in expected]


def test_equal_scores_go_to_the_earlier_row_in_file_order_and_answer_stored_rows(way: str) -> None:
    texts = ["whale sea"] * 6
    index = replace(keyword_index_in_memory(texts, [""] * 6), stored_rows=np.array([5, 3, 1, 0, 2, 4], np.int32))
    assert [row for row, _ in search(index, texts, "whale", 3)] == [5, 3, 1]
    visible = np.array([True, True, False, True, True, False])  # by stored row: file rows 4 and 0 hidden
    assert [row for row, _ in search(index, texts, "whale", 3, visible)] == [3, 1, 0]


def test_a_row_that_holds_no_term_is_never_an_answer(way: str) -> None:
    texts = ["whale sea", "fish", "the and of"]
    index = keyword_index_in_memory(texts, [""] * 3)
    assert [row for row, _ in search(index, texts, "fish", 10)] == [1]
    assert search(index, texts, "Nineveh", 10) == []


def test_postings_that_disagree_with_their_offsets_are_refused() -> None:
    index = keyword_index_in_memory(["whale sea", "fish"], ["", ""])
    arrays = {f"keywords.{name}": getattr(index, attribute) for name, attribute in [
        ("terms", "terms"), ("term_bytes", "term_bytes"), ("term_offsets", "term_offsets"), ("rows", "posting_rows"),
        ("frequencies", "frequencies"), ("lengths", "lengths"), ("public_rows_of_term", "public_rows_of_term"),
        ("tag_term_offsets", "tag_term_offsets"), ("tag_term_tags", "tag_term_tags"), ("tag_term_rows", "tag_term_rows"),
        ("tag_rows", "tag_rows"), ("tag_lengths", "tag_lengths"), ("block_offsets", "block_offsets"),
        ("block_last", "block_last"), ("block_bound", "block_bound")]}
    arrays["keywords.stored_rows"] = np.zeros(0, np.int32)  # rows stored as in the file
    arrays["keywords.rows"] = arrays["keywords.rows"][:-1]
    with pytest.raises(ValueError, match="keyword postings are inconsistent"):
        open_keyword_index(arrays.__getitem__, 2, "english")


def test_terms_sorted_as_fixed_bytes_equal_terms_sorted_as_strings(monkeypatch: pytest.MonkeyPatch) -> None:
    from host.constraints.sorted_strings import SortedStrings
    from host.keywords import terms as terms_module

    def vocabulary(words: list[str]) -> SortedStrings:
        encoded = sorted({word.encode("utf-8") for word in words})
        offsets = np.cumsum([0, *map(len, encoded)]).astype(np.int64)
        return SortedStrings(np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets)

    fields = [vocabulary(["12", "007", "fishes", "fish", "the", "café", "x", "5", "٣", "日本"]),
              vocabulary(["12", "9", "fishing", "whales", "a", "b7"])]
    fixed = terms_module.vocabulary_terms(fields, "english")
    monkeypatch.setattr(terms_module, "WIDEST_FIXED", 0)
    by_strings = terms_module.vocabulary_terms(fields, "english")

    assert bytes(fixed.data) == bytes(by_strings.data) and fixed.offsets.tolist() == by_strings.offsets.tolist()
    assert [mapping.tolist() for mapping in fixed.maps] == [mapping.tolist() for mapping in by_strings.maps]
    words = SortedStrings(fixed.data, fixed.offsets)
    assert [word.decode() for word in words] == ["007", "12", "5", "9", "b7", "café", "fish", "whale", "٣", "日本"]
    assert fields[0][int(np.flatnonzero(fixed.maps[0] == -1)[0])] in (b"the", b"x")
