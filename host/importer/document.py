"""What every reader produces and the chunker consumes: documents of sections of plain-text blocks.

A `Section` is the text under one heading: `path` is the heading path from the document title down
("Post title", "Setup", "Linux"), `anchor` the URL fragment of the nearest heading that has one, and
`blocks` the paragraphs (list items, code, table rows...) as plain text, in reading order. Sections
come in document order, so a section's subsections are the sections right after it whose path
extends its own.

A reader that reads slowly (OCR: a second or so a page) yields a document in parts: the first page
as a `Document`, each later one as a `Document` with `continues` set (counted once), with
`SLOW_STEP` before each slow page, so that what it gave so far is embedded while it works; a page it
cannot read is an `Unreadable` in its place, and the rest of the file is still read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TITLE_SEPARATOR = " \u203a "  # a single right-pointing angle quotation mark: "Post > Setup > Linux"


@dataclass
class Section:
    path: tuple[str, ...]
    anchor: str | None = None
    blocks: list[str] = field(default_factory=list)


@dataclass
class Document:
    """One page of writing. `own_url` is the URL the source names for itself (front matter `url`, a
    feed item's link); without one the page's URL is made from the file's path."""

    title: str
    sections: list[Section]
    description: str | None = None
    own_url: str | None = None
    continues: bool = False  # a further part of the document before it (the next page of a scan)


@dataclass(frozen=True)
class Unreadable:
    """A part of a file that could not be read (`where`: "page 3"): one line, the rest of the file imported."""

    where: str
    problem: str


class SlowStep:
    """Yielded by a reader before slow work (a page to OCR): what it gave so far can go on to be embedded."""


SLOW_STEP = SlowStep()
Read = Document | Unreadable | SlowStep  # what a reader yields


@dataclass(frozen=True)
class Chunk:
    """A bit before embedding: `token_count` is exactly the embedder's count of `text`."""

    text: str
    token_count: int
    title: str
    anchor: str | None
