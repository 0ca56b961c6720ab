"""Scanned pages as image files (PNG, JPEG, TIFF): their text by OCR (`ocr`: Tesseract, Pillow).

A single image is one page under the file's name as its title; each frame of a multi-page TIFF is a
page of its own, linked as `#page=N` like a PDF's. A phone's photo of a page is turned upright by its
EXIF orientation first. A file that is not a readable image fails in one line; a frame of a TIFF
that cannot be decoded is named and the other frames are read.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

from host.importer.document import Document, Read, Section, SlowStep, Unreadable
from host.importer.errors import ImporterError, require
from host.importer.readers.ocr import Page, pages_in_order, require_tesseract
from host.importer.readers.pdf import paragraphs

_TESSERACT_MODES = frozenset({"1", "L", "LA", "P", "RGB", "RGBA"})


def read(data: bytes, fallback_title: str) -> Iterator[Read]:
    image_module = require("PIL.Image", "Scanned images", extra="ocr")
    require_tesseract()
    try:
        picture = image_module.open(io.BytesIO(data))
        frames = int(getattr(picture, "n_frames", 1))
        first_page = _upright(picture)  # decoded now: a file that is no image at all fails as a whole
    except Exception as problem:  # Pillow raises many kinds for a damaged or unknown file
        said = " ".join(str(problem).split())
        raise ImporterError(f"not a readable image ({type(problem).__name__}: {said})") from None
    return _read_pages(fallback_title, picture, frames, first_page)


def _read_pages(title: str, picture: Any, frames: int, first_page: Any) -> Iterator[Read]:
    """The pages in one document, given in parts at each slow step (each page is OCR'd): see `document`."""
    sections: list[Section] = []
    first = True
    for item in pages_in_order(_frames(picture, frames, first_page), paragraphs):
        if isinstance(item, SlowStep):
            if sections:
                yield Document(title, sections, continues=not first)
                sections, first = [], False
            yield item
            continue
        number, page = item
        if isinstance(page, Unreadable):
            yield page
        elif page and frames == 1:
            sections.append(Section((title,), None, page))
        elif page:
            sections.append(Section((title, f"page {number}"), f"page={number}", page))
    if sections or first:
        yield Document(title, sections, continues=not first)


def _frames(picture: Any, frames: int, first_page: Any) -> Iterator[tuple[int, Page]]:
    yield 1, first_page
    for number in range(2, frames + 1):
        try:
            picture.seek(number - 1)
            page = _upright(picture)
        except Exception as problem:  # one damaged frame: the others are still read
            said = " ".join(str(problem).split())
            yield number, Unreadable(f"page {number}", f"cannot be decoded ({type(problem).__name__}: {said})")
            continue
        yield number, page


def _upright(frame: Any) -> Any:
    """The frame decoded, turned by its EXIF orientation, in a mode Tesseract reads."""
    image_ops = require("PIL.ImageOps", "Scanned images", extra="ocr")
    frame.load()
    page = image_ops.exif_transpose(frame)
    if page.mode not in _TESSERACT_MODES:
        page = page.convert("RGB")
    page.info["dpi"] = frame.info.get("dpi", page.info.get("dpi"))
    if page.info["dpi"] is None:
        del page.info["dpi"]
    return page
