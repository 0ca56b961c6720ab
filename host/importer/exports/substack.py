"""Substack's export (Settings -> Exports): a zip of `posts.csv` and `posts/<post_id>.html`.

`posts.csv` has a row per post: `post_id` (`<number>.<slug>`), `post_date`, `is_published`,
`type` (newsletter, podcast, thread, page), `audience` (`everyone`, `only_paid`, `founding`,
`only_free`), `title`, `subtitle`; `posts/<post_id>.html` is the post's body, a fragment of HTML.
The zip also holds the subscriber list (`email_list*.csv`): it is never opened.

Each published post is imported with its title, its subtitle as the description, and its public
URL, `--base-url` + `/p/<slug>` (the export does not say where the publication lives: pass its
address, `https://name.substack.com/` or the custom domain). Drafts only with `--include-drafts`;
a post for paying (or signed-in) subscribers only when the library has an `--access-tag`.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from host.importer.archive import open_archive
from host.importer.document import Document
from host.importer.errors import ImporterError, decode_text
from host.importer.exports import Expansion, ExportOptions, Part, pack, text_of, unpack
from host.importer.probe import Probe
from host.importer.readers.html import outline_of

POSTS_CSV = "posts.csv"
COLUMNS = ("post_id", "is_published", "title")
# Substack's furniture inside a post's body: subscribe boxes, share and subscribe buttons, cards
# of other posts, the paywall's marker.
FURNITURE = ('[class*="subscription-widget"]', ".button-wrapper", ".embedded-post-wrap", ".paywall-jump",
             ".image-link-expand", "[data-component-name=SubscribeWidgetToDOM]")


def sniff(probe: Probe) -> bool:
    archive = probe.archive(POSTS_CSV)
    if archive is None or not archive.has(POSTS_CSV) or not archive.has("posts/"):
        return False
    return probe.member_head(POSTS_CSV, POSTS_CSV).removeprefix(b"\xef\xbb\xbf").startswith(b"post_id")


def expand(path: Path, options: ExportOptions) -> Expansion:
    archive = open_archive(path, POSTS_CSV)
    try:
        rows = _rows(decode_csv(archive.read(POSTS_CSV)))
        expansion = Expansion()
        for line, row in rows:
            post_id = text_of(row.get("post_id"))
            if not post_id:
                expansion.problems.append(f"{POSTS_CSV} line {line}: no post_id")
                continue
            if text_of(row.get("is_published")).lower() != "true" and not options.include_drafts:
                expansion.skip("draft")
                continue
            if text_of(row.get("audience")).lower() not in ("", "everyone") and not options.include_private:
                expansion.skip("private")
                continue
            member = f"posts/{post_id}.html"
            try:
                body = archive.read(member)
            except ImporterError as problem:
                expansion.problems.append(f"{problem} ({POSTS_CSV} line {line})")
                continue
            meta = {"title": text_of(row.get("title")), "subtitle": text_of(row.get("subtitle")),
                    "slug": post_id.split(".", 1)[-1]}
            expansion.parts.append(Part(member, pack(meta, body)))
        return expansion
    finally:
        archive.close()


def decode_csv(data: bytes) -> str:
    try:
        return decode_text(data)
    except ImporterError as problem:
        raise ImporterError(f"{POSTS_CSV}: {problem}") from None


def _rows(text: str) -> list[tuple[int, dict[str, str]]]:
    """The CSV's rows with their line numbers (a quoted field may run over lines)."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    missing = [column for column in COLUMNS if column not in (reader.fieldnames or [])]
    if missing:
        raise ImporterError(f"{POSTS_CSV}: no {', '.join(missing)} column (not a Substack export's posts.csv?)")
    rows = []
    try:
        for row in reader:
            rows.append((reader.line_num, row))
    except csv.Error as problem:
        raise ImporterError(f"{POSTS_CSV} line {reader.line_num}: {problem}") from None
    return rows


def read(data: bytes, fallback_title: str) -> list[Document]:
    meta, body = unpack(data)
    title = meta["title"] or fallback_title
    outline = outline_of(decode_text(body), title, drop=FURNITURE)
    return [outline.document(description=meta["subtitle"], own_url=f"p/{meta['slug']}")]
