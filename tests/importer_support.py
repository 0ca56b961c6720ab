"""Test support for the importer: a small deterministic embedder and a corpus of real files.

`HashingEmbedder` satisfies the shared `Embedder` protocol (model, dimension, count_tokens,
embed) without a model: each word is hashed to one of 64 dimensions with a sign, the counts are
summed and normalised, so texts sharing rare words are near each other and a query made of a
document's specific words finds it. Its tokens are words (whitespace-separated), so token counts
can be checked by hand. It records every text it embeds or counts, for tests that count work redone.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

_WORD = re.compile(r"\w+")


def count_words(text: str) -> int:
    """The test embedder's token count (words), as a module function: picklable, for a second process."""
    return len(text.split())


class HashingEmbedder:
    model = "test:hashing-64"
    dimension = 64

    def __init__(self) -> None:
        self.embedded: list[str] = []
        self.counted: list[str] = []

    def count_tokens(self, text: str) -> int:
        self.counted.append(text)
        return count_words(text)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.embedded.extend(texts)
        return np.stack([embed_words(text, self.dimension) for text in texts]).astype(np.float32)


def embed_words(text: str, dimension: int = 64) -> np.ndarray:
    vector = np.zeros(dimension, dtype=np.float64)
    for word in _WORD.findall(text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        vector[digest[0] % dimension] += 1.0 if digest[1] & 1 else -1.0
    norm = np.linalg.norm(vector)
    if norm == 0:
        vector[0], norm = 1.0, 1.0
    return (vector / norm).astype(np.float32)


def _pdf_string(text: str) -> str:
    return "(" + text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ")"


def minimal_pdf(pages: list[list[str]], title: str | None = None) -> bytes:
    """A small valid PDF written by hand: one line of Helvetica text per string, pages in order.

    Objects: 1 catalog, 2 page tree, 3 font, 4 info, then a page and its content stream per page;
    the cross-reference table holds each object's byte offset, as readers require.
    """
    objects: list[str] = []
    page_ids = [5 + 2 * index for index in range(len(pages))]
    objects.append("<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{' '.join(f'{page} 0 R' for page in page_ids)}] /Count {len(pages)} >>")
    objects.append("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    objects.append(f"<< /Title {_pdf_string(title)} >>" if title else "<< >>")
    for page_id, lines in zip(page_ids, pages, strict=True):
        text = " T* ".join(f"{_pdf_string(line)} Tj" for line in lines)
        stream = f"BT /F1 11 Tf 14 TL 72 740 Td {text} ET"
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                       f"/Resources << /Font << /F1 3 0 R >> >> /Contents {page_id + 1} 0 R >>")
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream")
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{offset:010d} 00000 n \n" for offset in offsets).encode()
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R /Info 4 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return out


# ---- a corpus of a publisher's writing, one fact per kind of file -------------------------------

FACTS = {
    "markdown": "Quillbert the zebra eats marmalade sandwiches every Tuesday.",
    "html": "Tomatoes ripen fastest beside obsidian garden walls.",
    "feed": "The lighthouse keeper Ingrid catalogued ninety barnacles.",
    "text": "Our kettle whistles the opening bars of a sea shanty.",
    "pdf": "Revenue from hovercraft rentals tripled in the third quarter.",
}
HIDDEN_FACTS = ["Nobody may read the hidden draft about submarines.", "The secret plan involves seven kites."]
FILLER = ("Gardens reward patience and steady attention through every season. A careful writer keeps notes "
          "about weather, soil and the small surprises of each morning. Readers enjoy details that feel "
          "honest and specific rather than grand.")


def filler(paragraphs: int) -> str:
    return "\n\n".join(FILLER for _ in range(paragraphs))


MARKDOWN_POST = f"""---
title: Hello Zebras
description: "A post about zebras: what they eat."
date: 2024-05-01
---

# Hello Zebras

{filler(1)}

## Feeding schedule

{FACTS["markdown"]}

### Weekend treats

Carrots, mostly. On Sundays a single *crisp* apple.

## Feeding schedule

A second section with the same heading, as happens in real posts.

{filler(2)}
"""

MARKDOWN_WITH_URL = """+++
title = "Moved post"
url = "/custom/moved/"
+++

This post says where it lives on the site.
"""

HTML_PAGE = f"""<!doctype html>
<html><head><title>Gardening | Example Site</title>
<meta name="description" content="Notes from the vegetable patch."></head>
<body>
<header><nav><a href="/">Home</a> <a href="/about">About us navigation</a></nav></header>
<main>
<h1>Gardening</h1>
<p>{FILLER}</p>
<h2 id="soil">Soil and walls</h2>
<p>{FACTS["html"]}</p>
<ul><li>compost</li><li>mulch</li></ul>
<script>var tracking = "script text must never be imported";</script>
<aside>Sidebar advertisement text</aside>
</main>
<footer>Footer copyright text</footer>
</body></html>
"""

FEED = f"""<?xml version="1.0" encoding="utf-8"?>
<rss version="2.0" xmlns:content="http://purl.org/rss/1.0/modules/content/">
<channel><title>Harbour Log</title><link>https://harbour.example/</link><description>A log</description>
<item><title>Barnacle census</title><link>https://harbour.example/posts/barnacles</link>
<description>A short summary of the census.</description>
<content:encoded><![CDATA[<p>{FACTS["feed"]}</p><p>{FILLER}</p>]]></content:encoded></item>
<item><title>Fog &amp; foghorns</title><link>https://harbour.example/posts/fog</link>
<description>&lt;p&gt;The foghorn sounded &lt;b&gt;twice&lt;/b&gt; at dawn.&lt;/p&gt;</description></item>
</channel></rss>
"""

TEXT_NOTE = f"""Kitchen notes

{FACTS["text"]}
It has done so since we bought it.

The kettle lives on the back burner, beside a jar of wooden spoons, a tin of loose black tea and
the radio that only ever plays the shipping forecast, which nobody in this house has ever once missed.
"""

PDF_PAGES = [
    ["Quarterly Report", "This report covers the quarter's business results."],
    [FACTS["pdf"], "Costs stayed flat."],
]


def write_corpus(root: Path) -> Path:
    """A site folder with one file of each kind, plus files the importer must never read."""
    (root / "posts").mkdir(parents=True, exist_ok=True)
    (root / "posts" / "2024-hello.md").write_text(MARKDOWN_POST)
    (root / "posts" / "moved.md").write_text(MARKDOWN_WITH_URL)
    (root / "garden.html").write_text(HTML_PAGE)
    (root / "feed.xml").write_text(FEED)
    (root / "kitchen notes.txt").write_text(TEXT_NOTE)
    (root / "report.pdf").write_bytes(minimal_pdf(PDF_PAGES, title="Quarterly Report"))
    (root / ".drafts").mkdir(exist_ok=True)
    (root / ".drafts" / "submarines.md").write_text(HIDDEN_FACTS[0])
    (root / ".hidden.md").write_text(HIDDEN_FACTS[0])
    (root / "plans.SECRET.md").write_text(HIDDEN_FACTS[1])
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    return root
