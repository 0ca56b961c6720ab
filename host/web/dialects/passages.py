"""Passages for the retrieval dialects (Dify's External Knowledge API, OpenAI's vector-store search):
the best bits of some named libraries for a text question, each with the library it came from and
a score from 0 to 1.

Asked as `POST /` asks a text query: `host.search.query` ranks what the caller may see in the
mode asked for, by default `hybrid` (meaning and keywords fused, `keyword_weight` the keywords'
share), or `keyword` when no embedder serves the libraries' model (as `POST /` does, and says
so); the constraint and the library list only narrow it. Which libraries a door's names mean (a
library, or the libraries of a folder, within a `/p/{name}/` prefix) is host/web/library_selection.py's
to say. The budget is `count` bits,
`--max-answer-bytes` caps the answer, and each bit is `results.bits.result_bit` (no embedding).

A passage's `score` is the rank score `POST /` reports for the same question, on a 0-1 scale that
means the same in every question (host/search/query.py), so that the list is in score order (Dify
and OpenAI's clients merge and cut lists by it) and a threshold can say "nothing here":

- hybrid: the fused score, (1 - w) * similarity + w * keyword score (host/search/fusion.py). A
  question with no keyword (only stop words) is ranked by meaning alone, and scored as in vector mode;
- vector: the similarity, clipped at 0 (a dot product of unit vectors);
- keyword: the keyword score, min(1, BM25 / |w|) (host/search/keywords.py).

`score_threshold` keeps the passages scoring at least that (0: every one): the query core's
`score_threshold`, applied before the count, in every mode. It never moves a passage or changes a
score; above every passage's score, it answers an empty list. docs/quality.md gives the threshold
that turned away nearly every off-topic question while keeping 90% of on-topic ones, per mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool

from host.catalog.libraries import Library
from host.constraints import Node
from host.library.omit import parse_omit
from host.results.answers import estimated_answer_bytes
from host.results.bits import result_bit
from host.search.engine import Selection
from host.search.fusion import DEFAULT_KEYWORD_WEIGHT
from host.search.query import Mode, Query, choose_model, run_query
from host.web.caller import Caller
from host.web.library_selection import one_model
from host.web.query_endpoint import check_answer_size, embedded
from host.web.state import HostState

WITHOUT_EMBEDDING = parse_omit("embedding")


@dataclass(frozen=True)
class Passage:
    library: Library
    bit: dict[str, Any]  # as POST / answers it: id, text, token_count, similarity and score when it has them, info
    score: float  # the rank score, 0-1 (see the module's docstring)

    @property
    def info(self) -> dict[str, Any]:
        info = self.bit.get("info")
        return info if isinstance(info, dict) else {}


async def find_passages(state: HostState, caller: Caller, libraries: Sequence[Library], question: str,
                        count: int, *, score_threshold: float = 0.0, constraint: Node | None = None,
                        mode: Mode | None = None, keyword_weight: float = DEFAULT_KEYWORD_WEIGHT) -> list[Passage]:
    """The best `count` bits of `libraries` for `question` that this caller may see, best first.
    `mode` None is hybrid, or keyword where no embedder serves the libraries' model."""
    catalog = state.catalog  # this request's generation, whatever reloads happen meanwhile
    index = choose_model(catalog, one_model(libraries), caller.grant)
    if mode is None:
        mode = "hybrid" if index.model in state.embedders else "keyword"
    vector = None if mode == "keyword" else await embedded(state, index, question)
    query = Query(vector, count, "bit", constraint=constraint, libraries=frozenset(library.name for library in libraries),
                  text=question, mode=mode, keyword_weight=keyword_weight,
                  score_threshold=score_threshold if score_threshold > 0 else None)

    def compute() -> list[Passage]:
        selection = run_query(index, query, caller.grant, state.search)
        check_answer_size(estimated_answer_bytes(index, selection, WITHOUT_EMBEDDING, binary_embeddings=False),
                          state.settings.max_answer_bytes)
        similarities = [None] * len(selection.rows) if selection.scores is None else selection.scores.tolist()
        ranks = [None] * len(selection.rows) if selection.ranks is None else selection.ranks.tolist()
        passages = []
        for row, similarity, rank, score in zip(selection.rows.tolist(), similarities, ranks,
                                                passage_scores(selection), strict=True):
            segment, local = index.locate(row)
            bit = result_bit(segment, local, WITHOUT_EMBEDDING, similarity=similarity, score=rank)
            passages.append(Passage(index.library_of(row), bit, score))
        return passages

    return await run_in_threadpool(compute)


def passage_scores(selection: Selection) -> list[float]:
    """Each selected bit's 0-1 score: its rank score (fused, keyword), else its similarity, clipped."""
    scores = selection.ranks if selection.ranks is not None else selection.scores
    assert scores is not None  # ranked by keywords, fused, or by similarity
    return [min(1.0, max(0.0, float(score))) for score in scores.tolist()]
