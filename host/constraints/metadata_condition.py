"""RAGFlow's `metadata_condition`, translated onto the constraint syntax tree.

    {"logic": "and" | "or",
     "conditions": [{"name": "title", "comparison_operator": "contains", "value": "bible"}, ...]}

Fields (`name`) are the constraint labels. Operators are RAGFlow's: contains, not contains,
start with, end with, empty, not empty, =, ≠, >, <, ≥, ≤, and the aliases RAGFlow's
convert_conditions accepts (is, not is, !=, >=, <=). As in RAGFlow's meta_filter:

- contains / not contains / start with / end with work on the whole value, case-insensitively
  (substrings: "contains": "bib" finds "Bible").
- = ≠ > < ≥ ≤ compare as numbers when both the value and the field's value are numbers
  (float()), else as strings. Strings are compared case-insensitively (folded, see words.py), in
  code point order: "b" > "a", "b" > "abc", "B" = "b". A missing field is the empty string.
- empty / not empty: whether the field's value is the empty string (or absent).

On `text` (too large to keep a second copy of) only the word operators exist: contains and not
contains match the value's words as a phrase (whole words), empty / not empty whether the text
has any word. `library` is the library's name. An empty condition list restricts nothing.
Anything else is a ConstraintError naming the condition.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast, get_args

from host.constraints.errors import ConstraintError
from host.constraints.parser import MAX_CHARS, MAX_TERMS
from host.constraints.syntax import And, Compare, Everything, Node, Not, Operator, Or, Words
from host.constraints.words import LABELS, fold, words

ALIASES: dict[str, Operator] = {"is": "=", "not is": "≠", "!=": "≠", ">=": "≥", "<=": "≤"}
OPERATORS: tuple[str, ...] = get_args(Operator)
TEXT_OPERATORS = ("contains", "not contains", "empty", "not empty")
CONDITION_KEYS = ("name", "comparison_operator", "value")


def parse_metadata_condition(value: Any) -> Node:
    """A RAGFlow metadata_condition -> a syntax tree (Everything when it restricts nothing)."""
    where = "metadata_condition"
    listed = condition_list(value, where, "logic")
    if listed is None:
        return Everything()
    logic, conditions = listed
    if len(conditions) > MAX_TERMS:
        raise ConstraintError(f"{where} has {len(conditions)} conditions, over the limit of {MAX_TERMS}")
    total = sum(len(str(condition.get("value", ""))) for condition in conditions if isinstance(condition, Mapping))
    if total > MAX_CHARS:
        raise ConstraintError(f"{where} holds over {MAX_CHARS} characters of values")
    nodes = tuple(_condition(condition, f"{where}.conditions[{number}]") for number, condition in enumerate(conditions))
    return combined(nodes, logic)


def condition_list(value: Any, where: str, logic_key: str) -> tuple[str, list[Any]] | None:
    """(logic, conditions) of a metadata_condition object with its logic under `logic_key` (RAGFlow's
    `logic`, Dify's `logical_operator`); None when it restricts nothing. A null logic is `and`, null
    conditions are none (Dify's model dumps both so)."""
    if value is None or (isinstance(value, Mapping) and not value):
        return None
    if not isinstance(value, Mapping):
        raise ConstraintError(f"{where} must be an object, got {type(value).__name__}")
    unknown = sorted(set(value) - {logic_key, "conditions"})
    if unknown:
        raise ConstraintError(f"unknown key {unknown[0]!r:.40} in {where}; it has {logic_key} and conditions")
    logic = value.get(logic_key) or "and"
    if logic not in ("and", "or"):
        raise ConstraintError(f"{where}.{logic_key} must be 'and' or 'or', got {logic!r:.40}")
    conditions = value.get("conditions")
    conditions = [] if conditions is None else conditions
    if not isinstance(conditions, list):
        raise ConstraintError(f"{where}.conditions must be a list, got {type(conditions).__name__}")
    return (logic, conditions) if conditions else None


def combined(nodes: tuple[Node, ...], logic: str) -> Node:
    """The nodes joined by `and` or `or` (one node: itself)."""
    return nodes[0] if len(nodes) == 1 else And(nodes) if logic == "and" else Or(nodes)


def _condition(condition: Any, where: str) -> Node:
    operator = condition_operator(condition, where, OPERATORS, ALIASES)
    return comparison(condition.get("name"), operator, condition.get("value"), where)


def condition_operator(condition: Any, where: str, operators: tuple[str, ...], aliases: Mapping[str, str]) -> str:
    """The operator of one condition object ({name, comparison_operator, value}), aliases mapped,
    once its keys and operator are checked."""
    if not isinstance(condition, Mapping):
        raise ConstraintError(f"{where} must be an object, got {type(condition).__name__}")
    unknown = sorted(set(condition) - set(CONDITION_KEYS))
    if unknown:
        raise ConstraintError(f"unknown key {unknown[0]!r:.40} in {where}; a condition has {', '.join(CONDITION_KEYS)}")
    given = condition.get("comparison_operator")
    operator = aliases.get(given, given) if isinstance(given, str) else given
    if not isinstance(operator, str) or operator not in operators:
        raise ConstraintError(f"unsupported comparison_operator {given!r:.40} in {where}; "
                              f"operators are {', '.join((*operators, *aliases))}")
    return operator


def comparison(field: Any, operator: str, value: Any, where: str, *, labels: tuple[str, ...] = LABELS,
               name_key: str = "name") -> Node:
    """One field compared with one value: `operator` is one of OPERATORS (aliases already mapped).

    Shared by every dialect's filter (RAGFlow's and Dify's metadata_condition, OpenAI's attribute
    filters), so an operator means the same whichever door it came through. `where` names the
    condition in errors and `name_key` the key holding its field; `labels` are the fields that
    dialect may name.
    """
    if not isinstance(field, str) or field not in labels:
        raise ConstraintError(f"unknown field {field!r} in {where}.{name_key}; fields are {', '.join(labels)}")
    text = _value(value, operator, where)
    if field == "text":
        return _text_condition(operator, text, where)
    return Compare(field, cast(Operator, operator), fold(text))


def _value(value: Any, operator: str, where: str) -> str:
    if operator in ("empty", "not empty"):
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConstraintError(f"{where}.value must be a string or a number, got {value!r:.40}")
    return str(value)


def _text_condition(operator: str, value: str, where: str) -> Node:
    if operator not in TEXT_OPERATORS:
        raise ConstraintError(
            f"comparison_operator {operator!r} is not supported on text in {where}; "
            f"text supports {', '.join(TEXT_OPERATORS)}"
        )
    if operator in ("empty", "not empty"):
        has_words = Words("text", ("",), prefix=True)  # the empty prefix begins every word
        return Not(has_words) if operator == "empty" else has_words
    found = words(value)
    if not found:
        raise ConstraintError(f"no words in {where}.value {value!r:.40}")
    match = Words("text", tuple(found))
    return match if operator == "contains" else Not(match)

