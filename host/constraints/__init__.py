"""Constraints: filters and term statistics over a per-library text index (SPEC §10, issue 12).

One query core for every dialect (`POST /`, the page, RAGFlow's retrieval API, the MCP tool, Dify's
External Knowledge API, OpenAI's vector-store search):

    node = parse_constraint(value)                 # query string or Mindbreeze JSON form
    node = parse_metadata_condition(condition)     # RAGFlow's metadata_condition
    node = parse_dify_condition(condition)         # Dify's metadata_condition
    node = parse_attribute_filter(filters)         # OpenAI's vector-store search filters
    mask = constraint_mask(node, model_index)      # bool over the ModelIndex's rows
    rank(..., constraint=mask)                     # ANDed with visibility: never widens it
    term = model_term_similarity(question, model_index, rows, visible)   # RAGFlow's term score

The text index is built by `build_text_index` at compile time (host/store/compiled.py) and opened
memory-mapped with the library (`CompiledLibrary.text_index`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from host.constraints.attribute_filter import parse_attribute_filter
from host.constraints.dify_condition import parse_dify_condition
from host.constraints.errors import ConstraintError
from host.constraints.evaluation import evaluate, evaluate_libraries
from host.constraints.metadata_condition import parse_metadata_condition
from host.constraints.structured import parse_constraint
from host.constraints.syntax import And, Compare, Everything, Node, Not, Or, Words
from host.constraints.term_scores import hybrid_similarity, term_similarity
from host.constraints.text_index import TextIndex, build_text_index, open_text_index, text_index_in_memory

if TYPE_CHECKING:
    from host.catalog.model_index import ModelIndex
    from host.store.compiled import CompiledLibrary


def text_index_of(library: CompiledLibrary) -> TextIndex:
    """The library's text index; one made in memory without records (tests) has an empty one."""
    if library.text_index is not None:
        return library.text_index
    return text_index_in_memory([{}] * library.bit_count)


def constraint_mask(node: Node, index: ModelIndex) -> np.ndarray:
    """Rows of a model's libraries that satisfy `node` (bool, one per global row)."""
    return evaluate_libraries(node, [(text_index_of(library), library.name) for library in index.libraries])


def model_term_similarity(
    question: str, index: ModelIndex, rows: np.ndarray, visible: np.ndarray | None
) -> np.ndarray:
    """Term similarity in [0, 1] of `question` to global `rows`, from visible bits' statistics."""
    indexes = [text_index_of(library) for library in index.libraries]
    return term_similarity(question, indexes, index.offsets, rows, visible)


__all__ = [
    "And", "Compare", "ConstraintError", "Everything", "Node", "Not", "Or", "TextIndex", "Words",
    "build_text_index", "constraint_mask", "evaluate", "evaluate_libraries", "hybrid_similarity",
    "model_term_similarity", "open_text_index", "parse_attribute_filter", "parse_constraint", "parse_dify_condition",
    "parse_metadata_condition",
    "term_similarity", "text_index_in_memory", "text_index_of",
]
