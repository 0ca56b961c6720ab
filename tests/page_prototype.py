"""A stand-in for the page module, only to try host/web/templates in a browser until the real one lands.

`page_context(catalog, params)` fills page.html's data contract from a real catalog (random sample,
"more like this", budget, notices, libraries); text search waits for the embedders (issue 9), so
`q` only says it is not available. `preview_app(host_app)` serves the page with a strict CSP, the
static files at /static and everything else (POST /, /libraries, ...) from the real host app.
The integrator's page module replaces all of this; the tests that use it stay as they are.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import uvicorn
from browser_support import STRICT_CSP
from conftest import PROJECT
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from host.catalog import Catalog
from host.harness import free_port
from host.index import ModelIndex

WEB = PROJECT / "host" / "web"
DEFAULT_COUNT, DEFAULT_COUNT_TYPE = 10, "bit"


def templates() -> Any:
    import jinja2

    return jinja2.Environment(loader=jinja2.FileSystemLoader(WEB / "templates"),
                              autoescape=jinja2.select_autoescape(["html"]), undefined=jinja2.StrictUndefined)


def _budget(params: Mapping[str, str]) -> dict[str, Any]:
    count_type = params.get("count_type", DEFAULT_COUNT_TYPE)
    try:
        count = int(params.get("count", DEFAULT_COUNT))
    except ValueError:
        count = DEFAULT_COUNT
    return {"count": max(1, count), "count_type": count_type if count_type in ("token", "bit") else "bit"}


def _bit(index: ModelIndex, row: int, similarity: float | None) -> dict[str, Any]:
    library, local = index.locate(row)
    record = library.record(local)
    url = record["info"]["url"]
    return {
        "id": library.bit_id(local),
        "title": record["info"].get("title") or url,
        "href": url if url.startswith(("https://", "http://")) else None,
        "text": record["text"],
        "similarity": similarity,
        "token_count": int(library.token_counts[local]),
        "library": library.name,
        "access_tag": None,  # never on a page rendered for a request without a token
    }


def _public_row(index: ModelIndex, bit_id: str) -> int | None:
    try:
        wanted = bytes.fromhex(bit_id)
    except ValueError:
        return None
    rows = np.flatnonzero((index.ids == wanted) & (index.tag_ids == 0))
    return int(rows[0]) if len(rows) else None


def _ranked(index: ModelIndex, vector: np.ndarray, budget: dict[str, Any], heading: str) -> dict[str, Any]:
    from host.engine import rank

    selection = rank(index, vector, granted=frozenset(), count=budget["count"], count_type=budget["count_type"])
    ask = {"query_embedding": base64.b64encode(np.asarray(vector, "<f4").tobytes()).decode(),
           "query_embedding_model": index.model, **budget}
    return {"heading": heading, "model": index.model, "kind": "ranked", "ask": ask, "more_href": None,
            "bits": [_bit(index, row, float(score)) for row, score in zip(selection.rows.tolist(),
                                                                          selection.scores.tolist(), strict=True)]}


def _sample(index: ModelIndex, budget: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    mask = index.visible_rows(frozenset())  # None: every bit is public
    visible = np.arange(index.bit_count) if mask is None else np.flatnonzero(mask)
    size = min(len(visible), budget["count"] if budget["count_type"] == "bit" else 10)
    rows = rng.choice(visible, size=size, replace=False).tolist()
    return {"heading": "A random sample", "model": index.model, "kind": "sample", "ask": None, "more_href": None,
            "bits": [_bit(index, row, None) for row in rows]}


def page_context(catalog: Catalog, params: Mapping[str, str], rng: np.random.Generator | None = None) -> dict[str, Any]:
    budget = _budget(params)
    query, like = params.get("q", "").strip(), params.get("like") or None
    notices: list[dict[str, str]] = []
    if query:
        notices.append({"level": "warning", "text": "Text search is not available on this host yet: no embedder "
                                                    "serves its models. Here is a random sample instead."})
    sections = []
    found = False
    for index in catalog.models.values():
        public = index.visible_rows(frozenset())
        if public is not None and not public.any():
            continue
        row = _public_row(index, like) if like else None
        if row is not None:
            found = True
            sections.append(_ranked(index, _vector(index, row), budget, "More like this"))
        else:
            sections.append(_sample(index, budget, rng or np.random.default_rng()))
    if like and not found:
        notices.append({"level": "warning", "text": f"No public bit has the id {like[:80]}; "
                                                    "here is a random sample instead."})
    libraries = [{"name": library.name, "href": f"/libraries/{quote(library.name)}.json",
                  "bit_count": library.visible_bit_count(frozenset()), "embedding_model": library.embedding_model,
                  "description": library.details.get("message") or None, "map_href": None}
                 for library in catalog.libraries if library.visible_bit_count(frozenset())]
    return {"query": query, "like": like, "budget": budget, "search_available": False, "notices": notices,
            "libraries": libraries, "sections": sections}


def _vector(index: ModelIndex, row: int) -> np.ndarray:
    library, local = index.locate(row)
    return np.asarray(library.embeddings[local], dtype=np.float32)


def preview_app(host_app: Starlette) -> Starlette:
    async def page(request: Request) -> HTMLResponse:
        context = page_context(host_app.state.host.catalog, request.query_params)
        return HTMLResponse(templates().get_template("page.html").render(**context),
                            headers={"Content-Security-Policy": STRICT_CSP, "Cache-Control": "no-store"})

    return Starlette(routes=[Route("/", page, methods=["GET"]),
                             Mount("/static", StaticFiles(directory=WEB / "static")),
                             Mount("", app=host_app)])


@contextmanager
def serve(app: Starlette) -> Iterator[str]:
    """`app` on a real uvicorn server in a thread, at the yielded URL, until the block ends."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name="page preview", daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the preview server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def main() -> None:  # pragma: no cover - a person's preview: python tests/page_prototype.py LIBRARIES [PORT]
    import sys

    from host.settings import Settings
    from host.web.app import create_app

    libraries = Path(sys.argv[1])
    host_app = create_app(Settings(libraries=libraries, watch_interval=0))
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 8090
    uvicorn.run(preview_app(host_app), host="127.0.0.1", port=port)


if __name__ == "__main__":
    main()
