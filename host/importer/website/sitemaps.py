"""A site's sitemap (sitemaps.org): the pages it lists, or, for a sitemap index, the sitemaps it lists.

Read with the standard library's XML parser: element names are matched without their namespace
(the sitemaps.org one, or none, as some generators write), `<loc>` values are stripped of
whitespace, in document order. A gzip-compressed sitemap (`sitemap.xml.gz`) is decompressed
first, up to the protocol's 50 MB. The parser resolves no external entity, Expat (>= 2.4.1, as
every supported Python bundles) limits entity expansion, and a file declaring entities is refused
anyway: a sitemap has no use for them.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from dataclasses import dataclass
from xml.etree import ElementTree

MAX_SITEMAP_BYTES = 50 * 1000 * 1000  # the protocol's limit, uncompressed
_ROOT = re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?(urlset|sitemapindex)[\s>/]")
_SNIFF_BYTES = 4096


class NotASitemap(ValueError):
    """The bytes are not a sitemap or sitemap index; the message says why, in one line."""


@dataclass(frozen=True)
class Sitemap:
    is_index: bool  # a sitemap index: `locations` are sitemaps
    locations: list[str]


def looks_like_a_sitemap(body: bytes) -> bool:
    """True when the body (maybe gzip-compressed) starts like a `<urlset>` or `<sitemapindex>`."""
    return _ROOT.search(_head(body)) is not None


def read_sitemap(body: bytes) -> Sitemap:
    data = _decompressed(body)
    if b"<!ENTITY" in data:
        raise NotASitemap("it declares XML entities, which no sitemap needs")
    locations: list[str] = []
    root_name: str | None = None
    try:
        for event, element in ElementTree.iterparse(io.BytesIO(data), events=("start", "end")):
            name = element.tag.rsplit("}", 1)[-1]
            if event == "start":
                if root_name is None:
                    root_name = name
                    if name not in ("urlset", "sitemapindex"):
                        raise NotASitemap(f"its root element is <{name}>, not <urlset> or <sitemapindex>")
                continue
            if name == "loc" and element.text and element.text.strip():
                locations.append(element.text.strip())
            if name in ("url", "sitemap"):
                element.clear()  # a large sitemap is not held whole as a tree
    except ElementTree.ParseError as problem:
        raise NotASitemap(f"not well-formed XML ({problem})") from None
    return Sitemap(root_name == "sitemapindex", locations)


def _head(body: bytes) -> bytes:
    if body[:2] != b"\x1f\x8b":
        return body[:_SNIFF_BYTES]
    try:
        return zlib.decompressobj(wbits=31).decompress(body, _SNIFF_BYTES)
    except zlib.error:
        return b""


def _decompressed(body: bytes) -> bytes:
    if body[:2] != b"\x1f\x8b":
        return body
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(body)) as unpacked:
            data = unpacked.read(MAX_SITEMAP_BYTES + 1)
    except (OSError, EOFError, zlib.error) as problem:
        raise NotASitemap(f"its gzip compression is damaged ({problem})") from None
    if len(data) > MAX_SITEMAP_BYTES:
        raise NotASitemap(f"over the {MAX_SITEMAP_BYTES:,} bytes a sitemap may have")
    return data
