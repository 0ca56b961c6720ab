"""A LangChain retriever (langchain-core 1.x) over a polymath-host: `pip install 'polymath-host-client[langchain]'`.

    from polymath_host_client.langchain import PolymathRetriever
    retriever = PolymathRetriever(url="http://127.0.0.1:8080", token=None, k=4)
    documents = retriever.invoke("a great fish swallowed the prophet")      # or await retriever.ainvoke(...)

Each Document is a passage: `page_content` its text, `id` its bit id, `metadata` url, title,
library, bit_id, score (0-1, best first) and token_count. `mode` ("hybrid", the host's default:
meaning and keywords fused; "vector"; "keyword") and `keyword_weight` (0-1, hybrid) say how the
host ranks (polymath_host_client.client). The token is a SecretStr: it is never
in the retriever's repr. Each call opens and closes its own client: there is nothing to close, and
a retriever is safe to share between threads and event loops.
"""

from __future__ import annotations

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import Field, SecretStr

from polymath_host_client.client import DEFAULT_TIMEOUT, AsyncPolymathClient, Mode, PolymathClient
from polymath_host_client.results import Passage, framework_metadata


class PolymathRetriever(BaseRetriever):
    """The `k` best passages of a polymath-host's libraries for a query, as LangChain Documents."""

    url: str
    token: SecretStr | None = None
    k: int = Field(default=4, ge=1)
    libraries: list[str] | None = None  # None: every library the token may see
    score_threshold: float = Field(default=0.0, ge=0.0, le=1.0)
    mode: Mode | None = None  # None: the host's default, hybrid
    keyword_weight: float | None = Field(default=None, ge=0.0, le=1.0)  # hybrid: the keywords' share
    timeout: float = Field(default=DEFAULT_TIMEOUT, gt=0)

    def _token(self) -> str | None:
        return self.token.get_secret_value() if self.token is not None else None

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        with PolymathClient(self.url, self._token(), timeout=self.timeout) as client:
            passages = client.retrieve(query, k=self.k, libraries=self.libraries, score_threshold=self.score_threshold,
                                       mode=self.mode, keyword_weight=self.keyword_weight)
        return [as_document(passage) for passage in passages]

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun) -> list[Document]:
        async with AsyncPolymathClient(self.url, self._token(), timeout=self.timeout) as client:
            passages = await client.retrieve(query, k=self.k, libraries=self.libraries,
                                             score_threshold=self.score_threshold, mode=self.mode,
                                             keyword_weight=self.keyword_weight)
        return [as_document(passage) for passage in passages]


def as_document(passage: Passage) -> Document:
    return Document(page_content=passage.text, metadata=framework_metadata(passage), id=passage.bit_id)
