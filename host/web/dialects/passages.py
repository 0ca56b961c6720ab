"""Passages for the retrieval dialects (Dify's External Knowledge API, OpenAI's vector-store search):
the best bits of some named libraries for a text question, each with the library it came from.

Asked as `POST /` asks: the question is embedded with the libraries' model, `host.search.query`
ranks what the caller may see (the constraint and the library list only narrow it), the budget is
`count` bits, `--max-answer-bytes` caps the answer, and each bit is `results.bits.result_bit` (no
embedding). A passage's `score` is its similarity on the 0-1 scale these dialects use: the
similarity `POST /` reports for the same question, clipped at 0 (it is a dot product of unit
vectors, so only unrelated bits fall below 0). So a `score_threshold` above 0 is exactly `POST /`'s
`similarity_threshold`, and one of 0 or less keeps every bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool

from host.constraints import Node
from host.embedders.errors import EmbedderError
from host.library.omit import parse_omit
from host.results.answers import estimated_answer_bytes
from host.results.bits import result_bit
from host.search.errors import QueryError
from host.search.query import Query, choose_model, run_query
from host.store.compiled import CompiledLibrary
from host.web.caller import Caller
from host.web.query_endpoint import check_answer_size
from host.web.state import HostState

WITHOUT_EMBEDDING = parse_omit("embedding")


@dataclass(frozen=True)
class Passage:
    library: CompiledLibrary
    row: int  # the bit's row in its library
    bit: dict[str, Any]  # as POST / answers it: id, text, token_count, similarity, info

    @property
    def score(self) -> float:
        return min(1.0, max(0.0, float(self.bit["similarity"])))

    @property
    def info(self) -> dict[str, Any]:
        info = self.bit.get("info")
        return info if isinstance(info, dict) else {}


def visible_library(state: HostState, caller: Caller, name: str) -> CompiledLibrary | None:
    """The library of that name if this caller may see a bit of it; None exactly as if there were none."""
    library = state.catalog.library(name)
    return library if library is not None and library.visible_bit_count(caller.access_tags) else None


def one_model(libraries: Sequence[CompiledLibrary]) -> str:
    """The embedding model the libraries share; a QueryError when they do not."""
    models = sorted({library.embedding_model for library in libraries})
    if len(models) > 1:
        raise QueryError(f"these libraries use different embedding models ({', '.join(models)}): "
                         "ask the libraries of one model at a time")
    return models[0]


async def find_passages(state: HostState, caller: Caller, libraries: Sequence[CompiledLibrary], question: str,
                        count: int, *, score_threshold: float = 0.0, constraint: Node | None = None) -> list[Passage]:
    """The best `count` bits of `libraries` for `question` that this caller may see, best first."""
    catalog = state.catalog  # this request's generation, whatever reloads happen meanwhile
    index = choose_model(catalog, one_model(libraries), caller.grant)
    vector = await state.embedders.embed_query(index.model, question)
    if vector.shape != (index.dimension,):
        raise EmbedderError(f"the embedder of {index.model} gave {vector.shape[-1]} dimensions; "
                            f"its libraries have {index.dimension}")
    query = Query(vector, count, "bit", similarity_threshold=score_threshold if score_threshold > 0 else None,
                  constraint=constraint, libraries=frozenset(library.name for library in libraries))

    def compute() -> list[Passage]:
        selection = run_query(index, query, caller.grant, state.search)
        check_answer_size(estimated_answer_bytes(index, selection, WITHOUT_EMBEDDING, binary_embeddings=False),
                          state.settings.max_answer_bytes)
        passages = []
        assert selection.scores is not None  # ranked by a vector
        for row, similarity in zip(selection.rows.tolist(), selection.scores.tolist()):
            library, local = index.locate(row)
            passages.append(Passage(library, local, result_bit(library, local, WITHOUT_EMBEDDING, similarity=similarity)))
        return passages

    return await run_in_threadpool(compute)
