"""Plain text: paragraphs separated by blank lines; the title is a short first line standing alone
(at most 100 characters, followed by a blank line), else the file name."""

from __future__ import annotations

import re

from host.importer.chunking import tidy
from host.importer.document import Document, Section
from host.importer.errors import decode_text

TITLE_CHARACTERS = 100


def read(data: bytes, fallback_title: str) -> list[Document]:
    text = decode_text(data).replace("\r\n", "\n").replace("\r", "\n")
    blocks = [tidy(block) for block in re.split(r"\n[ \t]*\n", text)]
    blocks = [block for block in blocks if block]
    title = fallback_title
    if len(blocks) > 1 and "\n" not in blocks[0] and len(blocks[0]) <= TITLE_CHARACTERS:
        title = blocks.pop(0)
    return [Document(title, [Section((title,), None, blocks)])]
