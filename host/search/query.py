"""The one query core: which model answers, how its bits are searched, what a caller gets.

Every way of asking (`POST /`, the page, and the dialects) comes here with a query (a vector, its
text, or both), a mode, a budget and a grant; ranking, budgets and access filtering happen nowhere
else. Three modes:

- `vector`: the bits nearest the vector (host/search/engine.py), by similarity;
- `keyword`: the bits BM25 ranks best for the text (host/search/keywords.py); only bits holding
  one of its keywords; their similarity only when a vector came too;
- `hybrid`: both, fused (host/search/fusion.py); a text without keywords (only stop words or
  punctuation) is ranked by the vector alone, and the answer says so.

Every answer's rank score means the same in every query, on a 0-1 scale (a threshold says
"nothing here" by it): the similarity in vector mode (a dot product of unit vectors), the keyword
score min(1, BM25 / |w|) in keyword mode, their weighed sum in hybrid mode (a text without keywords:
the similarity). `best_score` is the best one found, whether or not a threshold kept it.

RAGFlow's retrieval asks for hybrid too, its `vector_similarity_weight` w as `keyword_weight = 1 - w`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from access import Grant
from host.catalog.generations import Catalog
from host.catalog.model_index import ModelIndex
from host.constraints import Node
from host.search.budget import exact_scores
from host.search.engine import OVERSAMPLE, PROBES, SUBSET_SHARE, CountType, Narrowing, Rows, Search, Selection, narrowed, rank
from host.search.errors import NothingLoaded, QueryError
from host.search.fusion import DEFAULT_KEYWORD_WEIGHT, rank_fused
from host.search.keywords import rank_keywords, weigh
from host.search.model_text import constraint_mask
from host.store.clusters import CLUSTER_FROM
from host.store.kernels import BUILT as COMPILED_LOOPS
from host.store.residency import default_populate_bytes

Mode = Literal["vector", "keyword", "hybrid"]
MODES: tuple[Mode, ...] = ("vector", "keyword", "hybrid")
NO_KEYWORDS = "the query has no keyword (only stop words or punctuation)"
UNHELD_KEYWORDS = "no bit you may see holds a keyword of the query"
POOL_SHARE = 0.005  # of the visible bits: the least an approximate search considers (`pool_for`)


@dataclass(frozen=True)
class SearchPolicy:
    """How to search a model's bits: `auto` is approximate from `approximate_from` visible bits.

    A clustered model is scanned through its 8-bit codes (host/store/codes.py: a quarter of the
    bytes) where the compiled code scan is built (`compiled_codes`): 100k x 1536, four clusters,
    0.09 ms against 0.25 ms for their floats. Without it, only a model whose floats take more than
    `codes_from` bytes is (a store larger than memory); a smaller one through its floats, which
    host/store/residency.py keeps in memory within the same budget, since numpy casting 1,536 bytes
    a row to float32 took longer than reading the row's floats (0.195 against 0.175 ms for 2 clusters).
    """

    mode: str = "auto"
    approximate_from: int = CLUSTER_FROM  # where libraries are clustered: a cluster scan is 6x faster than exact there
    oversample: int = OVERSAMPLE
    probes: int = PROBES
    codes_from: int = field(default_factory=default_populate_bytes)
    compiled_codes: bool = COMPILED_LOOPS

    def for_bits(self, bits: int, float_bytes: int = 0) -> Search:
        """The search of a model of `bits` visible bits whose floats take `float_bytes` bytes."""
        approximate = self.mode == "approximate" or (self.mode == "auto" and bits >= self.approximate_from)
        return Search(approximate=approximate, oversample=max(self.oversample, pool_for(bits)), probes=self.probes,
                      codes=self.compiled_codes or float_bytes > self.codes_from)

    def for_index(self, index: ModelIndex, granted: frozenset[str] = frozenset()) -> Search:
        """The search of `index` for a caller holding `granted`: `auto` follows the bits they may see,
        so hidden bits never switch the mode. Codes or floats follows the size of the whole model's
        floats, the same for every caller (similarities are exact either way)."""
        return self.for_bits(index.visible_count(granted), index.float_bytes)


def pool_for(bits: int) -> int:
    """Rows an approximate search considers at least, for `bits` visible bits: POOL_SHARE of them.

    The pool that holds the true top 10 grows with the library. On the synthetic libraries of
    scripts/bench.py and scripts/synthetic_library.py (docs/performance.md, "Query speed"), recall@10
    with the nearest clusters holding 0.5% of the bits: 10k 1.000, 30k 1.000, 100k 0.9995, 300k
    0.998, 1M (x 384) 1.000, 10M (x 384) 0.9995; 0.4% gave 0.988 at 100k and 0.970 at 300k.
    """
    return round(bits * POOL_SHARE)


@dataclass(frozen=True)
class Query:
    """A question (a vector in the model's space, its text, or both), how to rank, its budget and
    what narrows it."""

    vector: np.ndarray | None  # float32, the model's dimension; None only for a keyword query
    count: int
    count_type: CountType
    similarity_threshold: float | None = None  # only bits at least this similar (vector: the list ends there)
    constraint: Node | None = None  # host.constraints: only bits matching it
    libraries: frozenset[str] | None = None  # only bits of these libraries (names)
    text: str | None = None  # the question in words: what keyword and hybrid ranking read
    mode: Mode = "vector"
    keyword_weight: float = DEFAULT_KEYWORD_WEIGHT  # hybrid: the share of the keyword score, 0-1
    score_threshold: float | None = None  # only bits whose score (0-1; vector: the similarity) reaches it


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
              count_restricted: bool = False, search: Search | None = None) -> Selection:
    """The bits `grant` may see that best answer `query`, within its budget. `search` is what
    `policy.for_index` gives for this index and grant, if the caller has asked already. With
    `count_restricted`, the answer is made a second time as if every tag were granted, to tell how
    many bits were held back."""
    search = search or policy.for_index(index, grant.access_tags)
    if query.mode == "vector":
        assert query.vector is not None
        return by_meaning(index, query.vector, query, grant.access_tags, narrowing_mask(index, query), search,
                          count_restricted=count_restricted)
    if query.text is None:
        raise QueryError(f"mode {query.mode} needs the query's text")
    narrowing = narrowing_mask(index, query)
    selection = _ranked_by_text(index, query, grant.access_tags, narrowing, search)
    if not count_restricted:
        return selection
    every_tag = frozenset(index.tags)
    everything = _ranked_by_text(index, query, every_tag, narrowing, policy.for_index(index, every_tag))
    visible = index.visible_rows(grant.access_tags)
    restricted = 0 if visible is None else int(np.count_nonzero(~visible[everything.rows]))
    return replace(selection, restricted=restricted)


def _ranked_by_text(index: ModelIndex, query: Query, granted: frozenset[str], narrowing: Narrowing | None,
                    search: Search) -> Selection:
    """A keyword or hybrid answer for a caller holding `granted` (the statistics are theirs)."""
    assert query.text is not None
    weighted = weigh(index, query.text, granted)
    notes = weighted.notes
    why_none = UNHELD_KEYWORDS if weighted.said else NO_KEYWORDS
    allowed = narrowed(index.visible_rows(granted), narrowing)
    vector = query.vector
    if query.mode == "keyword":
        if weighted.empty:
            return Selection(np.zeros(0, np.int64), None if vector is None else np.zeros(0, np.float32), None, 0,
                             np.zeros(0), (*notes, f"{why_none}: nothing matches it"))
        keep = None
        if vector is not None and query.similarity_threshold is not None:
            threshold = np.float32(query.similarity_threshold)

            def keep(rows: np.ndarray) -> np.ndarray:
                kept: np.ndarray = exact_scores(index.gather(rows), vector) >= threshold
                return kept
        ranked = rank_keywords(index, weighted, allowed, query.count, query.count_type, keep, query.score_threshold)
        similarity = None if vector is None else exact_scores(index.gather(ranked.rows), vector)
        return Selection(ranked.rows, similarity, ranked.cut_to, 0, ranked.scores, notes, best_score=ranked.best)
    assert vector is not None
    if weighted.empty:
        nearest = by_meaning(index, vector, query, granted, narrowing, search)
        return replace(nearest, notes=(*notes, f"{why_none}: ranked by meaning alone"))
    fused = rank_fused(index, vector, weighted, granted=granted, allowed=allowed, constraint=narrowing,
                       count=query.count, count_type=query.count_type, keyword_weight=query.keyword_weight,
                       similarity_threshold=query.similarity_threshold, search=search,
                       score_threshold=query.score_threshold)
    return Selection(fused.rows, fused.similarities, fused.cut_to, 0, fused.scores, notes, fused.keyword_scores,
                     fused.best)


def by_meaning(index: ModelIndex, vector: np.ndarray, query: Query, granted: frozenset[str],
               narrowing: Narrowing | None, search: Search, *, count_restricted: bool = False) -> Selection:
    """The answer ranked by similarity alone, with its best similarity: the first bit's, or, when a
    threshold kept none, the best one's all the same (one more search, for one bit)."""
    threshold = _by_similarity(query)
    nearest = rank(index, vector, granted=granted, count=query.count, count_type=query.count_type, search=search,
                   constraint=narrowing, similarity_threshold=threshold, count_restricted=count_restricted)
    assert nearest.scores is not None
    if len(nearest.rows):
        return replace(nearest, best_score=float(nearest.scores[0]))
    if threshold is None:
        return nearest  # nothing visible to rank
    first = rank(index, vector, granted=granted, count=1, count_type="bit", search=search, constraint=narrowing)
    assert first.scores is not None
    return replace(nearest, best_score=float(first.scores[0]) if len(first.rows) else None)


def _by_similarity(query: Query) -> float | None:
    """The threshold of an answer ranked by similarity: its rank score is then the similarity, so a
    score threshold is one too."""
    thresholds = [value for value in (query.similarity_threshold, query.score_threshold) if value is not None]
    return max(thresholds) if thresholds else None


def narrowing_mask(index: ModelIndex, query: Query) -> Narrowing | None:
    """The rows `query`'s constraint and library list allow (None: every row): a mask, or the chosen
    libraries' rows themselves where they are all that narrows and few (`Rows`: one library among ten
    thousand is then searched as a host holding only it searches it). The engine ANDs it with the
    caller's visibility, so it can only narrow what they see."""
    mask = None if query.constraint is None else constraint_mask(query.constraint, index)
    if query.libraries is None:
        return mask
    rows = np.sort(index.library_rows(index.positions_of(query.libraries)))
    if mask is None and len(rows) <= SUBSET_SHARE * index.bit_count:
        return Rows(rows)
    chosen = Rows(rows).mask(index.bit_count)
    return chosen if mask is None else mask & chosen


def as_mask(index: ModelIndex, narrowing: Narrowing | None) -> np.ndarray | None:
    """A narrowing as a bool mask over the model's rows (None: every row)."""
    return narrowing.mask(index.bit_count) if isinstance(narrowing, Rows) else narrowing
