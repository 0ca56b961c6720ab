"""EPUB books (2 and 3): one document per chapter, in the spine's (reading) order, linked as `#chapter-N`.

Read with ebooklib (the package document, its spine, and the table of contents from the EPUB 3
navigation document, or the EPUB 2 NCX when there is none). Each XHTML document of the spine is a
chapter, read by the HTML reader (headings, paragraphs, lists, tables), except front matter: the
navigation document; documents marked as a cover, title page, table of contents or copyright page
(EPUB 3's `epub:type`, or EPUB 2's guide); documents before the first one the table of contents
lists that it does not list itself (a cover, a title page); and a title page anywhere: a document
that holds nothing but the book's title, authors, publisher and date. Chapter N is the N-th chapter read, so
the first chapter after the title page is `#chapter-1`.

A chapter's title is its entry in the table of contents, else its first heading, else "Chapter N";
each chunk's title is the path "Book > Chapter > Heading" (joined by the title separator). The book's own metadata gives its title
(else the file name) and every chunk's description: its authors and year, then its description.
A book whose chapters are encrypted (DRM: `META-INF/encryption.xml` names them) fails in one line
rather than giving ciphertext; fonts obfuscated as EPUB allows are no obstacle.
"""

from __future__ import annotations

import io
import posixpath
import re
import zipfile
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote
from xml.etree import ElementTree

from host.importer.document import TITLE_SEPARATOR, Document, Section
from host.importer.errors import ImporterError, require
from host.importer.readers.html import add_html, decode_html, fragment_text, parse
from host.importer.readers.outline import Outline

NOT_CHAPTERS = frozenset({"cover", "titlepage", "halftitlepage", "toc", "landmarks", "copyright-page", "loi", "lot"})
NOT_CHAPTERS_IN_GUIDE = frozenset({"cover", "title-page", "toc", "copyright-page"})  # EPUB 2's names
DESCRIPTION_CHARACTERS = 500
_YEAR = re.compile(r"\d{4}")
_CIPHER_REFERENCE = "{http://www.w3.org/2001/04/xmlenc#}CipherReference"
_CONTENT_SUFFIXES = (".xhtml", ".html", ".htm", ".xml")
WHITESPACE = re.compile(r"\s+")


def read(data: bytes, fallback_title: str) -> list[Document]:
    epub = require("ebooklib.epub", "EPUB books")
    if _encrypted_chapters(data):
        raise ImporterError("its chapters are encrypted (DRM): import a copy without DRM")
    try:
        book = epub.read_epub(io.BytesIO(data), {"ignore_ncx": True})
    except Exception as problem:  # ebooklib raises many kinds for a damaged book; each is "cannot read"
        said = " ".join(str(problem).split())
        raise ImporterError(f"not a readable EPUB ({type(problem).__name__}: {said})") from None
    title = _metadata(book, "title") or fallback_title
    description = _description(book)
    contents = _contents_titles(book.toc)
    in_guide = {posixpath.normpath(unquote((reference.get("href") or "").split("#", 1)[0]))
                for reference in book.guide if reference.get("type") in NOT_CHAPTERS_IN_GUIDE}
    listed_yet = not contents  # a book without a table of contents has no front matter to tell apart
    credits = {_folded(value) for name in ("title", "creator", "publisher", "date")
               for value, _ in book.get_metadata("DC", name) if value}
    credits |= {year.group(0) for value in list(credits) if (year := _YEAR.search(value))}
    documents: list[Document] = []
    for idref, _linear in book.spine:
        item = book.get_item_with_id(idref)
        if not isinstance(item, epub.EpubHtml) or isinstance(item, epub.EpubNav):
            continue
        name = posixpath.normpath(item.get_name())
        named = contents.get(name)
        listed_yet = listed_yet or named is not None
        if not listed_yet or name in in_guide:
            continue
        tree = parse(decode_html(item.get_content()))
        if tree.body is None or _is_furniture(tree.body):
            continue
        number = len(documents) + 1
        outline = Outline(named or f"Chapter {number}", title_is_fallback=named is None)
        add_html(tree.body, outline)
        chapter = outline.document()
        if not chapter.sections or _only_says(chapter, credits):
            continue
        anchor = f"chapter-{number}"
        sections = [Section((title, *section.path), anchor, section.blocks) for section in chapter.sections]
        documents.append(Document(TITLE_SEPARATOR.join((title, chapter.title)), sections, description=description))
    if not documents:
        documents.append(Document(title, []))
    return documents


def _encrypted_chapters(data: bytes) -> bool:
    """Whether the book's `META-INF/encryption.xml` names a content document (not only fonts)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as container:
            declared = ElementTree.fromstring(container.read("META-INF/encryption.xml"))
    except (zipfile.BadZipFile, KeyError, ElementTree.ParseError):  # no such file: nothing encrypted
        return False
    return any(unquote(reference.get("URI", "")).lower().endswith(_CONTENT_SUFFIXES)
               for reference in declared.iter(_CIPHER_REFERENCE))


def _metadata(book: Any, name: str) -> str | None:
    values = [WHITESPACE.sub(" ", str(value)).strip() for value, _ in book.get_metadata("DC", name) if value]
    return next((value for value in values if value), None)


def _description(book: Any) -> str | None:
    """"by Author, Year. Description", from the book's metadata (its description may be HTML)."""
    authors = [WHITESPACE.sub(" ", str(value)).strip() for value, _ in book.get_metadata("DC", "creator") if value]
    year = _YEAR.search(_metadata(book, "date") or "")
    byline = ", ".join(part for part in (", ".join(filter(None, authors)), year.group(0) if year else "") if part)
    about = fragment_text(_metadata(book, "description") or "").replace("\n", " ").strip()
    text = ". ".join(part for part in (f"by {byline}" if byline else "", about) if part)
    if len(text) > DESCRIPTION_CHARACTERS:
        text = text[:DESCRIPTION_CHARACTERS].rsplit(" ", 1)[0] + "…"
    return text or None


def _contents_titles(entries: Iterable[Any]) -> dict[str, str]:
    """The first title the table of contents gives each document (by its name in the book)."""
    titles: dict[str, str] = {}
    stack = list(entries)[::-1]
    while stack:
        entry = stack.pop()
        if isinstance(entry, (tuple, list)):  # (a section, its entries)
            section, children = entry
            stack.extend([*children][::-1])
            stack.append(section)
            continue
        href = posixpath.normpath(unquote((getattr(entry, "href", None) or "").split("#", 1)[0]))
        label = WHITESPACE.sub(" ", getattr(entry, "title", None) or "").strip()
        if href and label:
            titles.setdefault(href, label)
    return titles


def _folded(text: str) -> str:
    return WHITESPACE.sub(" ", str(text)).strip().casefold()


def _only_says(chapter: Document, credits: set[str]) -> bool:
    """Whether every heading and paragraph of a chapter is one of `credits` (a title page's)."""
    said = {_folded(chapter.title)} | {_folded(line) for section in chapter.sections
                                       for part in (*section.path, *section.blocks) for line in part.split("\n")}
    return said <= credits | {f"by {credit}" for credit in credits}


def _is_furniture(body: Any) -> bool:
    """Marked (on its body or its first element) as a cover, title page, table of contents..."""
    marked = [body, *[child for child in body.iter() if child.tag not in ("-text", "-comment")][:1]]
    for node in marked:
        kinds = set((node.attributes.get("epub:type") or "").split())
        if kinds & NOT_CHAPTERS:
            return True
    return False
