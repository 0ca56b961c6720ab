"""A model's segments' text indexes read as one: constraint masks over its rows.

The constraints room (host/constraints) works on one text index at a time; a query works on a
`ModelIndex`, every segment of one model under one row numbering, each row served as one of the
model's libraries (whose name a `library` condition reads). This is where the two meet:

    mask = constraint_mask(node, model_index)      # bool over the ModelIndex's rows
    rank(..., constraint=mask)                     # ANDed with visibility: never widens it
"""

from __future__ import annotations

import numpy as np

from host.catalog.model_index import ModelIndex
from host.constraints import Node, RowLibraries, evaluate_libraries
from host.store.compiled import text_index_of


def constraint_mask(node: Node, index: ModelIndex) -> np.ndarray:
    """Rows of a model's libraries that satisfy `node` (bool, one per global row)."""
    names = index.library_names
    return evaluate_libraries(node, [
        (text_index_of(segment), RowLibraries(names, index.owners[index.offsets[position]:index.offsets[position + 1]]))
        for position, segment in enumerate(index.segments)])
