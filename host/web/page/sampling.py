"""A truly random sample of the bits a caller may see, within a budget.

"Nothing asked" is not a query: the bits are drawn uniformly, without replacement, from the
visible rows (every visible bit equally likely at every place), and the budget rule of
`host.search.budget.apply_budget` is applied to them in the order drawn. No similarity is made up.

The draw depends only on the visible rows in order and on `rng`: hidden rows take no part in
it, so a caller without a tag gets exactly the sample a host without the hidden bits would give
for the same seed.
"""

from __future__ import annotations

import numpy as np

from host.catalog.model_index import ModelIndex
from host.search.engine import CountType, apply_budget


def sample_rows(index: ModelIndex, visible: np.ndarray | None, count: int, count_type: CountType, max_bits: int,
                rng: np.random.Generator) -> tuple[np.ndarray, int | None]:
    """Rows drawn uniformly from `visible` (a bool mask over the index, None for every row), in
    the order drawn, that fill the budget; and the budget the first bit is cut to when it alone
    overflows a token budget. At most `max_bits` rows."""
    population = index.bit_count if visible is None else int(np.count_nonzero(visible))
    wanted = min(population, max_bits, count if count_type == "bit" else max_bits)
    if wanted == 0:
        return np.zeros(0, dtype=np.int64), None
    # Generator.choice without replacement draws in random order, in O(wanted) for a small
    # share of a large population.
    positions = rng.choice(population, size=wanted, replace=False)
    rows = positions if visible is None else np.flatnonzero(visible)[positions]
    taken, cut_to = apply_budget(index.token_counts[rows], count, count_type)
    return rows[:taken].astype(np.int64), cut_to
