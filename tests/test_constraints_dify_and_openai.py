"""Dify's metadata_condition and OpenAI's attribute filters on the one constraint engine: each operator
means what the same word means in RAGFlow's metadata_condition, and a bad filter is one line naming it."""

from __future__ import annotations

import numpy as np
import pytest

from host.constraints import (
    ConstraintError,
    Everything,
    evaluate,
    parse_attribute_filter,
    parse_dify_condition,
    parse_metadata_condition,
    text_index_in_memory,
)

BITS = [
    {"text": "In the beginning God created the heaven", "info": {"url": "https://ex.org/gen/1", "title": "Genesis",
     "description": "2024-01-05"}},
    {"text": "And the earth was without form", "info": {"url": "https://ex.org/gen/2", "title": "genesis 2",
     "description": "2023-12-31"}},
    {"text": "", "info": {"url": "https://ex.org/ex/1", "title": "Exodus", "description": "10"}},
    {"text": "...", "info": {"url": "https://other.org/1", "title": "ÉCLAIR", "image_url": "https://img/1.png"}},
]
INDEX = text_index_in_memory(BITS)


def dify_rows(condition: object) -> list[int]:
    return np.flatnonzero(evaluate(parse_dify_condition(condition), INDEX, "Books")).tolist()


def openai_rows(filters: object) -> list[int]:
    return np.flatnonzero(evaluate(parse_attribute_filter(filters), INDEX, "Books")).tolist()


def dify(name: object, operator: str, value: object = "x", logic: str | None = "and") -> dict:
    return {"logical_operator": logic, "conditions": [{"name": name, "comparison_operator": operator, "value": value}]}


@pytest.mark.parametrize(("condition", "expected"), [
    (dify("title", "contains", "GEN"), [0, 1]),
    (dify("title", "not contains", "gen"), [2, 3]),
    (dify("title", "start with", "Gen"), [0, 1]),
    (dify("url", "end with", "/1"), [0, 2, 3]),
    (dify("title", "is", "GENESIS"), [0]),
    (dify("title", "is not", "genesis"), [1, 2, 3]),
    (dify("title", "in", ["exodus", "Genesis"]), [0, 2]),
    (dify("title", "in", "exodus, genesis"), [0, 2]),  # one string of comma-separated values
    (dify("title", "not in", ["exodus", "genesis"]), [1, 3]),
    (dify("description", "empty"), [3]),
    (dify("description", "not empty", None), [0, 1, 2]),
    (dify("description", "null"), [3]),  # the older documentation's words
    (dify("description", "not null"), [0, 1, 2]),
    (dify("description", "=", 10), [2]),
    (dify("description", "≠", "10"), [0, 1, 3]),
    (dify("description", ">", 9), [2]),  # 10 > 9 as numbers; "2024-01-05" < "9" as text
    (dify("description", "<", "2024"), [1, 2, 3]),
    (dify("description", "≥", "2024-01-05"), [0]),
    (dify("description", "≤", "2023-12-31"), [1, 2, 3]),
    (dify("description", "before", "2024-01-01"), [1, 2, 3]),  # ISO dates compare in code point order
    (dify("description", "after", "2024-01-01"), [0]),
    (dify(["title", "url"], "contains", "other"), [3]),  # a list of names: any of them
    (dify("library", "is", "books"), [0, 1, 2, 3]),
    (dify("text", "contains", "The Earth"), [1]),
    ({"logical_operator": "or", "conditions": [dify("title", "is", "exodus")["conditions"][0],
                                               dify("title", "contains", "clair")["conditions"][0]]}, [2, 3]),
    ({"logical_operator": None, "conditions": [dify("title", "start with", "gen")["conditions"][0],
                                               dify("url", "contains", "/2")["conditions"][0]]}, [1]),
    ({"logical_operator": "and", "conditions": None}, [0, 1, 2, 3]),  # what Dify's model dumps when empty
    ({}, [0, 1, 2, 3]),
    (None, [0, 1, 2, 3]),
])
def test_each_dify_operator_means_what_it_says(condition: object, expected: list[int]) -> None:
    assert dify_rows(condition) == expected


@pytest.mark.parametrize(("dify_operator", "ragflow_operator"), [
    ("contains", "contains"), ("not contains", "not contains"), ("start with", "start with"), ("end with", "end with"),
    ("is", "="), ("is not", "≠"), ("=", "="), ("≠", "≠"), (">", ">"), ("<", "<"), ("≥", "≥"), ("≤", "≤"),
    ("before", "<"), ("after", ">"), ("empty", "empty"), ("not empty", "not empty"),
])
@pytest.mark.parametrize("value", ["gen", "Exodus", "2024", "10", "https://ex.org/"])
def test_a_dify_operator_is_the_ragflow_operator_of_the_same_meaning(dify_operator: str, ragflow_operator: str,
                                                                     value: str) -> None:
    for field in ("title", "url", "description"):
        ragflow = {"conditions": [{"name": field, "comparison_operator": ragflow_operator, "value": value}]}
        assert parse_dify_condition(dify(field, dify_operator, value)) == parse_metadata_condition(ragflow)


def test_an_empty_dify_condition_is_everything() -> None:
    assert parse_dify_condition({"logical_operator": None, "conditions": []}) == Everything()


@pytest.mark.parametrize(("condition", "message"), [
    ([], "metadata_condition must be an object, got list"),
    ({"logic": "and"}, "unknown key 'logic' in metadata_condition; it has logical_operator and conditions"),
    ({"logical_operator": "xor", "conditions": []}, "metadata_condition.logical_operator must be 'and' or 'or'"),
    ({"conditions": "x"}, "metadata_condition.conditions must be a list, got str"),
    ({"conditions": [1]}, "metadata_condition.conditions[0] must be an object, got int"),
    (dify("author", "is", "x"), "unknown field 'author' in metadata_condition.conditions[0].name; fields are title"),
    (dify("title", "like", "x"), "unsupported comparison_operator 'like' in metadata_condition.conditions[0]"),
    (dify("title", "in", []), "metadata_condition.conditions[0].value must be a non-empty list of values for 'in'"),
    (dify("title", "is", None), "metadata_condition.conditions[0].value must be a string or a number"),
    (dify("text", "is", "x"), "is not supported on text"),
    ({"conditions": [{"name": "title", "comparison_operator": "is", "value": "x", "op": 1}]}, "unknown key 'op'"),
    (dify("title", "in", [str(n) for n in range(65)]), "65 comparisons, over the limit of 64"),
])
def test_a_bad_dify_condition_is_one_line_naming_it(condition: object, message: str) -> None:
    with pytest.raises(ConstraintError) as refused:
        parse_dify_condition(condition)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def comparison(kind: str, key: str, value: object) -> dict:
    return {"type": kind, "key": key, "value": value}


@pytest.mark.parametrize(("filters", "expected"), [
    (comparison("eq", "title", "GENESIS"), [0]),
    (comparison("ne", "title", "genesis"), [1, 2, 3]),
    (comparison("gt", "description", 9), [2]),
    (comparison("gte", "description", "2024-01-05"), [0]),
    (comparison("lt", "description", "2024"), [1, 2, 3]),
    (comparison("lte", "description", 10), [2, 3]),  # 10 as a number; "" below "10" as text
    (comparison("in", "title", ["exodus", "éclair"]), [2, 3]),
    (comparison("nin", "title", ["exodus", "éclair"]), [0, 1]),
    (comparison("eq", "library", "Books"), [0, 1, 2, 3]),
    (comparison("eq", "image_url", True), []),  # booleans are the strings "true" and "false"
    ({"type": "and", "filters": [comparison("gte", "description", "2023"), comparison("lt", "description", "2024")]},
     [1]),
    ({"type": "or", "filters": [comparison("eq", "title", "exodus"),
                                {"type": "and", "filters": [comparison("eq", "title", "genesis")]}]}, [0, 2]),
])
def test_each_openai_filter_means_what_it_says(filters: object, expected: list[int]) -> None:
    assert openai_rows(filters) == expected


@pytest.mark.parametrize(("filters", "message"), [
    ("title", "filters must be an object, got str"),
    ({"type": "like", "key": "title", "value": "x"}, "filters.type must be one of eq, ne, gt, gte, lt, lte, in, nin, and, or"),
    ({"type": "eq", "key": "author", "value": "x"}, "unknown field 'author' in filters.key; fields are url, title"),
    ({"type": "eq", "key": "text", "value": "x"}, "unknown field 'text' in filters.key"),
    ({"type": "eq", "key": "title", "value": ["x"]}, "filters.value must be a string or a number"),
    ({"type": "in", "key": "title", "value": "x"}, "filters.value must be a non-empty list for 'in'"),
    ({"type": "eq", "key": "title", "value": "x", "op": 1}, "unknown key 'op' in filters; a 'eq' filter has type, key, value"),
    ({"type": "and", "filters": []}, "filters.filters must be a non-empty list of filters"),
    ({"type": "or", "filters": [comparison("eq", "title", "x"), 3]}, "filters.filters[1] must be an object, got int"),
    ({"type": "in", "key": "title", "value": list(range(65))}, "65 comparisons, over the limit of 64"),
])
def test_a_bad_openai_filter_is_one_line_naming_it(filters: object, message: str) -> None:
    with pytest.raises(ConstraintError) as refused:
        parse_attribute_filter(filters)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_an_openai_filter_nested_too_deep_is_refused() -> None:
    filters: dict = comparison("eq", "title", "x")
    for _ in range(40):
        filters = {"type": "and", "filters": [filters]}
    with pytest.raises(ConstraintError, match="nested deeper than 32"):
        parse_attribute_filter(filters)
