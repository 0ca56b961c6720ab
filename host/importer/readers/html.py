"""HTML pages: the title, the description, and the main text under its headings.

The main text is `<main>`, else the page's only `<article>`, else `<body>`, without navigation and
page furniture: `nav`, `aside`, scripts, styles, forms' controls, embedded frames and images, and
`header`/`footer` outside an article (an article's own header holds its title). Paragraph-level
elements start blocks, list items and table rows start lines (`- item`, `a | b`; a table is one
block, and paragraphs inside a cell stay on its row), `<pre>` keeps its lines. A heading's anchor
is its `id` (or that of an `<a id|name>` inside it).

The title is `<title>`, or the page's first `<h1>` when `<title>` contains it ("Post" for "Post |
Blog") or there is no `<title>` (see `Outline`); the description is
`<meta name="description">` (or `og:description`); a page's `<link rel="canonical">`, when
absolute, is its URL.
"""

from __future__ import annotations

import re
from typing import Any

from host.importer.document import Document
from host.importer.errors import require
from host.importer.readers.outline import Outline

SKIPPED = frozenset({
    "script", "style", "noscript", "template", "svg", "math", "iframe", "object", "embed", "canvas",
    "nav", "aside", "button", "select", "textarea", "input", "head", "title", "meta", "link",
})
FURNITURE = frozenset({"header", "footer"})  # skipped outside an <article>
BLOCKS = frozenset({
    "address", "article", "blockquote", "body", "caption", "center", "dd", "details", "div", "dl", "dt",
    "fieldset", "figcaption", "figure", "form", "hr", "html", "legend", "li", "main", "ol", "p", "pre",
    "section", "summary", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul", "header", "footer",
})
HEADINGS = {f"h{level}": level for level in range(1, 7)}
_PERMALINK_MARKS = " \t\n¶§🔗"
_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
_WHITESPACE = re.compile(r"\s+")


def decode_html(data: bytes) -> str:
    """UTF-8 when it is; else the charset the page declares; else Windows-1252 (what browsers assume)."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    declared = _CHARSET.search(data[:4096])
    if declared:
        try:
            return data.decode(declared.group(1).decode("ascii"), errors="replace")
        except LookupError:
            pass
    return data.decode("cp1252", errors="replace")


def _parser(html: str) -> Any:
    lexbor = require("selectolax.lexbor", "HTML")
    return lexbor.LexborHTMLParser(html)


def read(data: bytes, fallback_title: str) -> list[Document]:
    tree = _parser(decode_html(data))
    title_node = tree.css_first("title")
    title = _WHITESPACE.sub(" ", title_node.text()).strip() if title_node is not None else ""
    outline = Outline(title or fallback_title, title_is_fallback=not title)
    root = tree.css_first("main")
    if root is None:
        articles = tree.css("article")
        root = articles[0] if len(articles) == 1 else (tree.body or tree.root)
    if root is not None:
        add_html(root, outline)
    return [outline.document(description=_description(tree), own_url=_canonical(tree))]


def fragment_text(html: str) -> str:
    """The text of an HTML fragment (a Markdown HTML block), blocks separated by blank lines."""
    outline = Outline("", title_is_fallback=False)
    root = _parser(html).body
    if root is not None:
        add_html(root, outline)
    blocks = [block for section in outline.document().sections for block in section.blocks]
    return "\n\n".join(blocks)


def outline_of(html: str, title: str, drop: tuple[str, ...] = ()) -> Outline:
    """An HTML fragment (a feed item's content) read into an outline under `title`, without the
    elements matching the CSS selectors `drop` (a service's buttons and sign-up boxes)."""
    outline = Outline(title, title_is_fallback=False)
    root = parse(html).body
    if root is not None:
        without(root, drop)
        add_html(root, outline)
    return outline


def parse(html: str) -> Any:
    """The document tree of `html` (selectolax's Lexbor parser)."""
    return _parser(html)


def without(node: Any, selectors: tuple[str, ...]) -> None:
    """Remove from `node` every element matching one of the CSS `selectors`."""
    for selector in selectors:
        for found in node.css(selector):
            found.decompose()


def text_of(node: Any) -> str:
    """An element's text on one line, whitespace collapsed ("" for None)."""
    return _WHITESPACE.sub(" ", node.text(deep=True)).strip() if node is not None else ""


def _meta(tree: Any, selector: str) -> str | None:
    node = tree.css_first(selector)
    content = node.attributes.get("content") if node is not None else None
    return _WHITESPACE.sub(" ", content).strip() or None if content else None


def _description(tree: Any) -> str | None:
    return _meta(tree, 'meta[name="description" i]') or _meta(tree, 'meta[property="og:description" i]')


def _canonical(tree: Any) -> str | None:
    node = tree.css_first('link[rel="canonical" i]')
    href = (node.attributes.get("href") or "").strip() if node is not None else ""
    return href if re.match(r"https?://", href) else None


def _heading_anchor(node: Any) -> str | None:
    anchor = node.attributes.get("id")
    if anchor:
        return str(anchor)
    for link in node.css("a[id], a[name]"):
        anchor = link.attributes.get("id") or link.attributes.get("name")
        if anchor:
            return str(anchor)
    return None


class _Reader:
    """Walks the element tree in reading order, writing blocks and headings into an outline."""

    def __init__(self, outline: Outline) -> None:
        self.outline = outline
        self.line: list[str] = []
        self.lines: list[str] = []
        self.pre = 0  # inside <pre>: keep whitespace
        self.list_items = 0  # inside <li>: blocks within become lines of the list's block
        self.item_mark = ""  # "- " until the text of a new list item begins
        self.articles = 0
        self.cells = 0  # inside <td>/<th>: blocks within are words of the cell, on the row's line

    def end_line(self) -> None:
        text = "".join(self.line)
        self.line.clear()
        if text.strip():
            self.lines.append(text if self.pre else text.strip())

    def end_block(self, *, preformatted: bool = False) -> None:
        self.end_line()
        if self.lines:
            self.outline.block("\n".join(self.lines), preformatted=preformatted)
            self.lines.clear()

    def enter(self, node: Any) -> bool:
        """Handle an element's start; False when its contents are to be skipped."""
        tag = node.tag
        if tag in SKIPPED or (tag in FURNITURE and not self.articles):
            return False
        if tag in HEADINGS:
            self.end_block()
            text = _WHITESPACE.sub(" ", node.text(deep=True)).strip().rstrip(_PERMALINK_MARKS)
            self.outline.heading(HEADINGS[tag], text, _heading_anchor(node))
            return False
        if tag == "br":
            self.end_line()
        elif tag == "pre":
            self.end_block()
            self.pre += 1
        elif tag == "li":
            self.end_line()
            self.list_items += 1
            self.item_mark = "- "
        elif tag in ("tr", "dt", "dd", "thead", "tbody", "tfoot"):
            self.end_line()
        elif tag in ("td", "th"):
            if "".join(self.line).strip():
                self.line.append(" | ")
            self.cells += 1
        elif self.cells and tag in BLOCKS and tag != "table":
            self.line.append(" ")
        elif tag in BLOCKS:
            if self.list_items and tag not in ("ul", "ol", "table"):
                self.end_line()
            else:
                self.end_block()
        if tag == "article":
            self.articles += 1
        return True

    def leave(self, node: Any) -> None:
        tag = node.tag
        if tag == "article":
            self.articles -= 1
        if tag == "pre":
            self.end_block(preformatted=True)
            self.pre -= 1
        elif tag == "li":
            self.end_line()
            self.list_items -= 1
        elif tag in ("tr", "dt", "dd", "thead", "tbody", "tfoot"):  # a table's rows stay one block
            self.end_line()
        elif tag in ("td", "th"):
            self.cells -= 1
        elif self.cells and tag in BLOCKS and tag != "table":
            self.line.append(" ")
        elif tag in BLOCKS:
            if self.list_items:
                self.end_line()
            else:
                self.end_block()

    def text(self, node: Any) -> None:
        text = node.text(deep=False)
        if self.item_mark and text.strip():
            self.line.append(self.item_mark)
            self.item_mark = ""
        self.line.append(text if self.pre else _WHITESPACE.sub(" ", text))


def add_html(root: Any, outline: Outline) -> None:
    """Read the element `root` and everything in it into `outline` (iteratively: deep pages are fine)."""
    reader = _Reader(outline)
    stack: list[tuple[Any, bool]] = [(root, True)]
    while stack:
        node, entering = stack.pop()
        if not entering:
            reader.leave(node)
        elif node.tag == "-text":
            reader.text(node)
        elif node.tag.startswith("-"):  # comments, doctype
            continue
        elif reader.enter(node):
            stack.append((node, False))
            children = list(node.iter(include_text=True))
            stack.extend((child, True) for child in reversed(children))
    reader.end_block()
