"""Constraints as clients send them: a query string, or Mindbreeze's structured query expressions.

Mindbreeze's search API (api.v2.search) takes its `constraint` as a query expression object;
this host accepts the same shapes, each object holding exactly one of:

    {"unparsed": "title:bible AND faith"}           the query language (see parser.py)
    {"quoted_term": "king james"}                     a phrase, on `text` ...
    {"label": "title", "quoted_term": "king james"}  ... or on a label
    {"label": "title", "unparsed": "bible OR torah"}  a query whose bare terms are on that label
    {"and": [expression, ...]}, {"or": [expression, ...]}, {"not": expression}

plus Mindbreeze's optional annotations `id` and `description`, which do not change the meaning.
`regex` (regular expressions) and `range` are refused by name, and any other key is an error
naming it and its JSON path. A string that starts with "{" is read as JSON first, so form and
multipart clients can send a structured constraint as one text field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from host.constraints.errors import ConstraintError
from host.constraints.parser import LABEL_LIST, MAX_CHARS, MAX_DEPTH, MAX_TERMS, parse_query
from host.constraints.syntax import And, Node, Not, Or, Words, depth, leaves
from host.constraints.words import LABELS, words

KINDS = ("unparsed", "quoted_term", "and", "or", "not")
ANNOTATIONS = ("id", "description")
REFUSED = {"regex": "regular expressions are not supported", "range": "range constraints are not supported"}


def parse_constraint(value: Any) -> Node:
    """A constraint as a client sent it (a query string, or a structured form) -> a syntax tree.

    Raises ConstraintError naming the construct and where it is.
    """
    if isinstance(value, str) and value.lstrip().startswith("{"):
        if len(value) > MAX_CHARS * 4:
            raise ConstraintError(f"constraint is {len(value)} characters, over the limit of {MAX_CHARS * 4}")
        try:
            value = json.loads(value)
        except json.JSONDecodeError as problem:
            raise ConstraintError(f"constraint starts with '{{' but is not valid JSON: {problem}") from None
    if isinstance(value, str):
        return parse_query(value)
    if isinstance(value, Mapping):
        node = _Reader().expression(value, "constraint", 0)
        if leaves(node) > MAX_TERMS:
            raise ConstraintError(f"constraint has {leaves(node)} terms, over the limit of {MAX_TERMS}")
        if depth(node) > MAX_DEPTH:
            raise ConstraintError(f"constraint is nested deeper than {MAX_DEPTH}")
        return node
    raise ConstraintError(f"constraint must be a string or an object, got {type(value).__name__}")


class _Reader:
    """Walks a structured form, keeping its total text within MAX_CHARS and its depth bounded."""

    def __init__(self) -> None:
        self.characters = 0

    def text(self, value: Any, path: str) -> str:
        if not isinstance(value, str):
            raise ConstraintError(f"{path} must be a string, got {type(value).__name__}")
        self.characters += len(value)
        if self.characters > MAX_CHARS:
            raise ConstraintError(f"constraint holds over {MAX_CHARS} characters of text at {path}")
        return value

    def expression(self, value: Any, path: str, level: int) -> Node:
        if level > MAX_DEPTH:
            raise ConstraintError(f"constraint is nested deeper than {MAX_DEPTH} at {path}")
        if not isinstance(value, Mapping):
            raise ConstraintError(f"{path} must be an object, got {type(value).__name__}")
        for key in value:
            if key in REFUSED:
                raise ConstraintError(f"{REFUSED[key]} at {path}.{key}")
            if key not in (*KINDS, "label", *ANNOTATIONS):
                raise ConstraintError(
                    f"unknown key {key!r} at {path}; an expression has one of {', '.join(KINDS)}"
                    " (with an optional label)"
                )
        kinds = [kind for kind in KINDS if kind in value]
        if len(kinds) != 1:
            found = f"{' and '.join(kinds)}" if kinds else "none"
            raise ConstraintError(f"{path} must have exactly one of {', '.join(KINDS)}; it has {found}")
        kind = kinds[0]
        label = self.label(value, path, kind)
        inner = f"{path}.{kind}"
        if kind == "unparsed":
            return parse_query(self.text(value[kind], inner), default_label=label, path=inner)
        if kind == "quoted_term":
            phrase = words(self.text(value[kind], inner))
            if not phrase:
                raise ConstraintError(f"no words in the quoted_term at {inner}")
            return Words(label, tuple(phrase))
        if kind == "not":
            return Not(self.expression(value[kind], inner, level + 1))
        children = value[kind]
        if not isinstance(children, list) or not children:
            raise ConstraintError(f"{inner} must be a non-empty list of expressions")
        nodes = tuple(self.expression(child, f"{inner}[{number}]", level + 1) for number, child in enumerate(children))
        return And(nodes) if kind == "and" else Or(nodes)

    def label(self, value: Mapping[str, Any], path: str, kind: str) -> str:
        if "label" not in value:
            return "text"
        if kind not in ("unparsed", "quoted_term"):
            raise ConstraintError(f"a label goes with unparsed or quoted_term, not with {kind}, at {path}")
        label = value["label"]
        if not isinstance(label, str) or label.lower() not in LABELS:
            raise ConstraintError(f"unknown label {label!r} at {path}.label; labels are {LABEL_LIST}")
        return label.lower()
