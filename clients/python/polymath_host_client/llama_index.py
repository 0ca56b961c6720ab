"""A LlamaIndex retriever (llama-index-core 0.14) over a polymath-host: `pip install 'polymath-host-client[llama-index]'`.

    from polymath_host_client.llama_index import PolymathRetriever
    retriever = PolymathRetriever(url="http://127.0.0.1:8080", token=None, similarity_top_k=4)
    nodes = retriever.retrieve("a great fish swallowed the prophet")     # or await retriever.aretrieve(...)

Each NodeWithScore holds a TextNode (`id_` the bit id, `text` the passage, `metadata` url, title,
library, bit_id, score and token_count) and its score (0-1, best first). `mode` ("hybrid", the
host's default; "vector"; "keyword") and `keyword_weight` (0-1, hybrid) say how the host ranks
(polymath_host_client.client). The bit id and token
count are left out of what an LLM or an embedder reads of the metadata. Each call opens and
closes its own client: there is nothing to close, and a retriever is safe to share.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, get_args

from llama_index.core.callbacks import CallbackManager
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from polymath_host_client.client import (
    DEFAULT_TIMEOUT,
    AsyncPolymathClient,
    Mode,
    PolymathClient,
    base_url,
    bearer_headers,
)
from polymath_host_client.results import Passage, framework_metadata

NOT_FOR_MODELS = ["bit_id", "token_count", "score"]


class PolymathRetriever(BaseRetriever):
    """The `similarity_top_k` best passages of a polymath-host's libraries for a query, as LlamaIndex nodes."""

    def __init__(self, url: str, token: str | None = None, similarity_top_k: int = 4, *,
                 libraries: Sequence[str] | None = None, score_threshold: float = 0.0,
                 mode: Mode | None = None, keyword_weight: float | None = None,
                 timeout: float = DEFAULT_TIMEOUT, callback_manager: CallbackManager | None = None,
                 **kwargs: Any) -> None:
        if similarity_top_k < 1:
            raise ValueError(f"similarity_top_k must be at least 1, got {similarity_top_k}")
        if not 0 <= score_threshold <= 1:
            raise ValueError(f"score_threshold must be from 0 to 1, got {score_threshold}")
        if mode not in (None, *get_args(Mode)):
            raise ValueError(f"mode must be one of {', '.join(get_args(Mode))}, got {mode!r}")
        if keyword_weight is not None and not 0 <= keyword_weight <= 1:
            raise ValueError(f"keyword_weight must be from 0 to 1, got {keyword_weight}")
        super().__init__(callback_manager=callback_manager, **kwargs)
        self.url = url
        self.similarity_top_k = similarity_top_k
        self.libraries = list(libraries) if libraries is not None else None
        self.score_threshold = score_threshold
        self.mode, self.keyword_weight = mode, keyword_weight
        self.timeout = timeout
        self._token = token
        base_url(url), bearer_headers(token)  # a bad URL or token is refused here, not at the first query

    def __repr__(self) -> str:  # never the token
        return f"PolymathRetriever(url={self.url!r}, similarity_top_k={self.similarity_top_k})"

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        with PolymathClient(self.url, self._token, timeout=self.timeout) as client:
            passages = client.retrieve(query_bundle.query_str, k=self.similarity_top_k, libraries=self.libraries,
                                       score_threshold=self.score_threshold, mode=self.mode,
                                       keyword_weight=self.keyword_weight)
        return [as_node(passage) for passage in passages]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        async with AsyncPolymathClient(self.url, self._token, timeout=self.timeout) as client:
            passages = await client.retrieve(query_bundle.query_str, k=self.similarity_top_k,
                                             libraries=self.libraries, score_threshold=self.score_threshold,
                                             mode=self.mode, keyword_weight=self.keyword_weight)
        return [as_node(passage) for passage in passages]


def as_node(passage: Passage) -> NodeWithScore:
    node = TextNode(id_=passage.bit_id, text=passage.text, metadata=framework_metadata(passage),
                    excluded_llm_metadata_keys=NOT_FOR_MODELS, excluded_embed_metadata_keys=NOT_FOR_MODELS)
    return NodeWithScore(node=node, score=passage.score)
