"""One reader per kind of writing; each turns a file's bytes into `Document`s (a feed into many).

A reader raises `ImporterError` naming what is wrong with the file, or `Draft` for a page its
author marked unpublished; it never reads anything but the bytes it is given.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from host.importer.document import Document
from host.importer.readers import feed, html, markdown, pdf, plain
from host.importer.sources import SourceFile

Reader = Callable[[bytes, str], list[Document]]
READERS: dict[str, Reader] = {
    "markdown": markdown.read,
    "text": plain.read,
    "html": html.read,
    "feed": feed.read,
    "pdf": pdf.read,
}


def fallback_title(path: Path) -> str:
    """A title from a file name: `2024-05-01-my_first-post.md` -> `2024 05 01 my first post`."""
    return re.sub(r"[\s_-]+", " ", path.stem).strip() or path.name


def read_source(source: SourceFile, data: bytes) -> list[Document]:
    """The documents in `data`, the contents of `source` (ImporterError when they are not valid)."""
    return READERS[source.kind](data, fallback_title(source.path))
