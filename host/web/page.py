"""`GET /`: a plain HTML page to browse public bits: a random sample, and "more like this"."""

from __future__ import annotations

from html import escape

import numpy as np

from access import ANONYMOUS
from host.catalog import Catalog, ModelIndex
from host.engine import random_query, rank

SAMPLE_SIZE = 10
SNIPPET_CHARACTERS = 500

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 52rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
article { border-top: 1px solid #ddd; padding: .75rem 0; }
.meta { color: #666; font-size: .85rem; }
code { background: #f4f4f4; padding: 0 .25rem; }
"""


def render_home(catalog: Catalog, like: str | None = None) -> str:
    """The page: loaded libraries, then a random sample or the bits most like `like` (a bit id)."""
    sections = [_library_list(catalog)]
    for index in catalog.models.values():
        public = index.visible_rows(frozenset())
        if public is not None and not public.any():
            continue  # a model only private libraries serve is not named here
        if like:
            vector = _public_embedding(index, like)
            if vector is not None:
                sections.append(_bits_section(index, vector, "More like this"))
                continue
        sections.append(_bits_section(index, random_query(index.dimension), "A random sample"))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>Polymath library host</title>
<link rel="polymath" href="/">
<style>{STYLE}</style></head>
<body>
<h1>Polymath library host</h1>
<p>This host answers Polymath queries at <code>POST /</code>. Point a Polymath client at this page's
address, or see <a href="/openapi.json">the API</a> and <a href="/libraries">the libraries</a>.
<a href="/">Another random sample</a>.</p>
{''.join(sections)}
</body></html>"""


def _library_list(catalog: Catalog) -> str:
    rows = [
        f'<li><a href="/libraries/{escape(library.name)}.json">{escape(library.name)}</a>: '
        f"{library.visible_bit_count(frozenset())} bits, {escape(library.embedding_model)}</li>"
        for library in catalog.libraries
        if library.visible_bit_count(frozenset())
    ]
    return f"<h2>Libraries</h2><ul>{''.join(rows) or '<li>No public libraries are loaded.</li>'}</ul>"


def _public_embedding(index: ModelIndex, bit_id: str) -> np.ndarray | None:
    try:
        wanted = bytes.fromhex(bit_id)
    except ValueError:
        return None
    for library in index.libraries:
        rows = np.flatnonzero((library.ids == wanted) & (library.tag_ids == 0))
        if len(rows):
            return np.asarray(library.embeddings[rows[0]])
    return None


def _bits_section(index: ModelIndex, vector: np.ndarray, heading: str) -> str:
    selection = rank(index, vector, granted=ANONYMOUS.access_tags, count=SAMPLE_SIZE, count_type="bit")
    articles = []
    for row, score in zip(selection.rows.tolist(), selection.scores.tolist()):
        library, local = index.locate(row)
        record = library.record(local)
        info = record["info"]
        text = record["text"]
        snippet = text if len(text) <= SNIPPET_CHARACTERS else text[:SNIPPET_CHARACTERS] + "…"
        title = info.get("title") or info["url"]
        bit_id = library.bit_id(local)
        articles.append(
            f'<article><a href="{escape(info["url"])}">{escape(title)}</a>'
            f"<p>{escape(snippet)}</p>"
            f'<div class="meta">similarity {score:.3f} · {int(library.token_counts[local])} tokens · '
            f'{escape(library.name)} · <a href="/?like={bit_id}">more like this</a></div></article>'
        )
    return f"<h2>{heading} <small>({escape(index.model)})</small></h2>{''.join(articles)}"
