"""The import with the real local embedder: MiniLM's own tokenizer counts, and text finds each fact.

Needs the `embed` extra (part of `test`): skipped without it, except in CI.
"""

from __future__ import annotations

import json

import httpx
import numpy as np
from importer_support import FACTS, write_corpus

from host.cli.validate import validate_paths
from host.importer import ImportOptions, import_library
from host.importer.pipeline import DEFAULT_CHUNK_TOKENS
from host.library.embeddings import decode_embedding

pytest_plugins = ["embedder_fixtures"]  # minilm_embedder, minilm_int8_embedder: loaded once; required in CI

# Each fact asked for in other words: the model, not shared words, has to find it.
QUESTIONS = {
    "markdown": "What does the zebra have for lunch on Tuesdays?",
    "html": "Where do tomatoes ripen quickest?",
    "feed": "How many barnacles did the lighthouse keeper count?",
    "text": "Which song does the kettle whistle?",
    "pdf": "How did hovercraft rental income change last quarter?",
}


def test_a_corpus_imported_with_minilm_validates_counts_its_tokens_and_answers_questions(tmp_path, minilm_embedder):
    minilm = minilm_embedder
    site = write_corpus(tmp_path / "site")
    out = tmp_path / "libraries" / "site.json"

    report = import_library([site], out, minilm, ImportOptions(base_url="https://example.com/"), say=print)

    assert validate_paths([out], say=print) == 0
    library = json.loads(out.read_text())
    assert library["embedding_model"] == "sentence-transformers:all-MiniLM-L6-v2"
    bits = library["bits"]
    assert len(bits) == report.bits > 0
    for bit in bits:
        assert bit["token_count"] == minilm.count_tokens(bit["text"]) <= DEFAULT_CHUNK_TOKENS
    matrix = np.stack([decode_embedding(bit["embedding"]) for bit in bits])
    for kind, question in QUESTIONS.items():
        best = int(np.argmax(matrix @ minilm.embed([question])[0]))
        assert FACTS[kind] in bits[best]["text"], (kind, bits[best]["text"][:80])


def test_served_by_a_real_host_each_fact_is_found_by_a_question_in_words(tmp_path, minilm_embedder, run_host):
    site = write_corpus(tmp_path / "site")
    out = tmp_path / "libraries" / "site.json"
    import_library([site], out, minilm_embedder, ImportOptions(base_url="https://example.com/"), say=print)

    host = run_host(out.parent, embedder=True, timeout=120)
    for kind, question in QUESTIONS.items():
        answer = httpx.post(f"{host.url}/", json={"query": question, "count": 1, "count_type": "bit"}, timeout=60)
        assert answer.status_code == 200, answer.text
        best = answer.json()["bits"][0]
        assert FACTS[kind] in best["text"], (kind, best["text"][:80])
        assert best["info"]["url"].startswith(("https://example.com/", "https://harbour.example/"))


def test_an_int8_import_says_so_in_the_library_and_still_answers_questions(tmp_path, minilm_int8_embedder):
    site = write_corpus(tmp_path / "site")
    out = tmp_path / "libraries" / "site.json"
    import_library([site], out, minilm_int8_embedder, ImportOptions(base_url="https://example.com/"), say=print)

    assert validate_paths([out], say=print) == 0
    library = json.loads(out.read_text())
    assert library["details"] == {"embedding_precision": "int8"}
    bits = library["bits"]
    matrix = np.stack([decode_embedding(bit["embedding"]) for bit in bits])
    for kind, question in QUESTIONS.items():
        best = int(np.argmax(matrix @ minilm_int8_embedder.embed([question])[0]))
        assert FACTS[kind] in bits[best]["text"], (kind, bits[best]["text"][:80])
