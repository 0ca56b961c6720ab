"""Keyword and hybrid ranking over compiled libraries, through the query core (host/search/query.py):
the caller's own statistics, budgets, thresholds, constraints, and what private bits may never do.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from keyword_reference import bm25_scores, keyword_scores, query_norm, ranked
from librarian import b64, exact_dot_products, unit_vectors, write_library

from access import ANONYMOUS, Grant
from host.catalog.generations import load_catalog
from host.catalog.model_index import ModelIndex
from host.constraints import parse_constraint
from host.search.fusion import POOL, fuse
from host.search.keywords import MOST_TERMS, keyword_score, weigh
from host.search.query import Query, SearchPolicy, run_query

POLICY = SearchPolicy(mode="exact")
PUBLIC_TEXTS = [
    "And Methuselah lived an hundred eighty and seven years, and begat Lamech.",
    "Now the word of the LORD came unto Jonah the son of Amittai, saying,",
    "Arise, go to Nineveh, that great city, and cry against it.",
    "But Jonah rose up to flee unto Tarshish from the presence of the LORD.",
    "Now the LORD had prepared a great fish to swallow up Jonah.",
    "And Jonah was in the belly of the fish three days and three nights.",
    "Then Jonah prayed unto the LORD his God out of the fish's belly,",
    "And all the days of Methuselah were nine hundred sixty and nine years: and he died.",
    "And the LORD spake unto the fish, and it vomited out Jonah upon the dry land.",
    "The sea wrought, and was tempestuous.",
]
PRIVATE_TEXTS = [
    "Draft: Jonah and the great fish, retold; Jonah Jonah Jonah.",
    "Draft: Methuselah, a study of long years and the sea.",
    "Unpublished notes on Nineveh and the whale.",
]


def library(texts: list[str], seed: int, titles: list[str] | None = None) -> dict:
    vectors = unit_vectors(len(texts), 8, seed)
    return {"version": 1, "embedding_model": "test:unit-8", "bits": [
        {"text": text, "embedding": b64(vector), "token_count": 5 + len(text) // 10,
         "info": {"url": f"https://example.com/{seed}/{row}", "title": (titles or [""] * len(texts))[row]}}
        for row, (text, vector) in enumerate(zip(texts, vectors))]}


def catalog_of(tmp_path: Path, *, private: bool) -> ModelIndex:
    folder = tmp_path / ("with" if private else "without")
    write_library(folder / "bible.json", library(PUBLIC_TEXTS, 1, [f"Verse {row}" for row in range(10)]))
    if private:
        write_library(folder / "access" / "drafts" / "notes.json", library(PRIVATE_TEXTS, 2))
    (index,) = load_catalog(folder).models.values()
    return index


@pytest.fixture(scope="module")
def public(tmp_path_factory: pytest.TempPathFactory) -> ModelIndex:
    return catalog_of(tmp_path_factory.mktemp("keywords"), private=False)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> ModelIndex:
    return catalog_of(tmp_path_factory.mktemp("keywords"), private=True)


def texts_and_titles(index: ModelIndex) -> tuple[list[str], list[str], list[str]]:
    located = [index.locate(row) for row in range(index.bit_count)]
    records = [segment.record(local) for segment, local in located]
    ids = [segment.bit_id(local) for segment, local in located]
    return [record["text"] for record in records], [record["info"].get("title", "") for record in records], ids


def ask(index: ModelIndex, text: str, mode: str = "keyword", grant: Grant = ANONYMOUS, **options: object):
    vector = unit_vectors(1, 8, 99)[0]
    fields = {"count": 10, "count_type": "bit", **options}
    return run_query(index, Query(vector if mode != "keyword" else None, text=text, mode=mode, **fields),  # type: ignore[arg-type]
                     grant, POLICY)


def as_bits(index: ModelIndex, selection) -> list[tuple[str, float]]:
    """The answer by bit id, with each bit's rank score (its similarity where it was ranked by it)."""
    ids = texts_and_titles(index)[2]
    scores = selection.scores if selection.ranks is None else selection.ranks
    return [(ids[row], score) for row, score in zip(selection.rows.tolist(), scores.tolist())]


# ---- keyword ranking ------------------------------------------------------------------------------------


@pytest.mark.parametrize("question", ["Jonah", "the fish's belly", "Methuselah years", "great fish Nineveh LORD"])
@pytest.mark.parametrize("grant", [ANONYMOUS, Grant("editor", frozenset({"drafts"}))], ids=["anonymous", "drafts"])
def test_keyword_scores_are_bm25_over_the_bits_the_caller_may_see(mixed: ModelIndex, question: str, grant: Grant) -> None:
    texts, titles, _ = texts_and_titles(mixed)
    visible = mixed.visible_rows(grant.access_tags)
    seen = [True] * len(texts) if visible is None else visible.tolist()
    selection = ask(mixed, question, grant=grant)
    expected = ranked(bm25_scores(texts, titles, seen, question))[:10]  # ranked by BM25...
    shown = keyword_scores(texts, titles, seen, question)  # ...each scored min(1, BM25 / |w|)
    assert selection.rows.tolist() == [row for row, _ in expected]
    assert selection.ranks.tolist() == [shown[row] for row, _ in expected]
    assert selection.best_score == shown[expected[0][0]]
    assert selection.scores is None  # no vector was asked for: no similarity to report


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
@pytest.mark.parametrize("question", ["Jonah", "Methuselah years sea", "whale", "great fish"])
def test_private_bits_never_change_an_anonymous_callers_answer(public: ModelIndex, mixed: ModelIndex, mode: str,
                                                               question: str) -> None:
    assert as_bits(mixed, ask(mixed, question, mode)) == as_bits(public, ask(public, question, mode))


def test_a_granted_caller_finds_private_bits_and_their_statistics_count(mixed: ModelIndex) -> None:
    anonymous = ask(mixed, "Jonah")
    granted = ask(mixed, "Jonah", grant=Grant("editor", frozenset({"drafts"})))
    texts = texts_and_titles(mixed)[0]
    assert len(granted.rows) == len(anonymous.rows) + 1
    assert texts[granted.rows[0]] == PRIVATE_TEXTS[0]  # the draft that says Jonah four times
    assert granted.ranks[1] != anonymous.ranks[0]  # more bits seen, another idf


def test_the_budget_counts_tokens_and_cuts_a_first_bit_that_alone_overflows(public: ModelIndex) -> None:
    all_of_them = ask(public, "Jonah LORD fish")
    budget = int(public.token_counts[all_of_them.rows[:3]].sum())
    three = ask(public, "Jonah LORD fish", count=budget, count_type="token")
    assert three.rows.tolist() == all_of_them.rows[:3].tolist() and three.first_bit_cut_to is None
    first = ask(public, "Jonah LORD fish", count=2, count_type="token")
    assert first.rows.tolist() == all_of_them.rows[:1].tolist() and first.first_bit_cut_to == 2


def test_a_constraint_narrows_without_changing_a_score(public: ModelIndex) -> None:
    everything = dict(zip(ask(public, "Jonah fish").rows.tolist(), ask(public, "Jonah fish").ranks.tolist()))
    narrowed = ask(public, "Jonah fish", constraint=parse_constraint("belly"))
    assert narrowed.rows.tolist() == [5, 6]
    assert narrowed.ranks.tolist() == [everything[5], everything[6]]


def test_stop_words_alone_find_nothing_by_keyword_and_say_so(public: ModelIndex) -> None:
    selection = ask(public, "to be or not to be?!")
    assert len(selection.rows) == 0
    assert selection.notes == ("the query has no keyword (only stop words or punctuation): nothing matches it",)


def test_words_no_bit_holds_weigh_nothing(public: ModelIndex) -> None:
    selection = ask(public, " ".join([*(f"unheard{n}" for n in range(200)), "Methuselah"]))
    assert sorted(selection.rows.tolist()) == [0, 7] and selection.notes == ()


def test_a_query_of_many_keywords_keeps_its_rarest_and_says_so(tmp_path: Path) -> None:
    # Bit n holds the words word0 ... word{n}: word{n} is held by the bits from n on, so the higher, the rarer.
    said = MOST_TERMS + 30
    texts = [" ".join(f"word{n}" for n in range(last + 1)) for last in range(said)]
    write_library(tmp_path / "words.json", library(texts, 3))
    (index,) = load_catalog(tmp_path).models.values()
    weighted = weigh(index, " ".join(f"word{n}" for n in range(said)), frozenset())
    assert len(weighted.terms) == MOST_TERMS and set(weighted.terms) == {f"word{n}" for n in range(30, said)}
    assert weighted.notes == (f"the query has {said} distinct keywords; the {MOST_TERMS} rarest were used",)


# ---- hybrid ranking --------------------------------------------------------------------------------------


def test_fusion_weighs_the_similarity_clipped_to_0_1_and_the_keyword_score() -> None:
    fused = fuse(np.array([0.9, 0.5, -0.2, 1.0000001], np.float32), np.array([0.0, 1.0, 0.5, 1.0]), 0.25)
    np.testing.assert_allclose(fused, [0.75 * 0.9, 0.75 * 0.5 + 0.25, 0.25 * 0.5, 1.0], rtol=1e-7)


def test_a_keyword_score_is_bm25_over_the_norm_of_the_querys_weights_at_most_one(public: ModelIndex) -> None:
    texts, titles, _ = texts_and_titles(public)
    question = "Jonah fish whale"  # no verse says whale: it weighs in the norm as a word held by none
    norm = query_norm(texts, titles, [True] * 10, question)
    weighted = weigh(public, question, frozenset())
    assert weighted.norm == pytest.approx(norm, rel=1e-12) and weighted.terms == ("fish", "jonah")
    assert weighted.norm > float(np.sqrt((weighted.weights ** 2).sum()))
    np.testing.assert_allclose(keyword_score(weighted, np.array([0.0, norm / 2, norm * 3])), [0.0, 0.5, 1.0])


def test_scores_do_not_depend_on_the_other_bits_of_the_answer(public: ModelIndex) -> None:
    everything = ask(public, "Jonah fish", "hybrid")
    scored = dict(zip(everything.rows.tolist(), everything.ranks.tolist()))
    for constraint in ("belly", "LORD", "NOT Jonah"):
        narrowed = ask(public, "Jonah fish", "hybrid", constraint=parse_constraint(constraint))
        assert len(narrowed.rows) and narrowed.ranks.tolist() == [scored[row] for row in narrowed.rows.tolist()]
    assert ask(public, "Jonah fish", "hybrid", count=2).ranks.tolist() == everything.ranks[:2].tolist()


def test_hybrid_ranks_every_pool_bit_by_the_fused_score_and_reports_its_similarity(public: ModelIndex) -> None:
    vector = unit_vectors(1, 8, 99)[0]
    selection = ask(public, "Jonah fish", "hybrid")
    texts, titles, _ = texts_and_titles(public)
    keyword = keyword_scores(texts, titles, [True] * 10, "Jonah fish")
    similarity = exact_dot_products(public.gather(np.arange(public.bit_count)), vector)
    fused = fuse(similarity, np.array([keyword.get(row, 0.0) for row in range(10)]), 0.5)  # the pool: every bit
    expected = sorted(range(10), key=lambda row: (-fused[row], -similarity[row], row))
    assert selection.rows.tolist() == expected
    assert selection.scores.tolist() == similarity[expected].tolist()
    np.testing.assert_allclose(selection.ranks, fused[expected], rtol=1e-12)
    assert selection.best_score == selection.ranks[0]
    assert POOL > 10  # the pool held every bit


@pytest.mark.parametrize(("weight", "leader"), [(0.0, "similarity"), (1.0, "keyword")])
def test_the_keyword_weight_goes_from_meaning_alone_to_keywords_alone(public: ModelIndex, weight: float,
                                                                       leader: str) -> None:
    selection = ask(public, "Methuselah", "hybrid", keyword_weight=weight)
    similarity_order = ask(public, "Methuselah", "vector").rows.tolist()
    if leader == "similarity":
        assert selection.rows.tolist() == similarity_order
    else:
        assert sorted(selection.rows[:2].tolist()) == [0, 7]  # the two bits that say Methuselah lead


def test_hybrid_without_keywords_is_the_vector_ranking_and_says_so(public: ModelIndex) -> None:
    selection = ask(public, "the and of ...", "hybrid")
    assert selection.rows.tolist() == ask(public, "x", "vector").rows.tolist()
    assert selection.ranks is None and selection.notes == (
        "the query has no keyword (only stop words or punctuation): ranked by meaning alone",)


def test_a_similarity_threshold_filters_the_fused_ranking_without_reordering_it(public: ModelIndex) -> None:
    everything = ask(public, "Jonah fish", "hybrid")
    threshold = float(np.median(everything.scores))
    above = ask(public, "Jonah fish", "hybrid", similarity_threshold=threshold)
    kept = [row for row, similarity in zip(everything.rows.tolist(), everything.scores.tolist()) if similarity >= threshold]
    assert above.rows.tolist() == kept and 0 < len(kept) < 10


def test_a_score_threshold_keeps_only_bits_ranked_at_least_that_high(public: ModelIndex) -> None:
    everything = ask(public, "Jonah fish", "keyword")
    cut = float(everything.ranks[2])
    assert ask(public, "Jonah fish", "keyword", score_threshold=cut).rows.tolist() == \
        [row for row, score in zip(everything.rows.tolist(), everything.ranks.tolist()) if score >= cut]
    fused = ask(public, "Jonah fish", "hybrid")
    cut = float(fused.ranks[3])
    above = ask(public, "Jonah fish", "hybrid", score_threshold=cut)
    assert above.rows.tolist() == fused.rows[:4].tolist() and above.ranks.tolist() == fused.ranks[:4].tolist()


def test_a_thresholded_hybrid_answer_holds_every_bit_reaching_the_threshold_beyond_the_pool(tmp_path: Path) -> None:
    # 400 bits, most holding a word of the question. A threshold that keeps fewer bits than the budget
    # asks for must bring every one that reaches it, whichever side would have found it; the pool
    # stops growing once no bit outside it could reach the threshold.
    words = ["fish", "sea", "ship", "storm", "lot", "prophet", "city", "whale"]
    rng = np.random.default_rng(7)
    texts = [" ".join(rng.choice(words, int(rng.integers(1, 6)))) for _ in range(400)]
    write_library(tmp_path / "many.json", library(texts, 8))
    (index,) = load_catalog(tmp_path).models.values()
    everything = ask(index, "fish storm whale", "hybrid", count=400)  # the pool: every bit
    assert len(everything.rows) == 400
    for threshold, kept_count in ((0.35, 63), (0.5, 16), (0.9, 0)):
        kept = [row for row, score in zip(everything.rows.tolist(), everything.ranks.tolist()) if score >= threshold]
        cut = ask(index, "fish storm whale", "hybrid", count=100, score_threshold=threshold)
        assert len(kept) == kept_count and cut.rows.tolist() == kept and cut.best_score == everything.best_score
    filled = ask(index, "fish storm whale", "hybrid", count=100, score_threshold=0.2)
    assert len(filled.rows) == 100 and min(filled.ranks.tolist()) >= 0.2


@pytest.mark.parametrize("mode", ["vector", "keyword", "hybrid"])
def test_a_threshold_above_every_score_answers_nothing_and_still_tells_the_best_score(public: ModelIndex,
                                                                                     mode: str) -> None:
    everything = ask(public, "Jonah fish", mode)
    best = everything.best_score
    assert best is not None and best == (everything.scores if mode == "vector" else everything.ranks)[0]
    for budget in ({"count": 10, "count_type": "bit"}, {"count": 1000, "count_type": "token"}):
        nothing = ask(public, "Jonah fish", mode, score_threshold=best + 1e-6, **budget)  # float32 similarities
        assert nothing.rows.tolist() == [] and nothing.best_score == best
    assert ask(public, "Jonah fish", mode, score_threshold=best).rows[:1].tolist() == everything.rows[:1].tolist()


def test_restricted_bits_are_counted_by_keywords_as_if_every_tag_were_granted(mixed: ModelIndex) -> None:
    selection = run_query(mixed, Query(None, 10, "bit", text="Jonah", mode="keyword"), ANONYMOUS, POLICY,
                          count_restricted=True)
    assert selection.restricted == 1


# ---- a library's language -------------------------------------------------------------------------------


def test_a_library_says_its_language_and_its_keywords_are_analyzed_in_it(tmp_path: Path) -> None:
    french = {**library(["Les poissons nageaient dans la mer.", "Le prophète parlait."], 4), "language": "french"}
    plain = {**library(["The fishes swam", "running"], 5), "language": "none"}
    write_library(tmp_path / "french.json", french)
    write_library(tmp_path / "plain.json", plain)
    (index,) = load_catalog(tmp_path).models.values()
    texts = texts_and_titles(index)[0]

    assert [texts[row] for row in ask(index, "poisson").rows.tolist()] == ["Les poissons nageaient dans la mer."]
    assert [texts[row] for row in ask(index, "fishes").rows.tolist()] == ["The fishes swam"]
    assert ask(index, "fish").rows.tolist() == []  # `none` keeps words as they are: no stems


def test_an_unknown_language_is_one_problem_naming_it(tmp_path: Path) -> None:
    from host.library.format import library_problems

    problems = library_problems({**library(["text"], 6), "language": "klingon"})
    assert len(problems) == 1 and problems[0].startswith("language: expected one of none, arabic")
    assert problems[0].endswith("got 'klingon'")


@pytest.mark.parametrize(("mode", "then"), [("keyword", "nothing matches it"), ("hybrid", "ranked by meaning alone")])
def test_keywords_no_visible_bit_holds_are_told_apart_from_none_at_all(mixed: ModelIndex, mode: str, then: str) -> None:
    assert ask(mixed, "zebras and quokkas", mode).notes == (f"no bit you may see holds a keyword of the query: {then}",)
    assert ask(mixed, "whale", mode).notes == (f"no bit you may see holds a keyword of the query: {then}",)  # a draft's
    assert ask(mixed, "to be or not", mode).notes == (
        f"the query has no keyword (only stop words or punctuation): {then}",)


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_one_library_chosen_among_many_is_ranked_as_the_postings_would_rank_it(
        tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A chosen library's few rows are scored one by one: the same rows and scores as the postings give."""
    from host.search import keywords

    for number in range(5):
        write_library(tmp_path / f"writer{number}.json", library(PUBLIC_TEXTS, 10 + number))
    (index,) = load_catalog(tmp_path).models.values()
    assert len(index.segments) == 1 and len(index.libraries) == 5
    question = "great fish Nineveh LORD"
    chosen = ask(index, question, mode, libraries=frozenset({"writer3"}))
    monkeypatch.setattr(keywords, "SUBSET_ROWS", 0)  # the postings of the whole model, masked
    through_postings = ask(index, question, mode, libraries=frozenset({"writer3"}))
    assert chosen.rows.tolist() == through_postings.rows.tolist() and len(chosen.rows)
    assert chosen.ranks.tolist() == through_postings.ranks.tolist()
    assert {index.library_of(row).name for row in chosen.rows.tolist()} == {"writer3"}
