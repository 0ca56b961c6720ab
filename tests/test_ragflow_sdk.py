"""The REAL `ragflow-sdk` against a real host process (SPEC §10): `RAGFlow(api_key, base_url)`
with `list_datasets()`, `retrieve(...)` and `DataSet.list_documents()`, unchanged.

0.22.1 (the newest for Python < 3.13) runs in this process; the newest release (0.27.3, Python
3.13 only) runs in a venv this module makes under pytest's cache from a Python 3.13 found on the
machine, skipped outside CI when there is none (a failure in CI). The host serves the sample
library and its private drafts (tag `unpublished`); the token grants that tag.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from components import admin, unavailable
from conftest import PROJECT, RunningHost, start_host, stop_host
from ragflow_sdk import RAGFlow

NEWEST_SDK = "ragflow-sdk==0.27.3"
JONAH = "a great fish swallowed the prophet"
DANIEL = "Daniel in the den of lions"
PROBE = PROJECT / "tests" / "ragflow_probe.py"


@dataclass(frozen=True)
class Served:
    url: str
    token: str
    host: RunningHost


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("ragflow")
    shutil.copytree(PROJECT / "libraries", root / "libraries", ignore=shutil.ignore_patterns(".compiled"))
    access = root / "access.SECRET.json"
    admin("access", "init", "--access", str(access), cwd=root)
    token = admin("token", "issue", "alice", "--tag", "unpublished", "--access", str(access), cwd=root)
    host = start_host(root / "libraries", "--access", str(access), timeout=60, embedder=True)
    yield Served(host.url, token, host)
    stop_host(host)


def by_name(rag: RAGFlow) -> dict[str, object]:
    return {dataset.name: dataset for dataset in rag.list_datasets()}


# ---- list_datasets ---------------------------------------------------------------------------------


def test_list_datasets_shows_an_anonymous_caller_only_the_public_library(served: Served) -> None:
    (dataset,) = RAGFlow("", served.url).list_datasets()

    assert dataset.name == "sample"
    assert (dataset.chunk_count, dataset.document_count) == (386, 386)
    assert dataset.embedding_model == "sentence-transformers:all-MiniLM-L6-v2"
    assert len(dataset.id) == 32 and int(dataset.id, 16)


def test_list_datasets_with_the_token_shows_the_private_drafts_too(served: Served) -> None:
    datasets = RAGFlow(served.token, served.url).list_datasets()

    assert [(d.name, d.chunk_count) for d in datasets] == [("access/unpublished/drafts", 11), ("sample", 386)]
    assert datasets[1].id == RAGFlow("", served.url).list_datasets()[0].id  # ids do not depend on the caller


def test_a_token_that_fails_verification_raises_the_hosts_reason(served: Served) -> None:
    with pytest.raises(Exception, match="the access token was refused"):
        RAGFlow("not.a-valid.jwt", served.url).list_datasets()
    with pytest.raises(Exception, match="the access token was refused"):
        RAGFlow("not.a-valid.jwt", served.url).retrieve(dataset_ids=["x"], question=JONAH)


# ---- retrieve ------------------------------------------------------------------------------------


def post_slash(served: Served, question: str, count: int, **arguments: object) -> list[dict]:
    bits: list[dict] = httpx.post(f"{served.url}/", json={"query": question, "count": count, "count_type": "bit",
                                                         **arguments}, timeout=30).json()["bits"]
    return bits


def test_retrieve_puts_jonah_first_with_post_slashs_hybrid_scores(served: Served) -> None:
    rag = RAGFlow("", served.url)
    (sample,) = rag.list_datasets()

    chunks = rag.retrieve(dataset_ids=[sample.id], question=JONAH)  # the SDK's defaults: w 0.3, threshold 0.2
    # keyword_weight = 1 - w, and a count of top_k (the candidates, and so the scores' scale, follow it)
    bits = post_slash(served, JONAH, 1024, keyword_weight=0.7, omit="embedding,text")[:len(chunks)]

    assert "Jonah" in chunks[0].document_name and chunks[0].dataset_id == sample.id
    assert chunks[0].document_name.startswith("https://www.biblegateway.com/")
    assert 0 < len(chunks) <= 30
    assert [chunk.id for chunk in chunks] == [bit["id"] for bit in bits]
    assert [chunk.similarity for chunk in chunks] == [bit["score"] for bit in bits]
    assert [chunk.vector_similarity for chunk in chunks] == [bit["similarity"] for bit in bits]
    assert all(0 <= chunk.term_similarity <= 1 and chunk.similarity >= 0.2 for chunk in chunks)
    assert [c.similarity for c in chunks] == sorted((c.similarity for c in chunks), reverse=True)


@pytest.mark.parametrize(("question", "weight", "first"), [
    ("Methuselah", 0.0, "Genesis%205"),  # the keywords alone: the passages holding the name
    ("the son of Amittai", 0.3, "Jonah%201"),  # the SDK's default weight
])
def test_retrieve_finds_the_passage_holding_a_name(served: Served, question: str, weight: float, first: str) -> None:
    rag = RAGFlow("", served.url)
    chunks = rag.retrieve(dataset_ids=[rag.list_datasets()[0].id], question=question, vector_similarity_weight=weight,
                          page_size=3)

    assert first in chunks[0].document_name, [chunk.document_name for chunk in chunks]
    # The keyword score, 0-1 and the same in every question: the name held once in a passage, well above 0.5.
    assert chunks[0].term_similarity == max(chunk.term_similarity for chunk in chunks) and 0.5 < chunks[0].term_similarity < 1


def test_vector_similarity_is_the_similarity_post_slash_reports(served: Served) -> None:
    rag = RAGFlow("", served.url)
    chunks = rag.retrieve(dataset_ids=[rag.list_datasets()[0].id], question=JONAH, vector_similarity_weight=1.0,
                          similarity_threshold=0.0, page_size=10)

    bits = post_slash(served, JONAH, 10, mode="vector")  # all the weight on the vectors: meaning alone

    assert [c.id for c in chunks] == [bit["id"] for bit in bits]
    assert [c.vector_similarity for c in chunks] == [bit["similarity"] for bit in bits]


def test_private_chunks_come_only_with_the_token(served: Served) -> None:
    anonymous, holder = RAGFlow("", served.url), RAGFlow(served.token, served.url)
    drafts = by_name(holder)["access/unpublished/drafts"]

    with pytest.raises(Exception, match=f"You don't own the dataset {drafts.id}"):
        anonymous.retrieve(dataset_ids=[drafts.id], question=DANIEL)
    public = anonymous.retrieve(dataset_ids=[anonymous.list_datasets()[0].id], question=DANIEL, page_size=100)
    every = holder.retrieve(dataset_ids=[d.id for d in holder.list_datasets()], question=DANIEL, page_size=100)

    assert "Daniel" in every[0].document_name and every[0].dataset_id == drafts.id
    assert not any(chunk.dataset_id == drafts.id for chunk in public)


def test_pages_are_slices_of_one_ranking(served: Served) -> None:
    rag = RAGFlow("", served.url)
    ids = [rag.list_datasets()[0].id]

    first_four = rag.retrieve(dataset_ids=ids, question=JONAH, page_size=4)
    second_page = rag.retrieve(dataset_ids=ids, question=JONAH, page=2, page_size=2)

    assert [c.id for c in second_page] == [c.id for c in first_four[2:4]]


def test_threshold_and_top_k_cut_the_list(served: Served) -> None:
    rag = RAGFlow("", served.url)
    ids = [rag.list_datasets()[0].id]

    default = rag.retrieve(dataset_ids=ids, question=JONAH, page_size=100)
    high = rag.retrieve(dataset_ids=ids, question=JONAH, similarity_threshold=default[2].similarity, page_size=100)
    top = rag.retrieve(dataset_ids=ids, question=JONAH, top_k=3, page_size=100)

    assert len(default) > 3 and default[-1].similarity >= 0.2
    assert [c.id for c in high] == [c.id for c in default[:3]]
    assert [c.id for c in top] == [c.id for c in default[:3]]


def test_documents_and_metadata_conditions_narrow_the_chunks(served: Served) -> None:
    rag = RAGFlow("", served.url)
    (sample,) = rag.list_datasets()
    documents = sample.list_documents(page_size=1000)
    jonah = [document for document in documents if document.meta_fields.title.startswith("Jonah 2")]

    only = rag.retrieve(dataset_ids=[sample.id], question=JONAH, document_ids=[d.id for d in jonah])
    titled = rag.retrieve(dataset_ids=[sample.id], question=JONAH, page_size=100, metadata_condition={
        "logic": "and", "conditions": [{"name": "title", "comparison_operator": "start with", "value": "jonah"}]})

    assert len(documents) == 386 and sum(document.chunk_count for document in documents) == 386
    assert {chunk.document_id for chunk in only} <= {d.id for d in jonah} and only
    assert titled and all("Jonah" in chunk.document_name for chunk in titled)
    with pytest.raises(Exception, match="The datasets don't own the document nope"):
        rag.retrieve(dataset_ids=[sample.id], question=JONAH, document_ids=["nope"])


def test_an_empty_question_finds_nothing_and_a_base_url_with_a_slash_works(served: Served) -> None:
    rag = RAGFlow("", served.url + "/")

    assert rag.retrieve(dataset_ids=[rag.list_datasets()[0].id], question="  ") == []


def test_highlight_marks_the_question_words(served: Served) -> None:
    sample = RAGFlow("", served.url).list_datasets()[0]

    answer = httpx.post(f"{served.url}/api/v1/retrieval", timeout=30, json={
        "dataset_ids": [sample.id], "question": JONAH, "highlight": True, "page_size": 1}).json()

    assert answer["code"] == 0 and "<em>fish</em>" in answer["data"]["chunks"][0]["highlight"].lower()
    assert answer["data"]["doc_aggs"][0]["count"] >= 1 and answer["data"]["total"] >= 1


# ---- the newest SDK, in Python 3.13 ---------------------------------------------------------------------


def python_313() -> Path | None:
    """A Python 3.13 on this machine: pyenv's, or one on PATH."""
    pyenv = shutil.which("pyenv")
    roots = [Path(subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip())] if pyenv else []
    roots.append(Path.home() / ".pyenv")
    for root in roots:
        found = sorted((root / "versions").glob("3.13*/bin/python"))
        if found:
            return found[-1]
    on_path = shutil.which("python3.13")
    return Path(on_path) if on_path else None


@pytest.fixture(scope="module")
def newest_sdk_python(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding the newest ragflow-sdk, made once and kept in pytest's cache (or, with the
    cache off, in this session's temporary folder)."""
    interpreter = python_313()
    if interpreter is None:
        unavailable("no Python 3.13 on this machine for the newest ragflow-sdk (it needs >= 3.13)")
    assert interpreter is not None
    cache = getattr(request.config, "cache", None)
    venv = Path(cache.mkdir("ragflow-sdk-0.27.3")) if cache is not None else tmp_path_factory.mktemp("ragflow-sdk")
    python = venv / "bin" / "python"
    ready = venv / "installed"
    if not ready.exists():
        for step in ([str(interpreter), "-m", "venv", "--clear", str(venv)],
                     [str(python), "-m", "pip", "install", "-q", NEWEST_SDK]):
            done = subprocess.run(step, capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                unavailable(f"could not set up {NEWEST_SDK} with {interpreter}: {done.stderr[-2000:]}")
        ready.write_text(NEWEST_SDK)
    return python


def probe(python: Path | str, served: Served) -> dict:
    done = subprocess.run([str(python), "-W", "error", str(PROBE), served.url, served.token, JONAH],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen: dict = json.loads(done.stdout)
    return seen


def test_the_newest_sdk_sees_exactly_what_0_22_1_sees(served: Served, newest_sdk_python: Path) -> None:
    version = subprocess.run([str(newest_sdk_python), "-c", "import importlib.metadata as m; print(m.version('ragflow-sdk'))"],
                             capture_output=True, text=True, check=True).stdout.strip()

    newest, ours = probe(newest_sdk_python, served), probe(sys.executable, served)

    assert version == NEWEST_SDK.split("==")[1]
    assert newest == ours
    assert [name for _, name, *_ in newest["holder"]["datasets"]] == ["access/unpublished/drafts", "sample"]
    assert [name for _, name, *_ in newest["anonymous"]["datasets"]] == ["sample"]
    assert newest["holder"]["chunks"][0][3].startswith("https://")  # document_name: the URL, in both SDKs
    assert newest["refusals"] == {
        "bad token": "Exception: the access token was refused: malformed token",
        "unknown dataset": f"Exception: You don't own the dataset {'f' * 32}.",
        "no datasets": "Exception: `dataset_ids` is required.",
        "unknown name": "Exception: You lack permission for dataset 'no such library'",
    }
    assert newest["trailing slash"] == ["sample"]
