"""Ghost's export (Settings -> Advanced -> Import/Export -> Export content): one JSON file,
`{"db": [{"meta": {"exported_on", "version"}, "data": {"posts": [...], "posts_meta": [...], ...}}]}`
(the `db` wrapper is optional), told from a library file by its `meta.exported_on`.

Each row of `data.posts` is a post or a page (`type`, or `page: 1` before Ghost 2): imported with
its title, its `custom_excerpt` (else `posts_meta.meta_description`) as the description, and its
text from `html` when the export carries it, else `lexical` (Ghost 5), else `mobiledoc` (Ghost
1-4), else `plaintext` (see `ghost_content`). Its URL is the site's address, `--base-url` (the
export does not hold it), + `/<slug>/`, Ghost's default permalink for posts and pages alike.

`status` `published` is imported; `draft` and `scheduled` with `--include-drafts`; a post whose
`visibility` is not `public` (members, paid, tiers) or that was only emailed (`sent`) only into an
`--access-tag` library. The export's members, users and settings are never read.
"""

from __future__ import annotations

import json
import re
from html import escape
from pathlib import Path
from typing import Any

from host.importer.document import Document
from host.importer.errors import ImporterError, decode_text
from host.importer.exports import Expansion, ExportOptions, Part, pack, text_of, unpack
from host.importer.exports.ghost_content import lexical_html, mobiledoc_html
from host.importer.probe import Probe
from host.importer.readers.html import outline_of

_EXPORTED_ON = re.compile(rb'"meta"\s*:\s*\{[^{}]*"exported_on"\s*:')
DRAFTS = ("draft", "scheduled")
FORMATS = ("html", "lexical", "mobiledoc", "plaintext")  # the first a post has is read


def sniff(probe: Probe) -> bool:
    return _EXPORTED_ON.search(probe.head) is not None


def expand(path: Path, options: ExportOptions) -> Expansion:
    data = _data(path.read_bytes())
    posts = data.get("posts")
    if not isinstance(posts, list):
        raise ImporterError("no data.posts list: not a Ghost export")
    descriptions = {row.get("post_id"): row.get("meta_description") for row in data.get("posts_meta") or []
                    if isinstance(row, dict)}
    expansion = Expansion()
    for number, post in enumerate(posts, start=1):
        if not isinstance(post, dict):
            expansion.problems.append(f"data.posts[{number - 1}]: not a post")
            continue
        kind = text_of(post.get("type")) or ("page" if post.get("page") in (1, True) else "post")
        status, visibility = text_of(post.get("status")), text_of(post.get("visibility")) or "public"
        if status in DRAFTS and not options.include_drafts:
            expansion.skip("draft")
            continue
        if status not in (*DRAFTS, "published", "sent"):
            continue  # an unknown state is not something a writer meant to publish
        if (visibility != "public" or status == "sent") and not options.include_private:
            expansion.skip("private")
            continue
        slug = text_of(post.get("slug")) or text_of(post.get("id"))
        form = next((name for name in FORMATS if isinstance(post.get(name), str) and post[name].strip()), None)
        meta = {"title": text_of(post.get("title")), "slug": slug, "format": form,
                "excerpt": text_of(post.get("custom_excerpt")) or text_of(descriptions.get(post.get("id")))}
        body = str(post[form]).encode("utf-8") if form else b""
        expansion.parts.append(Part(f"{kind} {slug}", pack(meta, body)))
    return expansion


def _data(raw: bytes) -> dict[str, Any]:
    try:
        export = json.loads(decode_text(raw))
    except json.JSONDecodeError as problem:
        raise ImporterError(f"not valid JSON ({problem})") from None
    if isinstance(export, dict) and isinstance(export.get("db"), list) and export["db"]:
        export = export["db"][0]
    data = export.get("data") if isinstance(export, dict) else None
    if not isinstance(data, dict):
        raise ImporterError("no data object: not a Ghost export")
    return data


def read(data: bytes, fallback_title: str) -> list[Document]:
    meta, body = unpack(data)
    text = decode_text(body)
    form = meta["format"]
    if form in ("lexical", "mobiledoc"):
        try:
            stored = json.loads(text)
        except json.JSONDecodeError as problem:
            raise ImporterError(f"{form}: not valid JSON ({problem})") from None
        text = lexical_html(stored) if form == "lexical" else mobiledoc_html(stored)
    elif form == "plaintext":
        text = "".join(f"<p>{paragraph}</p>" for paragraph in _escaped_paragraphs(text))
    outline = outline_of(text, meta["title"] or fallback_title)
    return [outline.document(description=meta["excerpt"], own_url=f"{meta['slug']}/")]


def _escaped_paragraphs(text: str) -> list[str]:
    return [escape(paragraph) for paragraph in re.split(r"\n\s*\n", text) if paragraph.strip()]
