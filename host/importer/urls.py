"""Each bit's `info.url`: where a reader finds the passage on the publisher's site.

- With `--base-url`: the base, then the file's path under its SOURCE, each segment
  percent-encoded; Markdown files end in `.html` instead (what Jekyll, Hugo's `uglyURLs`, MkDocs and
  GitHub Pages serve for `post.md`). A document naming its own URL wins: an absolute one (a feed
  item's link, front matter `url: https://...`) as it is, a relative one (`url: /2024/hello/`)
  under the base, as static site generators mean it.
- Without `--base-url`: the file's own `file:` URL, which opens the source on this machine; good for
  trying a library locally, but it shows local paths, so the command warns before publishing such
  a library. Absolute document URLs are still used as they are.
- A page of a website: the URL it was crawled at (after redirects), or its own canonical link.
- The section's heading anchor is added as the fragment (`#setup`; `#page=3` in a PDF).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote, urlsplit

from host.importer.errors import ImporterError
from host.importer.sources import MARKDOWN_SUFFIXES, SourceFile

# RFC 3986 pchar without "%" (unreserved, sub-delims, ":" and "@"): safe unencoded in a path segment.
_SEGMENT_SAFE = "!$&'()*+,;=:@-._~"
_FRAGMENT_SAFE = _SEGMENT_SAFE + "/?"


def check_base_url(base_url: str) -> str:
    """An absolute http(s) URL, returned without its trailing "/" (one is added before each path)."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise ImporterError(f"--base-url: expected an http(s) URL such as https://example.com/blog/, got {base_url!r}")
    return base_url.rstrip("/")


def is_absolute(url: str) -> bool:
    parts = urlsplit(url)
    return bool(parts.scheme) and (bool(parts.netloc) or parts.scheme in ("mailto", "urn", "file"))


def page_url(source: SourceFile, base_url: str | None, own_url: str | None = None) -> str:
    """The URL of a document's page, without a fragment."""
    if own_url and is_absolute(own_url):
        return own_url
    if source.url is not None:
        return source.url
    if base_url is None:
        return source.path.resolve().as_uri()
    if own_url:
        return f"{base_url}/{own_url.lstrip('/')}"
    relative = source.relative
    path = Path(relative)
    if path.suffix.lower() in MARKDOWN_SUFFIXES:
        relative = path.with_suffix(".html").as_posix()
    return f"{base_url}/" + "/".join(quote(segment, safe=_SEGMENT_SAFE) for segment in relative.split("/"))


def with_fragment(url: str, fragment: str | None) -> str:
    """`url#fragment` (percent-encoded), replacing any fragment `url` had; `url` alone without one."""
    if not fragment:
        return url
    return f"{url.split('#', 1)[0]}#{quote(fragment, safe=_FRAGMENT_SAFE)}"
