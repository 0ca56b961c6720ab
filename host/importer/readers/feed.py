"""RSS and Atom feeds: one document per item, with its link, title, summary and content.

The item's text is its full content when the feed carries it (`content:encoded`, Atom `content`),
else its summary; HTML is reduced to text with the HTML reader, headings included. The summary is
the description when there is also full content. An item without a link gets the feed file's URL.
"""

from __future__ import annotations

import re
from typing import Any

from host.importer.document import Document
from host.importer.errors import ImporterError, require
from host.importer.probe import Probe
from host.importer.readers.html import fragment_text, outline_of

DESCRIPTION_CHARACTERS = 500
_FEED_ROOT = re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?(rss|feed|RDF)[\s>/]")


def sniff(probe: Probe) -> bool:
    """A feed is told from other XML by its first element: `rss`, `feed` or `rdf:RDF`."""
    return _FEED_ROOT.search(probe.head) is not None


def read(data: bytes, fallback_title: str) -> list[Document]:
    feedparser = require("feedparser", "RSS/Atom feeds")
    # Bytes, not text: feedparser honours the encoding the XML declares. It never fetches anything
    # given bytes (no URL to resolve), and its sanitizer drops scripts from the HTML it returns.
    parsed = feedparser.parse(data)
    if parsed.get("bozo") and not parsed.entries:
        raise ImporterError(f"not a readable feed: {parsed.get('bozo_exception')}")
    return [_item(entry, position) for position, entry in enumerate(parsed.entries, start=1)]


def _item(entry: Any, position: int) -> Document:
    title = fragment_text(entry.get("title", "")).replace("\n", " ").strip() or f"Item {position}"
    contents = [item for item in entry.get("content", []) if item.get("value")]
    summary = entry.get("summary", "")
    body = _best_content(contents) if contents else summary
    outline = outline_of(body, title)
    description = None
    if contents and summary:
        description = _shorten(fragment_text(summary).replace("\n", " "))
    link = entry.get("link") or _link_like(entry.get("id"))
    return outline.document(description=description, own_url=link)


def _best_content(contents: list[Any]) -> str:
    """HTML content if the item has it (the fullest form), else the first."""
    for item in contents:
        if "html" in (item.get("type") or ""):
            return str(item["value"])
    return str(contents[0]["value"])


def _link_like(identifier: Any) -> str | None:
    if isinstance(identifier, str) and identifier.startswith(("http://", "https://")):
        return identifier
    return None


def _shorten(text: str) -> str:
    text = text.strip()
    if len(text) <= DESCRIPTION_CHARACTERS:
        return text
    return text[:DESCRIPTION_CHARACTERS].rsplit(" ", 1)[0] + "…"
