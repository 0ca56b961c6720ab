"""Text from scanned pages by OCR: Tesseract (Debian's `tesseract-ocr`) through pytesseract.

Pages come in reading order from a reader (a PDF's pages without a text layer, rendered by PDFium;
an image's frames), each either text already read or an image to OCR. Up to one page a core is
OCR'd at once, each by a tesseract process of its own on one thread (`OMP_THREAD_LIMIT=1`: its
OpenMP threads make a page slower, not faster: 0.7 s against 1.5 s for a page of 144 words here),
and pages come back in their order. Before waiting for a page the reader is given `SLOW_STEP`, so
what came before it is embedded while Tesseract works.

A page Tesseract cannot read (it fails, or the page's image cannot be decoded) is an `Unreadable`
naming the page; the rest of the file is still read.
"""

from __future__ import annotations

import functools
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from types import ModuleType
from typing import Any

from host.importer.document import SLOW_STEP, SlowStep, Unreadable
from host.importer.errors import MissingExtra, require

LANGUAGE = "eng"  # Tesseract's English model (Debian's tesseract-ocr-eng comes with tesseract-ocr)
TESSERACT_HINT = "apt-get install tesseract-ocr (Debian, Ubuntu) or brew install tesseract (macOS)"

Page = list[str] | Unreadable | Any  # a page's paragraphs, a page already known unreadable, or a PIL image to OCR


def require_tesseract() -> ModuleType:
    """pytesseract, once it has found the tesseract program; MissingExtra naming the install otherwise."""
    pytesseract = require("pytesseract", "OCR", extra="ocr")
    require("PIL.Image", "OCR", extra="ocr")
    if _tesseract_version() is None:
        raise MissingExtra(f"OCR needs the tesseract program: {TESSERACT_HINT}")
    # Tesseract's OpenMP threads slow a page down, and pages are read one a core anyway.
    os.environ.setdefault("OMP_THREAD_LIMIT", "1")
    return pytesseract


def available() -> bool:
    """Whether scanned pages can be read here (the `ocr` extra and the tesseract program)."""
    try:
        require_tesseract()
    except MissingExtra:
        return False
    return True


@functools.cache
def _tesseract_version() -> str | None:
    pytesseract = require("pytesseract", "OCR", extra="ocr")
    try:
        return str(pytesseract.get_tesseract_version())
    except (pytesseract.TesseractNotFoundError, OSError):
        return None


def tesseract_version() -> str:
    """The tesseract program's version, or "missing": part of every file's cache key."""
    try:
        return _tesseract_version() or "missing"
    except MissingExtra:
        return "missing"


def workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def pages_in_order(pages: Iterable[tuple[int, Page]], paragraphs: Callable[[str], list[str]],
                   language: str = LANGUAGE) -> Iterator[tuple[int, list[str] | Unreadable] | SlowStep]:
    """Each page's paragraphs (or Unreadable) by number, in order, the images among them OCR'd a few at
    once; `SLOW_STEP` before waiting for one. `pages` is iterated in this thread only (PDFium is not
    thread-safe), as far ahead as there are OCR runs free. `paragraphs` makes paragraphs of OCR'd text."""
    ahead: deque[tuple[int, Page | Future[str]]] = deque()
    pool: ThreadPoolExecutor | None = None
    running = 0
    try:
        for number, page in pages:
            if isinstance(page, (list, Unreadable)):
                ahead.append((number, page))
            else:
                tesseract = require_tesseract()
                pool = pool or ThreadPoolExecutor(workers(), thread_name_prefix="import-ocr")
                ahead.append((number, pool.submit(_ocr, tesseract, page, language)))
                running += 1
            # Give back the pages ready at the front; wait for one only when every run is taken.
            while ahead and (not isinstance(ahead[0][1], Future) or running >= workers()):
                running -= isinstance(ahead[0][1], Future)
                yield from _next(ahead, paragraphs)
        while ahead:
            yield from _next(ahead, paragraphs)
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def _next(ahead: deque[tuple[int, Page | Future[str]]],
          paragraphs: Callable[[str], list[str]]) -> Iterator[tuple[int, list[str] | Unreadable] | SlowStep]:
    number, page = ahead.popleft()
    if not isinstance(page, Future):
        yield number, page
        return
    yield SLOW_STEP
    try:
        text = page.result()
    except Exception as problem:  # Tesseract failed on this page: name it, read the others
        said = " ".join(str(problem).split())
        yield number, Unreadable(f"page {number}", f"OCR failed ({type(problem).__name__}: {said})")
        return
    yield number, paragraphs(text)


def _ocr(pytesseract: ModuleType, image: Any, language: str) -> str:
    return str(pytesseract.image_to_string(image, lang=language))
