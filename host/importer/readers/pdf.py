"""PDF: the text of each page, a section of its own linked as `#page=N` (what PDF viewers open).

Lines are joined into paragraphs (a blank line or a short line ending in . ! ? : ends one); a word
hyphenated across a line end is joined again. The title is the PDF's own (document info `Title`)
or the file name. An encrypted PDF is read only when it opens with an empty password.
"""

from __future__ import annotations

import io
import re
from typing import Any

from host.importer.document import Document, Section
from host.importer.errors import ImporterError, require

_HYPHENATED = re.compile(r"(\w)-\n(\w)")


def read(data: bytes, fallback_title: str) -> list[Document]:
    pypdf = require("pypdf", "PDF")
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise ImporterError("the PDF is encrypted; save an unencrypted copy to import it")
        title = _title(reader) or fallback_title
        sections = []
        for number, page in enumerate(reader.pages, start=1):
            blocks = paragraphs(page.extract_text() or "")
            if blocks:
                sections.append(Section((title, f"page {number}"), f"page={number}", blocks))
    except ImporterError:
        raise
    except Exception as problem:  # pypdf raises many kinds for a damaged file; each is "cannot read"
        raise ImporterError(f"not a readable PDF: {type(problem).__name__}: {problem}") from None
    return [Document(title, sections)]


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
