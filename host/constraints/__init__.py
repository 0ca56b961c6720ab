"""Constraints: filters over a per-library text index (SPEC §10, issue 12).

One query core for every dialect (`POST /`, the page, RAGFlow's retrieval API, the MCP tool, Dify's
External Knowledge API, OpenAI's vector-store search):

    node = parse_constraint(value)                 # query string or Mindbreeze JSON form
    node = parse_metadata_condition(condition)     # RAGFlow's metadata_condition
    node = parse_dify_condition(condition)         # Dify's metadata_condition
    node = parse_attribute_filter(filters)         # OpenAI's vector-store search filters
    mask = evaluate(node, text_index, library_name)    # bool over one library's rows
    mask = evaluate(node, text_index, RowLibraries(names, owners))  # ... or each row's library's

The room knows only text indexes, one per segment (one library file or many): a model's segments
are read as one in host/search/model_text.py. The text index is built by `build_text_index` at
compile time (host/store/compiled.py) and opened memory-mapped with it (`Segment.text_index`).
"""

from __future__ import annotations

from host.constraints.attribute_filter import parse_attribute_filter
from host.constraints.dify_condition import parse_dify_condition
from host.constraints.errors import ConstraintError
from host.constraints.evaluation import RowLibraries, evaluate, evaluate_libraries
from host.constraints.metadata_condition import parse_metadata_condition
from host.constraints.structured import parse_constraint
from host.constraints.syntax import And, Compare, Everything, Node, Not, Or, Words
from host.constraints.text_index import TextIndex, build_text_index, open_text_index, text_index_in_memory

__all__ = [
    "And", "Compare", "ConstraintError", "Everything", "Node", "Not", "Or", "RowLibraries", "TextIndex", "Words",
    "build_text_index", "evaluate", "evaluate_libraries",
    "open_text_index", "parse_attribute_filter", "parse_constraint", "parse_dify_condition",
    "parse_metadata_condition", "text_index_in_memory",
]
