"""The one query core: which model answers, how its bits are searched, what a caller gets.

Every way of asking (`POST /`, the page, and the dialects) comes here with a vector, a budget
and a grant; ranking, budgets and access filtering happen nowhere else. RAGFlow's retrieval asks
`run_hybrid_query` (a vector and its words, weighed together, the best `top_k`) instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from access import Grant
from host.catalog.generations import Catalog
from host.catalog.model_index import ModelIndex
from host.constraints import Node, constraint_mask
from host.search.engine import PROBES, CountType, Search, Selection, rank
from host.search.errors import NothingLoaded, QueryError
from host.search.hybrid import HybridQuery, HybridSelection, rank_hybrid
from host.store.clusters import CLUSTER_FROM

SEARCH_MODES = ("auto", "exact", "approximate")


@dataclass(frozen=True)
class SearchPolicy:
    """How to search a model's bits: `auto` is approximate from `approximate_from` visible bits."""

    mode: str = "auto"
    approximate_from: int = CLUSTER_FROM  # where libraries are clustered: a cluster scan is 6x faster than exact there
    oversample: int = 1000
    probes: int = PROBES

    def for_bits(self, bits: int) -> Search:
        approximate = self.mode == "approximate" or (self.mode == "auto" and bits >= self.approximate_from)
        return Search(approximate=approximate, oversample=max(self.oversample, pool_for(bits)), probes=self.probes)


def pool_for(bits: int) -> int:
    """Rows an approximate search considers at least, for `bits` visible bits.

    The pool that holds the true top 10 grows with the library, and a little faster than it: p90
    ~0.3% of the bits in scripts/bench.py's clustered 100k and 1M libraries (a fixed 1000 gave
    recall@10 0.85 at 1M), while at 10M x 384 (scripts/bench_10m.py) 0.4% gave recall 0.857, 0.5%
    0.9995, 0.6% and 0.8% 1.000. So 0.4% up to 1M bits, growing by 0.2% for each tenfold beyond.
    """
    return round(bits / 250 * (1 + 0.5 * max(0.0, math.log10(max(bits, 1) / 1_000_000))))


@dataclass(frozen=True)
class Query:
    """A question in the model's vector space, with its budget and what narrows it."""

    vector: np.ndarray  # float32, the model's dimension
    count: int
    count_type: CountType
    similarity_threshold: float | None = None  # the list ends at the first bit scoring below it
    constraint: Node | None = None  # host.constraints: only bits matching it
    libraries: frozenset[str] | None = None  # only bits of these libraries (names)


def choose_model(catalog: Catalog, model: str | None, grant: Grant, *, reveal_all: bool = False) -> ModelIndex:
    """The model index to answer from; the host's only one when none is named.

    A model with no bit this caller may see is not revealed to them: never named in errors, never
    in the way of the default model. Only with the opt-in restricted signals on (`reveal_all`) is
    such a model answered when the caller names it exactly, so they can be told bits were held back.
    """
    models = {name: index for name, index in catalog.models.items() if index.visible_count(grant.access_tags)}
    served = ", ".join(sorted(models)) or "nothing yet"
    if model is None:
        if len(models) == 1:
            return next(iter(models.values()))
        if not models:
            raise NothingLoaded("no libraries are loaded on this host yet")
        raise QueryError(f"query_embedding_model is required: this host serves {served}")
    if model in models:
        return models[model]
    if reveal_all and model in catalog.models:
        return catalog.models[model]
    raise QueryError(f"query_embedding_model {model!r:.80} is not served here; this host serves {served}")


def run_query(index: ModelIndex, query: Query, grant: Grant, policy: SearchPolicy, *,
              count_restricted: bool = False) -> Selection:
    """The bits `grant` may see that best answer `query`, within its budget."""
    return rank(
        index,
        query.vector,
        granted=grant.access_tags,
        count=query.count,
        count_type=query.count_type,
        count_restricted=count_restricted,
        # `auto` follows the bits this caller may see, so hidden bits never switch the mode.
        search=policy.for_bits(index.visible_count(grant.access_tags)),
        constraint=narrowing_mask(index, query),
        similarity_threshold=query.similarity_threshold,
    )


def run_hybrid_query(index: ModelIndex, query: HybridQuery, grant: Grant) -> HybridSelection:
    """The bits `grant` may see that best answer `query` by `w·vector + (1-w)·term` (host/search/hybrid.py)."""
    return rank_hybrid(index, query, index.visible_rows(grant.access_tags), narrowing_mask(index, query))


def narrowing_mask(index: ModelIndex, query: Query | HybridQuery) -> np.ndarray | None:
    """The rows `query`'s constraint and library list allow (None: every row). The engine ANDs it
    with the caller's visibility, so it can only narrow what they see."""
    mask = None if query.constraint is None else constraint_mask(query.constraint, index)
    if query.libraries is not None:
        chosen = np.zeros(index.bit_count, dtype=bool)
        for position, library in enumerate(index.libraries):
            if library.name in query.libraries:
                chosen[index.offsets[position] : index.offsets[position + 1]] = True
        mask = chosen if mask is None else mask & chosen
    return mask
