"""Medium's export (Settings -> Security and apps -> Download your information): a zip whose
`posts/` folder holds one HTML page per post, beside `profile/profile.html` and the account's
other data (claps, bookmarks, sessions...), which is never opened.

A post's page is an `<article class="h-entry">`: the title in `.p-name`, the subtitle in
`.p-summary`, the body in `.e-content` (it repeats the title and subtitle as its first
`.graf--title` and `.graf--subtitle`: left out), and in its footer the publication date
(`.dt-published`) and the canonical link (`a.p-canonical`), which is the bit's URL.

Drafts are the files named `draft_...html` (no date, no canonical link; their footer links to
the draft): imported only with `--include-drafts`. Responses (comments on others' posts) are
exported as posts too; they are the published pages whose body has no `.graf--title` and that
have no subtitle, since Medium gives every story a title and a response neither: imported only
with `--include-replies`.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Any

from host.importer.archive import open_archive
from host.importer.document import Document
from host.importer.errors import ImporterError, decode_text
from host.importer.exports import Expansion, ExportOptions, Part
from host.importer.probe import Probe
from host.importer.readers.html import add_html, parse, text_of, without
from host.importer.readers.outline import Outline

POSTS = "posts/"
_POST = re.compile(r"posts/[^/]+\.html")
_TITLE_GRAF = re.compile(rb"""class=["'][^"']*\bgraf--title\b""")
REPEATED = (".graf--title", ".graf--subtitle")  # the title and subtitle, again at the top of the body


def sniff(probe: Probe) -> bool:
    archive = probe.archive(POSTS)
    if archive is None or not archive.has(POSTS):
        return False
    if archive.has("profile/profile.html"):
        return True
    post = archive.first_in(POSTS, ".html")
    head = probe.member_head(POSTS, post) if post else b""
    return b"h-entry" in head and b"medium.com" in head


def expand(path: Path, options: ExportOptions) -> Expansion:
    archive = open_archive(path, POSTS)
    try:
        expansion = Expansion()
        for member in archive.names():
            if not _POST.fullmatch(member):
                continue
            if is_draft(member) and not options.include_drafts:
                expansion.skip("draft")
                continue
            try:
                data = archive.read(member)
            except ImporterError as problem:
                expansion.problems.append(str(problem))
                continue
            if not is_draft(member) and is_response(data) and not options.include_replies:
                expansion.skip("response")
                continue
            expansion.parts.append(Part(member, data))
        return expansion
    finally:
        archive.close()


def is_response(page: bytes) -> bool:
    """A response has neither the title Medium starts every story's body with, nor a subtitle."""
    return not _TITLE_GRAF.search(page) and b'data-field="subtitle"' not in page


def is_draft(member: str) -> bool:
    return PurePosixPath(member).name.startswith("draft")


def read(data: bytes, fallback_title: str) -> list[Document]:
    tree = parse(decode_text(data))
    title = text_of(tree.css_first(".p-name")) or text_of(tree.css_first("title")) or fallback_title
    outline = Outline(title, title_is_fallback=False)
    body = tree.css_first(".e-content")
    if body is None:
        raise ImporterError("no post body (.e-content): not a page of Medium's export")
    without(body, REPEATED)
    add_html(body, outline)
    return [outline.document(description=text_of(tree.css_first(".p-summary")), own_url=_url(tree))]


def _url(tree: Any) -> str | None:
    """The canonical link; for a draft, the link to the draft its footer gives."""
    for selector in ("a.p-canonical", "footer a[href^='https://medium.com/p/']"):
        node = tree.css_first(selector)
        href = (node.attributes.get("href") or "").strip() if node is not None else ""
        if href.startswith(("https://", "http://")):
            return str(href)
    return None
