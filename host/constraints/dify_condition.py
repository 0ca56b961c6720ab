"""Dify's `metadata_condition` (its External Knowledge API), translated onto the constraint syntax tree.

    {"logical_operator": "and" | "or",
     "conditions": [{"name": "title", "comparison_operator": "contains", "value": "jonah"}, ...]}

Dify sends this object as its pydantic model dumps it, so `logical_operator` may be null (and)
and `conditions` null or empty (nothing is restricted). Fields are the constraint labels (title,
url, description, image_url, library, text); `name` may also be a list of them, as Dify's older
documentation shows: the condition then holds when it holds for any of them.

Every operator Dify defines means what the same word means in RAGFlow's metadata_condition
(metadata_condition.py, the same `comparison`): contains, not contains, start with, end with,
empty, not empty, =, ≠, >, <, ≥, ≤, with `is` / `is not` as = / ≠, `before` / `after` as < / >
(numbers compare as numbers, anything else in code point order, so ISO dates compare as dates),
`null` / `not null` (older documentation) as empty / not empty, and `in` / `not in` taking a list
of values (or one string of comma-separated values) as = any of them / ≠ every one of them.
"""

from __future__ import annotations

from typing import Any

from host.constraints.errors import ConstraintError
from host.constraints.metadata_condition import OPERATORS, combined, comparison, condition_list, condition_operator
from host.constraints.parser import MAX_CHARS, MAX_TERMS
from host.constraints.syntax import Everything, Node, Not, leaves

ALIASES = {"is": "=", "is not": "≠", "before": "<", "after": ">", "null": "empty", "not null": "not empty"}
LISTS = ("in", "not in")
DIFY_OPERATORS = (*OPERATORS, *LISTS)  # and ALIASES
WHERE = "metadata_condition"


def parse_dify_condition(value: Any) -> Node:
    """A Dify metadata_condition -> a syntax tree (Everything when it restricts nothing)."""
    listed = condition_list(value, WHERE, "logical_operator")
    if listed is None:
        return Everything()
    logic, conditions = listed
    if len(str(conditions)) > MAX_CHARS * 4:
        raise ConstraintError(f"{WHERE} holds over {MAX_CHARS * 4} characters")
    node = combined(tuple(_condition(condition, f"{WHERE}.conditions[{number}]")
                          for number, condition in enumerate(conditions)), logic)
    if leaves(node) > MAX_TERMS:
        raise ConstraintError(f"{WHERE} makes {leaves(node)} comparisons, over the limit of {MAX_TERMS}")
    return node


def _condition(condition: Any, where: str) -> Node:
    operator = condition_operator(condition, where, DIFY_OPERATORS, ALIASES)
    names = condition.get("name")
    fields = names if isinstance(names, list) and names else [names]
    nodes = tuple(_one_field(field, operator, condition.get("value"), where) for field in fields)
    return combined(nodes, "or")


def _one_field(field: Any, operator: str, value: Any, where: str) -> Node:
    if operator not in LISTS:
        return comparison(field, operator, value, where)
    values = [part.strip() for part in value.split(",")] if isinstance(value, str) else value
    if not isinstance(values, list) or not values:
        raise ConstraintError(f"{where}.value must be a non-empty list of values for {operator!r}")
    anyone = combined(tuple(comparison(field, "=", item, where) for item in values), "or")
    return anyone if operator == "in" else Not(anyone)
