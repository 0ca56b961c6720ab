"""Drive a running host with whichever `ragflow-sdk` this Python has; print what it saw as JSON.

    python tests/ragflow_probe.py URL TOKEN QUESTION

Run by the project's Python (ragflow-sdk 0.22.1) and by a Python 3.13 venv (the newest SDK) in
tests/test_ragflow_sdk.py: both must see the same. Only the SDK and the standard library are
imported here, and only the SDK's own objects are read (the fields both versions keep).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from ragflow_sdk import RAGFlow


def refusal(call: Any) -> str:
    try:
        call()
    except Exception as problem:  # the SDK raises a bare Exception carrying the server's message
        return f"{type(problem).__name__}: {problem}"
    return "no exception"


def seen_by(rag: RAGFlow, question: str) -> dict[str, Any]:
    datasets = rag.list_datasets()
    ids = [dataset.id for dataset in datasets]
    chunks = rag.retrieve(dataset_ids=ids, question=question, page_size=5)
    second_page = rag.retrieve(dataset_ids=ids, question=question, page=2, page_size=2)
    documents = datasets[-1].list_documents(page_size=3)
    return {
        "datasets": [[d.id, d.name, d.chunk_count, d.document_count, d.embedding_model] for d in datasets],
        "chunks": [[c.id, c.dataset_id, c.document_id, c.document_name, c.similarity, c.vector_similarity,
                    c.term_similarity, c.content] for c in chunks],
        "second_page": [c.id for c in second_page],
        "documents": [[d.id, d.name, d.chunk_count, d.token_count, d.meta_fields.title] for d in documents],
        "by_name": [d.id for d in rag.list_datasets(name=datasets[-1].name)],
    }


def main(url: str, token: str, question: str) -> None:
    seen = {"anonymous": seen_by(RAGFlow("", url), question), "holder": seen_by(RAGFlow(token, url), question)}
    seen["refusals"] = {
        "bad token": refusal(lambda: RAGFlow("not.a-valid.jwt", url).list_datasets()),
        "unknown dataset": refusal(lambda: RAGFlow("", url).retrieve(dataset_ids=["f" * 32], question=question)),
        "no datasets": refusal(lambda: RAGFlow("", url).retrieve(dataset_ids=[], question=question)),
        "unknown name": refusal(lambda: RAGFlow("", url).get_dataset(name="no such library")),
    }
    seen["trailing slash"] = [d.name for d in RAGFlow("", url + "/").list_datasets()]
    print(json.dumps(seen))


if __name__ == "__main__":
    main(*sys.argv[1:4])
