"""Word, EPUB and scanned pages end to end: imported with the real local embedder, served by a real host,
and each found by a text query for a sentence of it (its bit in the top 3).

Needs the `embed` extra, pandoc and tesseract (all in CI): skipped without them elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from conftest import start_host, stop_host
from document_makers import BOOK, ESSAY, pandoc, save_scans, scanned_page

from host.cli.validate import validate_paths
from host.importer import ImportOptions, import_library
from host.service.harness import RunningHost

pytest_plugins = ["embedder_fixtures"]  # minilm_embedder: loaded once; required in CI

SCANNED = ("The parish council agreed to repair the stone bridge over the mill stream before the autumn rains, "
           "and the blacksmith offered to forge new railings at cost.")
# A sentence of each source, asked for in the words it has, and where its bit must link.
QUERIES = {
    "docx": ("We found four swarm cells along the bottom bars of the second frame.",
             "https://example.com/beekeeping.docx"),
    "epub": ("Fog horns sounded for nine days straight in July, and the supply boat turned back twice.",
             "https://example.com/almanac.epub#chapter-2"),
    "scan": ("The parish council agreed to repair the stone bridge over the mill stream before the autumn rains.",
             "https://example.com/council-minutes.png"),
}


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory, minilm_embedder) -> Iterator[RunningHost]:
    root = tmp_path_factory.mktemp("documents")
    site = root / "site"
    pandoc(ESSAY, site / "beekeeping.docx")
    pandoc(BOOK, site / "almanac.epub")
    scan = save_scans([scanned_page(SCANNED)], root / "scans" / "council-minutes.png")
    out = root / "libraries" / "documents.json"
    report = import_library([site, scan], out, minilm_embedder, ImportOptions(base_url="https://example.com/"),
                            say=print)
    assert report.failed == [] and report.files_read == 3
    assert validate_paths([out], say=print) == 0
    running = start_host(out.parent, embedder=True, timeout=120)
    yield running
    stop_host(running)


@pytest.mark.parametrize("source", sorted(QUERIES))
def test_a_sentence_of_each_source_finds_its_bit_in_the_top_3(host, source):
    sentence, url = QUERIES[source]
    answer = httpx.post(f"{host.url}/", json={"query": sentence, "count": 3, "count_type": "bit"}, timeout=60)
    assert answer.status_code == 200, answer.text
    urls = [bit["info"]["url"] for bit in answer.json()["bits"]]
    assert url in urls, (source, urls)
