"""`GET /`: a plain HTML page to browse public bits: a random sample, and "more like this"."""

from __future__ import annotations

from html import escape
from typing import Any

import numpy as np
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from access import ANONYMOUS
from host.catalog import Catalog
from host.engine import random_query
from host.index import ModelIndex
from host.query import Query, SearchPolicy, run_query
from host.results import selection_bits
from host.web.library_endpoints import library_url
from host.web.state import host_state

SAMPLE_SIZE = 10
SNIPPET_CHARACTERS = 500

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 52rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
article { border-top: 1px solid #ddd; padding: .75rem 0; }
.meta { color: #666; font-size: .85rem; }
code { background: #f4f4f4; padding: 0 .25rem; }
"""


async def home_page(request: Request) -> Response:
    state = host_state(request)
    html = await run_in_threadpool(render_home, state.catalog, state.search, request.query_params.get("like"))
    return HTMLResponse(html)


def render_home(catalog: Catalog, policy: SearchPolicy, like: str | None = None) -> str:
    """The page: loaded libraries, then a random sample or the bits most like `like` (a bit id)."""
    sections = [_library_list(catalog)]
    for index in catalog.models.values():
        if not index.visible_count(ANONYMOUS.access_tags):
            continue  # a model only private libraries serve is not named here
        if like:
            vector = _public_embedding(index, like)
            if vector is not None:
                sections.append(_bits_section(index, policy, vector, "More like this"))
                continue
        sections.append(_bits_section(index, policy, random_query(index.dimension), "A random sample"))
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
        f'<li><a href="{escape(library_url(library.name))}">{escape(library.name)}</a>: '
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
    visible = index.visible_rows(ANONYMOUS.access_tags)
    rows = np.flatnonzero((index.ids == wanted) & (True if visible is None else visible))
    return index.gather(rows[:1])[0] if len(rows) else None


def _bits_section(index: ModelIndex, policy: SearchPolicy, vector: np.ndarray, heading: str) -> str:
    selection = run_query(index, Query(vector, SAMPLE_SIZE, "bit"), ANONYMOUS, policy)
    libraries = [index.locate(row)[0].name for row in selection.rows.tolist()]
    articles = [_article(bit, library) for bit, library in zip(selection_bits(index, selection), libraries, strict=True)]
    return f"<h2>{heading} <small>({escape(index.model)})</small></h2>{''.join(articles)}"


def _article(bit: dict[str, Any], library: str) -> str:
    info, text = bit["info"], bit["text"]
    snippet = text if len(text) <= SNIPPET_CHARACTERS else text[:SNIPPET_CHARACTERS] + "…"
    title = info.get("title") or info["url"]
    return (
        f'<article><a href="{escape(info["url"])}">{escape(title)}</a>'
        f"<p>{escape(snippet)}</p>"
        f'<div class="meta">similarity {bit["similarity"]:.3f} · {bit["token_count"]} tokens · '
        f'{escape(library)} · <a href="/?like={bit["id"]}">more like this</a></div></article>'
    )
