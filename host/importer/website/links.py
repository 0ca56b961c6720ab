"""What a fetched page says about other pages: its links, and whether robots may index and follow it.

Links are `<a href>` and `<area href>` in document order, resolved against the page's URL or its
`<base href>`, and its `<link rel="canonical">` (the page the site calls this one). Which of them
the crawl follows is the crawler's business (`addresses` says which are within the site). The
page's `<meta name="robots">` (or `name="polymath-host"`) and the `X-Robots-Tag` header may say
`noindex` (the page is not imported), `nofollow` (its links are not followed) or `none` (both).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

from host.importer.errors import require
from host.importer.readers.html import decode_html
from host.importer.website.fetching import ROBOTS_AGENT

_META_NAMES = ("robots", ROBOTS_AGENT)


@dataclass(frozen=True)
class PageLinks:
    links: list[str]  # absolute URLs (fragments and all), in document order
    index: bool = True
    follow: bool = True


def robots_directives(text: str) -> tuple[bool, bool]:
    """(index, follow) from a robots meta tag's content or an X-Robots-Tag header: `noindex`, `nofollow`,
    `none`, unprefixed or prefixed with our token (`polymath-host: noindex`); other crawlers' are not ours."""
    words = set()
    for part in text.replace(";", ",").split(","):
        agent, _, directive = part.rpartition(":")
        if not agent.strip() or agent.strip().lower() == ROBOTS_AGENT:
            words.add(directive.strip().lower())
    none = "none" in words
    return not (none or "noindex" in words), not (none or "nofollow" in words)


def page_links(body: bytes, url: str) -> PageLinks:
    lexbor = require("selectolax.lexbor", "HTML")
    tree: Any = lexbor.LexborHTMLParser(decode_html(body))
    base = url
    base_node = tree.css_first("base[href]")
    if base_node is not None:
        base = urljoin(url, (base_node.attributes.get("href") or "").strip())
    links = []
    for node in tree.css("a[href], area[href], link[rel][href]"):
        if node.tag == "link" and "canonical" not in (node.attributes.get("rel") or "").lower().split():
            continue
        href = (node.attributes.get("href") or "").strip()
        if href and not href.startswith("#"):
            links.append(urljoin(base, href))
    index = follow = True
    for node in tree.css("meta[name][content]"):
        if (node.attributes.get("name") or "").strip().lower() in _META_NAMES:
            page_index, page_follow = robots_directives(node.attributes.get("content") or "")
            index, follow = index and page_index, follow and page_follow
    return PageLinks(links, index, follow)
