"""RAGFlow's metadata_condition on the constraint engine: its operators, against the reference."""

from __future__ import annotations

import numpy as np
import pytest
from constraint_reference import compare, tokens
from hypothesis import given, settings
from hypothesis import strategies as st

from host.constraints import ConstraintError, evaluate, parse_metadata_condition, text_index_in_memory
from host.constraints.syntax import Compare, Everything, Words

BITS = [
    {"text": "In the beginning God created the heaven", "info": {"url": "https://ex.org/gen/1", "title": "Genesis",
     "description": "10"}},
    {"text": "And the earth was without form", "info": {"url": "https://ex.org/gen/2", "title": "genesis 2",
     "description": "9.5"}},
    {"text": "", "info": {"url": "https://ex.org/ex/1", "title": "Exodus", "description": "abc"}},
    {"text": "...", "info": {"url": "https://other.org/1", "title": "ÉCLAIR", "image_url": "https://img/1.png"}},
]


def rows(condition: dict) -> list[int]:
    return np.flatnonzero(evaluate(parse_metadata_condition(condition), text_index_in_memory(BITS), "Books")).tolist()


def one(name: str, operator: str, value: object = "x") -> dict:
    return {"conditions": [{"name": name, "comparison_operator": operator, "value": value}]}


@pytest.mark.parametrize(("condition", "expected"), [
    (one("title", "contains", "GEN"), [0, 1]),  # substrings, case-insensitive
    (one("title", "contains", "esis 2"), [1]),
    (one("title", "not contains", "gen"), [2, 3]),
    (one("title", "start with", "Gen"), [0, 1]),
    (one("title", "end with", "2"), [1]),
    (one("url", "start with", "https://ex.org/gen/"), [0, 1]),
    (one("url", "contains", ".org/"), [0, 1, 2, 3]),
    (one("title", "=", "genesis"), [0]),  # whole values: "genesis 2" is not "genesis"
    (one("title", "is", "GENESIS"), [0]),  # RAGFlow's alias
    (one("title", "≠", "genesis"), [1, 2, 3]),
    (one("title", "!=", "genesis"), [1, 2, 3]),
    (one("title", "=", "éclair"), [3]),  # folded
    (one("description", ">", 9.6), [0, 2]),  # as numbers where both are: 10 > 9.6; as text: "abc" > "9.6"
    (one("description", ">", "9.6"), [0, 2]),
    (one("description", "<", 10), [1, 3]),  # 9.5 < 10 as numbers, "" (absent) < "10" as text
    (one("description", "≤", "10"), [0, 1, 3]),
    (one("description", "<=", "10"), [0, 1, 3]),
    (one("description", "≥", "abc"), [2]),
    (one("description", ">=", "abc"), [2]),
    (one("title", ">", "f"), [0, 1, 3]),  # code point order: "éclair" > "genesis" > "f" > "exodus"
    (one("description", "empty"), [3]),  # absent is empty
    (one("image_url", "not empty"), [3]),
    (one("library", "=", "books"), [0, 1, 2, 3]),
    (one("library", "contains", "x"), []),
    (one("text", "contains", "The Earth"), [1]),  # on text: whole words, as a phrase
    (one("text", "contains", "earth the"), []),
    (one("text", "not contains", "the"), [2, 3]),
    (one("text", "empty"), [2, 3]),  # no words
    (one("text", "not empty"), [0, 1]),
    ({"logic": "or", "conditions": [one("title", "=", "exodus")["conditions"][0],
                                    one("description", "=", "10")["conditions"][0]]}, [0, 2]),
    ({"logic": "and", "conditions": [one("title", "start with", "gen")["conditions"][0],
                                     one("description", "=", "10.0")["conditions"][0]]}, [0]),
    ({"logic": "and", "conditions": []}, [0, 1, 2, 3]),  # no condition restricts nothing
    ({}, [0, 1, 2, 3]),
])
def test_each_operator_means_what_ragflow_means(condition: dict, expected: list[int]) -> None:
    assert rows(condition) == expected


def test_an_empty_condition_is_everything() -> None:
    assert parse_metadata_condition(None) == Everything()
    assert parse_metadata_condition({"conditions": []}) == Everything()
    assert parse_metadata_condition(one("title", "contains", "Bible")) == Compare("title", "contains", "bible")
    assert parse_metadata_condition(one("text", "contains", "Holy Bible")) == Words("text", ("holy", "bible"))


@pytest.mark.parametrize(("condition", "message"), [
    ([], "metadata_condition must be an object, got list"),
    ({"logic": "xor", "conditions": []}, "metadata_condition.logic must be 'and' or 'or', got 'xor'"),
    ({"conditions": {}}, "metadata_condition.conditions must be a list, got dict"),
    ({"conditions": [], "extra": 1}, "unknown key 'extra' in metadata_condition"),
    ({"conditions": ["x"]}, "metadata_condition.conditions[0] must be an object, got str"),
    (one("author", "=", "x"), "unknown field 'author' in metadata_condition.conditions[0].name; fields are title"),
    (one("title", "in", "x"), "unsupported comparison_operator 'in' in metadata_condition.conditions[0]"),
    (one("title", "=", ["x"]), "metadata_condition.conditions[0].value must be a string or a number"),
    (one("title", "=", True), "must be a string or a number"),
    (one("title", "=", None), "must be a string or a number"),
    (one("text", "=", "x"), "comparison_operator '=' is not supported on text in metadata_condition.conditions[0]"),
    (one("text", "contains", "--"), "no words in metadata_condition.conditions[0].value"),
    ({"conditions": [{"name": "title", "comparison_operator": "=", "value": "x", "op": 1}]}, "unknown key 'op'"),
    ({"conditions": [one("title", "=", "x")["conditions"][0]] * 65}, "65 conditions, over the limit of 64"),
])
def test_a_bad_condition_is_one_line_naming_it(condition: object, message: str) -> None:
    with pytest.raises(ConstraintError) as refused:
        parse_metadata_condition(condition)
    assert message in str(refused.value) and "\n" not in str(refused.value)


VALUES = ["", "10", "9.5", "-3", "1e3", "abc", "ABC", "Ab", "b", "ß", "ss", "https://ex.org/a", "nan", "inf", " 7 "]
OPERATORS = ["contains", "not contains", "start with", "end with", "empty", "not empty", "=", "≠", ">", "<", "≥", "≤"]


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.one_of(st.sampled_from(VALUES), st.none()), max_size=12),
       operator=st.sampled_from(OPERATORS), value=st.one_of(st.sampled_from(VALUES), st.integers(-20, 20)))
def test_comparisons_agree_with_the_reference(values: list[str | None], operator: str, value: object) -> None:
    bits = [{"text": "", "info": {"url": "u", **({"title": title} if title is not None else {})}} for title in values]
    condition = {"conditions": [{"name": "title", "comparison_operator": operator, "value": value}]}
    mask = evaluate(parse_metadata_condition(condition), text_index_in_memory(bits), "lib")
    assert mask.tolist() == [compare(title or "", operator, str(value)) for title in values]


def test_text_conditions_use_words() -> None:
    assert tokens("The Earth!") == ["the", "earth"]
    assert rows(one("text", "contains", "earth!")) == [1]
