"""Constraint masks agree with a brute-force reference over the records, on generated libraries."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from constraint_reference import fold, matches, tokens
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from host.constraints import ConstraintError, evaluate, evaluate_libraries, parse_constraint, text_index_in_memory
from host.constraints import evaluation as evaluate_module
from host.constraints.syntax import And, Compare, Everything, Node, Not, Or, Words
from host.constraints.words import INFO_FIELDS, LABELS

# Words that collide under folding (case, width, ß/ss), share prefixes, look like numbers, or
# hold non-ASCII letters; separators that split them.
VOCABULARY = ["alpha", "Alpha", "ALPHA", "alphabet", "beta", "gamma", "delta", "éclair", "Éclair", "straße",
              "STRASSE", "x1", "10", "9.5", "-3", "a_b", "ǆemal", "\uff42\uff45\uff54\uff41", "z"]
SEPARATORS = [" ", ", ", "-", ". ", "/", "\n", " (", ") "]
FOLDED_WORDS = sorted({word for entry in VOCABULARY for word in tokens(entry)})
PREFIXES = sorted({word[:size] for word in FOLDED_WORDS for size in range(1, len(word) + 1)})
OPERATORS = ["contains", "not contains", "start with", "end with", "empty", "not empty", "=", "≠", ">", "<", "≥", "≤"]
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def field_text(draw: st.DrawFn, max_words: int = 8) -> str:
    picked = draw(st.lists(st.sampled_from(VOCABULARY), max_size=max_words))
    separators = draw(st.lists(st.sampled_from(SEPARATORS), min_size=len(picked), max_size=len(picked)))
    return "".join(word + separator for word, separator in zip(picked, separators, strict=True)).strip(" ")


@st.composite
def records(draw: st.DrawFn, max_bits: int = 10) -> list[dict[str, Any]]:
    made = []
    for _ in range(draw(st.integers(0, max_bits))):
        info = {"url": "https://ex.org/" + draw(field_text(3))}
        for field in ("title", "description", "image_url"):
            if draw(st.booleans()):
                info[field] = draw(field_text(4))
        made.append({"text": draw(field_text(12)), "info": info})
    return made


def word_leaves() -> st.SearchStrategy[Node]:
    single = st.builds(lambda label, word, prefix: Words(label, (word,), prefix),
                       st.sampled_from(LABELS), st.sampled_from(PREFIXES), st.booleans())
    phrase = st.builds(lambda label, words, last, prefix: Words(label, (*words, last), prefix),
                       st.sampled_from(LABELS), st.lists(st.sampled_from(FOLDED_WORDS), min_size=1, max_size=2),
                       st.sampled_from(PREFIXES), st.booleans())
    return st.one_of(single, phrase)


def compare_leaves() -> st.SearchStrategy[Node]:
    values = st.one_of(st.sampled_from(["", "1", "9.5", "10", "https://ex.org/", "alpha", "ALPHA beta", "b", "ß"]),
                       field_text(2))
    return st.builds(lambda field, operator, value: Compare(field, operator, fold(value)),
                     st.sampled_from([*INFO_FIELDS, "library"]), st.sampled_from(OPERATORS), values)


nodes = st.recursive(
    st.one_of(word_leaves(), compare_leaves(), st.just(Everything())),
    lambda children: st.one_of(
        st.builds(lambda items: And(tuple(items)), st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda items: Or(tuple(items)), st.lists(children, min_size=1, max_size=3)),
        st.builds(Not, children),
    ),
    max_leaves=8,
)
LIBRARY_NAMES = ["alpha", "beta-books", "docs/Gamma", "10"]


@SETTINGS
@given(node=nodes, libraries=st.lists(st.tuples(st.sampled_from(LIBRARY_NAMES), records()), min_size=1, max_size=3))
def test_a_constraint_mask_is_the_brute_force_answer(node: Node, libraries: list[tuple[str, list[dict]]]) -> None:
    expected = [matches(node, record, name) for name, bits in libraries for record in bits]
    indexed = [(text_index_in_memory(bits), name) for name, bits in libraries]
    # Both ways of checking a phrase's words (binary search, byte map) give the same answer.
    for fewer in (0.0, 1e9):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(evaluate_module, "SEARCH_WHEN_FEWER", fewer)
            mask = evaluate_libraries(node, indexed)
        assert mask.dtype == bool and mask.tolist() == expected


LIBRARY = [
    {"text": "In the beginning God created the heaven and the earth.", "info": {"url": "https://ex.org/gen/1",
     "title": "Genesis 1", "description": "Creation"}},
    {"text": "And the earth was without form, and void", "info": {"url": "https://ex.org/gen/2", "title": "Genesis 2"}},
    {"text": "the", "info": {"url": "https://ex.org/x", "title": "Exodus", "image_url": "https://img.ex.org/3.png"}},
    {"text": "heaven", "info": {"url": "https://ex.org/y", "title": "Ezra"}},
]


@pytest.mark.parametrize(("query", "rows"), [
    ("earth", [0, 1]),
    ("EARTH", [0, 1]),
    ('"the earth"', [0, 1]),
    ('"earth the"', []),
    ('"the heaven"', [0]),
    ('"earth was without"', [1]),
    ('"earth the"', []),
    ('"the heaven"', [0]),
    ('"the" "heaven"', [0]),  # two phrases, both in the text
    ("the heaven", [0]),
    ('"the heaven" OR heaven', [0, 3]),
    ('"heaven and"', [0]),
    # a phrase never runs from one bit into the next (bit 2 is "the", bit 3 "heaven")
    ('"the the"', []),
    ("hea*", [0, 3]),
    ('"the hea*"', [0]),
    ("title:genesis", [0, 1]),
    ("title:gen*", [0, 1]),
    ("title:e*", [2, 3]),
    ('title:"genesis 2"', [1]),
    ("url:ex.org/gen", [0, 1]),
    ("image_url:png", [2]),
    ("description:creation", [0]),
    ("library:books", [0, 1, 2, 3]),
    ("library:other", []),
    ("NOT earth", [2, 3]),
    ("the NOT title:genesis", [2]),
    ("(earth OR heaven) NOT void", [0, 3]),
])
def test_constraints_on_a_known_library(query: str, rows: list[int]) -> None:
    mask = evaluate(parse_constraint(query), text_index_in_memory(LIBRARY), "my-books")
    assert np.flatnonzero(mask).tolist() == rows
    assert [matches(parse_constraint(query), record, "my-books") for record in LIBRARY] == mask.tolist()


def test_a_prefix_standing_for_too_many_words_in_a_phrase_is_refused_but_alone_is_fine() -> None:
    many = [{"text": " ".join(f"w{number}" for number in range(start, start + 100)) + " end", "info": {}}
            for start in range(0, 1100, 100)]
    index = text_index_in_memory(many)
    assert evaluate(parse_constraint("w*"), index, "lib").all()  # one slice of positions, any size
    with pytest.raises(ConstraintError, match=r"the prefix 'w\*' stands for more than 1024 words in a phrase"):
        evaluate(parse_constraint('"end w*"'), index, "lib")
    assert evaluate(parse_constraint('"w9 w1*"'), index, "lib").tolist() == [True] + [False] * 10


def test_an_empty_library_gives_an_empty_mask() -> None:
    index = text_index_in_memory([])
    for query in ("a", '"a b"', "a*", "NOT a", "title:a", "library:lib"):
        assert evaluate(parse_constraint(query), index, "lib").shape == (0,)
