"""PDF: the text of each page, a section of its own linked as `#page=N` (what PDF viewers open).

A page with a text layer is read from it (pypdf), as it always was. A page without one that shows
an image (a scan) is rendered by PDFium at 300 dpi and read by OCR (`ocr`: Tesseract), a few pages
at once, the pages before it embedded meanwhile. A page OCR cannot read (its image cannot be decoded,
Tesseract fails) is named in one line and the others are imported; without the `ocr` extra, the
scanned pages are named in one line saying what to install, and the pages with text are imported.
A page with neither text nor an image (a blank page, a drawing) gives nothing.

Lines are joined into paragraphs (a blank line or a short line ending in . ! ? : ends one); a word
hyphenated across a line end is joined again. The title is the PDF's own (document info `Title`)
or the file name. An encrypted PDF is read only when it opens with an empty password.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from typing import Any

from host.importer.document import Document, Read, Section, SlowStep, Unreadable
from host.importer.errors import ImporterError, extra_hint, require
from host.importer.readers.ocr import TESSERACT_HINT, Page, available, pages_in_order

RENDER_DPI = 300  # what Tesseract reads best at
RENDER_PIXELS = 6000  # the longer side of a rendered page at most (a poster-sized page is scaled down)
_HYPHENATED = re.compile(r"(\w)-\n(\w)")


def read(data: bytes, fallback_title: str) -> Iterator[Read]:
    pypdf = require("pypdf", "PDF")
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise ImporterError("the PDF is encrypted; save an unencrypted copy to import it")
        title = _title(reader) or fallback_title
        pages = list(reader.pages)
    except ImporterError:
        raise
    except Exception as problem:  # pypdf raises many kinds for a damaged file; each is "cannot read"
        raise ImporterError(f"not a readable PDF: {type(problem).__name__}: {problem}") from None
    return _read_pages(title, pages, _Scans(data))


def _read_pages(title: str, pages: list[Any], scans: _Scans) -> Iterator[Read]:
    """The pages in one document, given in parts at each slow step (a page to OCR): see `document`."""
    sections: list[Section] = []
    first = True
    try:
        for item in pages_in_order(_pages(pages, scans), paragraphs):
            if isinstance(item, SlowStep):
                if sections:
                    yield Document(title, sections, continues=not first)
                    sections, first = [], False
                yield item
                continue
            number, page = item
            if isinstance(page, Unreadable):
                yield page
            elif page:
                sections.append(Section((title, f"page {number}"), f"page={number}", page))
    finally:
        scans.close()
    if sections or first:
        yield Document(title, sections, continues=not first)
    if scans.without_ocr:
        numbers = ", ".join(map(str, scans.without_ocr))
        several = len(scans.without_ocr) > 1
        yield Unreadable(f"page{'s' * several} {numbers}",
                         f"scanned, with no text layer: reading {'them' if several else 'it'} needs OCR: "
                         f"{extra_hint('ocr')} and {TESSERACT_HINT}")


def _pages(pages: list[Any], scans: _Scans) -> Iterator[tuple[int, Page]]:
    """Each page's paragraphs from its text layer, else its rendered image to OCR; blank pages left out."""
    for number, page in enumerate(pages, start=1):
        try:
            blocks = paragraphs(page.extract_text() or "")
            scanned = not blocks and len(page.images) > 0
        except Exception as problem:  # a damaged page: the others are still read
            said = " ".join(str(problem).split())
            yield number, Unreadable(f"page {number}", f"cannot be read ({type(problem).__name__}: {said})")
            continue
        if blocks:
            yield number, blocks
        elif scanned:
            image = scans.render(number)
            if image is not None:
                yield number, image


class _Scans:
    """The PDF opened in PDFium, once a page needs rendering; which scanned pages went unread without OCR."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pdf: Any = None
        self._ocr: bool | None = None
        self.without_ocr: list[int] = []

    def render(self, number: int) -> Any:
        """The page as a grayscale image at RENDER_DPI; an Unreadable when it cannot be; None when it is blank
        (or OCR is not installed: the page is then counted in `without_ocr`)."""
        if self._ocr is None:
            self._ocr = available()
        if not self._ocr:
            self.without_ocr.append(number)
            return None
        try:
            if self._pdf is None:
                pdfium = require("pypdfium2", "OCR of scanned PDF pages", extra="ocr")
                self._pdf = pdfium.PdfDocument(self._data)
            page = self._pdf[number - 1]
            try:
                width, height = page.get_size()
                scale = min(RENDER_DPI / 72, RENDER_PIXELS / max(width, height, 1))
                image = page.render(scale=scale, grayscale=True).to_pil()
                blank = image.getextrema()[0] == image.getextrema()[1]
                broken = _undecodable_image(page) if blank else None
            finally:
                page.close()
        except ImporterError:
            raise
        except Exception as problem:  # PDFium could not open or draw this page
            said = " ".join(str(problem).split())
            return Unreadable(f"page {number}", f"cannot be drawn for OCR ({type(problem).__name__}: {said})")
        if broken:
            return Unreadable(f"page {number}", f"its scanned image cannot be decoded ({broken})")
        if blank:
            return None
        dpi = round(scale * 72)
        image.info["dpi"] = (dpi, dpi)  # Tesseract reads the resolution from the image it is given
        return image

    def close(self) -> None:
        if self._pdf is not None:
            self._pdf.close()


def _undecodable_image(page: Any) -> str | None:
    """The encoding of an image on a page that drew blank that cannot be decoded, if one cannot (PDFium
    draws such an image as nothing)."""
    raw = require("pypdfium2.raw", "OCR of scanned PDF pages", extra="ocr")
    for image in page.get_objects(filter=[raw.FPDF_PAGEOBJ_IMAGE]):
        try:
            image.get_bitmap(render=False).close()
        except Exception:
            return ", ".join(image.get_filters()) or "no filter"
    return None


def _title(reader: Any) -> str | None:
    metadata = reader.metadata
    title = metadata.title if metadata is not None else None
    return str(title).strip() or None if title else None


def paragraphs(text: str) -> list[str]:
    """A page's text as paragraphs: lines joined unless a blank line or a sentence-ending short line ends one."""
    text = _HYPHENATED.sub(r"\1\2", text.replace("\r\n", "\n"))
    found: list[str] = []
    current: list[str] = []
    widest = max((len(line.strip()) for line in text.split("\n")), default=0)
    for raw in text.split("\n"):
        line = " ".join(raw.split())
        if line:
            current.append(line)
        # A line well short of the page's width that ends a sentence is a paragraph's last line.
        if current and (not line or (line[-1] in ".!?:" and len(line) < 0.8 * widest)):
            found.append(" ".join(current))
            current = []
    if current:
        found.append(" ".join(current))
    return found
