"""OpenAI's vector-store search `filters` (file attributes), translated onto the constraint syntax tree.

    {"type": "eq" | "ne" | "gt" | "gte" | "lt" | "lte" | "in" | "nin", "key": "title", "value": ...}
    {"type": "and" | "or", "filters": [filter, ...]}

A bit's attributes are its info fields and its library (ATTRIBUTES); the comparisons mean what
=, ≠, >, ≥, <, ≤ mean in every other filter of the host (metadata_condition.py's `comparison`:
whole values, case-insensitively; numbers as numbers, anything else in code point order). `in`
and `nin` take a list (= any of them, ≠ every one of them). A boolean value is the string
"true" or "false". Anything else is a ConstraintError naming its JSON path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from host.constraints.errors import ConstraintError
from host.constraints.metadata_condition import comparison
from host.constraints.parser import MAX_CHARS, MAX_DEPTH, MAX_TERMS
from host.constraints.syntax import And, Node, Not, Or, leaves

ATTRIBUTES = ("url", "title", "description", "image_url", "library")
COMPARISONS = {"eq": "=", "ne": "≠", "gt": ">", "gte": "≥", "lt": "<", "lte": "≤"}
LISTS = ("in", "nin")
COMPOUNDS = ("and", "or")
TYPES = (*COMPARISONS, *LISTS, *COMPOUNDS)


def parse_attribute_filter(value: Any, where: str = "filters") -> Node:
    """An OpenAI comparison or compound filter -> a syntax tree."""
    if len(str(value)) > MAX_CHARS * 4:
        raise ConstraintError(f"{where} holds over {MAX_CHARS * 4} characters")
    node = _filter(value, where, 0)
    if leaves(node) > MAX_TERMS:
        raise ConstraintError(f"{where} makes {leaves(node)} comparisons, over the limit of {MAX_TERMS}")
    return node


def _filter(value: Any, where: str, level: int) -> Node:
    if level > MAX_DEPTH:
        raise ConstraintError(f"{where} is nested deeper than {MAX_DEPTH}")
    if not isinstance(value, Mapping):
        raise ConstraintError(f"{where} must be an object, got {type(value).__name__}")
    kind = value.get("type")
    if kind not in TYPES:
        raise ConstraintError(f"{where}.type must be one of {', '.join(TYPES)}, got {kind!r:.40}")
    keys = ("type", "filters") if kind in COMPOUNDS else ("type", "key", "value")
    unknown = sorted(set(value) - set(keys))
    if unknown:
        raise ConstraintError(f"unknown key {unknown[0]!r:.40} in {where}; a {kind!r} filter has {', '.join(keys)}")
    if kind in COMPOUNDS:
        children = value.get("filters")
        if not isinstance(children, list) or not children:
            raise ConstraintError(f"{where}.filters must be a non-empty list of filters")
        nodes = tuple(_filter(child, f"{where}.filters[{number}]", level + 1) for number, child in enumerate(children))
        return nodes[0] if len(nodes) == 1 else And(nodes) if kind == "and" else Or(nodes)
    key, given = value.get("key"), value.get("value")
    if kind in COMPARISONS:
        return comparison(key, COMPARISONS[kind], _scalar(given), where, labels=ATTRIBUTES, name_key="key")
    if not isinstance(given, list) or not given:
        raise ConstraintError(f"{where}.value must be a non-empty list for {kind!r}")
    equal = tuple(comparison(key, "=", _scalar(item), where, labels=ATTRIBUTES, name_key="key") for item in given)
    anyone = equal[0] if len(equal) == 1 else Or(equal)
    return anyone if kind == "in" else Not(anyone)


def _scalar(value: Any) -> Any:
    """OpenAI's booleans are attribute values too: as the strings they would be stored as."""
    return ("true" if value else "false") if isinstance(value, bool) else value
