"""What every reader produces and the chunker consumes: documents of sections of plain-text blocks.

A `Section` is the text under one heading: `path` is the heading path from the document title down
("Post title", "Setup", "Linux"), `anchor` the URL fragment of the nearest heading that has one, and
`blocks` the paragraphs (list items, code, table rows...) as plain text, in reading order. Sections
come in document order, so a section's subsections are the sections right after it whose path
extends its own.
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


@dataclass(frozen=True)
class Chunk:
    """A bit before embedding: `token_count` is exactly the embedder's count of `text`."""

    text: str
    token_count: int
    title: str
    anchor: str | None
