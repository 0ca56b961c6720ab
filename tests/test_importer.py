"""`import_library` end to end: a publisher's folder of writing becomes a valid, searchable library.

The corpus is real files of every kind (Markdown with YAML and TOML front matter, HTML, an RSS
feed, text, a PDF written by hand), imported with the word-hashing test embedder; the library is
checked with the host's own validator, bit by bit, and served by a real host process.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from importer_support import FACTS, HIDDEN_FACTS, HashingEmbedder, embed_words, write_corpus
from librarian import b64

from host.cli.validate import validate_paths
from host.importer import ImportOptions, import_library
from host.importer.errors import ImporterError
from host.importer.output import write_library

BASE = "https://example.com/site"
BUDGET = 40  # words, with the test embedder: small enough that sections split


def run_import(site: Path, out: Path, embedder: Any = None, **options: Any) -> Any:
    options.setdefault("base_url", BASE + "/")
    options.setdefault("chunk_tokens", BUDGET)
    options.setdefault("cache", out.with_name(out.name + ".cache.sqlite"))
    return import_library([site], out, embedder or HashingEmbedder(), ImportOptions(**options), say=lambda line: None)


def bits_of(out: Path) -> list[dict[str, Any]]:
    return list(json.loads(out.read_text())["bits"])


def bit_with(bits: list[dict[str, Any]], text: str) -> dict[str, Any]:
    found = [bit for bit in bits if text in bit["text"]]
    assert len(found) == 1, f"{text!r} is in {len(found)} bits"
    return found[0]


@pytest.fixture
def imported(tmp_path: Path) -> tuple[Path, Path, Any]:
    site = write_corpus(tmp_path / "site")
    out = tmp_path / "libraries" / "site.json"
    report = run_import(site, out)
    return site, out, report


# ---- the library made ---------------------------------------------------------------------------


def test_the_library_validates_with_the_hosts_own_checks(imported):
    _, out, report = imported
    lines: list[str] = []
    assert validate_paths([out], say=lines.append) == 0, lines
    assert lines == [f"{out}: ok, {report.bits} bits, test:hashing-64, dimension 64"]
    library = json.loads(out.read_text())
    assert library["version"] == 1 and library["embedding_model"] == "test:hashing-64"


def test_every_fact_is_in_a_bit_with_its_documents_title_and_url(imported):
    bits = bits_of(imported[1])
    expected = {
        "markdown": ("Hello Zebras \u203a Feeding schedule", f"{BASE}/posts/2024-hello.html#feeding-schedule",
                     "A post about zebras: what they eat."),
        "html": ("Gardening \u203a Soil and walls", f"{BASE}/garden.html#soil", "Notes from the vegetable patch."),
        "feed": ("Barnacle census", "https://harbour.example/posts/barnacles", "A short summary of the census."),
        "text": ("Kitchen notes", f"{BASE}/kitchen%20notes.txt", None),
        "pdf": ("Quarterly Report \u203a page 2", f"{BASE}/report.pdf#page=2", None),
    }
    for kind, (title, url, description) in expected.items():
        info = bit_with(bits, FACTS[kind])["info"]
        assert (info["title"], info["url"], info.get("description")) == (title, url, description), kind


def test_a_repeated_heading_gets_githubs_numbered_anchor(imported):
    bit = bit_with(imported[1] and bits_of(imported[1]), "A second section with the same heading")
    assert bit["info"]["url"] == f"{BASE}/posts/2024-hello.html#feeding-schedule-1"


def test_a_subsection_that_fits_stays_with_its_heading_and_says_so(imported):
    bit = bit_with(bits_of(imported[1]), FACTS["markdown"])
    assert bit["text"] == f"{FACTS['markdown']}\n\nWeekend treats\n\nCarrots, mostly. On Sundays a single crisp apple."


def test_front_matter_url_is_placed_under_the_base_url(imported):
    bit = bit_with(bits_of(imported[1]), "This post says where it lives")
    assert bit["info"] == {"url": f"{BASE}/custom/moved/", "title": "Moved post"}


def test_every_feed_item_is_a_document_of_its_own(imported):
    bit = bit_with(bits_of(imported[1]), "The foghorn sounded twice at dawn.")
    assert bit["info"] == {"url": "https://harbour.example/posts/fog", "title": "Fog & foghorns"}


def test_navigation_scripts_and_page_furniture_are_left_out(imported):
    texts = " ".join(bit["text"] for bit in bits_of(imported[1]))
    for furniture in ["About us navigation", "script text", "Sidebar advertisement", "Footer copyright"]:
        assert furniture not in texts


def test_hidden_and_secret_files_are_never_read_and_unknown_kinds_are_counted(imported):
    _, out, report = imported
    texts = " ".join(bit["text"] for bit in bits_of(out))
    for fact in HIDDEN_FACTS:
        assert fact not in texts
    assert dict(report.skipped_by_suffix) == {".png": 1}
    assert report.files_read == 6 and report.documents == 7 and report.failed == []


def test_token_counts_are_the_embedders_count_and_within_the_budget(imported):
    counter = HashingEmbedder()
    for bit in bits_of(imported[1]):
        assert bit["token_count"] == counter.count_tokens(bit["text"])
        assert 0 < bit["token_count"] <= BUDGET


def test_long_sections_are_cut_between_sentences_never_inside_a_word(imported):
    site, out, _ = imported
    source_words = set()
    for path in site.rglob("*"):
        if path.is_file() and path.suffix != ".pdf":
            source_words.update(re.findall(r"\w+", path.read_text(errors="replace")))
    source_words.update(word for page in [FACTS["pdf"], "Quarterly Report This report covers the quarter's business "
                                          "results Costs stayed flat"] for word in re.findall(r"\w+", page))
    filler_bits = [bit for bit in bits_of(out) if "Gardens reward patience" in bit["text"]]
    assert len(filler_bits) >= 4  # the filler was long enough to be cut
    for bit in bits_of(out):
        assert set(re.findall(r"\w+", bit["text"])) <= source_words, bit["text"]
    for bit in filler_bits:  # cut at sentence ends: every piece ends a sentence
        assert bit["text"].rstrip().endswith((".", "!", "?")), bit["text"]


def test_the_same_tree_always_gives_the_same_library(tmp_path):
    site = write_corpus(tmp_path / "site")
    run_import(site, tmp_path / "a.json", cache=None)
    run_import(site, tmp_path / "b.json", cache=None)
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_without_a_base_url_bits_link_to_the_files_on_this_machine(tmp_path):
    site = write_corpus(tmp_path / "site")
    report = run_import(site, tmp_path / "out.json", base_url=None)
    bit = bit_with(bits_of(tmp_path / "out.json"), FACTS["html"])
    assert bit["info"]["url"] == (site / "garden.html").resolve().as_uri() + "#soil"
    assert report.file_urls and any("--base-url" in line for line in report.summary())
    feed_bit = bit_with(bits_of(tmp_path / "out.json"), FACTS["feed"])
    assert feed_bit["info"]["url"] == "https://harbour.example/posts/barnacles"  # links stay links


# ---- incremental ---------------------------------------------------------------------------------


def test_a_rerun_after_one_changed_file_embeds_only_that_files_chunks(imported):
    site, out, first = imported
    assert first.embedded == first.bits and first.reused == 0
    note = site / "kitchen notes.txt"
    note.write_text(note.read_text().replace("sea shanty", "tea shanty"))

    embedder = HashingEmbedder()
    second = run_import(site, out, embedder)

    note_bits = [bit["text"] for bit in bits_of(out) if bit["info"]["url"] == f"{BASE}/kitchen%20notes.txt"]
    assert len(note_bits) == 2 and "tea shanty" in note_bits[0] and "shipping forecast" in note_bits[1]
    assert embedder.embedded == [note_bits[0]]  # the note's other chunk, unchanged, came from the cache
    assert (second.embedded, second.embedded_texts, second.reused) == (1, 1, second.bits - 1)
    assert f"embedded 1 at {1 / second.embed_seconds:.1f} chunks/s, reused {second.bits - 1} from the cache" \
        in second.summary()[1]


def test_an_unchanged_rerun_neither_reads_nor_embeds_and_writes_the_same_bytes(imported):
    site, out, _ = imported
    before = out.read_bytes()
    embedder = HashingEmbedder()
    report = run_import(site, out, embedder)
    assert embedder.embedded == [] and report.embedded == 0
    assert embedder.counted == []  # every file's chunks came from the cache: nothing parsed or counted
    assert report.files_unchanged == report.files_read == 6
    assert report.summary()[0].startswith("read 6 files (6 unchanged), 7 documents")
    assert out.read_bytes() == before


def test_a_changed_file_alone_is_read_and_counted_again(imported):
    site, out, _ = imported
    (site / "garden.html").write_text((site / "garden.html").read_text().replace("obsidian", "granite"))
    embedder = HashingEmbedder()
    report = run_import(site, out, embedder)
    assert report.files_unchanged == 5
    assert any("granite" in text for text in embedder.counted)
    assert not any("Quillbert" in text or "hovercraft" in text for text in embedder.counted)


def test_new_settings_chunk_every_file_again(imported):
    site, out, _ = imported
    report = run_import(site, out, base_url="https://moved.example/")
    assert report.files_unchanged == 0
    assert bit_with(bits_of(out), FACTS["html"])["info"]["url"] == "https://moved.example/garden.html#soil"
    report = run_import(site, out, base_url="https://moved.example/", chunk_tokens=BUDGET + 1)
    assert report.files_unchanged == 0


def test_the_cache_keeps_only_what_the_library_uses(imported):
    site, out, _ = imported
    cache_file = out.with_name(out.name + ".cache.sqlite")
    assert cached_texts(cache_file) == len({bit["text"] for bit in bits_of(out)})
    assert cached_files(cache_file) == 6
    (site / "garden.html").unlink()
    run_import(site, out)
    assert cached_texts(cache_file) == len({bit["text"] for bit in bits_of(out)})
    assert cached_files(cache_file) == 5
    assert FACTS["html"] not in out.read_text()


def cached_texts(cache_file: Path) -> int:
    with contextlib.closing(sqlite3.connect(cache_file)) as cache:
        return int(cache.execute("SELECT count(*) FROM vectors").fetchone()[0])


def cached_files(cache_file: Path) -> int:
    with contextlib.closing(sqlite3.connect(cache_file)) as cache:
        return int(cache.execute("SELECT count(*) FROM files").fetchone()[0])


# ---- failures leave the old library as it was ---------------------------------------------------


class InterruptedEmbedder(HashingEmbedder):
    """Ctrl-C arrives while the embedder works on its second batch."""

    def __init__(self, after_batches: int = 1) -> None:
        super().__init__()
        self.batches_left = after_batches

    def embed(self, texts):
        if self.batches_left == 0:
            raise KeyboardInterrupt
        self.batches_left -= 1
        return super().embed(texts)


def no_temporary_files(folder: Path) -> bool:
    return not [path for path in folder.iterdir() if path.name.endswith(".tmp")]


def test_ctrl_c_while_embedding_leaves_the_previous_library_byte_identical(imported):
    site, out, _ = imported
    before = out.read_bytes()
    for path in site.rglob("*.md"):  # every chunk changes: all must be embedded again
        path.write_text(path.read_text().replace("the", "THE"))

    with pytest.raises(KeyboardInterrupt):
        run_import(site, out, InterruptedEmbedder(after_batches=1), batch_size=2)

    assert out.read_bytes() == before
    assert no_temporary_files(out.parent)
    resumed = HashingEmbedder()
    run_import(site, out, resumed, batch_size=2)
    new_texts = {bit["text"] for bit in bits_of(out)} - {bit["text"] for bit in json.loads(before)["bits"]}
    # The batch embedded before Ctrl-C was cached: the next run embeds only the rest.
    assert len(new_texts) > 2 and len(resumed.embedded) == len(new_texts) - 2


class WrongEmbedder(HashingEmbedder):
    def __init__(self, result: np.ndarray | Exception) -> None:
        super().__init__()
        self.result = result

    def embed(self, texts):
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


@pytest.mark.parametrize(("result", "message"), [
    (np.zeros((1, 3), dtype=np.float32), "returned an array of shape (1, 3)"),
    (ConnectionError("service unavailable"), "embedding failed: ConnectionError: service unavailable"),
])
def test_an_embedder_failure_is_one_line_and_the_old_library_stays(imported, result, message):
    site, out, _ = imported
    before = out.read_bytes()
    (site / "kitchen notes.txt").write_text("New title\n\nAll new text.")
    with pytest.raises(ImporterError, match=re.escape(message)):
        run_import(site, out, WrongEmbedder(result))
    assert out.read_bytes() == before and no_temporary_files(out.parent)


class UnloadableEmbedder(HashingEmbedder):
    def count_tokens(self, text):
        raise RuntimeError("model files missing")


class NoDimension(HashingEmbedder):
    @property
    def dimension(self):
        raise ConnectionError("service unreachable")


@pytest.mark.parametrize(("embedder", "message"), [
    (UnloadableEmbedder(), "counting tokens failed: RuntimeError: model files missing"),
    (NoDimension(), "the embedder of test:hashing-64 is not usable: ConnectionError: service unreachable"),
])
def test_an_embedder_that_cannot_start_stops_the_import_and_names_no_file(imported, embedder, message):
    site, out, _ = imported
    before = out.read_bytes()
    (site / "kitchen notes.txt").write_text("Changed\n\nSo this file must be counted again.")
    said: list[str] = []
    with pytest.raises(ImporterError, match=f"^{re.escape(message)}$"):
        import_library([site], out, embedder, ImportOptions(chunk_tokens=BUDGET), say=said.append)
    assert out.read_bytes() == before and said == []


def test_a_library_that_would_not_validate_is_never_written(tmp_path):
    out = tmp_path / "lib.json"
    out.write_text("old")
    bad = {"version": 1, "embedding_model": "m", "bits": [{"text": "t", "embedding": "AAAAAA==", "token_count": -1,
                                                           "info": {"url": "https://x"}}]}
    with pytest.raises(ImporterError, match=r"would not be valid \(bits\[0\]\.token_count: must be an integer"):
        write_library(bad, out, None)
    assert out.read_text() == "old" and no_temporary_files(tmp_path)


def test_an_unreadable_file_is_named_and_the_rest_still_imported(tmp_path):
    site = write_corpus(tmp_path / "site")
    (site / "broken.pdf").write_bytes(b"%PDF-1.4\nthis is not really a PDF")
    (site / "latin1.md").write_bytes("caf\xe9".encode("latin-1"))
    said: list[str] = []

    report = import_library([site], tmp_path / "out.json", HashingEmbedder(),
                            ImportOptions(base_url=BASE, chunk_tokens=BUDGET), say=said.append)

    assert [line.split(": ")[0] for line in report.failed] == [str(site / "broken.pdf"), str(site / "latin1.md")]
    assert report.failed[0].startswith(f"{site / 'broken.pdf'}: not a readable PDF")
    assert report.failed[1] == f"{site / 'latin1.md'}: not UTF-8 text (byte 3 is 0xe9)"
    assert said == [f"error: {line}" for line in report.failed]
    assert bit_with(bits_of(tmp_path / "out.json"), FACTS["html"])  # the others are all there
    assert "2 failed (see above)" in report.summary()[0]


def test_a_source_that_does_not_exist_stops_before_anything_is_written(tmp_path):
    out = tmp_path / "out.json"
    out.write_text("old")
    with pytest.raises(ImporterError, match="nowhere: does not exist"):
        run_import(tmp_path / "nowhere", out)
    assert out.read_text() == "old"


def test_nothing_to_import_leaves_the_old_library(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "photo.jpg").write_bytes(b"\xff\xd8")
    out = tmp_path / "out.json"
    out.write_text("old")
    with pytest.raises(ImporterError, match=r"nothing to import from .*empty: no writing found"):
        run_import(tmp_path / "empty", out)
    assert out.read_text() == "old"


def test_drafts_are_skipped_and_counted(tmp_path):
    site = write_corpus(tmp_path / "site")
    (site / "posts" / "unfinished.md").write_text("---\ntitle: Soon\ndraft: true\n---\nNot yet for readers.")
    report = run_import(site, tmp_path / "out.json")
    assert report.drafts == 1
    assert "Not yet" not in (tmp_path / "out.json").read_text()
    assert "1 draft skipped" in report.summary()[0]


def test_the_output_keeps_the_old_files_permissions(imported):
    site, out, _ = imported
    os.chmod(out, 0o640)
    (site / "kitchen notes.txt").write_text("Changed\n\nSo the file is rewritten.")
    run_import(site, out)
    assert out.stat().st_mode & 0o777 == 0o640


# ---- served and searched -------------------------------------------------------------------------


def test_served_by_a_real_host_each_documents_fact_is_found(imported, run_host):
    _, out, _ = imported
    host = run_host(out.parent)
    for kind, fact in FACTS.items():
        answer = httpx.post(f"{host.url}/", json={
            "query_embedding": b64(embed_words(fact)), "query_embedding_model": "test:hashing-64",
            "count": 1, "count_type": "bit", "omit": "embedding",
        })
        assert answer.status_code == 200, answer.text
        assert fact in answer.json()["bits"][0]["text"], kind


def test_include_drafts_imports_a_page_marked_as_a_draft(tmp_path):
    site = write_corpus(tmp_path / "site")
    (site / "posts" / "unfinished.md").write_text("---\ntitle: Soon\ndraft: true\n---\nNot yet for readers.")
    report = run_import(site, tmp_path / "out.json", include_drafts=True)
    assert report.drafts == 0
    assert bit_with(bits_of(tmp_path / "out.json"), "Not yet for readers.")["info"]["title"] == "Soon"
