"""The parsed form of a constraint: a small immutable tree, whatever dialect it came from.

The query language, Mindbreeze's structured JSON forms and RAGFlow's metadata_condition all
parse into these nodes, and one evaluator (`evaluate.py`) turns a tree into a row mask.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Comparison operators on whole field values (RAGFlow's metadata_condition, after aliases).
Operator = Literal[
    "contains", "not contains", "start with", "end with", "empty", "not empty", "=", "≠", ">", "<", "≥", "≤"
]


@dataclass(frozen=True)
class Words:
    """Bits whose `label` holds these words in sequence (one word: anywhere in the field).

    With `prefix`, the last word is a prefix of a word of the field (`label:pre*`).
    """

    label: str
    words: tuple[str, ...]
    prefix: bool = False


@dataclass(frozen=True)
class Compare:
    """Bits whose whole folded `field` value stands in `operator` to `value` (metadata_condition)."""

    field: str
    operator: Operator
    value: str


@dataclass(frozen=True)
class And:
    children: tuple[Node, ...]


@dataclass(frozen=True)
class Or:
    children: tuple[Node, ...]


@dataclass(frozen=True)
class Not:
    child: Node


@dataclass(frozen=True)
class Everything:
    """Every bit: an empty metadata_condition (no condition restricts anything)."""


Node = Words | Compare | And | Or | Not | Everything


def leaves(node: Node) -> int:
    """How many term or comparison leaves a tree holds."""
    if isinstance(node, And | Or):
        return sum(leaves(child) for child in node.children)
    if isinstance(node, Not):
        return leaves(node.child)
    return 0 if isinstance(node, Everything) else 1


def depth(node: Node) -> int:
    if isinstance(node, And | Or):
        return 1 + max(depth(child) for child in node.children)
    if isinstance(node, Not):
        return 1 + depth(node.child)
    return 1
