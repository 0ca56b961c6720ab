"""Every URL of a crawl in one canonical form, and whether it belongs to the site being imported.

Two spellings of one page must be one page, or it is fetched twice and its bits repeated: a
canonical URL has its scheme and host in lower case, no default port, no user name, no fragment
(`#part` is a place in a page, not another page), dot segments resolved, an empty path as `/`,
percent-escapes of unreserved characters decoded and the others in upper case, and characters a
URL may not hold (spaces, non-ASCII) escaped. The query is kept as it is (`?p=12` is a page of
its own on many blogs) except for the same escaping.

A crawl's `Scope` is one origin (scheme, host and port: what a browser calls the same site) and a
path under it: the folder of the URL the crawl started from (`https://site/blog/` keeps to
`/blog/`), or the whole origin when the crawl starts from the root or a sitemap.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from urllib.parse import quote, urljoin, urlsplit, urlunsplit

DEFAULT_PORTS = {"http": 80, "https": 443}
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PATH_SAFE = "/!$&'()*+,;=:@-._~%"
_QUERY_SAFE = _PATH_SAFE + "?"
# Links to these are not pages of writing: skipped without a request (a server's Content-Type decides the rest).
NOT_HTML_SUFFIXES = frozenset({
    ".png", ".jpg", ".jpeg", ".gif", ".webp", ".svg", ".ico", ".avif", ".bmp", ".tif", ".tiff", ".heic",
    ".mp3", ".mp4", ".m4a", ".m4v", ".webm", ".ogg", ".oga", ".ogv", ".wav", ".flac", ".mov", ".avi", ".mkv",
    ".pdf", ".doc", ".docx", ".odt", ".xls", ".xlsx", ".ppt", ".pptx", ".epub", ".mobi",
    ".zip", ".gz", ".tgz", ".tar", ".bz2", ".xz", ".7z", ".rar", ".dmg", ".exe", ".msi", ".deb", ".rpm", ".apk",
    ".iso", ".css", ".js", ".mjs", ".json", ".map", ".wasm", ".woff", ".woff2", ".ttf", ".otf", ".eot",
    ".xml", ".rss", ".atom", ".txt", ".csv", ".ics",
})


class NotAWebAddress(ValueError):
    """Not an http(s) URL with a host."""


def is_web_address(text: str) -> bool:
    """True for `http://...` and `https://...`: what `import` takes as a website."""
    return text.lower().startswith(("http://", "https://"))


def canonical(url: str, base: str | None = None) -> str:
    """`url` (resolved against `base` when relative) in canonical form; NotAWebAddress if it is not http(s)."""
    joined = urljoin(base, url.strip()) if base else url.strip()
    parts = urlsplit(joined)
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        raise NotAWebAddress(joined)
    try:
        port = parts.port
    except ValueError:
        raise NotAWebAddress(joined) from None
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address keeps its brackets
    netloc = host if port in (None, DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    path = quote(_normal_escapes(_without_dot_segments(parts.path or "/")), safe=_PATH_SAFE)
    query = quote(_normal_escapes(parts.query), safe=_QUERY_SAFE)
    return urlunsplit((scheme, netloc, path, query, ""))


def origin_of(url: str) -> str:
    """`scheme://host[:port]` of a canonical URL."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def path_of(url: str) -> str:
    """The path and query of a URL: what robots.txt rules are matched against."""
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def looks_like_not_html(url: str) -> bool:
    """True when the URL's path ends in a suffix of images, media, archives, scripts or data."""
    name = urlsplit(url).path.rsplit("/", 1)[-1]
    suffix = name[name.rfind("."):].lower() if "." in name else ""
    return suffix in NOT_HTML_SUFFIXES


@dataclass(frozen=True)
class Scope:
    """The pages a crawl may import: one origin, and paths starting with `prefix` (ending in `/`)."""

    origin: str
    prefix: str = "/"

    @classmethod
    def of_start(cls, url: str) -> Scope:
        """The scope of a crawl that starts at page `url` (canonical): its origin and folder."""
        path = urlsplit(url).path
        return cls(origin_of(url), path[: path.rfind("/") + 1] or "/")

    def holds(self, url: str) -> bool:
        return origin_of(url) == self.origin and urlsplit(url).path.startswith(self.prefix)

    def same_origin(self, url: str) -> bool:
        return origin_of(url) == self.origin

    def describe(self) -> str:
        return self.origin + self.prefix


def _without_dot_segments(path: str) -> str:
    """RFC 3986's remove_dot_segments: `/a/./b/../c` -> `/a/c`, a trailing slash kept."""
    if "." not in path:
        return path
    resolved = posixpath.normpath(path)
    if resolved.startswith("//"):
        resolved = "/" + resolved.lstrip("/")
    if path.endswith(("/", "/.", "/..")) and resolved != "/":
        resolved += "/"
    return resolved


def _normal_escapes(text: str) -> str:
    """Escapes of unreserved characters decoded (`%7E` -> `~`), the others in upper case (`%2f` -> `%2F`)."""
    def one(match: re.Match[str]) -> str:
        character = chr(int(match.group(1), 16))
        return character if character in _UNRESERVED else f"%{match.group(1).upper()}"

    return _ESCAPE.sub(one, text)
