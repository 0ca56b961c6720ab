"""Term scores for RAGFlow's hybrid similarity: the documented formula, in [0, 1], and blind to
bits the caller may not see."""

from __future__ import annotations

import numpy as np
import pytest
from constraint_reference import term_scores as reference_term_scores
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from host.constraints import hybrid_similarity, term_similarity, text_index_in_memory
from host.constraints.term_scores import library_term_similarity
from host.constraints.words import words

WORDS = ["moses", "Moses", "lord", "said", "the", "people", "of", "israel", "unto", "aaron", "the-lord"]
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

texts = st.lists(st.sampled_from(WORDS), max_size=10).map(" ".join)
bits = st.builds(lambda text, title: {"text": text, "info": {"url": "u", "title": title}}, texts, texts)
questions = st.lists(st.sampled_from([*WORDS, "absent"]), max_size=6).map(" ".join)


def scores(question: str, records: list[dict], rows: list[int], visible: list[bool] | None = None) -> np.ndarray:
    mask = None if visible is None else np.array(visible, dtype=bool)
    return library_term_similarity(words(question), text_index_in_memory(records), np.array(rows, dtype=np.int64), mask)


@SETTINGS
@given(records=st.lists(bits, max_size=12), question=questions, data=st.data())
def test_term_scores_are_the_documented_formula(records: list[dict], question: str, data: st.DataObject) -> None:
    visible = data.draw(st.lists(st.booleans(), min_size=len(records), max_size=len(records)))
    rows = [row for row, shown in enumerate(visible) if shown]
    got = scores(question, records, rows, visible)
    np.testing.assert_allclose(got, reference_term_scores(question, records, visible, rows), rtol=1e-12, atol=1e-15)
    assert ((got >= 0) & (got <= 1 + 1e-12)).all()


@SETTINGS
@given(public=st.lists(bits, min_size=1, max_size=10), private=st.lists(bits, min_size=1, max_size=10),
       question=questions, data=st.data())
def test_private_bits_never_change_an_anonymous_callers_term_scores(
    public: list[dict], private: list[dict], question: str, data: st.DataObject
) -> None:
    """Private bits, wherever they sit in the library, change no df, no N, and so no score."""
    slots = data.draw(st.permutations([True] * len(public) + [False] * len(private)))
    mixed, queue_public, queue_private = [], list(public), list(private)
    for is_public in slots:
        mixed.append(queue_public.pop(0) if is_public else queue_private.pop(0))
    public_rows = [row for row, is_public in enumerate(slots) if is_public]

    alone = scores(question, public, list(range(len(public))))
    among_private = scores(question, mixed, public_rows, visible=list(slots))

    assert alone.tolist() == among_private.tolist()  # exactly, not approximately


def test_a_bit_holding_every_word_and_pair_scores_one_and_a_bit_holding_none_zero() -> None:
    records = [{"text": "the lord said unto moses", "info": {"title": ""}},
               {"text": "nothing here", "info": {"title": "at all"}},
               {"text": "moses", "info": {"title": "the lord said unto"}}]  # title and text both count
    got = scores("The LORD said unto Moses", records, [0, 1, 2])
    assert got[0] == pytest.approx(1.0) and got[1] == 0.0
    assert 0 < got[2] < 1  # every word, but not the pair "unto moses" in sequence
    assert scores("", records, [0, 1]).tolist() == [0.0, 0.0]
    assert scores("?!", records, [0]).tolist() == [0.0]


def test_rare_words_weigh_more_than_common_ones() -> None:
    records = [{"text": f"common filler{row}", "info": {}} for row in range(20)] + [{"text": "rare", "info": {}}]
    got = scores("common rare", records, [0, 20])
    assert got[1] > got[0] > 0


def test_scores_over_several_libraries_use_each_librarys_own_statistics() -> None:
    first = [{"text": "moses", "info": {}}, {"text": "aaron", "info": {}}]
    second = [{"text": "moses aaron", "info": {}}] * 3
    indexes = [text_index_in_memory(first), text_index_in_memory(second)]
    offsets = np.array([0, 2, 5])
    rows = np.array([4, 0, 1, 2])
    got = term_similarity("moses", indexes, offsets, rows, None)
    np.testing.assert_allclose(got, [1.0, 1.0, 0.0, 1.0])
    both = term_similarity("moses aaron", indexes, offsets, rows, np.array([True, False, True, True, True]))
    alone = library_term_similarity(["moses", "aaron"], indexes[0], np.array([0, 1]), np.array([True, False]))
    np.testing.assert_array_equal(both[1:3], alone)


def test_hybrid_similarity_is_the_weighted_sum() -> None:
    np.testing.assert_allclose(hybrid_similarity(np.array([0.8, 0.2], np.float32), np.array([0.5, 1.0]), 0.3),
                               [0.3 * 0.8 + 0.7 * 0.5, 0.3 * 0.2 + 0.7 * 1.0], rtol=1e-6)
