"""RAGFlow's HTTP API (SPEC §10): libraries are datasets, bits sharing a URL are documents, bits are chunks.

    POST /api/v1/retrieval                       retrieval.py: hybrid search over the query core
    GET  /api/v1/datasets                        datasets.py: the libraries this caller may see
    GET  /api/v1/datasets/{dataset_id}/documents datasets.py: a library's documents

`Authorization: Bearer <our access token>` (what `RAGFlow(api_key=...)` sends); none, an empty
one or an unknown opaque one is anonymous, a token that fails verification a 401 envelope.
Every answer under /api/v1/ is RAGFlow's envelope (envelope.py), so the real `ragflow-sdk`
works unchanged. The app adds `routes()` to its routes and `RAGFlowEnvelope` to its middleware.
"""

from __future__ import annotations

from starlette.routing import BaseRoute, Route

from host.web.dialects.ragflow.datasets import list_datasets, list_documents
from host.web.dialects.ragflow.envelope import RAGFlowEnvelope
from host.web.dialects.ragflow.retrieval import retrieval


def routes() -> list[BaseRoute]:
    return [
        Route("/api/v1/retrieval", retrieval, methods=["POST"]),
        Route("/api/v1/datasets", list_datasets, methods=["GET"]),
        Route("/api/v1/datasets/{dataset_id}/documents", list_documents, methods=["GET"]),
    ]


__all__ = ["RAGFlowEnvelope", "routes"]
