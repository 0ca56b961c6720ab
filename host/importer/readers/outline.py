"""Sections from headings and blocks met in reading order: what the Markdown and HTML readers share.

The heading path of a section is the document title, then each enclosing heading (a heading closes
every open heading of its level or deeper). A heading without an anchor of its own links to the
nearest enclosing one that has one. A first `<h1>`/`#` that comes before any text is the page's
title rather than a section of it, when the title is only a file name or contains that heading
("Post | Blog" for "Post").
"""

from __future__ import annotations

from dataclasses import dataclass

from host.importer.chunking import tidy
from host.importer.document import Document, Section


@dataclass
class _Open:
    level: int
    text: str
    anchor: str | None


class Outline:
    def __init__(self, title: str, *, title_is_fallback: bool) -> None:
        self._title = title
        self._title_is_fallback = title_is_fallback
        self._open: list[_Open] = []
        self._sections = [Section((title,))]
        self._started = False  # a heading or a block has been seen

    def heading(self, level: int, text: str, anchor: str | None) -> None:
        text = tidy(text).replace("\n", " ")
        if not self._started and level == 1 and text and (
            self._title_is_fallback or text.casefold() in self._title.casefold()
        ):
            self._title = text
            self._sections = [Section((text,))]
            self._started = True
            return
        self._started = True
        if not text:
            return
        while self._open and self._open[-1].level >= level:
            self._open.pop()
        inherited = next((entry.anchor for entry in reversed(self._open) if entry.anchor), None)
        self._open.append(_Open(level, text, anchor or inherited))
        self._sections.append(Section((self._title, *(entry.text for entry in self._open)), anchor or inherited))

    def block(self, text: str, *, preformatted: bool = False) -> None:
        """Add a paragraph (list, table, code...) to the current section; blank ones are dropped."""
        if preformatted:
            lines = [line.rstrip() for line in text.splitlines()]
            text = "\n".join(line for line in lines if line)
        else:
            text = tidy(text)
        if text:
            self._started = True
            self._sections[-1].blocks.append(text)

    def document(self, description: str | None = None, own_url: str | None = None) -> Document:
        sections = [section for section in self._sections if section.blocks]
        return Document(self._title, sections, description=description or None, own_url=own_url or None)
