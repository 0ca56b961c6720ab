"""Scanned pages read by OCR: known text drawn in a real font (Pillow, DejaVu), read back by the real tesseract.

PNG, TIFF and image-only PDF pages give at least 95% of their words back; a PDF page with a text
layer keeps using it. A page OCR cannot read is named in one line and the other pages are imported.
OCR goes on beside embedding: what was read before a page to OCR is sent to the embedder before
Tesseract's text of that page is waited for.
"""

from __future__ import annotations

import io
import json
import multiprocessing
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from document_makers import damage_image, pdf_pages, recall, save_scans, scanned_page
from importer_support import HashingEmbedder, count_words, minimal_pdf

from host.importer import ImportOptions, import_library
from host.importer.errors import ImporterError
from host.importer.progress import BarProgress
from host.importer.readers import ocr

BASE = "https://example.com/"
HARBOUR = ("The harbour master counted forty-two sailboats moored along the northern quay this morning. Gulls "
           "circled above the fish market while the ferry to the island left twelve minutes late.")
ROPEMAKER = ("Nobody remembers a winter as mild as this one, said the old ropemaker, mending his nets by the door "
             "of the chandlery while his grandson painted the rowing boats a bright shade of green.")
ORCHARD = ("In the orchard behind the school the pupils planted eleven pear trees and a row of gooseberry bushes, "
           "then wrote the name of every tree on a small wooden label.")


def run_import(sources: list[Path], out: Path, embedder: Any = None,
               **options: Any) -> tuple[Any, list[dict[str, Any]], list[str]]:
    said: list[str] = []
    options.setdefault("base_url", BASE)
    report = import_library(sources, out, embedder or HashingEmbedder(), ImportOptions(**options), say=said.append)
    return report, json.loads(out.read_text())["bits"], said


def text_at(bits: list[dict[str, Any]], url: str) -> str:
    return "\n\n".join(bit["text"] for bit in bits if bit["info"]["url"] == url)


def test_a_scanned_png_is_read_by_tesseract(tmp_path):
    scan = save_scans([scanned_page(HARBOUR)], tmp_path / "scans" / "harbour-log.png")

    report, bits, said = run_import([scan], tmp_path / "out.json")

    assert said == [] and report.files_read == 1 and report.documents == 1
    assert {bit["info"]["url"] for bit in bits} == {"https://example.com/harbour-log.png"}
    assert {bit["info"]["title"] for bit in bits} == {"harbour log"}
    assert recall(HARBOUR, text_at(bits, "https://example.com/harbour-log.png")) >= 0.95


def test_each_page_of_a_tiff_is_a_page_linked_by_its_number(tmp_path):
    scan = save_scans([scanned_page(HARBOUR), scanned_page(ROPEMAKER)], tmp_path / "letters.tif")

    report, bits, said = run_import([scan], tmp_path / "out.json")

    assert said == [] and report.documents == 1
    assert recall(HARBOUR, text_at(bits, "https://example.com/letters.tif#page=1")) >= 0.95
    assert recall(ROPEMAKER, text_at(bits, "https://example.com/letters.tif#page=2")) >= 0.95
    assert {bit["info"]["title"] for bit in bits} == {"letters \u203a page 1", "letters \u203a page 2"}


def test_an_image_only_pdf_page_is_read_by_ocr_and_a_page_with_a_text_layer_keeps_it(tmp_path):
    typed = minimal_pdf([["This page was typed, and its text layer is read as it is."]], title="Parish Records")
    scanned = save_scans([scanned_page(ORCHARD)], tmp_path / "scan.pdf").read_bytes()
    mixed = tmp_path / "site" / "records.pdf"
    mixed.parent.mkdir()
    mixed.write_bytes(pdf_pages(typed, scanned))

    report, bits, said = run_import([mixed.parent], tmp_path / "out.json")

    assert said == [] and report.documents == 1
    assert text_at(bits, "https://example.com/records.pdf#page=1") == (
        "This page was typed, and its text layer is read as it is.")
    assert recall(ORCHARD, text_at(bits, "https://example.com/records.pdf#page=2")) >= 0.95


def test_a_page_ocr_cannot_read_is_named_and_the_other_pages_are_imported(tmp_path):
    pages = save_scans([scanned_page(HARBOUR), scanned_page(ROPEMAKER), scanned_page(ORCHARD)], tmp_path / "all.pdf")
    scan = tmp_path / "site" / "damaged.pdf"
    scan.parent.mkdir()
    scan.write_bytes(damage_image(pages.read_bytes(), which=1))
    out = tmp_path / "out.json"

    report, bits, said = run_import([scan.parent], out, cache=tmp_path / "cache.sqlite")

    assert said == [f"error: {scan}: page 2: its scanned image cannot be decoded (DCTDecode)"]
    assert report.failed == [said[0].removeprefix("error: ")]
    assert recall(HARBOUR, text_at(bits, "https://example.com/damaged.pdf#page=1")) >= 0.95
    assert recall(ORCHARD, text_at(bits, "https://example.com/damaged.pdf#page=3")) >= 0.95
    assert text_at(bits, "https://example.com/damaged.pdf#page=2") == ""
    # Not cached as read: a re-run tries the file again and says so again (a page may fail only once).
    report, _, said_again = run_import([scan.parent], out, cache=tmp_path / "cache.sqlite")
    assert said_again == said and report.files_unchanged == 0


def test_images_in_a_folder_are_skipped_and_named_ones_are_read(tmp_path):
    site = tmp_path / "site"
    save_scans([scanned_page(HARBOUR)], site / "photos" / "quay.png")
    (site / "post.md").write_text("# Quay\n\nThe quay was busy today.\n")

    report, bits, _ = run_import([site], tmp_path / "out.json")

    assert dict(report.skipped_by_suffix) == {".png": 1}
    assert not any("sailboats" in bit["text"] for bit in bits)
    assert any("note: images in folders are not read (1 here)" in line for line in report.summary())
    report, bits, _ = run_import([site, site / "photos" / "quay.png"], tmp_path / "out.json")
    assert any("sailboats" in bit["text"] for bit in bits) and report.files_read == 2


class RecordsCalls(HashingEmbedder):
    """Remembers the texts of each call to embed."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[str]] = []
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            self.calls.append(list(texts))
        return super().embed(texts)


def test_what_was_read_before_a_page_to_ocr_is_sent_to_the_embedder_before_that_page_is_waited_for(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "a-note.md").write_text("# Ferry\n\nThe ferry timetable changes in May.\n")
    save_scans([scanned_page(HARBOUR), scanned_page(ROPEMAKER), scanned_page(ORCHARD)], site / "b-scans.pdf")
    embedder = RecordsCalls()

    # A window far larger than the import: without the reader's slow steps, nothing would be sent before the end.
    _, bits, said = run_import([site], tmp_path / "out.json", embedder, concurrency=2, window=10_000)

    assert said == [] and len(bits) == 4
    calls = [" ".join(call) for call in embedder.calls]
    # The note's text went alone, before Tesseract's first page was waited for; the first page's text went
    # before the second page was waited for: embedding ran beside OCR, not after it.
    assert any("ferry timetable" in call and "sailboats" not in call for call in calls)
    assert any("sailboats" in call and "ropemaker" not in call and "orchard" not in call for call in calls)


class CountsElsewhere(HashingEmbedder):
    """Offers a picklable token counter: the importer may read and chunk in a second process."""

    def token_counter(self) -> Any:
        return count_words


def test_scanned_pages_read_in_a_second_process_give_the_same_library_and_the_same_one_line(tmp_path):
    pages = save_scans([scanned_page(HARBOUR), scanned_page(ROPEMAKER), scanned_page(ORCHARD)], tmp_path / "all.pdf")
    site = tmp_path / "site"
    site.mkdir()
    (site / "damaged.pdf").write_bytes(damage_image(pages.read_bytes(), which=1))
    (site / "notes.md").write_text("# Notes\n\nThe ferry timetable changes in May.\n")

    here = run_import([site], tmp_path / "here.json", second_process=False)
    elsewhere = run_import([site], tmp_path / "elsewhere.json", CountsElsewhere(), second_process=True)

    assert (tmp_path / "here.json").read_bytes() == (tmp_path / "elsewhere.json").read_bytes()
    assert here[2] == elsewhere[2] == [f"error: {site / 'damaged.pdf'}: page 2: its scanned image cannot be "
                                       "decoded (DCTDecode)"]
    assert not multiprocessing.active_children()


@pytest.fixture
def no_tesseract(monkeypatch):
    """A machine without the tesseract program (pytesseract looks for it where there is none)."""
    pytesseract = pytest.importorskip("pytesseract")
    monkeypatch.setattr(pytesseract.pytesseract, "tesseract_cmd", "/nonexistent/tesseract")
    ocr._tesseract_version.cache_clear()
    yield
    ocr._tesseract_version.cache_clear()


def test_without_tesseract_an_image_stops_the_import_saying_what_to_install(tmp_path, no_tesseract):
    scan = save_scans([scanned_page(HARBOUR)], tmp_path / "harbour.png")
    out = tmp_path / "out.json"
    out.write_text("old")

    with pytest.raises(ImporterError) as stopped:
        run_import([scan], out)

    assert str(stopped.value) == ("OCR needs the tesseract program: apt-get install tesseract-ocr (Debian, Ubuntu) "
                                  "or brew install tesseract (macOS)")
    assert out.read_text() == "old"


def test_without_tesseract_a_pdfs_scanned_pages_are_named_and_its_text_pages_imported(tmp_path, no_tesseract):
    typed = minimal_pdf([["This page was typed, and its text layer is read as it is."]])
    scanned = save_scans([scanned_page(ORCHARD)], tmp_path / "scan.pdf").read_bytes()
    mixed = tmp_path / "records.pdf"
    mixed.write_bytes(pdf_pages(typed, scanned))

    _, bits, said = run_import([mixed], tmp_path / "out.json")

    assert said == [f"error: {mixed}: page 2: scanned, with no text layer: reading it needs OCR: pip install "
                    "'polymath-host[ocr]' and apt-get install tesseract-ocr (Debian, Ubuntu) or brew install tesseract "
                    "(macOS)"]
    assert [bit["text"] for bit in bits] == ["This page was typed, and its text layer is read as it is."]


def test_an_unchanged_scan_is_not_read_again_and_a_new_one_alone_is_ocrd_and_embedded(tmp_path):
    first = save_scans([scanned_page(HARBOUR), scanned_page(ROPEMAKER)], tmp_path / "scans" / "first.pdf")
    out, cache = tmp_path / "out.json", tmp_path / "cache.sqlite"
    run_import([first], out, cache=cache)
    library = out.read_bytes()

    report, _, _ = run_import([first], out, cache=cache)
    assert report.files_unchanged == 1 and report.embedded == 0 and out.read_bytes() == library

    second = save_scans([scanned_page(ORCHARD)], tmp_path / "scans" / "second.png")
    embedder = RecordsCalls()
    report, _, _ = run_import([first, second], out, embedder, cache=cache)
    assert report.files_unchanged == 1 and report.files_read == 2
    assert all("gooseberry" in " ".join(call) for call in embedder.calls) and embedder.counted
    assert not any("sailboats" in text for text in embedder.counted)  # the first scan was neither read nor counted


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_counts_the_scanned_pages_as_they_are_read(tmp_path):
    scan = save_scans([scanned_page(HARBOUR), scanned_page(ROPEMAKER)], tmp_path / "letters.tif")
    screen = Terminal()

    import_library([scan], tmp_path / "out.json", HashingEmbedder(), ImportOptions(),
                   BarProgress(screen, refresh_seconds=0), say=lambda line: None)

    assert "1/1" in screen.getvalue() and "2 scanned pages read" in screen.getvalue()
