"""A model's libraries' text indexes read as one: constraint masks over its rows.

The constraints room (host/constraints) works on one library's text index at a time; a query works
on a `ModelIndex`, every library of one model under one row numbering. This is where the two meet:

    mask = constraint_mask(node, model_index)      # bool over the ModelIndex's rows
    rank(..., constraint=mask)                     # ANDed with visibility: never widens it
"""

from __future__ import annotations

import numpy as np

from host.catalog.model_index import ModelIndex
from host.constraints import Node, evaluate_libraries
from host.store.compiled import text_index_of


def constraint_mask(node: Node, index: ModelIndex) -> np.ndarray:
    """Rows of a model's libraries that satisfy `node` (bool, one per global row)."""
    return evaluate_libraries(node, [(text_index_of(library), library.name) for library in index.libraries])
