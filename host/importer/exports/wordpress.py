"""WordPress's export (Tools -> Export): WXR, an RSS 2.0 file extended with WordPress's `wp:`
namespace (`http://wordpress.org/export/1.2/`), told from a feed by that namespace.

Each `<item>` is a post, a page, an attachment, a menu item...: posts and pages are imported,
with their title, permalink (`<link>`), excerpt (`excerpt:encoded`) as the description and
content (`content:encoded`). The content is what WordPress stores: block comments
(`<!-- wp:paragraph -->`) are dropped, shortcodes (`[caption ...]...[/caption]`, `[gallery]`,
`[embed]url[/embed]`) are taken out leaving the text they wrap, and content from the classic
editor, which has no `<p>` tags (WordPress adds them when it shows a page: `wpautop`), has its
blank lines made paragraphs.

`wp:status` says what is published: `publish` is; `draft`, `pending` and `future` (scheduled) are
drafts, imported with `--include-drafts`; `private` posts and password-protected ones only into
an `--access-tag` library; `trash` and `auto-draft` never. Comments (`wp:comment`) are other
people's writing and never read. The XML is parsed with defusedxml: no entity expansion, no DTDs
fetched.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from xml.etree.ElementTree import Element, ParseError

from host.importer.document import Document
from host.importer.errors import ImporterError, decode_text, require
from host.importer.exports import Expansion, ExportOptions, Part, pack, text_of, unpack
from host.importer.probe import Probe
from host.importer.readers.html import fragment_text, outline_of

WXR_NAMESPACE = b"http://wordpress.org/export/"
CONTENT_NAMESPACE = "http://purl.org/rss/1.0/modules/content/"
TYPES = ("post", "page")
DRAFTS = ("draft", "pending", "future")

_BLOCK_COMMENT = re.compile(r"<!--\s*/?wp:.*?-->", re.DOTALL)
_SHORTCODE = re.compile(r"\[(/?)([A-Za-z_][\w-]*)(\s[^\]]*)?\]")
_EMBEDDED = re.compile(r"\[(embed|video|audio|playlist)\b[^\]]*\].*?\[/\1\]", re.DOTALL)
_CORE_SHORTCODES = frozenset({"caption", "wp_caption", "gallery", "audio", "video", "playlist", "embed"})
_BLOCK_START = re.compile(r"\s*<(?:p|div|h[1-6]|ul|ol|dl|table|blockquote|pre|figure|hr|address|section)\b",
                          re.IGNORECASE)


def sniff(probe: Probe) -> bool:
    return WXR_NAMESPACE in probe.head and b"<rss" in probe.head


def expand(path: Path, options: ExportOptions) -> Expansion:
    elementtree = require("defusedxml.ElementTree", "WordPress exports")
    defused = require("defusedxml", "WordPress exports")
    expansion = Expansion()
    try:
        # Item by item: a large site's export is never held as one tree.
        for _, element in elementtree.iterparse(str(path), events=("end",)):
            if element.tag == "item":
                _item(_fields(element), expansion, options)
                element.clear()
    except ParseError as problem:
        raise ImporterError(f"not well-formed XML ({problem})") from None
    except defused.DefusedXmlException as problem:
        raise ImporterError(f"refused: {problem!r} (a WordPress export declares no entities)") from None
    return expansion


def _fields(item: Element) -> dict[str, str]:
    """An item's fields by prefixed name (`title`, `wp:status`, `content:encoded`), as text."""
    fields: dict[str, str] = {}
    for child in item:
        tag = child.tag
        if tag.startswith("{"):
            namespace, local = tag[1:].split("}", 1)
            if namespace.startswith(WXR_NAMESPACE.decode()):
                tag = ("excerpt:" if namespace.rstrip("/").endswith("excerpt") else "wp:") + local
            elif namespace == CONTENT_NAMESPACE:
                tag = f"content:{local}"
            else:
                tag = local
        fields.setdefault(tag, child.text or "")
    return fields


def _item(fields: dict[str, str], expansion: Expansion, options: ExportOptions) -> None:
    kind = text_of(fields.get("wp:post_type")) or "post"
    status = text_of(fields.get("wp:status")) or "publish"
    if kind not in TYPES or status in ("trash", "auto-draft", "inherit"):
        return
    if status in DRAFTS and not options.include_drafts:
        expansion.skip("draft")
        return
    if (status == "private" or text_of(fields.get("wp:post_password"))) and not options.include_private:
        expansion.skip("private")
        return
    slug = text_of(fields.get("wp:post_name"))
    member = f"{kind} {text_of(fields.get('wp:post_id')) or '?'}" + (f" ({slug})" if slug else "")
    meta = {"title": " ".join(html.unescape(fields.get("title", "")).split()), "link": text_of(fields.get("link")),
            "excerpt": fields.get("excerpt:encoded", "")}
    expansion.parts.append(Part(member, pack(meta, fields.get("content:encoded", "").encode("utf-8"))))


def read(data: bytes, fallback_title: str) -> list[Document]:
    meta, body = unpack(data)
    outline = outline_of(content_html(decode_text(body)), meta["title"] or fallback_title)
    excerpt = " ".join(fragment_text(strip_shortcodes(meta["excerpt"])).split()) if meta["excerpt"].strip() else None
    link = meta["link"] if re.match(r"https?://", meta["link"]) else None
    return [outline.document(description=excerpt, own_url=link)]


def content_html(content: str) -> str:
    """A post's stored content as the HTML WordPress would show: blocks' comments and shortcodes
    gone, and paragraphs made of a classic post's blank lines."""
    classic = "<!-- wp:" not in content
    content = strip_shortcodes(_BLOCK_COMMENT.sub("", content))
    if classic and not re.search(r"<p[\s>]", content, re.IGNORECASE):
        content = autop(content)
    return content


def strip_shortcodes(text: str) -> str:
    """Shortcodes out, the text they wrap kept: `[caption id="1"]<img> A fox[/caption]` -> `<img> A fox`.

    A bracketed word is a shortcode when it is one of WordPress's own, has attributes
    (`[name key=value]`) or is closed (`[/name]`); `[sic]` or `[1]` in a sentence stays."""
    text = _EMBEDDED.sub("", text)
    closed = {match.group(2) for match in _SHORTCODE.finditer(text) if match.group(1)}

    def replace(match: re.Match[str]) -> str:
        name, attributes = match.group(2), match.group(3) or ""
        if match.group(1) or name in closed or name in _CORE_SHORTCODES or "=" in attributes:
            return ""
        return match.group(0)

    return _SHORTCODE.sub(replace, text)


def autop(text: str) -> str:
    """WordPress's `wpautop`, in short: blank lines end paragraphs, single line breaks are `<br>`."""
    blocks = []
    for block in re.split(r"\n\s*\n", text.replace("\r\n", "\n").strip()):
        if _BLOCK_START.match(block):
            blocks.append(block)
        elif block.strip():
            blocks.append("<p>" + block.strip().replace("\n", "<br>\n") + "</p>")
    return "\n".join(blocks)

