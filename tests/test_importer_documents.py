"""Word documents and EPUB books, made by pandoc from Markdown (and by python-docx), imported.

A Word document's headings become each chunk's heading path and its tables `a | b` lines, under its
title; an EPUB's chapters come in spine order, each titled and linked as `book.epub#chapter-N`, with
the book's metadata as the description. A damaged file is one line and the rest is imported.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
from document_makers import BOOK, ESSAY, pandoc
from importer_support import HashingEmbedder

from host.importer import ImportOptions, import_library
from host.importer.readers import docx

BASE = "https://example.com/"

def run_import(sources: list[Path], out: Path, **options: Any) -> tuple[Any, list[dict[str, Any]], list[str]]:
    said: list[str] = []
    options.setdefault("base_url", BASE)
    report = import_library(sources, out, HashingEmbedder(), ImportOptions(**options), say=said.append)
    return report, json.loads(out.read_text())["bits"], said


def bit_with(bits: list[dict[str, Any]], text: str) -> dict[str, Any]:
    [found] = [bit for bit in bits if text in bit["text"]]
    return found


# ---- Word ---------------------------------------------------------------------------------------


def test_a_word_document_gives_its_title_headings_as_paths_and_tables_as_lines(tmp_path):
    essay = pandoc(ESSAY, tmp_path / "site" / "beekeeping.docx")

    report, bits, said = run_import([essay.parent], tmp_path / "out.json", chunk_tokens=30)

    assert said == [] and report.files_read == 1 and report.documents == 1
    swarm = bit_with(bits, "four swarm cells")
    assert swarm["info"]["title"] == "Notes on Beekeeping \u203a Spring inspection \u203a Swarm cells"
    assert swarm["info"]["url"] == "https://example.com/beekeeping.docx"  # the document: no place in it
    assert swarm["info"]["description"] == "What a first year with two hives taught me"
    harvest = bit_with(bits, "East | 9 | 14")
    assert "Hive | Frames | Honey (kg)\nEast | 9 | 14\nWest | 6 | 8" in harvest["text"]
    assert "- jars sterilised in the oven\n- labels printed at the library" in harvest["text"]
    assert harvest["info"]["title"] == "Notes on Beekeeping \u203a Harvest"


def test_a_word_document_written_by_python_docx_reads_its_own_title_and_its_table(tmp_path):
    word = pytest.importorskip("docx")  # python-docx, in the test extra
    document = word.Document()
    document.core_properties.title = "Allotment ledger"
    document.add_heading("Seed orders", level=1)
    document.add_paragraph("Broad beans arrived from the cooperative in late February.")
    table = document.add_table(rows=3, cols=2)
    for row, (crop, packets) in zip(table.rows, [("Crop", "Packets"), ("Parsnip", "3"), ("Kale", "5")]):
        row.cells[0].paragraphs[0].add_run(crop)
        row.cells[1].add_paragraph(packets)  # a cell of two paragraphs (an empty one, then the number)
    path = tmp_path / "ledger.docx"
    document.save(path)

    [read] = docx.read(path.read_bytes(), "ledger")

    assert read.title == "Allotment ledger" and read.description is None
    [section] = read.sections
    assert section.path == ("Allotment ledger", "Seed orders")
    assert section.blocks == ["Broad beans arrived from the cooperative in late February.",
                              "Crop | Packets\nParsnip | 3\nKale | 5"]


def test_a_document_that_is_not_a_word_file_is_named_and_the_rest_imported(tmp_path):
    site = tmp_path / "site"
    pandoc(ESSAY, site / "beekeeping.docx")
    (site / "notes.docx").write_bytes(b"I am plain text with a .docx name")
    (site / "truncated.docx").write_bytes((site / "beekeeping.docx").read_bytes()[:900])

    report, bits, said = run_import([site], tmp_path / "out.json")

    assert said == [f"error: {site / 'notes.docx'}: not a Word document (.docx is a zip file; this is not one)",
                    f"error: {site / 'truncated.docx'}: not a Word document (.docx is a zip file; this is not one)"]
    assert report.failed == [line.removeprefix("error: ") for line in said]
    assert bit_with(bits, "four swarm cells")


# ---- EPUB ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["epub3", "epub2"])  # a navigation document, or only the NCX of EPUB 2
def test_an_epubs_chapters_come_in_spine_order_titled_linked_and_described(tmp_path, version):
    book = pandoc(BOOK, tmp_path / "books" / "almanac.epub", "--to", version)

    report, bits, said = run_import([book], tmp_path / "out.json")

    assert said == [] and report.documents == 3  # the title page is not a chapter
    chapters = [(bit["info"]["title"], bit["info"]["url"]) for bit in bits]
    assert chapters == [
        ("The Lighthouse Almanac \u203a Spring Storms", "https://example.com/almanac.epub#chapter-1"),
        ("The Lighthouse Almanac \u203a Summer Fog", "https://example.com/almanac.epub#chapter-2"),
        ("The Lighthouse Almanac \u203a Autumn Lights", "https://example.com/almanac.epub#chapter-3"),
    ]
    assert bits[0]["text"] == ("The first gale of April tore three slates from the keeper\u2019s roof.\n\nRepairs\n\n"
                               "We nailed tarred canvas over the gap and waited for calmer seas.")
    assert {bit["info"]["description"] for bit in bits} == {
        "by Marguerite Okonkwo, 2021. A year of weather and ships at a northern light."}


def test_a_long_chapter_is_cut_under_its_headings_each_part_keeping_the_chapters_link(tmp_path):
    book = pandoc(BOOK, tmp_path / "almanac.epub")

    _, bits, _ = run_import([book], tmp_path / "out.json", chunk_tokens=14)

    repairs = bit_with(bits, "tarred canvas")
    assert repairs["info"]["title"] == "The Lighthouse Almanac \u203a Spring Storms \u203a Repairs"
    assert repairs["info"]["url"] == "https://example.com/almanac.epub#chapter-1"


def test_a_damaged_epub_is_named_and_the_rest_imported(tmp_path):
    site = tmp_path / "site"
    book = pandoc(BOOK, site / "almanac.epub")
    (site / "broken.epub").write_bytes(book.read_bytes()[:-400])  # its central directory cut off

    report, bits, said = run_import([site], tmp_path / "out.json")

    assert len(said) == 1 and said[0].startswith(f"error: {site / 'broken.epub'}: not a readable EPUB (")
    assert len(report.failed) == 1
    assert bit_with(bits, "Fresnel lens")


def test_an_epub_whose_chapters_are_encrypted_is_named_rather_than_read_as_ciphertext(tmp_path):
    book = pandoc(BOOK, tmp_path / "plain.epub")
    locked = tmp_path / "locked.epub"
    with zipfile.ZipFile(book) as source, zipfile.ZipFile(locked, "w") as target:
        for member in source.infolist():
            target.writestr(member, source.read(member))
        chapters = [name for name in source.namelist() if name.endswith(".xhtml")]
        target.writestr("META-INF/encryption.xml", ENCRYPTION.format(references="".join(
            CIPHER_REFERENCE.format(uri=name) for name in chapters)))

    _, bits, said = run_import([book, locked], tmp_path / "out.json")

    assert said == [f"error: {locked}: its chapters are encrypted (DRM): import a copy without DRM"]
    assert {bit["info"]["url"].split("#")[0] for bit in bits} == {"https://example.com/plain.epub"}


# As Adobe's DRM declares its encrypted files (the OCF container's encryption.xml, W3C XML Encryption).
ENCRYPTION = """<?xml version="1.0"?>
<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container"
            xmlns:enc="http://www.w3.org/2001/04/xmlenc#">{references}</encryption>"""
CIPHER_REFERENCE = """<enc:EncryptedData><enc:EncryptionMethod Algorithm="http://www.w3.org/2001/04/xmlenc#aes128-cbc"/>
<enc:CipherData><enc:CipherReference URI="{uri}"/></enc:CipherData></enc:EncryptedData>"""


def test_a_password_protected_word_document_says_so(tmp_path):
    protected = tmp_path / "locked.docx"  # Word saves a document with a password as an OLE compound file
    protected.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(4088))
    pandoc(ESSAY, tmp_path / "open.docx")

    _, bits, said = run_import([protected, tmp_path / "open.docx"], tmp_path / "out.json")

    assert said == [f"error: {protected}: a password-protected (or old-style .doc) document: save it from Word as a "
                    ".docx without a password to import it"]
    assert bit_with(bits, "four swarm cells")
