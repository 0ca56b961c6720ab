"""Brute-force references for constraints: plain Python over the bits' records.

Written from the documented rules (host/constraints/*.py docstrings), not from the engine's
code: one bit at a time, strings and lists, no index. Slow and obviously right.
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Any

from host.constraints.syntax import And, Compare, Everything, Node, Not, Or, Words


def fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text.casefold())


def tokens(text: str) -> list[str]:
    return re.findall(r"\w+", fold(text))


def value_of(record: dict[str, Any], field: str, library: str) -> str:
    if field == "library":
        return library
    if field == "text":
        return record.get("text") or ""
    return (record.get("info") or {}).get(field) or ""


def holds_sequence(haystack: list[str], sequence: tuple[str, ...], prefix: bool = False) -> bool:
    size = len(sequence)
    for start in range(len(haystack) - size + 1):
        *head, last = haystack[start : start + size]
        if head == list(sequence[:-1]) and (last.startswith(sequence[-1]) if prefix else last == sequence[-1]):
            return True
    return False


def number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return None if math.isnan(value) else value


def compare(field_value: str, operator: str, value: str) -> bool:
    """RAGFlow's meta_filter rules on folded strings (metadata_condition.py docstring)."""
    left, right = fold(field_value), fold(value)
    if operator == "contains":
        return right in left
    if operator == "not contains":
        return right not in left
    if operator == "start with":
        return left.startswith(right)
    if operator == "end with":
        return left.endswith(right)
    if operator == "empty":
        return left == ""
    if operator == "not empty":
        return left != ""
    a: Any
    b: Any
    a, b = (number(left), number(right)) if number(left) is not None and number(right) is not None else (left, right)
    return {"=": a == b, "≠": a != b, ">": a > b, "<": a < b, "≥": a >= b, "≤": a <= b}[operator]


def matches(node: Node, record: dict[str, Any], library: str) -> bool:
    if isinstance(node, Words):
        return holds_sequence(tokens(value_of(record, node.label, library)), node.words, node.prefix)
    if isinstance(node, Compare):
        return compare(value_of(record, node.field, library), node.operator, node.value)
    if isinstance(node, And):
        return all(matches(child, record, library) for child in node.children)
    if isinstance(node, Or):
        return any(matches(child, record, library) for child in node.children)
    if isinstance(node, Not):
        return not matches(node.child, record, library)
    assert isinstance(node, Everything)
    return True
